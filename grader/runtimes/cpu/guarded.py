"""Memory with inaccessible pages around it, so that an out-of-bounds access faults at once.

Each array argument of a launch is copied into such a buffer. The buffer ends exactly where a
PROT_NONE guard begins (up to 15 bytes of padding keep its start 16-byte aligned, as float4 loads
need), so reading even one element past the end raises SIGSEGV, which the emulator turns into a
message naming the argument and the index. The bytes left accessible around the buffer in its
first and last page are filled with a canary and checked after the launch.
"""
from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np

PAGE = mmap.PAGESIZE
_PROT_NONE, _PROT_RW = 0, mmap.PROT_READ | mmap.PROT_WRITE
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)
_MAP_FLAGS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE
_CANARY = 0xA5

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def _round_up(n: int, k: int) -> int:
    return (n + k - 1) // k * k


class GuardedBuffer:
    """``nbytes`` of read-write memory at ``addr``, with guard regions of ``guard`` bytes around."""

    def __init__(self, nbytes: int):
        self.capacity_pages = max(1, _round_up(nbytes, PAGE) // PAGE)
        data = self.capacity_pages * PAGE
        # The guard must cover a whole row or tile of overshoot; address space costs nothing.
        self.guard = min(max(1 << 20, _round_up(data, PAGE)), 1 << 28)
        self.size = self.guard + data + self.guard
        base = _libc.mmap(None, self.size, _PROT_NONE, _MAP_FLAGS, -1, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            raise MemoryError(f"mmap of {self.size} bytes failed (errno {ctypes.get_errno()})")
        self.base = base
        self.data_end = base + self.guard + data      # first byte of the back guard
        self.rw_lo = self.data_end                    # first accessible byte (set by prepare)
        self.addr = self.data_end
        self.nbytes = 0

    def prepare(self, nbytes: int) -> None:
        """Make exactly the pages that hold ``nbytes`` (ending at the back guard) accessible."""
        if self.nbytes == nbytes and self.rw_lo <= self.addr:
            return
        start = self.data_end - _round_up(nbytes, 16)
        rw_lo = start - start % PAGE
        lo = self.base + self.guard
        if rw_lo < lo:
            raise ValueError("buffer too small")
        if _libc.mprotect(lo, self.data_end - lo, _PROT_NONE) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        if self.data_end > rw_lo and _libc.mprotect(rw_lo, self.data_end - rw_lo, _PROT_RW) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        self.rw_lo, self.addr, self.nbytes = rw_lo, start, nbytes

    def view(self, dtype, shape) -> np.ndarray:
        if self.nbytes == 0:
            return np.empty(shape, dtype=dtype)
        raw = (ctypes.c_char * self.nbytes).from_address(self.addr)
        return np.frombuffer(raw, dtype=dtype).reshape(shape)

    # The accessible bytes that are not the buffer: before it in its first page, after it up to
    # the guard. A kernel that writes there went out of bounds without faulting.
    def _slack(self):
        return ((self.rw_lo, self.addr - self.rw_lo),
                (self.addr + self.nbytes, self.data_end - self.addr - self.nbytes))

    def fill_canary(self) -> None:
        for a, n in self._slack():
            if n > 0:
                ctypes.memset(a, _CANARY, n)

    def canary_damage(self) -> tuple[int, int] | None:
        """(first damaged byte offset relative to the buffer start, count) or None."""
        for a, n in self._slack():
            if n > 0:
                got = np.frombuffer(ctypes.string_at(a, n), dtype=np.uint8)
                bad = np.flatnonzero(got != _CANARY)
                if bad.size:
                    return int(a + bad[0] - self.addr), int(bad.size)
        return None

    def locate(self, address: int):
        """Where ``address`` falls: ('before'|'after'|'inside', byte offset from the start) or None."""
        if self.base <= address < self.addr:
            return "before", address - self.addr
        if self.addr <= address < self.addr + self.nbytes:
            return "inside", address - self.addr
        if self.addr + self.nbytes <= address < self.base + self.size:
            return "after", address - self.addr
        return None

    def free(self) -> None:
        if self.base:
            _libc.munmap(self.base, self.size)
            self.base = 0

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


class GuardedPool:
    """Reuses guarded buffers between launches (a grader launches the same shapes many times)."""

    def __init__(self, keep: int = 64):
        self._free: dict[int, list[GuardedBuffer]] = {}
        self._keep = keep

    def take(self, nbytes: int) -> GuardedBuffer:
        pages = max(1, _round_up(nbytes, PAGE) // PAGE)
        stack = self._free.get(pages)
        buf = stack.pop() if stack else GuardedBuffer(nbytes)
        buf.prepare(nbytes)
        return buf

    def give(self, buf: GuardedBuffer) -> None:
        stack = self._free.setdefault(buf.capacity_pages, [])
        if len(stack) < self._keep:
            stack.append(buf)
        else:
            buf.free()
