"""`grader doctor`: where it runs (Colab, Binder, a JupyterHub, GitHub Actions, or locally), what this
machine has, which runtime the grader will use, and what to do.

It also names the ways a GPU machine goes wrong with CuPy: several CuPy distributions installed at
once, a CuPy built for a newer CUDA than the driver supports (cudaErrorInsufficientDriver), a GPU that
nvidia-smi sees with no CuPy installed. diagnose_cuda() decides from the facts alone (so the tests can
give it any machine); doctor() gathers them and exits 2 when a mismatch leaves the GPU unusable.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass


def _first_line(cmd) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        text = (out.stdout or out.stderr).strip()
        return text.splitlines()[0] if text else None
    except (OSError, subprocess.SubprocessError):
        return None


# ---- CuPy against the driver: the diagnosis, from the facts alone ------------------------------------

@dataclass(frozen=True)
class Finding:
    text: str             # what is wrong and the command that fixes it
    fatal: bool           # the GPU cannot be used until it is fixed (doctor exits 2)


_INSUFFICIENT = re.compile(r"InsufficientDriver|driver version is insufficient", re.I)


def extra_for(driver: tuple[int, int] | None) -> str | None:
    """The course's extra for a driver supporting CUDA `driver`: cuda13 from 13 on, cuda12 for 12, None
    for an older driver (the course's CuPy builds need 12)."""
    if driver is None or driver[0] < 12:
        return None
    return "cuda13" if driver[0] >= 13 else "cuda12"


def cupy_major(dist: str) -> int | None:
    """The CUDA major a CuPy distribution is built for, from its name: cupy-cuda12x -> 12,
    cupy-cuda113 -> 11; None for a source build (plain `cupy`) or ROCm."""
    m = re.fullmatch(r"cupy-cuda(\d+)(x?)", dist)
    if not m:
        return None
    return int(m[1]) if m[2] else int(m[1][:2])


def _v(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def diagnose_cuda(dists: dict[str, str], driver: tuple[int, int] | None, cupy_cuda: int | None,
                  error: str | None) -> list[Finding]:
    """What is wrong between CuPy and the NVIDIA driver, and the fix.

    dists: the CuPy distributions installed {name: version} (names normalised: cupy-cuda12x);
    driver: the CUDA version the driver supports (CuPy's driverGetVersion, else nvidia-smi's "CUDA
    Version"), None when no NVIDIA driver answers; cupy_cuda: the CUDA major CuPy is built for (its
    runtimeGetVersion, else read from the distribution's name); error: CuPy's error when it cannot
    start (None when it works or is not installed)."""
    out: list[Finding] = []
    extra = extra_for(driver)
    install = f"pip install -e '.[{extra}]'" if extra else None
    names = sorted(dists)
    if cupy_cuda is None and len(names) == 1:
        cupy_cuda = cupy_major(names[0])
    if len(names) > 1:
        listed = ", ".join(f"{n} {dists[n]}" for n in names)
        fix = f"pip uninstall -y {' '.join(names)} && " + (
            install or "pip install -e '.[cuda12]' (or '.[cuda13]': the CUDA version nvidia-smi shows)")
        out.append(Finding(f"Several CuPy distributions are installed at once ({listed}): they share the "
                           f"`cupy` package and overwrite each other's files. Keep one: {fix}",
                           fatal=error is not None))
        return out
    dist = names[0] if names else (f"cupy-cuda{cupy_cuda}x" if cupy_cuda else "cupy")
    if names and driver is not None and cupy_cuda is not None and cupy_cuda > driver[0]:
        if install:
            fix = f"pip uninstall -y {dist} && {install} (or upgrade the NVIDIA driver to one for CUDA {cupy_cuda})"
        else:
            fix = (f"upgrade the NVIDIA driver (the course's CuPy builds need CUDA 12 or newer), or pip "
                   f"uninstall -y {dist} and use the CPU runtime: pip install -e '.[nvrtc]'")
        out.append(Finding(f"The driver supports CUDA {_v(driver)} but CuPy is built for CUDA {cupy_cuda}: "
                           f"{fix}.", fatal=True))
        return out
    if error and _INSUFFICIENT.search(error):
        seen = f"the driver supports CUDA {_v(driver)}" if driver else "nvidia-smi shows the CUDA version the driver supports"
        fix = (f"pip uninstall -y {dist} && {install}" if install else
               f"pip uninstall -y {dist}, then pip install -e '.[cuda12]' or '.[cuda13]' to match it")
        out.append(Finding(f"CuPy says the CUDA driver is too old for it ({seen}): {fix} (or upgrade the "
                           "NVIDIA driver).", fatal=True))
        return out
    if not names and driver is not None:
        if install:
            out.append(Finding(f"An NVIDIA GPU is visible (its driver supports CUDA {_v(driver)}) but CuPy is not "
                               f"installed: {install} and the grader runs on it.", fatal=False))
        else:
            out.append(Finding(f"An NVIDIA GPU is visible but its driver supports CUDA {_v(driver)}, older than the "
                               "course's CuPy builds need (12): upgrade the driver to use it; the CPU runtime "
                               "works meanwhile.", fatal=False))
        return out
    if names and error and driver is not None:
        out.append(Finding(f"CuPy cannot use the GPU that nvidia-smi shows ({error}); `python -c \"import cupy; "
                           "cupy.show_config()\"` says more.", fatal=False))
    return out


def cupy_distributions() -> dict[str, str]:
    """The CuPy distributions installed in this environment, {normalised name: version}."""
    from importlib.metadata import distributions
    out = {}
    for d in distributions():
        name = re.sub(r"[-_.]+", "-", (d.metadata["Name"] or "")).lower()
        if name == "cupy" or name.startswith("cupy-"):
            out[name] = d.version
    return out


def nvidia_smi_cuda() -> tuple[int, int] | None:
    """The CUDA version nvidia-smi shows (what the driver supports), None without a working one."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", out)
    return (int(m[1]), int(m[2])) if m else None


# ---- where it runs ------------------------------------------------------------------------------

def where(env=None, modules=None) -> tuple[str, str]:
    """(where the grader runs, what that means for the course), from the environment variables and
    the imported modules alone: Google Colab, Binder, a JupyterHub, GitHub Actions, or locally."""
    env = os.environ if env is None else env
    modules = sys.modules if modules is None else modules
    if "google.colab" in modules or env.get("COLAB_RELEASE_TAG") or env.get("COLAB_GPU") is not None:
        return ("Google Colab", "Runtime > Change runtime type > a GPU runs the kernels natively; without "
                "one, the CPU emulator runs every exercise. Files you change are lost when the runtime "
                "ends: download your exercises.")
    if any(k in env for k in ("BINDER_LAUNCH_HOST", "BINDER_REQUEST", "BINDER_REPO_URL", "BINDER_REF_URL")):
        return ("Binder (a JupyterHub of BinderHub, CPU only)", "the CPU emulator runs every exercise. "
                "The session and your changes end when it stops: download your exercises.")
    if env.get("JUPYTERHUB_API_URL") or env.get("JUPYTERHUB_USER"):
        user = env.get("JUPYTERHUB_USER")
        return (f"a JupyterHub{f' (user {user})' if user else ''}", "without a GPU on the hub, the CPU "
                "emulator runs every exercise; your files stay in your hub's home folder.")
    if env.get("GITHUB_ACTIONS") == "true":
        return ("GitHub Actions (GitHub Classroom's autograding runs here)", "CPU only: the emulator.")
    return ("locally", "")


def _cuda_version(v) -> tuple[int, int] | None:
    return (v // 1000, v % 1000 // 10) if v else None


def nccl_status() -> str:
    """NCCL through CuPy (module 12's transport between GPUs): its version, or why it is missing."""
    try:
        from cupy.cuda import nccl
        v = nccl.get_version()
    except Exception as e:
        return (f"not available to CuPy ({type(e).__name__}: {e}); module 12 then runs on the CPU only "
                "(--backend cpu, where a stand-in plays every rank): pip install nvidia-nccl-cu12 or -cu13")
    return f"{v // 10000}.{v % 10000 // 100}.{v % 100} (cupy.cuda.nccl)"


def doctor() -> int:
    import numpy
    place, about = where()
    print(f"Where       {place}" + (f": {about}" if about else ""))
    print(f"Python      {sys.version.split()[0]} ({platform.machine()}, {platform.system()})")
    print(f"NumPy       {numpy.__version__}")

    gpu_line, gpu_why = None, ""
    driver = cupy_cuda = cupy_error = None
    try:
        import cupy
        try:
            cupy_cuda = (_cuda_version(cupy.cuda.runtime.runtimeGetVersion()) or (None,))[0]
        except Exception:
            pass
        try:
            driver = _cuda_version(cupy.cuda.runtime.driverGetVersion())
        except Exception:
            pass
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
            cupy_error = f"{type(e).__name__}: {e}"
    except ImportError as e:
        gpu_why = f"CuPy is not installed ({type(e).__name__})"
    except Exception as e:                # installed but broken (two CuPys over each other, say)
        gpu_why = f"CuPy does not import ({type(e).__name__}: {e})"
        cupy_error = f"{type(e).__name__}: {e}"
    print(f"GPU         {gpu_line or gpu_why}")
    if gpu_line:
        print(f"GPUs        {n}: module 12 runs a case of P ranks on P of them, one process each (cases of "
              f"more than {n} ranks: --backend cpu)")
        print(f"NCCL        {nccl_status()}")
    else:
        print("GPUs        0: module 12's ranks run on the CPU, through a stand-in for NCCL")
        print("NCCL        not used without a GPU")
    smi = nvidia_smi_cuda()
    driver = driver or smi
    findings = diagnose_cuda(cupy_distributions(), driver, cupy_cuda, cupy_error)
    if smi and not gpu_line:
        print(f"nvidia-smi  a GPU whose driver supports CUDA {_v(smi)}")

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
    todo = [f.text for f in findings]
    if chosen == "cpu":
        if cxx is None:
            todo.append("Install a C++ compiler (Debian/Ubuntu: apt install g++; macOS: xcode-select "
                        "--install): the CPU runtime compiles your kernel with it.")
        if not nv.startswith("NVRTC"):
            todo.append("Optional: pip install -e '.[nvrtc]' so the CPU runtime first compiles with "
                        "NVIDIA's real compiler and shows its error messages (no GPU needed).")
        if not findings and driver is None:
            todo.append("Have an NVIDIA GPU? pip install -e '.[cuda12]' or '.[cuda13]' (match `nvidia-smi`'s "
                        "CUDA version) and the grader uses it; `grader bench` needs it.")
    else:
        todo.append("`grader bench ID` times your kernel here; `--backend cpu` finds bugs the GPU hides.")
    print("\n".join(f"  - {t}" for t in todo))
    if chosen == "cpu" and cxx is None:
        return 2
    if any(f.fatal for f in findings):
        print("\nThe GPU cannot be used until the first item above is fixed; meanwhile `--backend cpu` works.")
        return 2
    return 0
