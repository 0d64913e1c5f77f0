"""Naming a data race, as compute-sanitizer's racecheck does: both lines, both threads, the memory.

runtime.py's thread-order check only sees that rerunning a block with its threads in another order
changes an output. When it does, ``find`` reruns the sampled blocks, one at a time and from the same
inputs, in the module's counting build (csrc/counters.h: every load and store logged with its thread,
instruction and __syncthreads count), whose race finder names two threads of one block touching one
4-byte word between the same two barriers, at least one of them writing (atomics are not logged, so
they never race). ``describe`` turns that into the student's file:line and source text of each access,
the threads' (x, y, z), and the shared array (its name and element) or the argument it lies in.

The finder counts only __syncthreads: named barriers, mbarrier waits, __syncwarp and cp.async waits
order nothing for it. A cp.async's write of its destination is logged by the runtime for the issuing
thread, at the issue and again when a wait completes it, and each lane's 16-byte row of an ldmatrix
as that lane's read (counters.h race_site_pc: the race names the kernel lines that called the PTX);
TMA copies and wgmma's reads are not logged. Every finished solution, module 10's with all of those included, shows no race in
a counting build on any of its check cases (checked when this was written), so a race it reports is
one; but two lanes of one warp in a kernel that calls __syncwarp() (or a tile's sync) may be ordered
by it, and such a pair is left unnamed (the generic message stands). The finder looks for a pair of
two warps first (csrc/counters.h find_race), which no __syncwarp orders.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace

import numpy as np

from ..base import KernelFault, line_text
from .abi import DlInfo, libc, set_arrays
from .build import strip_code
from .faults import _block_coords
from .symbols import addr2line, callers, student_line


@dataclass
class Race:
    block: int                 # linear block id
    threads: tuple[int, int]   # linear thread ids: the first one writes
    writes: tuple[bool, bool]
    offsets: tuple[int, int]   # the two instructions, offsets in the counting library
    addr: int                  # the first byte of the 4-byte word both touch
    arg: int                   # index into the arrays handed to the counting library; -1: shared
    lib_path: str
    # Per access, where the runtime made it on the thread's behalf (a cp.async landing, a lane's row of
    # an ldmatrix): (file, line, kind 'c' or 'l', return addresses); None for the kernel's own access.
    sites: tuple = (None, None)


def find(kernel, run, copy_in, sample, arrays, bufs) -> Race | None:
    """Rerun the ``sample`` blocks one at a time in the counting build of ``kernel``'s module; the
    first race found, or None (no counting build, a fault, or no race: the order dependence is then
    something else, a value read before it is set)."""
    try:
        twin = kernel._module.counting_twin().get_function(kernel.name)
    except Exception:            # noqa: BLE001  (a build that fails here only loses the naming)
        return None
    lib = twin._module._lib
    _typed(lib)
    # The arrays of 4-byte elements or more only (global races on 1- and 2-byte arrays keep the
    # generic message): a merged access of such elements that starts inside a word once overflowed the
    # race finder's word buffer in counters.h. That is fixed; widening this needs its own checking.
    keep = [i for i, a in enumerate(arrays) if a.itemsize >= 4]
    set_arrays(lib, [bufs[i].addr for i in keep], [arrays[i].nbytes for i in keep], [i + 1 for i in keep])
    pcs, who, addr = (ctypes.c_uint64 * 2)(), (ctypes.c_int32 * 5)(), ctypes.c_uint64()
    lib.cudaemu_set_quiet(1)
    try:
        for b in sample:
            copy_in()
            lib.cudaemu_counters_begin()
            try:
                run([b], 0, "", twin)
            except KernelFault:
                return None
            finally:
                lib.cudaemu_counters_end()
                _discard_output(lib)
            if lib.cudaemu_counters_race(pcs, who, ctypes.byref(addr)):
                arg = int(who[4])
                return Race(int(b), (int(who[0]), int(who[1])), (bool(who[2]), bool(who[3])),
                            (int(pcs[0]), int(pcs[1])), int(addr.value),
                            keep[arg] if 0 <= arg < n else -1, str(twin._module._built.path),
                            tuple(_site(lib, int(pc)) for pc in pcs))
    finally:
        lib.cudaemu_set_quiet(0)
    return None


def _typed(lib) -> None:
    lib.cudaemu_counters_race.restype = ctypes.c_int
    lib.cudaemu_counters_race.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_int32),
                                          ctypes.POINTER(ctypes.c_uint64)]
    lib.cudaemu_counters_site.restype = ctypes.c_int
    lib.cudaemu_counters_site.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_char_p),
                                          ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_uint64)]


def _site(lib, pc: int):
    """(file, line, kind, return addresses) of a runtime site (counters.h race_site_pc), or None."""
    file, lk, frames = ctypes.c_char_p(), (ctypes.c_int32 * 2)(), (ctypes.c_uint64 * 8)()
    if not lib.cudaemu_counters_site(pc, ctypes.byref(file), lk, frames):
        return None
    return ((file.value or b"").decode(errors="replace"), int(lk[0]), chr(lk[1]), [int(f) for f in frames if f])


def _discard_output(lib) -> None:
    n = lib.cudaemu_take_output(None, 0)
    if n:
        lib.cudaemu_take_output(ctypes.create_string_buffer(n), n)


# ---------------------------------------------------------------------------------------------
# In the student's words.

def describe(race: Race, kernel, args, arg_slot, arrays, bufs, smem, shared_mem, grid, block) -> dict | None:
    """What racecheck would say: {'place', 'text'}; None where an access has no line in the student's
    file or __syncwarp() may order the pair (the generic message stands)."""
    module = kernel._module
    student = module.student_file
    code = strip_code(module.source or "")
    if race.threads[0] // 32 == race.threads[1] // 32 and _WARP_SYNC.search(code):
        return None              # two lanes of one warp that a __syncwarp() may order: not provably a race
    if _OTHER_SYNC.search(module.source or ""):
        return None              # named barriers or mbarrier waits may order the pair: the finder cannot tell
    places, helper = [], []
    for off, site in zip(race.offsets, race.sites):
        if site is None:
            places.append(_student_line(race.lib_path, off, student))
            helper.append(None)
        else:                    # the kernel line that called the PTX's helper, if any, names the place
            line = student_line(site[0], site[1], student)
            up = callers(SimpleNamespace(frames=site[3]), student, line) if line else []
            places.append(int(up[0].rsplit(":", 1)[1]) if up else line)
            helper.append(line if up else None)
    if None in places:
        # An access inside the emulator's headers: a warp collective (ldmatrix) that one lane runs for
        # the whole warp, so neither its line nor its thread is the student's.
        return None
    via = _via(module, places) if race.arg < 0 else None
    memory = _memory(race, kernel, args, arg_slot, arrays, bufs, smem, shared_mem, module, via)
    bc = _block_coords(race.block, grid)
    parts = []
    for k in range(2):
        kind = race.sites[k][2] if race.sites[k] else None
        rw = {"c": "writes it with a cp.async", "l": "reads it with an ldmatrix"}.get(
            kind, "writes it" if race.writes[k] else "reads it")
        t = _block_coords(race.threads[k], block)
        line = places[k]
        text = _text(module, student, line)
        if helper[k] and helper[k] != line:       # the call's line, then where its PTX is
            text = f"{text[:-1]}; its PTX at line {helper[k]})" if text else f" (its PTX at line {helper[k]})"
        parts.append(f"thread {t} {rw} at {student}:{line}{text}")
    advice = _advice(race, places, getattr(module, "source", "") or "")
    if race.sites[0] and race.sites[0][2] == "c" and not race.writes[1]:
        advice = (f"A cp.async's bytes belong to the thread that issued it until that thread's "
                  f"cp.async.wait_group covers the copy; other threads may read them only after a "
                  f"__syncthreads() that follows that wait. Put one between the wait and the read (line "
                  f"{places[1]}).")
    if via and not memory.startswith(via + "["):
        memory += f", which both lines index as {via}[...]"
    text = (f"data race in block {bc} on {memory}: {parts[0]}, and {parts[1]}, and no "
            f"__syncthreads() separates the two accesses (both fall between the same two barriers of their "
            f"threads), so on a GPU either may come first. {advice}")
    place = f"{student}:{places[0]}"
    return {"place": place, "text": text}


# Warp-level barriers order the lanes of a warp, which the finder's __syncthreads count does not see.
_WARP_SYNC = re.compile(r"\b__syncwarp\b|\btiled_partition\b|\bcoalesced_threads\b|\bbar\.warp\.sync\b")
# Barriers of a part of the block (inline PTX in asm strings, so searched in the raw source), which the
# finder's count does not see either: a pair they order would be named as a race that is none.
_OTHER_SYNC = re.compile(r"\bbar\.(?:sync|arrive|red)\b|\bbarrier\.(?:sync|arrive)\b|\bmbarrier\.")



def _student_line(lib_path: str, off: int, student: str) -> int | None:
    """The student's line of an instruction (the innermost frame of its inline chain in the student's
    file). ``off`` is a return address (the access hook's): one byte back lands in the call."""
    for f, n in addr2line(lib_path, [off - 1])[0]:
        if os.path.basename(f) == os.path.basename(student) and n > 0:
            return n
    return None


def _text(module, student: str, line: int) -> str:
    text = line_text(getattr(module, "source", "") or "", line)
    if text is None:
        import linecache
        text = linecache.getline(student, line)
    text = text or ""
    code = strip_code(text)
    cut = next((m.start() for m in re.finditer("//", text) if code[m.start()] == " "), None)
    text = " ".join((text if cut is None else text[:cut]).split())      # without its // comment
    if len(text) > 100:
        text = text[:97] + "..."
    return f" (`{text}`)" if text else ""


def _advice(race: Race, places, source: str) -> str:
    """Where the barrier is missing, from where the two lines and the __syncthreads() between them
    stand in the code (a loop brings a later line's access back before an earlier line's)."""
    a, b = places
    if race.writes[1]:
        return ("Two threads write the same word: either the index lands on another thread's element "
                "(each element must be written by one thread), or a __syncthreads() is missing between two "
                "phases that both write it.")
    if a == b:
        return "Put a __syncthreads() between the write and the read."
    lo, hi = min(a, b), max(a, b)
    barrier = next((n for n in range(lo + 1, hi)
                    if re.search(r"\b__syncthreads\w*\s*\(", strip_code(line_text(source, n) or ""))), None)
    if a < b and not barrier:
        return (f"Put a __syncthreads() between the write (line {a}) and the read (line {b}), so that every "
                "thread has stored its part before any thread reads it.")
    if a > b and not barrier:
        return (f"The write (line {a}) overwrites what the read (line {b}) still needs: put a __syncthreads() "
                "after the read and before the write.")
    if a < b:
        return (f"The __syncthreads() at line {barrier} lies between the two lines in the code, so the write is "
                "a later pass of a loop overwriting what other threads still read in the pass before: put a "
                "__syncthreads() after the read, at the end of the loop body, before the next pass writes.")
    return (f"The __syncthreads() at line {barrier} lies between the two lines in the code, so the read is a "
            "later pass of a loop reading what other threads have not yet written in the pass before: put a "
            "__syncthreads() after the write, at the end of the loop body, before the next pass reads.")


# ---------------------------------------------------------------------------------------------
# The memory: a static __shared__ array (by the library's symbols), the dynamic shared memory
# (`extern __shared__`, by its name in the source), or an array argument.

_ELEMENT_BYTES = {
    "float": 4, "double": 8, "int": 4, "unsigned": 4, "unsigned int": 4, "uint32_t": 4, "int32_t": 4,
    "long long": 8, "unsigned long long": 8, "int64_t": 8, "uint64_t": 8, "short": 2, "unsigned short": 2,
    "char": 1, "unsigned char": 1, "signed char": 1, "uint8_t": 1, "int8_t": 1, "bool": 1, "__half": 2,
    "half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "__half2": 4, "half2": 4, "__nv_bfloat162": 4,
    "nv_bfloat162": 4, "float2": 8, "float4": 16, "int2": 8, "int4": 16, "uint2": 8, "uint4": 16,
    "double2": 16,
}
_QUALIFIERS = re.compile(r"\b(?:__align__|alignas)\s*\(\s*\w+\s*\)|\b(?:const|volatile|static)\b")


def _memory(race: Race, kernel, args, arg_slot, arrays, bufs, smem, shared_mem, module, via):
    """The word, in words: an element of an argument, of a static __shared__ array, or a byte of the
    dynamic shared memory (with the element of the pointer both lines index, ``via``, if known)."""
    env = _constants(module, kernel.name)
    source = getattr(module, "source", "") or ""
    decls = _shared_declarations(source, env)
    if race.arg >= 0:
        slot = race.arg
        i = arg_slot.index(slot)
        p, a = kernel.params[i], arrays[slot]
        flat = (race.addr - bufs[slot].addr) // max(a.itemsize, 1)
        where = np.unravel_index(flat, a.shape) if a.ndim > 1 else (flat,)
        return f"element {tuple(int(x) for x in where)} of argument {i + 1} ({p.ctype} {p.name})"
    if smem is not None and smem.addr <= race.addr < smem.addr + shared_mem:
        off = race.addr - smem.addr
        ext = [d for d in decls.values() if d["extern"]]
        if not ext:
            return f"byte {off} of the dynamic shared memory (extern __shared__)"
        # All of them name the same memory: this kernel's own declaration, where a module has several.
        start = _kernel_start(source, kernel.name)
        d = min(ext, key=lambda e: (e["name"] != via, e["pos"] < start, e["pos"]))
        size = _ELEMENT_BYTES.get(d["type"])
        elem = f": {d['name']}[{off // size}]" if size and size > 1 else ""
        where = (f"byte {off} of the dynamic shared memory (`extern __shared__ {d['type']} {d['name']}[]`"
                 f"{elem})")
        ptr = _pointers(source, decls, env).get(via) if via else None
        if ptr and via != d["name"] and ptr[0] <= off:
            return f"{via}[{(off - ptr[0]) // ptr[1]}], {where}"
        return where
    sym = _static_symbol(race.lib_path, race.addr)
    if sym is not None:
        name, off, nbytes = sym
        d = decls.get(name)
        size = _ELEMENT_BYTES.get(d["type"]) if d else None
        dims = d["dims"] if d else []
        known = bool(dims) and all(isinstance(x, int) and x > 0 for x in dims)
        if size is None and known and nbytes:
            size = nbytes // int(np.prod(dims)) or None
        if size:
            flat = off // size
            if known and len(dims) > 1 and flat < np.prod(dims):
                idx = "][".join(str(int(x)) for x in np.unravel_index(flat, dims))
            else:
                idx = str(flat)
            shown = "".join(f"[{x}]" for x in (d["raw"] if d else []))
            decl = f"`__shared__ {d['type']} {name}{shown}`" if d else "static __shared__"
            return f"{name}[{idx}] ({decl})"
        return f"byte {off} of the static __shared__ array {name}"
    start = _section_start(race.lib_path)
    info = DlInfo()
    if start is not None and libc.dladdr(ctypes.c_void_p(race.addr), ctypes.byref(info)) and info.dli_fbase:
        return f"static shared memory at byte offset {race.addr - info.dli_fbase - start}"
    return "shared memory"


def _kernel_start(source: str, kernel_name: str) -> int:
    base = re.escape(kernel_name.split("<")[0].strip())
    m = re.search(r"__global__[^;{]*?\b" + base + r"\s*\(", strip_code(source))
    return m.start() if m else 0


def _shared_declarations(source: str, env: dict | None = None) -> dict[str, dict]:
    """name -> {'name', 'type', 'dims' (ints where they evaluate, else the text), 'extern'} for every
    __shared__ array the source declares (`__shared__ float m_s[W][G], l_s[W][G];` is two)."""
    code = strip_code(source)
    out = {}
    for m in re.finditer(r"\b(extern\s+)?__shared__\s+([^;{}]*);", code):
        body = m.group(2)
        first = re.match(r"((?:[^\[,]*?\s)|(?:[^\[,]*?[*&]))\s*([A-Za-z_]\w*)\s*(?=\[|,|$)", body)
        if not first:
            continue
        ctype = " ".join(_QUALIFIERS.sub(" ", first.group(1)).split())
        for d in re.finditer(r"(?:^|,)\s*(?:[^,\[]*?\s)?\**\s*([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*)", body):
            if not d.group(2) or d.group(1) in ctype.split():
                continue
            raw = [x.strip() for x in re.findall(r"\[([^\]]*)\]", d.group(2))]
            dims = [_evaluate(x, env or {}) if x else None for x in raw]
            out.setdefault(d.group(1), {"name": d.group(1), "type": ctype, "extern": bool(m.group(1)), "pos": m.start(),
                                        "dims": [v if v is not None else x for v, x in zip(dims, raw)],
                                        "raw": raw})
    return out


def _constants(module, kernel_name: str) -> dict[str, str]:
    """The names a kernel's sizes are written in: -D options, #defines, constexpr / const integers,
    and the template arguments of this instantiation (`flash_forward<64>` with `template <int D>`)."""
    source = getattr(module, "source", "") or ""
    code = strip_code(source)
    env: dict[str, str] = {}
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]+)$", code, re.M):
        env[m.group(1)] = m.group(2).strip()
    for m in re.finditer(r"\b(?:constexpr|const)\s+(?:static\s+)?(?:unsigned\s+|signed\s+)?"
                         r"(?:int|long|long long|size_t|short|char|uint32_t|int32_t|int64_t)?\s+"
                         r"([A-Za-z_]\w*)\s*=\s*([^;,{}]+)[;,]", code):
        env.setdefault(m.group(1), m.group(2).strip())
    for o in getattr(module, "_options", ()) or ():
        m = re.match(r"^(?:-D|--define-macro=)([A-Za-z_]\w*)(?:=(.*))?$", str(o))
        if m:
            env[m.group(1)] = m.group(2) if m.group(2) is not None else "1"
    t = re.match(r"^\s*([A-Za-z_]\w*)\s*<(.*)>\s*$", kernel_name)
    if t:
        base, targs = t.group(1), [a.strip() for a in t.group(2).split(",")]
        for m in re.finditer(r"template\s*<([^<>]*)>\s*(?:__global__|extern|void|__launch_bounds__)[^;{]*?\b"
                             + re.escape(base) + r"\s*\(", code):
            names = [re.findall(r"[A-Za-z_]\w*", p)[-1] for p in m.group(1).split(",") if p.strip()]
            if len(names) == len(targs):
                env.update(zip(names, targs))
                break
    return env


def _evaluate(expr: str, env: dict, depth: int = 0) -> int | None:
    """An integer constant expression, its names taken from ``env``; None where it is not one."""
    if depth > 20:
        return None
    text = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", expr)
    text = re.sub(r"\(\s*(?:unsigned|int|size_t|long|long long|unsigned int)\s*\)", "", text)
    text = re.sub(r"\bstatic_cast\s*<[^>]*>", "", text)

    def name(m):
        if m.group(0) not in env:
            raise KeyError(m.group(0))
        v = _evaluate(env[m.group(0)], env, depth + 1)
        if v is None:
            raise KeyError(m.group(0))
        return f"({v})"
    try:
        text = re.sub(r"\b[A-Za-z_]\w*\b", name, text)
    except KeyError:
        return None
    if not re.fullmatch(r"[\d\s+\-*/%()<>&|^~]*", text) or not text.strip() or "**" in text or len(text) > 400:
        return None
    try:
        v = eval(text.replace("/", "//"), {"__builtins__": {}}, {})   # digits and operators only
    except Exception:            # noqa: BLE001
        return None
    return int(v) if isinstance(v, int) else None


def _pointers(source: str, decls: dict, env: dict) -> dict[str, tuple[int, int]]:
    """name -> (byte offset in the dynamic shared memory, element bytes) of the extern __shared__
    array and of every pointer carved out of it whose offset evaluates (`float* v_s = k_s + D * BN;`)."""
    out = {d["name"]: (0, _ELEMENT_BYTES.get(d["type"], 1)) for d in decls.values() if d["extern"]}
    if not out:
        return out
    code = strip_code(source)
    types = "|".join(sorted(map(re.escape, _ELEMENT_BYTES), key=len, reverse=True))
    pat = re.compile(r"(?:const\s+)?(" + types + r"|elem_t|\w+)\s*\*\s*(?:const\s+)?(?:__restrict__\s+)?"
                     r"([A-Za-z_]\w*)\s*=\s*([^;]+);")

    def offset(expr: str):
        expr = expr.strip()
        m = re.fullmatch(r"reinterpret_cast\s*<\s*(?:const\s+)?(\w+)\s*\*\s*>\s*\((.*)\)\s*(?:\+\s*(.+))?", expr)
        if m:
            inner = offset(m.group(2))
            size = _ELEMENT_BYTES.get(m.group(1)) or env_size(m.group(1))
            if inner is None or size is None:
                return None
            add = _evaluate(m.group(3), env) if m.group(3) else 0
            return (inner[0] + add * size, size) if add is not None else None
        m = re.fullmatch(r"&\s*([A-Za-z_]\w*)\s*\[(.*)\]", expr)
        if m and m.group(1) in out:
            k = _evaluate(m.group(2), env)
            base = out[m.group(1)]
            return (base[0] + k * base[1], base[1]) if k is not None else None
        m = re.fullmatch(r"([A-Za-z_]\w*)\s*(?:\+\s*(.+))?", expr)
        if m and m.group(1) in out:
            k = _evaluate(m.group(2), env) if m.group(2) else 0
            base = out[m.group(1)]
            return (base[0] + k * base[1], base[1]) if k is not None else None
        return None

    def env_size(t):
        alias = re.search(r"\b(?:using\s+" + re.escape(t) + r"\s*=\s*([\w ]+);|typedef\s+([\w ]+?)\s+"
                          + re.escape(t) + r"\s*;)", code)
        if alias:
            return _ELEMENT_BYTES.get(" ".join((alias.group(1) or alias.group(2)).split()))
        return None

    for m in pat.finditer(code):
        if m.group(2) in out:
            continue
        got = offset(m.group(3))
        if got is not None:
            size = _ELEMENT_BYTES.get(m.group(1)) or env_size(m.group(1)) or got[1]
            out[m.group(2)] = (got[0], size)
    return out


def _via(module, places) -> str | None:
    """The shared array or pointer into shared memory that both lines index (`p_s[...]`), if one."""
    source = getattr(module, "source", "") or ""
    code = strip_code(source)
    shared = set(_shared_declarations(source))
    # Pointers set from a shared array or from another such pointer (`float* p_s = v_s + N * D;`).
    changed = True
    while changed:
        changed = False
        for m in re.finditer(r"\*\s*(?:const\s+)?([A-Za-z_]\w*)\s*=\s*([^;]*);", code):
            if m.group(1) not in shared and set(re.findall(r"[A-Za-z_]\w*", m.group(2))) & shared:
                shared.add(m.group(1))
                changed = True
    named = []
    for line in places:
        text = line_text(source, line) if line else None
        named.append([n for n in re.findall(r"\b([A-Za-z_]\w*)\s*\[", strip_code(text or "")) if n in shared])
    both = [n for n in named[0] if n in named[1]]
    return both[0] if both else None


@lru_cache(maxsize=None)
def _symbols(lib_path: str) -> tuple:
    """(offset, size, name) of the library's data symbols, from nm."""
    tool = shutil.which("nm") or shutil.which("llvm-nm")
    if not tool:
        return ()
    try:
        out = subprocess.run([tool, "-C", "-S", "--defined-only", lib_path], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    syms = []
    for line in out.splitlines():
        m = re.match(r"^([0-9a-fA-F]+)\s+([0-9a-fA-F]+)\s+[bBdDsS]\s+(.*)$", line)
        if m:
            name = m.group(3).strip()
            syms.append((int(m.group(1), 16), int(m.group(2), 16), name.rsplit("::", 1)[-1]))
    return tuple(syms)


@lru_cache(maxsize=None)
def _section_start(lib_path: str) -> int | None:
    tool = shutil.which("nm") or shutil.which("llvm-nm")
    try:
        out = subprocess.run([tool, lib_path], capture_output=True, text=True, timeout=30).stdout if tool else ""
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"^([0-9a-fA-F]+)\s+\w\s+__start_cuda_shared$", out, re.M)
    return int(m.group(1), 16) if m else None


def _static_symbol(lib_path: str, addr: int):
    """(name, byte offset in it, its size) of the static __shared__ variable at host address ``addr``."""
    info = DlInfo()
    if not libc.dladdr(ctypes.c_void_p(addr), ctypes.byref(info)) or not info.dli_fbase:
        return None
    off = addr - info.dli_fbase
    for start, size, name in _symbols(lib_path):
        if start <= off < start + size:
            if name == "template_shared":     # the arena of a template's __shared__ variables
                return _template_slot(lib_path, off - start)
            return name, off - start, size
    return None


def _template_slot(lib_path: str, off: int):
    """(name, byte offset in it, its size) of the template __shared__ variable at byte ``off`` of the
    runtime's arena (csrc/emu_runtime.cpp), as the library that ran gave out its slots."""
    fn = ctypes.CDLL(lib_path).cudaemu_template_shared_slot
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                   ctypes.POINTER(ctypes.c_char_p)]
    at, size, name = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_char_p()
    if not fn(off, ctypes.byref(at), ctypes.byref(size), ctypes.byref(name)):
        return None
    return name.value.decode(), off - at.value, size.value
