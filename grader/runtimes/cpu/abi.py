"""The Python side of the emulator's C interface: fault kinds, poison values, the fault record and
the loading of a kernel library with the signatures of the runtime's exported functions.

The kinds, the poison and the record's fields are read from csrc/cudaemu_abi.h, the header
emu_runtime.cpp and the device headers are compiled with, so the three cannot drift apart. A
header this module cannot read is an error at import, not a wrong message at the first fault.
"""
from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

import numpy as np

from ..base import CompileError
from . import build as _build

ABI_HEADER = Path(__file__).with_name("csrc") / "cudaemu_abi.h"


class AbiMismatch(RuntimeError):
    """cudaemu_abi.h lacks something, or has it in a form this module cannot read."""


def _macro_body(text: str, name: str) -> str:
    """The text of a multi-line `#define name(...)`, continuation lines joined."""
    m = re.search(r"^#define\s+" + name + r"\([^)]*\)((?:.*\\\n)*.*)$", text, re.M)
    if not m:
        raise AbiMismatch(f"{ABI_HEADER}: no `#define {name}(...)`; the emulator's Python side "
                          "cannot read its fault records without it")
    return re.sub(r"/\*.*?\*/", " ", m.group(1).replace("\\\n", " "), flags=re.S)


def _parse_kinds(text: str) -> dict[str, int]:
    body = _macro_body(text, "CUDAEMU_FAULT_KINDS")
    return {name: int(value, 0) for name, value in
            re.findall(r"\bX\(\s*([A-Z_][A-Z0-9_]*)\s*,\s*(0x[0-9A-Fa-f]+|\d+)\s*\)", body)}


def _parse_define(text: str, name: str) -> int:
    m = re.search(r"^#define\s+" + name + r"\s+(0x[0-9A-Fa-f]+|\d+)[uUlL]*\s*$", text, re.M)
    if not m:
        raise AbiMismatch(f"{ABI_HEADER}: no `#define {name} <number>`")
    return int(m.group(1), 0)


_CTYPES = {"int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64,
           "uint64_t": ctypes.c_uint64, "char": ctypes.c_char}


def _parse_record(text: str) -> list[tuple[str, type]]:
    body = _macro_body(text, "CUDAEMU_FAULT_RECORD")
    fields = []
    for kind, ctype, name, count in re.findall(
            r"\b(ONE|MANY)\(\s*(\w+)\s*,\s*(\w+)\s*(?:,\s*(\d+)\s*)?\)", body):
        if ctype not in _CTYPES:
            raise AbiMismatch(f"{ABI_HEADER}: fault record field {name} has type {ctype}, which "
                              f"cpu/abi.py does not map (known: {', '.join(_CTYPES)})")
        if (kind == "MANY") != bool(count):
            raise AbiMismatch(f"{ABI_HEADER}: fault record field {name}: ONE(type, name) or "
                              "MANY(type, name, count)")
        fields.append((name, _CTYPES[ctype] * int(count) if count else _CTYPES[ctype]))
    return fields


_TEXT = ABI_HEADER.read_text()

FAULT_KINDS: dict[str, int] = _parse_kinds(_TEXT)
# The kinds this package names. The header may add more (reported with the runtime's own text);
# it may not lose one of these.
_NEEDED = ("SEGV", "BUS", "FPE", "ILL", "BARRIER", "WARP", "DEADLOCK", "TRAP", "LIVELOCK",
           "INTERRUPT", "STACK", "SETUP", "PTX")
_missing = [k for k in _NEEDED if k not in FAULT_KINDS]
if _missing:
    raise AbiMismatch(f"{ABI_HEADER}: CUDAEMU_FAULT_KINDS lacks {', '.join(_missing)}")
if len(set(FAULT_KINDS.values())) != len(FAULT_KINDS) or 0 in FAULT_KINDS.values():
    raise AbiMismatch(f"{ABI_HEADER}: fault kinds must be distinct and nonzero: {FAULT_KINDS}")

F_SEGV = FAULT_KINDS["SEGV"]
F_BUS = FAULT_KINDS["BUS"]
F_FPE = FAULT_KINDS["FPE"]
F_ILL = FAULT_KINDS["ILL"]
F_BARRIER = FAULT_KINDS["BARRIER"]
F_WARP = FAULT_KINDS["WARP"]
F_DEADLOCK = FAULT_KINDS["DEADLOCK"]
F_TRAP = FAULT_KINDS["TRAP"]
F_LIVELOCK = FAULT_KINDS["LIVELOCK"]
F_INTERRUPT = FAULT_KINDS["INTERRUPT"]
F_STACK = FAULT_KINDS["STACK"]
F_SETUP = FAULT_KINDS["SETUP"]
F_PTX = FAULT_KINDS["PTX"]

POISON32 = _parse_define(_TEXT, "CUDAEMU_POISON32")
# The shared-memory poison as it arrives in a float64 output: the float NaN widened to double
# (payload shifted up, quiet bit set on the way, so the quiet bit and the sign are masked off when
# compared). Not the header's CUDAEMU_POISON64, which is the shuffle poison's raw 64 bits.
_widened = np.float64(np.array([POISON32], np.uint32).view(np.float32)[0])
POISON32_AS_DOUBLE = int(np.array([_widened]).view(np.uint64)[0]) & 0x7FF7FFFFFFFFFFFF
del _widened


class FaultRecord(ctypes.Structure):
    """What cudaemu_launch fills in when a launch fails (fields: CUDAEMU_FAULT_RECORD)."""
    _fields_ = _parse_record(_TEXT)


_missing = [f for f in ("kind", "is_write", "si_code", "line", "addr", "pc", "frames", "sp_word",
                        "block", "thread", "file", "text") if not hasattr(FaultRecord, f)]
if _missing:
    raise AbiMismatch(f"{ABI_HEADER}: CUDAEMU_FAULT_RECORD lacks {', '.join(_missing)}")
del _missing


class DlInfo(ctypes.Structure):
    """glibc's Dl_info, filled in by dladdr()."""
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


libc = ctypes.CDLL(None)
libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]

_loaded: dict[str, ctypes.CDLL] = {}


def set_arrays(lib, addrs: list[int], nbytes: list[int], args: list[int]) -> None:
    """Tell the emulator which buffers a launch's arrays live in: each buffer's address, its bytes
    and its argument position (1-based), for the tile checks, the traffic counts and the traces."""
    n = len(addrs)
    lib.cudaemu_set_arrays((ctypes.c_uint64 * max(1, n))(*addrs), (ctypes.c_uint64 * max(1, n))(*nbytes),
                           (ctypes.c_int32 * max(1, n))(*args), n)


def load(path: Path) -> ctypes.CDLL:
    """A built kernel library, opened once per process, its runtime functions typed."""
    key = str(path)
    if key not in _loaded:
        lib = ctypes.CDLL(key, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        lib.cudaemu_launch.restype = ctypes.c_int
        lib.cudaemu_launch.argtypes = [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32),
            ctypes.POINTER(ctypes.c_uint32), ctypes.c_void_p, ctypes.c_uint64,
            ctypes.POINTER(ctypes.c_int64), ctypes.c_int64, ctypes.c_int, ctypes.c_uint64,
            ctypes.POINTER(FaultRecord)]
        for fn in ("cudaemu_static_shared_bytes", "cudaemu_float_atomics",
                   "cudaemu_fault_record_size", "cudaemu_take_output", "cudaemu_hopper_blocks"):
            getattr(lib, fn).restype = ctypes.c_uint64
        lib.cudaemu_take_output.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
        lib.cudaemu_set_quiet.argtypes = [ctypes.c_int]
        lib.cudaemu_wgmma_log.argtypes = [ctypes.c_int]
        lib.cudaemu_wgmma_diverged.restype = ctypes.c_char_p
        lib.cudaemu_set_trap_invalid.argtypes = [ctypes.c_int]
        lib.cudaemu_set_arrays.restype = ctypes.c_int
        lib.cudaemu_set_arrays.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                           ctypes.POINTER(ctypes.c_uint64),
                                           ctypes.POINTER(ctypes.c_int32), ctypes.c_int]
        # Both sides build the record from the same header, so a mismatch means a library built
        # from an older one.
        if lib.cudaemu_fault_record_size() != ctypes.sizeof(FaultRecord):
            raise CompileError("the emulator runtime and its Python side disagree on the fault "
                               "record layout (a stale build cache? delete "
                               f"{_build.cache_dir()})")
        _loaded[key] = lib
    return _loaded[key]
