"""The weights a kernel really applied, read back from its output.

Attention's output row is a weighted sum of the value rows the query sees, o = sum_j p_j v_j, with
p = softmax(s). When a row sees fewer keys than it has features (n < d), the value rows are linearly
independent and the weights the kernel applied can be solved for exactly from its o: w = argmin
|V^T w - o|. Comparing w with the true p tells a class of bug from its shape, whatever line of code
holds it:

    w = c p, c != 1          the weights are right but divided by the wrong sum (l, or 1/l missing)
    w falls as s rises       an exponent's sign is flipped (exp(m - s) where exp(s - m) is due)
    w / p piecewise constant partial results (threads, warps, splits) merged with different factors
    o outside span(V)        o holds a value row the query does not see (one key past the end?)

And, before the weights, the columns: when o's columns in one row are the right answer times
different factors, the threads that share the row divided by different sums.

A `Row` is one failing output row with what it sees; `cause(rows)` reads the rows and returns a
sentence for the student, or None when no shape is clear (then the engine says what it observed).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

TOL = 1e-4          # float32 outputs agree with a float64 replay to ~1e-6; bugs differ by far more


@dataclass
class Row:
    where: str                  # e.g. "o[0, 1, 2]"
    o: np.ndarray               # [d] the kernel's output row
    o_ref: np.ndarray           # [d] the reference
    s: np.ndarray | None        # [n] the scaled scores of the keys the row sees (None: no weights)
    v: np.ndarray | None        # [n, d] their value rows
    next_v: np.ndarray | None = None   # the value row of the first key past the visible ones
    next_index: int | None = None      # ... and its key index


def _levels(r: np.ndarray, rtol: float = 1e-3) -> list[float]:
    """The distinct values of r, up to rtol."""
    out: list[float] = []
    for x in np.sort(r):
        if not out or abs(x - out[-1]) > rtol * max(abs(out[-1]), 1e-30):
            out.append(float(x))
    return out


def softmax(s: np.ndarray) -> np.ndarray:
    p = np.exp(s - s.max())
    return p / p.sum()


def column_kind(o: np.ndarray, o_ref: np.ndarray, tol: float = TOL) -> tuple[str, object] | None:
    """Per column ratio o / o_ref: one factor for the row ("row_factor"), a few factors shared by
    groups of columns ("column_groups"), or None (no such shape)."""
    big = np.abs(o_ref) > 1e-2 * np.abs(o_ref).max(initial=0)
    if big.sum() < 4:
        return None
    ratio = o[big] / o_ref[big]
    levels = _levels(ratio, max(1e-3, 10 * tol))
    if len(levels) == 1:
        return ("row_factor", levels[0]) if abs(levels[0] - 1) > 10 * tol else ("ok", None)
    counts = Counter(min(levels, key=lambda lv: abs(lv - x)) for x in ratio)
    if 2 <= len(levels) <= big.sum() // 2 and min(counts.values()) >= 2:
        right = [int(c) for c in np.flatnonzero(big)[np.abs(ratio - 1) < 10 * tol]]
        return "column_groups", (len(levels), right)
    return None


def weight_kind(row: Row, tol: float = TOL) -> tuple[str, object] | None:
    """Solve for the weights the kernel applied and compare them with softmax(s)."""
    if row.s is None or row.v is None:
        return None
    n, d = row.v.shape
    if n == 0 or n >= d:
        return "unidentifiable", None      # as many keys as features: w is not determined by o
    norm = max(float(np.linalg.norm(row.o)), 1e-30)
    w, *_ = np.linalg.lstsq(row.v.T, row.o, rcond=None)
    if np.linalg.norm(row.v.T @ w - row.o) > tol * norm:
        if row.next_v is not None:
            v2 = np.vstack([row.v, row.next_v])
            w2, *_ = np.linalg.lstsq(v2.T, row.o, rcond=None)
            if np.linalg.norm(v2.T @ w2 - row.o) <= tol * norm and abs(w2[-1]) > 10 * tol:
                return "extra_key", row.next_index
        return "outside", None
    return compare_weights(w, softmax(row.s), row.s, tol)


def compare_weights(w: np.ndarray, p: np.ndarray, s: np.ndarray, tol: float = TOL) -> tuple[str, object] | None:
    """The applied weights w of one row against the true p = softmax(s)."""
    keep = p > 1e-6
    if not keep.any():
        return None
    w, p, s = w[keep], p[keep], s[keep]
    if w.size >= 2 and (w > 0).all() and np.ptp(s) > 1e-3 and np.polyfit(s, np.log(w), 1)[0] < -0.5:
        return "sign", None
    levels = _levels(w / p, max(1e-3, 10 * tol))
    if len(levels) == 1:
        return ("row_factor", levels[0]) if abs(levels[0] - 1) > 10 * tol else ("ok", None)
    if len(levels) <= w.size // 2:        # few groups, not a coincidence of two ratios
        return "groups", len(levels)
    return None


def row_kind(row: Row, tol: float = TOL):
    if not (np.isfinite(row.o).all() and np.isfinite(row.o_ref).all()) or not row.o.any():
        return None             # non-finite or all-zero rows: the engine's generic checks say what they are
    kind = column_kind(row.o, row.o_ref, tol)
    if kind and kind[0] == "column_groups":
        return kind
    return weight_kind(row, tol) or kind


# Observations only: what the rows show, computed from o and its reference. The weights read back
# from o (sign, groups of keys, an extra key) are not stated: they can be read wrongly, and the
# replays (replays.py) name those bugs when they reproduce them.
MESSAGES = {
    "column_groups": "within a row of {out}, groups of columns are the right answer times different factors "
                     "(in {where}: {info[0]} groups{right}).",
}


def observation(rows: list[Row], out: str = "o", limit: int = 48, noise: float = 0.0):
    """The shape most failing rows share, as an observation (spec.Seen), or nothing. `noise`: the
    relative rounding error of a correct kernel (low precision), which every comparison allows."""
    from ..spec import Seen
    tol = max(TOL, 2 * noise)
    text = summarise([(row_kind(row, tol), row.where) for row in rows[:limit]], out)
    if text:
        yield Seen(text)


def summarise(kinds: list[tuple], out: str, names: dict | None = None) -> str | None:
    """kinds: (kind, where) per failing row. The text of the kind at least 3/4 of the rows share
    (`names` renames a kind's text), or None: a row of no known shape vetoes, never a guess."""
    if any(k is None for k, _ in kinds):
        return None
    kinds = [(k, where) for k, where in kinds if k[0] not in ("ok", "unidentifiable")]
    if not kinds:
        return None
    top, count = Counter(k[0] for k, _ in kinds).most_common(1)[0]
    if top not in MESSAGES or count < 0.75 * len(kinds):
        return None
    (name, info), where = next((k, w) for k, w in kinds if k[0] == top)
    right = ""
    if name == "column_groups":
        right = f", columns {info[1][:8]} right" if info[1] else ", none of them right"
    return MESSAGES[(names or {}).get(name, name)].format(out=out, where=where, info=info, right=right)


# ---- the rows of each kind of module ----------------------------------------------------------

def bad_rows(ctx, name: str = "o") -> list[tuple]:
    """The indices (all but the last axis) of the rows of ctx.out[name] that are wrong; none when
    the output passed its check (then its rows are not what failed)."""
    if ctx.cmp[name].passed:
        return []
    got, want = np.asarray(ctx.out[name], np.float64), np.asarray(ctx.ref[name], np.float64)
    scale = max(float(np.abs(want[np.isfinite(want)]).max(initial=0)), 1e-6)
    tol = max(1e-4, 4 * getattr(ctx, "noise", 0.0))      # a low-precision kernel's rounding is not wrong
    with np.errstate(invalid="ignore"):
        bad = ~((np.abs(got - want) <= tol * scale) | (got == want)).all(axis=-1)
    return [tuple(int(i) for i in idx) for idx in np.argwhere(bad)]


def prefill_rows(ctx, s, v, visible=None) -> list[Row]:
    """s [B, H, Nq, Nk] scaled scores, v [B, H, Nk, d] (expanded to query heads), visible [Nq, Nk]."""
    o, ref = np.asarray(ctx.out["o"], np.float64), ctx.ref["o"]
    rows = []
    for b, h, i in bad_rows(ctx):
        vis = np.ones(s.shape[-1], bool) if visible is None else np.asarray(visible[i], bool)
        keys = np.flatnonzero(vis)
        nxt = int(keys[-1]) + 1 if keys.size else None
        has_next = nxt is not None and nxt < s.shape[-1]
        rows.append(Row(f"o[{b}, {h}, {i}]", o[b, h, i], ref[b, h, i], s[b, h, i, keys], v[b, h, keys],
                        v[b, h, nxt] if has_next else None, nxt if has_next else None))
    return rows


def decode_rows(ctx, k, v, lens) -> list[Row]:
    """k, v [B, Hkv, L, d] the contiguous cache (L may exceed the context: the next key's row)."""
    q, scale = np.asarray(ctx.inputs["q"], np.float64), ctx.inputs["scale"]
    o, ref = np.asarray(ctx.out["o"], np.float64), ctx.ref["o"]
    H, Hkv = q.shape[1], k.shape[1]
    rows = []
    for b, h in bad_rows(ctx):
        n, g = int(lens[b]), h // (H // Hkv)
        s = scale * (np.asarray(k[b, g, :n], np.float64) @ q[b, h])
        has_next = n < k.shape[2]
        rows.append(Row(f"o[{b}, {h}]", o[b, h], ref[b, h], s, np.asarray(v[b, g, :n], np.float64),
                        np.asarray(v[b, g, n], np.float64) if has_next else None, n if has_next else None))
    return rows


def softmax_rows_observation(ctx, x, y_name: str = "y"):
    """Module 01: the output is the weights themselves (y = softmax(x) per row)."""
    from ..spec import Seen
    y, ref = np.asarray(ctx.out[y_name], np.float64), ctx.ref[y_name]
    if not np.isfinite(y).all():
        return
    # An all-zero row is left to the engine's generic checks ("never stored"); rows without a
    # visible element (compare_weights: None) say nothing either.
    kinds = [(compare_weights(y[idx], ref[idx], x[idx]) if y[idx].any() else None, f"{y_name}{list(idx)}")
             for idx in bad_rows(ctx, y_name)]
    text = summarise(kinds, y_name)
    if text:
        yield Seen(text)


def dominant_column_observation(ctx, s, visible=None, margin: float = 20.0):
    """Where every row's softmax is one key (its largest score above the rest by `margin` or more), and
    the wrong rows are exactly those whose key lies in some columns of a key tile (BLOCK_N keys, as
    the kernel was built for the case): say which."""
    from ..spec import Seen
    from .blocksparse import bad_row_mask
    from .replays import kernel_config
    tile = kernel_config(getattr(ctx, "config", None), ctx.params).get("BLOCK_N")
    tile = tile if isinstance(tile, int) and tile > 0 else 64
    if visible is not None:
        s = np.where(visible, s, -np.inf)
    if s.shape[-1] < 2 or not np.isfinite(s).any(axis=-1).all():
        return
    top2 = np.sort(s, axis=-1)[..., -2:]
    with np.errstate(invalid="ignore"):
        dominant = (top2[..., 1] - top2[..., 0]) >= margin
    bad = bad_row_mask(ctx)
    if bad.sum() < 3 or (~bad).sum() < 3 or not dominant.all():
        return
    col = np.argmax(s, axis=-1) % tile
    cols_bad, cols_good = set(col[bad].tolist()), set(col[~bad].tolist())
    if cols_bad & cols_good or len(cols_bad) > tile // 2:
        return
    listed = sorted(cols_bad)
    words = ", ".join(map(str, listed[:-1])) + (" or " if len(listed) > 1 else "") + str(listed[-1])
    yield Seen(f"every row's softmax here is one key (its largest score {margin:g} or more above the rest), "
               f"and the wrong rows are exactly those whose key lies in column {words} of a {tile}-key "
               f"tile (key index mod {tile}); every row whose key lies in another column is right.")
