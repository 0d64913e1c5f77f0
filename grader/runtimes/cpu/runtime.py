"""The CPU runtime: the same CUDA source and launch call as on a GPU, run by the emulator.

    rt = CpuRuntime()
    kernel = rt.compile(SOURCE).get_function("flash_forward")
    kernel(grid, block, (q, k, v, o, lse, rt.int32(n), rt.float32(scale)), shared_mem=nbytes)

A launch copies every array argument into guarded memory, runs all blocks (threads as fibers, see
csrc/emu_runtime.cpp), then, to catch a missing __syncthreads, runs a few blocks again from the
same inputs with their threads in reverse and in shuffled order and compares. Any fault becomes a
KernelFault naming the student's file and line.

Beside it: abi.py (the C interface, read from csrc/cudaemu_abi.h), faults.py (the messages) and
symbols.py (addresses to the student's lines).
"""
from __future__ import annotations

import ctypes
import os
import re
import sys
import threading

import numpy as np

from ..base import (CompileError, KernelFault, LaunchError, Param, Runtime, RuntimeUnavailable,
                    check_args, check_launch, full_source, parse_signatures, python_stack, site_in)
from .. import ranks as _ranks
from . import build as _build
from . import faults as _faults
from . import nvrtc as _nvrtc
from .abi import POISON32, POISON32_AS_DOUBLE, FaultRecord, load, set_arrays
from .guarded import GuardedPool

DEFAULT_SMEM = 48 * 1024
OPTIN_SMEM = 227 * 1024
MAX_THREADS = 1024
_launch_lock = threading.Lock()  # the emulator's scheduler state is per process


def nvrtc_status() -> str:
    return _nvrtc.nvrtc_status()


def host_compiler_status() -> str:
    return _build.compiler_status()


def _is_array(a) -> bool:
    return isinstance(a, np.ndarray)


try:  # NumPy has no bfloat16; ml_dtypes (from JAX) adds one, when it is installed
    from ml_dtypes import bfloat16 as _ml_bfloat16
    _BF16 = [np.uint16, _ml_bfloat16]
except ImportError:
    _ml_bfloat16 = None
    _BF16 = [np.uint16]

_POINTEE_DTYPES = {
    "float": [np.float32], "double": [np.float64], "int": [np.int32], "unsigned int": [np.uint32],
    "long long": [np.int64], "unsigned long long": [np.uint64], "int64_t": [np.int64],
    "uint64_t": [np.uint64], "short": [np.int16], "unsigned short": [np.uint16, np.float16],
    "char": [np.int8, np.uint8, np.bool_], "unsigned char": [np.uint8, np.int8, np.bool_],
    "bool": [np.bool_, np.uint8], "__half": [np.float16], "half": [np.float16],
    "float2": [np.float32], "float4": [np.float32], "int2": [np.int32], "int4": [np.int32],
    "__half2": [np.float16], "half2": [np.float16],
    # bfloat16: its bits in a uint16 array, or an ml_dtypes.bfloat16 array.
    "__nv_bfloat16": _BF16, "nv_bfloat16": _BF16, "__nv_bfloat162": _BF16, "nv_bfloat162": _BF16,
}

_CONVERT_HINT = {
    "__nv_bfloat16": "pass the bfloat16 bits as a uint16 array (x.astype(ml_dtypes.bfloat16)"
                     ".view(np.uint16), or round float32 to the upper 16 bits yourself)"
                     + (", or the ml_dtypes.bfloat16 array itself" if _ml_bfloat16 else ""),
}
_CONVERT_HINT.update({k: _CONVERT_HINT["__nv_bfloat16"]
                      for k in ("nv_bfloat16", "__nv_bfloat162", "nv_bfloat162")})


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
        self._module._rt.note_launch(self.name, grid, block)
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
        ledger = rt.ledger
        if ledger is not None:
            ledger.before(self.name, self.params, args)
        def run():
            with _launch_lock:
                rt._launch(self, grid, block, args, shared_mem)
        rank = _ranks.current_rank()
        if rt.stream_model is not None and rank is not None:   # module 12: which stream read and wrote what
            rt.stream_model.kernel(rank, self.name, args, run)
        else:
            run()
        if ledger is not None:
            ledger.after(self.name)

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
                hint = _CONVERT_HINT.get(pointee, f"e.g. rt.asarray(x, '{np.dtype(ok[0]).name}')")
                # Where the student's file launched it and made the array, where both are in that file.
                # (the #line directive names the file by its base name: the frame of that name is it)
                stack, ledger = python_stack(), self._module._rt.ledger
                base = os.path.basename(self._module.student_file or "")
                student = next((f for f, _, _ in reversed(stack) if os.path.basename(f) == base), "") if base else ""
                site = site_in(stack, student) if student else ""
                made = ledger.made_in(a, student) if ledger is not None and student else ""
                raise LaunchError(
                    f"{where} points to {pointee}, but the launch{f' at {site}' if site else ''} passed a "
                    f"{a.dtype} array{f' (the array made at {made})' if made else ''}: the kernel would read its "
                    f"bytes as {pointee}. Convert it first, or make it {pointee} where it is made: {hint}.")


class CpuModule:
    def __init__(self, rt: "CpuRuntime", built: _build.Built, signatures, student_file: str,
                 source: str = "", options=(), name_expressions=None, counting: bool = False):
        self._rt, self._built, self._sig, self.source = rt, built, signatures, source
        self._lib = load(built.path)
        self.student_file = student_file
        self._kernels: dict[str, CpuKernel] = {}
        self._options, self._names, self._counting = options, name_expressions, counting
        self._twin: CpuModule | None = None

    @property
    def static_shared_bytes(self) -> int:
        """The module's static __shared__ bytes (a template's arrays count once a launch reached them)."""
        return int(self._lib.cudaemu_static_shared_bytes())

    def counting_twin(self) -> "CpuModule":
        """The same module built for counting (every load and store logged: races.py names a race
        from it), through the runtime's compile, so that a caller timing compiles sees this one."""
        if self._counting:
            return self
        if self._twin is None:
            rt = self._rt
            saved = rt.counting
            rt.counting = True
            try:
                self._twin = rt.compile(self.source, self._options, self._names)
            finally:
                rt.counting = saved
        return self._twin

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
        # Rerun every block in reverse order and compare (a task that needs it turns it on: blocks
        # that write outside their own part of the output, over a neighbour's).
        self.block_order_check = False
        # With block_order_defer, the first such difference of a case is kept here for the runner
        # (runner.run_case), which weighs it against the case's numbers, instead of being raised.
        self.block_order_defer = False
        self.block_order_found: KernelFault | None = None
        # Count what each launch would move on a GPU (counters.py): kernels are then built with
        # every load and store instrumented, and each launch's counts land in counter_log.
        self.counting = False
        self.counter_log: list = []
        # Trace which elements of each array argument every block reads and writes (trace.py: the
        # first divergence from the finished version); needs `counting`, whose build logs accesses.
        self.tracing = False
        self.trace_log: list = []
        self.use_nvrtc = _nvrtc.available() if use_nvrtc is None else bool(use_nvrtc)
        self.device_name = "CPU emulator (1 host thread)"
        self._pool = GuardedPool()
        self._smem_pool = GuardedPool(keep=4)
        self.launches = 0
        self.ptxas_report: dict[str, dict] = {}   # from NVRTC, per kernel name
        self.resources: dict[str, dict] = {}      # the launched kernels' entries, for the report

    # Module 12's ranks (runtimes/ranks.py): while the stand-in runs them, the stream model that sees
    # which stream read and wrote what.
    stream_model = None

    def stream(self, non_blocking: bool = True):
        """cupy.cuda.Stream's stand-in: kernels launched inside `with stream:` are its work."""
        return _ranks.CpuStream()

    def event(self):
        """cupy.cuda.Event's stand-in: stream.record(event), stream.wait_event(event)."""
        return _ranks.CpuEvent()

    @staticmethod
    def nvrtc_status() -> str:
        return _nvrtc.nvrtc_status()

    _TMAP_MAGIC = 0x50414D524F534E45   # csrc/hopper_abi.h's CUDAEMU_TMAP_MAGIC

    def tensor_map(self, x, box_rows: int, elem: str):
        """The emulator's tensor map (csrc/hopper_abi.h: __cudaemu_tensor_map), what cuTensorMapEncodeTiled
        makes on a GPU after the same checks: 128 bytes, passed by value like CUtensorMap."""
        if not _is_array(x):
            raise LaunchError(f"a tensor map is made over an array, got {type(x).__name__}")
        base, dims, strides, box = self.tma_layout(x, box_rows, elem)
        words = np.zeros(16, np.uint64)
        words[0], words[1] = self._TMAP_MAGIC, base
        words[2] = len(dims) | (2 << 32)               # rank, element bytes
        words[3] = 128                                 # swizzle span (bytes); pad
        words[4:4 + len(dims)] = dims                  # dims[5], innermost first
        words[9:9 + len(strides)] = strides            # strides[4] of dims 1 ..
        words[13:16] = np.array(box + (0,) * (6 - len(box)), np.uint32).view(np.uint64)   # box[5], pad
        out = np.zeros(1, self.TENSOR_MAP)
        out["opaque"][0] = words
        return out[0]

    @classmethod
    def map_geometry(cls, opaque):
        """What tensor_map packed into a map's 128 bytes: (base address, dims innermost first, byte
        strides of dims 1 .., element bytes), or None where they hold no emulator tensor map."""
        words = np.asarray(opaque, np.uint64)
        rank, item = int(words[2] & 0xFFFFFFFF), int(words[2] >> 32)
        if int(words[0]) != cls._TMAP_MAGIC or not 1 <= rank <= 5:
            return None
        return int(words[1]), [int(x) for x in words[4:4 + rank]], [int(x) for x in words[9:8 + rank]], item

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
        built = _build.build(code, kernels, kernels, options, nvrtc_checked is not False,
                             counting=self.counting)
        return CpuModule(self, built, signatures, student_file, source, options, name_expressions,
                         self.counting)

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
            # The buffers and their argument positions, for the tile checks of WMMA loads/stores.
            set_arrays(lib, [b.addr for b in bufs], [a.nbytes for a in arrays],
                       [arg_slot.index(i) + 1 for i in range(len(bufs))])

            def copy_in():
                for a, v, b in zip(arrays, views, bufs):
                    np.copyto(v, a, casting="no")
                    b.fill_canary()

            def run(blocks, order, what, kern=None):
                kern = kern or kernel      # races.py runs the counting build's twin of the kernel
                rec = FaultRecord()
                g = (ctypes.c_uint32 * 3)(*grid)
                bl = (ctypes.c_uint32 * 3)(*block)
                if blocks is None:
                    bptr, nb = None, 0
                else:
                    arr = (ctypes.c_int64 * len(blocks))(*blocks)
                    bptr, nb = arr, len(blocks)
                rc = kern._module._lib.cudaemu_launch(kern._entry, argv, g, bl,
                                                      smem.addr if smem else None, shared_mem, bptr,
                                                      nb, order, self.seed + self.launches,
                                                      ctypes.byref(rec))
                if rc != 0:
                    raise _faults.launch_fault(kernel, rec, args, arg_slot, bufs, smem,
                                               shared_mem, what)
                damage = self._canary_damage(bufs)
                if damage is not None:
                    slot, off, count = damage
                    place = None
                    if kern is kernel and blocks is None and not self.counting:   # its store, traced again
                        place = self._canary_store(kernel, run, copy_in, args, arg_slot, arrays, bufs,
                                                   grid, block, slot)
                    raise _faults.canary_fault(kernel, args, arg_slot, slot, off, count, place)

            copy_in()
            if self.counting:
                lib.cudaemu_counters_begin()
            if self.tracing:
                lib.cudaemu_trace_begin()
                initial = [np.array(v) for v in views]   # what the launch is handed (trace.py compares it)
            hopper0 = lib.cudaemu_hopper_blocks()
            try:
                run(None, 0, "")
            finally:
                _flush_printf(lib)
                if self.counting:
                    lib.cudaemu_counters_end()
                if self.tracing:
                    from ..ranks import current_rank
                    from .trace import take
                    traced = take(kernel, lib, args, arg_slot, grid, block, views, initial)
                    traced.rank = getattr(current_rank(), "rank", None)
                    self.trace_log.append(traced)
            if self.counting:
                from .counters import collect
                self.counter_log.append(collect(kernel, lib, args, arg_slot, grid, block, shared_mem))
            total = grid[0] * grid[1] * grid[2]
            if self.block_order_check and total > 1:
                self._block_order_check(kernel, run, copy_in, views, args, arg_slot, grid, total, lib)
            if self.race_check != "off" and block[0] * block[1] * block[2] > 1:
                final = [v.copy() for v in views]
                lib.cudaemu_set_quiet(1)   # the reruns would print everything again
                try:
                    self._race_check(kernel, run, copy_in, views, args, arg_slot, grid, total,
                                     (arrays, bufs, smem, shared_mem, block),
                                     hopper=lib.cudaemu_hopper_blocks() != hopper0)
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
                raise _faults.poison_fault(kernel, args, arg_slot, arrays, poisoned, place)
        finally:
            for b in bufs:
                self._pool.give(b)
            if smem is not None:
                self._smem_pool.give(smem)

    def _block_order_check(self, kernel, run, copy_in, views, args, arg_slot, grid, total, lib) -> None:
        """Run every block again, last block first: when two blocks write the same element, the
        one that runs last wins, so the output changes. The first run's results are kept."""
        final = [v.copy() for v in views]
        atomics0 = lib.cudaemu_float_atomics()
        lib.cudaemu_set_quiet(1)
        try:
            copy_in()
            run(list(range(total - 1, -1, -1)), 0, " (while rerunning the blocks in reverse order)")
        finally:
            lib.cudaemu_set_quiet(0)
        loose = lib.cudaemu_float_atomics() != atomics0
        try:
            for slot, (ref, v) in enumerate(zip(final, views)):
                diff = _differs(ref, v, loose)
                if diff is not None:
                    ndiff = int(np.count_nonzero(~_same(ref, v)))
                    fault = _faults.block_order_fault(kernel, args, arg_slot, slot, ref, v, diff, ndiff)
                    if not self.block_order_defer:
                        raise fault
                    if self.block_order_found is None:
                        self.block_order_found = fault
                    return
        finally:
            for v, f in zip(views, final):
                np.copyto(v, f)

    def _race_check(self, kernel, run, copy_in, views, args, arg_slot, grid, total, launch,
                    hopper=False) -> None:
        """Rerun some blocks with their threads in reverse and in a shuffled order and compare. A
        block of more than one warp runs once more greedily (emu_runtime.cpp's greedy_step): a warp
        (or, with Hopper's waits, a warpgroup) runs ahead as far as its barriers and waits let it,
        which shows a buffer rewritten before another warp has read it (a missing __syncthreads
        between two phases that share shared memory, a stage refilled before its readers are done)."""
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
        orders = [(1, "in reverse order"), (2, "in a shuffled order")]
        block = launch[4]
        if hopper or block[0] * block[1] * block[2] > 32:      # more than one warp
            orders.append((3, "greedily (the first that can run always runs first)"))
        for order, how in orders:
            copy_in()
            run(sample, order, f" (while rerunning blocks with their threads {how})")
            loose = lib.cudaemu_float_atomics() != atomics0
            for slot, (ref, v) in enumerate(zip(reference, views)):
                diff = _differs(ref, v, loose)
                if diff is not None:
                    ndiff = int(np.count_nonzero(~_same(ref, v)))
                    got = v.copy()
                    named = self._name_race(kernel, run, copy_in, args, arg_slot, sample, grid, launch)
                    if named is None and hopper:
                        named = self._name_wgmma_read(kernel, lib, run, copy_in, sample, order)
                    traced = None if named else self._order_divergence(kernel, run, copy_in, args, arg_slot,
                                                                        sample, grid, launch, views, order)
                    raise _faults.race_fault(kernel, args, arg_slot, slot, ref, got, diff, ndiff,
                                             sample, grid, how, named, traced)

    @staticmethod
    def _counting_twin(kernel, arg_slot, arrays, bufs):
        """(the kernel's counting build, its library) handed this launch's arrays, for a traced rerun;
        None where it does not build (the rerun only adds to a message)."""
        try:
            twin = kernel._module.counting_twin().get_function(kernel.name)
        except Exception:        # noqa: BLE001  (a build that fails here only loses what the trace adds)
            return None
        lib = twin._module._lib
        set_arrays(lib, [b.addr for b in bufs], [a.nbytes for a in arrays],
                   [arg_slot.index(i) + 1 for i in range(len(bufs))])
        return twin, lib

    @staticmethod
    def _trace_once(twin, lib, run, copy_in, blocks, order, args, arg_slot, grid, block, views=None,
                    keep_on_fault=False):
        """One traced run of ``blocks`` (None: all) in thread ``order``, from the launch's inputs: its
        LaunchTrace. A fault propagates, unless ``keep_on_fault`` (the trace up to it is returned)."""
        from .trace import take
        copy_in()
        lib.cudaemu_counters_begin()
        lib.cudaemu_trace_begin()
        try:
            run(blocks, order, "", twin)
        except KernelFault:
            if not keep_on_fault:
                raise
        finally:
            lib.cudaemu_counters_end()
            trace = take(twin, lib, args, arg_slot, grid, block, views)
        return trace

    def _order_divergence(self, kernel, run, copy_in, args, arg_slot, sample, grid, launch, views,
                          order) -> str | None:
        """Where no racing pair is named: the sampled blocks traced forward and in ``order`` (the
        counting build), and where the two runs first part (trace.order_divergence), or None."""
        from .trace import order_divergence
        arrays, bufs, _, _, block = launch
        built = self._counting_twin(kernel, arg_slot, arrays, bufs)
        if built is None:
            return None
        twin, lib = built
        lib.cudaemu_set_quiet(1)
        try:
            return order_divergence(*[self._trace_once(twin, lib, run, copy_in, sample, o, args, arg_slot,
                                                       grid, block, views) for o in (0, order)])
        except Exception:        # noqa: BLE001  (a fault, or a trace cut: an observation only, the order dependence stands)
            return None
        finally:
            lib.cudaemu_set_quiet(0)
            _flush_printf(lib, discard=True)

    @staticmethod
    def _name_wgmma_read(kernel, lib, run, copy_in, sample, order) -> dict | None:
        """The first wgmma that read other shared-memory values in ``order`` than forward (hopper.inc's
        log_operands), as races.describe's 'place' and 'text', or None."""
        from .symbols import name_wait_callers
        try:
            lib.cudaemu_wgmma_log(1)
            copy_in()
            run(sample, 0, "")
            lib.cudaemu_wgmma_log(2)
            copy_in()
            run(sample, order, "")
            found = (lib.cudaemu_wgmma_diverged() or b"").decode()
        except KernelFault:
            return None
        finally:
            lib.cudaemu_wgmma_log(0)
        if not found:
            return None
        where, wg, nth, operand, addr = found.rsplit("|", 4)
        student = kernel._module.student_file
        named = name_wait_callers(where, student)
        m = re.match(r"([^\s:]+):(\d+)", named)
        place = m.group(0) if m else where.split(" ")[0]
        calls = re.findall(rf"{re.escape(student)}:\d+", named)
        if calls:
            place = calls[-1]
        return {"place": place, "text": (
            f"the wgmma.mma_async at {named} (warpgroup {wg}'s wgmma number {nth} in the block) read other "
            f"values of its {operand} from shared memory (the tile at shared address {addr}) in this order "
            "than when the threads ran forward: some write to those bytes lands before this read in one "
            "order and after it in the other, so nothing orders the two. Find who writes that tile "
            "(a TMA copy, or stores of another warpgroup) and what makes it wait for this read: the "
            "wait that covers the product (wgmma.wait_group) before the release or the next write, a "
            "second buffer for the next step, or a barrier both warpgroups pass.")}

    @staticmethod
    def _name_race(kernel, run, copy_in, args, arg_slot, sample, grid, launch) -> dict | None:
        """The race behind an order dependence, as racecheck names it (races.py), or None."""
        from . import races
        arrays, bufs, smem, shared_mem, block = launch
        try:
            race = races.find(kernel, run, copy_in, sample, arrays, bufs)
            if race is None:
                return None
            return races.describe(race, kernel, args, arg_slot, arrays, bufs, smem, shared_mem, grid, block)
        except Exception:        # noqa: BLE001  (naming is a bonus: the order dependence stands)
            return None

    @staticmethod
    def _canary_damage(bufs):
        """(slot, byte offset, count) of the first buffer whose guard bytes were overwritten, or None."""
        for slot, b in enumerate(bufs):
            damage = b.canary_damage()
            if damage is not None:
                return (slot, *damage)
        return None

    @staticmethod
    def _canary_store(kernel, run, copy_in, args, arg_slot, arrays, bufs, grid, block, slot):
        """Where a write outside buffer `slot` (inside its guard bytes, where no page faults) was made:
        the launch again, from the same inputs, in the counting build with every access traced; the
        first store of that argument outside its bytes, as (file:line, 'thread t of block b at line N
        `text`'), or None."""
        from .trace import _where
        built = CpuRuntime._counting_twin(kernel, arg_slot, arrays, bufs)
        if built is None:
            return None
        twin, lib = built
        lib.cudaemu_set_quiet(1)
        try:
            # The same damage again, or a fault: the trace so far tells.
            trace = CpuRuntime._trace_once(twin, lib, run, copy_in, None, 0, args, arg_slot, grid, block,
                                           keep_on_fault=True)
        finally:
            lib.cudaemu_set_quiet(0)
            _flush_printf(lib, discard=True)
        r = trace.records
        nbytes = arrays[slot].nbytes
        out = r[(r["arg"] == slot) & (r["write"] == 1) & ((r["off"] < 0) | (r["off"] + r["size"] > nbytes))]
        if not len(out):
            return None
        first = out[0]
        where = trace.lines.get(int(first["where"]), "")
        if not where.startswith(trace.student + ":"):
            return None
        from .faults import _block_coords
        return (where.rsplit("/", 1)[-1], f"thread {int(first['thread'])} of block "
                f"{_block_coords(int(first['block']), grid)} stores there at {_where(trace, int(first['where']))}")

    @staticmethod
    def _find_poison(arrays):
        """(slot, mask of poisoned elements) for the first array holding the poison, or None."""
        for slot, a in enumerate(arrays):
            if a.dtype == np.float32:
                hit = (a.view(np.uint32) & np.uint32(0x7FBFFFFF)) == np.uint32(POISON32)
            elif a.dtype == np.float64:
                hit = ((a.view(np.uint64) & np.uint64(0x7FF7FFFFFFFFFFFF))
                       == np.uint64(POISON32_AS_DOUBLE))
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


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "fc":
        return (a == b) | (np.isnan(a) & np.isnan(b))
    if a.dtype.kind == "V" and a.dtype.itemsize in (1, 2, 4, 8):
        # ml_dtypes' bfloat16 and friends: the same bits (NaN included) or not.
        bits = np.dtype(f"u{a.dtype.itemsize}")
        return a.view(bits) == b.view(bits)
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
