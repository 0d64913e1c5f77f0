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
    ladder.py     (optional: modules 06, 10, 11) the speed ladder `grader ladder` runs: steps(ctx) ->
                  [spec.LadderStep], step 1 first and the solution itself last, then any variant
                  checked with them but never timed (timed=False); CHECK_CASES {"cpu": case names,
                  "gpu": case names}; SAME_AS_SOLUTION {"cpu" or "gpu": the outputs an untimed variant
                  must share with the solution bit for bit}; TIMING, a spec.LadderTiming
    variants.py   (optional: module 11) the other variants its lesson compares, for `grader ladder 11
                  --variants`: steps(ctx), CHECK_CASES, shapes(cases), timing_inputs(rt, params, solution)

Task folders import the attention kit (grader/attention/) and the spec types, never each other and
never a solution.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

PIECES = ("checks", "bench", "wrong", "notebook")
OPTIONAL_PIECES = ("ladder", "variants")


def package(name: str) -> ModuleType:
    """grader.tasks.NAME itself (the catalogue data)."""
    return importlib.import_module(f"{__name__}.{name}")


def load_piece(ex, piece: str) -> ModuleType:
    if piece not in PIECES + OPTIONAL_PIECES:
        raise ValueError(f"unknown piece {piece!r} of a task; the pieces are "
                         f"{', '.join(PIECES + OPTIONAL_PIECES)}")
    return importlib.import_module(f"{__name__}.{ex.name}.{piece}")


def has_piece(ex, piece: str) -> bool:
    """Does exercise `ex`'s task folder hold this piece (an optional one may be missing)?"""
    return (Path(__file__).parent / ex.name / f"{piece}.py").is_file()


def load_task(ex) -> ModuleType:
    """The checks of exercise `ex` (a catalogue.Exercise)."""
    return load_piece(ex, "checks")
