"""Pick a runtime: ``gpu`` (CuPy), ``cpu`` (the emulator) or ``auto``."""
from __future__ import annotations

import os

from .base import Runtime, RuntimeUnavailable

BACKENDS = ("auto", "gpu", "cpu")


def resolve_backend(backend: str | None = None) -> str:
    """The backend that ``auto`` (or GRADER_BACKEND) means on this machine."""
    backend = (backend or os.environ.get("GRADER_BACKEND") or "auto").lower()
    if backend not in BACKENDS:
        raise RuntimeUnavailable(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}.")
    if backend == "auto":
        from .gpu import gpu_available
        backend = "gpu" if gpu_available() else "cpu"
    return backend


def get_runtime(backend: str | None = None) -> Runtime:
    backend = resolve_backend(backend)
    if backend == "gpu":
        from .gpu import GpuRuntime
        return GpuRuntime()
    from .cpu import CpuRuntime
    return CpuRuntime()
