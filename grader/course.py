"""Helpers for notebooks and scripts: load an exercise or its solution, get a runtime.

    from grader.course import load, runtime
    rt = runtime()                                   # the GPU if CuPy sees one, else the CPU emulator
    flash = load("02_flash_forward").flash_forward   # the solution's entry function

In a student release (`grader release`: no solutions/), load() imports the student's own exercise in
place of a solution and prints a note that says so, and whether its last check passed.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from . import catalogue, paths
from .runtimes import get_runtime
from .runtimes.base import register_origin


_noted: set[str] = set()


def source_file(ex_id: str, which: str = "solution") -> Path:
    """The file load() imports: solutions/ID.py (which="solution") or exercises/ID.py. In a student
    release, which has no solutions/, the student's exercises/ID.py stands in for the solution, with a
    note (once per exercise): a notebook then shows the student's own kernel, and says how far to
    trust it."""
    ex = catalogue.resolve(ex_id)
    if which != "solution":
        return paths.exercise_file(ex.id)
    path = paths.solution_file(ex.id)
    from .release import is_release
    if path.is_file() or not is_release():
        return path
    if ex.id not in _noted:
        _noted.add(ex.id)
        from .progress import progress
        last = progress().get(ex.id)
        if last is None:
            state = (f"no `grader check {ex.number:02d}` is recorded yet: until it passes, what follows shows "
                     "your kernel's bugs, or NaN where it writes nothing")
        elif last.get("passed"):
            state = f"your last `grader check {ex.number:02d}` passed"
        else:
            state = (f"your last `grader check {ex.number:02d}` did not pass: what follows shows your kernel's "
                     "bugs, or NaN where it writes nothing")
        print(f"note: this student release has no solutions/, so your exercises/{ex.id}.py runs in place "
              f"of the course's solution ({state}).")
    return paths.exercise_file(ex.id)


def load(ex_id: str, which: str = "solution") -> ModuleType:
    """Import solutions/ID.py (which="solution") or exercises/ID.py (which="exercise"); see
    source_file() for a student release."""
    ex = catalogue.resolve(ex_id)
    path = source_file(ex.id, which)
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


def plot_ladder(ladder: dict, baselines: dict, tflops, title: str):
    """A speed ladder as the class notebooks draw it: one panel per head dimension (d = 64, 128), the
    steps' TFLOP/s joined, each baseline a dashed line. ladder and baselines: name -> (ms at d = 64,
    ms at d = 128); tflops(ms, d) -> TFLOP/s."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    steps = list(ladder)
    for ax, (j, d) in zip(axes, enumerate((64, 128))):
        ax.plot(range(len(steps)), [tflops(ladder[s][j], d) for s in steps], "o-", color="C0", label="the ladder")
        for k, (name, ms) in enumerate(baselines.items()):
            ax.axhline(tflops(ms[j], d), color=f"C{k + 1}", ls="--", lw=1, label=name)
        ax.set_xticks(range(len(steps)), [s.split(". ")[1] for s in steps], rotation=20, fontsize=8)
        ax.set_title(f"d = {d}")
        ax.set_ylabel("TFLOP/s")
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    plt.show()
