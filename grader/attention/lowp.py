"""Half precision for module 06: float16 and bfloat16 inputs, and the tolerance they earn.

NumPy has float16 but no bfloat16: a bfloat16 array travels as uint16 holding the bits (the upper
half of a float32), and the kernel is told so with dtype="bfloat16". The reference is float64 on the
ROUNDED inputs, so rounding the inputs costs nothing; what is left is the kernel's own rounding: P
rounded to the input type before P·V, the output rounded at the end. A same-precision reference
(float32 scores and sums, P rounded like the kernel's, float32 P·V, o rounded) shows how large that
error is for each case; the kernel may be a few times worse, not more.
"""
from __future__ import annotations

import numpy as np

from . import references as R
from ..runtimes.base import bf16_value  # noqa: F401  (lowp.bf16_value: the tasks and tests use it here)
from ..spec import Tolerance

DTYPES = ("float16", "bfloat16")
EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}   # the spacing of the numbers just above 1
MULTIPLE = 3.0          # the kernel's error may be this many times the same-precision reference's
LSE_FLOOR = 1e-5        # lse is float32 throughout: its floor is float32's, not the input type's


def _poison16(dtype: str) -> int:
    """What rt.empty writes into a 2-byte output before the kernel runs (grader/runtimes/base.py)."""
    from ..runtimes.base import BF16_POISON_BITS, POISON_BITS
    return POISON_BITS[2] if dtype == "float16" else BF16_POISON_BITS


def bf16_bits(x) -> np.ndarray:
    """float -> bfloat16 bits (uint16), rounded to nearest even."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)




def encode(x, dtype: str) -> np.ndarray:
    """float -> the array a kernel takes: float16, or uint16 bits for bfloat16."""
    return np.asarray(x, np.float32).astype(np.float16) if dtype == "float16" else bf16_bits(x)


def decode(a, dtype: str) -> np.ndarray:
    """A kernel's 2-byte array -> float32, exactly; the grader's poison becomes float32's poison, so
    that "never written" is still told apart from a computed NaN."""
    from ..runtimes.base import POISON_BITS
    a = np.asarray(a)
    bits = a.view(np.uint16)
    out = a.astype(np.float32) if dtype == "float16" else bf16_value(bits)
    poison = bits == _poison16(dtype)
    if poison.any():
        out = out.copy()
        out.view(np.uint32)[poison] = POISON_BITS[4]
    return out


def stored_as(x, stored: str, dtype: str) -> np.ndarray:
    """What a kernel's 2-byte output of `dtype` holds when it converts the values x to `stored`
    instead (__floats2half2_rn where the element type is bfloat16, or the other way round): their
    `stored` bits, read as `dtype`, as float64."""
    with np.errstate(over="ignore", invalid="ignore"):
        raw = encode(x, stored).view(np.uint16)
        return (raw.view(np.float16) if dtype == "float16" else bf16_value(raw)).astype(np.float64)


def rounded(x, dtype: str) -> np.ndarray:
    """x rounded to dtype, as float64."""
    return decode(encode(x, dtype), dtype).astype(np.float64)


def same_precision_attention(q, k, v, scale, dtype: str, causal: bool = False):
    """Naive attention as a low-precision kernel computes it: float32 scores, max and sums, P rounded
    to dtype before P·V (float32 accumulation), o rounded to dtype. q, k, v already rounded."""
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    H, Hkv = q.shape[1], k.shape[1]
    heads = [R.kv_head_of(h, H, Hkv) for h in range(H)]
    k, v = k[:, heads], v[:, heads]
    s = np.float32(scale) * (q @ np.swapaxes(k, -1, -2))
    n_q, n_k = q.shape[2], k.shape[2]
    visible = R.causal_mask(n_q, n_k) if causal else np.ones((n_q, n_k), bool)
    s = np.where(visible, s, -np.inf).astype(np.float32)
    m = s.max(axis=-1, keepdims=True)
    m_use = np.where(np.isfinite(m), m, 0).astype(np.float32)
    p = np.exp(s - m_use).astype(np.float32)
    l = p.sum(axis=-1, keepdims=True, dtype=np.float32)
    acc = rounded(p, dtype).astype(np.float32) @ v
    with np.errstate(invalid="ignore", divide="ignore"):
        o = np.where(l > 0, acc / np.where(l > 0, l, 1), 0).astype(np.float32)
        lse = np.where(l[..., 0] > 0, m_use[..., 0] + np.log(np.where(l[..., 0] > 0, l[..., 0], 1)), -np.inf)
    return rounded(o, dtype), lse


def rel_error(got, want, floor: float = 1e-30) -> float:
    """Relative Frobenius error over the finite elements of want (its norm floored at `floor`)."""
    ok = np.isfinite(want)
    got, want = np.where(ok, got, 0.0), np.where(ok, want, 0.0)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), floor))


def tolerance(got, want, floor: float, norm_floor: float = 1e-30) -> Tolerance:
    """MULTIPLE times the error of `got` (a same-precision reference) against `want` (float64),
    relative (to want's norm, floored at norm_floor) and absolute, plus `floor` (times the largest
    |want|, at least 1, for the absolute one)."""
    ok = np.isfinite(want)
    with np.errstate(invalid="ignore"):            # -inf - -inf of rows without keys, masked out
        diff = np.abs(np.where(ok, got - want, 0.0))
    scale = max(float(np.abs(want[ok]).max(initial=0)), 1.0)
    return Tolerance(rel=MULTIPLE * rel_error(got, want, norm_floor) + floor,
                     abs=MULTIPLE * float(diff.max(initial=0)) + floor * scale)


def tolerances(o_sp, lse_sp, ref: dict, dtype: str) -> dict:
    """The tolerance of each output: MULTIPLE times the same-precision reference's error (relative
    and absolute) plus a floor, EPS/8 of the type for o, LSE_FLOOR for lse."""
    return {"o": tolerance(o_sp, ref["o"], EPS[dtype] / 8), "lse": tolerance(lse_sp, ref["lse"], LSE_FLOOR)}
