"""Checks for 11_backward_tensor_cores: dQ, dK and dV in float16 and bfloat16 on tensor cores.

q, k, v, o and dO are 16-bit (bfloat16 as uint16 bits, called with dtype="bfloat16"), lse float32;
the gradients come back in the input type. The reference is module 09's float64 gradients on the
rounded inputs; each gradient's tolerance is module 06's low-precision rule against a same-precision
reference (grader/attention/backward_lowp.py). The diagnosis replays module 09's bugs on the decoded
inputs, with the case's rounding allowed, and this module's fragment bugs.
"""
from __future__ import annotations

from ...attention import backward_lowp
from ...spec import Case, Tolerance

SHAPES = [  # name, (B, H, Hkv, Nq, Nk, d), extra. The solution's tiles: 64 or 32 queries × 128 keys.
    ("one_query_one_key", (1, 1, 1, 1, 1, 64), {}),
    ("tiny", (1, 1, 1, 3, 5, 64), {}),
    ("below_tile", (1, 2, 2, 17, 19, 64), {}),
    ("tile_minus_1", (1, 1, 1, 63, 127, 64), {}),
    ("tile_plus_1", (1, 1, 1, 65, 129, 64), {}),
    ("primes", (2, 3, 3, 37, 101, 64), {}),
    ("more_queries_than_keys", (1, 2, 1, 70, 13, 64), {}),
    ("gqa_4_to_1", (1, 8, 2, 33, 47, 64), {}),
    ("head_dim_128", (1, 2, 2, 70, 130, 128), {}),
    ("long", (1, 2, 1, 129, 257, 64), {}),
    ("large_logits", (1, 2, 2, 40, 77, 64), {"logit": 50.0}),
    ("custom_scale", (2, 4, 2, 33, 47, 64), {"scale": 0.3}),
    # Every score near -150: the zero-filled keys past Nk would get P = exp(0 - lse) = inf there.
    ("scores_far_below_zero", (1, 2, 1, 21, 70, 64), {"shift": -150.0}),
    ("causal_square", (1, 2, 2, 70, 70, 64), {"causal": True}),
    ("causal_chunked_d128", (1, 2, 1, 40, 170, 128), {"causal": True}),
    ("causal_queries_past_keys", (1, 2, 2, 150, 60, 64), {"causal": True}),
    # Nq > Nk over whole key tiles: rows 0 .. 69 see no key (lse = -inf, gradients 0).
    ("causal_queries_past_key_tiles", (1, 1, 1, 200, 130, 64), {"causal": True}),
    ("causal_gqa", (1, 4, 2, 50, 120, 64), {"causal": True}),
    ("bf16_tile_plus_1", (1, 1, 1, 65, 129, 64), {"dtype": "bfloat16"}),
    ("bf16_gqa_causal_d128", (1, 4, 2, 65, 129, 128), {"dtype": "bfloat16", "causal": True}),
    ("bf16_large_logits", (1, 2, 2, 40, 77, 64), {"dtype": "bfloat16", "logit": 50.0}),
    ("bf16_scores_far_below_zero", (1, 2, 1, 21, 70, 128), {"dtype": "bfloat16", "shift": -150.0}),
]
CASES = [Case(name, dict(dict(zip(("B", "H", "Hkv", "Nq", "Nk", "d"), shape)),
                         **{"dtype": "float16", "causal": False, **extra}))
         for name, shape, extra in SHAPES]
# The tolerance of a case is computed from its inputs (tolerances below); these are about the loosest
# a float16 case gets, stated for the tools that list a module's tolerances.
TOLERANCES = {name: Tolerance(rel=3e-3, abs=3e-2) for name in backward_lowp.OUTPUTS}
SHRINK_KEYS = ("B", "H", "Hkv", "Nq", "Nk")          # d stays 64 or 128: the kernel supports no other
# On the emulator, run the blocks a second time, last first: blocks that add into dQ's accumulator
# with a plain += (not atomicAdd) give a result that depends on their order (on a GPU they lose updates).
BLOCK_ORDER_CHECK = True


def valid(p) -> bool:
    return p["d"] in (64, 128) and p["H"] % p["Hkv"] == 0


def make_inputs(p, rng):
    return backward_lowp.backward_lowp_inputs(p, rng)


def reference(inputs, p):
    return backward_lowp.reference(inputs, p["dtype"])


def tolerances(inputs, p, ref):
    return backward_lowp.tolerances(inputs, p["dtype"], ref)


def call(fn, rt, inputs, p):
    dtype = p["dtype"] if p["dtype"] == "bfloat16" else None    # float16 is read from the arrays
    dq, dk, dv = fn(rt, inputs["q"], inputs["k"], inputs["v"], inputs["o"], inputs["lse"], inputs["do"],
                    inputs["scale"], causal=inputs["causal"], dtype=dtype)
    return {"dq": dq, "dk": dk, "dv": dv}


def widen(out, p):
    return backward_lowp.widen(out, p["dtype"])


def diagnose(ctx):
    return backward_lowp.diagnose(ctx, ctx.params["dtype"])
