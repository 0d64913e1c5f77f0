"""The checks of a low-precision prefill kernel (06_flash_tensor_cores on mma.sync, 10_flash_hopper on
wgmma): FlashAttention in float16 and bfloat16, o in the input type, lse in float32.

The inputs are rounded to the case's dtype (bfloat16 travels as uint16 bits, called with
dtype="bfloat16"); the reference is float64 on the rounded inputs. The tolerance of each case is
lowp.MULTIPLE times the error of a same-precision reference plus a floor (grader/attention/lowp.py),
so a correct low-precision kernel passes and a structural bug, orders of magnitude larger, does not.
The diagnoses are 02/03's replays, on the decoded inputs, with the case's rounding noise allowed.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import fragments, lanes, lowp, replays, weights
from . import references as R
from .inputs import attention_inputs
from ..spec import Case, Tolerance

SHAPES = [  # name, (B, H, Hkv, Nq, Nk, d), extra; tile edges of 06 (128 × 64) and 10 (128 or 192 × 128)
    ("one_query_one_key", (1, 1, 1, 1, 1, 64), {}),
    ("tiny", (1, 1, 1, 3, 5, 64), {}),
    ("below_tile", (1, 2, 2, 17, 19, 64), {}),
    ("tile_minus_1", (1, 1, 1, 127, 63, 64), {}),
    ("tile_plus_1", (1, 1, 1, 129, 65, 64), {}),
    ("primes", (2, 3, 3, 37, 101, 64), {}),
    ("gqa_4_to_1", (1, 8, 2, 33, 47, 64), {}),
    ("head_dim_128", (1, 2, 2, 70, 130, 128), {}),
    ("long", (1, 2, 1, 129, 257, 64), {}),
    ("large_logits", (1, 2, 2, 40, 77, 64), {"logit": 50.0}),
    ("custom_scale", (2, 6, 2, 33, 47, 64), {"scale": 0.3}),
    ("causal_square", (1, 2, 2, 130, 130, 64), {"causal": True}),
    ("causal_chunked_d128", (1, 2, 1, 40, 170, 128), {"causal": True}),
    ("causal_queries_past_keys", (1, 2, 2, 150, 60, 64), {"causal": True}),
    # Nq > Nk over whole key tiles: query tile 1's diagonal starts inside the full key tile 0.
    ("causal_queries_past_key_tiles", (1, 1, 1, 260, 140, 64), {"causal": True}),
    # An odd offset (17: 1 modulo the mma's 16 keys, where the cases above have 0, 2, 6 and 8): a skip
    # of key blocks one block too eager drops the block holding a row's own last visible key.
    ("causal_offset_17", (1, 1, 1, 80, 97, 64), {"causal": True}),
    ("bf16_tile_plus_1", (1, 1, 1, 129, 65, 64), {"dtype": "bfloat16"}),
    ("bf16_gqa_causal_d128", (2, 4, 2, 65, 129, 128), {"dtype": "bfloat16", "causal": True}),
    ("bf16_large_logits", (1, 2, 2, 40, 77, 64), {"dtype": "bfloat16", "logit": 50.0}),
    # Nearly flat scores over 1100 keys whose values sit near 100 in half the features: o is about 100
    # there, but the unnormalised sum P V about 110000, past float16's 65504 (an accumulator rounded to
    # float16 before 1/l is inf there, and right in the other half).
    ("values_near_100_flat", (1, 1, 1, 20, 1100, 64), {"flat": True, "v_offset": 100.0}),
]
CASES = [Case(name, dict(dict(zip(("B", "H", "Hkv", "Nq", "Nk", "d"), shape)),
                         **{"dtype": "float16", "causal": False, **extra}))
         for name, shape, extra in SHAPES]
__all__ = ["CASES", "TOLERANCES", "SHRINK_KEYS", "valid", "make_inputs", "reference", "tolerances",
           "call", "widen", "diagnose"]
# The tolerance of a case is computed from its inputs (tolerances below); these are the loosest ones
# a float16 case can get, stated for the tools that list a module's tolerances.
TOLERANCES = {"o": Tolerance(rel=2e-3, abs=2e-2), "lse": Tolerance(rel=2e-5, abs=2e-4)}
SHRINK_KEYS = ("B", "H", "Hkv", "Nq", "Nk")          # d stays 64 or 128: the kernel supports no other


def valid(p) -> bool:
    return p["d"] in (64, 128) and p["H"] % p["Hkv"] == 0


def make_inputs(p, rng):
    x = attention_inputs(p, rng)
    for name in ("q", "k", "v"):
        x[name] = lowp.encode(x[name], p["dtype"])
    return x


def decoded(inputs, p) -> dict:
    """The inputs as the float values they hold (what the reference and the replays read)."""
    return dict(inputs, **{x: lowp.decode(inputs[x], p["dtype"]).astype(np.float64) for x in ("q", "k", "v")})


def reference(inputs, p):
    x = decoded(inputs, p)
    o, lse = R.attention(x["q"], x["k"], x["v"], x["scale"], causal=p["causal"])
    return {"o": o, "lse": lse}


def tolerances(inputs, p, ref):
    x = decoded(inputs, p)
    o_sp, lse_sp = lowp.same_precision_attention(x["q"], x["k"], x["v"], x["scale"], p["dtype"], p["causal"])
    return lowp.tolerances(o_sp, lse_sp, ref, p["dtype"])


def call(fn, rt, inputs, p):
    dtype = p["dtype"] if p["dtype"] == "bfloat16" else None    # float16 is read from the arrays
    o, lse = fn(rt, inputs["q"], inputs["k"], inputs["v"], inputs["scale"], causal=p["causal"], dtype=dtype)
    return {"o": o, "lse": lse}


def widen(out, p):
    """o holds the input type: widened exactly to float32 for the comparison (the poison kept)."""
    return dict(out, o=lowp.decode(out["o"], p["dtype"]))


def diagnose(ctx):
    p = ctx.params
    # The replays read float inputs, and allow a correct kernel's rounding noise (unit roundoff).
    ctx = dataclasses.replace(ctx, inputs=decoded(ctx.inputs, p), noise=lowp.EPS[p["dtype"]] / 2)
    s, v = replays.scores(ctx.inputs)
    visible = R.causal_mask(p["Nq"], p["Nk"]) if p["causal"] else None
    if p["causal"]:
        yield from replays.empty_row_causes(ctx)
        yield from replays.mask_causes(ctx, s, v)
        yield from fragments.mask_fragment_causes(ctx, s, v)
    yield from replays.store_format_causes(ctx)
    yield from replays.prefill_causes(ctx, s, v, visible)
    yield from fragments.operand_causes(ctx, visible)
    yield from lanes.reduction_causes(ctx, s, v, visible, layout="quad")
    yield from fragments.streaming_causes(ctx, s, v, visible)
    yield from fragments.shifted_mask_causes(ctx, s, v)
    yield from fragments.operand_layout_causes(ctx, s, v, visible)
    yield from weights.observation(weights.prefill_rows(ctx, s, v, visible), noise=ctx.noise)
