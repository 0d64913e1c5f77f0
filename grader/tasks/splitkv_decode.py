"""Checks for 04_splitkv_decode: one query token per sequence over a contiguous cache, split-KV.

Inputs: q [B, H, d], k_cache and v_cache [B, Hkv, max_len, d], context_lens [B] int32 (0 and 1
included). Cases with `num_splits` force the launch code's split count, so the combine is exercised
on the CPU too, where the heuristic would pick few splits.

Parameters are scalars, so a shape replays with --shape: `lens` is "a/b/c" (sequence b gets entry
b, cycling), or `ctx` gives every sequence the same context.
"""
from __future__ import annotations

import numpy as np

from .. import references as R
from ..bench import BenchCase
from .common import F32_ABS, F32_REL, Case

C = Case
CASES = [
    C("contexts_0_1_2_5", dict(B=4, H=2, Hkv=2, d=64, lens="0/1/2/5")),
    C("one_sequence_prime", dict(B=1, H=4, Hkv=4, d=64, lens="37")),
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
    C("long_context", dict(B=1, H=8, Hkv=2, d=128, lens="509")),
]
TOLERANCES = {"o": (F32_REL, F32_ABS), "lse": (F32_REL, F32_ABS)}
SHRINK_KEYS = ("B", "H", "Hkv", "d", "page_size")


def valid(p) -> bool:
    """Shapes the kernels accept: d a multiple of 4 up to 128, at most 16 query heads per kv head."""
    return p["d"] % 4 == 0 and p["d"] <= 128 and p["H"] % p["Hkv"] == 0 and p["H"] // p["Hkv"] <= 16


def context_lens(p) -> np.ndarray:
    """[B] int32 from `lens` ("a/b/c", cycled over the batch) or `ctx` (the same for all)."""
    vals = [int(x) for x in str(p["lens"]).split("/")] if "lens" in p else [int(p["ctx"])]
    return np.array([vals[b % len(vals)] for b in range(p["B"])], dtype=np.int32)


def decode_qkv(p, rng, n_keys_shape):
    """q [B, H, d] and keys/values of the given leading shape (..., d), float32, never zeros.

    logit: scores reach about ±logit (softmax close to one-hot).
    shift: every score of a row gets about +shift through a direction shared by q and all keys, so
           lse ≈ shift while the softmax stays spread out: exp(lse) overflows float32 past 88.
    """
    B, H, d = p["B"], p["H"], p["d"]
    q = rng.standard_normal((B, H, d), dtype=np.float32)
    k = rng.standard_normal(n_keys_shape + (d,), dtype=np.float32)
    v = rng.standard_normal(n_keys_shape + (d,), dtype=np.float32)
    if p.get("logit"):
        stretch = np.float32(np.sqrt(p["logit"] / 3.0))
        q, k = q * stretch, k * stretch
    if p.get("shift"):
        u = rng.standard_normal(d)
        u /= np.linalg.norm(u)
        a = np.sqrt(p["shift"] * np.sqrt(d))                # scale · a² = shift with scale = 1/sqrt(d)
        q = (q + a * u).astype(np.float32)
        k = (k + a * u).astype(np.float32)
    return q, k, v


def make_inputs(p, rng):
    B, Hkv = p["B"], p["Hkv"]
    lens = context_lens(p)
    max_len = p.get("max_len") or max(int(lens.max()), 1)   # the cache's capacity
    q, k, v = decode_qkv(p, rng, (B, Hkv, max_len))
    return {"q": q, "k_cache": k, "v_cache": v, "context_lens": lens, "scale": float(1.0 / np.sqrt(p["d"]))}


def reference(inputs, p):
    o, lse = R.decode_attention(inputs["q"], inputs["k_cache"], inputs["v_cache"],
                                inputs["context_lens"], inputs["scale"])
    return {"o": o, "lse": lse}


def call(fn, rt, inputs, p):
    kw = {"num_splits": p["num_splits"]} if p.get("num_splits") else {}
    o, lse = fn(rt, inputs["q"], inputs["k_cache"], inputs["v_cache"], inputs["context_lens"],
                inputs["scale"], **kw)
    return {"o": o, "lse": lse}


# ---- diagnosis: likely causes from the shape of the error ----------------------------------------

def _row_errors(ctx) -> np.ndarray:
    """[B, H] booleans: where o or lse is wrong (NaN, Inf, -inf mismatch or over tolerance)."""
    o, lse = np.asarray(ctx.out["o"], np.float64), np.asarray(ctx.out["lse"], np.float64)
    ro, rl = ctx.ref["o"], ctx.ref["lse"]
    scale_o = max(np.abs(ro).max(), 1e-6) if ro.size else 1.0
    with np.errstate(invalid="ignore"):
        bad_o = ~(np.abs(o - ro) <= 1e-3 * scale_o).all(axis=-1)
        same_inf = (lse == rl)
        bad_l = ~(same_inf | (np.abs(lse - rl) <= 1e-3 * np.maximum(1.0, np.abs(np.where(np.isfinite(rl), rl, 0)))))
    return bad_o | bad_l


def _close(got, want, tol=1e-3) -> bool:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not np.isfinite(got).all():
        return False
    return np.linalg.norm(got - want) <= tol * max(np.linalg.norm(want), 1e-12)


def decode_diagnose(ctx, kv_cache_fn) -> str | None:
    """Causes shared by 04 and 05. kv_cache_fn(ctx) -> the contiguous (k, v) [B, Hkv, L, d] the
    sequences really attend to (for 05: the pages gathered through block_table)."""
    p = ctx.params
    lens = np.asarray(ctx.inputs["context_lens"])
    o, lse = np.asarray(ctx.out["o"], np.float64), np.asarray(ctx.out["lse"], np.float64)
    bad = _row_errors(ctx)                             # [B, H]
    bad_seq = bad.any(axis=1)
    empty = lens == 0
    nonfinite = ~np.isfinite(o).all(axis=-1) | np.isnan(lse) | (lse == np.inf)

    # 1. empty contexts: NaN (or anything but 0 / -inf) exactly where context_lens[b] = 0.
    if empty.any() and bad_seq[empty].any() and not bad_seq[~empty].any():
        what = "NaN" if nonfinite[empty].any() else "not o = 0 and lse = -inf"
        return (f"only the sequences with an empty context (context_lens[b] = 0, here b = "
                f"{np.flatnonzero(empty).tolist()}) are wrong: their output is {what}. A context of length "
                "0 has no split with a key: the combine must write o = 0 and lse = -INFINITY there, never "
                "0/0 or -inf - -inf (NaN).")

    # 2. overflow: non-finite output on rows with keys, where the true lse is above float32's exp range.
    rl = ctx.ref["lse"]
    finite_rows = ~empty[:, None] & np.ones_like(bad)
    if (nonfinite & finite_rows).any():
        top = float(np.max(rl[np.isfinite(rl)], initial=-np.inf))
        if top > 80:
            return (f"overflow: Inf/NaN where the answer is finite, on rows whose lse reaches {top:.0f}. "
                    "expf(x) is inf in float32 for x > 88.7, so exp(lse_s) of a split overflows. Subtract "
                    "the max first: in the combine, weights are exp(lse_s - max_s lse_s) (the largest is 1), "
                    "and in the partial kernel p = exp(s - m) with m the running max.")

    # 3. GQA: some query heads read the wrong kv head.
    H, Hkv = p["H"], p["Hkv"]
    if H != Hkv and bad.any():
        k, v = kv_cache_fn(ctx)
        q, scale = ctx.inputs["q"], ctx.inputs["scale"]
        group = H // Hkv
        for b, h in zip(*np.nonzero(bad & ~empty[:, None])):
            for g in range(Hkv):
                if g == h // group:
                    continue
                alt_o, _ = R.decode_attention(q[b:b + 1, h:h + 1], k[b:b + 1, g:g + 1], v[b:b + 1, g:g + 1],
                                              lens[b:b + 1], scale)
                if _close(o[b, h], alt_o[0, 0]):
                    return (f"GQA mapping: query head h = {h} attended to kv head {g}, but it must read kv "
                            f"head h / (H / Hkv) = {h // group} (H = {H}, Hkv = {Hkv}: consecutive groups of "
                            f"{group} query heads share one kv head). Check the head index of q, o and lse "
                            "in a block that serves a kv head's whole group.")
        if not bad[:, ::group].any():
            return (f"GQA mapping: only the query heads that are not the first of their group are wrong "
                    f"(H = {H}, Hkv = {Hkv}). Every one of the H / Hkv = {group} heads of the group "
                    "must be computed and written, each with its own q.")

    # 4. splits and the combine: correct for short contexts, wrong for long ones.
    live = ~empty
    if bad_seq[live].any() and (~bad_seq & live).any():
        ok_max = int(lens[~bad_seq & live].max())
        bad_min = int(lens[bad_seq & live].min())
        if bad_min > ok_max and ok_max >= 1:
            return (f"sequences with a context of at most {ok_max} keys are right, longer ones ({bad_min} "
                    "keys and up) are wrong: the error starts where a context spans several splits. Check "
                    "the combine (weights exp(lse_s - lse_max) over exactly the splits that hold keys, "
                    "divided by their sum) and the split bounds (start = split·chunk, end = "
                    "min(start + chunk, context_lens[b])).")
    if p.get("num_splits", 1) > 1 and bad[live].all() and not nonfinite.any():
        return (f"every row is wrong in a case that forces {p['num_splits']} splits: check the combine "
                "(each split weighted by exp(lse_s - lse_max), divided by the sum of the weights, "
                "lse = lse_max + log(sum)) and that each split's partial output is normalised by its own l.")
    return None


def _contiguous(ctx):
    return ctx.inputs["k_cache"], ctx.inputs["v_cache"]


def diagnose(ctx):
    return decode_diagnose(ctx, _contiguous)


# ---- benchmark -----------------------------------------------------------------------------------

def kv_bytes(p) -> float:
    """K and V read once: 2 · B · Hkv · context · d · 4 bytes."""
    return 2.0 * p["B"] * p["Hkv"] * p["ctx"] * p["d"] * 4


_copy_buffers: dict = {}


def copy_baseline(rt, dev, p):
    """Device-to-device copy moving as many bytes as the kernel reads: n/2 read + n/2 written."""
    n = int(kv_bytes(p)) // 8                          # float32 elements in each of src and dst
    if n not in _copy_buffers:
        _copy_buffers.clear()
        _copy_buffers[n] = (rt.xp.ones(n, dtype="float32"), rt.xp.empty(n, dtype="float32"))
    src, dst = _copy_buffers[n]
    dst[...] = src
    return dst


def single_split_baseline(rt, dev, p):
    """The course solution forced to one split: one block per (sequence, kv head)."""
    fn = _solution("04_splitkv_decode").splitkv_decode
    return call(fn, rt, dev, dict(p, num_splits=1))


_solutions: dict = {}


def _solution(ex_id):
    if ex_id not in _solutions:
        from ..course import load
        _solutions[ex_id] = load(ex_id)
    return _solutions[ex_id]


def _bench_case(name, **p):
    return BenchCase(name, p, bytes=kv_bytes(p),
                     baselines={"copy bandwidth": copy_baseline, "solution, 1 split": single_split_baseline})


BENCH = [
    _bench_case("batch 1, long context", B=1, H=32, Hkv=8, d=128, ctx=65536),
    _bench_case("batch 64", B=64, H=32, Hkv=8, d=128, ctx=2048),
]
