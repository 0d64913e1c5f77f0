"""Checks for 11_backward_tensor_cores: dQ, dK and dV in float16 and bfloat16 on tensor cores.

q, k, v, o and dO are 16-bit (bfloat16 as uint16 bits, called with dtype="bfloat16"), lse float32;
the gradients come back in the input type. The reference is module 09's float64 gradients on the
rounded inputs; each gradient's tolerance is module 06's low-precision rule against a same-precision
reference (grader/attention/backward_lowp.py). The diagnosis replays module 09's bugs on the decoded
inputs, with the case's rounding allowed, and this module's fragment bugs.
"""
from __future__ import annotations

from ...attention.backward_lowp_checks import *  # noqa: F401,F403 (valid, make_inputs, reference, call, ...)
from ...spec import Case

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
    ("custom_scale", (2, 6, 2, 33, 47, 64), {"scale": 0.3}),
    # Every score near -150: the zero-filled keys past Nk would get P = exp(0 - lse) = inf there.
    ("scores_far_below_zero", (1, 2, 1, 21, 70, 64), {"shift": -150.0}),
    ("causal_square", (1, 2, 2, 70, 70, 64), {"causal": True}),
    ("causal_chunked_d128", (1, 2, 1, 40, 170, 128), {"causal": True}),
    ("causal_queries_past_keys", (1, 2, 2, 150, 60, 64), {"causal": True}),
    # Nq > Nk over whole key tiles: rows 0 .. 69 see no key (lse = -inf, gradients 0).
    ("causal_queries_past_key_tiles", (1, 1, 1, 200, 130, 64), {"causal": True}),
    ("causal_gqa", (1, 4, 2, 50, 120, 64), {"causal": True}),
    # dO scaled by 1024, as float16 training's loss scaling does: every gradient still fits float16
    # (65504), but dSᵀ Q before its scale does not; a gradient rounded to float16 before the scale is inf.
    ("loss_scaled_grads", (1, 1, 1, 400, 3, 128), {"do_scale": 1024.0}),
    ("bf16_tile_plus_1", (1, 1, 1, 65, 129, 64), {"dtype": "bfloat16"}),
    ("bf16_gqa_causal_d128", (1, 4, 2, 65, 129, 128), {"dtype": "bfloat16", "causal": True}),
    ("bf16_large_logits", (1, 2, 2, 40, 77, 64), {"dtype": "bfloat16", "logit": 50.0}),
    ("bf16_scores_far_below_zero", (1, 2, 1, 21, 70, 128), {"dtype": "bfloat16", "shift": -150.0}),
]
CASES = [Case(name, dict(dict(zip(("B", "H", "Hkv", "Nq", "Nk", "d"), shape)),
                         **{"dtype": "float16", "causal": False, **extra}))
         for name, shape, extra in SHAPES]
