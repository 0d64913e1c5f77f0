"""The first divergence: where a kernel's blocks read or write other elements than the finished
version's blocks do, traced on the emulator.

A runtime with ``counting`` and ``tracing`` on logs every load and store of an array argument (and
every cp.async from one) with its block, thread and instruction (csrc/trace.h); ``take`` turns one
launch's log into a ``LaunchTrace``. ``first_divergence`` compares two runs of the same case, launch
by launch and block by block, and says where they first part: an observation with the line of the
submission's first access that the finished version does not make, never a cause.
"""
from __future__ import annotations

import ctypes
import linecache
import re
from pathlib import Path
from dataclasses import dataclass

import numpy as np

from .counters import _addr2line
from ..base import bf16_value, python_stack, site_in
from .faults import _block_coords
from .symbols import addr2line, student_line

_LINE = 0x80000000
_REC = np.dtype([("off", "<i8"), ("block", "<u4"), ("where", "<u4"), ("size", "<u2"), ("arg", "i1"),
                 ("write", "u1"), ("thread", "<u2"), ("epoch", "<u2")])
_SNAP = np.dtype([("offset", "<u8"), ("bytes", "<u8"), ("block", "<u4"), ("index", "<u4"), ("line", "<i4"),
                  ("static_bytes", "<u4")])


@dataclass
class LaunchTrace:
    kernel: str
    grid: tuple
    block: tuple
    arrays: list            # per array slot: (parameter name, shape, itemsize)
    records: np.ndarray     # _REC
    lines: dict             # where -> "file:line"
    cut: bool
    snaps: np.ndarray = None       # _SNAP: shared memory at each __syncthreads of each block
    snap_data: np.ndarray = None   # their bytes
    student: str = ""
    final: dict = None             # array slot -> its contents after the launch (the arrays it wrote)
    stack: tuple = ()              # (file, line, text) of the Python frames of the launch, outermost first
    maps: tuple = ()               # its tensor-map parameters: TMA's reads through them are traced as arrays
    calls: dict = None             # where -> the student's line that called the inlined function holding it
    initial: dict = None           # array slot -> its contents when the launch began (the arrays it reads)
    rank: int = None               # the rank whose thread launched it (module 12's stand-in), or None
    # Its module writes global memory in ways the trace does not record (atomics, bulk or TMA copies and
    # reductions from shared to global memory): a difference may then arise without a traced store.
    untraced_writes: bool = False


# Global writes the trace does not see: atomics, and the runtime's bulk/TMA copies and reductions to
# global memory (searched in the module's source, inline PTX strings included; a comment that names
# one only makes the message more careful).
_UNTRACED_WRITE = re.compile(r"\batomic\w*\s*\(|\bcp\.reduce\.|\bred\.|\bcp\.async\.bulk(?:\.tensor\.\w+)?\.global\.shared|"
                             r"\bst\.async\b")


def _remember(student: str, source: str) -> None:
    """Where the student's file is not readable by its name here (the #line directive gives its base
    name), its kernel lines from the module's source, so that a traced line shows its text."""
    if not student or not source or linecache.getlines(student):
        return
    from ..base import source_lines
    lines = source_lines(source)
    if lines:
        text = [lines.get(n, "") + "\n" for n in range(1, max(lines) + 1)]
        linecache.cache[student] = (sum(map(len, text)), None, text, student)


def take(kernel, lib, args, arg_slot, grid, block, views=None, initial=None) -> LaunchTrace:
    """The trace of the launch that just ran (called by CpuRuntime._launch)."""
    lib.cudaemu_trace_end()
    lib.cudaemu_trace_count.restype = ctypes.c_uint64
    lib.cudaemu_trace_record_size.restype = ctypes.c_uint64
    lib.cudaemu_trace_take.restype = ctypes.c_uint64
    lib.cudaemu_trace_take.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    lib.cudaemu_trace_row_pc.restype = ctypes.c_uint64
    lib.cudaemu_trace_row_pc.argtypes = [ctypes.c_int]
    if lib.cudaemu_trace_record_size() != _REC.itemsize:
        raise RuntimeError("csrc/trace.h's TraceRec and trace.py's _REC disagree")
    n = int(lib.cudaemu_trace_count())
    recs = np.zeros(n, _REC)
    if n:
        lib.cudaemu_trace_take(recs.ctypes.data, n)
    slots = {}
    for i, a in enumerate(args):
        if arg_slot[i] is not None and arg_slot[i] not in slots:
            slots[arg_slot[i]] = (kernel.params[i].name, tuple(a.shape), a.dtype.itemsize)
    arrays = [slots[s] for s in sorted(slots)]
    rows = sorted({int(w) for w in np.unique(recs["where"]) if not w & _LINE})
    pcs = {r: int(lib.cudaemu_trace_row_pc(r)) for r in rows}
    named = _addr2line(str(kernel._module._built.path), tuple(sorted(set(pcs.values()))))
    student = kernel._module.student_file
    base = student.rsplit("/", 1)[-1]
    _remember(student, getattr(kernel._module, "source", "") or "")
    lines = {r: named.get(pc, "?") for r, pc in pcs.items()}
    # An access inside a function the emulator provides (atomicAdd, in its own headers) is the
    # student's line that the function was inlined into: a line of another file means nothing to them.
    # Each access's inline chain: where a helper of the student's file (or one of the emulator's own,
    # atomicAdd) was inlined, the student's line that called it is the place that says which call.
    known = [r for r, w in lines.items() if w != "?"]
    calls = {}
    if known:
        chains = addr2line(str(kernel._module._built.path), [pcs[r] for r in known])
        for r, chain in zip(known, chains):
            mine = [n for n in (student_line(f, k, student) for f, k in chain) if n is not None]
            if not mine:
                continue
            if not lines[r].startswith(base + ":"):
                lines[r] = f"{base}:{mine[0]}"
            caller = next((n for n in mine[1:] if n != mine[0]), None)
            if caller is not None:
                calls[r] = caller
    lines = {r: student + w[len(base):] if w.startswith(base + ":") else w for r, w in lines.items()}
    for w in np.unique(recs["where"]):
        if int(w) & _LINE:
            lines[int(w)] = f"{student}:{int(w) & ~_LINE}"
    lib.cudaemu_trace_snap_count.restype = ctypes.c_uint64
    lib.cudaemu_trace_snap_bytes.restype = ctypes.c_uint64
    lib.cudaemu_trace_snap_record_size.restype = ctypes.c_uint64
    lib.cudaemu_trace_snap_take.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    if lib.cudaemu_trace_snap_record_size() != _SNAP.itemsize:
        raise RuntimeError("csrc/trace.h's SnapRec and trace.py's _SNAP disagree")
    snaps = np.zeros(int(lib.cudaemu_trace_snap_count()), _SNAP)
    data = np.zeros(int(lib.cudaemu_trace_snap_bytes()), np.uint8)
    if len(snaps):
        lib.cudaemu_trace_snap_take(snaps.ctypes.data, data.ctypes.data)
    written = {int(x) for x in np.unique(recs["arg"][recs["write"] == 1]) if x >= 0}
    final = {slot: np.array(views[slot]) for slot in written} if views is not None else {}
    read = {int(x) for x in np.unique(recs["arg"][recs["write"] == 0]) if x >= 0}
    start = {slot: initial[slot] for slot in read} if initial is not None else {}
    arrays = arrays + _tma_slots(recs, len(arrays), kernel, args)
    source = getattr(kernel._module, "source", "") or ""
    return LaunchTrace(kernel.name, tuple(grid), tuple(block), arrays, recs, lines,
                       bool(lib.cudaemu_trace_cut()), snaps, data, student, final, python_stack(),
                       tuple(p.name for p in kernel.params if "TensorMap" in p.ctype), calls, start,
                       untraced_writes=bool(_UNTRACED_WRITE.search(source)))


def _tma_slots(recs: np.ndarray, first: int, kernel, args) -> list:
    """TMA's reads (records of arg -2, at their global address: csrc/trace.h trace_tma) as reads of the
    tensor maps' tensors, one slot each after the array arguments (first, first + 1, ..), named after
    the map's parameter: the tensor [.., n, d] that the map's dims give. Returns those slots."""
    slots = []
    tma = recs["arg"] == -2
    for i, p in enumerate(kernel.params):
        geometry = kernel._module._rt.map_geometry(args[i]["opaque"]) if "TensorMap" in p.ctype else None
        if geometry is None or len(geometry[1]) < 2 or not tma.any():
            continue
        base, dims, strides, item = geometry
        extent = dims[-1] * strides[-1]
        mine = tma & (recs["off"] >= base) & (recs["off"] < base + extent)
        recs["off"][mine] -= base
        recs["arg"][mine] = first + len(slots)
        tma &= ~mine
        slots.append((p.name, tuple(reversed(dims)), item))
    return slots


def launch_site(a: LaunchTrace) -> str:
    """The line of the student's file whose call launched the kernel (its innermost frame there), and
    the line that called that one, where the launch is in a helper of the same file."""
    return site_in(a.stack, a.student) if a.student else ""


def _elements(recs: np.ndarray, itemsize: int) -> tuple[np.ndarray, np.ndarray]:
    """(block, element index) of every element each record touches, and the record's position."""
    first = recs["off"] // itemsize
    count = np.maximum(1, (recs["off"] + recs["size"] + itemsize - 1) // itemsize - first).astype(np.int64)
    pos = np.repeat(np.arange(len(recs)), count)
    step = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    return np.repeat(recs["block"].astype(np.int64), count), np.repeat(first.astype(np.int64), count) + step, pos


def _span_of(recs_a, recs_b, itemsize, nelem) -> tuple[int, int]:
    """(lowest element, count) that the keys of both launches' accesses cover: the array's elements,
    widened to any access outside them, so that an element past the end keeps its own block's key."""
    lo, hi = 0, max(nelem, 1)
    for recs in (recs_a, recs_b):
        if len(recs):
            lo = min(lo, int((recs["off"] // itemsize).min()))
            hi = max(hi, int(((recs["off"] + recs["size"] + itemsize - 1) // itemsize).max()))
    return lo, hi - lo


def _keyed(recs, itemsize, span):
    """Unique keys block · count + (element - lowest) of the elements the records touch, and the
    position of the first record touching each."""
    lo, count = span
    blocks, elems, pos = _elements(recs, itemsize)
    keys = blocks * count + (elems - lo)
    uniq, first = np.unique(keys, return_index=True)
    return uniq, pos[first]


def _span(values: np.ndarray) -> str:
    v = np.unique(values)
    if len(v) == 1:
        return str(int(v[0]))
    if v[-1] - v[0] + 1 == len(v):
        return f"{int(v[0])}..{int(v[-1])}"
    shown = ", ".join(str(int(x)) for x in v[:3])
    return f"{shown}, … ({len(v)} values in {int(v[0])}..{int(v[-1])})"


def describe(name: str, shape: tuple, elems: np.ndarray) -> str:
    """`q[0, 2, 0..36, 0..31]`: the index range of each dimension the elements span."""
    size = int(np.prod(shape)) if len(shape) else 1
    if len(elems) and (elems.min() < 0 or elems.max() >= size):
        return f"{name}'s element {int(elems[0])} (flat), outside its {size} elements"
    idx = np.unravel_index(elems, shape) if len(shape) else (elems,)
    return f"{name}[{', '.join(_span(i) for i in idx)}]"


def _source(where: str) -> str:
    file, _, line = where.rpartition(":")
    text = linecache.getline(file, int(line)).strip() if line.isdigit() and file else ""
    return (f" `{text}`" + helper_calls(file, int(line))) if text else ""


KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "static_assert", "defined"}


def _enclosing_function(file: str, line: int):
    """(name, first line of its signature, line of its opening brace) of the __device__ function of
    the file's kernel source that holds `line`, read from the source; None elsewhere."""
    lines = linecache.getlines(file)
    if not 0 < line <= len(lines):
        return None
    own = lines[line - 1].split("//")[0]
    if "__device__" in own and "{" in own:           # a function on one line: `__device__ f(..) { .. }`
        names = [m for m in re.findall(r"\b([A-Za-z_]\w*)\s*\(", own.split("{")[0]) if m not in KEYWORDS]
        return (names[0], line, line) if names else None
    opener, depth = None, 0
    for n in range(line - 1, 0, -1):                 # upward: the outermost brace still open at `line`
        text = lines[n - 1]
        if '"""' in text:                            # the start of the kernel's source string
            break
        for ch in reversed(text.split("//")[0]):
            if ch == "}":
                depth += 1
            elif ch == "{":
                if depth:
                    depth -= 1
                else:
                    opener = n
    if opener is None:
        return None
    start = opener
    while start > 1 and not re.search(r"[;}]\s*$|^\s*(#|//)|\"\"\"", lines[start - 2]):
        start -= 1                                   # the signature may span lines above the brace
    signature = " ".join(lines[k - 1].split("//")[0] for k in range(start, opener + 1))
    if "__device__" not in signature or "__global__" in signature:
        return None
    names = [m for m in re.findall(r"\b([A-Za-z_]\w*)\s*\(", signature) if m not in KEYWORDS]
    return (names[0], start, opener) if names else None


def helper_calls(file: str, line: int) -> str:
    """' (in `f`, called at line N)' where `line` is inside a __device__ function `f` of the file's
    kernel source, found by reading the source (an access is traced at its own line, which in a
    helper says nothing of which call made it): the lines that call `f`, up to three; else ''."""
    found = _enclosing_function(file, line)
    if found is None:
        return ""
    name, start, opener = found
    lines = linecache.getlines(file)
    call = re.compile(rf"(?<![\w.]){name}\s*(<[^;(){{}}]*>)?\s*\(")
    sites = [n for n, text in enumerate(lines, 1)
             if not start <= n <= opener and call.search(text.split("//")[0])
             and not re.search(rf"__device__[^;]*\b{name}\s*\(", text)]
    if not sites or len(sites) > 3:
        return ""
    return f" (in `{name}`, called at line{'s' if len(sites) > 1 else ''} {', '.join(map(str, sites))})"


def _launcher_file(a: "LaunchTrace") -> str:
    """The file whose Python code launched a's kernel, where that is not the student's file (module 12
    calls the library's kernels), else '': the innermost frame of the launch outside the grader."""
    if not a.student or not a.stack:
        return ""
    grader_dir = Path(__file__).resolve().parents[2]
    for f, _, _ in reversed(a.stack):
        p = Path(f).resolve()
        if grader_dir in p.parents:
            continue
        return "" if p.name == Path(a.student).name else str(p)     # (student may be a base name only)
    return ""


def _which(i: int, a: "LaunchTrace", numbered: bool, site: bool = False) -> str:
    """'launch i (kernel)' (or the kernel's name where there is one launch), with ', launched at' the
    student's line where `site` asks for it, and always for a kernel that a library launched on the
    student's behalf (module 12 calls module 11's): there the student's part is the call and its
    arguments, not the kernel's lines."""
    which = f"launch {i} ({a.kernel})" if numbered else a.kernel
    where = launch_site(a) if site or _launcher_file(a) else ""
    return f"{which}, launched at {where}" if where else which


def _where(a: "LaunchTrace", w: int) -> str:
    """'line N `text`' of an access, with the line that called the function holding it, where the
    inline chain gives one (else the call sites the source shows, helper_calls)."""
    place = a.lines.get(int(w), "?")
    if place == "?":
        return "a line the emulator could not find"
    file, _, line = place.rpartition(":")
    # A kernel that another file's Python launched (module 12 calls the library's): that file is named.
    lib = _launcher_file(a)
    of = f" of the kernel source that {Path(lib).name} compiles (a library your file calls)" if lib else ""
    caller = (a.calls or {}).get(int(w))
    if caller is None or not line.isdigit():
        return f"line {line}{of}{_source(place)}"
    text = linecache.getline(file, int(line)).strip()
    up = linecache.getline(file, caller).strip()
    found = _enclosing_function(file, int(line))
    function = f"`{found[0]}`" if found else "a function"
    return (f"line {line}{of}" + (f" `{text}`" if text else "")
            + f" (in {function}, called at line {caller}" + (f" `{up}`" if up else "") + ")")


def _stopped_at(a: LaunchTrace, ra: np.ndarray, blk: int, thread: int, name: str, verb: str) -> str:
    """Where a thread that stops short of the finished version's accesses of an array last made one:
    the line of its last such access, else the first line at which any thread of the launch makes one
    (the loop or guard that ends it early is at or above that line). ra: the launch's records of the
    array, reads or writes as `verb` says."""
    mine = ra[(ra["block"] == blk) & (ra["thread"] == thread)]
    if len(mine):
        return f"; its last {verb[:-1]} of {name} is at {_where(a, mine['where'][-1])}"
    if len(ra):
        return f"; the launch's other threads {verb[:-1]} {name} at {_where(a, ra['where'][0])}"
    at = f" (launched at {launch_site(a)})" if launch_site(a) else ""
    return f"; no thread of this launch{at} {verb} any element of {name}"


def itemsize_of(t: LaunchTrace, slot: int) -> int:
    return t.arrays[slot][2]


def _first_step(ra: np.ndarray, rb: np.ndarray, itemsize: int, partial: bool = False):
    """(thread, k, element, finished version's element, where) of the first element, in thread
    order then program order, at which one block's accesses (`ra`) part from the finished
    version's (`rb`); None where every thread's sequence is the same."""
    _, ea, pa = _elements(ra, itemsize)
    _, eb, _ = _elements(rb, itemsize)
    ta, tb = ra["thread"][pa], rb["thread"][_elements(rb, itemsize)[2]]
    for thread in np.union1d(np.unique(ta), np.unique(tb)):
        sa, sb = ea[ta == thread], eb[tb == thread]
        n = min(len(sa), len(sb))
        diff = np.flatnonzero(sa[:n] != sb[:n])
        if len(diff) or (len(sa) != len(sb) and not partial):
            k = int(diff[0]) if len(diff) else n
            wa = ra["where"][pa[ta == thread]]
            return (int(thread), k, int(sa[k]) if k < len(sa) else None, int(sb[k]) if k < len(sb) else None,
                    int(wa[k]) if k < len(wa) else None)
    return None


def _first_step_only(mine: list[LaunchTrace], theirs: list[LaunchTrace]) -> str | None:
    for i, (a, b) in enumerate(zip(mine, theirs), 1):
        which = _which(i, a, len(mine) > 1 or len(theirs) > 1)
        if a.grid != b.grid or a.block != b.block or [x[1:] for x in a.arrays] != [x[1:] for x in b.arrays]:
            return None
        for write, verb in ((0, "reads"), (1, "writes")):
            for blk in np.unique(a.records["block"]):
                for slot, (name, shape, itemsize) in enumerate(a.arrays):
                    ra = a.records[(a.records["arg"] == slot) & (a.records["write"] == write) & (a.records["block"] == blk)]
                    rb = b.records[(b.records["arg"] == slot) & (b.records["write"] == write) & (b.records["block"] == blk)]
                    step = _first_step(ra, rb, itemsize, partial=True)
                    if step is None:
                        continue
                    thread, k, mine_e, their_e, where = step
                    at = f" ({_where(a, where)})" if where is not None else ""
                    return (f"first divergence from the finished version, traced on the emulator up to the "
                            f"fault: in {which}, block {_block_coords(int(blk), a.grid)}, thread {thread}'s "
                            f"{_nth(k)} {verb[:-1]} of an element of {name} is "
                            f"{describe(name, shape, np.array([mine_e]))}{at}, where the finished version's "
                            f"thread {thread} {verb} {describe(name, shape, np.array([their_e]))}.")
    return None


def _words(data: np.ndarray, offset: int, size: int) -> np.ndarray:
    raw = data[offset:offset + size]
    return raw[:len(raw) // 4 * 4].view(np.float32)


def _first_shared_divergence(mine: list[LaunchTrace], theirs: list[LaunchTrace],
                             other: str = "the finished version") -> str | None:
    """The first __syncthreads at which a block's shared memory holds other values than the finished
    version's same block at its same barrier, and the last store into the first differing word."""
    for i, (a, b) in enumerate(zip(mine, theirs), 1):
        which = _which(i, a, len(mine) > 1 or len(theirs) > 1)
        if a.snaps is None or b.snaps is None or not len(a.snaps) or a.cut or b.cut:
            continue
        if a.grid != b.grid or a.block != b.block:
            return None
        if a.snaps["static_bytes"][0] != b.snaps["static_bytes"][0] or \
                (len(b.snaps) and a.snaps["bytes"][0] != b.snaps["bytes"][0]):
            return None                          # another layout of shared memory: not comparable
        theirs_at = {(int(r["block"]), int(r["index"])): r for r in b.snaps}
        for r in a.snaps:
            o = theirs_at.get((int(r["block"]), int(r["index"])))
            if o is None:
                continue
            x = _words(a.snap_data, int(r["offset"]), int(r["bytes"]))
            y = _words(b.snap_data, int(o["offset"]), int(o["bytes"]))
            with np.errstate(invalid="ignore", over="ignore"):
                same = (x.view(np.uint32) == y.view(np.uint32)) | (np.isnan(x) & np.isnan(y)) | \
                       (np.abs(x - y) <= 1e-5 * np.maximum(np.abs(x), np.abs(y)))
            if same.all():
                continue
            bad = np.flatnonzero(~same)
            w = int(bad[0])
            blk, k = int(r["block"]), int(r["index"])
            static = int(r["static_bytes"])
            byte = 4 * w
            region = (f"byte {byte} of the static shared memory" if byte < static
                      else f"byte {byte - static} of the dynamic shared memory")
            last, source = _last_write(a, blk, k, byte)
            if last is None:
                wrote = "; nothing wrote it before that barrier"
            elif source is None:
                wrote = (f"; the last store to it before that barrier is at {_where(a, last['where'])}, "
                         f"by thread {int(last['thread'])}")
            else:
                _, theirs_from = _last_write(b, blk, int(o["index"]), byte)
                wrote = (f"; the last write to it before that barrier is the copy at {_where(a, last['where'])}, "
                         f"by thread {int(last['thread'])}, of {source}"
                         + (f", where {other}'s copied {theirs_from} there" if theirs_from and theirs_from != source
                            else ""))
            barrier = f"line {int(r['line'])}" + _source(f"{a.student}:{int(r['line'])}")
            return (f"first divergence from {other}, traced on the emulator: in {which}, block "
                    f"{_block_coords(blk, a.grid)} reads and writes the same global elements as {other}'s"
                    f"{_unseen(a, b)}, but at its {_nth(k - 1)} __syncthreads() ({barrier}) its shared memory differs "
                    f"in {len(bad)} of {len(x)} words: {region} holds {_val(x[w])} where {other}'s "
                    f"holds {_val(y[w])}{wrote}.")
    return None


def _last_write(a: LaunchTrace, blk: int, k: int, byte: int):
    """The last write into shared byte `byte` of block blk before its k-th __syncthreads (a store, or
    a copy: cp.async, cp.async.bulk), and for a copy the element it copied ('k[0, 1, 8, 0..3]'), else
    None; (None, None) when nothing wrote it."""
    r = a.records
    hit = np.flatnonzero((r["arg"] == -1) & (r["block"] == blk) & (r["epoch"] < k)
                         & (r["off"] <= byte) & (r["off"] + r["size"] > byte))
    if not len(hit):
        return None, None
    i = int(hit[-1])
    last = r[i]
    if not int(last["where"]) & _LINE or i == 0:
        return last, None
    src = r[i - 1]              # a copy traces its read right before its write (trace.h: trace_copy)
    if (src["arg"] < 0 or src["write"] or src["where"] != last["where"] or src["thread"] != last["thread"]
            or src["block"] != blk):
        return last, "zeros (no source: a zero-filled copy)" if int(last["size"]) else None
    name, shape, itemsize = a.arrays[int(src["arg"])]
    first = (int(src["off"]) + (byte - int(last["off"]))) // itemsize
    return last, describe(name, shape, np.array([first]))


def order_divergence(forward: LaunchTrace, other: LaunchTrace) -> str | None:
    """Where a launch whose result depends on the order of its threads first parts from its forward
    run, traced both ways on the same blocks: the first barrier at which a block's shared memory
    differs (and the last store before it), or the first stored value that differs. An observation:
    where the two orders differ shows, not which access races."""
    return (_first_shared_divergence([other], [forward], "the forward run")
            or _first_value_divergence([other], [forward], "the forward run"))


def _stores_at(recs: np.ndarray, slot: int, byte: int) -> np.ndarray:
    """The stores into array `slot` that cover its byte `byte`, in order."""
    return recs[(recs["arg"] == slot) & (recs["write"] == 1) & (recs["off"] <= byte)
                & (recs["off"] + recs["size"] > byte)]


def _unseen(a: LaunchTrace, b: LaunchTrace) -> str:
    """What the comparison of a launch's accesses did not see, said after "the same global elements"."""
    said = []
    untraced = [m for m in a.maps if m not in {x[0] for x in a.arrays}]
    if untraced:
        said.append(f"what TMA copies through {', '.join(untraced)}")
    only = sorted({x[0] for x in a.arrays} ^ {x[0] for x in b.arrays})
    if only and [x[1:] for x in a.arrays] != [x[1:] for x in b.arrays]:
        said.append(f"arrays only one version passes ({', '.join(only)})")
    return f" (not traced: {'; '.join(said)})" if said else ""


def _slot_pairs(a: LaunchTrace, b: LaunchTrace) -> list:
    """(slot in a, slot in b) of the arrays both launches pass: slot for slot where their shapes and
    item sizes agree; else the arrays of the same name, shape and item size (a submission that passes
    one array more or fewer than the finished version is still compared on the others)."""
    if [x[1:] for x in a.arrays] == [x[1:] for x in b.arrays]:
        return [(i, i) for i in range(len(a.arrays))]
    return [(i, j) for i, x in enumerate(a.arrays) for j, y in enumerate(b.arrays) if x == y]


def _values(x: np.ndarray) -> np.ndarray:
    """An output's elements as float64, flat: 2-byte unsigned arrays are bfloat16 bits (NumPy has no
    bfloat16; the course passes them as uint16), integers compare exactly as they are."""
    if x.dtype == np.uint16:
        return bf16_value(x).astype(np.float64).ravel()
    return x.astype(np.float64).ravel()


def _first_value_divergence(mine: list[LaunchTrace], theirs: list[LaunchTrace],
                            other: str = "the finished version") -> str | None:
    """Where reads, writes and shared memory all agree: the first stored element whose value differs,
    the store that wrote it, and the barrier before it (the values part in registers after it, or in
    registers carried across it)."""
    for i, (a, b) in enumerate(zip(mine, theirs), 1):
        which = _which(i, a, len(mine) > 1 or len(theirs) > 1)
        if not a.final or not b.final or a.grid != b.grid or a.block != b.block:
            continue
        for slot, slot_b in _slot_pairs(a, b):
            if slot not in a.final or slot_b not in b.final:
                continue
            x, y = a.final[slot], b.final[slot_b]
            if x.shape != y.shape or x.dtype != y.dtype or x.dtype.kind not in "fiu":
                continue
            xf, yf = _values(x), _values(y)
            finite = np.abs(yf[np.isfinite(yf)])       # an lse of -inf (a row with no key) sets no scale
            scale = finite.max() if finite.size else 1.0
            with np.errstate(invalid="ignore"):
                bad = ~((xf == yf) | (np.isnan(xf) & np.isnan(yf)) | (np.abs(xf - yf) <= 1e-5 * scale + 1e-30))
            if not bad.any():
                continue
            e = int(np.flatnonzero(bad)[0])
            name, shape, itemsize = a.arrays[slot]
            byte = e * itemsize
            w = _stores_at(a.records, slot, byte)
            if not len(w):
                return None
            last = w[-1]
            blk, epoch = int(last["block"]), int(last["epoch"])
            wb = _stores_at(b.records, slot_b, byte)
            other_store = ""
            if len(wb) and (int(wb[-1]["thread"]), int(wb[-1]["block"])) != (int(last["thread"]), blk):
                other_store = (f" (in {other}, thread {int(wb[-1]['thread'])} of block "
                         f"{_block_coords(int(wb[-1]['block']), b.grid)} stores it)")
            before = ""
            if a.snaps is not None and epoch:
                at = a.snaps[(a.snaps["block"] == blk) & (a.snaps["index"] == epoch)]
                if len(at):
                    ln = int(at[0]["line"])
                    before = (f", after its {_nth(epoch - 1)} __syncthreads() (line {ln}"
                              f"{_source(f'{a.student}:{ln}')})")
            copies = f", or in what TMA copies through {', '.join(a.maps)}" if a.maps else ""
            return (f"first divergence from {other}, traced on the emulator: in {which}, every block "
                    f"reads and writes the same global elements as {other}'s{_unseen(a, b)}, and its "
                    "shared memory holds the same values at every __syncthreads(); the first stored value that differs, "
                    f"{describe(name, shape, np.array([e]))} = {_val(xf[e])} ({other} stores "
                    f"{_val(yf[e])}), is stored at {_where(a, last['where'])} by thread {int(last['thread'])} "
                    f"of block {_block_coords(blk, a.grid)}{before}{other_store}. So the values part in registers: in what that "
                    f"thread computes before the store, or in values it keeps in registers across the barriers{copies}.")
    return None


def _first_input_divergence(mine: list[LaunchTrace], theirs: list[LaunchTrace]) -> str | None:
    """The first launch that is handed other values than the finished version's, in the elements it
    reads, while every launch before it agrees in what it reads, writes, keeps in shared memory and
    stores: the difference then comes from the host code that fills or passes those arrays (an
    initial value, a buffer swapped), not from a kernel."""
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if not a.initial or not b.initial or a.grid != b.grid or a.block != b.block:
            continue
        for slot, slot_b in _slot_pairs(a, b):
            if slot not in a.initial or slot_b not in b.initial:
                continue
            x, y = a.initial[slot], b.initial[slot_b]
            name, shape, itemsize = a.arrays[slot]
            if x.shape != y.shape or x.dtype != y.dtype:
                continue
            reads = a.records[(a.records["arg"] == slot) & (a.records["write"] == 0)]
            if not len(reads):
                continue
            _, el, pos = _elements(reads, itemsize)
            _, el_b, _ = _elements(b.records[(b.records["arg"] == slot_b) & (b.records["write"] == 0)], itemsize)
            inside = (el >= 0) & (el < x.size) & np.isin(el, el_b)     # what both launches depend on
            elems, at = np.unique(el[inside], return_index=True)
            by = pos[inside][at]                       # the first record that reads each element
            xv, yv = x.ravel()[elems], y.ravel()[elems]
            if x.dtype.kind == "f":
                with np.errstate(invalid="ignore"):
                    bad = ~((xv == yv) | (np.isnan(xv) & np.isnan(yv)))
            else:
                bad = xv != yv
            if not bad.any():
                continue
            if _first_shared_divergence(mine[:i], theirs[:i]) or _first_value_divergence(mine[:i], theirs[:i]):
                return None         # an earlier launch parts first: the caller reports that one
            k = int(np.flatnonzero(bad)[0])
            e, first = int(elems[k]), reads[by[k]]
            which = _which(i + 1, a, len(mine) > 1 or len(theirs) > 1, site=True)
            if any(m.untraced_writes for m in mine[:i]):   # an earlier launch may write where the trace does not look
                why = (f"Every launch before it reads, writes and stores what the finished version's do, as far "
                       f"as the trace sees; but the kernels' source also writes global memory in ways the trace "
                       f"does not record (atomics, or bulk or TMA copies and reductions from shared memory), so "
                       f"the difference may come from such a write in an earlier launch, or from the host code "
                       f"that fills or passes {name}.")
            else:
                earlier = "every launch before it reads, writes and stores what the finished version's do, so" if i else "so"
                why = (f"{earlier[0].upper()}{earlier[1:]} the difference comes from the host code that fills or "
                       f"passes {name}: its initial value, or which buffer is handed in.")
            return (f"first divergence from the finished version, traced on the emulator: {which}: it is "
                    f"handed other values than the finished "
                    f"version's: before it runs, {describe(name, shape, np.array([e]))} holds {_val(x.ravel()[e])} "
                    f"where the finished version's holds {_val(y.ravel()[e])}, and block "
                    f"{_block_coords(int(first['block']), a.grid)} reads it at {_where(a, first['where'])}. {why}")
    return None


def written_by_two_blocks(mine: list[LaunchTrace]) -> str | None:
    """The first output element that two blocks of one launch both store (what makes a result depend
    on the order in which blocks run), with both blocks and their lines; None where every element has
    one writer (atomics are not traced as stores, so they never count)."""
    for i, a in enumerate(mine, 1):
        which = _which(i, a, len(mine) > 1)
        w = a.records[a.records["write"] == 1]
        for slot, (name, shape, itemsize) in enumerate(a.arrays):
            r = w[w["arg"] == slot]
            if not len(r):
                continue
            blocks, elems, pos = _elements(r, itemsize)
            pairs = np.unique(np.stack([elems, blocks], 1), axis=0)      # (element, block), sorted
            el, counts = np.unique(pairs[:, 0], return_counts=True)
            shared = el[counts > 1]
            if not len(shared):
                continue
            e = int(shared[0])
            two = pairs[pairs[:, 0] == e][:2, 1]
            recs = [r[int(pos[np.flatnonzero((elems == e) & (blocks == blk))[0]])] for blk in two]
            who = [f"block {_block_coords(int(blk), a.grid)} (thread {int(rec['thread'])}" for blk, rec in zip(two, recs)]
            at = [_where(a, rec["where"]) for rec in recs]
            said = (f"{who[0]}) and {who[1]}), both at {at[0]}" if at[0] == at[1] else
                    f"{who[0]}, at {at[0]}) and {who[1]}, at {at[1]})")
            return (f"traced on the emulator: in {which}, {describe(name, shape, np.array([e]))} is stored by two "
                    f"blocks, {said}; every output element must belong to exactly one block.")
    return None


def _val(v) -> str:
    return f"{float(v):.6g}"


def _nth(k: int) -> str:
    n = k + 1
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def first_divergence(mine: list[LaunchTrace], theirs: list[LaunchTrace], partial: bool = False) -> str | None:
    """Where the submission's launches (`mine`) first read or write other elements than the finished
    version's (`theirs`) on the same case, as one observation; None where they touch the same ones.
    `partial`: the submission's last launch stopped at a fault, so only the accesses its threads
    made are compared, position by position (what they never reached says nothing).
    Launches from several ranks (module 12's stand-in runs them as threads that take turns) are
    compared rank by rank, each rank's own launches in their order: the turns interleave the ranks
    differently when the code between the launches differs, so a global count would pair one rank's
    launch with another's."""
    ranks = sorted({t.rank for t in mine + theirs if t.rank is not None})
    if not ranks:
        return _first_divergence(mine, theirs, partial)
    if partial:                       # the fault stopped every rank: only the faulting one's launches are whole
        ranks = [mine[-1].rank]
    for r in ranks:
        said = _first_divergence([t for t in mine if t.rank == r], [t for t in theirs if t.rank == r], partial)
        if said:
            return f"on rank {r}, counting its own launches: {said}"
    return None


def _first_divergence(mine: list[LaunchTrace], theirs: list[LaunchTrace], partial: bool) -> str | None:
    if not mine or not theirs:
        return None
    if partial:
        return _first_step_only(mine, theirs)
    for i, (a, b) in enumerate(zip(mine, theirs), 1):
        which = _which(i, a, len(mine) > 1 or len(theirs) > 1)
        if a.grid != b.grid or a.block != b.block:
            return (f"{_which(i, a, len(mine) > 1 or len(theirs) > 1, site=True)}: it runs grid {a.grid} with "
                    f"blocks {a.block}, where the finished version's "
                    f"runs grid {b.grid} with blocks {b.block}: its blocks cannot be compared one by one.")
        if a.cut or b.cut:
            return None
        pairs = _slot_pairs(a, b)
        if not pairs:
            return None
        found = []
        for write, verb in ((0, "reads"), (1, "writes")):
            for slot, slot_b in pairs:
                name, shape, itemsize = a.arrays[slot]
                nelem = int(np.prod(shape)) if shape else 1
                ra = a.records[(a.records["arg"] == slot) & (a.records["write"] == write)]
                rb = b.records[(b.records["arg"] == slot_b) & (b.records["write"] == write)]
                span = _span_of(ra, rb, itemsize, nelem)
                ka, pa = _keyed(ra, itemsize, span)
                kb, _ = _keyed(rb, itemsize, span)
                extra = np.setdiff1d(ka, kb, assume_unique=True)
                missing = np.setdiff1d(kb, ka, assume_unique=True)
                if not len(extra) and not len(missing):
                    continue
                blk = int(min(extra[0] if len(extra) else np.inf, missing[0] if len(missing) else np.inf)
                          // span[1])
                found.append((blk, write, slot, name, shape, span, verb, ka, pa, ra, extra, missing))
        if not found:
            continue
        blk = min(f[0] for f in found)
        out = []
        for f_blk, write, slot, name, shape, (first_e, count), verb, ka, pa, ra, extra, missing in found:
            if f_blk != blk or len(out) == 2:
                continue
            lo, hi = blk * count, (blk + 1) * count
            ex = extra[(extra >= lo) & (extra < hi)] - lo + first_e
            mi = missing[(missing >= lo) & (missing < hi)] - lo + first_e
            rb = b.records[(b.records["arg"] == dict(pairs)[slot]) & (b.records["write"] == write)]
            step = _first_step(ra[ra["block"] == blk], rb[rb["block"] == blk], itemsize_of(a, slot))
            part = []
            if len(ex):
                part.append(f"{verb} {describe(name, shape, ex)}, which the finished version's "
                            "same block does not")
            if len(mi):
                part.append(f"{', and ' if part else ''}does not {verb[:-1]} {describe(name, shape, mi)}, "
                            "which the finished version's does")
            if step is not None:
                thread, k, mine_e, their_e, where = step
                nth = _nth(k)
                at = f" ({_where(a, where)})" if where is not None else ""
                verb1 = verb[:-1]
                if mine_e is None:
                    part.append(f"(thread {thread} stops after {k} {verb1}(s) of elements of {name}, where the "
                                f"finished version's thread {thread} goes on to {verb1} "
                                f"{describe(name, shape, np.array([their_e]))}{_stopped_at(a, ra, blk, thread, name, verb)})")
                elif their_e is None:
                    theirs = (f"makes no {verb1} of {name}" if k == 0 else
                              f"makes only {k} {verb1}(s) of elements of {name}")
                    part.append(f"(thread {thread}'s {nth} {verb1} of an element of {name} is "
                                f"{describe(name, shape, np.array([mine_e]))}{at}; the finished "
                                f"version's thread {thread} {theirs})")
                else:
                    part.append(f"(thread {thread}'s {nth} {verb1} of an element of {name} is "
                                f"{describe(name, shape, np.array([mine_e]))}{at}, where the finished "
                                f"version's thread {thread} {verb} {describe(name, shape, np.array([their_e]))})")
            out.append("".join(x if x.startswith(",") or i == 0 else " " + x for i, x in enumerate(part)))
        return (f"first divergence from the finished version, traced on the emulator: in {which}, block "
                f"{_block_coords(blk, a.grid)} " + "; it ".join(out) + ".")
    shared = (_first_input_divergence(mine, theirs) or _first_shared_divergence(mine, theirs)
              or _first_value_divergence(mine, theirs))
    if shared:
        return shared
    if len(mine) != len(theirs):
        return (f"the kernel launches {len(mine)} time(s) where the finished version launches "
                f"{len(theirs)} time(s); the launches both make read and write the same elements.")
    return None
