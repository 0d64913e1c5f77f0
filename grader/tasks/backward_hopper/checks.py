"""Checks for 14_backward_hopper: module 11's inputs, outputs, tolerance rule and diagnoses (the
low-precision backward kit, grader/attention/backward_lowp.py) on the Hopper kernel. On the CPU the
emulator runs its wgmma, TMA, bulk copies and mbarriers (csrc/hopper.inc)."""
from __future__ import annotations

from ...attention.backward_lowp_checks import *  # noqa: F401,F403 (valid, make_inputs, reference, call, ...)
from ...spec import Case

SHAPES = [  # name, (B, H, Hkv, Nq, Nk, d), extra. The solution's tiles: 128 keys a block; 64 queries
    # a step at d = 128, 128 at d = 64; two stages, so a block of more than two steps refills them.
    ("tiny", (1, 1, 1, 3, 5, 64), {}),
    ("below_tile", (1, 2, 2, 17, 19, 64), {}),
    ("tile_plus_1", (1, 1, 1, 129, 129, 64), {}),
    # Three key blocks add into the same dQ rows. With two, a plain += gives the same sums in either
    # block order (a + b = b + a); with three, the rounding differs, and the emulator's rerun shows it.
    ("three_key_blocks", (1, 1, 1, 9, 300, 64), {}),
    ("head_dim_128", (1, 2, 2, 70, 130, 128), {}),
    ("stage_ring_d128", (1, 1, 1, 200, 60, 128), {}),
    ("gqa_4_to_1", (1, 4, 1, 33, 47, 64), {}),
    ("more_queries_than_keys", (1, 2, 1, 150, 13, 64), {}),
    ("large_logits", (1, 2, 2, 40, 77, 64), {"logit": 50.0}),
    # Every score near -150: the zero-filled keys past Nk would get P = exp(0 - lse) = inf there.
    ("scores_far_below_zero", (1, 2, 1, 21, 70, 64), {"shift": -150.0}),
    ("causal_square", (1, 2, 2, 70, 70, 64), {"causal": True}),
    ("causal_chunked_d128", (1, 2, 1, 40, 170, 128), {"causal": True}),
    # Nq > Nk over whole key tiles: rows 0 .. 69 see no key (lse = -inf, gradients 0).
    ("causal_queries_past_key_tiles", (1, 1, 1, 200, 130, 64), {"causal": True}),
    ("causal_gqa", (1, 4, 2, 50, 120, 64), {"causal": True}),
    # Two sequences of a GQA group: every offset of a batch (b · H + h for Q and dQ, b · Hkv + h_kv for
    # K, V, dK and dV) is used with b > 0.
    ("batch_2_gqa", (2, 6, 2, 20, 70, 64), {}),
    # dO scaled by 1024, as float16 training's loss scaling does: every gradient still fits float16
    # (65504), but dSᵀ Q before its scale does not; a gradient rounded to float16 before the scale is inf.
    ("loss_scaled_grads", (1, 1, 1, 400, 3, 128), {"do_scale": 1024.0}),
    ("bf16_tile_plus_1", (1, 1, 1, 65, 129, 64), {"dtype": "bfloat16"}),
    ("bf16_gqa_causal_d128", (1, 4, 2, 65, 129, 128), {"dtype": "bfloat16", "causal": True}),
    ("bf16_scores_far_below_zero", (1, 2, 1, 21, 70, 128), {"dtype": "bfloat16", "shift": -150.0}),
]
CASES = [Case(name, dict(dict(zip(("B", "H", "Hkv", "Nq", "Nk", "d"), shape)),
                         **{"dtype": "float16", "causal": False, **extra}))
         for name, shape, extra in SHAPES]
