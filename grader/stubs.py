"""Derive a stub from its solution: the solution is the single source of both.

In a solution, the student's part sits between markers, in CUDA or in Python:

    // BEGIN SOLUTION TODO(2): load a K/V tile into shared memory
    ...the answer...
    // STUB: float acc = 0.0f;      <- optional: a line the stub keeps (without "STUB: ")
    // END SOLUTION

The stub keeps `// TODO(2): load a K/V tile into shared memory` at the same indentation, then the
STUB lines, and drops the answer. `#` comments work the same way in Python code.
"""
from __future__ import annotations

import re

BEGIN = re.compile(r"^(?P<indent>\s*)(?P<mark>//|#)\s*BEGIN SOLUTION\s+(?P<todo>TODO\(\d+\):.*)$")
END = re.compile(r"^\s*(//|#)\s*END SOLUTION\s*$")
STUB = re.compile(r"^\s*(//|#)\s?STUB:\s?(?P<code>.*)$")
TODO_NUM = re.compile(r"TODO\((\d+)\)")


class StubError(ValueError):
    pass


def derive_stub(solution: str, name: str = "solution") -> str:
    out, block = [], None
    for lineno, line in enumerate(solution.splitlines(keepends=True), 1):
        text = line.rstrip("\n")
        m = BEGIN.match(text)
        if m:
            if block is not None:
                raise StubError(f"{name}:{lineno}: BEGIN SOLUTION inside another block "
                                f"(opened at line {block})")
            block = lineno
            out.append(f"{m['indent']}{m['mark']} {m['todo'].rstrip()}\n")
            continue
        if "BEGIN SOLUTION" in text:
            raise StubError(f"{name}:{lineno}: a BEGIN SOLUTION marker needs 'TODO(n): what to write'")
        if END.match(text):
            if block is None:
                raise StubError(f"{name}:{lineno}: END SOLUTION without BEGIN SOLUTION")
            block = None
            continue
        if block is not None:
            s = STUB.match(text)
            if s:
                indent = text[:len(text) - len(text.lstrip())]
                out.append(f"{indent}{s['code']}\n")
            continue
        out.append(line)
    if block is not None:
        raise StubError(f"{name}:{block}: BEGIN SOLUTION is never closed by END SOLUTION")
    return "".join(out)


def todo_numbers(text: str) -> list[int]:
    return sorted({int(n) for n in TODO_NUM.findall(text)})


def _texts(source: str, marker: re.Pattern) -> dict[int, str]:
    """{n: what TODO(n) asks for}, from the lines `marker` matches (the first one wins when a TODO
    spans several blocks)."""
    out: dict[int, str] = {}
    for line in source.splitlines():
        m = marker.match(line)
        if m:
            n, _, text = m["todo"].partition(":")
            out.setdefault(int(TODO_NUM.match(n)[1]), text.strip())
    return out


def todo_texts(solution: str) -> dict[int, str]:
    """From a solution's BEGIN SOLUTION markers."""
    return _texts(solution, BEGIN)


STUB_TODO = re.compile(r"^\s*(//|#)\s*(?P<todo>TODO\(\d+\):.*)$")


def stub_todo_texts(stub: str) -> dict[int, str]:
    """The same from a stub's `// TODO(n): ...` lines (which derive_stub writes from the markers)."""
    return _texts(stub, STUB_TODO)


def untouched_todos(stub: str, text: str) -> list[int]:
    """The TODOs that `text` (a student's file) still holds as the stub has them: a `// TODO(n):` line
    followed by the very line the stub puts after it, nothing written in between (whitespace aside).
    In the stub's order, each number once."""
    s = [line.strip() for line in stub.splitlines()]
    pairs = set(zip(*(lambda t: (t, t[1:]))([line.strip() for line in text.splitlines()])))
    out: list[int] = []
    for line, after in zip(s, s[1:]):
        if STUB_TODO.match(line) and (line, after) in pairs:
            n = int(TODO_NUM.search(line)[1])
            if n not in out:
                out.append(n)
    return out
