"""One module per exercise: its cases as data, input generator, reference, tolerances and bench.

A task module defines:
    CASES        list of Case, from small to large (names are unique)
    make_inputs(params, rng) -> dict of named NumPy inputs (arrays and Python scalars)
    reference(inputs, params) -> dict of named float64 outputs
    call(fn, rt, inputs, params) -> dict of named outputs; `inputs` arrays are already on rt's device
    TOLERANCES   {output name: (max relative Frobenius error, max absolute error)}
optionally:
    diagnose(ctx) -> str | None     a likely cause, from the shape of the error (see engine/diagnose.py)
    BENCH        a list of BenchCase for `grader bench`
"""
from __future__ import annotations

import importlib
from types import ModuleType

from ..catalogue import Exercise


def load_task(ex: Exercise) -> ModuleType:
    return importlib.import_module(f"grader.tasks.{ex.name}")
