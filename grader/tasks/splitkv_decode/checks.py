"""Checks for 04_splitkv_decode: one query token per sequence over a contiguous cache, split-KV.

Inputs: q [B, H, d], k_cache and v_cache [B, Hkv, max_len, d], context_lens [B] int32 (0 and 1
included). Cases with `num_splits` force the launch code's split count, so the combine is exercised
on the CPU too, where the heuristic would pick few splits.

Parameters are scalars, so a shape replays with --shape: `lens` is "a/b/c" (sequence b gets entry
b, cycling), or `ctx` gives every sequence the same context.
"""
from __future__ import annotations

import numpy as np

from ...attention import references as R
from ...attention import replays
from ...attention.calls import split_option
from ...attention.inputs import context_lens, decode_qkv, hot_key, valid_decode_shape
from ...spec import F32, Case

C = Case
CASES = [
    C("contexts_0_1_2_5", dict(B=4, H=2, Hkv=2, d=64, lens="0/1/2/5")),
    C("one_sequence_prime", dict(B=1, H=4, Hkv=4, d=64, lens="37")),
    # A cache of capacity 0 (every context empty, k_cache [B, Hkv, 0, d]): o = 0, lse = -inf, and no
    # split count of 0 to divide by.
    C("empty_cache", dict(B=2, H=2, Hkv=1, d=32, lens="0/0", max_len=0)),
    C("mixed_lengths", dict(B=5, H=4, Hkv=2, d=64, lens="0/1/17/100/131", max_len=140)),
    C("gqa_4_to_1", dict(B=2, H=8, Hkv=2, d=64, lens="97/53")),
    C("gqa_8_to_1_d128", dict(B=2, H=8, Hkv=1, d=128, lens="61/0")),
    C("head_dim_32", dict(B=2, H=4, Hkv=2, d=32, lens="45/1")),
    C("head_dim_96", dict(B=1, H=4, Hkv=1, d=96, lens="83")),
    C("head_dim_128", dict(B=2, H=2, Hkv=2, d=128, lens="130/7")),
    C("three_splits", dict(B=3, H=4, Hkv=2, d=64, lens="257/100/1", num_splits=3)),
    C("many_splits_gqa", dict(B=2, H=6, Hkv=2, d=64, lens="300/33", num_splits=16)),
    C("one_key_per_split", dict(B=1, H=2, Hkv=1, d=64, lens="23", num_splits=23)),
    C("large_logits", dict(B=2, H=4, Hkv=2, d=64, lens="200/3", logit=50.0, num_splits=4)),
    C("lse_near_120", dict(B=2, H=4, Hkv=2, d=64, lens="150/64", shift=120.0, num_splits=4)),
    # Every score far below zero: a combine (or softmax) whose max is seeded at 0 underflows to 0/0.
    C("lse_near_minus_150", dict(B=2, H=4, Hkv=2, d=64, lens="150/7", shift=-150.0, num_splits=4)),
    # 58 splits of 7 keys, and key 395 (split 56) scoring about +150 over the rest: a combine whose max
    # over the splits reads one split per lane (none past the warp's 32) weighs that split by exp(> 88) = inf.
    C("late_split_dominates", dict(B=2, H=4, Hkv=2, d=64, lens="400/37", num_splits=64, hot_key=395, hot=150.0)),
    # Key 2 scoring about +150 over the rest, in the first steps of one split of 300 keys: every later
    # step's max lies far below the running max (exp of the difference overflows if the max is not kept).
    C("early_key_dominates", dict(B=2, H=4, Hkv=2, d=64, lens="300/37", num_splits=1, hot_key=2, hot=150.0)),
    # Key 299 (the last) scoring about +150 over the rest, late in one split: the warps' merge must scale by the
    # block's max, not the first warp's (exp(> 88) = inf).
    C("late_key_dominates", dict(B=2, H=4, Hkv=2, d=64, lens="300/37", num_splits=1, hot_key=299, hot=150.0)),
    C("long_context", dict(B=1, H=8, Hkv=2, d=128, lens="509")),
    # The heads of a group about +60 and -60 (alternately): 120 apart, past exp's range, so anything
    # one head's state takes from another's (its max, say) underflows the other's weights.
    C("group_heads_far_apart", dict(B=2, H=4, Hkv=1, d=64, lens="40/17", head_shift=60.0)),
    # Not 1/sqrt(d): a kernel that computes its own scale instead of using the argument fails here.
    C("custom_scale", dict(B=2, H=6, Hkv=2, d=64, lens="97/53", scale=0.3)),
]
TOLERANCES = {"o": F32, "lse": F32}
# Rerun every launch's blocks last-first on the emulator: each row of o belongs to one combine block,
# and a store past its own row (a lane guard off by one where the context is empty) is overwritten by
# the row's owner when the blocks run in order, and shows only in another order.
BLOCK_ORDER_CHECK = True
SHRINK_KEYS = ("B", "H", "Hkv", "d")
valid = valid_decode_shape


def make_inputs(p, rng):
    B, Hkv = p["B"], p["Hkv"]
    lens = context_lens(p)
    max_len = p["max_len"] if "max_len" in p else max(int(lens.max()), 1)   # the cache's capacity (0: empty)
    q, k, v = decode_qkv(p, rng, (B, Hkv, max_len))
    if p.get("hot"):
        j = p["hot_key"]
        q, k = hot_key(q, k, [(b, slice(None), j) for b in range(B) if lens[b] > j], p, rng)
    return {"q": q, "k_cache": k, "v_cache": v, "context_lens": lens, "scale": float(p.get("scale", 1.0 / np.sqrt(p["d"])))}


def reference(inputs, p):
    o, lse = R.decode_attention(inputs["q"], inputs["k_cache"], inputs["v_cache"],
                                inputs["context_lens"], inputs["scale"])
    return {"o": o, "lse": lse}


def call(fn, rt, inputs, p):
    o, lse = fn(rt, inputs["q"], inputs["k_cache"], inputs["v_cache"], inputs["context_lens"],
                inputs["scale"], **split_option(p))
    return {"o": o, "lse": lse}


def diagnose(ctx):
    cache = lambda ctx, lens: (ctx.inputs["k_cache"], ctx.inputs["v_cache"])    # noqa: E731
    yield from replays.decode_diagnose(ctx, cache)
