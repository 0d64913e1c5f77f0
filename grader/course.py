"""Helpers for notebooks and scripts: load an exercise or its solution, get a runtime.

    from grader.course import load, runtime
    rt = runtime()                                   # the GPU if CuPy sees one, else the CPU emulator
    flash = load("02_flash_forward").flash_forward   # the solution's entry function
"""
from __future__ import annotations

import importlib.util
from types import ModuleType

from . import catalogue, paths
from .runtimes import get_runtime
from .runtimes.base import register_origin


def load(ex_id: str, which: str = "solution") -> ModuleType:
    """Import solutions/ID.py (which="solution") or exercises/ID.py (which="exercise")."""
    ex = catalogue.resolve(ex_id)
    path = paths.solution_file(ex.id) if which == "solution" else paths.exercise_file(ex.id)
    register_origin(path)
    spec = importlib.util.spec_from_file_location(f"{which}_{ex.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def runtime(backend: str | None = None):
    rt = get_runtime(backend)
    print(f"runtime: {rt.name} ({rt.device_name})")
    return rt


def on_device(rt, inputs: dict) -> dict:
    """The NumPy arrays of `inputs` copied to rt's device; scalars as they are."""
    import numpy as np
    return {k: rt.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


def timed(rt, fn, reps=5) -> float:
    """Median milliseconds of fn(): CUDA events on the GPU, wall clock on the CPU emulator (which
    says nothing about GPU speed: notebooks label such numbers as emulator times)."""
    import time

    import numpy as np
    if rt.name == "gpu":
        from .bench import time_gpu
        return float(np.median(time_gpu(fn, rt, warmup=2, reps=reps)))
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts))
