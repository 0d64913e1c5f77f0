"""How each family of exercise functions is called, and the reference outputs it is held to.

Prefill (00, 02, 03): fn(rt, q, k, v, scale) -> (o, lse). Decode (04, 05) passes its cache and
context lengths, and a forced split count when a case gives one.
"""
from __future__ import annotations

from . import references as R


def prefill_reference(inputs: dict, causal: bool = False) -> dict:
    o, lse = R.attention(inputs["q"], inputs["k"], inputs["v"], inputs["scale"], causal=causal)
    return {"o": o, "lse": lse}


def prefill_call(fn, rt, inputs: dict, p: dict) -> dict:
    o, lse = fn(rt, inputs["q"], inputs["k"], inputs["v"], inputs["scale"])
    return {"o": o, "lse": lse}


def split_option(p: dict) -> dict:
    """Decode cases with `num_splits` force the launch code's split count (so the combine is
    exercised on the CPU too, where the heuristic would pick few splits)."""
    return {"num_splits": p["num_splits"]} if p.get("num_splits") else {}
