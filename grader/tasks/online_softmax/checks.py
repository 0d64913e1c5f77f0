"""Checks for 01_online_softmax: row softmax and lse, one warp per row."""
from __future__ import annotations

import numpy as np

from ...attention import references as R
from ...spec import F32, Case

CASES = [
    Case("one_element", dict(R=1, n=1)),
    Case("fewer_than_a_warp", dict(R=3, n=5)),
    Case("warp_minus_1", dict(R=4, n=31)),
    Case("one_warp", dict(R=5, n=32)),
    Case("warp_plus_1", dict(R=6, n=33)),
    Case("rows_not_multiple_of_block", dict(R=7, n=100)),
    Case("prime_length", dict(R=9, n=1009)),
    Case("large_logits", dict(R=8, n=300, spread=50.0)),
    Case("huge_logits", dict(R=8, n=300, spread=1000.0)),
    Case("masked_entries", dict(R=8, n=200, masked=0.5)),
    Case("fully_masked_rows", dict(R=8, n=64, masked_rows=3)),
    Case("increasing_rows", dict(R=4, n=500, increasing=True)),
    Case("many_rows", dict(R=257, n=128)),
    Case("long_rows", dict(R=4, n=4099)),
]
TOLERANCES = {"y": F32, "lse": F32}


def make_inputs(p, rng):
    x = rng.standard_normal((p["R"], p["n"])) * p.get("spread", 3.0)
    if p.get("increasing"):
        # Each new element is the new max: the running sum is rescaled at every step.
        x = np.sort(x, axis=1) + np.linspace(0, 40, p["n"])
    if p.get("masked"):
        x[rng.random(x.shape) < p["masked"]] = -np.inf
        x[:, 0] = rng.standard_normal(p["R"])       # keep at least one visible entry per row
    if p.get("masked_rows"):
        x[rng.choice(p["R"], min(p["masked_rows"], p["R"]), replace=False)] = -np.inf
    return {"x": x.astype(np.float32)}


def reference(inputs, p):
    y, lse = R.softmax(inputs["x"])
    return {"y": y, "lse": lse}


def call(fn, rt, inputs, p):
    y, lse = fn(rt, inputs["x"])
    return {"y": y, "lse": lse}
