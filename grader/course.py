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
