"""Checks for 00_naive_attention: attention with GQA, no mask, materialised scores."""
from __future__ import annotations

import numpy as np

from ...attention import replays, weights
from ...attention.calls import prefill_call, prefill_reference
from ...attention.inputs import attention_inputs, attention_shapes
from ...spec import F32, Case, Cause

CASES = attention_shapes() + [
    Case("n_256", dict(B=1, H=1, Hkv=1, Nq=256, Nk=256, d=64)),
    # A head dim that is not a multiple of 4: the naive kernels take any d (a dot product unrolled by 4
    # must finish the last d % 4 features).
    Case("head_dim_33", dict(B=1, H=2, Hkv=1, Nq=9, Nk=17, d=33)),
    # Scores near ±150: expf overflows past 88.7 unless the row max is subtracted first.
    Case("huge_logits", dict(B=1, H=1, Hkv=1, Nq=20, Nk=33, d=32, logit=150.0)),
]
TOLERANCES = {"o": F32, "lse": F32}

make_inputs = attention_inputs
call = prefill_call


def reference(inputs, p):
    return prefill_reference(inputs)


def diagnose(ctx):
    # The same replayed bugs as FlashAttention's, minus the tiling: a forgotten 1/l, lse's units,
    # the exponent, the key range, the indexing, the scale.
    s, v = replays.scores(ctx.inputs)
    yield from softmax_rows_cause(ctx, s, v)
    yield from exp_twice_cause(ctx, s, v)
    yield from pv_keys_cause(ctx, s, v)
    yield from output_grid_cause(ctx)
    yield from replays.output_causes(ctx, s, v)
    yield from replays.exponent_causes(ctx, s, v)
    yield from replays.key_range_causes(ctx, s, v)
    yield from replays.setup_causes(ctx)
    yield from replays.feature_causes(ctx)
    yield from weights.observation(weights.prefill_rows(ctx, s, v))


def exp_twice_cause(ctx, s, v):
    """The softmax pass that sums l storing e = exp(s - m) over the scores, and the normalising pass
    then taking exp of what it reads again: P = exp(e - m) / l, lse right (it needs only m and l)."""
    with np.errstate(over="ignore", invalid="ignore"):
        s32 = s.astype(np.float32)              # in float32, as the kernel: exp(e - m) overflows for m < -88
        m = s32.max(axis=-1, keepdims=True)
        e = np.exp(s32 - m)
        o_alt = (np.exp(e - m) / e.sum(axis=-1, keepdims=True)).astype(np.float64) @ v
    if replays.matches(ctx, o=o_alt, lse=ctx.ref["lse"]):
        yield Cause("softmax:exp_twice", (
            "P has the exponential applied twice: the output matches weights exp(exp(s - m) - m) / l, with "
            "lse right. A pass that stores exp(s - m) in place of the scores leaves the next pass reading "
            "exponentials, not scores: that pass divides what it reads by l and takes no exp again."))


def pv_keys_cause(ctx, s, v):
    """The output kernel's sum over keys bounded by n_q: o_i = sum_{j < n_q} P_ij V_j, reading on
    through P's flat rows and V's flat memory past n_k (a read past either array is the emulator's to
    name)."""
    B, H, n_q, n_k = s.shape
    if n_q == n_k:
        return
    p, _ = replays.R.masked_softmax(s)
    v_all = np.asarray(ctx.inputs["v"], np.float64)
    Hkv, d = v_all.shape[1], v_all.shape[-1]
    p_flat, v_flat = p.reshape(-1), v_all.reshape(-1)
    bh = np.arange(B * H).reshape(B, H)
    kv = (np.arange(B)[:, None] * Hkv + np.arange(H)[None, :] // (H // Hkv))            # [B, H]
    i, j = np.arange(n_q)[:, None], np.arange(n_q)[None, :]
    at_p = bh[..., None, None] * n_q * n_k + i * n_k + j                                 # [B, H, n_q, n_q]
    at_v = kv[..., None] * n_k * d + np.arange(n_q) * d                                   # [B, H, n_q]: row j
    if at_p.max() >= p_flat.size or at_v.max() + d > v_flat.size:
        return
    v_read = v_flat[at_v[..., None] + np.arange(d)]                                        # [B, H, n_q, d]
    o_alt = np.einsum("bhij,bhjc->bhic", p_flat[at_p], v_read)
    if replays.matches(ctx, o=o_alt, lse=ctx.ref["lse"]):
        yield Cause("pv_keys_end:n_q", (
            f"the output kernel's sum over keys runs to n_q = {n_q}, not n_k = {n_k} (the output matches "
            "o_i = sum over j < n_q of P_ij V_j, lse right): row i of P has n_k keys."))


def softmax_rows_cause(ctx, s, v):
    """The softmax kernel short of the B · H · n_q rows it normalises in place (its grid, or the row
    count it is passed): the rows past its reach keep their scores S (o = S V) and their lse is never
    written."""
    gone = np.asarray(replays.unwritten_mask(ctx, "lse")).reshape(-1)       # rows (b, h, i), flattened
    first = int(np.argmax(gone)) if gone.any() else gone.size
    if not gone.any() or not gone[first:].all():
        return                                  # not a suffix of the flattened rows
    B, H, n_q = np.shape(ctx.ref["lse"])
    o_alt = ctx.ref["o"].reshape(B * H * n_q, -1).copy()
    o_alt[first:] = (s @ v).reshape(B * H * n_q, -1)[first:]
    got = np.asarray(ctx.out["o"], np.float64).reshape(B * H * n_q, -1)
    if replays.rel(got, o_alt) < replays.MATCH and replays.rel(got[first:], o_alt[first:]) < \
            0.1 * replays.rel(got[first:], ctx.ref["o"].reshape(B * H * n_q, -1)[first:]):
        yield Cause("grid:softmax_rows", (
            f"the softmax never reaches the last {gone.size - first} of the B · H · n_q = {gone.size} rows "
            f"(from row {first} of the flattened (b, h, i) on): their lse still holds the grader's NaN and "
            "their o matches the unnormalised scores times V, S V (the output matches that). Every row needs a "
            "thread that does not return early: a grid of cdiv(B · H · n_q, threads per block) blocks, and "
            "the row count the kernel compares its row index with equal to B · H · n_q."))


def output_grid_cause(ctx):
    """The output kernel's grid with x and y exchanged, (cdiv(n_q, 16), cdiv(d, 16)): its threads
    cover the features below 16 · cdiv(n_q, 16) of the rows below 16 · cdiv(d, 16) only."""
    B, H, n_q, d = np.shape(ctx.ref["o"])
    tile = 16
    n_k = np.shape(ctx.inputs["k"])[2]
    i, c = np.arange(n_q)[:, None], np.arange(d)[None, :]
    rows_by_keys = np.broadcast_to(i >= tile * -(-n_k // tile), (n_q, d))
    if replays.unwritten_as(ctx, {"o": np.broadcast_to(rows_by_keys, (B, H, n_q, d))}):
        yield Cause("grid:output_rows_n_k", (
            f"o's rows from {tile * -(-n_k // tile)} on were never written, exactly as an output grid of "
            "cdiv(n_k, 16) row blocks leaves them: o has n_q rows, so the grid is (cdiv(d, 16), "
            "cdiv(n_q, 16), B · H)."))
    # The scores kernel's grid exchanged, (cdiv(n_q, 16), cdiv(n_k, 16)): S is written only for the keys
    # below 16 · cdiv(n_q, 16) of the rows below 16 · cdiv(n_k, 16); a row with any score unwritten
    # gets the poison through its softmax, in o and lse alike.
    row_missed = (np.arange(n_q) >= tile * -(-n_k // tile)) | (n_k > tile * -(-n_q // tile))
    if replays.unwritten_as(ctx, {"o": np.broadcast_to(row_missed[:, None], (B, H, n_q, d)),
                                  "lse": np.broadcast_to(row_missed, (B, H, n_q))}):
        yield Cause("grid:scores_xy_swapped", (
            "o and lse hold the poison exactly in the rows that a scores grid with x and y exchanged, "
            "(cdiv(n_q, 16), cdiv(n_k, 16)), leaves with unwritten scores (the rows from "
            f"{tile * -(-n_k // tile)} on, or every row when n_k = {n_k} > {tile * -(-n_q // tile)}): the "
            "scores kernel reads blockIdx.x as the key block, so its grid is (cdiv(n_k, 16), cdiv(n_q, 16), "
            "B · H)."))
    missed = (i >= tile * -(-d // tile)) | (c >= tile * -(-n_q // tile))
    if replays.unwritten_as(ctx, {"o": np.broadcast_to(missed, (B, H, n_q, d))}):
        yield Cause("grid:output_xy_swapped", (
            f"o's rows from {tile * -(-d // tile)} on (or its features from {tile * -(-n_q // tile)} on) were "
            "never written, exactly as an output grid with x and y exchanged leaves them: (cdiv(n_q, 16), "
            "cdiv(d, 16)) where the kernel reads blockIdx.x as the feature block. The grid is "
            "(cdiv(d, 16), cdiv(n_q, 16), B · H)."))
