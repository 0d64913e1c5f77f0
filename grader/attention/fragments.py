"""Replays of mma.sync fragment bugs (module 06), each the reference computation with the bug.

An m16n8k16 operand travels as 8×8 pieces: ldmatrix loads them, and a fragment's registers hold
them in a fixed order (the lesson's figures). Two misplacements are common: the two off-diagonal
pieces of a 16×16 block exchanged (registers paired in the wrong order), and each piece transposed
(ldmatrix where ldmatrix.trans is due, or the reverse). Both are rearrangements of q, k or v, which
the float64 attention then reads. A row's sum l, reduced over the four lanes of a quad with one
shuffle missing, covers only the key columns of two lanes: lane t holds columns 2t, 2t + 1 of each
8 (of S, and of o).
"""
from __future__ import annotations

import numpy as np

from ..spec import Cause
from . import lowp, replays
from .replays import FLOAT32_EXP_FLOOR, attend, matches, scores, streamed, tiles


def _blocks(x, size: int):
    """x [..., N, D] zero-padded to multiples of `size`, and a function that cuts it back."""
    x = np.asarray(x, np.float64)
    n, d = x.shape[-2:]
    pad = [(0, 0)] * (x.ndim - 2) + [(0, -n % size), (0, -d % size)]
    return np.pad(x, pad), lambda y: y[..., :n, :d]


def quadrants_swapped(x) -> np.ndarray:
    """In each 16×16 block, the piece at (rows 0-7, cols 8-15) exchanged with (rows 8-15, cols 0-7)."""
    y, cut = _blocks(x, 16)
    n, d = y.shape[-2:]
    y = y.reshape(y.shape[:-2] + (n // 16, 2, 8, d // 16, 2, 8)).copy()
    upper = y[..., :, 0, :, :, 1, :].copy()
    y[..., :, 0, :, :, 1, :] = y[..., :, 1, :, :, 0, :]
    y[..., :, 1, :, :, 0, :] = upper
    return cut(y.reshape(y.shape[:-6] + (n, d)))


def pieces_transposed(x) -> np.ndarray:
    """Each 8×8 piece transposed in place."""
    y, cut = _blocks(x, 8)
    n, d = y.shape[-2:]
    y = y.reshape(y.shape[:-2] + (n // 8, 8, d // 8, 8))
    y = np.swapaxes(y, -3, -1)
    return cut(np.ascontiguousarray(y).reshape(y.shape[:-4] + (n, d)))


OPERAND_BUGS = (
    ("quadrants", quadrants_swapped,
     "the two off-diagonal 8×8 pieces of each 16×16 block exchanged (the fragment's registers paired in "
     "the wrong order)"),
    ("transposed", pieces_transposed,
     "each 8×8 piece transposed (ldmatrix where ldmatrix.trans is due, or the reverse)"),
)


def lower_rows_from_upper(x) -> np.ndarray:
    """In each 16×16 block, the piece at (rows 8-15, cols 8-15) replaced by (rows 0-7, cols 8-15)."""
    y, cut = _blocks(x, 16)
    n, d = y.shape[-2:]
    y = y.reshape(y.shape[:-2] + (n // 16, 2, 8, d // 16, 2, 8)).copy()
    y[..., :, 1, :, :, 1, :] = y[..., :, 0, :, :, 1, :]
    return cut(y.reshape(y.shape[:-6] + (n, d)))


def piece_from(dst: int, src: int):
    """In each 16×16 block, the 8×8 piece of A-fragment register dst replaced by that of register src
    (register r: rows 8 (r % 2) .., columns 8 (r / 2) ..)."""
    def rearrange(x) -> np.ndarray:
        y, cut = _blocks(x, 16)
        n, d = y.shape[-2:]
        y = y.reshape(y.shape[:-2] + (n // 16, 2, 8, d // 16, 2, 8)).copy()
        y[..., :, dst % 2, :, :, dst // 2, :] = y[..., :, src % 2, :, :, src // 2, :]
        return cut(y.reshape(y.shape[:-6] + (n, d)))
    return rearrange


def _piece_words(r: int) -> str:
    return f"rows {8 * (r % 2)}-{8 * (r % 2) + 7}, keys {8 * (r // 2)}-{8 * (r // 2) + 7}"


def pairs_swapped(x) -> np.ndarray:
    """Columns 2c and 2c + 1 exchanged (a last, odd column pairs with a zero past the end)."""
    x = np.asarray(x, np.float64)
    d = x.shape[-1]
    y = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, d % 2)])
    return y.reshape(y.shape[:-1] + (-1, 2))[..., ::-1].reshape(y.shape)[..., :d]


# P's A fragment only: its fourth register packed from row g's elements where row g + 8's are due;
# each register's two values packed in the wrong order.
P_BUGS = OPERAND_BUGS + (
    ("row_g_twice", lower_rows_from_upper,
     "the piece of rows 8-15, keys 8-15 of each 16×16 block holding rows 0-7's (the fourth register "
     "packed from row g where row g + 8 is due)"),
    ("pairs_swapped", pairs_swapped,
     "each pair of neighbouring keys 2t, 2t + 1 exchanged (a register's two values packed in the wrong "
     "order: the first argument of pack2 is the low half, key 2t)"),) + tuple(
    (f"reg{dst}_from_reg{src}", piece_from(dst, src),
     f"the piece of {_piece_words(dst)} of each 16×16 block holding that of {_piece_words(src)} (register "
     f"{dst} of the A fragment packed from the elements of register {src}: register r holds rows g + "
     f"8 (r % 2), keys 8 (r / 2) + 2t, + 1)")
    for dst in range(4) for src in range(4) if dst != src and (dst, src) != (3, 2))


def operand_causes(ctx, visible=None):
    """q, k or v reaching the mma with its 8×8 pieces misplaced."""
    for name in ("q", "k", "v"):
        for bug, rearrange, what in OPERAND_BUGS:
            alt = dict(ctx.inputs)
            alt[name] = rearrange(ctx.inputs[name])
            if matches(ctx, *attend(*scores(alt), visible)):
                yield Cause(f"fragment:{name}:{bug}", (
                    f"{name} reaches the mma with {what}: the output matches attention over that "
                    f"rearranged {name}. Check the ldmatrix of {name} and the order of the registers "
                    f"handed to mma_16816 against the fragment layout in the lesson."))


def rows_padded(s, visible=None, multiple: int = 16):
    """S with its rows past n_q up to a multiple of `multiple` (16, an m-tile's; or a query tile's), as
    the kernel holds them: their q is 0, so their scores are 0; and the causal mask over those rows
    (None: no mask)."""
    n_q, n_k = s.shape[-2:]
    rows = n_q + -n_q % multiple
    s_pad = np.concatenate([s, np.zeros(s.shape[:-2] + (rows - n_q, n_k))], axis=-2)
    vis_pad = None if visible is None else (np.arange(n_k)[None, :] <= np.arange(rows)[:, None] + n_k - n_q)
    return s_pad, vis_pad


def streaming_causes(ctx, s, v, visible=None):
    """P's 8×8 pieces misplaced on their way into the second mma (l sums the right P), and the
    rescale of acc by alpha reaching only its even or its odd columns."""
    dtype = ctx.params.get("dtype")
    into_mma = (lambda p: lowp.rounded(p, dtype)) if dtype else (lambda p: p)
    d = v.shape[-1]
    # P's pieces mix rows, the padding rows past n_q too: their q is 0, so their scores are 0.
    n_q, n_k = s.shape[-2:]
    s_pad, vis_pad = rows_padded(s, visible)
    for tile in tiles(ctx, "BLOCK_N"):
        for bug, rearrange, what in P_BUGS:
            o_alt, lse_alt = streamed(s_pad, v, tile, visible=vis_pad, p_for_acc=lambda p: rearrange(into_mma(p)))
            o_alt, lse_alt = o_alt[..., :n_q, :], lse_alt[..., :n_q]
            if matches(ctx, o=o_alt, lse=lse_alt):
                yield Cause(f"fragment:p:{bug}", (
                    f"P reaches the second mma with {what} (the output matches that, with key tiles of "
                    f"{tile}; l sums the right P): check how P's registers are packed into the A fragment "
                    "of P V against the layout in the lesson."))
        for cid, pairs, how in RESCALE_ELEMENT_BUGS:
            o_alt, lse_alt = streamed(s_pad, v, tile, visible=vis_pad, p_for_acc=into_mma,
                                      rescale_acc=lambda a, pairs=pairs: _rescale_elements(a, d, pairs))
            if matches(ctx, o=o_alt[..., :n_q, :], lse=lse_alt[..., :n_q]):
                yield Cause(cid, (
                    f"the rescale of acc indexes the accumulator's elements with {how} (the output matches "
                    f"that, with key tiles of {tile}): for row g (r = 0) it multiplies elements "
                    f"{pairs[0][0]} and {pairs[0][1]}, for row g + 8 (r = 1) elements {pairs[1][0]} and "
                    f"{pairs[1][1]}. Row g holds elements 0 and 1, row g + 8 elements 2 and 3: multiply "
                    "acc[..][2r] and acc[..][2r + 1] by row r's alpha."))
        # The exponentials of one element of each pair left out (e < 2r + 1): the odd keys' P is the raw
        # score q·k (the zero-filled keys past n_k and the masked ones -INFINITY), and l leaves them out.
        s_full, v_full = replays.padded_to_tiles(s, v, tile, visible)
        for ends in replays.row_ends(ctx, visible, n_q, n_k, tile):
            with np.errstate(invalid="ignore", over="ignore"):
                o_alt, lse_alt = streamed(s_full, v_full, tile, p_for_acc=into_mma, row_end=ends,
                                          raw_keys=(np.arange(s_full.shape[-1]) % 2 == 1, 1.0 / ctx.inputs["scale"]))
            if matches(ctx, o=o_alt, lse=lse_alt):
                break
        else:
            o_alt = None
        if o_alt is not None:
            yield Cause("p:odd_elements_raw", (
                f"P of every odd key stays the raw score q·k (the output matches that, with key tiles of {tile}): "
                "the loop that exponentiates a row's elements, e = 2r and 2r + 1, stops after 2r, so those "
                "elements are never exponentiated nor added to l (a masked one, -INFINITY, turns acc into "
                "NaN). Run it over both: e < 2r + 2."))
        for parity, name in ((1, "odd"), (0, "even")):
            cols = np.arange(d) % 2 != parity                    # the columns that are rescaled
            o_alt, lse_alt = streamed(s, v, tile, visible=visible, rescale_acc=cols, p_for_acc=into_mma)
            if matches(ctx, o=o_alt, lse=lse_alt):
                yield Cause(f"rescale:acc_cols:{name}", (
                    f"the rescale of acc by alpha misses its {name} columns (the output matches that, "
                    f"with key tiles of {tile}): those keep earlier tiles' sums at their old scale when the "
                    "max grows. Each accumulator register of the row, both elements of every pair, is "
                    "multiplied by alpha."))


# The rescale of acc with one of its two indices written with r where 2r (or 2r + 1) is due: the
# elements it multiplies for r = 0 (row g) and r = 1 (row g + 8), and how the index was written.
RESCALE_ELEMENT_BUGS = (
    ("rescale:acc_index_r", ((0, 1), (1, 2)), "r and r + 1, not 2r and 2r + 1"),
    ("rescale:acc_index_r:second", ((0, 1), (2, 2)), "2r and r + 1, not 2r and 2r + 1"),
    ("rescale:acc_index_r:first", ((0, 1), (1, 3)), "r and 2r + 1, not 2r and 2r + 1"),
)


def _rescale_elements(alpha, d: int, pairs):
    """Each acc element's factor when row r's rescale multiplies the C fragment's elements pairs[r]
    (elements 0, 1: row g, columns 2t, 2t + 1; elements 2, 3: row g + 8): an element gets the alpha of
    every row whose pair names it, once per mention. alpha [..., rows], rows a multiple of 16."""
    rows = alpha.shape[-1]
    halves = alpha.reshape(alpha.shape[:-1] + (rows // 16, 2, 8))
    by_r = [np.broadcast_to(halves[..., r:r + 1, :], halves.shape).reshape(alpha.shape) for r in (0, 1)]
    lower = np.arange(rows) % 16 >= 8                     # the row is the g + 8 of its pair
    factor = np.ones(alpha.shape + (2,))                  # [..., rows, column parity]
    for r, pair in enumerate(pairs):
        for e in pair:
            half, parity = divmod(e, 2)
            factor[..., parity] *= np.where(lower == bool(half), by_r[r], 1.0)
    return factor[..., np.arange(d) % 2]


def operand_layout_causes(ctx, s, v, visible=None):
    """The second mma's products written to the wrong accumulator tiles, and K's 16×16 blocks read
    with their row and column block exchanged (ldmatrix of block16(kk, np) for block16(np, kk)),
    where those blocks stay in the K tile and the V tile stored after it (BLOCK_N <= d <= 2 BLOCK_N)."""
    d = v.shape[-1]
    if d % 16 == 0:
        # acc[dp] and acc[dp + 1] for acc[2dp] and acc[2dp + 1]: 8-feature tile t sums V's features
        # 16t .. 16t + 7 (t < d / 16) and 16t - 8 .. 16t - 1 (1 <= t <= d / 16); the rest stay 0.
        v_alt = np.zeros_like(np.asarray(v, np.float64))
        for t in range(d // 8):
            if t < d // 16:
                v_alt[..., 8 * t:8 * t + 8] += v[..., 16 * t:16 * t + 8]
            if 1 <= t <= d // 16:
                v_alt[..., 8 * t:8 * t + 8] += v[..., 16 * t - 8:16 * t]
        if matches(ctx, *attend(s, v_alt, visible)):
            yield Cause("fragment:acc_tile_index", (
                "the second mma writes feature block dp to acc[dp] and acc[dp + 1], not acc[2dp] and "
                "acc[2dp + 1] (the output matches that): each 16-feature block of V fills two 8-feature "
                "accumulator tiles, so they overlap and the upper half of o stays 0."))
    # Q's A fragments of MMA row tile 0 used for every row tile of the warp: rows warp_row + 16 mt + r
    # score with query warp_row + r (the mask still on the true row).
    q = np.asarray(ctx.inputs["q"], np.float64)
    n_q = q.shape[-2]
    for bm in tiles(ctx, "BLOCK_M"):
        for warps in tiles(ctx, "WARPS"):
            warp_m = bm // warps
            if warp_m <= 16 or warp_m % 16 or n_q <= 16:
                continue
            i = np.arange(n_q)
            src = (i // warp_m) * warp_m + i % 16
            q_pad = np.concatenate([q, np.zeros(q.shape[:-2] + (bm, q.shape[-1]))], axis=-2)
            alt = dict(ctx.inputs, q=q_pad[..., src, :])
            if matches(ctx, *attend(*scores(alt), visible)):
                yield Cause("fragment:q:row_tile_0", (
                    f"every MMA row tile of a warp scores with the queries of its first one (the output "
                    f"matches rows warp_row + 16 mt + r taking query warp_row + r, warps of {warp_m} rows): "
                    "q_fragment(a[mt], mt, kk) takes row tile mt."))
    # lse stored from the wrong lane: guarded by g == 0 (the quad's row), not t == 0 (one lane of
    # each quad), only rows 16k and 16k + 8 are written.
    lse_rows = (np.arange(n_q) % 8) == 0
    if n_q > 1 and replays.unwritten_as(ctx, {"lse": np.broadcast_to(~lse_rows, np.shape(ctx.out["lse"]))}):
        yield Cause("store:lse_guard", (
            "lse was written only at rows 16k and 16k + 8, exactly as a store guarded by g == 0 leaves it: "
            "lane l holds rows g = l / 4 and g + 8 of each MMA tile, and the 4 lanes of a quad share them, "
            "so one lane of every quad writes: t == 0 (t = l % 4)."))
    for bn in tiles(ctx, "BLOCK_N"):
        if not bn <= d <= 2 * bn or d % 16:
            continue            # the exchanged blocks stay inside the K tile and the V tile after it
        k, v_in = (np.asarray(ctx.inputs[x], np.float64) for x in ("k", "v"))
        n_k = k.shape[-2]
        pad = lambda x: np.concatenate([x, np.zeros(x.shape[:-2] + (-n_k % bn, d))], axis=-2)  # noqa: E731
        kp, vp = pad(k), pad(v_in)
        tiles_k = kp.reshape(kp.shape[:-2] + (-1, bn, d))
        # Row 16·kk + r of the K tile's addressing, past its bn rows, is the V tile's row (V follows K).
        source = np.concatenate([tiles_k, vp.reshape(tiles_k.shape)], axis=-2)          # [..., T, 2bn, d]
        k_alt = np.zeros_like(tiles_k)
        for np_ in range(bn // 16):
            for kk in range(d // 16):
                k_alt[..., 16 * np_:16 * np_ + 16, 16 * kk:16 * kk + 16] = \
                    source[..., 16 * kk:16 * kk + 16, 16 * np_:16 * np_ + 16]
        alt = dict(ctx.inputs, k=k_alt.reshape(kp.shape)[..., :n_k, :])
        if matches(ctx, *attend(*scores(alt), visible)):
            yield Cause("fragment:k:blocks_exchanged", (
                f"K's 16×16 blocks are read with their indices exchanged, block16(kk, np) for "
                f"block16(np, kk) (the output matches that, with key tiles of {bn}, the blocks past "
                f"the K tile read from the V tile after it): key block np "
                "pairs with feature block kk of Q, so it must be rows np, columns kk of the K tile."))


# Which element of an accumulator fragment a lane's test reads: element e of an m16n8 tile is row
# g + 8 (e / 2), key 2t + e % 2. With e / 2 and e % 2 exchanged in the row, in the key, or in both,
# the elements (g, 2t + 1) and (g + 8, 2t) are tested at each other's coordinates.
FRAGMENT_MASK_BUGS = (
    ("mask:fragment_row", True, False, "the row g + 8 · (e % 2), where g + 8 · (e / 2) is element e's row"),
    ("mask:fragment_key", False, True, "the key 2t + e / 2, where 2t + e % 2 is element e's key"),
    ("mask:fragment_row_and_key", True, True,
     "the row g + 8 · (e % 2) and the key 2t + e / 2 (e / 2 and e % 2 exchanged)"),
)


def fragment_mask_visible(n_q: int, n_k: int, block_m: int, block_n: int, row_bug: bool, key_bug: bool):
    """[n_q, n_k]: what a kernel with 06's masking lets each query see when its mask tests element e
    at the wrong row and/or key. The kernel visits the key tiles up to its query tile's diagonal and
    tests only the tiles that straddle it or hold the last, partial key tile."""
    offset = n_k - n_q
    i, j = np.arange(n_q)[:, None], np.arange(n_k)[None, :]
    upper = i % 16 < 8                           # the fragment's rows g (e = 0, 1), not g + 8
    swapped = (upper & (j % 2 == 1)) | (~upper & (j % 2 == 0))    # elements e = 1 and e = 2
    step = np.where(upper, 1, -1)
    i_t = np.where(swapped & row_bug, i + 8 * step, i)
    j_t = np.where(swapped & key_bug, j - step, j)
    first = (i // block_m) * block_m
    last = np.minimum(first + block_m, n_q) - 1
    tile = (j // block_n) * block_n
    visited = tile < np.clip(last + offset + 1, 0, n_k)
    tested = (tile + block_n - 1 > first + offset) | (tile + block_n > n_k)
    return visited & np.where(tested, (j_t < n_k) & (j_t <= i_t + offset), True)


def mask_fragment_causes(ctx, s, v):
    """A causal mask that tests element e of the accumulator fragment at another element's row or
    key (06's layout)."""
    p = ctx.params
    n_q, n_k = p["Nq"], p["Nk"]
    truth = replays.R.causal_mask(n_q, n_k)
    for cid, row_bug, key_bug, what in FRAGMENT_MASK_BUGS:
        for bm in tiles(ctx, "BLOCK_M"):
            for bn in tiles(ctx, "BLOCK_N"):
                vis = fragment_mask_visible(n_q, n_k, bm, bn, row_bug, key_bug)
                if (getattr(ctx, "probe", None) or not np.array_equal(vis, truth)) and matches(ctx, *attend(s, v, vis)):
                    yield Cause(cid, (
                        f"the causal test of element e reads {what} (the output matches that, with tiles "
                        f"of {bm} queries × {bn} keys): elements (g, 2t + 1) and (g + 8, 2t) are tested "
                        "at each other's coordinates. Element e of an m16n8 accumulator is row "
                        "g + 8 · (e / 2), key 2t + e % 2."))
                    break
            else:
                continue
            break


def shifted_mask_causes(ctx, s, v):
    """The per-element mask of key tile it tested with the previous tile's start, (it - 1) · BLOCK_N
    (06 and 10: the softmax told the wrong tile): from the second tile on a key is masked as the key
    BLOCK_N before it would be, and the tile-level test that decides whether to mask at all is the
    previous tile's too. Keys past n_k are the tile's zero fill (score 0, value 0)."""
    p = ctx.params
    n_q, n_k, causal = p["Nq"], p["Nk"], bool(p.get("causal"))
    offset = n_k - n_q
    dtype = p.get("dtype")
    into_mma = (lambda x: lowp.rounded(x, dtype)) if dtype else (lambda x: x)
    i = np.arange(n_q)[:, None]
    consumers = replays.kernel_config(getattr(ctx, "config", None), p).get("CONSUMERS")
    for bm in (64 * int(consumers),) if consumers else tiles(ctx, "BLOCK_M"):   # 10: 64 rows per consumer
        for bn in tiles(ctx, "BLOCK_N"):
            pad = -n_k % bn
            j = np.arange(n_k + pad)[None, :]
            tile = j // bn
            q_start, q_last = i // bm * bm, np.minimum(i // bm * bm + bm, n_q) - 1
            kv_end = np.minimum(n_k, q_last + offset + 1) if causal else np.full_like(i, n_k)
            shift = np.where(tile == 0, 0, bn)                 # tile 0 is masked by its own start
            start = (tile * bn) - shift
            applies = ((causal & (start + bn - 1 > q_start + offset)) | (start + bn > n_k)) | (tile == 0)
            key = j - shift
            masked = applies & ((key >= n_k) | (causal & (key > i + offset)))
            vis = (tile * bn < kv_end) & ~masked
            if tile.max() == 0:
                continue
            s_full = np.concatenate([s, np.zeros(s.shape[:-1] + (pad,))], axis=-1)
            v_full = np.concatenate([v, np.zeros(v.shape[:-2] + (pad, v.shape[-1]))], axis=-2)
            o_alt, lse_alt = streamed(s_full, v_full, bn, visible=vis, p_for_acc=into_mma)
            if matches(ctx, o=o_alt, lse=lse_alt):
                yield Cause("mask:previous_tile", (
                    f"from the second key tile on, the mask is tested as if the tile started {bn} keys "
                    f"earlier (the output matches key tile it masked with (it - 1) · BLOCK_N, tiles of {bm} "
                    f"queries × {bn} keys): keys past n_k count with score 0, and under causal the diagonal "
                    "moves by a tile. The softmax of tile it must mask with tile it's own start, it · "
                    "BLOCK_N."))
