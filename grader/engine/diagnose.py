"""Likely causes, read from the shape of the error. Generic ones here; tasks add their own."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np



@dataclass
class Context:
    """Everything a diagnosis may look at for one failing case."""
    exercise: object           # catalogue.Exercise
    params: dict
    inputs: dict               # NumPy inputs
    ref: dict                  # float64 reference outputs
    out: dict                  # NumPy outputs of the student's kernel
    cmp: dict                  # name -> Comparison
    config: dict = field(default_factory=dict)   # the checked file's CONFIG (its tile sizes), if any
    noise: float = 0.0         # the relative rounding error of a correct kernel (low precision), or 0


def _rows(mask: np.ndarray) -> np.ndarray:
    """Collapse the last axis: which rows hold at least one flagged element."""
    return mask.reshape(-1, mask.shape[-1]).any(axis=1) if mask.ndim >= 2 else mask


def overflow_rows(name: str, bad: np.ndarray, lse_ref) -> bool:
    """Are the non-finite rows the rows whose exponentials can overflow (lse above 88.7), and nearly
    all of those? A bug that strikes a few rows of a large-score case is not overflow."""
    rows = bad.reshape(-1) if name == "lse" else bad.reshape(-1, bad.shape[-1]).any(axis=1)
    high = np.asarray(lse_ref, np.float64).reshape(-1)
    if rows.size != high.size:
        return True                               # shapes do not line up: keep the case-level rule
    with np.errstate(invalid="ignore"):
        high = high > 88.7
    return not (rows & ~high).any() and rows.sum() >= 0.9 * high.sum()


def _small_scores(ctx: Context) -> str:
    """' and the scores are small' when no exponential of this case can overflow float32."""
    lse = np.asarray(ctx.ref.get("lse", np.zeros(0)), np.float64)
    top = float(lse[np.isfinite(lse)].max(initial=-np.inf))
    return " and the scores are small" if top <= 80 else ""


def overflow(ctx: Context) -> str | None:
    """inf/NaN where the answer is finite. Overflow is named only when the case's scores can overflow
    expf (an lse above 80); otherwise the message says what was seen and does not guess."""
    lse_ref = ctx.ref.get("lse")
    finite = lse_ref[np.isfinite(lse_ref)] if lse_ref is not None else np.zeros(0)
    top = float(finite.max()) if finite.size else None
    for name, c in ctx.cmp.items():
        got = np.asarray(ctx.out[name], np.float64)
        if not c.bad_nonfinite.any():
            continue
        if top is not None and top > 80 and overflow_rows(name, c.bad_nonfinite, lse_ref):
            return (f"{name} holds inf/NaN where the answer is finite, and this case has large scores "
                    f"(the lse reaches {top:.0f}). expf(x) overflows to inf for x > 88.7, and inf/inf is "
                    "NaN: subtract the running max before exponentiating (exp(x - m)), so every exponent "
                    "is <= 0.")
        if np.isposinf(got[c.bad_nonfinite]).any():
            first = tuple(int(i) for i in np.argwhere(c.bad_nonfinite & np.isposinf(got))[0])
            why = (f"although this case's scores are small (the lse is at most {top:.1f}), so expf "
                   "cannot have overflowed" if top is not None and top <= 80 else
                   "on rows that are not the ones whose exponentials could overflow")
            return (f"{name} holds +inf where the answer is finite, first at {name}{list(first)}, {why}. Look for a "
                    "division by a sum that stayed 0 in some thread: a loop that skipped its keys or "
                    "elements, or a sum reduced across lanes that did not reach that lane (a butterfly of "
                    "__shfl_xor_sync reaches all of them); or for a value read from memory that was "
                    "never written.")
    return None


AXES = {0: ("batch entries", "b", "the batch offset (b · H · ...)"),
        1: ("heads", "h", "the head offset (h · ...)")}


def unwritten_pattern(name: str, unwritten: np.ndarray) -> str | None:
    """When the unwritten elements are exactly the entries b >= 1 (or heads h >= 1) — every entry's
    results landed on entry 0's place — the store's index lacks that axis's term."""
    for axis, (what, letter, term) in AXES.items():
        if unwritten.ndim < axis + 2 or unwritten.shape[axis] < 2:
            continue
        per = np.moveaxis(unwritten, axis, 0).reshape(unwritten.shape[axis], -1)
        if per[0].any() or not per[1:].all():
            continue
        return (f"{name} was written for {letter} = 0 only: every element with {letter} >= 1 still holds "
                f"the NaN the grader filled {name} with, so every one of its {what} stored its results "
                f"in entry {letter} = 0's place. The store's index of {name} is missing {term}.")
    return None


def misplaced_rows(name: str, got: np.ndarray, want: np.ndarray, tol: float) -> str | None:
    """Wrong rows that each hold another row's right answer (same batch entry and head): the results
    are right but stored at the wrong row."""
    if got.ndim < 2 or not np.isfinite(got).all():
        return None
    g = got.reshape(-1, *got.shape[-2:])
    w = np.where(np.isfinite(want), want, 0.0).reshape(g.shape)
    scale = max(float(np.abs(w).max(initial=0)), 1e-30)
    found, bad = [], 0
    for blk in range(g.shape[0]):
        err = np.abs(g[blk][:, None, :] - w[blk][None, :, :]).max(axis=-1) / scale   # [row, other row]
        for i in np.flatnonzero(err[np.arange(len(err)), np.arange(len(err))] > tol):
            bad += 1
            others = [int(j) for j in np.flatnonzero(err[i] <= tol) if j != i]
            if others:
                found.append((blk, int(i), others[0]))
    if not bad or len(found) < 0.75 * bad:
        return None
    blk, i, j = found[0]
    lead = np.unravel_index(blk, got.shape[:-2]) if got.ndim > 2 else ()
    where = ", ".join(str(int(x)) for x in (*lead, i))
    return (f"{len(found)} wrong rows of {name} each hold another row's right answer ({name}[{where}] is "
            f"row {j}'s): the values are computed right but stored at the wrong row. Check the row index "
            "of the store: which row a thread (or a fragment's register) holds.")


def generic(ctx: Context) -> str | None:
    cause = overflow(ctx)
    if cause:
        return cause
    # Whole outputs never written while others were: the code that stores them has not run.
    blank = [n for n, c in ctx.cmp.items() if c.unwritten.size and c.unwritten.all()]
    if blank and len(blank) < len(ctx.cmp):
        names = " and ".join(blank)
        others = " and ".join(n for n in ctx.cmp if n not in blank)
        return (f"{names} {'was' if len(blank) == 1 else 'were'} never written at all (every element still "
                f"holds the NaN the grader filled it with), while {others} {'was' if len(ctx.cmp) - len(blank) == 1 else 'were'} "
                f"written: the code that stores {names} has not run. Is the TODO that writes "
                f"{'it' if len(blank) == 1 else 'them'} still open, or does the store sit behind a condition "
                "that no thread meets?")
    for name, c in ctx.cmp.items():
        got, want = np.asarray(ctx.out[name], np.float64), ctx.ref[name]
        if c.unwritten.any():
            pattern = unwritten_pattern(name, c.unwritten)
            if pattern:
                return pattern
            first = tuple(int(i) for i in np.argwhere(c.unwritten)[0])
            return (f"{int(c.unwritten.sum())} of {c.unwritten.size} elements of {name} were never "
                    f"written (they still hold the NaN the grader filled {name} with), first at "
                    f"{name}{list(first)}. Does the launch grid cover every element, and does every "
                    "thread that owns an element reach the store?")
        computed = c.bad_nonfinite
        if computed.any() and got.ndim >= 2:
            nan_rows = _rows(computed & np.isnan(got))
            fine_rows = _rows(~np.isnan(got) & np.isfinite(want))
            full_rows = nan_rows & ~fine_rows
            lse_ref = ctx.ref.get("lse")
            keyless = (np.isneginf(np.asarray(lse_ref)).reshape(-1)
                       if lse_ref is not None and name != "lse" and np.size(lse_ref) == full_rows.size
                       else np.zeros(full_rows.size, bool))
            if full_rows.any() and (full_rows & keyless).any():
                return (f"whole rows of {name} are NaN ({int(full_rows.sum())} of {full_rows.size} rows), "
                        "among them rows with nothing to see (every entry -inf, or no visible key). Such "
                        "a row's running max stays -INFINITY: expf(-inf - -inf) = NaN, and 0/0 when "
                        f"l = 0. Exponentiate against 0 while the max is -INFINITY, and write {name} = 0 "
                        "and lse = -INFINITY when l = 0.")
            if full_rows.any() and full_rows.sum() == _rows(computed).sum():
                return (f"whole rows of {name} are NaN ({int(full_rows.sum())} of {full_rows.size} rows), "
                        "although each of them has elements and its answer is finite. Some thread computed "
                        "expf(-inf - -inf) = NaN with a max of -INFINITY, or 0/0 with a sum of 0: a thread "
                        "(or lane) that holds no element of the row still has the empty state (-INFINITY, "
                        "0). Either that state was rescaled or divided without a guard (merging two empty "
                        "states, exp(m_old - m_new) before any element), or the thread never received the "
                        "row's max or sum (a reduction across lanes must reach every lane that uses it: a "
                        "butterfly of __shfl_xor_sync over all of them).")
        if computed.any():
            first = tuple(int(i) for i in np.argwhere(computed)[0])
            return (f"the kernel computed NaN/inf in {int(computed.sum())} elements of {name}, first at "
                    f"{name}{list(first)}, where the answer is finite{_small_scores(ctx)}. A thread "
                    "used a max of -INFINITY (expf(-inf - -inf) = NaN) or a sum of 0 (x / 0): it still "
                    "had the empty state (-INFINITY, 0). Either that state was rescaled or divided "
                    "without a guard, or the thread never received the row's max or sum (a reduction "
                    "across lanes must reach every lane that uses it: a butterfly of __shfl_xor_sync).")
        # One element at 0 is as likely a value the kernel wrote (the lse of a zero row, say) as a store
        # that never ran: only a whole array of zeros says the latter.
        if got.size > 1 and np.isfinite(got).all() and not np.any(got) and np.any(want):
            return f"{name} is all zeros: the result is computed but never stored, or stored elsewhere."
        moved = misplaced_rows(name, got, want, max(1e-3, 3 * ctx.noise)) if name != "lse" else None
        if moved:
            return moved
        if got.ndim >= 2 and np.isfinite(got).all() and name != "lse":
            g2 = got.reshape(-1, got.shape[-1])
            w2 = want.reshape(-1, want.shape[-1])
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = g2 / w2
            ok = np.abs(w2) > 1e-3 * np.abs(w2).max()
            row_spread = []
            row_mean = []
            for r in range(g2.shape[0]):
                vals = ratio[r][ok[r]]
                if vals.size >= 2:
                    row_mean.append(np.median(vals))
                    row_spread.append(np.max(np.abs(vals - np.median(vals))) / max(abs(np.median(vals)), 1e-30))
            row_mean = np.array(row_mean)
            off = np.abs(row_mean - 1) > 1e-2           # rows that are scaled, not right
            # Missing 1/l (or rescale) scales nearly every row; a few scaled rows mean something else.
            if row_spread and np.median(row_spread) < 1e-3 and off.mean() > 0.9 and np.all(np.abs(row_mean) > 1e-3):
                return (f"each row of {name} is the right answer times a constant factor (the factor "
                        f"differs per row, e.g. {row_mean[off][0]:.4g}). Typical cause: the final division "
                        "by the softmax sum l is missing or wrong, or the accumulator was not rescaled "
                        "by exp(m_old - m_new) when the running max grew.")
    return None


def observed(ctx: Context) -> str | None:
    """When no replayed cause fits: say where the error is, along the axes a bug usually follows."""
    B = ctx.params.get("B", 1)
    if B < 2:
        return None
    for name, c in ctx.cmp.items():
        got, want = np.asarray(ctx.out[name], np.float64), ctx.ref[name]
        if got.shape[:1] != (B,):
            continue
        with np.errstate(invalid="ignore"):
            ok = [bool(np.all((np.abs(got[b] - want[b]) <= 1e-4 * max(1.0, float(np.nanmax(np.abs(
                np.where(np.isfinite(want[b]), want[b], 0)), initial=0)))) | (got[b] == want[b])))
                  for b in range(B)]
        trivial = not np.any(np.where(np.isfinite(want[0]), want[0], 0.0))   # nothing to get right
        if ok[0] and not trivial and not any(ok[1:]):
            return (f"batch entry b = 0 of {name} is right and every b >= 1 is wrong: look at the batch "
                    "term of your indices (the offset b · H · ... of q, o and lse, b · Hkv · ... of k and v, "
                    "or the batch's row of a table).")
    return None

