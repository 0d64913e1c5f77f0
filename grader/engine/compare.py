"""Comparing a kernel's output with the float64 reference, and naming the worst element."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..runtimes.base import is_poison


@dataclass
class Comparison:
    name: str
    rel_err: float
    max_abs_err: float
    worst_index: tuple | None
    worst_got: float
    worst_want: float
    bad_nonfinite: np.ndarray          # True where the output is NaN/Inf but the reference is not
    unwritten: np.ndarray              # True where the output still holds the grader's poison (its own)
    passed: bool
    reason: str
    foreign: np.ndarray | None = None  # True where it holds another array's poison: computed from
                                       # memory nothing wrote
    foreign_from: str = "another array"   # which array's poison, in words (the runner fills it in)

    def where(self) -> str:
        if self.worst_index is None:
            return ""
        return f"{self.name}{list(self.worst_index)} = {self.worst_got:.6g}, expected {self.worst_want:.6g}"


def compare(name: str, got, want, rel_tol: float, abs_tol: float, poison: int | None = None) -> Comparison:
    """`poison`: the index of the output's own poison payload (runtimes.base.poison_bits), None when
    unknown (then any of the grader's poisons counts as never written)."""
    got = np.asarray(got)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise ValueError(f"output {name!r} has shape {got.shape}, expected {want.shape}")
    g = got.astype(np.float64)
    finite_ref = np.isfinite(want)
    unwritten = is_poison(got, poison)
    foreign = is_poison(got) & ~unwritten
    bad_nonfinite = finite_ref & ~np.isfinite(g)
    # Where the reference itself is infinite (lse = -inf of a row with no key), demand the same.
    inf_mismatch = ~finite_ref & (g != want)
    diff = np.where(finite_ref & np.isfinite(g), np.abs(g - want), 0.0)
    # Relative to the reference's norm, floored at 0.01 per element: a tiny reference (one lse of
    # -0.004, say) would otherwise turn float32 rounding into a large relative error.
    denom = max(float(np.linalg.norm(np.where(finite_ref, want, 0.0))),
                1e-2 * float(np.sqrt(max(int(finite_ref.sum()), 1))))
    err_norm = np.linalg.norm(diff)
    rel = float(err_norm / denom)
    if bad_nonfinite.any():
        rel = float("inf")
    max_abs = float(diff.max()) if diff.size else 0.0
    if bad_nonfinite.any():
        max_abs = float("inf")
        idx = tuple(int(i) for i in np.argwhere(bad_nonfinite)[0])
    elif inf_mismatch.any():
        idx = tuple(int(i) for i in np.argwhere(inf_mismatch)[0])
    elif diff.size:
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
    else:
        idx = None
    worst_got = float(g[idx]) if idx is not None else 0.0
    worst_want = float(want[idx]) if idx is not None else 0.0
    reasons = []
    # The grader's own NaN in an element the kernel never wrote is not a NaN the kernel computed.
    if unwritten.any():
        reasons.append(f"{int(unwritten.sum())} of {unwritten.size} elements never written (they still hold "
                       "the NaN the grader filled them with)")
    if foreign.any():
        reasons.append(f"{int(foreign.sum())} NaN value{'s' if foreign.sum() != 1 else ''} computed from memory "
                       "nothing wrote (they hold the NaN the grader filled another array with)")
    computed = bad_nonfinite & ~unwritten & ~foreign
    if computed.any():
        n = int(computed.sum())
        reasons.append(f"{n} NaN/Inf value{'s' if n != 1 else ''} computed where the answer is finite")
    if (inf_mismatch & ~unwritten).any():
        reasons.append(f"{int((inf_mismatch & ~unwritten).sum())} values should be -inf (rows that see no "
                       "key) but are not")
    if rel > rel_tol:
        reasons.append(f"relative error {rel:.3g} > {rel_tol:g}")
    if max_abs > abs_tol:
        reasons.append(f"max abs error {max_abs:.3g} > {abs_tol:g}")
    return Comparison(name, rel, max_abs, idx, worst_got, worst_want, bad_nonfinite, unwritten,
                      not reasons, "; ".join(reasons), foreign)
