"""Replays of a row's reductions over the lanes that share it.

In modules 02, 03, 07 and 08 a row of S is spread over COLS = 8 neighbouring lanes (key j and output
feature c belong to lane (j / 4) % COLS: slice_col); in module 06 over the 4 lanes of a quad (key j
and feature c to lane (j % 8) / 2: the mma fragment). Each lane keeps the online-softmax state of
its own keys, and two butterflies make it the row's: one of the tile's max, before P, and one of l,
at the end. A butterfly with some of its __shfl_xor_sync offsets left out combines each lane with
only part of the row; this replays it, lane by lane, as the kernel runs it.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..spec import Cause
from . import lowp
from .fragments import rows_padded
from . import replays
from .replays import matches, rel, row_ends, tiles


def _group(lanes: int, offsets) -> np.ndarray:
    """[lanes, lanes] booleans: lane u's value reaches lane t through a butterfly over `offsets`."""
    span = {0}
    for off in offsets:
        span |= {x ^ off for x in span}
    return np.array([[(t ^ u) in span for u in range(lanes)] for t in range(lanes)])


def _group_max(x, row_group) -> np.ndarray:
    """x [..., rows, lanes] with each row replaced by the max over the rows of its group (groups of
    equal size, any rows)."""
    order = np.argsort(row_group, kind="stable")
    size = len(order) // len(np.unique(row_group))
    grouped = x[..., order, :]
    grouped = grouped.reshape(x.shape[:-2] + (len(order) // size, size, x.shape[-1])).max(axis=-2)
    out = np.empty_like(x)
    out[..., order, :] = np.repeat(grouped, size, axis=-2)
    return out


def lane_streamed(s, v, tile: int, lanes: int, key_lane, col_lane, max_offsets, sum_offsets,
                  visible=None, p_for_acc=None, guard: bool = True, lse_own_l: bool = False,
                  row_group=None, row_end=None):
    """(o, lse) of a kernel whose lanes share each row: the tile's max reduced over `max_offsets`
    only, l over `sum_offsets` only (or, as a [lanes, lanes] boolean matrix, over the lanes it
    names for each lane). Each lane exponentiates its own keys against its own max and
    rescales its own l and its own columns of acc; acc sums the P of every lane (P goes through
    shared memory, or is the mma's operand); lane 0 writes lse. Without `guard` (02, whose rows all
    see keys) a lane that has seen no key exponentiates against m = -inf, and o = acc / l unguarded.
    With `lse_own_l`, lse takes lane 0's own l, before its butterfly. With `row_group` ([rows] ids), the
    tile's max also runs over the rows that share an id (a shuffle that reaches other rows' lanes: rows
    past n_q must then be in s, as the kernel's zero-filled rows). With `row_end` [Nq],
    a row's loop stops before the key tile that starts at row_end (a causal kernel's query tile
    never visits the tiles past its diagonal: a lane whose keys were all masked so far keeps
    m = -inf there, and a visited tile of masked keys would zero its columns of acc)."""
    s = np.asarray(s, np.float64)
    if visible is not None:
        s = np.where(visible, s, -np.inf)
    n_k = s.shape[-1]
    key_lane, col_lane = np.asarray(key_lane), np.asarray(col_lane)
    g_max = _group(lanes, max_offsets)
    g_sum = np.asarray(sum_offsets, bool) if np.ndim(sum_offsets) == 2 else _group(lanes, sum_offsets)
    shape = s.shape[:-1]
    m = np.full(shape + (lanes,), -np.inf)
    l = np.zeros(shape + (lanes,))
    acc = np.zeros(shape + (v.shape[-1],))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        for start in range(0, n_k, tile):
            st = s[..., start:start + tile]
            owner = key_lane[start:start + tile]
            own = np.stack([np.where(owner == t, st, -np.inf).max(axis=-1) for t in range(lanes)], -1)
            m_tile = np.stack([own[..., g_max[t]].max(axis=-1) for t in range(lanes)], -1)
            if row_group is not None:
                m_tile = _group_max(m_tile, row_group)
            m_new = np.maximum(m, m_tile)
            m_use = np.where(np.isfinite(m_new), m_new, 0.0) if guard else m_new
            alpha = np.exp(m - m_use)
            p = np.exp((st - m_use[..., owner]).astype(np.float32)).astype(np.float64)
            l_new = l * alpha + np.stack([np.where(owner == t, p, 0.0).sum(axis=-1) for t in range(lanes)], -1)
            pv = p if p_for_acc is None else p_for_acc(p)
            acc_new = acc * alpha[..., col_lane] + pv @ v[..., start:start + tile, :]
            if row_end is not None:
                run = (start < np.asarray(row_end))[:, None]
                m_new, l_new = np.where(run, m_new, m), np.where(run, l_new, l)
                acc_new = np.where(run, acc_new, acc)
            m, l, acc = m_new, l_new, acc_new
        l_row = np.stack([l[..., g_sum[t]].sum(axis=-1) for t in range(lanes)], -1)
        l_col = l_row[..., col_lane]
        o = np.where(l_col > 0, acc / np.where(l_col > 0, l_col, 1.0), 0.0) if guard else acc / l_col
        l_lse = l[..., 0] if lse_own_l else l_row[..., 0]
        lse = np.where(l_lse > 0, m[..., 0] + np.log(np.where(l_lse > 0, l_lse, 1.0)), -np.inf)
    return o, lse


def _offsets_text(offsets) -> str:
    return " and ".join(map(str, offsets))


def reduction_causes(ctx, s, v, visible=None, layout: str = "slices"):
    """The row max's butterfly, or l's, or both, with some offsets left out (`layout`: "slices",
    02's COLS lanes, or "quad", 06's fragment)."""
    d, n_k = v.shape[-1], s.shape[-1]
    if layout == "quad":
        lanes, key_lane, col_lane = 4, (np.arange(n_k) % 8) // 2, (np.arange(d) % 8) // 2
        who = "the 4 lanes of a quad"
        dtype = ctx.params.get("dtype")      # P enters the mma, and o is stored, in the input type
        into = (lambda x: lowp.rounded(x, dtype)) if dtype else None
    else:
        cols = (getattr(ctx, "config", None) or {}).get("COLS")
        if not isinstance(cols, int) or cols < 2:
            return
        lanes, key_lane, col_lane = cols, (np.arange(n_k) // 4) % cols, (np.arange(d) // 4) % cols
        who = f"the COLS = {cols} lanes that share a row"
        into = None
    full = tuple(1 << k for k in reversed(range(lanes.bit_length() - 1)))     # 4, 2, 1 (or 2, 1)
    subsets = [c for r in range(len(full)) for c in itertools.combinations(full, r)]
    variants = [(kept, full) for kept in subsets] + [(full, kept) for kept in subsets] + \
               [(kept, kept) for kept in subsets]
    n_q = s.shape[-2]
    # A causal query tile stops at its diagonal: each tile size with each stop the kernel may have.
    for tile, ends in ((t, e) for t in tiles(ctx, "BLOCK_N") for e in row_ends(ctx, visible, n_q, n_k, t)):
        for (max_kept, sum_kept), guard in itertools.product(variants, (True, False)):
            o_alt, lse_alt = lane_streamed(s, v, tile, lanes, key_lane, col_lane, max_kept, sum_kept,
                                           visible, into, guard, row_end=ends)
            if not matches(ctx, o=into(o_alt) if into else o_alt, lse=lse_alt):
                continue
            which = [name for name, kept in (("max", max_kept), ("sum", sum_kept)) if kept != full]
            missing = tuple(x for x in full if x not in (max_kept if "max" in which else sum_kept))
            what = {"max": "the tile's row max", "sum": "the row sum l"}
            said = " and ".join(what[w] for w in which)
            kept = max_kept if "max" in which else sum_kept
            reach = (f"each lane ends with the value of {2 ** len(kept)} of the {lanes} lanes" if kept
                     else "each lane keeps its own")
            yield Cause(f"reduce:{'_'.join(which)}_lanes:missing_{'_'.join(map(str, missing))}", (
                f"{said} {'is' if len(which) == 1 else 'are'} reduced over {who} without the "
                f"__shfl_xor_sync of offset {_offsets_text(missing)} (the output matches that, "
                f"with key tiles of {tile}: {reach}). A row's keys are spread over those lanes, so "
                f"the butterfly needs every offset, {_offsets_text(full)}, for the max (before P) "
                f"and for l (before o = acc / l)."))
        # l's butterfly adding the partner's own partial sum at each step, l[r] where the running
        # l_row is due: lane t ends with its own part and its partners' at each offset, no more.
        direct = np.array([[u == t or (t ^ u) in full for u in range(lanes)] for t in range(lanes)])
        o_alt, lse_alt = lane_streamed(s, v, tile, lanes, key_lane, col_lane, full, direct, visible, into,
                                       row_end=ends)
        if matches(ctx, o=into(o_alt) if into else o_alt, lse=lse_alt):
            yield Cause("reduce:sum_lanes:unaccumulated", (
                f"the butterfly over {who} adds the partner's own partial sum at each step, "
                f"__shfl_xor_sync(..., l[r], offset), where the running sum is due (the output matches each "
                f"lane ending with its own part and its {len(full)} partners', with key tiles of {tile}): "
                f"shuffle the value being accumulated, l_row += __shfl_xor_sync(..., l_row, offset)."))
        if layout == "quad":
            # The max's shuffles at offsets 4 and 8 (not 1 and 2): lane t meets the same column pair
            # of the 4 rows g & ~3 .. (g & ~3) + 3, never its quad. Padding rows (q = 0) join in, in
            # the last query tile (they stop where its rows do).
            s_pad, vis_pad = rows_padded(s, visible)
            ends_pad = None if ends is None else np.concatenate(
                [ends, np.full(s_pad.shape[-2] - n_q, ends[-1] if n_q else 0)])
            o_alt, lse_alt = lane_streamed(s_pad, v, tile, lanes, key_lane, col_lane, (), full, vis_pad, into,
                                           row_group=np.arange(s_pad.shape[-2]) // 4, row_end=ends_pad)
            if matches(ctx, o=into(o_alt[..., :n_q, :]) if into else o_alt[..., :n_q, :], lse=lse_alt[..., :n_q]):
                yield Cause("reduce:max_lanes:other_rows", (
                    f"the tile's row max is shuffled at offsets 4 and 8, which reach the lanes of other "
                    f"rows, not the quad's (the output matches that, with key tiles of {tile}): the 4 "
                    "lanes of a row are lanes 4g .. 4g + 3, so the offsets are 1 and 2."))
        if layout == "slices":
            yield from _max_other_groups_causes(ctx, s, v, visible, tile, ends, lanes, key_lane, col_lane, full)
        for guard in (True, False):
            o_alt, lse_alt = lane_streamed(s, v, tile, lanes, key_lane, col_lane, full, full, visible, into,
                                           guard, lse_own_l=True, row_end=ends)
            if matches(ctx, o=into(o_alt) if into else o_alt, lse=lse_alt):
                yield Cause("lse:lane_l", (
                    "lse is computed from the writing lane's own part of l, before the sum over "
                    f"{who} (the output matches that, while o uses the whole row's l): lse = m + log(l) "
                    "with l after its butterfly."))


def _max_other_groups_causes(ctx, s, v, visible, tile, ends, lanes, key_lane, col_lane, full):
    """The row max's butterfly started at offset COLS (or 2 · COLS) in modules 02, 03, 07, 08: lane tx
    of row group ty (rows TM · ty ..) also meets the lanes of group ty ^ 1 (ty ^ 2, ...), so row R's
    max takes row R ^ TM's too. Exact in real arithmetic; in float32 a row whose scores lie far below
    that row's underflows to l = 0. The padding rows of the last query tile join in (q = 0: scores 0)."""
    # It shows only as rows whose l underflowed to 0: o NaN (0 / 0) or 0 (guarded) on a whole row.
    o_got = np.asarray(ctx.out["o"], np.float64)
    with np.errstate(invalid="ignore"):
        lost = (~np.isfinite(o_got)).all(axis=-1) | ((o_got == 0).all(axis=-1) & (ctx.ref["o"] != 0).any(axis=-1))
    if not lost.any():
        return
    tm = int(replays.kernel_config(getattr(ctx, "config", None), ctx.params).get("TM", 4))
    n_q = s.shape[-2]
    for bm in tiles(ctx, "BLOCK_M"):
        s_pad, vis_pad = rows_padded(s, visible, multiple=bm)
        ends_pad = None if ends is None else np.concatenate(
            [ends, np.full(s_pad.shape[-2] - n_q, ends[-1] if n_q else 0)])
        found = []
        for extra in ((lanes,), (2 * lanes,), (2 * lanes, lanes)):
            if max(extra) >= 32:
                continue
            flip = sum(off // lanes * tm for off in extra)          # the row bits those offsets cross
            group = np.arange(s_pad.shape[-2]) & ~flip
            for guard in (True, False):
                o_alt, lse_alt = lane_streamed(s_pad, v, tile, lanes, key_lane, col_lane, full, full, vis_pad,
                                               None, guard, row_group=group, row_end=ends_pad)
                if not matches(ctx, o=o_alt[..., :n_q, :], lse=lse_alt[..., :n_q]):
                    continue
                # Only where the other rows' max changes the output: else the replay is the kernel
                # with that guard alone (an unguarded 0 / 0 is another bug's).
                o_own, _ = lane_streamed(s_pad, v, tile, lanes, key_lane, col_lane, full, full, vis_pad,
                                         None, guard, row_end=ends_pad)
                if rel(o_alt[..., :n_q, :], o_own[..., :n_q, :]) >= 1e-6:
                    found.append(extra)
                    break
        if not found:
            continue
        # On one case several such butterflies may agree (only one neighbour group's rows stand out):
        # every one that matches is named.
        def joined(extra):
            """The rows R ^ x whose lanes those offsets reach."""
            xs = sorted(set(np.bitwise_xor.reduce([off // lanes * tm for off in pick]) for r in
                            range(1, len(extra) + 1) for pick in itertools.combinations(extra, r)))
            return ", ".join(f"R ^ {x}" for x in xs)
        ways = " or ".join(f"offsets {', '.join(map(str, sorted(extra + full, reverse=True)))} (rows "
                           f"{joined(extra)} join row R)" for extra in found)
        yield Cause("reduce:max_lanes:other_row_groups", (
            f"the tile's row max also takes the max of rows of other groups of TM = {tm} rows: the output "
            f"matches its __shfl_xor_sync butterfly with {ways}, in query tiles of {bm} rows and key tiles "
            f"of {tile}. Offsets from COLS = {lanes} on reach the lanes of other rows. A max that is too "
            "large changes nothing in exact arithmetic, but where a row's scores lie far below those rows' "
            "(the padding rows past n_q score 0), every exp underflows and l = 0. A row's "
            f"{lanes} lanes need offsets {', '.join(map(str, full))} only."))
        return


def store_layout_causes(ctx):
    """02's output store writing a thread's features contiguously, o[tx · TD + e], where its
    accumulators hold the interleaved features slice_col(e, tx) (TD = d / COLS): the features of
    every row come out permuted (d = 4 · COLS, one float4 per lane, is right either way)."""
    cols = (getattr(ctx, "config", None) or {}).get("COLS")
    o = ctx.ref["o"]
    d = o.shape[-1]
    if not isinstance(cols, int) or cols < 2 or d % (4 * cols):
        return
    td = d // cols
    perm = np.array([(e // 4) * (cols * 4) + tx * 4 + e % 4 for tx in range(cols) for e in range(td)])
    if np.array_equal(perm, np.arange(d)):
        return
    if matches(ctx, o=o[..., perm], lse=ctx.ref["lse"]):
        yield Cause("store:o_cols_contiguous", (
            f"each row of o holds its features permuted, exactly as a store of a thread's accumulators "
            f"to o[tx · {td} + e] would place them (the output matches that): thread tx holds features "
            f"slice_col(e, tx), float4 chunks interleaved over the COLS = {cols} threads of the row, so "
            f"element e goes to o[slice_col(e, tx)]."))


def shared_p_causes(ctx, s, v):
    """Module 02's P through shared memory and its bounds mask, replayed with the kernel's layout: P
    goes to p_s transposed, the 4-row chunk of rows 4·ty .. 4·ty + 3 for key j at column
    p_col(j, ty) = 4·(ty ^ ((j / 4) % 8)); key slice_col(n, tx) = (n / 4)·4·COLS + 4·tx + n % 4 is
    the thread's n-th key of the tile."""
    n_q, n_k = s.shape[-2:]
    cfg = replays.kernel_config(getattr(ctx, "config", None), ctx.params)
    cols = int(cfg.get("COLS", 8))
    for bm in tiles(ctx, "BLOCK_M"):
        if bm % 32:
            continue
        s_pad, _ = rows_padded(s, multiple=bm)    # the last query tile's rows past n_q: q is 0, so s is 0

        def crossed(p, bm=bm):
            """Each key's P read at another chunk than it was stored: rows 4·(ty ^ x_j) for rows 4·ty."""
            i, j = np.arange(p.shape[-2])[:, None], np.arange(p.shape[-1])[None, :]
            src = i // bm * bm + (((i % bm) // 4) ^ ((j >> 2) & 7)) * 4 + i % 4
            return np.take_along_axis(p, np.broadcast_to(src, p.shape), axis=-2)
        for tile in tiles(ctx, "BLOCK_N"):
            o_alt, lse_alt = replays.streamed(s_pad, v, tile, p_for_acc=crossed, unguarded=True)
            if matches(ctx, o=o_alt[..., :n_q, :], lse=lse_alt[..., :n_q]):
                yield Cause("p_share:chunk_mismatch", (
                    f"P V reads each key's P at another row chunk of p_s than the one it was stored at (the "
                    f"output matches rows 4·ty .. 4·ty + 3 taking, for key j, the P of rows 4·(ty ^ ((j / 4) % "
                    f"8)) .., with tiles of {bm} queries × {tile} keys; l and lse are right): the store "
                    "and the read of p_s must both use p_col(j, ty), the swizzled chunk of the thread's rows "
                    "for key j."))
    # The bounds mask of the last tile tested with the thread's own key index n, not the key's.
    for tile in tiles(ctx, "BLOCK_N"):
        pad = -n_k % tile
        if not pad or tile % (4 * cols):
            continue
        jj = np.arange(n_k + pad)
        start = jj // tile * tile
        local = ((jj % tile) // (4 * cols)) * 4 + jj % 4          # n of key slice_col(n, tx)
        masked = (start + tile > n_k) & (start + local >= n_k)
        # Keys past n_k are zero rows of K and V: score 0, value 0.
        s_full = np.concatenate([s, np.zeros(s.shape[:-1] + (pad,))], axis=-1)
        s_full = np.where(masked, -np.inf, s_full)
        v_full = np.concatenate([v, np.zeros(v.shape[:-2] + (pad, v.shape[-1]))], axis=-2)
        o_alt, lse_alt = replays.streamed(s_full, v_full, tile, unguarded=True)
        if matches(ctx, o=o_alt, lse=lse_alt):
            yield Cause("bounds_mask:thread_key_index", (
                f"the last tile's bounds mask tests kv_start + n >= n_k with the thread's own key index n, "
                f"where the key is kv_start + slice_col(n, tx) (the output matches that mask, with tiles of "
                f"{tile} keys): some keys past n_k score 0 and count in l, and some real keys are dropped. "
                "Test the key itself: kv_start + slice_col(n, tx) >= n_k."))


def partial_l_guard_causes(ctx, s, v, visible=None):
    """The epilogue's guard for a row with no key tested on the lane's own part of l (before its
    butterfly) where the row's l_row is due: a lane whose keys all have P = 0 writes 0 for its
    features of the row. Key j and feature c belong to lane (j / 4) % COLS and (c / 4) % COLS."""
    cfg = replays.kernel_config(getattr(ctx, "config", None), ctx.params)
    cols = int(cfg.get("COLS", 8))
    n_k, d = s.shape[-1], v.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        sv = np.where(visible, s, -np.inf) if visible is not None else s
        m = sv.max(axis=-1, keepdims=True, initial=-np.inf)
        p = np.exp((sv - np.where(np.isfinite(m), m, 0.0)).astype(np.float32))   # float32: it underflows
    key_lane = (np.arange(n_k) // 4) % cols
    lane_l = np.stack([p[..., key_lane == t].sum(axis=-1) for t in range(cols)], axis=-1)
    o_alt = np.where(lane_l[..., (np.arange(d) // 4) % cols] > 0, ctx.ref["o"], 0.0)
    if matches(ctx, o=o_alt, lse=ctx.ref["lse"]):
        yield Cause("epilogue:guard_lane_l", (
            "the row's final guard tests the lane's own part of l, before the butterfly, where the row's "
            "sum l_row is due (the output matches each lane writing 0 for its features of a row in which "
            "none of its own keys has weight): inv_l = l_row > 0 ? 1 / l_row : 0, the same test for "
            "every lane of the row."))
