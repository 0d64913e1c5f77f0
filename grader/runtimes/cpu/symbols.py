"""Symbolisation: from the addresses in a fault record to the student's file and line.

dladdr() says which loaded library an address is in, addr2line reads that library's line table
(with its inline chains, since kernels are built with -O2), and the first frame in the student's
file wins. The kernel libraries are built with frame pointers and -g1 so that this works.
"""
from __future__ import annotations

import ctypes
import os
import re
import subprocess
from types import SimpleNamespace

from .abi import DlInfo, FaultRecord, libc


def addr2line(lib_path: str, offsets: list[int]) -> list[list[tuple[str, int]]]:
    """For each offset, the inline chain of (file, line), innermost first ([] if unknown)."""
    tool = os.environ.get("ADDR2LINE") or "addr2line"
    try:
        out = subprocess.run([tool, "-e", lib_path, "-i", "-a", *[hex(o) for o in offsets]],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return [[] for _ in offsets]
    chains: list[list[tuple[str, int]]] = []
    for line in out.splitlines():
        if re.match(r"^0x[0-9a-f]+$", line.strip()):
            chains.append([])
            continue
        m = re.match(r"^(.*):(\d+)", line.strip())
        if m and chains is not None and chains:
            chains[-1].append((m.group(1), int(m.group(2))))
    while len(chains) < len(offsets):
        chains.append([])
    return chains


def _resolve(addrs: list[int], first_is_pc: bool):
    """(places, found): the (library, offset) of each code address, and each one's source chain.
    A return address points after its call: every address but a faulting pc steps back into it."""
    places = []
    for i, a in enumerate(addrs):
        info = DlInfo()
        if not libc.dladdr(ctypes.c_void_p(a), ctypes.byref(info)) or not info.dli_fname:
            continue
        places.append((info.dli_fname.decode(), a - (info.dli_fbase or 0) - (0 if first_is_pc and i == 0 else 1)))
    by_lib: dict[str, list[int]] = {}
    for lib, off in places:
        by_lib.setdefault(lib, []).append(off)
    found = {}
    for lib, offs in by_lib.items():
        for off, chain in zip(offs, addr2line(lib, offs)):
            found[(lib, off)] = chain
    return places, found


def source_line(rec: FaultRecord, student_file: str) -> str | None:
    """'file:line' of the faulting instruction in the student's file, if it can be found."""
    places, found = _resolve([rec.pc] + [a for a in [rec.sp_word, *rec.frames] if a], first_is_pc=True)
    for lib, off in places:
        for f, line in found.get((lib, off), []):
            if os.path.basename(f) == os.path.basename(student_file) and line > 0:
                return f"{student_file}:{line}"
    return None


def student_line(file: str, line: int, student_file: str) -> int | None:
    """The line of the student's file that `file:line` is: itself, or, for code the runtime generated
    in place of a line L (`file.py@L`, base.generated_lines), L; None for another file."""
    base, name = os.path.basename(student_file), os.path.basename(file)
    if name == base:
        return line if line > 0 else None
    if name.startswith(base + "@") and name[len(base) + 1:].isdigit():
        return int(name[len(base) + 1:])
    return None


def callers(rec: FaultRecord, student_file: str, line: int) -> list[str]:
    """For a fault the runtime reported at ``line`` of the student's file (a warp collective, an
    inline-PTX instruction, an assert): the student's lines that called the function holding it,
    innermost first, from the return addresses the runtime recorded. [] if none is known."""
    addrs = [a for a in rec.frames if a]
    if not addrs:
        return []
    places, found = _resolve(addrs, first_is_pc=False)
    lines: list[int] = []
    for lib, off in places:
        for f, n in found.get((lib, off), []):
            n = student_line(f, n, student_file)
            if n is not None and (not lines or lines[-1] != n):
                lines.append(n)
    if line not in lines:
        return []
    out = []
    for n in lines[lines.index(line) + 1:]:
        if n != line and f"{student_file}:{n}" not in out:
            out.append(f"{student_file}:{n}")
    return out[:3]


WAIT_FRAMES = re.compile(r"([^\s:]+):(\d+) @@WAIT_FRAMES((?: [0-9a-f]+)*)@@")


def name_wait_callers(text: str, student_file: str) -> str:
    """The runtime marks a place it cites with the return addresses captured there
    (`FILE:LINE @@WAIT_FRAMES a b ...@@`, emu_runtime.cpp's frames_mark: a thread's last mbarrier wait or
    cp.async.wait_group): the mark becomes the student's lines that called the function holding that
    line ("(called from F:L)"), or nothing."""
    def one(m):
        frames = [int(a, 16) for a in m.group(3).split()]
        line = student_line(m.group(1), int(m.group(2)), student_file)
        up = callers(SimpleNamespace(frames=frames), student_file, line) if frames and line else []
        return f"{m.group(1)}:{m.group(2)}" + (f" (called from {', then '.join(up)})" if up else "")
    return WAIT_FRAMES.sub(one, text)
