"""How each family of exercise functions is called, and the reference outputs it is held to.

Prefill (00, 02, 03): fn(rt, q, k, v, scale) -> (o, lse). Decode (04, 05) passes its cache and
context lengths, and a forced split count when a case gives one.
"""
from __future__ import annotations

from contextlib import contextmanager

from . import references as R


def prefill_reference(inputs: dict, causal: bool = False) -> dict:
    o, lse = R.attention(inputs["q"], inputs["k"], inputs["v"], inputs["scale"], causal=causal)
    return {"o": o, "lse": lse}


def case_tiles(p: dict) -> dict:
    """A case's tile sizes, {"BLOCK_M": m, "BLOCK_N": n} from its `tiles` ("64x32"), or {}."""
    if not p.get("tiles"):
        return {}
    m, n = (int(x) for x in str(p["tiles"]).split("x"))
    return {"BLOCK_M": m, "BLOCK_N": n}


@contextmanager
def tiles_of(fn, p: dict):
    """A case with `tiles` ("64x32": BLOCK_M × BLOCK_N) runs the checked file with those tile sizes in
    its CONFIG, as the lesson's one assignment does (CONFIG = dict(CONFIG, BLOCK_N=32)): the kernel
    must be right at every tile size the lesson offers, not only at its file's own."""
    config = getattr(fn, "__globals__", {}).get("CONFIG")
    if not case_tiles(p) or not isinstance(config, dict):
        yield
        return
    fn.__globals__["CONFIG"] = dict(config, **case_tiles(p))
    try:
        yield
    finally:
        fn.__globals__["CONFIG"] = config


def prefill_call(fn, rt, inputs: dict, p: dict) -> dict:
    with tiles_of(fn, p):
        o, lse = fn(rt, inputs["q"], inputs["k"], inputs["v"], inputs["scale"])
    return {"o": o, "lse": lse}


def split_option(p: dict) -> dict:
    """Decode cases with `num_splits` force the launch code's split count (so the combine is
    exercised on the CPU too, where the heuristic would pick few splits)."""
    return {"num_splits": p["num_splits"]} if p.get("num_splits") else {}
