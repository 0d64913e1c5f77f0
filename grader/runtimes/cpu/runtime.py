"""The CPU runtime: the same CUDA source and launch call as on a GPU, run by the emulator.

    rt = CpuRuntime()
    kernel = rt.compile(SOURCE).get_function("flash_forward")
    kernel(grid, block, (q, k, v, o, lse, rt.int32(n), rt.float32(scale)), shared_mem=nbytes)

A launch copies every array argument into guarded memory, runs all blocks (threads as fibers, see
csrc/emu_runtime.cpp), then, to catch a missing __syncthreads, runs a few blocks again from the
same inputs with their threads in reverse and in shuffled order and compares. Any fault becomes a
KernelFault naming the student's file and line.
"""
from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from ..base import (CompileError, KernelFault, LaunchError, Param, Runtime, RuntimeUnavailable,
                    check_args, check_launch, full_source, parse_signatures)
from . import build as _build
from . import nvrtc as _nvrtc
from .guarded import GuardedPool

DEFAULT_SMEM = 48 * 1024
OPTIN_SMEM = 227 * 1024
MAX_THREADS = 1024
POISON32 = 0x7FBAD000
# The same NaN widened to double (payload shifted, quiet bit and sign masked off when compared).
POISON64 = int(np.array([np.float64(np.array([POISON32], np.uint32).view(np.float32)[0])])
               .view(np.uint64)[0]) & 0x7FF7FFFFFFFFFFFF


class _FaultRecord(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("is_write", ctypes.c_int32),
                ("si_code", ctypes.c_int32), ("line", ctypes.c_int32),
                ("addr", ctypes.c_uint64), ("pc", ctypes.c_uint64),
                ("frames", ctypes.c_uint64 * 8), ("sp_word", ctypes.c_uint64),
                ("block", ctypes.c_uint32 * 3),
                ("thread", ctypes.c_uint32 * 3), ("file", ctypes.c_char * 256),
                ("text", ctypes.c_char * 2048)]


F_SEGV, F_BUS, F_FPE, F_ILL, F_BARRIER, F_WARP, F_DEADLOCK, F_TRAP, F_LIVELOCK, F_INTERRUPT, \
    F_STACK, F_SETUP = range(1, 13)


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


_libc = ctypes.CDLL(None)
_libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
_loaded: dict[str, ctypes.CDLL] = {}
_launch_lock = threading.Lock()  # the emulator's scheduler state is per process


def nvrtc_status() -> str:
    return _nvrtc.nvrtc_status()


def host_compiler_status() -> str:
    return _build.compiler_status()


def _load(path: Path) -> ctypes.CDLL:
    key = str(path)
    if key not in _loaded:
        lib = ctypes.CDLL(key, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        lib.cudaemu_launch.restype = ctypes.c_int
        lib.cudaemu_launch.argtypes = [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32),
            ctypes.POINTER(ctypes.c_uint32), ctypes.c_void_p, ctypes.c_uint64,
            ctypes.POINTER(ctypes.c_int64), ctypes.c_int64, ctypes.c_int, ctypes.c_uint64,
            ctypes.POINTER(_FaultRecord)]
        for fn in ("cudaemu_static_shared_bytes", "cudaemu_float_atomics",
                   "cudaemu_fault_record_size", "cudaemu_take_output"):
            getattr(lib, fn).restype = ctypes.c_uint64
        lib.cudaemu_take_output.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
        lib.cudaemu_set_quiet.argtypes = [ctypes.c_int]
        lib.cudaemu_set_trap_invalid.argtypes = [ctypes.c_int]
        if lib.cudaemu_fault_record_size() != ctypes.sizeof(_FaultRecord):
            raise CompileError("the emulator runtime and its Python side disagree on the fault "
                               "record layout (a stale build cache? delete "
                               f"{_build.cache_dir()})")
        _loaded[key] = lib
    return _loaded[key]


# ---------------------------------------------------------------------------------------------
# Source lines of faulting instructions.

def _addr2line(lib_path: str, offsets: list[int]) -> list[list[tuple[str, int]]]:
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


def _source_line(rec: _FaultRecord, student_file: str) -> str | None:
    """'file:line' of the faulting instruction in the student's file, if it can be found."""
    addrs = [rec.pc] + [a for a in [rec.sp_word, *rec.frames] if a]
    places = []
    for i, a in enumerate(addrs):
        info = _DlInfo()
        if not _libc.dladdr(ctypes.c_void_p(a), ctypes.byref(info)) or not info.dli_fname:
            continue
        # A return address points after the call; step back into it.
        places.append((info.dli_fname.decode(), a - (info.dli_fbase or 0) - (1 if i else 0)))
    by_lib: dict[str, list[int]] = {}
    for lib, off in places:
        by_lib.setdefault(lib, []).append(off)
    found = {}
    for lib, offs in by_lib.items():
        for off, chain in zip(offs, _addr2line(lib, offs)):
            found[(lib, off)] = chain
    for lib, off in places:
        for f, line in found.get((lib, off), []):
            if os.path.basename(f) == os.path.basename(student_file) and line > 0:
                return f"{student_file}:{line}"
    return None


# ---------------------------------------------------------------------------------------------

def _is_array(a) -> bool:
    return isinstance(a, np.ndarray)


_POINTEE_DTYPES = {
    "float": [np.float32], "double": [np.float64], "int": [np.int32], "unsigned int": [np.uint32],
    "long long": [np.int64], "unsigned long long": [np.uint64], "int64_t": [np.int64],
    "uint64_t": [np.uint64], "short": [np.int16], "unsigned short": [np.uint16, np.float16],
    "char": [np.int8, np.uint8, np.bool_], "unsigned char": [np.uint8, np.int8, np.bool_],
    "bool": [np.bool_, np.uint8], "__half": [np.float16], "float2": [np.float32],
    "float4": [np.float32], "int2": [np.int32], "int4": [np.int32], "__half2": [np.float16],
}


class CpuKernel:
    """Callable like a CuPy RawKernel: ``kernel(grid, block, args, shared_mem=0)``."""

    def __init__(self, module: "CpuModule", name: str, index: int, params: list[Param] | None):
        self._module, self.name, self._index = module, name, index
        lib = module._lib
        self._entry = ctypes.cast(getattr(lib, f"__cudaemu_entry_{index}"), ctypes.c_void_p).value
        nparams = getattr(lib, f"__cudaemu_nparams_{index}")
        pdesc = getattr(lib, f"__cudaemu_param_{index}")
        pdesc.restype, pdesc.argtypes = ctypes.c_char_p, [ctypes.c_int]
        psize = getattr(lib, f"__cudaemu_psize_{index}")
        psize.restype, psize.argtypes = ctypes.c_ulong, [ctypes.c_int]
        n = nparams()
        self._types = [pdesc(i).decode() for i in range(n)]
        self._sizes = [psize(i) for i in range(n)]
        if params is None or len(params) != n:
            # A template kernel (or one the regex could not read): describe it from the compiled
            # signature instead, so its arguments are checked all the same.
            names = _param_names(module.source, name.split("<")[0].strip(), n)
            params = [Param(names[i], t, t.endswith("*")) for i, t in enumerate(self._types)]
        self.params = params
        self._max_dynamic_smem = DEFAULT_SMEM

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self._max_dynamic_smem

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value) -> None:
        value = int(value)
        static = self._module.static_shared_bytes
        if value < 0 or value + static > OPTIN_SMEM:
            raise LaunchError(
                f"{self.name}: max_dynamic_shared_size_bytes={value} is over what the device "
                f"allows (227 KB = {OPTIN_SMEM} bytes per block, less {static} bytes of static "
                "__shared__ memory).")
        self._max_dynamic_smem = value

    @property
    def attributes(self) -> dict:
        """What the emulator can tell. Register counts and spills are unknown without a GPU."""
        return {"max_threads_per_block": MAX_THREADS,
                "shared_size_bytes": self._module.static_shared_bytes,
                "const_size_bytes": 0,
                "max_dynamic_shared_size_bytes": self._max_dynamic_smem}

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        grid, block = check_launch(self.name, grid, block, shared_mem, MAX_THREADS)
        shared_mem = int(shared_mem)
        check_args(self.name, self.params, args, _is_array)
        self._check_arrays(args)
        static = self._module.static_shared_bytes
        if static > DEFAULT_SMEM:
            raise LaunchError(
                f"{self.name}: the kernel declares {static} bytes of static __shared__ memory; "
                f"static shared memory is limited to {DEFAULT_SMEM} bytes (48 KB). Use "
                "`extern __shared__` (dynamic) memory for more and opt in with "
                "kernel.max_dynamic_shared_size_bytes.")
        if shared_mem > DEFAULT_SMEM and shared_mem > self._max_dynamic_smem:
            raise LaunchError(
                f"{self.name}: shared_mem={shared_mem} bytes is over the 48 KB default. Opt in "
                f"first: kernel.max_dynamic_shared_size_bytes = {shared_mem} (this device allows "
                f"up to {OPTIN_SMEM}).")
        if shared_mem + static > OPTIN_SMEM:
            raise LaunchError(
                f"{self.name}: shared_mem={shared_mem} plus {static} bytes of static __shared__ "
                f"memory is over the {OPTIN_SMEM} bytes a block may have on this device.")
        rt = self._module._rt
        if self.name in rt.ptxas_report:
            rt.resources.setdefault(self.name, dict(rt.ptxas_report[self.name], source="ptxas (sm_90)"))
        with _launch_lock:
            rt._launch(self, grid, block, args, shared_mem)

    def _check_arrays(self, args) -> None:
        for i, (p, a) in enumerate(zip(self.params, args)):
            if not _is_array(a):
                continue
            where = f"{self.name}: argument {i + 1} ({p.ctype} {p.name})"
            if not a.flags.c_contiguous:
                raise LaunchError(f"{where} is not C-contiguous: the kernel would index it as if "
                                  "it were. Pass rt.asarray(x) (a contiguous copy) instead.")
            pointee = p.ctype.rstrip("*").strip()
            ok = _POINTEE_DTYPES.get(pointee)
            if ok and a.dtype.type not in ok:
                raise LaunchError(
                    f"{where} points to {pointee}, but the launch passed a {a.dtype} array: the "
                    f"kernel would read its bytes as {pointee}. Convert it first, e.g. "
                    f"rt.asarray(x, '{np.dtype(ok[0]).name}').")


class CpuModule:
    def __init__(self, rt: "CpuRuntime", built: _build.Built, signatures, student_file: str,
                 source: str = ""):
        self._rt, self._built, self._sig, self.source = rt, built, signatures, source
        self._lib = _load(built.path)
        self.student_file = student_file
        self.static_shared_bytes = int(self._lib.cudaemu_static_shared_bytes())
        self._kernels: dict[str, CpuKernel] = {}

    def get_function(self, name: str) -> CpuKernel:
        if name not in self._kernels:
            index = self._built.entries.get(name)
            if index is None:
                known = ", ".join(self._built.entries) or "none"
                raise CompileError(
                    f"no kernel named {name!r} in the module (kernels found: {known}). Is it "
                    'declared extern "C" __global__? A template kernel needs '
                    f"name_expressions=({name!r},) in rt.compile and the same string here.")
            self._kernels[name] = CpuKernel(self, name, index, self._sig.get(name))
        return self._kernels[name]


class CpuRuntime(Runtime):
    """Runs CUDA kernels on the CPU. ``race_check``: 'sample' (default: a few blocks are rerun in
    other thread orders), 'full' (every block), or 'off'."""

    name = "cpu"
    xp = np
    multiprocessor_count = 132
    max_shared_memory_per_block = DEFAULT_SMEM
    max_shared_memory_per_block_optin = OPTIN_SMEM
    max_threads_per_block = MAX_THREADS
    warp_size = 32
    compute_capability = "90"

    def __init__(self, race_check: str | bool = "sample", race_blocks: int = 3, seed: int = 0,
                 use_nvrtc: bool | None = None):
        if not sys.platform.startswith("linux"):
            raise RuntimeUnavailable(
                f"the CPU emulator runs on Linux only (this is {sys.platform}); on Windows use "
                "WSL. It relies on ELF sections, Linux signal frames and addr2line.")
        if race_check is True:
            race_check = "sample"
        if race_check in (False, None):
            race_check = "off"
        if race_check not in ("sample", "full", "off"):
            raise ValueError("race_check must be 'sample', 'full' or 'off'")
        self.race_check, self.race_blocks, self.seed = race_check, int(race_blocks), int(seed)
        self.use_nvrtc = _nvrtc.available() if use_nvrtc is None else bool(use_nvrtc)
        self.device_name = "CPU emulator (1 host thread)"
        self._pool = GuardedPool()
        self._smem_pool = GuardedPool(keep=4)
        self.launches = 0
        self.ptxas_report: dict[str, dict] = {}   # from NVRTC, per kernel name
        self.resources: dict[str, dict] = {}      # the launched kernels' entries, for the report

    @staticmethod
    def nvrtc_status() -> str:
        return _nvrtc.nvrtc_status()

    def compile(self, source: str, options=(), name_expressions=None) -> CpuModule:
        code = full_source(source)
        student_file, _ = _build.origin(source)
        names = [str(n) for n in name_expressions] if name_expressions else []
        # Refuse what the emulator cannot run first: NVRTC's message for it (often a header it
        # lacks) would only confuse.
        _build.check_unsupported(source)
        nvrtc_checked = False
        if self.use_nvrtc:
            nvrtc_checked = _nvrtc.check(code, options, names, cache=_build.cache_dir(),
                                         filename=student_file)
            if isinstance(nvrtc_checked, dict):   # ptxas's report: what each kernel costs on a GPU
                self.ptxas_report.update(nvrtc_checked)
        signatures = parse_signatures(source)
        kernels = list(signatures) + [n for n in names if n not in signatures]
        built = _build.build(code, kernels, kernels, options, nvrtc_checked is not False)
        return CpuModule(self, built, signatures, student_file, source)

    # -----------------------------------------------------------------------------------------

    def _launch(self, kernel: CpuKernel, grid, block, args, shared_mem: int) -> None:
        lib = kernel._module._lib
        self.launches += 1
        # One guarded copy per distinct array, so that an array passed twice stays one buffer.
        slots: dict[tuple[int, int], int] = {}
        arrays, bufs, views = [], [], []
        arg_slot: list[int | None] = []
        for a in args:
            if not _is_array(a):
                arg_slot.append(None)
                continue
            key = (a.__array_interface__["data"][0], a.nbytes)
            if key not in slots:
                for (ptr, n), _ in slots.items():
                    if ptr < key[0] + key[1] and key[0] < ptr + n and key[1] and n:
                        raise LaunchError(f"{kernel.name}: two array arguments overlap without "
                                          "being the same array; the emulator cannot run that.")
                slots[key] = len(arrays)
                buf = self._pool.take(a.nbytes)
                arrays.append(a)
                bufs.append(buf)
                views.append(buf.view(a.dtype, a.shape))
            arg_slot.append(slots[key])
        smem = self._smem_pool.take(shared_mem) if shared_mem else None
        try:
            # The argument block: one pointer per parameter, to the value (as cuLaunchKernel).
            holders = []
            for a, s in zip(args, arg_slot):
                if s is not None:
                    holders.append(ctypes.c_void_p(bufs[s].addr))
                else:
                    raw = np.asarray(a).tobytes()
                    holders.append(ctypes.create_string_buffer(raw, max(len(raw), 8)))
            argv = (ctypes.c_void_p * max(1, len(holders)))(
                *[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])

            def copy_in():
                for a, v, b in zip(arrays, views, bufs):
                    np.copyto(v, a, casting="no")
                    b.fill_canary()

            def run(blocks, order, what):
                rec = _FaultRecord()
                g = (ctypes.c_uint32 * 3)(*grid)
                bl = (ctypes.c_uint32 * 3)(*block)
                if blocks is None:
                    bptr, nb = None, 0
                else:
                    arr = (ctypes.c_int64 * len(blocks))(*blocks)
                    bptr, nb = arr, len(blocks)
                rc = lib.cudaemu_launch(kernel._entry, argv, g, bl,
                                        smem.addr if smem else None, shared_mem, bptr, nb, order,
                                        self.seed + self.launches, ctypes.byref(rec))
                if rc != 0:
                    self._raise_fault(kernel, rec, args, arg_slot, bufs, smem, shared_mem, what)
                self._check_canaries(kernel, args, arg_slot, bufs)

            copy_in()
            try:
                run(None, 0, "")
            finally:
                _flush_printf(lib)
            total = grid[0] * grid[1] * grid[2]
            if self.race_check != "off" and block[0] * block[1] * block[2] > 1:
                final = [v.copy() for v in views]
                lib.cudaemu_set_quiet(1)   # the reruns would print everything again
                try:
                    self._race_check(kernel, run, copy_in, views, args, arg_slot, grid, total)
                finally:
                    lib.cudaemu_set_quiet(0)
                for v, f in zip(views, final):
                    np.copyto(v, f)
            poisoned = self._find_poison(views)
            place = None
            if poisoned is not None:
                # Find the line by running again from the inputs, then hand back the results
                # (poison included: the NaNs show the student where the bad values went).
                final = [v.copy() for v in views]
                place = self._poison_line(kernel, lib, run, copy_in)
                for v, f in zip(views, final):
                    np.copyto(v, f)
            for a, v in zip(arrays, views):
                np.copyto(a, v)
            if poisoned is not None:
                self._raise_poison(kernel, args, arg_slot, arrays, poisoned, place)
        finally:
            for b in bufs:
                self._pool.give(b)
            if smem is not None:
                self._smem_pool.give(smem)

    def _race_check(self, kernel, run, copy_in, views, args, arg_slot, grid, total) -> None:
        if self.race_check == "full" or total <= self.race_blocks:
            sample = list(range(total))
        else:
            # The first and the last block (often a partial tile), and some in between.
            k = max(2, self.race_blocks)
            sample = sorted({round(i * (total - 1) / (k - 1)) for i in range(k)})
        lib = kernel._module._lib
        atomics0 = lib.cudaemu_float_atomics()
        copy_in()
        run(sample, 0, "")
        reference = [v.copy() for v in views]
        for order, how in ((1, "in reverse order"), (2, "in a shuffled order")):
            copy_in()
            run(sample, order, f" (while rerunning blocks with their threads {how})")
            loose = lib.cudaemu_float_atomics() != atomics0
            for slot, (ref, v) in enumerate(zip(reference, views)):
                diff = _differs(ref, v, loose)
                if diff is not None:
                    self._raise_race(kernel, args, arg_slot, slot, ref, v, diff, sample, grid, how)

    def _raise_race(self, kernel, args, arg_slot, slot, ref, got, idx, sample, grid, how):
        i = arg_slot.index(slot)
        p = kernel.params[i]
        where = np.unravel_index(idx, ref.shape) if ref.ndim > 1 else (idx,)
        ndiff = int(np.count_nonzero(~_same(ref, got)))
        blocks = ", ".join(str(_block_coords(b, grid)) for b in sample[:4])
        raise KernelFault(
            f"{kernel.name}: the result depends on the order in which the threads of a block run "
            f"— a data race. Running block(s) {blocks} with their threads {how} instead of "
            f"forward changed argument {i + 1} ({p.ctype} {p.name}) at index "
            f"{tuple(int(x) for x in where)}: {_num(ref.flat[idx])} became {_num(got.flat[idx])} "
            f"({ndiff} element(s) differ). Some thread reads memory (usually a shared-memory "
            "tile) that other threads write, without a __syncthreads() between the write and "
            "the read; or a tile is overwritten for the next iteration before every thread has "
            "finished reading it (a missing __syncthreads() at the end of the loop).")

    def _check_canaries(self, kernel, args, arg_slot, bufs) -> None:
        for slot, b in enumerate(bufs):
            damage = b.canary_damage()
            if damage is None:
                continue
            off, count = damage
            i = arg_slot.index(slot)
            p, a = kernel.params[i], args[i]
            side = "before its start" if off < 0 else "past its end"
            raise KernelFault(
                f"{kernel.name}: out-of-bounds write of argument {i + 1} ({p.ctype} {p.name}): "
                f"{count} byte(s) {side} (byte offset {off}; the buffer holds {a.size} "
                f"{a.dtype} elements, {a.nbytes} bytes) were overwritten. The emulator noticed it "
                "after the launch, so it cannot name the line: look for an index that can reach "
                "past the last element or below 0.")

    @staticmethod
    def _find_poison(arrays):
        """(slot, mask of poisoned elements) for the first array holding the poison, or None."""
        for slot, a in enumerate(arrays):
            if a.dtype == np.float32:
                hit = (a.view(np.uint32) & np.uint32(0x7FBFFFFF)) == np.uint32(POISON32)
            elif a.dtype == np.float64:
                hit = (a.view(np.uint64) & np.uint64(0x7FF7FFFFFFFFFFFF)) == np.uint64(POISON64)
            else:
                continue
            if hit.any():
                return slot, hit
        return None

    def _poison_line(self, kernel, lib, run, copy_in) -> str | None:
        """Run again with the FP 'invalid' trap on: the first use of the poison traps there."""
        copy_in()
        lib.cudaemu_set_quiet(1)
        lib.cudaemu_set_trap_invalid(1)
        try:
            run(None, 0, "")
        except KernelFault as e:
            place = getattr(e, "place", None)
            if getattr(e, "fpe_invalid", False) and place:
                return place
        finally:
            lib.cudaemu_set_trap_invalid(0)
            lib.cudaemu_set_quiet(0)
            _flush_printf(lib, discard=True)
        return None

    def _raise_poison(self, kernel, args, arg_slot, arrays, poisoned, place) -> None:
        slot, hit = poisoned
        a = arrays[slot]
        i = arg_slot.index(slot)
        p = kernel.params[i]
        first = int(np.flatnonzero(hit.ravel())[0])
        where = np.unravel_index(first, a.shape) if a.ndim > 1 else (first,)
        used = (f" The first arithmetic on such a value is at {place}." if place else "")
        raise KernelFault(
            f"{place or 'line unknown'}: {kernel.name}: argument {i + 1} ({p.ctype} {p.name}) "
            f"received {int(hit.sum())} value(s) computed from shared memory that no thread of "
            f"the block had written (the first at index {tuple(int(x) for x in where)}).{used} "
            "Shared memory is not zeroed when a block starts: the emulator fills it with NaN to "
            "show such reads. Typical cause: the rows of the last K/V tile past the end of the "
            "sequence are never loaded, yet are multiplied by a zero weight (0 × NaN is NaN; on "
            "a GPU, 0 × garbage). Store zeros in those rows, or skip them; or a tile is read "
            "before it is written (__syncthreads() too late).")

    def _raise_fault(self, kernel, rec, args, arg_slot, bufs, smem, shared_mem, what) -> None:
        module = kernel._module
        who = (f"block ({rec.block[0]},{rec.block[1]},{rec.block[2]}), thread "
               f"({rec.thread[0]},{rec.thread[1]},{rec.thread[2]})")
        file = rec.file.decode(errors="replace")
        text = rec.text.decode(errors="replace")
        if rec.kind in (F_SEGV, F_BUS, F_FPE, F_ILL, F_STACK, F_INTERRUPT):
            place = _source_line(rec, module.student_file)
        else:
            place = f"{file}:{rec.line}" if file and rec.line > 0 else None
        if rec.kind == F_INTERRUPT:
            raise KeyboardInterrupt(f"{kernel.name} interrupted at {place or 'an unknown line'}, "
                                    f"in {who}{what}")
        if rec.kind in (F_SEGV, F_BUS):
            msg = self._describe_access(kernel, rec, args, arg_slot, bufs, smem, shared_mem)
        elif rec.kind == F_STACK:
            kb = int(os.environ.get("GRADER_CPU_STACK_KB") or 128)
            msg = (f"a thread overflowed its stack ({kb} KB in the emulator): per-thread local "
                   "arrays that large do not fit in registers on a GPU either and spill to slow "
                   "local memory. Keep per-thread arrays small (or set GRADER_CPU_STACK_KB).")
        elif rec.kind == F_FPE:
            msg = {1: "integer division by zero", 2: "integer overflow in a division "
                   "(INT_MIN / -1)", 7: "invalid floating-point operation on a NaN"}.get(
                       rec.si_code, "arithmetic exception") + "."
        elif rec.kind == F_ILL:
            msg = ("reached code the compiler marked unreachable: typically a function declared "
                   "to return a value that ends without `return`, or another undefined "
                   "behaviour.")
        elif rec.kind == F_SETUP:
            msg = f"the emulator could not start the launch: {text}"
        else:
            msg = text
        fault = KernelFault(f"{place or 'line unknown'}: {kernel.name}: {msg} ({who}){what}")
        fault.place = place
        fault.fpe_invalid = rec.kind == F_FPE and rec.si_code == 7
        raise fault

    def _describe_access(self, kernel, rec, args, arg_slot, bufs, smem, shared_mem) -> str:
        rw = {1: "write", 0: "read"}.get(rec.is_write, "access")
        addr = rec.addr
        for slot, b in enumerate(bufs):
            loc = b.locate(addr)
            if loc is None:
                continue
            side, off = loc
            i = arg_slot.index(slot)
            p, a = kernel.params[i], args[i]
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
                    "line: the last tile may be partial.")
        if smem is not None:
            loc = smem.locate(addr)
            if loc is not None:
                side, off = loc
                return (f"{rw} of dynamic shared memory at byte {off} (extern __shared__), but "
                        f"the launch gave shared_mem={shared_mem} bytes. Either the kernel "
                        "indexes past its tiles or the launch asks for too little: compute "
                        "shared_mem from the same tile sizes the kernel uses.")
        if rec.kind == F_SEGV and rec.si_code == 128 and addr == 0:
            return (f"invalid {rw}: most likely a misaligned vector access (a float4 / int4 "
                    "load or store needs an address that is a multiple of 16 bytes; "
                    "reinterpret_cast<float4*>(p + k) needs k to be a multiple of 4).")
        if addr < 65536:
            return (f"{rw} through a null pointer (address {addr:#x}). A pointer argument "
                    "that is 0, or dynamic shared memory used with shared_mem=0?")
        return (f"{rw} of address {addr:#x}, which is in none of the launch's buffers: a "
                "wild pointer. Look for an index that went negative in unsigned arithmetic "
                "(e.g. `row - 1` with row == 0 as unsigned), or a pointer to a local variable "
                "of another thread.")


def _num(x) -> str:
    return f"{float(x):.7g}" if np.asarray(x).dtype.kind == "f" else str(int(x))


def _param_names(source: str, base: str, n: int) -> list[str]:
    """Parameter names of a (template) kernel from its source, or param0, param1 ..."""
    code = _build.strip_code(source)
    pat = (r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
           r"(?:__launch_bounds__\s*\([^)]*\)\s*)?" + re.escape(base) + r"\s*\(([^)]*)\)")
    for m in re.finditer(pat, code):
        names = []
        for raw in m.group(1).split(","):
            w = re.findall(r"[A-Za-z_]\w*", raw.split("=")[0])
            if w:
                names.append(w[-1])
        if len(names) == n:
            return names
    return [f"param{i}" for i in range(n)]


def _flush_printf(lib, discard: bool = False) -> None:
    n = lib.cudaemu_take_output(None, 0)
    if n:
        buf = ctypes.create_string_buffer(n)
        n = lib.cudaemu_take_output(buf, n)
        if discard:
            return
        sys.stdout.write(buf.raw[:n].decode(errors="replace"))
        sys.stdout.flush()


def _block_coords(b: int, grid) -> tuple[int, int, int]:
    return (b % grid[0], (b // grid[0]) % grid[1], b // (grid[0] * grid[1]))


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "fc":
        return (a == b) | (np.isnan(a) & np.isnan(b))
    return a == b


def _differs(a: np.ndarray, b: np.ndarray, loose: bool) -> int | None:
    """Flat index of the first element that differs (beyond rounding, if ``loose``), or None."""
    if a.size == 0:
        return None
    if loose and a.dtype.kind == "f":
        finite = np.isfinite(a) & np.isfinite(b)
        scale = float(np.max(np.abs(a[finite]))) if finite.any() else 0.0
        close = np.isclose(a, b, rtol=1e-4, atol=1e-5 * scale, equal_nan=True)
        bad = ~close
    else:
        bad = ~_same(a, b)
    if not bad.any():
        return None
    return int(np.flatnonzero(bad.ravel())[0])
