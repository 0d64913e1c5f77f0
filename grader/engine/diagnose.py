"""What every module's diagnosis shares: the failing case's context, the causes any module can have
(rows that see no key), and the plain observations. Tasks add their own replays."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..runtimes.base import is_poison



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
    probe: str | None = None   # a passing case asking its replays: "wrong" or "right" here? (verdict.settle)
    # Set by replays.matches when the match it just reported is a constant (o = 0, lse = 0 of one-key
    # rows) that many bugs give: the cause yielded next may confirm a cause, never propose one.
    plain: bool = False


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


def _row_mask(name: str, shape: tuple, empty: np.ndarray) -> np.ndarray | None:
    """`empty` (one flag per row, lse's shape) spread over an output's elements, or None when the
    output's rows do not line up with lse's (lse itself, o with one more axis, varlen's transposed o)."""
    if tuple(shape) == empty.shape:
        return empty
    if tuple(shape[:-1]) == empty.shape:
        return np.broadcast_to(empty[..., None], shape)
    if empty.ndim == 2 and tuple(shape[:-1]) == empty.shape[::-1]:
        return np.broadcast_to(empty.T[..., None], shape)
    return None


def empty_row_causes(ctx: Context):
    """Rows that see no key (their lse is -inf): left unwritten, or computed NaN, while every other
    element of every output is right. Reproduced exactly: the reference with those rows unwritten
    (or NaN) is the kernel's output."""
    from .verdict import Cause
    lse_ref = ctx.ref.get("lse")
    if lse_ref is None:
        return
    empty = np.isneginf(np.asarray(lse_ref, np.float64))
    if not empty.any():
        return
    masks = {n: _row_mask(n, np.shape(ctx.out[n]), empty) for n in ctx.cmp}
    if any(m is None for m in masks.values()):
        return
    unwritten = {n: is_poison(ctx.out[n]) for n in ctx.cmp}     # any of the grader's NaNs
    nan = {n: np.isnan(np.asarray(ctx.out[n], np.float64)) & ~unwritten[n] for n in ctx.cmp}
    for n in ctx.cmp:                 # every element outside the empty rows is right
        got, want = np.asarray(ctx.out[n], np.float64), np.asarray(ctx.ref[n], np.float64)
        rest = ~masks[n]
        if not np.isfinite(got[rest]).all() or not np.isfinite(want[rest]).all():
            return
        err = np.linalg.norm(got[rest] - want[rest]) / max(float(np.linalg.norm(want[rest])), 1e-30)
        if err > max(1e-4, 3 * ctx.noise):
            return
    held = [n for n in ctx.cmp if unwritten[n].any()]
    zero = " and ".join(f"{n} = 0" for n in ctx.cmp if n != "lse")
    if held and all(unwritten[n][masks[n]].all() or not unwritten[n].any() for n in ctx.cmp):
        yield Cause("empty_rows:unwritten", (
            f"the rows with no visible key are never written: {' and '.join(held)} still "
            f"{'holds' if len(held) == 1 else 'hold'} the grader's NaN in exactly those rows, and every "
            f"other element is right. A row with no visible key still has an answer: {zero} and "
            "lse = -INFINITY. Store them, instead of returning or skipping the store when l = 0."))
    elif not held and any(nan[n][masks[n]].any() for n in ctx.cmp):
        yield Cause("empty_rows:nan", (
            "the rows with no visible key, and only they, are NaN (computed, not left unwritten), and every "
            "other element is right. Their running max stays -INFINITY, l stays 0: exponentiate against "
            f"0 instead of -inf (exp(-inf - -inf) is NaN) and guard the final 1/l, so {zero} and "
            "lse = -INFINITY."))


def _small_scores(ctx: Context) -> str:
    """' and the scores are small' when no exponential of this case can overflow float32."""
    lse = np.asarray(ctx.ref.get("lse", np.zeros(0)), np.float64)
    top = float(lse[np.isfinite(lse)].max(initial=-np.inf))
    return " and the scores are small" if top <= 80 else ""


def observations(ctx: Context):
    """What the outputs show, as plain statements (verdict.Seen), never as a cause: which outputs
    or elements still hold the grader's NaN, where NaN/Inf was computed, all-zero outputs, rows
    that hold another row's answer, rows off by a factor, and which batch entries are right."""
    from .verdict import Seen
    lse_ref = ctx.ref.get("lse")
    finite = lse_ref[np.isfinite(lse_ref)] if lse_ref is not None else np.zeros(0)
    top = float(finite.max()) if finite.size else None
    blank = [n for n, c in ctx.cmp.items() if c.unwritten.size and c.unwritten.all()]
    if blank and len(blank) < len(ctx.cmp):
        names = " and ".join(blank)
        others = " and ".join(n for n in ctx.cmp if n not in blank)
        yield Seen(f"{names} {'was' if len(blank) == 1 else 'were'} never written at all (every element still "
                   f"holds the NaN the grader filled it with), while {others} "
                   f"{'was' if len(ctx.cmp) - len(blank) == 1 else 'were'} written.")
    for name, c in ctx.cmp.items():
        got, want = np.asarray(ctx.out[name], np.float64), ctx.ref[name]
        if c.unwritten.any() and name not in blank:
            first = tuple(int(i) for i in np.argwhere(c.unwritten)[0])
            yield Seen(f"{int(c.unwritten.sum())} of {c.unwritten.size} elements of {name} were never written "
                       f"(they still hold the NaN the grader filled {name} with), first at {name}{list(first)}"
                       f"{unwritten_pattern(name, c.unwritten)}.")
        foreign = c.foreign if c.foreign is not None else np.zeros(np.shape(got), bool)
        if foreign.any():
            first = tuple(int(i) for i in np.argwhere(foreign)[0])
            yield Seen(f"{int(foreign.sum())} of {foreign.size} elements of {name} hold the NaN the grader filled "
                       f"{c.foreign_from} with, first at {name}{list(first)}{unwritten_pattern(name, foreign)}: "
                       "they were computed from elements of that array that nothing wrote (the launch code "
                       "allocated it; the kernel that fills it did not reach them).")
        computed = c.bad_nonfinite & ~c.unwritten & ~foreign
        if computed.any():
            first = tuple(int(i) for i in np.argwhere(computed)[0])
            what = "+inf" if np.isposinf(got[computed]).all() else "NaN/Inf"
            where = ""
            if top is not None and got.ndim >= 1:
                if top > 80 and overflow_rows(name, computed, lse_ref):
                    where = (f", on the rows whose lse exceeds 88.7 (this case's reaches {top:.0f}; expf(x) is "
                             "inf in float32 for x > 88.7)")
                elif top <= 80:
                    where = f"; this case's scores are small (the lse is at most {top:.4g}), so expf cannot overflow"
            rows = _rows(computed & ~np.isfinite(got)) if got.ndim >= 2 else None
            whole = ""
            if rows is not None and rows.any() and not _rows(np.isfinite(got) & np.isfinite(want))[rows].any():
                whole = (", filling every row" if rows.all() else
                         f", filling {int(rows.sum())} of its {rows.size} rows entirely")
                keyless = (np.isneginf(np.asarray(lse_ref)).reshape(-1)
                           if lse_ref is not None and name != "lse" and np.size(lse_ref) == rows.size
                           else np.zeros(rows.size, bool))
                if (rows & keyless).any():
                    whole += " (among them rows that see no key)"
            n = int(computed.sum())
            yield Seen(f"the kernel computed {what} in {n} element{'s' if n != 1 else ''} of {name} where the answer "
                       f"is finite{whole}, first at {name}{list(first)}{where}.")
        if got.size > 1 and np.isfinite(got).all() and not np.any(got) and np.any(want):
            yield Seen(f"{name} is all zeros: every element was written, each with 0.")
            continue
        moved = misplaced_rows(name, got, want, max(1e-3, 3 * ctx.noise)) if name != "lse" else None
        if moved:
            yield Seen(moved)
            continue
        factor = row_factors(name, got, want, ctx)
        if factor:
            yield Seen(factor)
    batch = observed(ctx)
    if batch:
        yield Seen(batch)


def case_constants(ctx) -> list[tuple[float, str]]:
    """The numbers a case's kernel multiplies by, with their names: a whole output off by one of
    these says which multiplication to look at (a scale applied twice or left out, log2 e where ln 2
    is due, a group size)."""
    if ctx is None:
        return []
    d = ctx.params.get("d")
    scale = ctx.inputs.get("scale") if isinstance(ctx.inputs, dict) else None
    scale_text = "the case's softmax scale"
    if scale is None and d:
        scale, scale_text = 1 / np.sqrt(d), "the softmax scale"
    here = f", 1/√{d} here" if scale is not None and d and abs(float(scale) * np.sqrt(d) - 1) < 1e-6 else ""
    named = [(np.log2(np.e), "log2 e"), (np.log(2), "ln 2")]
    if scale is not None:
        scale = float(scale)
        named += [(scale, scale_text + here), (1 / scale, f"one over {scale_text}"), (scale * scale, f"{scale_text}, squared"),
                  (scale * np.log2(np.e), f"{scale_text} times log2 e"), (scale / np.log2(np.e), f"{scale_text} times ln 2")]
    h, h_kv = ctx.params.get("H"), ctx.params.get("Hkv")
    if h and h_kv and h != h_kv:
        named += [(h / h_kv, "the group size H / Hkv"), (h_kv / h, "one over the group size H / Hkv")]
    return named


def named_factor(value: float, ctx) -> str:
    """' (<name>)' where `value` is one of the case's constants (case_constants), to 1 part in 1000:
    every one it equals (at d = 64 with groups of 8, one over the scale is the group size)."""
    names = [text for const, text in case_constants(ctx) if abs(value - const) <= 1e-3 * abs(const)]
    return f" ({'; equally, '.join(names)})" if names else ""     # two constants may coincide: both said


def row_factors(name: str, got: np.ndarray, want: np.ndarray, ctx=None) -> str | None:
    """Every wrong row the right answer times a factor of its own (the factor differs per row)."""
    if got.ndim < 2 or not np.isfinite(got).all() or name == "lse":
        return None
    g2, w2 = got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = g2 / w2
    ok = np.abs(w2) > 1e-3 * np.abs(w2).max()
    means, spreads = [], []
    for r in range(g2.shape[0]):
        vals = ratio[r][ok[r]]
        if vals.size >= 2:
            med = np.median(vals)
            means.append(med)
            spreads.append(np.max(np.abs(vals - med)) / max(abs(med), 1e-30))
    means = np.array(means)
    off = np.abs(means - 1) > 1e-2
    if spreads and np.median(spreads) < 1e-3 and off.mean() > 0.9 and np.all(np.abs(means) > 1e-3):
        if np.max(np.abs(means - means[0])) <= 1e-3 * abs(means[0]):
            return (f"every row of {name} is the right answer times one and the same factor, "
                    f"{means[0]:.4g}{named_factor(means[0], ctx)}: the whole of {name} is off by that factor.")
        said = (f"each row of {name} is the right answer times a factor of its own (e.g. {means[off][0]:.4g}, "
                f"{means[off][-1]:.4g})")
        if name in SOFTMAX_WEIGHTED:
            return said + ": the weights within a row are right relative to each other, their sum is not."
        return said + "."
    return None


# Outputs that are softmax-weighted sums of V, whose rows a wrong normaliser scales one by one.
SOFTMAX_WEIGHTED = ("o", "o_part", "y", "out")


AXES = {0: ("batch entries", "b"), 1: ("heads", "h")}


def unwritten_pattern(name: str, unwritten: np.ndarray) -> str:
    """', exactly the elements with b >= 1' when the unwritten elements follow an axis that way."""
    for axis, (what, letter) in AXES.items():
        if unwritten.ndim < axis + 2 or unwritten.shape[axis] < 2:
            continue
        per = np.moveaxis(unwritten, axis, 0).reshape(unwritten.shape[axis], -1)
        if per[0].any() or not per[1:].all():
            continue
        return f": exactly the {what} {letter} >= 1 ({letter} = 0 was written in full)"
    return ""


MISPLACED_ROWS_LOOKED = 256     # wrong rows compared with every row (each costs rows × d)


def misplaced_rows(name: str, got: np.ndarray, want: np.ndarray, tol: float) -> str | None:
    """Wrong rows that each hold another row's right answer (same batch entry and head)."""
    if got.ndim < 2 or not np.isfinite(got).all():
        return None
    g = got.reshape(-1, *got.shape[-2:])
    w = np.where(np.isfinite(want), want, 0.0).reshape(g.shape)
    scale = max(float(np.abs(w).max(initial=0)), 1e-30)
    found, bad, looked = [], 0, 0
    for blk in range(g.shape[0]):
        wrong = np.flatnonzero(np.abs(g[blk] - w[blk]).max(axis=-1) / scale > tol)
        bad += len(wrong)
        for i in wrong[:max(0, MISPLACED_ROWS_LOOKED - looked)]:   # one row at a time: memory rows × d
            looked += 1
            err = np.abs(w[blk] - g[blk][i]).max(axis=-1) / scale
            others = [int(j) for j in np.flatnonzero(err <= tol) if j != i]
            if others:
                found.append((blk, int(i), others[0]))
    if not bad or len(found) < 0.75 * looked:
        return None
    blk, i, j = found[0]
    lead = np.unravel_index(blk, got.shape[:-2]) if got.ndim > 2 else ()
    where = ", ".join(str(int(x)) for x in (*lead, i))
    which = f"the {bad}" if looked == bad else f"the first {looked} (of {bad})"
    return (f"{len(found)} of {which} wrong rows of {name} each hold another row's right answer "
            f"({name}[{where}] is row {j}'s).")


def observed(ctx: Context) -> str | None:
    """Batch entry 0 right and every other one wrong."""
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
            return f"batch entry b = 0 of {name} is right and every b >= 1 is wrong."
    return None
