"""Checks for 03_flash_causal: causal attention with the mask aligned bottom-right.

Query i sees key j iff j <= i + (Nk - Nq). Nq < Nk is chunked prefill; Nq > Nk leaves the first
Nq - Nk rows with no visible key (o = 0, lse = -inf). The diagnosis replays the usual mask bugs
(top-left alignment, an off-by-one on the diagonal, diagonal tiles without the per-element test, a
loop over key tiles that stops too early) and the bugs of module 02.
"""
from __future__ import annotations

import numpy as np

from .. import references as R
from ..bench import BenchCase
from . import flash_forward as F
from .common import (F32_ABS, F32_REL, Case, attention_call, attention_inputs, attention_reference,
                     attention_shapes)

CASES = attention_shapes() + [
    Case("chunked_prefill", dict(B=1, H=2, Hkv=1, Nq=40, Nk=170, d=64)),
    Case("chunk_of_one_tile", dict(B=1, H=1, Hkv=1, Nq=64, Nk=200, d=32)),
    Case("one_query_many_keys", dict(B=2, H=2, Hkv=2, Nq=1, Nk=150, d=64)),
    Case("queries_past_keys", dict(B=1, H=2, Hkv=2, Nq=150, Nk=60, d=32)),
    Case("no_keys_for_a_tile", dict(B=1, H=1, Hkv=1, Nq=200, Nk=5, d=32)),
    Case("gqa_chunked", dict(B=2, H=8, Hkv=2, Nq=50, Nk=120, d=64)),
    Case("causal_200_d_128", dict(B=1, H=1, Hkv=1, Nq=200, Nk=200, d=128)),
    Case("causal_large_logits", dict(B=1, H=1, Hkv=1, Nq=130, Nk=130, d=64, logit=50.0)),
]
TOLERANCES = {"o": (F32_REL, F32_ABS), "lse": (F32_REL, F32_ABS)}
TILES = F.TILES


make_inputs = attention_inputs
call = attention_call


def reference(inputs, p):
    return attention_reference(inputs, causal=True)


# ---- diagnosis ------------------------------------------------------------------------------------

def visible_where(n_q, n_k, limit):
    """[n_q, n_k] booleans: key j visible to query i iff j < limit(i) (limit an array over i)."""
    return np.arange(n_k)[None, :] < np.asarray(limit)[:, None]


def tile_limits(n_q, n_k, block_m, block_n, row_of_tile):
    """One past the last key the loop over key tiles reaches, per query row, when a query tile's
    loop ends at the tile holding key `row_of_tile(first, last) + offset`."""
    offset = n_k - n_q
    i = np.arange(n_q)
    first = (i // block_m) * block_m
    last = np.minimum(first + block_m, n_q) - 1
    kv_end = np.clip(row_of_tile(first, last) + offset + 1, 0, n_k)
    return np.minimum(-(-kv_end // block_n) * block_n, n_k)     # whole key tiles


def mask_causes(ctx, s, v) -> str | None:
    n_q, n_k = ctx.params["Nq"], ctx.params["Nk"]
    offset = n_k - n_q
    i = np.arange(n_q)
    if n_q != n_k and F.matches(ctx, *F.attend(s, v, visible_where(n_q, n_k, i + 1))):
        return (f"the causal mask is aligned top-left (j <= i). It must be aligned bottom-right: query i "
                f"sees key j iff j <= i + (Nk - Nq), here i + {offset}. The two agree only when Nq == Nk, "
                f"which is why the square cases pass.")
    if F.matches(ctx, o=F.attend(s, v, visible_where(n_q, n_k, i + offset))[0]):
        return ("the diagonal itself is masked: query i must see key i + (Nk - Nq) too. "
                "The test is j <= i + offset (mask j > i + offset), not j < i + offset.")
    if F.matches(ctx, o=F.attend(s, v, visible_where(n_q, n_k, i + offset + 2))[0]):
        return ("each query sees one key too many: mask j > i + offset, where offset = Nk - Nq "
                "(key i + offset + 1 is in the future).")
    for bm in TILES:
        for bn in TILES:
            # Whole tiles up to the diagonal, with no per-element test inside the diagonal tiles.
            lim = tile_limits(n_q, n_k, bm, bn, lambda first, last: last)
            if F.matches(ctx, o=F.attend(s, v, visible_where(n_q, n_k, lim))[0]):
                return (f"keys above the diagonal are counted inside the diagonal tiles (the output matches "
                        f"whole tiles of {bm} queries × {bn} keys, unmasked). Tiles that straddle the "
                        f"diagonal need the per-element test: s = -INFINITY where j > i + (Nk - Nq).")
            # The loop over key tiles bounded by the first row of the query tile instead of the last.
            lim = np.minimum(i + offset + 1, tile_limits(n_q, n_k, bm, bn, lambda first, last: first))
            if F.matches(ctx, o=F.attend(s, v, visible_where(n_q, n_k, np.maximum(lim, 0)))[0]):
                return (f"the loop over key tiles stops too early (the output matches a loop bounded by the "
                        f"first row of each query tile of {bm}). The last row of the query tile sees the most "
                        f"keys: kv_end = min(Nk, last_row + (Nk - Nq) + 1).")
    return None


def empty_row_cause(ctx) -> str | None:
    """Rows with no visible key (Nq > Nk): NaN, or a finite lse where -inf is due."""
    n_q, n_k = ctx.params["Nq"], ctx.params["Nk"]
    if n_q <= n_k:
        return None
    empty = slice(0, n_q - n_k)
    o, lse = np.asarray(ctx.out["o"], np.float64), np.asarray(ctx.out["lse"], np.float64)
    rest_ok = F.rel(o[..., n_q - n_k:, :], ctx.ref["o"][..., n_q - n_k:, :]) < 1e-3
    nan_rows = np.isnan(o[..., empty, :]).any() or np.isnan(lse[..., empty]).any()
    wrong_lse = (lse[..., empty] != -np.inf).any()
    wrong_o = (o[..., empty, :] != 0).any()
    if nan_rows or ((wrong_lse or wrong_o) and rest_ok):
        what = "NaN" if nan_rows else ("a finite lse" if wrong_lse else "a nonzero output")
        return (f"rows with no visible key give {what}. With Nq > Nk the first Nq - Nk = {n_q - n_k} rows "
                f"see no key at all: their running max stays -INFINITY, so exponentiate against 0 "
                f"instead (exp2(-inf - -inf) is NaN), keep l = 0, and write o = 0 and lse = -INFINITY "
                f"(guard the final 1/l).")
    return None


def diagnose(ctx) -> str | None:
    n_q, n_k = ctx.params["Nq"], ctx.params["Nk"]
    s, v = F.scores(ctx.inputs)
    visible = R.causal_mask(n_q, n_k)
    return (empty_row_cause(ctx) or mask_causes(ctx, s, v) or F.output_causes(ctx, s, v, visible)
            or F.tile_bug_causes(ctx, s, v, visible) or F.setup_causes(ctx, visible))


# ---- benchmark ----------------------------------------------------------------------------------

def _no_mask_02(rt, inputs, p):
    """The 02 solution (no mask) on the same inputs: causal should cost about half of it."""
    from ..course import load
    global _flash_forward
    if _flash_forward is None:
        _flash_forward = load("02_flash_forward").flash_forward
    o, lse = _flash_forward(rt, inputs["q"], inputs["k"], inputs["v"], inputs["scale"])
    return {"o": o, "lse": lse}


_flash_forward = None


def _naive_causal(rt, inputs, p):
    return F.naive_cublas(rt, inputs, p, causal=True)


_BIG = dict(B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=128)
_SMALL = dict(B=4, H=8, Hkv=2, Nq=1024, Nk=1024, d=64)
BENCH = [
    BenchCase("causal_B2_H16_N4096_d128", _BIG, flops=F.attention_flops(_BIG, causal=True),
              baselines={"02 solution (no mask)": _no_mask_02, "naive causal (cuBLAS)": _naive_causal}),
    BenchCase("causal_B4_H8_Hkv2_N1024_d64", _SMALL, flops=F.attention_flops(_SMALL, causal=True),
              baselines={"02 solution (no mask)": _no_mask_02, "naive causal (cuBLAS)": _naive_causal}),
]
