"""`grader doctor`: what this machine has, which runtime the grader will use, and what to do."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys


def _first_line(cmd) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        text = (out.stdout or out.stderr).strip()
        return text.splitlines()[0] if text else None
    except (OSError, subprocess.SubprocessError):
        return None


def doctor() -> int:
    import numpy
    print(f"Python      {sys.version.split()[0]} ({platform.machine()}, {platform.system()})")
    print(f"NumPy       {numpy.__version__}")

    gpu_line, gpu_why = None, ""
    try:
        import cupy
        try:
            n = cupy.cuda.runtime.getDeviceCount()
            props = cupy.cuda.runtime.getDeviceProperties(0) if n else None
            if props:
                name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
                drv = cupy.cuda.runtime.driverGetVersion()
                rtv = cupy.cuda.runtime.runtimeGetVersion()
                gpu_line = (f"{name}, {props['multiProcessorCount']} SMs, compute capability "
                            f"{props['major']}.{props['minor']}, driver CUDA {drv // 1000}.{drv % 1000 // 10}, "
                            f"CuPy {cupy.__version__} built for CUDA {rtv // 1000}.{rtv % 1000 // 10}")
            else:
                gpu_why = f"CuPy {cupy.__version__} is installed but sees no GPU"
        except Exception as e:
            gpu_why = f"CuPy {cupy.__version__} is installed but cannot use a GPU ({e})"
    except Exception as e:
        gpu_why = f"CuPy is not installed ({type(e).__name__})"
    print(f"GPU         {gpu_line or gpu_why}")

    try:
        from .runtimes.cpu import nvrtc_status
        nv = nvrtc_status()
    except Exception as e:
        nv = f"unknown ({type(e).__name__}: {e})"
    print(f"NVRTC       {nv}")
    cxx = None
    for name in (os.environ.get("CXX"), "g++", "clang++", "c++"):
        if name and shutil.which(name):
            cxx = f"{shutil.which(name)}: {_first_line([name, '--version'])}"
            break
    print(f"C++ (host)  {cxx or 'none found'}")

    from .runtimes import resolve_backend
    env = os.environ.get("GRADER_BACKEND")
    try:
        chosen = resolve_backend(None)
    except Exception as e:
        print(f"\nGRADER_BACKEND={env!r} is not valid: {e}")
        return 2
    why = (f"GRADER_BACKEND={env}" if env else
           ("auto: a GPU is visible through CuPy" if chosen == "gpu" else "auto: no usable GPU"))
    print(f"\nThe grader will use the {chosen.upper()} runtime ({why}).")
    todo = []
    if chosen == "cpu":
        if cxx is None:
            todo.append("Install a C++ compiler (Debian/Ubuntu: apt install g++; macOS: xcode-select "
                        "--install): the CPU runtime compiles your kernel with it.")
        if not nv.startswith("NVRTC"):
            todo.append("Optional: pip install -e '.[nvrtc]' so the CPU runtime first compiles with "
                        "NVIDIA's real compiler and shows its error messages (no GPU needed).")
        todo.append("Have an NVIDIA GPU? pip install -e '.[cuda12]' or '.[cuda13]' (match `nvidia-smi`'s "
                    "CUDA version) and the grader uses it; `grader bench` needs it.")
    else:
        todo.append("`grader bench ID` times your kernel here; `--backend cpu` finds bugs the GPU hides.")
    print("\n".join(f"  - {t}" for t in todo))
    if chosen == "cpu" and cxx is None:
        return 2
    return 0
