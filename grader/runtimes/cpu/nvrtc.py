"""NVRTC, the real CUDA compiler, used without a GPU to check a kernel before the emulator runs it.

Optional: the pip wheels ``cuda-bindings`` and ``nvidia-cuda-nvrtc`` (``pip install -e '.[nvrtc]'``).
Without them the emulator still runs, but the student sees the host compiler's messages, and code
that only the emulator accepts could slip through.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from functools import lru_cache
from pathlib import Path

from ..base import CompileError

ARCH = "sm_90"  # an H100, the device the emulator imitates; a real arch so ptxas reports resources
INSTALL_HINT = "pip install -e '.[nvrtc]'"


@lru_cache(maxsize=1)
def _load():
    """(nvrtc module, (major, minor), None) or (None, None, reason)."""
    try:
        from cuda.bindings import nvrtc
    except Exception as e:  # ImportError, or an old cuda-python layout
        try:
            from cuda import nvrtc  # cuda-python < 12.6
        except Exception:
            return None, None, f"{type(e).__name__}: {e}"
    try:
        err, major, minor = nvrtc.nvrtcVersion()
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return None, None, f"nvrtcVersion failed: {err}"
    except Exception as e:  # the bindings load, the NVRTC library itself does not
        return None, None, f"{type(e).__name__}: {e}"
    return nvrtc, (major, minor), None


def available() -> bool:
    return _load()[0] is not None


def nvrtc_status() -> str:
    """One line for ``grader doctor``: which NVRTC checks kernels, or how to get one."""
    nvrtc, version, why = _load()
    if nvrtc is None:
        if why and ("No module named" in why or "cannot import" in why):
            return f"not installed: {INSTALL_HINT}"
        return f"not usable ({why}); reinstall with: {INSTALL_HINT}"
    wheel = ""
    try:
        from importlib.metadata import version as dist_version
        for dist in ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-nvrtc-cu13"):
            try:
                wheel = f" from {dist} {dist_version(dist)}"
                break
            except Exception:
                continue
    except Exception:
        pass
    return f"NVRTC {version[0]}.{version[1]}{wheel}"


def _check(nvrtc, result, what):
    err = result[0] if isinstance(result, tuple) else result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC failed in {what}: {err}")
    return result


def _translate_options(options) -> list[str]:
    """NVRTC takes CuPy's options as they are; only make sure the language level and arch are set."""
    opts = [str(o) for o in options]
    if not any(o.startswith(("-std", "--std")) for o in opts):
        opts.insert(0, "-std=c++17")
    if not any(o.startswith(("-arch", "--gpu-architecture")) for o in opts):
        opts.insert(0, f"--gpu-architecture={ARCH}")
    if not any(o.startswith(("-Xptxas", "--ptxas-options")) for o in opts):
        opts.append("--ptxas-options=-v")      # registers, spills and shared memory per kernel
    return opts


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")


def parse_ptxas(log: str, lowered: dict[str, str]) -> dict[str, dict]:
    """ptxas -v's report -> {kernel name: {"num_regs", "local_size_bytes", "spill_bytes",
    "shared_size_bytes"}}; template instantiations are named by their name expression."""
    out = {}
    parts = _ENTRY.split(log)
    for mangled, body in zip(parts[1::2], parts[2::2]):
        info = {}
        m = re.search(r"Used (\d+) registers", body)
        if m:
            info["num_regs"] = int(m.group(1))
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", body)
        if m:
            info["local_size_bytes"] = int(m.group(1))
            info["spill_bytes"] = int(m.group(2)) + int(m.group(3))
        m = re.search(r"(\d+) bytes smem", body)
        info["shared_size_bytes"] = int(m.group(1)) if m else 0
        out[lowered.get(mangled, mangled)] = info
    return out


def _stamp_path(cache: Path, code: str, opts, names) -> Path:
    _, version, _ = _load()
    key = json.dumps([code, opts, list(names or ()), version])
    return cache / f"nvrtc-{hashlib.sha256(key.encode()).hexdigest()[:32]}.ok"


CUDA_HEADERS = {"cuda_fp16.h", "cuda_bf16.h", "cooperative_groups.h", "cuda_runtime.h", "cuda.h",
                "cuda_fp8.h", "cuda_pipeline.h", "cuda/pipeline", "cuda/barrier", "mma.h",
                "cooperative_groups/reduce.h", "cuda_runtime_api.h", "vector_types.h",
                "device_launch_parameters.h"}


_MISSING = re.compile(r'(?:could not|cannot) open source file "([^"]+)"')


def _toolkit_include() -> str | None:
    roots = [os.environ.get(v) for v in ("CUDA_PATH", "CUDA_HOME")] + ["/usr/local/cuda"]
    for root in filter(None, roots):
        inc = Path(root) / "include"
        if (inc / "cuda_fp16.h").exists():
            return str(inc)
    try:  # the nvidia-cuda-runtime wheel ships the headers
        import nvidia
        for base in nvidia.__path__:
            for inc in Path(base).glob("*/include"):
                if (inc / "cuda_fp16.h").exists():
                    return str(inc)
    except Exception:
        pass
    return None


def _compile(nvrtc, code, opts, name_expressions, filename) -> tuple[bool, str]:
    _, prog = _check(nvrtc, nvrtc.nvrtcCreateProgram(code.encode(), filename.encode(), 0, [], []),
                     "nvrtcCreateProgram")
    try:
        for name in name_expressions or ():
            _check(nvrtc, nvrtc.nvrtcAddNameExpression(prog, str(name).encode()),
                   "nvrtcAddNameExpression")
        err, = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log = log.decode(errors="replace").rstrip("\x00").strip()
        if err == nvrtc.nvrtcResult.NVRTC_SUCCESS:
            lowered = {}
            for name in name_expressions or ():
                e, low = nvrtc.nvrtcGetLoweredName(prog, str(name).encode())
                if e == nvrtc.nvrtcResult.NVRTC_SUCCESS:
                    lowered[low.decode() if isinstance(low, bytes) else str(low)] = str(name)
            _compile.resources = parse_ptxas(log, lowered)
            return True, ""
        return False, log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def check(code: str, options=(), name_expressions=None, cache: Path | None = None,
          filename: str = "kernel.cu") -> bool | dict:
    """Compile ``code`` with NVRTC and raise CompileError with its log if it fails.

    Returns False (and does nothing) when NVRTC is not installed; on success, ptxas's resource
    report per kernel (a dict, possibly empty). A success is remembered in ``cache`` so that the
    grader's child processes do not compile the same kernel again.
    """
    nvrtc, _, _ = _load()
    if nvrtc is None:
        return False
    opts = _translate_options(options)
    stamp = _stamp_path(cache, code, opts, name_expressions) if cache else None
    if stamp is not None and stamp.exists():
        try:
            return json.loads(stamp.read_text())
        except ValueError:
            return {}
    _compile.resources = {}
    ok, log = _compile(nvrtc, code, opts, name_expressions, filename)
    missing = _MISSING.search(log or "")
    if not ok and missing and missing.group(1) in CUDA_HEADERS:
        # CuPy gives NVRTC the toolkit's headers; the NVRTC wheel has none. Use a toolkit if
        # there is one, else leave this kernel to the emulator's own header.
        inc = _toolkit_include()
        if inc is None:
            return False
        incs = [f"--include-path={inc}"]
        if (Path(inc) / "cccl").is_dir():  # CUDA 13 keeps libcu++ (cuda/std/...) there
            incs.append(f"--include-path={Path(inc) / 'cccl'}")
        ok, log = _compile(nvrtc, code, opts + incs, name_expressions, filename)
        if not ok and _MISSING.search(log):
            return False  # an incomplete toolkit: no fair verdict possible
    if not ok:
        raise CompileError("the kernel did not compile (NVRTC):", log)
    if stamp is not None:
        try:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            tmp = stamp.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(_compile.resources))
            os.replace(tmp, stamp)
        except OSError:
            pass
    return _compile.resources
