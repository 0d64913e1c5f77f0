"""Checks for 02_flash_forward: tiled attention with online softmax, GQA, any Nq and Nk.

The diagnosis replays the usual bugs in float64 (a missing bounds mask, a missing rescale, a forgotten
1/l, lse in log2 units, the wrong kv head ...) and names the one the student's output matches.
"""
from __future__ import annotations

import math

import numpy as np

from .. import references as R
from ..bench import BenchCase
from .common import (F32_ABS, F32_REL, Case, attention_call, attention_inputs, attention_reference,
                     attention_shapes)

CASES = attention_shapes() + [
    Case("batch_and_heads", dict(B=3, H=4, Hkv=2, Nq=45, Nk=150, d=32)),
    Case("many_key_tiles", dict(B=1, H=1, Hkv=1, Nq=40, Nk=300, d=32, logit=20.0)),
    Case("n_200_d_128", dict(B=1, H=1, Hkv=1, Nq=200, Nk=200, d=128)),
]
TOLERANCES = {"o": (F32_REL, F32_ABS), "lse": (F32_REL, F32_ABS)}

# The tile sizes a student may pick; the diagnosis tries each when it replays a tile-shaped bug.
TILES = (16, 32, 64, 128)


make_inputs = attention_inputs
call = attention_call


def reference(inputs, p):
    return attention_reference(inputs)


# ---- diagnosis: replay a bug, see whether the student's output matches it ---------------------

def scores(inputs, kv_head=None, scale=None):
    """The scaled scores [B, H, Nq, Nk] in float64, and V expanded to the query heads [B, H, Nk, d]."""
    q, k, v = (np.asarray(inputs[x], np.float64) for x in ("q", "k", "v"))
    H, Hkv = q.shape[1], k.shape[1]
    heads = [kv_head(h, H, Hkv) if kv_head else R.kv_head_of(h, H, Hkv) for h in range(H)]
    k, v = k[:, heads], v[:, heads]
    s = (inputs["scale"] if scale is None else scale) * q @ np.swapaxes(k, -1, -2)
    return s, v


def attend(s, v, visible=None):
    """Softmax over the visible scores, then P V -> (o, lse)."""
    p, lse = R.masked_softmax(s, visible)
    return p @ v, lse


def streamed(s, v, tile, rescale_acc=True, rescale_l=True, visible=None):
    """The online softmax over key tiles, as a kernel runs it, with the rescale optionally left out."""
    if visible is not None:
        s = np.where(visible, s, -np.inf)
    shape = s.shape[:-1]
    m, l = np.full(shape, -np.inf), np.zeros(shape)
    acc = np.zeros(shape + (v.shape[-1],))
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, s.shape[-1], tile):
            st = s[..., start:start + tile]
            m_new = np.maximum(m, st.max(axis=-1))
            m_use = np.where(np.isfinite(m_new), m_new, 0.0)
            alpha = np.exp(m - m_use)
            p = np.exp(st - m_use[..., None])
            l = (l * alpha if rescale_l else l) + p.sum(axis=-1)
            acc = (acc * alpha[..., None] if rescale_acc else acc) + p @ v[..., start:start + tile, :]
            m = m_new
        o = np.where(l[..., None] > 0, acc / np.where(l > 0, l, 1.0)[..., None], 0.0)
        lse = np.where(l > 0, m + np.log(np.where(l > 0, l, 1.0)), -np.inf)
    return o, lse


def rel(got, want) -> float:
    """Relative Frobenius distance over the elements where both are finite (inf where shapes of
    non-finiteness differ)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if (np.isfinite(got) != np.isfinite(want)).any():
        return math.inf
    ok = np.isfinite(want)
    denom = np.linalg.norm(np.where(ok, want, 0.0))
    return float(np.linalg.norm(np.where(ok, got - want, 0.0)) / max(denom, 1e-30))


MATCH = 1e-3     # the output matches a replayed bug this closely (float32 noise is ~1e-6)


def matches(ctx, o=None, lse=None) -> bool:
    """The student's output is close to the replayed bug in every output given, and not to the truth."""
    checks = [(name, alt) for name, alt in (("o", o), ("lse", lse)) if alt is not None]
    if not checks:
        return False
    close = all(rel(ctx.out[name], alt) < MATCH for name, alt in checks)
    wrong = any(rel(ctx.out[name], ctx.ref[name]) > 10 * MATCH or not ctx.cmp[name].passed
                for name, _ in checks)
    return close and wrong


def tile_bug_causes(ctx, s, v, visible=None) -> str | None:
    """Bugs of the streaming loop: the rescale and the bounds mask of the last, partial key tile."""
    n_k = s.shape[-1]
    for tile in TILES:
        if n_k <= tile:
            continue
        if matches(ctx, o=streamed(s, v, tile, rescale_acc=False, visible=visible)[0]):
            return (f"the accumulator acc is not rescaled when the running max grows (the output matches "
                    f"that bug with key tiles of {tile}). When m grows to m_new, multiply acc (and l) by "
                    f"exp(m_old - m_new) before adding the new tile's P·V. Rows spanning only one key "
                    f"tile are right, which is why small cases pass.")
        if matches(ctx, o=streamed(s, v, tile, rescale_acc=False, rescale_l=False, visible=visible)[0]):
            return (f"neither acc nor l is rescaled when the running max grows (the output matches that "
                    f"bug with key tiles of {tile}). When m grows to m_new, multiply acc and l by "
                    f"exp(m_old - m_new) before adding the new tile.")
    for tile in TILES:
        pad = -n_k % tile
        if not pad:
            continue
        # Keys past n_k zero-filled but not masked: score 0, value 0, still counted in l.
        s_pad = np.concatenate([np.where(visible, s, -np.inf) if visible is not None else s,
                                np.zeros(s.shape[:-1] + (pad,))], axis=-1)
        v_pad = np.concatenate([v, np.zeros(v.shape[:-2] + (pad, v.shape[-1]))], axis=-2)
        o_alt, lse_alt = attend(s_pad, v_pad)
        if matches(ctx, o=o_alt) or matches(ctx, lse=lse_alt):
            return (f"keys past n_k = {n_k} in the last, partial key tile are counted (the output matches "
                    f"{pad} extra keys of score 0, as with tiles of {tile}). Give them score -INFINITY "
                    f"(the bounds mask: s = -INFINITY where j >= n_k), so that exp(s - m) = 0.")
    return None


def output_causes(ctx, s, v, visible=None) -> str | None:
    """Bugs of the last step: 1/l, lse's units and terms."""
    o_ref, lse_ref = ctx.ref["o"], ctx.ref["lse"]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        s_vis = np.where(visible, s, -np.inf) if visible is not None else s
        row_max = s_vis.max(axis=-1)
        l_row = np.exp(lse_ref - np.where(np.isfinite(row_max), row_max, 0.0))
        if matches(ctx, o=np.where(np.isfinite(lse_ref)[..., None], o_ref * l_row[..., None], 0.0)):
            return ("o is missing the final division by l: each row is the right answer times its own "
                    "softmax sum l. Write o = acc · (1/l) once, after the last key tile.")
        if matches(ctx, lse=lse_ref / math.log(2.0)):
            return ("lse is in log2 units (m + log2(l) with m from exp2 scores): multiply by ln(2), "
                    "lse = (m + log2(l)) · ln 2, to get the natural-log log-sum-exp.")
        if matches(ctx, lse=lse_ref - row_max) or matches(ctx, lse=(lse_ref - row_max) / math.log(2.0)):
            return "lse is missing the running max: lse = m + log(l), not log(l)."
        if matches(ctx, lse=row_max) or matches(ctx, lse=row_max / math.log(2.0)):
            return "lse holds only the max m: lse = m + log(l)."
    return None


def setup_causes(ctx, visible=None) -> str | None:
    """Bugs of the indexing: the kv head of a query head, the scale."""
    p = ctx.params
    if p["H"] != p["Hkv"]:
        for name, mapping in (("h % Hkv", lambda h, H, Hkv: h % Hkv), ("h", lambda h, H, Hkv: min(h, Hkv - 1)),
                              ("0", lambda h, H, Hkv: 0)):
            s, v = scores(ctx.inputs, kv_head=mapping)
            if matches(ctx, o=attend(s, v, visible)[0]):
                return (f"query head h reads the wrong kv head ({name}). With grouped-query attention, "
                        f"H / Hkv consecutive query heads share one kv head: h_kv = h / (H / Hkv).")
    d = p["d"]
    for name, sc in (("no scale", 1.0), ("scale applied twice", ctx.inputs["scale"] ** 2),
                     ("1/d instead of 1/sqrt(d)", 1.0 / d)):
        s, v = scores(ctx.inputs, scale=sc)
        if matches(ctx, o=attend(s, v, visible)[0]):
            return f"the scores use the wrong scale ({name}): s = scale · q·k with scale = 1/sqrt(d)."
    return None


def extra_weight_cause(ctx) -> str | None:
    """lse too large in (almost) every row: the softmax sum counts keys that do not exist."""
    got, want = np.asarray(ctx.out["lse"], np.float64), ctx.ref["lse"]
    ok = np.isfinite(got) & np.isfinite(want)
    if ok.sum() >= 1 and np.mean((got - want)[ok] > 1e-4) > 0.9 and ctx.params["Nk"] % 128:
        return ("lse is too large in nearly every row: l counts keys that should not be there. Keys "
                "past n_k in the last, partial key tile need score -INFINITY (the bounds mask), and "
                "their V rows zeros rather than garbage.")
    return None


def diagnose(ctx) -> str | None:
    s, v = scores(ctx.inputs)
    return (output_causes(ctx, s, v) or tile_bug_causes(ctx, s, v) or setup_causes(ctx)
            or extra_weight_cause(ctx))


# ---- benchmark ----------------------------------------------------------------------------------

def naive_cublas(rt, inputs, p, causal=False):
    """Attention as three steps on CuPy, materialising S [B, H, Nq, Nk]: cuBLAS matmul, softmax, matmul."""
    xp = rt.xp
    q, k, v, scale = inputs["q"], inputs["k"], inputs["v"], inputs["scale"]
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = xp.repeat(k, group, axis=1), xp.repeat(v, group, axis=1)
    s = xp.matmul(q * xp.float32(scale), xp.swapaxes(k, -1, -2))      # the N×N scores in memory
    if causal:
        n_q, n_k = s.shape[-2:]
        hidden = xp.arange(n_k)[None, :] > xp.arange(n_q)[:, None] + (n_k - n_q)
        s += xp.where(hidden, xp.float32(-xp.inf), xp.float32(0.0))   # bottom-right aligned
    m = s.max(axis=-1, keepdims=True)
    xp.exp(s - m, out=s)
    l = s.sum(axis=-1, keepdims=True)
    s /= l
    return {"o": xp.matmul(s, v), "lse": (m + xp.log(l))[..., 0]}


def attention_flops(p, causal=False):
    """FlashAttention's count: 4·Nq·Nk·d per head (two matmuls), halved under a causal mask."""
    f = 4.0 * p["B"] * p["H"] * p["Nq"] * p["Nk"] * p["d"]
    return f / 2 if causal else f


_BIG = dict(B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=128)
_SMALL = dict(B=4, H=8, Hkv=2, Nq=1024, Nk=1024, d=64)
BENCH = [
    BenchCase("B2_H16_N4096_d128", _BIG, flops=attention_flops(_BIG),
              baselines={"naive (cuBLAS)": naive_cublas}),
    BenchCase("B4_H8_Hkv2_N1024_d64", _SMALL, flops=attention_flops(_SMALL),
              baselines={"naive (cuBLAS)": naive_cublas}),
]
