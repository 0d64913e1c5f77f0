"""One folder per module: grader/tasks/NAME/ for the exercise id NN_NAME.

    __init__.py   catalogue data: TITLE, ENTRY (the function the exercise defines), GOALS, HINTS
    checks.py     CASES (small to large, unique names), TOLERANCES {output: spec.Tolerance},
                  make_inputs(params, rng) -> NumPy inputs, reference(inputs, params) -> float64
                  outputs, call(fn, rt, inputs, params) -> outputs; optionally diagnose(ctx),
                  valid(params), SHRINK_KEYS for shrinking, tolerances(inputs, params, ref)
                  -> {output: Tolerance} when the tolerance depends on the case, and
                  widen(outputs, params) -> float32 NumPy outputs when the kernel writes a 2-byte type,
                  BLOCK_ORDER_CHECK = True to have the emulator rerun every block last-first (for
                  kernels whose blocks must own disjoint outputs or add into shared ones atomically)
    bench.py      BENCH: a list of spec.BenchCase for `grader bench`
    wrong.py      WRONG: the wrong versions the checks must reject (grader.wrong.Wrong)
    notebook.py   CELLS: the class notebook's cells, from which notebooks/ID.ipynb is generated

Task folders import the attention kit (grader/attention/) and the spec types, never each other and
never a solution.
"""
from __future__ import annotations

import importlib
from types import ModuleType

PIECES = ("checks", "bench", "wrong", "notebook")


def package(name: str) -> ModuleType:
    """grader.tasks.NAME itself (the catalogue data)."""
    return importlib.import_module(f"{__name__}.{name}")


def load_piece(ex, piece: str) -> ModuleType:
    if piece not in PIECES:
        raise ValueError(f"unknown piece {piece!r} of a task; the pieces are {', '.join(PIECES)}")
    return importlib.import_module(f"{__name__}.{ex.name}.{piece}")


def load_task(ex) -> ModuleType:
    """The checks of exercise `ex` (a catalogue.Exercise)."""
    return load_piece(ex, "checks")
