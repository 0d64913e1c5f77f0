"""The emulator's findings in the course's words: each function here returns the exception that
runtime.py raises for one kind of finding (a fault record from the C side, a data race, a write
past a buffer's end, outputs made from unwritten shared memory).

The messages name the student's line where one is known, the block and thread, the argument by
position, type and name, and the usual cause, because they are what a student reads first.
"""
from __future__ import annotations

import os
import re

import numpy as np

from ..base import KernelFault
from .abi import F_BUS, F_FPE, F_ILL, F_INTERRUPT, F_SEGV, F_SETUP, F_STACK, FaultRecord
from .build import origin
from .symbols import callers, name_wait_callers, source_line, student_line


def _argument(kernel, args, arg_slot, slot):
    """(position, Param, value) of the first argument that uses guarded buffer ``slot``."""
    i = arg_slot.index(slot)
    return i, kernel.params[i], args[i]


def launch_fault(kernel, rec: FaultRecord, args, arg_slot, bufs, smem, shared_mem,
                 what: str) -> BaseException:
    """The exception for a failed cudaemu_launch: KernelFault, or KeyboardInterrupt on Ctrl-C.

    The KernelFault carries ``place`` (file:line or None) and ``fpe_invalid`` (the first use of
    the poison trapped), which the runtime's search for a poisoned value's line reads.
    """
    module = kernel._module
    who = (f"block ({rec.block[0]},{rec.block[1]},{rec.block[2]}), thread "
           f"({rec.thread[0]},{rec.thread[1]},{rec.thread[2]})")
    file = rec.file.decode(errors="replace")
    text = name_wait_callers(rec.text.decode(errors="replace"), module.student_file)
    kind = rec.kind
    if kind == F_STACK and any(b.locate(rec.addr) is not None
                               for b in [*bufs, *([smem] if smem is not None else [])]):
        # The runtime counts a fault just below a fiber's stack as an overflow; one in the guard
        # of an argument (mapped there by chance) is an out-of-bounds access.
        kind = F_SEGV
    via = ""
    if kind in (F_SEGV, F_BUS, F_FPE, F_ILL, F_STACK, F_INTERRUPT):
        place = source_line(rec, module.student_file)
    else:
        place = f"{file}:{rec.line}" if file and rec.line > 0 else None
        mine = student_line(file, rec.line, module.student_file) if place else None
        if mine is not None:
            up = [c for c in callers(rec, module.student_file, mine)
                  if not _is_definition(module, int(c.rsplit(":", 1)[1]))]
            if up:
                via = f" (in a function called from {', then '.join(up)})"
    if rec.kind == F_INTERRUPT:
        return KeyboardInterrupt(f"{kernel.name} interrupted at {place or 'an unknown line'}, "
                                 f"in {who}{what}")
    if kind in (F_SEGV, F_BUS):
        msg = _describe_access(kernel, rec, args, arg_slot, bufs, smem, shared_mem)
    elif kind == F_STACK:
        kb = int(os.environ.get("GRADER_CPU_STACK_KB") or 128)
        msg = (f"a thread overflowed its stack ({kb} KB in the emulator): per-thread local "
               "arrays that large do not fit in registers on a GPU either and spill to slow "
               "local memory. Keep per-thread arrays small (or set GRADER_CPU_STACK_KB).")
    elif rec.kind == F_FPE:
        msg = {1: "integer division by zero", 2: "integer overflow in a division "
               "(INT_MIN / -1)", 7: "invalid floating-point operation on a NaN"}.get(
                   rec.si_code, "arithmetic exception") + "."
    elif rec.kind == F_ILL:
        msg = ("an index out of bounds of a fixed-size array (a per-thread array like s[TM][TN], or a "
               "__shared__ tile): check the loop bound or index on this line (`<=` where `<` is due?). "
               "If no array is indexed here: the thread reached code the compiler marked unreachable, "
               "typically a function declared to return a value that ends without `return`.")
    elif rec.kind == F_SETUP:
        msg = f"the emulator could not start the launch: {text}"
    else:
        msg = _name_arguments(text, kernel, args)
    fault = KernelFault(f"{place or 'line unknown'}: {kernel.name}: {msg}{via} ({who}){what}")
    fault.place = place
    fault.fpe_invalid = rec.kind == F_FPE and rec.si_code == 7
    return fault


def _name_arguments(text: str, kernel, args) -> str:
    """The runtime's "array argument 2 (1024 bytes)" with the parameter's type and name."""
    def name(m):
        i = int(m.group(1)) - 1
        if not 0 <= i < len(kernel.params) or not 0 <= i < len(args):
            return m.group(0)
        p, a = kernel.params[i], args[i]
        return (f"argument {i + 1} ({p.ctype} {p.name}: {getattr(a, 'size', '?')} "
                f"{getattr(a, 'dtype', '')} elements, {m.group(2)} bytes)")
    return re.sub(r"\barray argument (\d+) \((\d+) bytes\)", name, text)


def _is_definition(module, line: int) -> bool:
    """Whether the student's ``line`` starts a function (line tables name it for inlined code)."""
    from ..base import line_text
    text = line_text(getattr(module, "source", "") or "", line)
    return text is None or bool(re.search(r"\b__(?:global|device)__\b", text))


def _describe_access(kernel, rec, args, arg_slot, bufs, smem, shared_mem) -> str:
    rw = {1: "write", 0: "read"}.get(rec.is_write, "access")
    addr = rec.addr
    for slot, b in enumerate(bufs):
        loc = b.locate(addr)
        if loc is None:
            continue
        side, off = loc
        i, p, a = _argument(kernel, args, arg_slot, slot)
        item = a.itemsize or 1
        idx = off // item
        if side == "after":
            beyond = f"{idx - a.size + 1} element(s) past the last one"
        elif side == "before":
            beyond = f"{-idx} element(s) before the first one"
        else:
            beyond = "inside the buffer (a misaligned vector access?)"
        return (f"out-of-bounds {rw} of argument {i + 1} ({p.ctype} {p.name}): element "
                f"{idx}, but the buffer holds {a.size} {a.dtype} elements (shape "
                f"{tuple(a.shape)}); the index is {beyond}. Check the bounds test on this "
                "line (the last tile may be partial), and the index itself: an offset, head or "
                "stride of another array (a query head where a kv head is due, or the other way round) lands outside "
                "this one.")
    if smem is not None:
        loc = smem.locate(addr)
        if loc is not None:
            side, off = loc
            return (f"{rw} of dynamic shared memory at byte {off} (extern __shared__), but "
                    f"the launch gave shared_mem={shared_mem} bytes. Either the kernel "
                    "indexes past its tiles or the launch asks for too little: compute "
                    "shared_mem from the same tile sizes the kernel uses.")
    if rec.kind == F_SEGV and rec.si_code == 128 and addr == 0:
        return (f"invalid {rw}: the processor refused the address without reporting it. On "
                "x86-64 that is either an address far outside every mapping (computed from a "
                "garbage index, say one read from memory nothing wrote) or a 16-byte vector access "
                "(float4 / int4) at an address that is not a multiple of 16 bytes "
                "(reinterpret_cast<float4*>(p + k) needs k to be a multiple of 4).")
    if addr < 65536:
        return (f"{rw} through a null pointer (address {addr:#x}). A pointer argument "
                "that is 0, or dynamic shared memory used with shared_mem=0?")
    return (f"{rw} of an address that lies in none of the launch's buffers: a wild pointer (its "
            "value depends on where this run's buffers were placed, so it is not shown). Look for "
            "an index that went negative in unsigned arithmetic "
            "(e.g. `row - 1` with row == 0 as unsigned), or a pointer to a local variable "
            "of another thread.")


def race_fault(kernel, args, arg_slot, slot, ref, got, idx, ndiff, sample, grid,
               how, named: dict | None = None, traced: str | None = None) -> KernelFault:
    """Rerunning ``sample`` blocks with their threads in another order (``how``) changed the
    output in guarded buffer ``slot``: ``ref`` became ``got``, first at flat index ``idx``.
    ``named``: the race that explains it (races.describe: 'place' and 'text'), when one was found;
    else ``traced``: where the two orders' traced runs first part (runtime._order_divergence)."""
    i, p, _ = _argument(kernel, args, arg_slot, slot)
    where = np.unravel_index(idx, ref.shape) if ref.ndim > 1 else (idx,)
    blocks = ", ".join(str(_block_coords(b, grid)) for b in sample[:4])
    observed = (f"running block(s) {blocks} with their threads {how} instead of "
                f"forward changed argument {i + 1} ({p.ctype} {p.name}) at index "
                f"{tuple(int(x) for x in where)}: {_num(ref.flat[idx])} became {_num(got.flat[idx])} "
                f"({ndiff} element(s) differ)")
    if named is not None:
        fault = KernelFault(
            f"{named['place']}: {kernel.name}: {named['text']} What was observed: the result depends on "
            f"the order in which the threads of a block run: {observed}.")
        fault.place = named["place"]
        return fault
    return KernelFault(
        f"{kernel.name}: the result depends on the order in which the threads of a block run. "
        f"{observed[:1].upper()}{observed[1:]}. Most often it is a data race: some thread reads memory that another thread "
        "writes, with no barrier between them: a __syncthreads() missing between writing a "
        "shared-memory tile and reading it, or at the end of the loop, before the tile is "
        "overwritten for the next iteration; or an index that reaches past the thread's own part "
        "into a neighbour's (a loop bound one too far, <= where < is due). A value used before "
        "it is ever set does this too: a local variable or accumulator read (or added to) before "
        "its first assignment holds whatever was left in its place, which changes with the order "
        "in which the threads run." + (f"\n  observed: traced again forward and {how}: {traced}" if traced else ""))


def block_order_fault(kernel, args, arg_slot, slot, ref, got, idx, ndiff) -> KernelFault:
    """Running the blocks last-first instead of first-last changed guarded buffer ``slot``."""
    i, p, _ = _argument(kernel, args, arg_slot, slot)
    where = np.unravel_index(idx, ref.shape) if ref.ndim > 1 else (idx,)
    return KernelFault(
        f"{kernel.name}: the result depends on the order in which the blocks run: running them last "
        f"block first changed argument {i + 1} ({p.ctype} {p.name}) at index "
        f"{tuple(int(x) for x in where)}: {_num(ref.flat[idx], 9)} became {_num(got.flat[idx], 9)} "
        f"({ndiff} element(s) differ). Two blocks write the same elements, and on a GPU, where blocks "
        "run in any order and at once, either may win. Either a block stores past its own part (a guard "
        "against the end of the whole array, where the end of the block's own rows, sequence or split is "
        "due): every output element must belong to exactly one block. Or the store's index misses a term (a "
        "sequence's start, the head, a stride), so blocks land on the same elements. Or several blocks add "
        "into the same elements on purpose, with a plain += (read, add, write back): on a GPU their updates "
        "overwrite each other; add with atomicAdd.")


def canary_fault(kernel, args, arg_slot, slot, off, count, place=None) -> KernelFault:
    """``count`` bytes around guarded buffer ``slot`` were overwritten, from byte ``off``. ``place``:
    (file:line, who stores there) from a traced rerun (runtime._canary_store), or None."""
    i, p, a = _argument(kernel, args, arg_slot, slot)
    side = "before its start" if off < 0 else "past its end"
    what = (f"{kernel.name}: out-of-bounds write of argument {i + 1} ({p.ctype} {p.name}): "
            f"{count} byte(s) {side} (byte offset {off}; the buffer holds {a.size} "
            f"{a.dtype} elements, {a.nbytes} bytes) were overwritten.")
    if place is not None:
        fault = KernelFault(f"{place[0]}: {what} Run again traced, {place[1]}: look at the bound that "
                            "lets this store reach past the last element (or below 0).")
        fault.place = place[0]
        return fault
    return KernelFault(f"{what} The emulator noticed it after the launch, so it cannot name the line: "
                       "look for an index that can reach past the last element or below 0.")


def poison_fault(kernel, args, arg_slot, arrays, poisoned, place) -> KernelFault:
    """Output ``arrays[slot]`` holds the shared-memory poison where ``hit`` is set
    (``poisoned`` = (slot, hit)); ``place`` is the line of its first use, if found."""
    slot, hit = poisoned
    a = arrays[slot]
    i, p, _ = _argument(kernel, args, arg_slot, slot)
    first = int(np.flatnonzero(hit.ravel())[0])
    where = np.unravel_index(first, a.shape) if a.ndim > 1 else (first,)
    used = (f" The first arithmetic on such a value is at {place}." if place else "")
    return KernelFault(
        f"{place or 'line unknown'}: {kernel.name}: argument {i + 1} ({p.ctype} {p.name}) "
        f"received {int(hit.sum())} value(s) computed from shared memory that no thread of "
        f"the block had written (the first at index {tuple(int(x) for x in where)}).{used} "
        "Shared memory is not zeroed when a block starts: the emulator fills it with NaN to "
        "show such reads. Three ways to get there: the rows of the last K/V tile past the end "
        "of the sequence are never loaded, yet are multiplied by a zero weight (0 × NaN is NaN; "
        "on a GPU, 0 × garbage): store zeros in those rows, or skip them; a tile is read before "
        "it is written (__syncthreads() too late); or the read's index lands where nothing was "
        "stored (a row stride or an offset of another tile, or past the rows that were).")


def _num(x, digits=7) -> str:
    return f"{float(x):.{digits}g}" if np.asarray(x).dtype.kind == "f" else str(int(x))


def _block_coords(b: int, grid) -> tuple[int, int, int]:
    return (b % grid[0], (b // grid[0]) % grid[1], b // (grid[0] * grid[1]))
