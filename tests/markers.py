"""Test kernels mark lines with `// @name`; messages must point at them as 'file.py:LINE'."""
from pathlib import Path


def line_of(test_file: str, marker: str) -> int:
    for i, line in enumerate(Path(test_file).read_text().splitlines(), 1):
        if f"// @{marker}" in line:
            return i
    raise AssertionError(marker)


def at(test_file: str, marker: str) -> str:
    return f"{Path(test_file).name}:{line_of(test_file, marker)}"


def verdict(items):
    """A diagnosis generator run to its end: (the ids of the causes it reproduced tellingly, the ones a
    case can propose (a plain match only confirms), all its text in one string)."""
    from grader.engine.verdict import search
    causes, seen, complete = search(items, budget_s=float("inf"))
    assert complete
    return [c.id for c in causes if not c.plain], "\n".join([c.text for c in causes if not c.plain] + seen)
