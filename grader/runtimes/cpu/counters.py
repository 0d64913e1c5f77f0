"""What a kernel would move on a GPU, counted by the emulator from its own loads and stores.

A CpuRuntime with ``counting = True`` builds kernels with every load and store instrumented
(csrc/counters.h) and leaves one ``LaunchCounts`` per launch in ``rt.counter_log``: per source line,
global bytes, requests and 32-byte sectors, shared-memory requests and wavefronts (bank conflicts),
active lanes; per array argument, bytes read and written; blocks and barriers; and the first data
race found, if any. ``estimate`` turns counts into a roofline time on a named GPU.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache


class _Row(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "pc", "g_read", "g_write", "g_requests", "g_sectors", "s_requests", "s_wavefronts", "s_ideal",
        "lanes", "groups", "partial_groups", "warp_lanes", "g_unique")]


@dataclass
class LineCounts:
    where: str                 # file:line of the instruction(s)
    g_read: int = 0
    g_write: int = 0
    g_requests: int = 0
    g_sectors: int = 0
    s_requests: int = 0
    s_wavefronts: int = 0
    s_ideal: int = 0
    lanes: int = 0
    warp_lanes: int = 0
    groups: int = 0
    partial_groups: int = 0
    g_unique: int = 0          # distinct bytes per request, summed

    def add(self, other) -> None:
        for f in ("g_read", "g_write", "g_requests", "g_sectors", "s_requests", "s_wavefronts", "s_ideal",
                  "lanes", "warp_lanes", "groups", "partial_groups", "g_unique"):
            setattr(self, f, getattr(self, f) + getattr(other, f))

    @property
    def global_bytes(self) -> int:
        return self.g_read + self.g_write

    @property
    def sectors_per_request(self) -> float:
        return self.g_sectors / self.g_requests if self.g_requests else 0.0

    @property
    def coalescing(self) -> float:
        """Bytes used per byte of the sectors moved (1: every byte of every sector is used)."""
        return self.g_unique / (32 * self.g_sectors) if self.g_sectors else 1.0

    @property
    def conflict_ways(self) -> float:
        """Wavefronts per ideal wavefront: 1 without bank conflicts, n for an n-way conflict."""
        return self.s_wavefronts / self.s_ideal if self.s_ideal else 1.0


@dataclass
class LaunchCounts:
    kernel: str
    grid: tuple
    block: tuple
    blocks: int
    barriers: int                       # __syncthreads of thread 0, all blocks together
    lines: list[LineCounts]
    arg_read: dict[str, int]            # parameter name -> bytes read
    arg_write: dict[str, int]
    arg_size: dict[str, int]            # parameter name -> the array's bytes
    race: str | None = None
    overflow: bool = False

    def total(self) -> LineCounts:
        t = LineCounts("all")
        for line in self.lines:
            t.add(line)
        return t


@lru_cache(maxsize=None)
def _addr2line(lib: str, pcs: tuple[int, ...]) -> dict[int, str]:
    tool = shutil.which("addr2line") or shutil.which("llvm-addr2line")
    if not tool or not pcs:
        return {}
    try:
        out = subprocess.run([tool, "-e", lib, *[hex(pc) for pc in pcs]], capture_output=True, text=True,
                             timeout=60).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return {}
    where = {}
    for pc, line in zip(pcs, out):
        f, _, n = line.rpartition(":")
        n = n.split()[0] if n else "?"
        where[pc] = f"{os.path.basename(f)}:{n}" if f and n not in ("?", "0") else "?"
    return where


def _typed(lib) -> None:
    if getattr(lib, "_counters_typed", False):
        return
    lib.cudaemu_counters_rows.restype = ctypes.c_int
    lib.cudaemu_counters_rows.argtypes = [ctypes.POINTER(_Row), ctypes.c_int]
    lib.cudaemu_counters_args.restype = ctypes.c_int
    lib.cudaemu_counters_args.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                                          ctypes.POINTER(ctypes.c_int32), ctypes.c_int]
    lib.cudaemu_counters_misc.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    lib.cudaemu_counters_race.restype = ctypes.c_int
    lib.cudaemu_counters_race.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_int32),
                                          ctypes.POINTER(ctypes.c_uint64)]
    lib._counters_typed = True


def collect(kernel, lib, args, arg_slot, grid, block, shared_mem) -> LaunchCounts:
    """The counts of the launch that just ran (called by CpuRuntime._launch)."""
    _typed(lib)
    rows = (_Row * 8192)()
    n = lib.cudaemu_counters_rows(rows, 8192)
    path = str(kernel._module._built.path)
    where = _addr2line(path, tuple(sorted({int(rows[i].pc) for i in range(n)})))
    by_line: dict[str, LineCounts] = {}
    for i in range(n):
        r = rows[i]
        key = where.get(int(r.pc), "?")
        line = by_line.setdefault(key, LineCounts(key))
        line.add(LineCounts(key, *[int(getattr(r, f)) for f in (
            "g_read", "g_write", "g_requests", "g_sectors", "s_requests", "s_wavefronts", "s_ideal", "lanes",
            "warp_lanes", "groups", "partial_groups", "g_unique")]))
    read, write, argpos = (ctypes.c_uint64 * 64)(), (ctypes.c_uint64 * 64)(), (ctypes.c_int32 * 64)()
    m = lib.cudaemu_counters_args(read, write, argpos, 64)
    params = kernel.params or []
    names = {}
    for i, p in enumerate(params):
        if arg_slot[i] is not None and arg_slot[i] not in names:
            names[arg_slot[i]] = p.name
    arg_read = {names.get(i, f"array {i}"): int(read[i]) for i in range(m)}
    arg_write = {names.get(i, f"array {i}"): int(write[i]) for i in range(m)}
    sizes = {}
    for i, a in enumerate(args):
        if arg_slot[i] is not None:
            sizes.setdefault(names.get(arg_slot[i], f"array {arg_slot[i]}"), int(a.nbytes))
    misc = (ctypes.c_uint64 * 4)()
    lib.cudaemu_counters_misc(misc)
    race = None
    pcs, who, addr = (ctypes.c_uint64 * 2)(), (ctypes.c_int32 * 5)(), ctypes.c_uint64()
    if lib.cudaemu_counters_race(pcs, who, ctypes.byref(addr)):
        lines = _addr2line(path, (int(pcs[0]), int(pcs[1])))
        what = "shared memory" if who[4] < 0 else f"argument {names.get(int(who[4]), '?')}"
        race = (f"threads {who[0]} and {who[1]} of one block touch the same 4 bytes of {what} with no "
                f"__syncthreads() between them, thread {who[0]} writing (at {lines.get(int(pcs[0]), '?')}) "
                f"and thread {who[1]} {'writing' if who[3] else 'reading'} (at {lines.get(int(pcs[1]), '?')})")
    return LaunchCounts(kernel.name, tuple(grid), tuple(block), int(misc[0]), int(misc[1]),
                        sorted(by_line.values(), key=lambda x: -(x.global_bytes + 4 * x.s_wavefronts)),
                        arg_read, arg_write, sizes, race, bool(misc[2]))


@dataclass
class Report:
    launches: list[LaunchCounts] = field(default_factory=list)

    def by_kernel(self) -> dict[str, list[LaunchCounts]]:
        out: dict[str, list[LaunchCounts]] = {}
        for c in self.launches:
            out.setdefault(c.kernel, []).append(c)
        return out

    def global_bytes(self) -> int:
        return sum(c.total().global_bytes for c in self.launches)

    def arg_bytes(self, name: str, kind: str = "read") -> int:
        return sum((c.arg_read if kind == "read" else c.arg_write).get(name, 0) for c in self.launches)


def table(report: Report, top: int = 6) -> str:
    """The counts as text: per kernel, the totals and the hottest lines."""
    out = []
    for name, launches in report.by_kernel().items():
        total = LineCounts("all")
        lines: dict[str, LineCounts] = {}
        blocks = barriers = 0
        races = [c.race for c in launches if c.race]
        for c in launches:
            total.add(c.total())
            blocks += c.blocks
            barriers += c.barriers
            for line in c.lines:
                lines.setdefault(line.where, LineCounts(line.where)).add(line)
        per_block = barriers / max(blocks, 1)
        out.append(f"  {name}: {len(launches)} launch(es), {blocks} blocks, "
                   f"{per_block:.0f} barrier{'' if round(per_block) == 1 else 's'} per block")
        out.append(f"    global: {total.g_read / 1e6:.3f} MB read, {total.g_write / 1e6:.3f} MB written, "
                   f"{total.sectors_per_request:.1f} sectors per warp request "
                   f"({100 * total.coalescing:.0f}% of the bytes moved are used)")
        out.append(f"    shared: {total.s_requests} warp requests, {total.s_wavefronts} wavefronts "
                   f"({total.conflict_ways:.2f} per request phase: "
                   f"{'no bank conflicts' if total.s_wavefronts == total.s_ideal else 'bank conflicts'})")
        if total.groups:
            out.append(f"    lanes: {100 * total.lanes / max(total.warp_lanes, 1):.0f}% of the warps' lanes "
                       f"active per memory instruction ({total.partial_groups} of {total.groups} warp "
                       "requests with some lanes idle: divergence or a partial tile)")
        hot = sorted(lines.values(), key=lambda x: -(x.global_bytes + 4 * x.s_wavefronts))[:top]
        if hot:
            out.append("    hottest lines:")
        for line in hot:
            parts = []
            if line.g_requests:
                parts.append(f"global {line.global_bytes / 1e6:.3f} MB, {line.sectors_per_request:.1f} sectors/request")
            if line.s_requests:
                ways = line.conflict_ways
                parts.append(f"shared {line.s_requests} requests" +
                             (f", {ways:.1f}-way bank conflicts" if ways > 1.001 else ", conflict-free"))
            if line.partial_groups:
                parts.append(f"{100 * line.lanes / max(line.warp_lanes, 1):.0f}% lanes active")
            out.append(f"      {line.where:28s} " + "; ".join(parts))
        conflicted = [x for x in lines.values() if x.conflict_ways > 1.001 and x not in hot]
        for line in sorted(conflicted, key=lambda x: -x.s_wavefronts)[:top]:
            out.append(f"      {line.where:28s} shared {line.s_requests} requests, "
                       f"{line.conflict_ways:.1f}-way bank conflicts")
        for r in races[:1]:
            out.append(f"    race: {r}")
    return "\n".join(out)


def conflicts_of(report: Report) -> float:
    """The worst n-way bank conflict of any line (1.0: none)."""
    worst = 1.0
    for c in report.launches:
        for line in c.lines:
            worst = max(worst, line.conflict_ways)
    return worst


