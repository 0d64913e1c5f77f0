"""Bugs replayed in float64: a cause is stated only when replaying it reproduces the output.

Each `*_causes` function takes the failing case's context (engine/diagnose.Context: inputs,
reference, the student's outputs, the comparisons) and yields a `Cause(id, text)` for every replay
that reproduces the output (close to the replay AND far from the truth), and `Seen(text)` for plain
observations (engine/verdict.py). The replays come in families, each the reference computation with
one bug: the last step (1/l, lse's units and terms), the streaming loop (rescale, stale max, bounds
mask), the key range (start and end off by one key or one tile), the indexing (batch and head terms
dropped, the GQA kv head), the scale, the exponent's sign, the causal mask and loop bounds, and for
decode the splits and their combine.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..engine.verdict import spend
from ..runtimes.base import is_poison

from . import lowp, references as R
from ..spec import Cause, Seen

# The tile sizes a student may pick; a tile-shaped bug is replayed with each, unless the kernel
# declares its own (CONFIG's BLOCK_M / BLOCK_N): then with that one only, so that a message never
# names a tile size the kernel does not use.
TILES = (16, 32, 64, 128)


def tiles(ctx, key: str) -> tuple[int, ...]:
    size = kernel_config(getattr(ctx, "config", None), ctx.params).get(key)
    return (int(size),) if isinstance(size, int) and size > 0 else TILES


def kernel_config(config: dict | None, params: dict) -> dict:
    """CONFIG as the kernel was compiled for this case: flat, or keyed by head dimension (06), with a
    case's own tile sizes (`tiles`, calls.tiles_of) in place of the file's."""
    from .calls import case_tiles
    config = config or {}
    nested = config.get(params.get("d"))
    return dict(nested if isinstance(nested, dict) else config, **case_tiles(params))

# ---- prefill (modules 00, 02, 03) ----------------------------------------------------------------

def scores(inputs, kv_head=None, scale=None):
    """The scaled scores [B, H, Nq, Nk] in float64, and V expanded to the query heads [B, H, Nk, d]."""
    q, k, v = (np.asarray(inputs[x], np.float64) for x in ("q", "k", "v"))
    H, Hkv = q.shape[1], k.shape[1]
    heads = [kv_head(h, H, Hkv) if kv_head else R.kv_head_of(h, H, Hkv) for h in range(H)]
    k, v = k[:, heads], v[:, heads]
    s = (inputs["scale"] if scale is None else scale) * q @ np.swapaxes(k, -1, -2)
    return s, v


LOG2E = 1.0 / math.log(2.0)   # a kernel's scale_log2 = scale · log2(e), for exp2
FLOAT32_EXP_FLOOR = math.log(float(np.finfo(np.float32).smallest_subnormal))   # exp below this is 0


def attend(s, v, visible=None):
    """Softmax over the visible scores, then P V -> (o, lse). A weight whose exponent lies below
    float32's range is 0, as in a kernel: a row's max far above its other scores (a padded key of
    score 0 beside scores near -150) leaves them no weight at all."""
    spend()
    p, lse = R.masked_softmax(s, visible)
    s = np.asarray(s, np.float64) if visible is None else np.where(visible, s, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.where(s - lse[..., None] < FLOAT32_EXP_FLOOR, 0.0, p)
    return p @ v, lse


def streamed(s, v, tile, rescale_acc=True, rescale_l=True, visible=None, stale_max=False, first_zero=False,
             p_for_acc=None, guard_tile=False, m_floor=None, row_end=None, raw_keys=None, l_of=None,
             unguarded=False):
    """The online softmax over key tiles, as a kernel runs it, with the rescale optionally left out
    (rescale_acc may also be a mask over acc's columns: those rescaled, or a function of alpha giving
    each element's factor; rescale_l="after": l rescaled after this tile's sum is added), or
    (stale_max) each tile's P
    taken against the max before the tile (0 before the first), or (first_zero) a row's first tile
    with a visible key taken against 0 instead of its max. p_for_acc(p) is the P the second product
    reads (rounded to the input type, or rearranged), where l sums p itself. guard_tile: the guard
    for an empty state tests the tile's own max, m_use = 0 whenever the tile has no visible key.
    m_floor: m_use = max(m_new, m_floor) (a floor on the shift). row_end [Nq]: a row's loop stops
    before the key tile that starts there (a causal query tile's last tile). raw_keys = (mask over
    the keys, factor): those keys' P is the score times factor, never exponentiated, and l leaves them
    out (-inf for a masked key, as the kernel's -INFINITY reaches the product). l_of(p, st): the
    terms l adds per key (default p). unguarded: o = acc · (1 / l) and lse = m + log(l) whatever l is
    (02's epilogue, whose rows all see keys)."""
    if visible is not None:
        s = np.where(visible, s, -np.inf)
    shape = s.shape[:-1]
    m, l = np.full(shape, -np.inf), np.zeros(shape)
    acc = np.zeros(shape + (v.shape[-1],))
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, s.shape[-1], tile):
            st = s[..., start:start + tile]
            m_new = np.maximum(m, st.max(axis=-1))
            m_use = np.where(np.isfinite(st.max(axis=-1) if guard_tile else m_new), m_new, 0.0)
            if guard_tile:
                m_use = np.where(np.isfinite(m_use), m_use, 0.0)
            if m_floor is not None:
                m_use = np.maximum(m_use, m_floor)
            alpha = np.exp((m - m_use).astype(np.float32)).astype(np.float64)   # float32, as the kernel
            shift = np.where(np.isfinite(m), m, 0.0) if stale_max else m_use
            if first_zero:
                shift = np.where(np.isfinite(m), m_use, 0.0)
            # In float32, as the kernel computes it: a shift far from the scores underflows to 0
            # (or overflows to inf) there, and that is what a bug with the wrong shift gives.
            p = np.exp((st - shift[..., None]).astype(np.float32)).astype(np.float64)
            if raw_keys is not None:
                raw = raw_keys[0][start:start + tile]
                p_l = np.where(raw, 0.0, p)
                p = np.where(raw, st * raw_keys[1], p)
            else:
                p_l = p if l_of is None else l_of(p, st)
            if rescale_l == "after":
                l_new = (l + p_l.sum(axis=-1)) * alpha
            else:
                l_new = (l * alpha if rescale_l else l) + p_l.sum(axis=-1)
            factor = rescale_acc(alpha) if callable(rescale_acc) else np.where(rescale_acc, alpha[..., None], 1.0)
            pv = p if p_for_acc is None else p_for_acc(p)
            acc_new = acc * factor + pv @ v[..., start:start + tile, :]
            if row_end is not None:
                run = start < np.asarray(row_end)
                m_new, l_new, acc_new = np.where(run, m_new, m), np.where(run, l_new, l), np.where(run[:, None], acc_new, acc)
            m, l, acc = m_new, l_new, acc_new
        o = np.where(l[..., None] > 0, acc / np.where(l > 0, l, 1.0)[..., None], 0.0)
        if raw_keys is not None:    # o = acc · inv_l, inv_l = 0 when l = 0: a NaN in acc stays
            o = acc * np.where(l > 0, 1.0 / np.where(l > 0, l, 1.0), 0.0)[..., None]
        lse = np.where(l > 0, m + np.log(np.where(l > 0, l, 1.0)), -np.inf)
        if unguarded:
            with np.errstate(divide="ignore"):
                o, lse = acc * (1.0 / l)[..., None], m + np.log(l)
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


def close_to(got, alt, want, noise: float = 0.0) -> bool:
    """Does the output reproduce the replay `alt`, and more closely than it is to the truth `want`?
    Within MATCH, and within a tenth of the output's own error, so a case whose error is small (a
    shrunk one) is not matched by any replay that is merely near the truth too."""
    floor = max(1e-6, 3 * noise)        # the kernel's own rounding
    return rel(got, alt) < max(min(MATCH, 0.1 * rel(got, want)), floor)


def matches(ctx, o=None, lse=None, **others) -> bool:
    """The student's output is close to the replayed bug in every output given (o, lse, or any other
    output by name), and not to the truth. An output that still holds the grader's NaN anywhere was
    not written there: no replay computes that, so none matches it."""
    spend()
    checks = [(name, alt) for name, alt in (("o", o), ("lse", lse), *others.items()) if alt is not None]
    if not checks:
        return False
    dtype = ctx.params.get("dtype")
    if dtype:       # a low-precision kernel stores o in its input type: past its range, inf
        with np.errstate(over="ignore"):
            checks = [(n, lowp.rounded(a, dtype) if n == "o" else a) for n, a in checks]
    probe = getattr(ctx, "probe", None)
    if probe:
        # A passing case (verdict.settle) asks whether the replay predicts a wrong answer here, where
        # the kernel was right ("wrong"), or the right one ("right").
        off = any(rel(ctx.out[name], alt) > max(1e-4, 10 * ctx.noise) for name, alt in checks)
        return off if probe == "wrong" else not off
    for name, _ in checks:
        if np.any(unwritten_mask(ctx, name)):
            return False
    def constant(alt) -> float | None:
        """0 or 1 where every finite value is that constant (o = 0, log l = 0 of one-key rows, a
        weight of 1, up to float64 rounding: lse - max of one key is 5e-17), else None."""
        finite = np.asarray(alt, np.float64)[np.isfinite(alt)]
        return next((c for c in (0.0, 1.0) if finite.size and np.all(np.abs(finite - c) < 1e-12)), None)
    # A constant computed with float64 rounding is that constant: the kernel's exact 0 matches it. (A
    # replay of tiny values, 1e-22 in float32, matches the kernel's tiny values as they are, too.)
    exact = dict(checks)
    checks = [(n, np.where(np.isfinite(a), constant(a), a) if constant(a) is not None else a) for n, a in checks]

    def plain(alt) -> bool:
        """A constant 0 or 1 matches many bugs."""
        return constant(alt) is not None
    # Only such constants name no bug alone, unless a -inf where the answer is finite (a row that saw
    # no key) tells, beside them. Any other value (lse = log 58 of 58 padded keys, the lse of a
    # one-row case) is as telling as any row. A constant match is still a match: it is reported as
    # plain (verdict.settle lets it confirm a cause another case proposes, never propose one).
    plain_only = all(plain(alt) for _, alt in checks) and \
        not any(np.any(~np.isfinite(a) & np.isfinite(ctx.ref[n])) for n, a in checks)
    match = max(MATCH, 3 * getattr(ctx, "noise", 0.0))    # a low-precision kernel's own rounding
    def near(name, alt) -> bool:
        if ctx.cmp[name].passed and rel(alt, ctx.ref[name]) < 1e-5:
            return True     # the replay predicts this output right, and the kernel got it right
        return any(rel(ctx.out[name], x) < match and close_to(ctx.out[name], x, ctx.ref[name], getattr(ctx, "noise", 0.0))
                   for x in (alt, exact[name]))
    close = all(near(name, alt) for name, alt in checks)
    wrong = any(rel(ctx.out[name], ctx.ref[name]) > 10 * match or not ctx.cmp[name].passed
                for name, _ in checks)
    if close and wrong and hasattr(ctx, "plain"):
        ctx.plain = plain_only
        return True
    return close and wrong and not plain_only


def store_format_causes(ctx, name="o"):
    """o converted with one 16-bit format's intrinsic whatever the case's type (__floats2half2_rn
    where the element type is bfloat16, or the other way round): its bits read as the case's type. The
    id names the format stored, so that a case of that type, which the bug gets right, confirms it."""
    dtype = ctx.params.get("dtype")
    if dtype not in lowp.EPS or name not in ctx.ref:
        return
    for stored in lowp.EPS:
        if stored == dtype and not getattr(ctx, "probe", None):
            continue                      # the truth itself: only a probe asks whether it is right
        if matches(ctx, **{name: lowp.stored_as(ctx.ref[name], stored, dtype)}):
            yield Cause(f"store:{name}_as_{stored}", (
                f"{name} holds {stored} bits read as {dtype} (the output matches that): its store converts to "
                f"{stored} (__floats2{'half2' if stored == 'float16' else 'bfloat162'}_rn, "
                f"{'__half2' if stored == 'float16' else '__nv_bfloat162'}) where the element type is {dtype}: "
                "store with elem2_t and to_elem2, which follow USE_BF16."))


def prefill_causes(ctx, s, v, visible=None):
    """Every prefill replay family (modules 00, 02, 03, 06): the last step, the streaming loop, the
    key range, the indexing, the scale, the exponent, an early return, and (where CONFIG spreads a
    row over COLS lanes) the reductions over those lanes."""
    from .lanes import reduction_causes
    yield from early_return_causes(ctx)
    yield from output_causes(ctx, s, v, visible)
    yield from exponent_causes(ctx, s, v, visible)
    yield from tile_bug_causes(ctx, s, v, visible)
    yield from key_range_causes(ctx, s, v, visible)
    yield from setup_causes(ctx, visible)
    yield from tile_start_causes(ctx, visible)
    yield from operand_causes(ctx, visible)
    yield from feature_causes(ctx, visible)
    yield from reduction_causes(ctx, s, v, visible)
    yield from store_guard_causes(ctx)


def store_guard_causes(ctx):
    """lse stored under the wrong thread test: a block's threads hold TM rows each (row group ty =
    rows q_start + ty · TM ..), COLS lanes per row (tx); a store guarded by ty == 0 where tx == 0 is
    due writes only the first TM rows of every query tile."""
    config = kernel_config(getattr(ctx, "config", None), ctx.params)
    bm, tm = config.get("BLOCK_M"), config.get("TM")
    if not (isinstance(bm, int) and isinstance(tm, int)) or tm >= bm:
        return
    n_q = np.shape(ctx.ref["lse"])[-1]
    gone = np.arange(n_q) % bm >= tm
    if unwritten_as(ctx, {"lse": np.broadcast_to(gone, np.shape(ctx.ref["lse"]))}):
        yield Cause("store:lse_guard_ty", (
            f"lse is written only for the first TM = {tm} rows of every query tile of {bm} (the others still "
            "hold the grader's NaN; o is right): the store is guarded by ty == 0, the first row group, where "
            "one lane of each row's COLS lanes, tx == 0, is due."))


def tile_start_causes(ctx, visible=None):
    """A tile's load without the tile's start: every query tile reads the rows of query tile 0, or
    every key tile the keys, the values, or both, of key tile 0."""
    n_q, n_k = np.shape(ctx.inputs["q"])[-2], np.shape(ctx.inputs["k"])[-2]
    for names, n, key, what in ((("q",), n_q, "BLOCK_M", "query tile 0's rows: q_start"),
                                (("k", "v"), n_k, "BLOCK_N", "key tile 0's keys and values: kv_start"),
                                (("k",), n_k, "BLOCK_N", "key tile 0's keys: kv_start"),
                                (("v",), n_k, "BLOCK_N", "key tile 0's values: kv_start")):
        for tile in tiles(ctx, key):
            if n <= tile:
                continue
            alt = dict(ctx.inputs)
            for x in names:
                alt[x] = np.asarray(ctx.inputs[x])[..., np.arange(n) % tile, :]
            if matches(ctx, *attend(*scores(alt), visible)):
                which = " and ".join(names)
                yield Cause(f"index_drop:tile_start:{''.join(names)}", (
                    f"every tile reads {what.split(':')[0]} (the output matches {which} loaded without the "
                    f"tile's start, with tiles of {tile}): row r of a tile is row {what.split(': ')[1]} + r. "
                    "The first tile is right, which is why short cases pass."))


def unwritten_mask(ctx, name) -> np.ndarray:
    """Where the output holds one of the grader's NaNs: its own (never written) or another array's
    (copied or computed from memory nothing wrote, such as a workspace row). No arithmetic makes it,
    so no replay predicts it; the replays of unwritten elements look for it."""
    return is_poison(ctx.out[name])


def unwritten_as(ctx, predicted: dict) -> bool:
    """Did the kernel leave exactly the predicted elements unwritten (still the grader's NaN) and
    write every other element of every output right? `predicted`: output name -> mask of the
    elements a grid, a loop or a store never reaches (an output not named: all written)."""
    probe = getattr(ctx, "probe", None)
    if probe:
        wrong = any(np.any(m) for m in predicted.values())
        return wrong if probe == "wrong" else not wrong
    for name, got in ctx.out.items():
        want = np.broadcast_to(np.asarray(predicted.get(name, False), bool), np.shape(got))
        if not np.array_equal(np.asarray(unwritten_mask(ctx, name), bool), want):
            return False
        written = ~want
        if written.any() and rel(np.asarray(got, np.float64)[written], ctx.ref[name][written]) >= \
                max(MATCH, 3 * getattr(ctx, "noise", 0.0)):       # a low-precision kernel's rounding
            return False
    return any(np.any(m) for m in predicted.values())


def early_return_causes(ctx):
    """Query tiles that never reach their store: the tiles that start at or past n_k, or the last,
    partial tile. Their rows of o and lse still hold the grader's NaN, and every other element is
    right. An early return on the wrong test and a grid one tile short leave the same output, so the
    message names both."""
    n_q, n_k = ctx.params["Nq"], ctx.params["Nk"]
    rows_i = np.arange(n_q)
    probe = getattr(ctx, "probe", None)
    for bm in tiles(ctx, "BLOCK_M"):
        first = (rows_i // bm) * bm
        for cid, rows, what, how in (
                ("tile_skipped:past_keys", first >= n_k,
                 f"the query tiles that start at or past n_k = {n_k} (tiles of {bm} rows)",
                 "an early return on q_start >= n_k, or a grid of cdiv(n_k, BLOCK_M) tiles where "
                 "n_q's are needed"),
                ("tile_skipped:partial", first + bm > n_q,
                 f"the last query tile, the partial one (tiles of {bm} rows)",
                 "a grid of n_q / BLOCK_M tiles, rounded down where cdiv(n_q, BLOCK_M) is needed, or "
                 "an early return on q_start + BLOCK_M > n_q")):
            if probe:                           # a passing case: did this test predict it right?
                if rows.any() == (probe == "wrong"):
                    yield Cause(cid, "")
                continue
            if not rows.any():
                continue
            o_gone = unwritten_mask(ctx, "o").all(axis=-1)          # [B, H, Nq]
            lse_gone = unwritten_mask(ctx, "lse")
            want = np.broadcast_to(rows, lse_gone.shape)
            if not (np.array_equal(o_gone, want) and np.array_equal(lse_gone, want)):
                continue
            kept = ~want
            if rel(np.asarray(ctx.out["o"])[kept], ctx.ref["o"][kept]) > MATCH or \
                    rel(np.asarray(ctx.out["lse"])[kept], ctx.ref["lse"][kept]) > MATCH:
                continue
            yield Cause(cid, (
                f"{what} never reach their store: their rows of o and lse still hold the grader's NaN, "
                f"and every other element is right. Look for {how}. Every query tile must run and "
                "store; a row with no visible key still stores o = 0 and lse = -INFINITY."))


def is_causal(visible) -> bool:
    """Is this visibility [.., Nq, Nk] the bottom-right causal mask (a causal kernel's, whose query
    tiles stop at their diagonal's key tile)?"""
    if visible is None:
        return False
    visible = np.asarray(visible, bool)
    return np.array_equal(visible, R.causal_mask(*visible.shape[-2:]))


def row_ends(ctx, visible, n_q: int, n_k: int, tile: int) -> list:
    """Where each query row's loop over key tiles of `tile` stops, for each BLOCK_M the kernel may use:
    a causal kernel's query tile stops at its last row's diagonal tile; [None] (every tile) otherwise."""
    if not is_causal(visible):
        return [None]
    return [tile_limits(n_q, n_k, bm, tile, lambda first, last: last) for bm in tiles(ctx, "BLOCK_M")]


def padded_to_tiles(s, v, tile: int, visible=None):
    """(s, v) as a kernel's key tiles hold them: the keys past n_k up to whole tiles scored -INFINITY
    (and masked keys too) with zero values, for replays in which a masked score reaches the sums."""
    n_k = s.shape[-1]
    pad = -n_k % tile
    s_full = np.concatenate([np.where(visible, s, -np.inf) if visible is not None else s,
                             np.full(s.shape[:-1] + (pad,), -np.inf)], axis=-1)
    return s_full, np.concatenate([v, np.zeros(v.shape[:-2] + (pad, v.shape[-1]))], axis=-2)


def tile_bug_causes(ctx, s, v, visible=None):
    """Bugs of the streaming loop: the rescale and the bounds mask of the last, partial key tile."""
    n_k = s.shape[-1]
    for tile in tiles(ctx, "BLOCK_N"):
        o_alt, lse_alt = streamed(s, v, tile, visible=visible, stale_max=True)
        if matches(ctx, o=o_alt, lse=lse_alt):
            yield Cause("softmax:stale_max", (
                "P is taken against a stale max: the max of the earlier tiles (0 before the first), "
                "not m_new, which includes this tile's scores (the output matches that loop). Fold the "
                "tile's row max in first, m_new = max(m, rowmax(S)), then P = exp(S - m_new)."))
        o_alt, lse_alt = streamed(s, v, tile, visible=visible, first_zero=True)
        if matches(ctx, o=o_alt, lse=lse_alt) or matches(ctx, o=o_alt):
            yield Cause("softmax:first_tile_unshifted", (
                "a row's first tile with a visible key is exponentiated against 0, not its max (the "
                "output matches that): the guard for an empty state must test the new max, m_use = "
                "(m_new == -INFINITY) ? 0 : m_new, not the old one, which is -INFINITY before every "
                "row's first visible key."))
        for ends in row_ends(ctx, visible, s.shape[-2], n_k, tile):
            if matches(ctx, *streamed(s, v, tile, visible=visible, m_floor=0.0, row_end=ends)):
                yield Cause("softmax:m_use_floor_zero", (
                    f"the shift is never below 0, m_use = max(m_new, 0), while alpha and lse use the max "
                    f"itself (the output matches that, with key tiles of {tile}): a row whose max is negative "
                    "gets l and acc against 0 but lse against m. Only a row with no visible key yet needs "
                    "another shift: m_use = (m_new == -INFINITY) ? 0 : m_new."))
                break
        # l summing the scores themselves (in log2 units), before they become P: the kernel's tile
        # holds the keys past n_k as -INFINITY, which l adds too.
        with np.errstate(invalid="ignore", over="ignore"):
            alt = streamed(*padded_to_tiles(s, v, tile, visible), tile, l_of=lambda p, st: st * LOG2E, unguarded=True)
        if matches(ctx, *alt):
            yield Cause("l:raw_scores", (
                f"l adds the scores themselves, before they are exponentiated (the output matches l = sum of "
                f"s · scale · log2 e, rescaled like l, with key tiles of {tile}; a masked key's -INFINITY makes "
                "it -inf): add P to l after s = exp2(s - m_new) has turned the score into P."))
        if matches(ctx, *streamed(s, v, tile, rescale_l="after", visible=visible)):
            yield Cause("rescale:l_after_sum", (
                f"l is rescaled after this tile's P is added, l = (l + rowsum(P)) · alpha, not before "
                f"(the output matches that, with key tiles of {tile}): the new tile's sum is already "
                f"against m_new, so l = l · alpha + rowsum(P). On a row's first tile alpha = 0, which "
                f"wipes that tile's sum."))
        if n_k <= tile:
            continue
        if matches(ctx, o=streamed(s, v, tile, rescale_acc=False, visible=visible)[0]):
            yield Cause("rescale:acc", (
                f"the accumulator acc is not rescaled when the running max grows (the output matches "
                f"that bug with key tiles of {tile}). When m grows to m_new, multiply acc (and l) by "
                f"exp(m_old - m_new) before adding the new tile's P·V. Rows spanning only one key tile "
                f"are right, which is why small cases pass."))
        if matches(ctx, o=streamed(s, v, tile, rescale_acc=False, rescale_l=False, visible=visible)[0]):
            yield Cause("rescale:acc_and_l", (
                f"neither acc nor l is rescaled when the running max grows (the output matches that bug "
                f"with key tiles of {tile}). When m grows to m_new, multiply acc and l by "
                f"exp(m_old - m_new) before adding the new tile."))
    # Keys past n_k zero-filled but not masked: score 0, value 0, still counted in l. One such key is
    # a bound one off (j > n_k where j >= n_k is due); a tile's worth is a missing bounds mask.
    # The one key past the end is in a visited tile only when n_k does not fill its last tile.
    for tile, pad in [(None, 1)] * any(n_k % t for t in tiles(ctx, "BLOCK_N")) + \
            [(t, -n_k % t) for t in tiles(ctx, "BLOCK_N") if -n_k % t > 1]:
        s_pad = np.concatenate([np.where(visible, s, -np.inf) if visible is not None else s,
                                np.zeros(s.shape[:-1] + (pad,))], axis=-1)
        v_pad = np.concatenate([v, np.zeros(v.shape[:-2] + (pad, v.shape[-1]))], axis=-2)
        o_alt, lse_alt = attend(s_pad, v_pad)
        if not (matches(ctx, o=o_alt) or matches(ctx, lse=lse_alt)):
            continue
        if tile is None:
            yield Cause("keys_end:+1", (
                f"key n_k = {n_k}, one past the last key, is counted (the output matches one extra key "
                f"of score 0 and value 0: zero-filled but not masked). The bounds mask is one off: "
                f"s = -INFINITY where j >= n_k (not j > n_k)."))
        else:
            yield Cause("bounds_mask:missing", (
                f"keys past n_k = {n_k} in the last, partial key tile are counted (the output matches "
                f"{pad} extra keys of score 0, as with tiles of {tile}). Give them score -INFINITY "
                f"(the bounds mask: s = -INFINITY where j >= n_k), so that exp(s - m) = 0."))
    # The bounds mask tests the key's column within its tile, not kv_start + column, against n_k:
    # right while every key fits in the first tile, no mask at all from the second tile on.
    for tile in tiles(ctx, "BLOCK_N"):
        pad = -n_k % tile if n_k > tile else 0
        s_pad = np.concatenate([np.where(visible, s, -np.inf) if visible is not None else s,
                                np.zeros(s.shape[:-1] + (pad,))], axis=-1)
        v_pad = np.concatenate([v, np.zeros(v.shape[:-2] + (pad, v.shape[-1]))], axis=-2)
        if matches(ctx, *attend(s_pad, v_pad)):
            yield Cause("bounds_mask:tile_relative", (
                f"the bounds mask compares the key's column within its tile with n_k = {n_k}, not the key's "
                f"index kv_start + column (the output matches that, with tiles of {tile}): it is right "
                f"while every key fits in the first tile, and masks nothing in the last, partial tile of a "
                f"longer row. Mask s = -INFINITY where kv_start + column >= n_k."))


def key_range_causes(ctx, s, v, visible=None):
    """The loop over keys with its start or end off: the first or last key, or the last key tile,
    left out."""
    n_k = s.shape[-1]
    base = np.ones(s.shape[-2:], bool) if visible is None else np.asarray(visible, bool)
    j = np.arange(n_k)
    families = [("keys_end:-1", j < n_k - 1,
                 f"the last key, j = n_k - 1 = {n_k - 1}, is never visited (the output matches a loop that "
                 "stops one key short): the loop runs while j < n_k, and a tile's bound is min(BLOCK_N, "
                 "n_k - kv_start)."),
                ("keys_start:+1", j >= 1,
                 "the first key, j = 0, is never visited (the output matches a loop that starts at 1): "
                 "start the loop over keys at 0.")]
    for tile in tiles(ctx, "BLOCK_N"):
        if n_k > 0:     # with n_k <= tile, one tile short is no tile at all
            last = (n_k - 1) // tile * tile
            families.append(("key_tiles_end:-1", j < last,
                             f"the last key tile (keys {last} to {n_k - 1}, with tiles of {tile}) is never "
                             "visited (the output matches a loop over key tiles one tile short): the number "
                             "of key tiles is ceil(n_k / BLOCK_N) = (n_k + BLOCK_N - 1) / BLOCK_N."))
        if n_k % tile:
            whole = n_k // tile * tile
            families.append(("key_tiles_end:floor", j < whole,
                             f"the last, partial key tile (keys {whole} to {n_k - 1}, with tiles of {tile}) is "
                             "never visited (the output matches a loop over whole tiles only, such as "
                             "kv_start + BLOCK_N <= n_k): loop while kv_start < n_k, and mask the keys "
                             "past n_k inside the last tile."))
    for cid, keep, text in families:
        vis = base & keep[None, :]
        if vis.all():
            continue
        o_alt, lse_alt = attend(s, v, vis)
        # A row the loop leaves with no key at all: o = 0 with a guarded 1/l, 0/0 = NaN without one.
        empty = ~vis.any(axis=-1)
        o_nan = np.where(empty[..., None], np.nan, o_alt) if empty.any() else None
        if matches(ctx, o=o_alt, lse=lse_alt) or matches(ctx, o=o_alt) or \
                (o_nan is not None and matches(ctx, o=o_nan, lse=lse_alt)):
            yield Cause(cid, text)


def exponent_causes(ctx, s, v, visible=None):
    """exp(m - s) for exp(s - m): the weights are softmax(-s)."""
    neg = np.where(visible, -s, -np.inf) if visible is not None else -s
    o_alt, _ = attend(neg, v)
    if matches(ctx, o=o_alt):
        yield Cause("exp:sign", (
            "the exponent's sign is flipped: the output matches weights exp(m - s) (the smallest score "
            "weighs most). The softmax weight is exp(s - m) <= 1, with m the row's max."))


def feature_causes(ctx, visible=None):
    """The loop over features of q · k one short at either end: the last or the first feature left
    out of every score."""
    d = np.shape(ctx.inputs["q"])[-1]
    if d < 2:
        return
    for cid, keep, text in (("features_end:-1", slice(0, d - 1), f"the last feature, c = d - 1 = {d - 1}"),
                            ("features_start:+1", slice(1, d), "the first feature, c = 0")):
        alt = dict(ctx.inputs, q=np.asarray(ctx.inputs["q"])[..., keep], k=np.asarray(ctx.inputs["k"])[..., keep])
        s_alt, _ = scores(alt, scale=ctx.inputs.get("scale"))
        if matches(ctx, *attend(s_alt, scores(ctx.inputs)[1], visible)):
            yield Cause(cid, (
                f"every score leaves out {text} (the output matches q · k summed over the other "
                f"features): the dot product runs over c = 0 .. d - 1, c < d."))


def operand_causes(ctx, visible=None):
    """One input read in another's place: the values read from k, or the keys from v."""
    for cid, alt, text in (
            ("operand:v_is_k", dict(ctx.inputs, v=ctx.inputs["k"]),
             "the values are read from k (the output matches o = softmax(S) · K): the V loads read "
             "v, with the same index as K's."),
            ("operand:k_is_v", dict(ctx.inputs, k=ctx.inputs["v"]),
             "the keys are read from v (the output matches scores q · v): the K loads read k.")):
        if matches(ctx, *attend(*scores(alt), visible)):
            yield Cause(cid, text)


def output_causes(ctx, s, v, visible=None):
    """Bugs of the last step: 1/l, lse's units and terms."""
    o_ref, lse_ref = ctx.ref["o"], ctx.ref["lse"]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        s_vis = np.where(visible, s, -np.inf) if visible is not None else s
        row_max = s_vis.max(axis=-1, initial=-np.inf)     # -inf for a row of no keys at all
        l_row = np.exp(lse_ref - np.where(np.isfinite(row_max), row_max, 0.0))
        if matches(ctx, o=np.where(np.isfinite(lse_ref)[..., None], o_ref * l_row[..., None], 0.0)):
            yield Cause("o:no_division", (
                "o is missing the final division by l: each row is the right answer times its own "
                "softmax sum l (the output matches that). Write o = acc · (1/l) once, after the last key "
                "tile."))
        if np.isfinite(row_max).any() and (row_max[np.isfinite(row_max)] < -80).any():
            # The running max seeded at 0: exact in float64, but in float32 exp(s - 0) underflows to 0
            # for s below -103, and a row whose scores all lie there gets l = 0 and o = 0/0.
            m0 = np.maximum(np.where(np.isfinite(row_max), row_max, 0.0), 0.0).astype(np.float32)
            e = np.exp((s_vis.astype(np.float32) - m0[..., None])).astype(np.float32)
            l0 = e.sum(axis=-1, dtype=np.float32)
            o_alt = (e.astype(np.float64) @ v) / l0[..., None]
            if matches(ctx, o=o_alt):
                yield Cause("init:max_zero", (
                    "the running max starts at 0 instead of -INFINITY (the output matches that in float32): "
                    "a row whose scores all lie below about -103 then has exp(s - 0) = 0 for every key, "
                    "l = 0 and o = 0/0. Seed m = -INFINITY, so the first score becomes the max."))
        # o = acc / inv_l: the division turned into a product, o · l².
        finite = np.isfinite(lse_ref)[..., None]
        if matches(ctx, o=np.where(finite, o_ref * (l_row ** 2)[..., None], 0.0)):
            yield Cause("o:divides_by_inv_l", (
                "o is acc divided by 1/l, acc · l, where acc · (1/l) is due (the output matches o · l² per "
                "row): o = acc · inv_l with inv_l = 1/l."))
        # P normalised without the max: exp(s) / l with l summed against the max (float32: exp
        # overflows past 88.7).
        with np.errstate(over="ignore", invalid="ignore"):
            p_raw = np.exp(s_vis.astype(np.float32)) / np.where(l_row > 0, l_row, 1.0)[..., None].astype(np.float32)
            o_raw = np.where(finite, (p_raw @ np.asarray(v, np.float32)).astype(np.float64), 0.0)
        if matches(ctx, o=o_raw):
            yield Cause("p:unshifted", (
                "P is exp(s) / l, without the max (the output matches o · exp(m) per row): l was summed "
                "as exp(s - m), so P = exp(s - m) / l."))
        # The sum seeded at 1 instead of 0 (where no rescale wipes it: a softmax over whole rows).
        l_one = l_row + 1.0
        if matches(ctx, o=np.where(np.isfinite(lse_ref)[..., None], o_ref * (l_row / l_one)[..., None], 0.0),
                   lse=np.where(np.isfinite(lse_ref), row_max + np.log(l_one), lse_ref)):
            yield Cause("init:l_one", (
                "the softmax's sum l starts at 1 instead of 0 (the output matches o = P V / (1 + l) and "
                "lse = m + log(1 + l)): every row weighs one phantom key. Seed l = 0."))
        if matches(ctx, lse=lse_ref / math.log(2.0)):
            yield Cause("lse:log2", (
                "lse is in log2 units (the output matches lse / ln 2: m + log2(l) with m from exp2 "
                "scores): multiply by ln(2), lse = (m + log2(l)) · ln 2, to get the natural-log "
                "log-sum-exp."))
        if matches(ctx, lse=lse_ref - row_max) or matches(ctx, lse=(lse_ref - row_max) / math.log(2.0)):
            yield Cause("lse:no_max", "lse is missing the running max (the output matches log(l) alone): "
                                      "lse = m + log(l), not log(l).")
        if matches(ctx, lse=2 * row_max - lse_ref):
            yield Cause("lse:log_inverse", LSE_LOG_INVERSE)
        # The sum without the max, l = Σ exp(s) (float32: it overflows past 88.7), while P = exp(s - m) / l
        # and lse = m + log(l).
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            s32 = s_vis.astype(np.float32)
            l_raw = np.exp(s32).sum(axis=-1, dtype=np.float32)
            m32 = np.where(np.isfinite(row_max), row_max, 0.0).astype(np.float32)
            p_alt = np.exp(s32 - m32[..., None]) / l_raw[..., None]       # inf where l underflowed to 0
            o_alt = np.where(finite, p_alt.astype(np.float64) @ v, 0.0)
            lse_alt = np.where(np.isfinite(lse_ref), row_max + np.log(l_raw.astype(np.float64)), lse_ref)
        if np.isfinite(row_max).any() and matches(ctx, o=o_alt, lse=lse_alt):
            yield Cause("l:unshifted", (
                "the sum l adds exp(s) without the max, while P = exp(s - m) / l and lse = m + log(l) use it "
                "(the output matches that: o is the right answer times exp(-m), lse is off by m, and "
                "exp(s) overflows to inf for scores past 88.7). Sum the same terms as P: l += exp(s - m)."))
        if matches(ctx, lse=row_max) or matches(ctx, lse=row_max / math.log(2.0)):
            yield Cause("lse:max_only", "lse holds only the max m (the output matches it): lse = m + log(l).")
        yield from lse_units_causes(ctx, row_max, l_row)
        # The max left in log2 units while log(l) is natural: (m + log2 l) · ln 2 without its
        # parentheses, m + log2(l) · ln 2.
        for alt, what in ((row_max / math.log(2.0) + np.log(l_row), "m + log2(l) · ln 2, m in log2 units"),):
            if matches(ctx, lse=alt):
                yield Cause("lse:max_units", (
                    f"lse adds the max in log2 units to log(l) in natural-log units (the output matches "
                    f"{what}, as (m + log2(l)) · ln 2 without its parentheses would give): convert the "
                    "whole sum, lse = (m + log2(l)) · ln 2."))


def lse_units_causes(ctx, row_max, l_row):
    """lse = m + log(l) with the log of l in other units than the max m (row_max: the rows' max in
    natural-log units; l_row: their sum of exp(s - m))."""
    with np.errstate(invalid="ignore", divide="ignore"):
        alts = ((row_max + np.log2(l_row), "m + log2(l), with m in natural-log units"),
                (row_max + np.log(l_row) * math.log(2.0), "(m + ln(l)) · ln 2, with m in log2 units"))
    for alt, what in alts:
        if matches(ctx, lse=alt):
            yield Cause("lse:l_units", (
                f"lse takes log(l) in other units than m (the output matches {what}): with exp2 "
                "scores lse = (m + log2(l)) · ln 2, with expf lse = m + log(l)."))


LSE_LOG_INVERSE = ("lse takes the log of 1/l, m + log(1/l) = m - log(l) (the output matches that): lse = m + "
                   "log(l), the log of the sum itself.")

BATCH_READS = (("q",), ("k",), ("v",), ("k", "v"), ("q", "k", "v"))


def batch_causes(ctx, visible=None):
    """An index that drops the batch offset: every batch entry reads batch 0's q, k or v."""
    if ctx.params.get("B", 1) < 2:
        return
    for names in BATCH_READS:
        alt = dict(ctx.inputs)
        for x in names:
            alt[x] = np.broadcast_to(ctx.inputs[x][:1], ctx.inputs[x].shape)
        s, v = scores(alt)
        if matches(ctx, *attend(s, v, visible)):
            which = " and ".join(names)
            yield Cause(f"index_drop:batch:{''.join(names)}", (
                f"every batch entry reads batch 0's {which} (the output matches that): the index of "
                f"{which} is missing its batch offset (the b · H · N · d term, b · Hkv · N · d for k and "
                "v). Batch entry b = 0 is right, which is why the cases with B = 1 pass."))


def q_head_maps(H: int, Hkv: int):
    """With GQA, the ways of reading query head h's q at another head's index: (cause id, the head
    read for each h, what it says). Query head h = h_kv · G + g (G = H / Hkv) has its own q."""
    group = H // Hkv
    return (
        ("gqa:q_kv_head", [h // group for h in range(H)],
         "query head h reads q at the kv head's index, h / (H / Hkv) (the output matches that): "
         "q's head is h itself, only k and v are shared."),
        ("gqa:q_first_of_group", [h // group * group for h in range(H)],
         "every query head of a group reads the group's first query (the output matches that): "
         "each query head h has its own q."),
        ("gqa:q_interleaved", [h % group * Hkv + h // group for h in range(H)],
         f"query head h_kv · G + g reads q of head h_kv + g · Hkv (the output matches that; G = H / Hkv = "
         f"{group}, Hkv = {Hkv}): the G query heads of kv head h_kv are consecutive, h = h_kv · G + g."))


def head_causes(ctx, visible=None):
    """An index that drops the head offset: every head reads head 0's q, or kv head 0's k and v; with
    GQA, q read at another head's index (q_head_maps)."""
    if ctx.params.get("H", 1) < 2:
        return
    q = np.asarray(ctx.inputs["q"])
    H, Hkv = q.shape[1], np.shape(ctx.inputs["k"])[1]
    if H != Hkv:
        for cid, heads, text in q_head_maps(H, Hkv):
            if matches(ctx, *attend(*scores(dict(ctx.inputs, q=q[:, heads])), visible)):
                yield Cause(cid, text)
        # k and v (or one of them) of slab b · H + h or b · Hkv + h, the query head's index into the
        # B · Hkv kv heads (zeros past the last: a TMA box outside the tensor reads as zeros).
        B = q.shape[0]
        own = [R.kv_head_of(h, H, Hkv) for h in range(H)]
        found = {}
        for formula, stride in (("b · H + h", H), ("b · Hkv + h", Hkv)):
            slabs = np.arange(B)[:, None] * stride + np.arange(H)[None, :]
            read = {}
            for x in ("k", "v"):
                flat = np.asarray(ctx.inputs[x], np.float64).reshape((B * Hkv,) + np.shape(ctx.inputs[x])[2:])
                flat = np.concatenate([flat, np.zeros((max(int(slabs.max()) + 1 - B * Hkv, 0),) + flat.shape[1:])])
                read[x] = flat[slabs]
            for names in (("k", "v"), ("k",), ("v",)):
                # Both expanded to the H query heads, the one read right through its kv head.
                alt = {x: read[x] if x in names else np.asarray(ctx.inputs[x], np.float64)[:, own] for x in ("k", "v")}
                if matches(ctx, *attend(*scores(dict(ctx.inputs, **alt)), visible)):
                    found.setdefault(names, []).append(formula)
        for names, formulas in found.items():
            which = " and ".join(names)
            slab = " or ".join(formulas) + (" (with B = 1 they are the same)" if len(formulas) > 1 else "")
            right = "" if len(names) == 2 else f", and {'v' if names == ('k',) else 'k'} right"
            yield Cause(f"gqa:{''.join(names)}_slab_of_query_head", (
                f"query head h of batch b reads {which} of kv slab {slab}, with the query head's index h, "
                f"where b · Hkv + h / (H / Hkv) is due (the output matches that; H = {H}, Hkv = {Hkv}, the "
                f"slabs past the last kv head read as zeros{right}): {which} {'have' if len(names) == 2 else 'has'} "
                "Hkv heads per batch, one per group of H / Hkv query heads."))
    for names in (("q",), ("k", "v")):
        alt = dict(ctx.inputs)
        for x in names:
            alt[x] = np.broadcast_to(ctx.inputs[x][:, :1], ctx.inputs[x].shape)
        s, v = scores(alt)
        if matches(ctx, *attend(s, v, visible)):
            which = " and ".join(names)
            yield Cause(f"index_drop:head:{''.join(names)}", (
                f"every head reads head 0's {which} (the output matches that): the index of {which} is "
                "missing its head offset (h · N · d, h_kv · N · d for k and v)."))


def restrided(x, row_stride: int, slab_rows: int | None = None) -> np.ndarray:
    """x [B, H, N, d] as a kernel reads it with rows row_stride elements apart (d is right) from
    each head's start, the heads slab_rows rows apart (N is right): element (j, c) of head bh at
    bh · slab_rows · d + j · row_stride + c. Reads past the array find 0 (the emulator faults
    there first)."""
    x = np.asarray(x, np.float64)
    B, H, N, d = x.shape
    slab = (N if slab_rows is None else slab_rows) * d
    idx = (np.arange(B * H).reshape(B, H)[..., None, None] * slab
           + np.arange(N)[:, None] * row_stride + np.arange(d)[None, :])
    flat = np.concatenate([x.reshape(-1), np.zeros(max(int(idx.max(initial=-1)) + 1 - x.size, 0))])
    return flat[idx]


def stride_causes(ctx, visible=None):
    """q, k or v read with the row stride 1 (x[j + c]) instead of d (x[j · d + c]), or with its heads
    the other length's rows apart (n_q for k and v, n_k for q)."""
    for name in ("q", "k", "v"):
        alt = dict(ctx.inputs)
        alt[name] = restrided(ctx.inputs[name], 1)
        if matches(ctx, *attend(*scores(alt), visible)):
            yield Cause(f"index_stride:{name}:1", (
                f"{name} is read with rows 1 element apart, {name}[j + c], instead of d apart (the output "
                f"matches that): row j of {name} starts at j · d, element c of it is {name}[j · d + c]."))
    n_q, n_k = np.shape(ctx.inputs["q"])[-2], np.shape(ctx.inputs["k"])[-2]
    if n_q == n_k:
        return
    for names, rows, own, other in ((("q",), n_k, "n_q", "n_k"), (("k",), n_q, "n_k", "n_q"),
                                    (("v",), n_q, "n_k", "n_q"), (("k", "v"), n_q, "n_k", "n_q")):
        alt = dict(ctx.inputs)
        for x in names:
            d = np.shape(ctx.inputs[x])[-1]
            alt[x] = restrided(ctx.inputs[x], d, rows)
        if matches(ctx, *attend(*scores(alt), visible)):
            which = " and ".join(names)
            yield Cause(f"index_slab:{''.join(names)}:{other}", (
                f"the heads of {which} are found {other} rows apart, not {own} (the output matches that): "
                f"head (b, h) of {which} starts at ((b · H + h) · {own} + j) · d, with {which}'s own length "
                f"{own}. Batch 0's first head is right, which is why the cases with one head pass."))


def exp2_shift_in_other_units(t, v, visible=None, dtype=None):
    """A kernel's softmax with exp2 whose running max m is in log2 units (the max of t · log2(e)) but
    whose P = exp2(t - m) takes the scores t in natural units, in float32 as the kernel runs it: the
    weights are softmax(t · ln 2) until exp2 underflows or overflows, which the shift no longer
    prevents. With `dtype` (06), the second product reads P rounded to it, where l sums P itself."""
    t = np.where(visible, t, -np.inf) if visible is not None else np.asarray(t, np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = (t * LOG2E).max(axis=-1, initial=-np.inf)
        m = np.where(np.isfinite(m), m, 0.0)
        p = np.exp2((t - m[..., None]).astype(np.float32))
        l = p.sum(axis=-1, dtype=np.float32)
        p_v = p.astype(np.float64) if dtype is None else lowp.rounded(p, dtype)
        acc = (p_v @ v).astype(np.float32)
        o = np.where(l[..., None] > 0, acc / np.where(l > 0, l, 1)[..., None], 0.0)
        lse = np.where(l > 0, (m + np.log2(np.where(l > 0, l, 1).astype(np.float64))) * math.log(2.0), -np.inf)
    return o.astype(np.float64), lse


def setup_causes(ctx, visible=None):
    """Bugs of the indexing: the batch and head offsets, the kv head of a query head, the scale."""
    p = ctx.params
    yield from batch_causes(ctx, visible)
    yield from head_causes(ctx, visible)
    yield from stride_causes(ctx, visible)
    if p["H"] != p["Hkv"]:
        for name, mapping in (("h % Hkv", lambda h, H, Hkv: h % Hkv), ("h", lambda h, H, Hkv: min(h, Hkv - 1)),
                              ("0", lambda h, H, Hkv: 0)):
            s_wrong, v_wrong = scores(ctx.inputs, kv_head=mapping)
            s_right, v_right = scores(ctx.inputs)
            # k and v are indexed apart (module 00 reads them in two kernels): either may be the wrong one.
            for reads, s, v in (("", s_wrong, v_wrong), (":k", s_wrong, v_right), (":v", s_right, v_wrong)):
                if matches(ctx, *attend(s, v, visible)):
                    which = {"": "k and v", ":k": "k (v's kv head is right)", ":v": "v (k's kv head is right)"}[reads]
                    yield Cause(f"gqa:{name.replace(' ', '')}{reads}", (
                        f"query head h reads the wrong kv head of {which}: {name} (the output matches it). "
                        f"With grouped-query attention, H / Hkv consecutive query heads share one kv head: "
                        f"h_kv = h / (H / Hkv)."))
    d, given = p["d"], ctx.inputs["scale"]
    wrong = [("scale:none", "no scale", 1.0), ("scale:twice", "scale applied twice", given ** 2),
             ("scale:1/d", "1/d instead of 1/sqrt(d)", 1.0 / d),
             ("scale:inverse", "the scores divided by the scale, 1/scale", 1.0 / given),
             ("scale:exp2_without_log2e", "scale · ln 2: scores scaled by scale alone, then exponentiated "
              "with exp2, which needs scale · log2(e)", given * math.log(2.0)),
             ("scale:exp_with_log2e", "scale · log2(e): scores scaled for exp2, then exponentiated with "
              "exp, which needs scale alone", given / math.log(2.0))]
    if abs(given - 1.0 / math.sqrt(d)) > 1e-6 * given:
        wrong.insert(0, ("scale:ignored", "", 1.0 / math.sqrt(d)))
    for cid, name, sc in wrong:
        s, v = scores(ctx.inputs, scale=sc)
        if matches(ctx, *attend(s, v, visible)) or (
                cid == "scale:exp2_without_log2e" and matches(ctx, *exp2_shift_in_other_units(s / math.log(2.0), v, visible, p.get("dtype")))):
            if cid == "scale:ignored":
                yield Cause(cid, (
                    f"the kernel ignores its scale argument: the output matches scale = 1/sqrt(d) = "
                    f"{1 / math.sqrt(d):.4g}, but this case passes scale = {given:g}. Use the scale the "
                    "function receives (1/sqrt(d) is only its usual value)."))
            else:
                yield Cause(cid, (f"the scores use the wrong scale ({name}; the output matches it): "
                                  f"s = scale · q·k, with the scale the function receives (here {given:g})."))



# ---- causal masks (module 03) ----------------------------------------------------------------

def visible_where(n_q, n_k, limit):
    """[n_q, n_k] booleans: key j visible to query i iff j < limit(i) (limit an array over i)."""
    return np.arange(n_k)[None, :] < np.asarray(limit)[:, None]


def tile_limits(n_q, n_k, block_m, block_n, row_of_tile, cap=None):
    """One past the last key the loop over key tiles reaches, per query row, when a query tile's
    loop ends at the tile holding key `row_of_tile(first, last) + offset` (clamped to `cap`, n_k
    unless a bug clamps it to something else)."""
    offset = n_k - n_q
    i = np.arange(n_q)
    first = (i // block_m) * block_m
    last = np.minimum(first + block_m, n_q) - 1
    kv_end = np.clip(row_of_tile(first, last) + offset + 1, 0, min(n_k, n_k if cap is None else cap))
    return np.minimum(-(-kv_end // block_n) * block_n, n_k)     # whole key tiles

def diagonal_tiles_masked(n_q, n_k, block_m, block_n, limit, straddle_row="first", straddle_offset=True,
                          test=None):
    """[n_q, n_k] visibility of a kernel that loops over the key tiles up to its query tile's
    kv_end = min(n_k, last + offset + 1) and applies its per-element test, j < limit(i), only in the
    tiles that straddle the diagonal or hold the last, partial key tile: the tiles below the
    diagonal are taken whole. A tile straddles the diagonal when its last key lies past what the
    query tile's first row sees (straddle_row="last": what its last row sees, a bug;
    straddle_offset=False: the test leaves out the offset Nk - Nq, another; straddle_row="last_tile":
    only the query tile's last visited key tile is tested, a third). test(i, j): the per-element
    test's visible keys, where j < limit(i) is not the test."""
    offset = n_k - n_q
    i, j = np.arange(n_q)[:, None], np.arange(n_k)[None, :]
    first = (i // block_m) * block_m
    last = np.minimum(first + block_m, n_q) - 1
    kv_end = np.clip(last + offset + 1, 0, n_k)
    tile = (j // block_n) * block_n
    visited = tile < kv_end
    row = first if straddle_row == "first" else last
    if straddle_row == "last_tile":
        tested = (tile + block_n >= kv_end) | (tile + block_n > n_k)
    else:
        tested = (tile + block_n - 1 > row + (offset if straddle_offset else 0)) | (tile + block_n > n_k)
    seen = test(i, j) if test is not None else j < np.asarray(limit(np.arange(n_q)))[:, None]
    return visited & np.where(tested, seen, True)


def mask_causes(ctx, s, v):
    """The causal mask and the causal loop bounds (modules 03, 06)."""
    n_q, n_k = ctx.params["Nq"], ctx.params["Nk"]
    offset = n_k - n_q
    i = np.arange(n_q)
    if n_q != n_k and matches(ctx, *attend(s, v, visible_where(n_q, n_k, i + 1))):
        yield Cause("mask:top_left", (
            f"the causal mask is aligned top-left (j <= i; the output matches it). It must be aligned "
            f"bottom-right: query i sees key j iff j <= i + (Nk - Nq), here i + {offset}. The two agree "
            "only when Nq == Nk, which is why the square cases pass."))
    flipped = [i - offset + 1] + [np.minimum(i - offset + 1, tile_limits(n_q, n_k, bm, bn, lambda f, last: last))
                                  for bm in tiles(ctx, "BLOCK_M") for bn in tiles(ctx, "BLOCK_N")]
    shown = [visible_where(n_q, n_k, np.maximum(lim, 0)) for lim in flipped] + [
        diagonal_tiles_masked(n_q, n_k, bm, bn, lambda r: r - offset + 1)
        for bm in tiles(ctx, "BLOCK_M") for bn in tiles(ctx, "BLOCK_N")]
    if n_q != n_k and any(matches(ctx, *attend(s, v, vis)) for vis in shown):
        # The mask with its offset reversed, inside the key tiles a right loop bound visits.
        yield Cause("mask:offset_sign", (
            f"the causal offset has its sign reversed (the output matches j <= i - (Nk - Nq), here "
            f"i - {offset}): query i sees key j iff j <= i + (Nk - Nq)."))
    if matches(ctx, *attend(s, v, visible_where(n_q, n_k, i + offset))):
        yield Cause("mask:diagonal_excluded", (
            "the diagonal itself is masked (the output matches j < i + offset): query i must see key "
            "i + (Nk - Nq) too. The test is j <= i + offset (mask j > i + offset)."))
    if matches(ctx, *attend(s, v, visible_where(n_q, n_k, i + offset + 2))):
        yield Cause("mask:one_extra", (
            "each query sees one key too many (the output matches j <= i + offset + 1): mask "
            "j > i + offset, where offset = Nk - Nq (key i + offset + 1 is in the future)."))
    if matches(ctx, *attend(s, v)):
        yield Cause("mask:missing", "the causal mask is not applied at all: the output matches attention "
                                    "over every key. Mask s = -INFINITY where j > i + (Nk - Nq).")
    # Each thread's TM rows tested against its first row's limit (the test reads the thread's first
    # row, q_start + ty · TM, where its own row i is due), in the tiles it tests or in all.
    tm_config = kernel_config(getattr(ctx, "config", None), ctx.params).get("TM")
    for tm in [tm_config] if isinstance(tm_config, int) and tm_config > 1 else []:
        own_first = lambda r, tm=tm: r - r % tm + offset + 1                # noqa: E731
        shown = [visible_where(n_q, n_k, np.clip(own_first(i), 0, n_k))] + [
            diagonal_tiles_masked(n_q, n_k, bm, bn, own_first) for bm in tiles(ctx, "BLOCK_M") for bn in tiles(ctx, "BLOCK_N")]
        if any(matches(ctx, *attend(s, v, vis)) for vis in shown):
            yield Cause("mask:thread_first_row", (
                f"each thread's {tm} rows are masked with its first row's limit (the output matches row i "
                f"seeing only the keys j <= i0 + offset, i0 the first of its {tm} rows): the per-element test "
                "compares j with the row it is on, i = q_start + ty · TM + r, plus offset."))
    for bm in tiles(ctx, "BLOCK_M"):
        for bn in tiles(ctx, "BLOCK_N"):
            # Whole tiles up to the diagonal, with no per-element test inside the diagonal tiles.
            lim = tile_limits(n_q, n_k, bm, bn, lambda first, last: last)
            if matches(ctx, *attend(s, v, visible_where(n_q, n_k, lim))):
                sizes = (f"whole tiles of {bm} queries × {bn} keys" if bm < n_q or bn < n_k
                         else "the diagonal tile")
                yield Cause("mask:diagonal_tiles_unmasked", (
                    f"keys above the diagonal are counted inside the diagonal tiles (the output matches "
                    f"{sizes}, unmasked). Tiles that straddle the diagonal need the per-element test: "
                    f"s = -INFINITY where j > i + (Nk - Nq)."))
            # The per-element test with i and j exchanged (i > j + offset masked), and the test run
            # only in the query tile's last visited key tile.
            for cid, vis, what in (
                    ("mask:ij_swapped", diagonal_tiles_masked(n_q, n_k, bm, bn, None,
                                                              test=lambda i, j: (j < n_k) & (i <= j + offset)),
                     "the per-element test masks the keys where i > j + offset, i and j exchanged: it hides "
                     "the keys below the diagonal and lets the ones above it through. A key is hidden where "
                     "j > i + offset"),
                    ("mask:diagonal_test_last_tile", diagonal_tiles_masked(n_q, n_k, bm, bn, lambda r: r + offset + 1,
                                                                           straddle_row="last_tile"),
                     "the per-element test runs only in the query tile's last key tile, kv_start + BLOCK_N >= "
                     "kv_end, while more than one tile can straddle the diagonal (with BLOCK_M > BLOCK_N, or a "
                     "query tile's first and last rows apart): a tile needs the test when its last key lies "
                     "past what the query tile's first row sees, kv_start + BLOCK_N - 1 > q_start + offset")):
                if (getattr(ctx, "probe", None) or not np.array_equal(vis, R.causal_mask(n_q, n_k))) and \
                        matches(ctx, *attend(s, v, vis)):
                    yield Cause(cid, f"{what} (the output matches that, with tiles of {bm} queries × {bn} keys).")
            # The diagonal tiles told by the query tile's last row: some run without the test.
            vis = diagonal_tiles_masked(n_q, n_k, bm, bn, lambda r: r + offset + 1, straddle_row="last")
            if (getattr(ctx, "probe", None) or not np.array_equal(vis, R.causal_mask(n_q, n_k))) and \
                    matches(ctx, *attend(s, v, vis)):
                yield Cause("mask:diagonal_test_late", (
                    f"some key tiles that straddle the diagonal run without the per-element test, and "
                    f"their first rows see keys above the diagonal (the output matches tiles of {bm} "
                    f"queries × {bn} keys tested only where their last key lies past what their LAST row "
                    "sees: kv_start + BLOCK_N - 1 > q_last + offset gives that, and so can a test whose "
                    "positions are shifted, such as packed positions where the sequence's own are due). A "
                    "tile needs the test when its LAST key lies past what its FIRST row sees: "
                    "kv_start + BLOCK_N - 1 > q_start + offset, both counted from the sequence's start."))
            # The per-element test writing 0 where -INFINITY is due: in the tiles it runs in (the
            # diagonal ones and the last, partial one) the hidden keys score 0, the zero-filled
            # keys past Nk too (their v is 0).
            first = (i // bm) * bm
            last = np.minimum(first + bm, n_q) - 1
            end = -(-np.clip(last + offset + 1, 0, n_k) // bn) * bn        # visited, whole tiles
            width = int(end.max(initial=0))
            if width:
                jj = np.arange(width)
                tile = (jj // bn) * bn
                tested = (tile[None, :] + bn - 1 > first[:, None] + offset) | (tile[None, :] + bn > n_k)
                seen = (jj[None, :] < n_k) & (jj[None, :] <= i[:, None] + offset)
                s_pad = np.concatenate([s, np.zeros(s.shape[:-1] + (max(width - n_k, 0),))], axis=-1)[..., :width]
                v_pad = np.concatenate([v, np.zeros(v.shape[:-2] + (max(width - n_k, 0), v.shape[-1]))], axis=-2)[..., :width, :]
                s_zero = np.where(seen, s_pad, np.where(tested & (jj[None, :] < end[:, None]), 0.0, -np.inf))
                if (s_zero != np.where(seen, s_pad, -np.inf)).any() and matches(ctx, *attend(s_zero, v_pad)):
                    yield Cause("mask:zero_not_inf", (
                        f"the masked scores are set to 0, not -INFINITY (the output matches that, with tiles of "
                        f"{bm} queries × {bn} keys: the hidden keys, and the zero-filled ones past Nk, weigh "
                        f"exp(0 - m) each): a masked score must be -INFINITY, so that exp(s - m) = 0."))
            # The guard for an empty state testing the tile's max, not m_new: a tile with no visible
            # key for a row that saw keys before scales its l and acc by exp(m) (o stays right).
            o_g, lse_g = np.zeros(np.shape(ctx.ref["o"])), np.zeros(np.shape(ctx.ref["lse"]))
            for q0 in range(0, n_q, bm):
                q1 = min(q0 + bm, n_q)
                kv = min(n_k, -(-max(0, min(n_k, q1 - 1 + offset + 1)) // bn) * bn)
                if kv == 0:
                    o_g[..., q0:q1, :], lse_g[..., q0:q1] = 0.0, -np.inf
                    continue
                vis_t = visible_where(n_q, n_k, i + offset + 1)[q0:q1, :kv]
                o_g[..., q0:q1, :], lse_g[..., q0:q1] = streamed(s[..., q0:q1, :kv], v[..., :kv, :], bn,
                                                                 visible=vis_t, guard_tile=True)
            if matches(ctx, o=o_g, lse=lse_g):
                yield Cause("softmax:guard_tile_max", (
                    f"the guard for an empty state tests this tile's max, not the running one (the output "
                    f"matches m_use = 0 whenever a tile has no visible key, tiles of {bm} × {bn}): a row that "
                    "saw keys before then rescales l and acc by exp2(m - 0), and lse comes out off. Test "
                    "the new running max: m_use = (m_new == -INFINITY) ? 0 : m_new."))
            # The same test without the offset: with Nq > Nk, tiles the shifted diagonal crosses are
            # taken whole. The offset added with its sign reversed (q_start + Nq - Nk) takes nearly
            # the same tiles (blind batch 49), so the text says what the output shows, not which.
            vis = diagonal_tiles_masked(n_q, n_k, bm, bn, lambda r: r + offset + 1, straddle_offset=False)
            if offset and (getattr(ctx, "probe", None) or not np.array_equal(vis, R.causal_mask(n_q, n_k))) and \
                    matches(ctx, *attend(s, v, vis)):
                yield Cause("mask:diagonal_test_no_offset", (
                    f"some key tiles that straddle the diagonal run without the per-element test (the "
                    f"output matches tiles of {bm} queries × {bn} keys tested only when kv_start + "
                    f"BLOCK_N - 1 > q_start: the diagonal test does not shift q_start by the offset, "
                    f"here {offset}, or shifts it the wrong way). The diagonal is shifted by offset = "
                    f"Nk - Nq: a tile needs the test when kv_start + BLOCK_N - 1 > q_start + offset."))
            # The loop over key tiles bounded by the first row of the query tile instead of the last.
            lim = np.minimum(i + offset + 1, tile_limits(n_q, n_k, bm, bn, lambda first, last: first))
            if matches(ctx, *attend(s, v, visible_where(n_q, n_k, np.maximum(lim, 0)))):
                yield Cause("key_tiles_end:first_row", (
                    f"the loop over key tiles stops too early (the output matches a loop bounded by the "
                    f"first row of each query tile{f' of {bm}' if bm < n_q else ''}). The last row of "
                    "the query tile sees the most keys: kv_end = min(Nk, last_row + (Nk - Nq) + 1)."))
            # kv_end with the offset's sign flipped, q_last - offset + 1, or without the offset, q_last + 1
            # (the per-element test right): tile_limits adds offset + 1 to what each returns.
            for cid, last_key, ends in (("key_tiles_end:offset_sign", -2 * offset, "min(Nk, q_last - offset + 1), the offset's sign flipped"),
                                        ("key_tiles_end:no_offset", -offset, "min(Nk, q_last + 1), without the offset")):
                if not offset or (cid == "key_tiles_end:no_offset" and offset < 0):
                    continue
                lim = np.minimum(i + offset + 1, tile_limits(n_q, n_k, bm, bn, lambda first, last, x=last_key: last + x))
                if matches(ctx, *attend(s, v, visible_where(n_q, n_k, np.maximum(lim, 0)))):
                    yield Cause(cid, (
                        f"the loop over key tiles ends at kv_end = {ends} (the output matches it, with tiles "
                        f"of {bm} queries × {bn} keys): the last row of the tile sees keys up to q_last + "
                        "offset, offset = Nk - Nq, so kv_end = min(Nk, q_last + offset + 1)."))
            # kv_end from the last row of the query tile at the other end of the grid: q_last
            # counted forward from blockIdx.x while q_start counts the tiles backwards.
            n_tiles = -(-n_q // bm)
            lim = np.minimum(i + offset + 1, tile_limits(
                n_q, n_k, bm, bn, lambda first, last: np.minimum((n_tiles - first // bm) * bm, n_q) - 1))
            if n_tiles > 1 and matches(ctx, *attend(s, v, visible_where(n_q, n_k, np.maximum(lim, 0)))):
                yield Cause("key_tiles_end:mirrored_tile", (
                    f"each query tile's loop over key tiles ends where the tile at the other end of the grid "
                    f"should (the output matches kv_end computed from the last row of query tile "
                    f"gridDim.x - 1 - t, tiles of {bm} queries): q_last must come from this tile's own "
                    "q_start, q_last = min(q_start + BLOCK_M, n_q) - 1, whatever order the tiles are "
                    "numbered in."))
            # kv_end clamped to n_q instead of n_k: with Nq < Nk the tiles past Nq never run.
            if n_q < n_k:
                lim = np.minimum(i + offset + 1, tile_limits(n_q, n_k, bm, bn, lambda first, last: last, cap=n_q))
                if matches(ctx, *attend(s, v, visible_where(n_q, n_k, np.maximum(lim, 0)))):
                    yield Cause("key_tiles_end:n_q", (
                        f"the loop over key tiles is clamped to Nq = {n_q} instead of Nk = {n_k} (the output "
                        f"matches kv_end = min(Nq, q_last + offset + 1), tiles of {bn} keys): the keys run "
                        "to Nk, kv_end = min(Nk, q_last + (Nk - Nq) + 1)."))
            lim = np.minimum(i + offset + 1, tile_limits(n_q, n_k, bm, bn, lambda first, last: last - 1))
            if matches(ctx, *attend(s, v, visible_where(n_q, n_k, np.maximum(lim, 0)))):
                yield Cause("key_tiles_end:-1", (
                    "the loop over key tiles stops one key short (the output matches kv_end = last_row + "
                    "(Nk - Nq)): kv_end must be one past the last key the tile's last row sees, kv_end = "
                    "min(Nk, last_row + (Nk - Nq) + 1), the + 1 kept and the clamp at Nk, not Nk - 1 (the "
                    "last query tile's bound is Nk itself). Short by one, a key tile that starts at that last "
                    "key never runs."))
            # The loop over key tiles one whole tile short of where it should end.
            lim = np.minimum(i + offset + 1, np.maximum(tile_limits(n_q, n_k, bm, bn, lambda f, last: last) - bn, 0))
            if matches(ctx, *attend(s, v, visible_where(n_q, n_k, np.maximum(lim, 0)))):
                yield Cause("key_tiles_end:-tile", (
                    f"the loop over key tiles stops one tile early (the output matches a loop that never "
                    f"runs the tile holding the diagonal, with tiles of {bn} keys): the number of key "
                    f"tiles a query tile needs is ceil(kv_end / BLOCK_N), kv_end = min(Nk, last_row + "
                    f"(Nk - Nq) + 1)."))


def noncausal_mask_causes(ctx, s, v):
    """A call with causal = false that still masks j > i + (Nk - Nq): everywhere, or (a per-element
    test without its `causal &&`) only in the tiles that run that test, the last, partial key tile."""
    n_q, n_k = ctx.params["Nq"], ctx.params["Nk"]
    i, j = np.arange(n_q)[:, None], np.arange(n_k)[None, :]
    above = j > i + (n_k - n_q)
    shown = [(~above, "everywhere")]
    for bn in tiles(ctx, "BLOCK_N"):
        if n_k % bn or getattr(ctx, "probe", None):
            shown.append((~(above & (j >= n_k // bn * bn)),
                          f"in the last, partial key tile (tiles of {bn} keys), the one that runs the "
                          "per-element test"))
    for vis, where in shown:
        if matches(ctx, *attend(s, v, vis)):
            yield Cause("mask:causal_when_not_causal", (
                f"the causal mask is applied although causal is false (the output matches keys j > i + "
                f"(n_k - n_q) masked {where}): the per-element test must mask that only when causal "
                "is set, causal && j > i + offset."))
            return
    for bm in tiles(ctx, "BLOCK_M"):
        for bn in tiles(ctx, "BLOCK_N"):
            vis = visible_where(n_q, n_k, tile_limits(n_q, n_k, bm, bn, lambda first, last: last))
            if matches(ctx, *attend(s, v, vis)):     # (the truth where every key is visible: a probe asks)
                yield Cause("mask:causal_when_not_causal", (
                    f"the loop over key tiles ends at the causal bound although causal is false (the "
                    f"output matches a query tile of {bm} rows that runs only the key tiles of {bn} up "
                    f"to kv_end = min(n_k, last_row + (n_k - n_q) + 1), every key of those tiles "
                    f"visible): without causal, kv_end = n_k."))
                return
    if n_q < n_k:
        for bn in tiles(ctx, "BLOCK_N"):
            end = min(n_k, -(-n_q // bn) * bn)          # kv_end = n_q: whole tiles up to n_q
            vis = np.broadcast_to(np.arange(n_k)[None, :] < end, (n_q, n_k))
            if end < n_k and matches(ctx, *attend(s, v, vis)):
                yield Cause("key_tiles_end:n_q", (
                    f"the loop over key tiles ends at Nq = {n_q} instead of Nk = {n_k} (the output matches "
                    f"the key tiles of {bn} up to kv_end = n_q, every key of them visible): without causal, "
                    "kv_end = n_k."))
                return


def empty_row_causes(ctx):
    """Rows with no visible key (Nq > Nk): computed NaN there and everything else right."""
    n_q, n_k = ctx.params["Nq"], ctx.params["Nk"]
    if n_q <= n_k:
        return
    cut = n_q - n_k
    o, lse = np.asarray(ctx.out["o"], np.float64), np.asarray(ctx.out["lse"], np.float64)
    if any(np.any(getattr(ctx.cmp[n], "unwritten", False)) for n in ("o", "lse")):
        return                          # the grader's own NaN is not a NaN the kernel computed
    rest_ok = (rel(o[..., cut:, :], ctx.ref["o"][..., cut:, :]) < MATCH
               and rel(lse[..., cut:], ctx.ref["lse"][..., cut:]) < MATCH)
    if not rest_ok:
        return
    empty_o, empty_lse = o[..., :cut, :], lse[..., :cut]
    if np.isnan(empty_o).all(axis=-1).all() or np.isnan(empty_lse).all():
        yield Cause("empty_rows:nan", (
            f"the rows with no visible key, and only they, are NaN (Nq > Nk: the first Nq - Nk = {cut} rows "
            "see no key). Their running max stays -INFINITY: exponentiate against 0 instead "
            "(exp2(-inf - -inf) is NaN), keep l = 0, and write o = 0 and lse = -INFINITY (guard the final "
            "1/l)."))
    elif np.isfinite(empty_lse).all() and (empty_o == 0).all():
        yield Cause("empty_rows:finite_lse", (
            f"the rows with no visible key (the first Nq - Nk = {cut}) have a finite lse, and every other "
            "value is right: a row that sees no key has lse = -INFINITY (l = 0)."))



# ---- decode (modules 04, 05) -------------------------------------------------------------------

def row_errors(ctx) -> np.ndarray:
    """[B, H] booleans: where o or lse is wrong (NaN, Inf, -inf mismatch or over tolerance)."""
    o, lse = np.asarray(ctx.out["o"], np.float64), np.asarray(ctx.out["lse"], np.float64)
    ro, rl = ctx.ref["o"], ctx.ref["lse"]
    scale_o = max(np.abs(ro).max(), 1e-6) if ro.size else 1.0
    with np.errstate(invalid="ignore"):
        bad_o = ~(np.abs(o - ro) <= 1e-3 * scale_o).all(axis=-1)
        same_inf = (lse == rl)
        bad_l = ~(same_inf | (np.abs(lse - rl) <= 1e-3 * np.maximum(1.0, np.abs(np.where(np.isfinite(rl), rl, 0)))))
    return bad_o | bad_l


def close(got, want, tol=1e-3) -> bool:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not np.isfinite(got).all():
        return False
    return np.linalg.norm(got - want) <= tol * max(np.linalg.norm(want), 1e-12)



def decode_diagnose(ctx, kv_cache_fn):
    """Replays and observations shared by 04 and 05. kv_cache_fn(ctx, lens) -> the contiguous (k, v)
    [B, Hkv, L, d] holding at least the first lens[b] keys of each sequence, as the kernel can reach
    them (for 05: the pages gathered through block_table); lens defaults to the context lengths."""
    p = ctx.params
    lens = np.asarray(ctx.inputs["context_lens"])
    o = np.asarray(ctx.out["o"], np.float64)
    bad = row_errors(ctx)                             # [B, H]
    bad_seq = bad.any(axis=1)
    empty = lens == 0
    live = ~empty
    q, scale = ctx.inputs["q"], ctx.inputs["scale"]

    if empty.any() and bad_seq[empty].any() and not bad_seq[live].any():
        yield Seen(f"only the sequences with an empty context (context_lens[b] = 0, here b = "
                   f"{np.flatnonzero(empty).tolist()}) are wrong; the answer there is o = 0 and lse = -inf.")

    def attend_lens(alt_lens, q=q, scale=scale):
        k, v = kv_cache_fn(ctx, alt_lens)
        if k.shape[2] < int(np.max(alt_lens, initial=0)):
            return None
        return R.decode_attention(q, k, v, alt_lens, scale)

    # The scale argument ignored.
    d = q.shape[-1]
    if abs(scale - 1.0 / math.sqrt(d)) > 1e-6 * scale and live.any():
        alt = attend_lens(lens, scale=1.0 / math.sqrt(d))
        if alt is not None and matches(ctx, o=alt[0]):
            yield Cause("scale:ignored", (
                f"the kernel ignores its scale argument: the output matches scale = 1/sqrt(d) = "
                f"{1 / math.sqrt(d):.4g}, but this case passes scale = {scale:g}. Use the scale the "
                "function receives (1/sqrt(d) is only its usual value)."))

    # q read without its batch or head term.
    for cid, alt_q, what in (("index_drop:batch:q", np.broadcast_to(q[:1], q.shape), "batch entry 0's q"),
                             ("index_drop:head:q", np.broadcast_to(q[:, :1], q.shape), "head 0's q")):
        if alt_q.shape[0 if "batch" in cid else 1] < 2:
            continue
        alt = attend_lens(lens, q=np.ascontiguousarray(alt_q))
        if alt is not None and matches(ctx, o=alt[0]):
            yield Cause(cid, f"every row reads {what} (the output matches that): the index of q is missing "
                             f"its {'batch (b · H · d)' if 'batch' in cid else 'head (h · d)'} term.")

    # GQA: query head h reads another head's q.
    if p["H"] != p["Hkv"] and live.any():
        for cid, heads, text in q_head_maps(p["H"], p["Hkv"]):
            alt = attend_lens(lens, q=np.ascontiguousarray(q[:, heads]))
            if alt is not None and matches(ctx, o=alt[0], lse=alt[1]):
                yield Cause(cid, text)

    # One cache read in the other's place: the values from k_cache, or the keys from v_cache.
    if live.any():
        k, v = kv_cache_fn(ctx, lens)
        for cid, kk, vv, text in (("operand:v_is_k", k, k, "the values are read from k_cache (the output "
                                   "matches o = softmax(q · K) · K): the V loads read v_cache, at the K loads' index."),
                                  ("operand:k_is_v", v, v, "the keys are read from v_cache (the output matches "
                                   "scores q · V): the K loads read k_cache.")):
            if kk.shape[2] >= int(np.max(lens, initial=0)) and \
                    matches(ctx, *R.decode_attention(q, kk, vv, lens, scale)[:2]):
                yield Cause(cid, text)

    # GQA: the query heads read the wrong kv head, all in the same way.
    H, Hkv = p["H"], p["Hkv"]
    group = H // Hkv
    if H != Hkv and live.any():
        k, v = kv_cache_fn(ctx, lens)
        for name, mapping in (("h % Hkv", lambda h: h % Hkv), ("h", lambda h: min(h, Hkv - 1)), ("0", lambda h: 0)):
            heads = [mapping(h) for h in range(H)]
            # decode_attention maps query head h to kv head h // (H / Hkv): hand it one kv head per query head.
            alt = R.decode_attention(q, k[:, heads], v[:, heads], lens, scale)
            if matches(ctx, o=alt[0]):
                yield Cause(f"gqa:{name.replace(' ', '')}", (
                    f"query head h reads the wrong kv head ({name}; the output matches it). H / Hkv "
                    f"consecutive query heads share one kv head: h_kv = h / (H / Hkv) (here H = {H}, "
                    f"Hkv = {Hkv})."))
        if bad.any() and not bad[:, ::group].any():
            yield Seen(f"only the query heads that are not the first of their group are wrong (H = {H}, "
                       f"Hkv = {Hkv}, groups of {group}).")

    # The workspace row without its kv-head term: every kv head's block writes the rows of query
    # heads 0 .. group-1 (the last writer's stand); the other rows keep the poison, which the
    # combine copies into o and lse (an empty context writes o = 0 itself). Stated only for a
    # writer other than kv head 0, whose stand a grid missing its other kv heads leaves as well.
    gone = (np.arange(H) >= group)[None, :] & live[:, None]                   # [B, H]
    if gone.any() and np.array_equal(unwritten_mask(ctx, "lse"), gone) and \
            np.array_equal(unwritten_mask(ctx, "o").all(axis=-1), gone):
        kept = ~gone
        for kv in range(1, Hkv):
            src = np.where(np.arange(H) < group, kv * group + np.arange(H), np.arange(H))
            want = np.where(live[:, None], src[None, :], np.arange(H)[None, :])     # [B, H]
            b_i = np.arange(len(lens))[:, None]
            o_alt, lse_alt = ctx.ref["o"][b_i, want], ctx.ref["lse"][b_i, want]
            o_got = np.asarray(ctx.out["o"], np.float64)[kept]
            if rel(o_got, o_alt[kept]) < MATCH and rel(o_got, ctx.ref["o"][kept]) > 10 * MATCH and \
                    rel(np.asarray(ctx.out["lse"], np.float64)[kept], lse_alt[kept]) < MATCH:
                yield Cause("index_drop:kv_head:workspace", (
                    f"query heads 0 .. {group - 1} hold the answers of kv head {kv}'s group (heads "
                    f"{kv * group} .. {kv * group + group - 1}), and the other heads still hold the "
                    "grader's NaN, copied from workspace rows nobody wrote (the output matches that): "
                    "the partial kernel's workspace row is missing its kv-head term, so every kv "
                    "head's block writes the first group's rows. Query head h = kv · (H / Hkv) + g "
                    "has row b · H + h."))
                break

    # The workspace row of query head kv · G + g written at kv + g · Hkv (the heads interleaved): the
    # combine then reads head h's row as the head written there, a permutation of the heads.
    if group > 1 and Hkv > 1 and live.any():
        src = np.array([(h % Hkv) * group + h // Hkv for h in range(H)])      # the head stored at row h
        if matches(ctx, o=ctx.ref["o"][:, src], lse=ctx.ref["lse"][:, src]):
            yield Cause("store:workspace_interleaved", (
                f"query head h holds the answer of head (h % Hkv) · {group} + h / Hkv (the output matches that; "
                f"H = {H}, Hkv = {Hkv}): the partial kernel writes head kv · GROUP + g to workspace row kv + g · "
                "Hkv, the heads interleaved. Its row is b · H + kv · GROUP + g, where the combine reads it."))

    # The workspace row of head kv · G + g written at kv + g (the group's offset without its factor G):
    # the groups' rows overlap, row h holding whichever head (kv, g) with kv + g = h wrote last, and
    # the rows from Hkv + G - 1 on are never written (the combine copies their poison).
    if group > 1 and live.any():
        writers = [[kv * group + g for kv in range(Hkv) for g in range(group) if kv + g == h] for h in range(H)]
        never = np.array([not w for w in writers])[None, :] & live[:, None]                  # [B, H]
        o_got, lse_got = np.asarray(ctx.out["o"], np.float64), np.asarray(ctx.out["lse"], np.float64)
        def held(b, h):
            """Row (b, h) holds the answer of one of its writers."""
            return any(rel(o_got[b, h], ctx.ref["o"][b, w]) < MATCH and rel(lse_got[b, h], ctx.ref["lse"][b, w]) < MATCH
                       for w in writers[h])
        if never.any() and np.array_equal(unwritten_mask(ctx, "lse"), never) and \
                all(held(b, h) for b in np.flatnonzero(live) for h in range(H) if writers[h]):
            yield Cause("store:workspace_row_kv_plus_g", (
                f"query heads from {Hkv + group - 1} on hold the grader's NaN, and each other head h holds the "
                f"answer of a head kv · {group} + g with kv + g = h (the output matches that; H = {H}, Hkv = "
                f"{Hkv}): the partial kernel writes head kv · GROUP + g to workspace row b · H + kv + g, so the "
                "groups' rows overlap and the last rows are never written. Its row is b · H + kv · GROUP + g."))

    # The workspace rows of the group's heads g > 0 never written (a store for g == 0 only): their o
    # and lse copy the poison through the combine; the first head of each group is right.
    others = (np.arange(H) % group != 0)[None, :] & live[:, None]            # [B, H]
    if group > 1 and unwritten_as(ctx, {"o": np.broadcast_to(others[..., None], np.shape(ctx.out["o"])),
                                        "lse": others}):
        yield Cause("store:workspace_first_of_group", (
            f"o and lse hold the poison exactly on the query heads that are not the first of their group "
            f"(g > 0 of each kv head's H / Hkv = {group}), of every sequence with keys, and are right on the "
            "first (the output matches that): the partial kernel stores its workspace row (o_part or "
            "lse_part) for g == 0 only. Each of the group's heads has its own row, b · H + kv · GROUP + g."))

    # lse in log2 units, a key too many or too few.
    if live.any():
        if matches(ctx, lse=ctx.ref["lse"] / math.log(2.0)):
            yield Cause("lse:log2", (
                "lse is in log2 units: the output matches lse / ln 2. A split's partial lse is "
                "(m + log2(l)) · ln 2 when m comes from exp2 scores; without the factor ln 2 the "
                "combine weighs the splits wrongly and the final lse is off by 1/ln 2."))
        for delta, cid, what in ((1, "keys_end:+1", "one key too many: key context_lens[b], past the end of "
                                  "the context, is counted (a loop bound or guard with <= where < is due)"),
                                 (-1, "keys_end:-1", "one key too few: the last key of each context, "
                                  "context_lens[b] - 1, is left out (a bound one short)")):
            alt = attend_lens(np.where(live, lens + delta, 0))
            if alt is not None and matches(ctx, o=alt[0]):
                yield Cause(cid, f"each sequence attends to {what} (the output matches that).")

    yield from split_causes(ctx, kv_cache_fn)

    if p.get("num_splits", 1) > 1 and bad[live].all():
        yield Seen(f"every row with keys is wrong in a case that forces {p['num_splits']} splits.")
    elif bad_seq[live].any() and (~bad_seq & live).any():
        ok_max = int(lens[~bad_seq & live].max())
        bad_min = int(lens[bad_seq & live].min())
        if bad_min > ok_max:
            yield Seen(f"sequences with a context of at most {ok_max} key{'s' if ok_max != 1 else ''} are right, longer ones "
                       f"({bad_min} keys and up) are wrong.")


def split_words(chunk: int, lens) -> str:
    """How a message names the split size a replay used: none where one split holds every context."""
    return f"splits of {chunk} keys" if chunk < int(np.max(lens, initial=0)) else "each context in one split"


def split_sizes(ctx, L: int) -> list[int]:
    """The split lengths (keys per split) a launch may have picked for a cache of L keys."""
    forced = ctx.params.get("num_splits")
    counts = [forced] if forced else range(1, min(L, 64) + 1)
    return sorted({max(1, -(-L // n)) for n in counts}, reverse=True)


def split_causes(ctx, kv_cache_fn):
    """The combine's exponent sign, its lse without lse_max, and each split's end one key short."""
    lens = np.asarray(ctx.inputs["context_lens"])
    if not lens.any():
        return
    k, v = kv_cache_fn(ctx, lens)
    q, scale = ctx.inputs["q"], ctx.inputs["scale"]
    table = ctx.inputs.get("block_table")          # a paged cache's capacity: max_pages · page_size
    L = np.shape(table)[1] * ctx.inputs["k_pages"].shape[1] if table is not None else k.shape[2]
    finite_out = np.isfinite(ctx.out["o"]).all()
    # A passing case probes every split size, one split too: where a combine bug predicts the
    # right answer (one split, or a chunk that divides the context) it is not refuted there.
    probe = getattr(ctx, "probe", None)
    named = set()
    for chunk in split_sizes(ctx, L):
        o_part, lse_part = R.decode_partials(q, k, v, lens, chunk, scale)
        several = (np.isfinite(lse_part).sum(axis=-1) > 1).any()
        if (several or probe) and finite_out and "combine:sign" not in named:
            flipped = np.where(np.isfinite(lse_part), -lse_part, -np.inf)
            o_alt, _ = R.combine_partials(o_part, flipped)
            if matches(ctx, o=o_alt):
                named.add("combine:sign")
                yield Cause("combine:sign", (
                    f"the combine weighs the splits by exp(lse_max - lse_s), the exponent's sign flipped "
                    f"(the output matches it with {split_words(chunk, lens)}): split s's weight is "
                    "exp(lse_s - lse_max) <= 1, the largest split weighing 1."))
        # The combine's max taken wrongly, the weights exp(lse_s - max) then computed in float32: seeded
        # at 0, not -INFINITY (they underflow when every lse_s is far below 0, or overflow far above);
        # or from one split per lane (if (lane < used) lse_max = lse_s[lane]), not a loop over s = lane,
        # lane + 32, ..., so the splits from 32 on are left out of it.
        with np.errstate(invalid="ignore"):
            maxes = (("combine:max_zero", True, np.maximum(np.max(lse_part, axis=-1), 0.0), (
                         f"the combine's running lse_max starts at 0 instead of -INFINITY (the output matches "
                         f"that, with {split_words(chunk, lens)}): when every split's lse lies far below 0, "
                         "exp(lse_s - 0) underflows to 0 in float32 and the sum is 0; far above 0 it "
                         "overflows. Seed the max with -INFINITY, so that it is the largest lse_s.")),
                     ("combine:max_first_32", bool(np.isfinite(lse_part[..., 32:]).any() or probe),
                      np.max(lse_part[..., :32], axis=-1), None))
        for cid, applies, mx, text in maxes:
            alt = combine_max_of(o_part, lse_part, mx) if applies and cid not in named else None
            if alt is not None and matches(ctx, *alt):
                named.add(cid)
                if cid == "combine:max_zero" and not np.isfinite(alt[0][np.isfinite(ctx.ref["o"])]).any():
                    # 0/0 in every row: any running max seeded at 0 gives that when every score is far
                    # below 0, the partial kernel's (its warps' merge, say) as well as the combine's.
                    text = (f"a running max starts at 0 instead of -INFINITY (the output matches the "
                            f"combine's lse_max seeded at 0, with {split_words(chunk, lens)}, and so would a "
                            "max seeded at 0 in the partial kernel, such as its warps' merge: every row is "
                            "0/0 = NaN either way): where every score lies far below 0, exp(x - 0) "
                            "underflows to 0 in float32 and the sum is 0. Seed every running max with "
                            "-INFINITY, so that it is the largest of what it merges.")
                yield Cause(cid, text or max_prefix_text(ctx, o_part, lse_part, split_words(chunk, lens)))
        if "reduce:lse_max_lanes" not in named:
            # lse_max not the same on every lane: never reduced (each lane's own splits), or reduced
            # with __shfl_down_sync (lane l ends with the max of lanes l .. 31).
            how = [what for what, down in (("never reduced across the warp: each lane keeps the max of "
                                            "the splits it read (s = lane, lane + 32, ...)", False),
                                           ("reduced with __shfl_down_sync, which leaves lane l the max "
                                            "of lanes l .. 31 only", True))
                   if matches(ctx, *combine_lane_max(o_part, lse_part, shfl_down=down))]
            if how:
                named.add("reduce:lse_max_lanes")
                which = how[0] if len(how) == 1 else f"{how[0]}, or {how[1]} (this case cannot tell them apart)"
                yield Cause("reduce:lse_max_lanes", (
                    f"the combine's lse_max is not the same on every lane (the output matches lse_max "
                    f"{which}, with {split_words(chunk, lens)}): a lane whose lse_max is below its splits' "
                    "lse, -INFINITY where it read none, overflows exp(lse_s - lse_max), and its part of o "
                    "is inf / inf = NaN. Reduce lse_max with a __shfl_xor_sync butterfly, so that every "
                    "lane holds the max of all the splits."))
        if (several or probe) and "combine:exp2" not in named:
            # The weights exp2(lse_s - lse_max) of natural-log lse_s: base 2 where e is due.
            with np.errstate(invalid="ignore"):
                top = np.max(lse_part, axis=-1)
            o_alt, lse2 = R.combine_partials(o_part, lse_part * math.log(2.0))
            if matches(ctx, o=o_alt, lse=np.where(np.isfinite(top), lse2 + top * (1 - math.log(2.0)), -np.inf)):
                named.add("combine:exp2")
                yield Cause("combine:exp2", (
                    f"the combine weighs the splits by exp2(lse_s - lse_max), but each lse_s is a natural "
                    f"log (the output matches that, with {split_words(chunk, lens)}): the weight is "
                    "expf(lse_s - lse_max)."))
        used = lens // chunk
        if ((used * chunk != lens).any() or probe) and "split_count:floor" not in named:
            # The combine's count of used splits rounded down: a context's last, partial split is
            # left out, and a context shorter than one split counts none (o = 0, lse = -inf).
            kept = np.arange(lse_part.shape[-1])[None, None, :] < used[:, None, None]
            o_alt, lse_alt = R.combine_partials(np.where(kept[..., None], o_part, 0.0), np.where(kept, lse_part, -np.inf))
            if matches(ctx, o=o_alt, lse=lse_alt):
                named.add("split_count:floor")
                yield Cause("split_count:floor", (
                    f"the combine leaves out each context's last, partial split (the output matches "
                    f"used = context_lens[b] / chunk, rounded down, with {split_words(chunk, lens)}): a "
                    "context shorter than one split counts none. The splits that hold keys are "
                    "cdiv(context_lens[b], chunk)."))
        if (several or probe) and not {"combine:no_division", "combine:divides_by_used"} & named:
            # The combine's normaliser: o = sum_s w_s o_s without dividing by sum_s w_s, or divided by
            # the count of used splits instead (w_s = exp(lse_s - lse_max)).
            with np.errstate(invalid="ignore"):
                top = np.max(lse_part, axis=-1)
                w = np.where(np.isfinite(lse_part), np.exp(lse_part - np.where(np.isfinite(top), top, 0.0)[..., None]), 0.0)
            total = w.sum(axis=-1)
            used = np.maximum(-(-lens // chunk), 1)[:, None]
            for cid, factor, what in (("combine:no_division", total, "without dividing by the sum of the weights"),
                                      ("combine:divides_by_used", total / used,
                                       "divided by the number of splits that hold keys, not by the sum of the weights")):
                if matches(ctx, o=ctx.ref["o"] * factor[..., None]):
                    named.add(cid)
                    yield Cause(cid, (
                        f"the combine's o is sum_s w_s · o_s {what} (the output matches that, with "
                        f"{split_words(chunk, lens)}): w_s = exp(lse_s - lse_max), o = sum_s w_s · o_s / "
                        "sum_s w_s."))
        if (several or probe) and "combine:lse_no_max" not in named:
            with np.errstate(invalid="ignore"):
                top = np.max(lse_part, axis=-1)
            if matches(ctx, lse=np.where(np.isfinite(top), ctx.ref["lse"] - top, -np.inf)):
                named.add("combine:lse_no_max")
                yield Cause("combine:lse_no_max", (
                    f"the combined lse is missing lse_max (the output matches log(sum_s exp(lse_s - "
                    f"lse_max)) with {split_words(chunk, lens)}): lse = lse_max + log(sum)."))
        if (several or probe) and "lse:log2" not in named:
            o_alt, lse_alt = R.combine_partials(o_part, lse_part / math.log(2.0))
            if matches(ctx, o=o_alt, lse=lse_alt) or matches(ctx, o=o_alt):
                named.add("lse:log2")
                yield Cause("lse:log2", (
                    f"each split's lse is in log2 units (the output matches the combine of lse_s / ln 2, "
                    f"with {split_words(chunk, lens)}): a split's lse is (m + log2(l)) · ln 2 when m comes "
                    "from exp2 scores."))
        for from_buffer, step in itertools.product((False, True), (None,) + tiles(ctx, "KEYS_PER_STEP")):
            if "keys_end:+1" in named:
                break
            o_alt, lse_alt = _phantom_key_per_split(q, k, v, lens, chunk, scale, from_buffer, step)
            if matches(ctx, o=o_alt, lse=lse_alt) or matches(ctx, o=o_alt):
                named.add("keys_end:+1")
                what = ("the key the buffer holds there (the next split's first, or the padding past "
                        "the context)" if from_buffer else "score 0 and value 0")
                yield Cause("keys_end:+1", (
                    f"each split counts one key past its end, with {what} (the output matches that, "
                    f"with {split_words(chunk, lens)}): the mask is one off, s = -INFINITY where j >= end "
                    "(not j > end)."))
        if "split_end:-1" not in named and chunk > 1:
            # Each split's end one short: key start + chunk - 1 left out (end = min(start + chunk - 1,
            # len)), and with end = min(start + chunk, len) - 1 also a context's last key.
            for also_last in (False, True):
                alt_o = np.zeros_like(ctx.ref["o"])
                alt_lse = np.full(ctx.ref["lse"].shape, -np.inf)
                for b in range(len(lens)):
                    j = np.arange(int(lens[b]))
                    keep = j[(j % chunk != chunk - 1) & ~(also_last & (j == lens[b] - 1))]
                    if keep.size:
                        ob, lb = R.decode_attention(q[b:b + 1], k[b:b + 1, :, keep], v[b:b + 1, :, keep],
                                                    np.array([keep.size]), scale)
                        alt_o[b], alt_lse[b] = ob[0], lb[0]
                if matches(ctx, o=alt_o, lse=alt_lse):
                    named.add("split_end:-1")
                    yield Cause("split_end:-1", (
                        f"each split stops one key short (the output matches {split_words(chunk, lens)} whose "
                        "last key is left out): a split covers keys start <= j < end with end = "
                        "min(start + chunk, context_lens[b])."))
                    break
        if "o_part:no_division" not in named:
            # Each split's o_part stored without its division by l: acc relative to the split's max.
            heads = [R.kv_head_of(h, q.shape[1], k.shape[1]) for h in range(q.shape[1])]
            sc = scale * np.einsum("bhd,bhjd->bhj", np.asarray(q, np.float64), np.asarray(k, np.float64)[:, heads])
            m_s = np.full(lse_part.shape, -np.inf)
            for b in range(len(lens)):
                for sp, (lo, hi) in enumerate(R.split_ranges(int(lens[b]), chunk)):
                    m_s[b, :, sp] = sc[b, :, lo:hi].max(axis=-1)
            with np.errstate(invalid="ignore"):
                l_s = np.where(np.isfinite(lse_part), np.exp(lse_part - np.where(np.isfinite(m_s), m_s, 0.0)), 0.0)
            o_alt, lse_alt = R.combine_partials(o_part * l_s[..., None], lse_part)
            if matches(ctx, o=o_alt, lse=lse_alt):
                named.add("o_part:no_division")
                yield Cause("o_part:no_division", (
                    f"each split's o_part is stored without its division by l (the output matches the "
                    f"combine of acc itself, with {split_words(chunk, lens)}): a split writes its "
                    "normalised o_s = acc / l, and its lse_s, which the combine weighs."))
        if "split_end:max_len" not in named:
            # The last split's end clamped to the cache, min(start + chunk, max_len), not to the
            # context: it reads the cache rows past the context up to its chunk's end.
            reach = np.where(lens > 0, np.minimum(-(-lens // chunk) * chunk, L), 0)
            if (reach != lens).any() and reach.max() <= k.shape[2]:
                if matches(ctx, *R.decode_attention(q, k, v, reach, scale)):
                    named.add("split_end:max_len")
                    yield Cause("split_end:max_len", (
                        f"the split that holds a context's end reads on past it, to the end of its chunk "
                        f"(the output matches keys up to min(start + chunk, max_len), with "
                        f"{split_words(chunk, lens)}): the cache rows past context_lens[b] are not this "
                        "sequence's keys. end = min(start + chunk, context_lens[b])."))
    yield from warp_key_causes(ctx, k, v, lens, split_sizes(ctx, L))
    yield from warp_merge_causes(ctx, k, v, lens, split_sizes(ctx, L))
    yield from warp_stream_causes(ctx, k, v, lens, split_sizes(ctx, L))


def split_key_counts(length: int, warps: int, step_keys: int, start, step, skip_warp=None) -> np.ndarray:
    """How many times a split of `length` keys counts each key when warp w starts at start(w),
    strides by `step` and takes step_keys keys per step (keys past the end masked); a warp whose
    state the merge skips (skip_warp) counts none."""
    counts = np.zeros(length, int)
    for w in range(warps):
        if w == skip_warp:
            continue
        for j0 in range(start(w), length, step):
            counts[j0:j0 + step_keys] += 1
    return counts


def warp_key_causes(ctx, k, v, lens, chunks):
    """The partial kernel's key loop with the wrong start or step, or a merge that skips one warp:
    keys counted twice or not at all, in a pattern fixed by WARPS and KEYS_PER_STEP."""
    config = kernel_config(getattr(ctx, "config", None), ctx.params)
    W, KPS = config.get("WARPS"), config.get("KEYS_PER_STEP")
    if not (isinstance(W, int) and isinstance(KPS, int)) or W < 2:
        return
    q, scale = ctx.inputs["q"], ctx.inputs["scale"]
    B, H, d = np.shape(q)
    Hkv = k.shape[1]
    heads = [R.kv_head_of(h, H, Hkv) for h in range(H)]
    L = k.shape[2]
    variants = [(f"split_keys:skip_warp:{w}",
                 f"the keys warp {w} walks are left out of every split (keys start + {w}·{KPS} .. start + "
                 f"{w}·{KPS} + {KPS - 1}, then every {W * KPS}): warp {w}'s keys never reach the result. "
                 f"Check warp {w}'s key loop and the merge's loops over the warps: each of the {W} warps' "
                 "m, l and acc must be read",
                 dict(start=lambda w: w * KPS, step=W * KPS, skip_warp=w)) for w in (0, W - 1)]
    variants += [(cid, f"each split counts some keys several times and maybe others not at all: the output "
                       f"matches a key loop where warp w starts at {start_text} and steps by {step_text}. "
                       f"Warp w starts at start + w·KEYS_PER_STEP and steps by WARPS·KEYS_PER_STEP "
                       f"(here {W * KPS}), so that the warps share the keys and each key is taken once",
                  dict(start=start, step=step))
                 for cid, start, start_text, step, step_text in (
                     ("split_keys:step:KEYS_PER_STEP", lambda w: w * KPS, "start + w·KEYS_PER_STEP", KPS, "KEYS_PER_STEP"),
                     ("split_keys:step:WARPS", lambda w: w * KPS, "start + w·KEYS_PER_STEP", W, "WARPS"),
                     ("split_keys:start:warp", lambda w: w, "start + w", W * KPS, "WARPS·KEYS_PER_STEP"))]
    variants.append(("split_keys:start:0",
                     "every split starts at key 0, not at its own start: split s attends to keys 0 .. end - 1 "
                     "(the output matches that). Warp w's first key is start + w·KEYS_PER_STEP, with start = "
                     "s · chunk", dict(start=lambda w: w * KPS, step=W * KPS, from_zero=True)))
    probe = getattr(ctx, "probe", None)
    said = set()
    kk, vv = np.asarray(k, np.float64)[:, heads], np.asarray(v, np.float64)[:, heads]
    scores_all = scale * np.einsum("bhd,bhjd->bhj", np.asarray(q, np.float64), kk)
    for chunk in chunks:
        for cid, text, how in variants:
            if cid in said:
                continue
            how = dict(how)
            from_zero = how.pop("from_zero", False)
            weight = np.zeros((B, L))
            for b in range(B):
                for lo, hi in R.split_ranges(int(lens[b]), chunk):
                    first = 0 if from_zero else lo
                    weight[b, first:hi] += split_key_counts(hi - first, W, KPS, **how)
            if not probe and np.array_equal(weight, np.arange(L) < lens[:, None]):
                continue                        # this case cannot tell the variant from the right loop
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                sc = np.where(weight[:, None, :] > 0, scores_all, -np.inf)
                top = np.max(sc, axis=-1, keepdims=True)
                e = weight[:, None, :] * np.exp(sc - np.where(np.isfinite(top), top, 0.0))
                total = e.sum(axis=-1)
                o_alt = np.where(total[..., None] > 0, np.einsum("bhj,bhjd->bhd", e, vv) / total[..., None], 0.0)
                lse_alt = np.where(total > 0, top[..., 0] + np.log(total), -np.inf)
            if matches(ctx, o=o_alt, lse=lse_alt):
                said.add(cid)
                yield Cause(cid, f"{text} (the output matches that, with {split_words(chunk, lens)}).")


def _warp_walk(ctx, k, v):
    """(WARPS, KEYS_PER_STEP, scores [B, H, L], v [B, H, L, d]) of the partial kernel, float64, each
    query head with its kv head's keys; None where the kernel's CONFIG does not give both sizes."""
    config = kernel_config(getattr(ctx, "config", None), ctx.params)
    W, KPS = config.get("WARPS"), config.get("KEYS_PER_STEP")
    if not (isinstance(W, int) and isinstance(KPS, int)):
        return None
    q, scale = np.asarray(ctx.inputs["q"], np.float64), ctx.inputs["scale"]
    H, Hkv = q.shape[1], k.shape[1]
    heads = [R.kv_head_of(h, H, Hkv) for h in range(H)]
    kk, vv = np.asarray(k, np.float64)[:, heads], np.asarray(v, np.float64)[:, heads]      # [B, H, L, d]
    return W, KPS, scale * np.einsum("bhd,bhjd->bhj", q, kk), vv


def warp_merge_causes(ctx, k, v, lens, chunks):
    """The merge of the WARPS states of a split with one weight left out: l summed as it is, or acc,
    where each must be rescaled from its warp's max to the block's, exp(m_w - m_blk)."""
    walk = _warp_walk(ctx, k, v)
    if walk is None or walk[0] < 2:
        return
    W, KPS, scores_all, vv = walk
    B, H, _, d = vv.shape
    variants = (("merge:l_unweighted", "l", "the l"), ("merge:acc_unweighted", "acc", "the acc"),
                ("merge:weight_base", "base", ""), ("merge:sign:warp", "sign", ""))
    for chunk in chunks:
        if chunk <= KPS:
            continue                        # one warp's keys per split: nothing to merge
        n_splits = max(1, -(-int(np.max(lens)) // chunk))
        parts = {cid: (np.zeros((B, H, n_splits, d)), np.full((B, H, n_splits), -np.inf)) for cid, *_ in variants}
        for b in range(B):
            for sp, (lo, hi) in enumerate(R.split_ranges(int(lens[b]), chunk)):
                sc = scores_all[b, :, lo:hi]                                                # [H, n]
                warp = (np.arange(hi - lo) // KPS) % W
                m = np.stack([sc[:, warp == w].max(axis=-1, initial=-np.inf) for w in range(W)], -1)   # [H, W]
                safe = np.where(np.isfinite(m), m, 0.0)
                e = [np.exp(sc[:, warp == w] - safe[:, w:w + 1]) for w in range(W)]
                l_w = np.stack([x.sum(axis=-1) for x in e], -1)                             # [H, W]
                acc_w = np.stack([np.einsum("hj,hjd->hd", x, vv[b, :, lo:hi][:, warp == w])
                                  for w, x in enumerate(e)], 1)                             # [H, W, d]
                m_blk = m.max(axis=-1, keepdims=True)
                alpha = np.exp(m - m_blk)                                                     # 0 for empty warps
                for cid, which, _ in variants:
                    # "base": weights expf(m2_w - m2_blk) of maxima in log2 units, where exp2f is due
                    a = np.exp((m - m_blk) / math.log(2.0)) if which == "base" else alpha
                    if which == "sign":         # exp(m_blk - m_w); a warp with no key is skipped
                        with np.errstate(over="ignore", invalid="ignore"):
                            a = np.where(np.isfinite(m), np.exp(m_blk - safe), 0.0)
                    l_sum = l_w.sum(-1) if which == "l" else (a * l_w).sum(-1)
                    acc = (acc_w.sum(1) if which == "acc" else (a[..., None] * acc_w).sum(1))
                    parts[cid][0][b, :, sp] = acc / l_sum[:, None]
                    parts[cid][1][b, :, sp] = m_blk[:, 0] + np.log(l_sum)
        for cid, which, what in variants:
            if not matches(ctx, *R.combine_partials(*parts[cid])):
                continue
            if which == "sign":
                yield Cause(cid, (
                    f"the merge of the {W} warps' states weighs each warp by exp(m_blk - m_w), the exponent's "
                    f"sign flipped (the output matches that, with {split_words(chunk, lens)}): the weight is "
                    "exp2f(m_w - m_blk) <= 1, the warp with the block's max weighing 1."))
            elif which == "base":
                yield Cause(cid, (
                    f"the merge of the {W} warps' states weighs each warp by expf(m_w - m_blk), but the "
                    f"maxima are in log2 units (the output matches that, with {split_words(chunk, lens)}): "
                    "the weight is exp2f(m_w - m_blk)."))
            else:
                yield Cause(cid, (
                    f"the merge of the {W} warps' states adds {what} of each warp without its weight "
                    f"exp(m_w - m_blk) (the output matches that, with {split_words(chunk, lens)}): each warp's "
                    "l and acc are relative to its own max m_w, so both must be rescaled to the block's "
                    "max before they are added."))
            return


def _float4_factor(d: int, missed: int, twice: int | None):
    """acc's rescale factor per feature when a lane's float4 misses component `missed` (factor 1)
    and, with `twice`, rescales component `twice` two times (alpha²): a copy of the line above."""
    def factor(alpha):
        comp = np.arange(d) % 4             # lane l holds features 4l .. 4l + 3 as .x .y .z .w
        f = np.where(comp == missed, 1.0, alpha[..., None])
        if twice is not None:
            f = np.where(comp == twice, alpha[..., None] ** 2, f)
        return f
    return factor


def warp_streamed(scores, v, lens, chunk: int, warps: int, step_keys: int, zero_past=None, **how):
    """Split-KV decode as the partial kernel runs it: in each split of `chunk` keys, warp w streams
    the keys start + w·step_keys .., step_keys of them a step, warps·step_keys apart (keys past the
    split's end masked), through `streamed` (with `how`, a bug of that loop); the warps' states are
    merged and the splits combined, both right. scores [B, H, L] (natural units), v [B, H, L, d] ->
    (o [B, H, d], lse [B, H]). zero_past: the keys of a warp's last step past the split's end are
    scored 0 with value 0 (their loads skipped, their score not masked): "context", those before the
    context's end (the score's bound at the context's end); "all", every one (no bound on the score)."""
    B, H, _, d = v.shape
    n_splits = max(1, -(-int(np.max(lens)) // chunk))
    o_part, lse_part = np.zeros((B, H, n_splits, d)), np.full((B, H, n_splits), -np.inf)
    for b in range(B):
        for sp, (lo, hi) in enumerate(R.split_ranges(int(lens[b]), chunk)):
            o_w, lse_w = np.zeros((H, warps, d)), np.full((H, warps), -np.inf)
            for w in range(warps):
                starts = range(lo + w * step_keys, hi, warps * step_keys)
                if not starts:
                    continue                    # a warp with no key: l = 0, no weight in the merge
                idx = np.concatenate([np.arange(j0, j0 + step_keys) for j0 in starts])
                zero = (idx >= hi) & ((idx < int(lens[b])) if zero_past == "context" else (zero_past == "all"))
                inside, idx = idx < hi, np.minimum(idx, hi - 1)
                s_w = np.where(inside, scores[b][:, idx], np.where(zero, 0.0, -np.inf))
                v_w = np.where(inside[:, None], v[b][:, idx], 0.0)
                o1, lse1 = streamed(s_w[:, None, :], v_w, step_keys, **how)     # one query row per head
                o_w[:, w], lse_w[:, w] = o1[:, 0], lse1[:, 0]
            o_part[b, :, sp], lse_part[b, :, sp] = R.combine_partials(o_w, lse_w)
    return R.combine_partials(o_part, lse_part)


def warp_stream_causes(ctx, k, v, lens, chunks):
    """Bugs of each warp's own online softmax in the partial kernel: warp w streams the keys start +
    w·KEYS_PER_STEP .., a step of KEYS_PER_STEP keys at a time, WARPS·KEYS_PER_STEP apart, with one
    rescale per step; the replay runs that loop with the bug, then the merge and the combine right."""
    walk = _warp_walk(ctx, k, v)
    if walk is None:
        return
    W, KPS, scores_all, vv = walk
    d = vv.shape[-1]
    variants = [("rescale:l", dict(rescale_l=False),
                 "l is not rescaled when the warp's running max grows: l = l + rowsum(P), where l · alpha "
                 "+ rowsum(P) is due"),
                ("rescale:acc", dict(rescale_acc=False),
                 "acc is not rescaled when the warp's running max grows, while l is"),
                ("rescale:acc_and_l", dict(rescale_acc=False, rescale_l=False),
                 "neither acc nor l is rescaled when the warp's running max grows"),
                ("rescale:l_after_sum", dict(rescale_l="after"),
                 "l is rescaled after the step's P is added, l = (l + rowsum(P)) · alpha, not l · alpha + "
                 "rowsum(P) (on a warp's first step alpha = 0, which wipes that step's sum)"),
                ("split_end:score_bound_context", dict(zero_past="context"),
                 "the keys of a warp's last step past the split's end, up to the context's end, are scored 0 "
                 "instead of -INFINITY: the score's bound tests the context's length where the split's end is "
                 "due (their loads are skipped, so q·k = 0, and exp2(0 - m) still counts in l)"),
                ("bounds_mask:missing", dict(zero_past="all"),
                 "the keys of a warp's last step past the split's end are scored 0 instead of -INFINITY: the "
                 "score has no bound (their loads are skipped, so q·k = 0, and exp2(0 - m) still counts in l)")]
    if d % 4 == 0:
        xyzw = "xyzw"
        for c in range(4):
            variants.append((f"rescale:acc_cols:{xyzw[c]}", dict(rescale_acc=_float4_factor(d, c, None)),
                             f"acc's component .{xyzw[c]} (features 4·lane + {c}) is not rescaled when the "
                             "warp's running max grows; the other three are"))
            variants.append((f"rescale:acc_cols:{xyzw[c]}_for_{xyzw[c - 1]}",
                             dict(rescale_acc=_float4_factor(d, c, (c - 1) % 4)),
                             f"acc's component .{xyzw[(c - 1) % 4]} is rescaled twice and .{xyzw[c]} (features "
                             f"4·lane + {c}) never, as when the line for .{xyzw[c]} repeats the one for "
                             f".{xyzw[(c - 1) % 4]}"))
    rescale = ("when the max grows from m to m_new, both l and every component of acc are multiplied by "
               "alpha = exp2(m - m_new) before the step's P is added.")
    bound = "a key is scored only while j0 + u < end, the split's own end (keys past it get -INFINITY)."
    for chunk in chunks:
        said = False
        for cid, how, what in variants:         # every variant this case cannot tell apart
            if chunk <= W * KPS and "zero_past" not in how:
                continue                        # one step per warp: a rescale bug gives the right state
            if matches(ctx, *warp_streamed(scores_all, vv, lens, chunk, W, KPS, **how)):
                yield Cause(cid, (
                    f"{what} (the output matches that loop, each of the {W} warps taking {KPS} keys a step, "
                    f"with {split_words(chunk, lens)}): {bound if 'zero_past' in how else rescale}"))
                said = True
        if said:
            return


def combine_lane_max(o_part, lse_part, lanes: int = 32, shfl_down: bool = False):
    """The combine with lse_max left per lane: lane l takes the max of the splits s = l, l + 32, ...
    (-inf when it read none; with shfl_down, then the max of lanes l .. 31, as a __shfl_down_sync
    butterfly leaves it) and weighs every split by exp(lse_s - its own max) in float32 for its four
    features of o (4l .. 4l + 3); lane 0 writes lse. A row whose splits are all empty keeps o = 0,
    lse = -inf."""
    o_part, lse_part = np.asarray(o_part, np.float64), np.asarray(lse_part, np.float64)
    n_splits, d = lse_part.shape[-1], o_part.shape[-1]
    used = np.isfinite(lse_part)
    own = np.full(lse_part.shape[:-1] + (lanes,), -np.inf)
    for lane in range(min(lanes, n_splits)):
        own[..., lane] = np.max(np.where(used, lse_part, -np.inf)[..., lane::lanes], axis=-1)
    if shfl_down:
        own = np.flip(np.maximum.accumulate(np.flip(own, -1), axis=-1), -1)
    feature_lane = np.minimum(np.arange(d) // 4, lanes - 1)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        w = np.exp((np.where(used, lse_part, -np.inf)[..., :, None]
                    - own[..., None, feature_lane]).astype(np.float32)).astype(np.float64)   # [.., S, d]
        w = np.where(used[..., None], w, 0.0)
        o = (w * o_part).sum(axis=-2) / w.sum(axis=-2)
        w0 = w[..., 0]
        lse = own[..., 0] + np.log(w0.sum(axis=-1))
    empty = ~used.any(axis=-1)
    return np.where(empty[..., None], 0.0, o), np.where(empty, -np.inf, lse)


def max_prefix_text(ctx, o_part, lse_part, splits: str) -> str:
    """What the combine's max over the first 32 splits only says, once the output matches it: the same
    output can match a max over fewer first splits too (the first split alone, say), and then the text
    names them all, not the 32 that one bug (a split per lane, s = lane, no loop) would take."""
    with np.errstate(invalid="ignore"):
        alike = [j for j in range(1, 32) if matches(ctx, *combine_max_of(o_part, lse_part, np.max(lse_part[..., :j], axis=-1)))]
    fix = ("Take the max over every split the row uses (each lane loops over s = lane, lane + 32, ... < used, "
           "then the butterfly), so that each weight exp(lse_s - lse_max) is at most 1.")
    if not alike:
        return (f"the combine's lse_max is the max of the first 32 splits only (the output matches that, with "
                f"{splits}), as when each lane reads one split, s = lane: splits 32 and up never reach the max, "
                f"and a split whose lse lies more than 88 above it overflows exp(lse_s - lse_max). {fix}")
    first = "the first split alone" if alike[0] == 1 else f"the first {alike[0]} splits"
    return (f"the combine's lse_max is not the max of all the splits: the output matches a max over only the "
            f"first j splits, for j from {alike[0]} to 32 alike ({first} among them; this case cannot tell "
            f"which, with {splits}). The splits past those never reach the max, and one whose lse lies more "
            f"than 88 above it overflows exp(lse_s - lse_max). {fix}")


def combine_max_of(o_part, lse_part, mx):
    """The combine with `mx` [rows] where the splits' max is due: weights exp(lse_s - mx) in float32,
    o = sum w o_s / sum w (0 / 0 is NaN, inf / inf too), lse = mx + log(sum w); a row whose splits all
    are empty keeps o = 0, lse = -inf (the kernel's own branch for an empty context)."""
    o_part, lse_part = np.asarray(o_part, np.float64), np.asarray(lse_part, np.float64)
    empty = ~np.isfinite(lse_part).any(axis=-1)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        w = np.exp((lse_part - mx[..., None]).astype(np.float32)).astype(np.float64)
        total = w.sum(axis=-1)
        o = (w[..., None] * o_part).sum(axis=-2) * (1.0 / total)[..., None]
        lse = mx + np.log(total)
    return np.where(empty[..., None], 0.0, o), np.where(empty, -np.inf, lse)


def _phantom_key_per_split(q, k, v, lens, chunk, scale, from_buffer=False, step=None):
    """Split-KV decode where every split also counts one key past its end: one whose score and value
    are 0 (a zero-filled load, unmasked), or (from_buffer) the key the buffer holds there (the next
    split's first key, or the padding past the context), 0 past the buffer's end. With `step` (keys
    a warp loads per step), only a split whose length is not a multiple of it reaches that key."""
    B, H, d = np.asarray(q).shape
    Hkv = k.shape[1]
    n_splits = max(1, -(-k.shape[2] // chunk))
    o_part = np.zeros((B, H, n_splits, d))
    lse_part = np.full((B, H, n_splits), -np.inf)
    for b in range(B):
        for sp, (lo, hi) in enumerate(R.split_ranges(int(lens[b]), chunk)):
            if step and (hi - lo) % step == 0:
                kk, vv = np.asarray(k[b][:, lo:hi], np.float64), np.asarray(v[b][:, lo:hi], np.float64)
                heads = [R.kv_head_of(h, H, Hkv) for h in range(H)]
                sc = scale * np.einsum("hd,hjd->hj", np.asarray(q[b], np.float64), kk[heads])
                p, lse = R.masked_softmax(sc[:, None, :])
                o_part[b, :, sp] = (p[:, 0][:, :, None] * vv[heads]).sum(axis=1)
                lse_part[b, :, sp] = lse[:, 0]
                continue
            extra = hi + 1 if from_buffer and hi < k.shape[2] else hi
            kk = np.concatenate([np.asarray(k[b][:, lo:extra], np.float64), np.zeros((Hkv, hi + 1 - extra, d))], axis=1)
            vv = np.concatenate([np.asarray(v[b][:, lo:extra], np.float64), np.zeros((Hkv, hi + 1 - extra, d))], axis=1)
            heads = [R.kv_head_of(h, H, Hkv) for h in range(H)]
            sc = scale * np.einsum("hd,hjd->hj", np.asarray(q[b], np.float64), kk[heads])
            p, lse = R.masked_softmax(sc[:, None, :])
            o_part[b, :, sp] = (p[:, 0] [:, :, None] * vv[heads]).sum(axis=1)
            lse_part[b, :, sp] = lse[:, 0]
    return R.combine_partials(o_part, lse_part)
