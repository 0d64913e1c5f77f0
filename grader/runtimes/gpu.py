"""The GPU runtime: CuPy's RawModule (NVRTC) with the course's prelude and argument checks."""
from __future__ import annotations

import ctypes
import os

import numpy as np

from .base import (CompileError, LaunchError, Runtime, RuntimeUnavailable, check_args,
                   check_launch, full_source, parse_signatures)


def _import_cupy():
    try:
        import cupy
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        raise RuntimeUnavailable(
            f"CuPy is not usable here ({type(e).__name__}: {e}). Install the extra that matches "
            "your driver: pip install -e '.[cuda12]' or '.[cuda13]'. Without a GPU, `grader check` runs on the "
            "CPU emulator (--backend cpu); `grader bench` needs a GPU.") from e
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        raise RuntimeUnavailable(f"CuPy is installed but sees no GPU ({e}). `grader check --backend cpu` "
                                 "works without one; `grader bench` needs a GPU.") from e
    if n < 1:
        raise RuntimeUnavailable("CuPy is installed but sees no GPU. `grader check --backend cpu` works "
                                 "without one; `grader bench` needs a GPU.")
    return cupy


def gpu_available() -> bool:
    try:
        _import_cupy()
        return True
    except RuntimeUnavailable:
        return False


class GpuKernel:
    def __init__(self, rt, raw, name, params):
        self._rt, self._raw, self.name, self.params = rt, raw, name, params
        self._attrs = None          # the driver's attributes, read once (not on every launch)

    @property
    def max_dynamic_shared_size_bytes(self):
        return self._raw.max_dynamic_shared_size_bytes

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value):
        self._raw.max_dynamic_shared_size_bytes = int(value)

    @property
    def attributes(self) -> dict:
        """Registers, static shared memory, local (spill) bytes and the like, from the driver."""
        return dict(self._raw.attributes)

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        cupy = self._rt.xp
        grid, block = check_launch(self.name, grid, block, shared_mem)
        self._rt.note_launch(self.name, grid, block)
        check_args(self.name, self.params, args, lambda a: isinstance(a, (cupy.ndarray, np.ndarray)))
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                raise LaunchError(f"{self.name}: argument {i + 1} is a NumPy array in host memory; "
                                  "the GPU needs rt.asarray(...) first.")
        if self._attrs is None:
            self._attrs = self.attributes
            self._rt.resources[self.name] = self._attrs
        attrs = self._attrs
        threads = block[0] * block[1] * block[2]
        if threads > attrs.get("max_threads_per_block", 1024):
            raise LaunchError(
                f"{self.name}: a block of {threads} threads cannot launch: the kernel uses "
                f"{attrs.get('num_regs')} registers per thread, which allows at most "
                f"{attrs['max_threads_per_block']} threads per block. Use fewer threads per block, or "
                f"__launch_bounds__({threads}) so the compiler keeps registers in check.")
        if shared_mem > self._rt.max_shared_memory_per_block_optin:
            raise LaunchError(f"{self.name}: shared_mem={shared_mem} bytes is over this GPU's limit of "
                              f"{self._rt.max_shared_memory_per_block_optin} bytes per block. Use smaller tiles.")
        if shared_mem > 48 * 1024 and shared_mem > self._raw.max_dynamic_shared_size_bytes:
            raise LaunchError(
                f"{self.name}: shared_mem={shared_mem} bytes is over the 48 KB default. Opt in first: "
                f"kernel.max_dynamic_shared_size_bytes = {shared_mem} (this GPU allows up to "
                f"{self._rt.max_shared_memory_per_block_optin}).")
        kw = {"shared_mem": int(shared_mem)}
        if stream is not None:
            kw["stream"] = stream
        ledger = self._rt.ledger
        if ledger is not None:
            ledger.before(self.name, self.params, args)
        self._raw(grid, block, args, **kw)
        if ledger is not None:
            ledger.after(self.name)


class GpuModule:
    def __init__(self, rt, raw, signatures):
        self._rt, self._raw, self._sig = rt, raw, signatures
        self._kernels: dict[str, GpuKernel] = {}

    def get_function(self, name: str) -> GpuKernel:
        if name in self._kernels:
            return self._kernels[name]
        try:
            raw = self._raw.get_function(name)
        except Exception as e:
            raise CompileError(f"no kernel named {name!r} in the module ({e}). "
                               'Is it declared extern "C" __global__?') from e
        kernel = self._kernels[name] = GpuKernel(self._rt, raw, name, self._sig.get(name))
        return kernel


class GpuRuntime(Runtime):
    name = "gpu"

    def __init__(self):
        cupy = _import_cupy()
        self.xp = cupy
        dev = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(dev.id)
        if os.environ.get("GRADER_PLAIN_MALLOC"):      # set by --sanitize: one cudaMalloc per array,
            cupy.cuda.set_allocator(None)              # so memcheck knows where each array ends
        self.device_name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        self.multiprocessor_count = int(props["multiProcessorCount"])
        self.max_shared_memory_per_block = int(props["sharedMemPerBlock"])
        self.max_shared_memory_per_block_optin = int(props["sharedMemPerBlockOptin"])
        self.compute_capability = f"{props['major']}{props['minor']}"
        self.resources: dict[str, dict] = {}   # kernel name -> attributes, for the report
        self._modules: dict[tuple, GpuModule] = {}
        self._tensor_maps: dict[tuple, np.void] = {}

    def compile(self, source: str, options=(), name_expressions=None):
        cupy = self.xp
        code = full_source(source)
        opts = ("-std=c++17",) + tuple(options)
        arch = next((o.split("=", 1)[1] for o in opts if o.startswith("-arch=sm_") and o.endswith("a")), None)
        if arch and arch[3:-1] != self.compute_capability:     # sm_90a runs only on sm_90 (H100, H200)
            raise RuntimeUnavailable(f"this kernel is built for {arch} (wgmma, TMA, setmaxnreg), which only an "
                                     f"sm_{arch[3:-1]} GPU runs; this GPU, {self.device_name}, is "
                                     f"sm_{self.compute_capability}. Run it on the CPU emulator: --backend cpu")
        if os.environ.get("GRADER_LINEINFO"):          # set by --sanitize: source lines in reports
            opts += ("-lineinfo",)
        key = (code, opts, tuple(name_expressions or ()))
        if key in self._modules:                       # same source, same module: no reload per call
            return self._modules[key]
        try:
            raw = cupy.RawModule(code=code, options=opts,
                                 name_expressions=tuple(name_expressions) if name_expressions else None)
            raw.compile()
        except cupy.cuda.compiler.CompileException as e:
            raise CompileError("the kernel did not compile (NVRTC):", str(e)) from None
        module = self._modules[key] = GpuModule(self, raw, parse_signatures(source))
        return module

    def tensor_map(self, x, box_rows: int, elem: str):
        key = (int(x.data.ptr), tuple(x.shape), tuple(x.strides), int(box_rows), elem)
        cached = self._tensor_maps.get(key)
        if cached is not None:
            return cached
        try:
            from cuda.bindings import driver as cu
        except ImportError as e:
            raise RuntimeUnavailable("tensor maps need cuda-bindings (pip install cuda-bindings), "
                                     f"which is not importable here ({e})") from e
        base, dims, strides, box = self.tma_layout(x, box_rows, elem)
        kind = (cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 if elem == "bfloat16"
                else cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16)
        err, tmap = cu.cuTensorMapEncodeTiled(
            kind, cu.cuuint32_t(3), base, [cu.cuuint64_t(v) for v in dims],
            [cu.cuuint64_t(v) for v in strides], [cu.cuuint32_t(v) for v in box], [cu.cuuint32_t(1)] * 3,
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        if err != cu.CUresult.CUDA_SUCCESS:
            raise LaunchError(f"cuTensorMapEncodeTiled refused a map over {tuple(x.shape)} with boxes of "
                              f"{box_rows} rows: {err}")
        out = np.zeros(1, self.TENSOR_MAP)
        out.view(np.uint8)[:] = np.frombuffer(ctypes.string_at(tmap.getPtr(), 128), np.uint8)
        if len(self._tensor_maps) > 64:
            self._tensor_maps.clear()
        self._tensor_maps[key] = out[0]
        return out[0]

    def to_numpy(self, a) -> np.ndarray:
        return self.xp.asnumpy(a) if isinstance(a, self.xp.ndarray) else np.asarray(a)

    def stream(self, non_blocking: bool = True):
        """A CUDA stream: kernels launched inside `with stream:` run in its order."""
        return self.xp.cuda.Stream(non_blocking=non_blocking)

    def event(self):
        """A CUDA event: stream.record(event), other_stream.wait_event(event)."""
        return self.xp.cuda.Event(disable_timing=True)

    def synchronize(self) -> None:
        self.xp.cuda.runtime.deviceSynchronize()

    def healthy(self) -> bool:
        try:
            self.xp.cuda.runtime.deviceSynchronize()
            self.xp.zeros(1).sum().item()
            return True
        except Exception:
            return False
