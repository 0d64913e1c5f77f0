"""Block-sparse attention (module 08): mask patterns, the float64 reference, inputs, and the replays
of its bugs.

A block mask is [B, H, ceil(Nq / rows), ceil(Nk / cols)] of uint8, one byte per mask block of `rows`
queries × `cols` keys (block = (rows, cols)): query i sees key j iff

    block_mask[b, h, i // rows, j // cols] != 0   and (not causal or j <= i + Nk - Nq)

The pattern helpers return one head's mask, [ceil(Nq / rows), ceil(Nk / cols)] booleans; `for_heads`
stacks one over [B, H] as uint8. Patterns combine with | and &:

    m = local_window(n, n, (64, 64), window=256) | global_tokens(n, n, (64, 64), n_global=64)
    block_mask = for_heads(m, B, H)
"""
from __future__ import annotations

import numpy as np

from ..runtimes.base import is_poison

from ..spec import Cause, Seen
from . import references as R
from . import replays, weights
from .inputs import attention_inputs
from .replays import attend, matches, rel, tiles


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def mask_shape(n_q: int, n_k: int, block) -> tuple[int, int]:
    """(ceil(Nq / rows), ceil(Nk / cols)): the blocks of one head's mask."""
    return cdiv(n_q, block[0]), cdiv(n_k, block[1])


# ---- patterns: one head's mask, [ceil(Nq / rows), ceil(Nk / cols)] booleans ----------------------

def _ranges(n: int, size: int, shift: int = 0):
    """First and last index of each block of `size` over n positions (+ shift), as two arrays."""
    first = np.arange(cdiv(n, size)) * size
    return first + shift, np.minimum(first + size, n) - 1 + shift


def full(n_q: int, n_k: int, block) -> np.ndarray:
    """Every block kept: plain attention."""
    return np.ones(mask_shape(n_q, n_k, block), bool)


def local_window(n_q: int, n_k: int, block, window: int) -> np.ndarray:
    """The blocks holding a key within `window` positions of a query, both ways. Queries are placed
    bottom-right as in causal masks (query i at position i + Nk - Nq), so Nq < Nk means the last
    queries of a sequence."""
    p0, p1 = _ranges(n_q, block[0], n_k - n_q)           # query positions of each query block
    c0, c1 = _ranges(n_k, block[1])                      # keys of each key block
    return (c0[None, :] <= p1[:, None] + window) & (c1[None, :] >= p0[:, None] - window)


def causal_blocks(n_q: int, n_k: int, block) -> np.ndarray:
    """The blocks a bottom-right causal mask touches (some key j <= i + Nk - Nq). Alone it is
    block-causal attention (whole blocks on the diagonal); with causal=True the kernel cuts the
    diagonal blocks element by element."""
    p1 = _ranges(n_q, block[0], n_k - n_q)[1]            # the last query position of each query block
    c0 = _ranges(n_k, block[1])[0]                       # the first key of each key block
    return c0[None, :] <= p1[:, None]


def global_tokens(n_q: int, n_k: int, block, n_global: int) -> np.ndarray:
    """The first n_global tokens are global: every query sees them (the key blocks that hold them),
    and they see every key (the query blocks that hold them)."""
    m = np.zeros(mask_shape(n_q, n_k, block), bool)
    m[:, :cdiv(min(n_global, n_k), block[1])] = True
    m[:cdiv(min(n_global, n_q), block[0]), :] = True
    return m


def strided(n_q: int, n_k: int, block, stride: int) -> np.ndarray:
    """Every stride-th key block (the last of each group of `stride`), for every query block: the
    "summary" columns of a strided sparse transformer."""
    m = np.zeros(mask_shape(n_q, n_k, block), bool)
    m[:, stride - 1::stride] = True
    return m


def random_blocks(n_q: int, n_k: int, block, density: float, rng: np.random.Generator) -> np.ndarray:
    """Each block kept with probability `density`, independently."""
    return rng.random(mask_shape(n_q, n_k, block)) < density


def for_heads(mask: np.ndarray, B: int, H: int) -> np.ndarray:
    """One head's mask (or [H, ...], or [B, H, ...]) broadcast to [B, H, ...] uint8, contiguous."""
    mask = np.asarray(mask)
    return np.ascontiguousarray(np.broadcast_to(mask != 0, (B, H) + mask.shape[-2:])).astype(np.uint8)


def density(block_mask) -> float:
    """The share of blocks kept."""
    return float((np.asarray(block_mask) != 0).mean())


# ---- from blocks to elements, and the reference -------------------------------------------------

def expand(block_mask, block, n_q: int, n_k: int) -> np.ndarray:
    """[..., Nq, Nk] booleans: element (i, j) is in a kept block."""
    bm = np.asarray(block_mask) != 0
    return bm[..., (np.arange(n_q) // block[0])[:, None], (np.arange(n_k) // block[1])[None, :]]


def visible(block_mask, block, n_q: int, n_k: int, causal: bool = False) -> np.ndarray:
    """[..., Nq, Nk] booleans: query i sees key j (its block kept, and j <= i + Nk - Nq if causal)."""
    vis = expand(block_mask, block, n_q, n_k)
    return vis & R.causal_mask(n_q, n_k) if causal else vis


def attention(q, k, v, scale, block_mask, block, causal: bool = False):
    """Block-sparse attention in float64 -> (o [B, H, Nq, d], lse [B, H, Nq]). Rows that see no key
    give o = 0 and lse = -inf."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, H, n_q, d = q.shape
    Hkv, n_k = k.shape[1], k.shape[2]
    vis = visible(block_mask, block, n_q, n_k, causal)
    o, lse = np.zeros((B, H, n_q, d)), np.zeros((B, H, n_q))
    for b in range(B):
        for h in range(H):
            g = R.kv_head_of(h, H, Hkv)
            p, lse[b, h] = R.masked_softmax(scale * (q[b, h] @ k[b, g].T), vis[b, h])
            o[b, h] = p @ v[b, g]
    return o, lse


def attention_direct(q, k, v, scale, block_mask, block, causal: bool = False):
    """The textbook formula with the block test written out, one score at a time (slow; for tests)."""
    import math
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, H, n_q, d = q.shape
    Hkv, n_k = k.shape[1], k.shape[2]
    o, lse = np.zeros((B, H, n_q, d)), np.full((B, H, n_q), -np.inf)
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            for i in range(n_q):
                keys = [j for j in range(n_k) if block_mask[b, h, i // block[0], j // block[1]]
                        and (not causal or j <= i + n_k - n_q)]
                if not keys:
                    continue
                s = [scale * float(q[b, h, i] @ k[b, g, j]) for j in keys]
                top = max(s)
                w = [math.exp(x - top) for x in s]
                for wj, j in zip(w, keys):
                    o[b, h, i] += wj / sum(w) * v[b, g, j]
                lse[b, h, i] = top + math.log(sum(w))
    return o, lse


# ---- which tiles a kernel runs ------------------------------------------------------------------

SKIPPED, PER_ELEMENT, FULL = 0, 1, 2


def tile_classes(mask, block, n_q: int, n_k: int, tile=(64, 64), causal: bool = False) -> np.ndarray:
    """One head's mask [ceil(Nq / rows), ceil(Nk / cols)] -> [ceil(Nq / BLOCK_M), ceil(Nk / BLOCK_N)]:
    SKIPPED (no block of the tile's rectangle kept, or past the causal end), PER_ELEMENT (some kept
    and some not, on the causal diagonal, or the last, partial key tile) or FULL, as the module's
    kernel decides."""
    mask = np.asarray(mask) != 0
    bm, bn = tile
    off = n_k - n_q
    out = np.zeros((cdiv(n_q, bm), cdiv(n_k, bn)), int)
    for a in range(out.shape[0]):
        q0, q_last = a * bm, min((a + 1) * bm, n_q) - 1
        kv_end = min(n_k, q_last + off + 1) if causal else n_k
        rect_rows = mask[q0 // block[0]:q_last // block[0] + 1]
        for t in range(out.shape[1]):
            k0 = t * bn
            if k0 >= kv_end:
                continue
            rect = rect_rows[:, k0 // block[1]:(min(k0 + bn, n_k) - 1) // block[1] + 1]
            if not rect.any():
                continue
            edge = (not rect.all()) or k0 + bn > n_k or (causal and k0 + bn - 1 > q0 + off)
            out[a, t] = PER_ELEMENT if edge else FULL
    return out


def tile_rects(block_mask, block, n_q: int, n_k: int, tile, ends=None) -> tuple[np.ndarray, np.ndarray] | None:
    """Per kernel tile: is any mask block of its rectangle kept, are all kept -> two [B, H, Nq, Nk]
    boolean arrays, each element carrying its tile's answer. ends: the divisors of the rectangle's
    first row, last row, first column and last column (default: block[0], block[0], block[1],
    block[1]); None back when such a rectangle would leave the mask (a kernel would read another
    head's bytes, or fault). An empty rectangle keeps nothing."""
    bm = np.asarray(block_mask) != 0
    tm, tn = tile
    dr0, dr1, dc0, dc1 = ends or (block[0], block[0], block[1], block[1])
    nt_q, nt_k = cdiv(n_q, tm), cdiv(n_k, tn)
    any_t = np.zeros(bm.shape[:2] + (nt_q, nt_k), bool)
    all_t = np.zeros_like(any_t)
    for a in range(nt_q):
        r0, r1 = a * tm // dr0, (min((a + 1) * tm, n_q) - 1) // dr1
        for t in range(nt_k):
            c0, c1 = t * tn // dc0, (min((t + 1) * tn, n_k) - 1) // dc1
            if max(r0, r1) >= bm.shape[-2] or max(c0, c1) >= bm.shape[-1]:
                return None
            rect = bm[:, :, r0:r1 + 1, c0:c1 + 1]
            any_t[:, :, a, t] = rect.any(axis=(-1, -2))
            all_t[:, :, a, t] = rect.all(axis=(-1, -2))
    ti, tj = (np.arange(n_q) // tm)[:, None], (np.arange(n_k) // tn)[None, :]
    return any_t[..., ti, tj], all_t[..., ti, tj]


# ---- inputs of the checks ------------------------------------------------------------------------

PATTERNS = ("full", "random", "empty_rows", "single", "local", "strided", "causal_blocks", "late_holes", "late_only")


def block_mask_for(p: dict, rng: np.random.Generator) -> np.ndarray:
    """[B, H, ...] uint8 for the case parameters: pattern, block (mb_m, mb_n), density, window ..."""
    B, H, n_q, n_k = p["B"], p["H"], p["Nq"], p["Nk"]
    block = (p["mb_m"], p["mb_n"])
    shape = (B, H) + mask_shape(n_q, n_k, block)
    pattern = p.get("pattern", "random")
    if pattern == "full":
        m = for_heads(full(n_q, n_k, block), B, H)
    elif pattern == "random":
        m = (rng.random(shape) < p.get("density", 0.5)).astype(np.uint8)
    elif pattern == "empty_rows":
        # Random blocks, then every third row of blocks emptied, and the last head of all emptied.
        m = (rng.random(shape) < p.get("density", 0.5)).astype(np.uint8)
        m[:, :, 1::3, :] = 0
        if B * H >= 2:
            m[B - 1, H - 1] = 0
    elif pattern == "single":
        m = np.zeros(shape, np.uint8)
        cols = rng.integers(0, shape[3], size=shape[:3])
        np.put_along_axis(m, cols[..., None], 1, axis=-1)
    elif pattern == "local":
        m = for_heads(local_window(n_q, n_k, block, p.get("window", 64)), B, H)
    elif pattern == "strided":
        m = for_heads(strided(n_q, n_k, block, p.get("stride", 3))
                      | global_tokens(n_q, n_k, block, p.get("n_global", block[1])), B, H)
    elif pattern == "causal_blocks":
        m = for_heads(causal_blocks(n_q, n_k, block), B, H)
    elif pattern in ("late_holes", "late_only"):
        # Every other block of the last block row of each 64 query rows, a tile's last mask cells: the
        # only ones dropped (late_holes) or the only ones kept (late_only). A scan that stops early
        # never reads them, so it calls the first tile fully kept and skips the second.
        late = np.zeros(shape, bool)
        last = max(64 // block[0], 1) - 1
        late[:, :, last::last + 1, 1::2] = True
        m = (late if pattern == "late_only" else ~late).astype(np.uint8)
    else:
        raise ValueError(f"unknown mask pattern {pattern!r} (one of {PATTERNS})")
    # Any nonzero byte means kept: the kernel must test != 0, not == 1. Half the kept bytes are 1 and
    # half are 2 .. 255, so a test against 1 keeps some blocks and drops others, which no other bug does.
    kept = np.where(rng.random(shape) < 0.5, 1, rng.integers(2, 256, size=shape))
    return np.where(m != 0, kept, 0).astype(np.uint8)


def inputs(p: dict, rng: np.random.Generator) -> dict:
    """q, k, v, scale as for plain attention, plus block_mask [B, H, ...] uint8."""
    x = attention_inputs(p, rng)
    x["block_mask"] = block_mask_for(p, rng)
    return x


def reference(x: dict, p: dict) -> dict:
    o, lse = attention(x["q"], x["k"], x["v"], x["scale"], x["block_mask"], (p["mb_m"], p["mb_n"]),
                       bool(p.get("causal")))
    return {"o": o, "lse": lse}


# ---- diagnosis -----------------------------------------------------------------------------------

def _block_words(p) -> str:
    return f"mask blocks of {p['mb_m']} × {p['mb_n']}"


def bad_row_mask(ctx) -> np.ndarray:
    """[B, H, Nq] booleans: rows where o or lse is off (NaN, a -inf mismatch, or beyond noise)."""
    o, lse = np.asarray(ctx.out["o"], np.float64), np.asarray(ctx.out["lse"], np.float64)
    ro, rl = ctx.ref["o"], ctx.ref["lse"]
    scale = max(float(np.abs(ro).max(initial=0)), 1e-6)
    with np.errstate(invalid="ignore"):
        bad_o = ~((np.abs(o - ro) <= 1e-4 * scale) | (o == ro)).all(axis=-1)
        bad_l = ~((lse == rl) | (np.abs(lse - rl) <= 1e-4 * np.maximum(1.0, np.abs(np.where(np.isfinite(rl), rl, 0)))))
    return bad_o | bad_l


def empty_row_cause(ctx, nan_only: bool):
    """Rows whose blocks are all masked (or, causal, that come before every key): NaN, or anything but
    o = 0 and lse = -inf while the other rows are right."""
    empty = np.isneginf(ctx.ref["lse"])
    if not empty.any() or any(is_poison(ctx.out[n]).any() for n in ctx.cmp):
        return          # elements never written (the grader's NaN): the generic checks say where
    o, lse = np.asarray(ctx.out["o"], np.float64), np.asarray(ctx.out["lse"], np.float64)
    nan_rows = np.isnan(o[empty]).any() or np.isnan(lse[empty]).any()
    bad = bad_row_mask(ctx)
    if bad[~empty].any() or not bad[empty].any() or (nan_only and not nan_rows):
        return                  # only the rows without a visible key may be wrong
    b, h, i = (int(x) for x in np.argwhere(empty)[0])
    why = "every block of its mask row is masked"
    if ctx.params.get("causal") and ctx.params["Nq"] > ctx.params["Nk"]:
        why += " or, causal, it comes before every key"
    where = f"{int(empty.sum())} such rows, first o[{b}, {h}, {i}]: {why}"
    if nan_rows:
        yield Cause("empty_rows:nan", f"rows with no visible key give NaN ({where}). Such a row skips every key tile or masks "
                "every score, so its running max stays -INFINITY: exponentiate against 0 while m_new is "
                "-INFINITY (exp2(-inf - -inf) is NaN), keep l = 0, and write o = 0 and lse = -INFINITY when "
                "l = 0 (guard the final 1/l).")
        return
    what = "a finite lse" if np.isfinite(lse[empty]).any() else "a nonzero output"
    yield Seen(f"the rows with no visible key, and only they, are wrong: they give {what} ({where}), where "
               "o = 0 and lse = -inf are due.")


def _flat_reads(bm: np.ndarray, row_stride: int, col_stride: int) -> np.ndarray | None:
    """The mask as a kernel reads it with the given strides inside one head's slab, or None when
    such reads would leave the slab."""
    nr, nc = bm.shape[-2:]
    idx = np.arange(nr)[:, None] * row_stride + np.arange(nc)[None, :] * col_stride
    if idx.max(initial=0) >= nr * nc:
        return None
    return bm.reshape(bm.shape[:-2] + (nr * nc,))[..., idx]


def mask_causes(ctx, s, v):
    """The mask read wrongly: transposed, with kernel-tile coordinates, of the wrong head or batch,
    partial tiles without their per-element test, or skipped."""
    p = ctx.params
    n_q, n_k, causal = p["Nq"], p["Nk"], bool(p.get("causal"))
    block = (p["mb_m"], p["mb_n"])
    bm = np.asarray(ctx.inputs["block_mask"]) != 0
    nr, nc = bm.shape[-2:]
    truth = visible(bm, block, n_q, n_k, causal)
    cm = R.causal_mask(n_q, n_k) if causal else np.ones((n_q, n_k), bool)

    def hit(vis):
        # o only: a case of one query row has one lse per head, a constant that names no replay.
        return (getattr(ctx, "probe", None) or not np.array_equal(vis, truth)) and matches(ctx, *attend(s, v, vis))

    # Transposed: byte (br, bc) read at bc · stride + br.
    for stride, how in ((nc, "mask[bc * n_mb_k + br]"), (nr, "mask[bc * n_mb_q + br]")):
        alt = _flat_reads(bm, 1, stride)
        if alt is not None and hit(expand(alt, block, n_q, n_k) & cm):
            yield Cause("block_mask:transposed", f"the block mask is read transposed ({how}, the output matches it): query block br, "
                    f"key block bc is byte br · n_mb_k + bc of the head's mask, row br for the queries "
                    f"i / mb_rows, column bc for the keys j / mb_cols.")
    # Another batch entry's or head's mask.
    if p["B"] > 1 and hit(visible(np.broadcast_to(bm[:1], bm.shape), block, n_q, n_k, causal)):
        yield Cause("index_drop:batch:block_mask", "every batch entry reads batch 0's block mask: the mask's index is missing its batch term "
                "(the mask of (b, h) starts at (b · H + h) · n_mb_q · n_mb_k).")
    if p["H"] > 1 and hit(visible(np.broadcast_to(bm[:, :1], bm.shape), block, n_q, n_k, causal)):
        yield Cause("index_drop:head:block_mask", "every head reads head 0's block mask: the mask's index is missing its head term "
                "(the mask of (b, h) starts at (b · H + h) · n_mb_q · n_mb_k; query head h, not its kv head).")
    if p["H"] != p["Hkv"]:
        group = p["H"] // p["Hkv"]
        heads = [h // group for h in range(p["H"])]
        # The kv head's slab with the query heads' batch stride, (b · H + h_kv), or the kv heads' own,
        # (b · Hkv + h_kv) of the [B · H] slabs.
        slabs = bm.reshape((-1,) + bm.shape[2:])
        kv_slab = slabs[[b * p["Hkv"] + h for b in range(p["B"]) for h in heads]].reshape(bm.shape)
        if hit(visible(bm[:, heads], block, n_q, n_k, causal)) or hit(visible(kv_slab, block, n_q, n_k, causal)):
            yield Cause("block_mask:kv_head", "the block mask is read at the kv head h / (H / Hkv): the mask has one slab per query "
                    "head, [B, H, ...], so index it with h.")
    # Kept bytes compared with 1: everywhere, or only in the per-element test of partial tiles.
    ones = np.asarray(ctx.inputs["block_mask"]) == 1
    if (ones != bm).any():
        if hit(visible(ones, block, n_q, n_k, causal)):
            yield Cause("block_mask:equals_one", "the mask's bytes are compared with 1 (== 1), but any nonzero byte means kept: blocks "
                    "holding 2 .. 255 are dropped. Test mask != 0.")
        for tm in tiles(ctx, "BLOCK_M"):
            for tn in tiles(ctx, "BLOCK_N"):
                any_t, all_t = tile_rects(bm, block, n_q, n_k, (tm, tn))
                if hit((all_t & truth) | (any_t & ~all_t & expand(ones, block, n_q, n_k) & cm)):
                    yield Cause("block_mask:equals_one_partial", "the per-element test of partial tiles compares the mask's bytes with 1 (== 1 or "
                            "!= 1), but any nonzero byte means kept: test mask[i / mb_rows][j / mb_cols] != 0 "
                            "(== 0 for a dropped block).")
    for tm in tiles(ctx, "BLOCK_M"):
        for tn in tiles(ctx, "BLOCK_N"):
            any_t, all_t = tile_rects(bm, block, n_q, n_k, (tm, tn))
            # Read at (query tile, key tile) instead of (query block, key block).
            tile_coords = ((tm, tn) != block and cdiv(n_q, tm) <= nr and cdiv(n_k, tn) <= nc
                           and expand(bm, (tm, tn), n_q, n_k) & cm)
            # Partial tiles run whole: no per-element block test.
            if hit(any_t & cm):
                also = ("" if tile_coords is False or not np.array_equal(tile_coords, any_t & cm) else
                        " (Or the mask is read with kernel-tile coordinates: in this shape the two give the "
                        "same output.)")
                yield Cause("block_mask:partial_tiles_untested", f"tiles whose mask blocks are only partly kept run without the per-element block test "
                        f"(the output matches tiles of {tm} queries × {tn} keys computed whole whenever one of "
                        f"their {_block_words(p)} is kept): either such a tile is never marked partial, or the "
                        f"test that partial guards is missing. A tile is partial when kept < (br1 - br0 + 1) · "
                        f"(bc1 - bc0 + 1), the count of mask blocks it touches, both ends inclusive; a partial "
                        f"tile needs the per-element test: s = -INFINITY where mask[i / mb_rows][j / mb_cols] "
                        f"== 0." + also)
            # A tile's rectangle of mask blocks with one end divided by the other dimension's block:
            # the tile is skipped, run whole or run with the per-element test by the wrong blocks.
            if block[0] != block[1]:
                for which, ends in (("br0", (block[1], block[0], block[1], block[1])),
                                    ("br1", (block[0], block[1], block[1], block[1])),
                                    ("bc0", (block[0], block[0], block[0], block[1])),
                                    ("bc1", (block[0], block[0], block[1], block[0]))):
                    rect = tile_rects(bm, block, n_q, n_k, (tm, tn), ends)
                    # kept == 0 skips the tile first (an empty rectangle too); then all kept: run whole.
                    if rect is not None and hit(rect[0] & np.where(rect[1], cm, truth)):
                        right, wrong, first = (("mb_rows", "mb_cols", "q_start") if which[1] == "r" else
                                               ("mb_cols", "mb_rows", "kv_start"))
                        yield Cause(f"block_mask:rect:{which}_other_block", (
                            f"{which} is divided by {wrong}, where {right} is due (the output matches tiles of "
                            f"{tm} queries × {tn} keys that choose to skip, run whole or test each element "
                            f"from that rectangle of the mask): rows of the mask are mb_rows queries tall, "
                            f"its columns mb_cols keys wide, so a tile covers mask rows q_start / mb_rows .. "
                            f"q_last / mb_rows and columns kv_start / mb_cols .. (kv_end_of_tile - 1) / mb_cols."))
            # Partial tiles skipped.
            if hit(all_t & truth):
                # What the output shows is that such tiles add nothing: skipped, or run with every key
                # hidden by the per-element test (blind batch 46's 08, `partial || dropped`), alike.
                yield Cause("block_mask:partial_tiles_skipped", f"tiles whose mask blocks are only partly kept add nothing, their kept keys "
                        f"included (the output matches tiles of {tm} queries × {tn} keys that count only when "
                        f"all of their {_block_words(p)} are kept): such a tile is skipped, or its per-element "
                        "test hides every key. Skip a tile only when none of its mask blocks is kept; when "
                        "some are, run it, and hide only the keys of its dropped blocks.")
            if tile_coords is not False and hit(tile_coords):
                yield Cause("block_mask:tile_coords", f"the mask is read with kernel-tile coordinates (q_start / BLOCK_M, kv_start / "
                        f"BLOCK_N, tiles of {tm} queries × {tn} keys), but its blocks are {block[0]} × "
                        f"{block[1]}: the output matches that misreading. Index the mask with mask-block "
                        f"coordinates, row i / mb_rows and column j / mb_cols: a tile covers the mask blocks "
                        f"q_start / mb_rows .. q_last / mb_rows by kv_start / mb_cols .. "
                        f"(kv_end_of_tile - 1) / mb_cols.")
            if causal:
                diag = (np.arange(n_k)[None, :] // tn * tn + tn - 1) > (np.arange(n_q)[:, None] // tm * tm
                                                                       + n_k - n_q)
                if hit(any_t & cm & np.where(diag, True, expand(bm, block, n_q, n_k))):
                    yield Cause("block_mask:diagonal_tiles_unmasked", f"on the tiles that straddle the causal diagonal the block mask is not applied: "
                            f"the output matches tiles of {tm} queries × {tn} keys whose per-element test "
                            f"there checks only j <= i + (Nk - Nq). On a diagonal tile that is also partial, "
                            f"both tests apply: s = -INFINITY where j > i + offset or the key's mask block "
                            f"is 0.")
                lim = replays.tile_limits(n_q, n_k, tm, tn, lambda first, last: last)
                if hit(expand(bm, block, n_q, n_k) & replays.visible_where(n_q, n_k, lim)):
                    yield Cause("mask:diagonal_tiles_unmasked", f"keys above the causal diagonal are counted in the tiles that straddle it (the "
                            f"output matches tiles of {tm} queries × {tn} keys with the block mask but without "
                            f"j <= i + (Nk - Nq) per element). The per-element test needs the causal term "
                            f"too: s = -INFINITY where causal && j > i + offset.")
    if causal:
        i = np.arange(n_q)
        kept = expand(bm, block, n_q, n_k)
        if hit(kept & replays.visible_where(n_q, n_k, i + n_k - n_q)):
            yield Cause("mask:diagonal_excluded", "the diagonal itself is masked: query i must see key i + (Nk - Nq) too (when its block is "
                    "kept). The causal test is j <= i + offset (mask j > i + offset), not j < i + offset.")
        if hit(kept & replays.visible_where(n_q, n_k, i + n_k - n_q + 2)):
            yield Cause("mask:one_extra", "each query sees one key too many past the causal diagonal: mask j > i + offset, where "
                    "offset = Nk - Nq (key i + offset + 1 is in the future).")
        if n_q != n_k and hit(expand(bm, block, n_q, n_k) & replays.visible_where(n_q, n_k, i + 1)):
            yield Cause("mask:top_left", f"the causal mask is aligned top-left (j <= i). It must be aligned bottom-right: query i "
                    f"sees key j iff j <= i + (Nk - Nq), here i + {n_k - n_q}.")
        if hit(expand(bm, block, n_q, n_k) & np.ones((n_q, n_k), bool)):
            yield Cause("mask:causal_ignored", "causal=True is ignored: the output matches the block mask alone. Under causal a key must "
                    "also satisfy j <= i + (Nk - Nq), bottom-right.")
    if hit(np.broadcast_to(cm, truth.shape)):
        yield Cause("block_mask:ignored", "the block mask is not applied at all: the output matches attention over every key"
                + (" (with the causal mask)" if causal else "") + ". Skip a tile when none of its mask "
                "blocks is kept, and test mask[i / mb_rows][j / mb_cols] per element in a partial tile.")
    return


def _strided_reads(bm: np.ndarray, row_stride: int, col_stride: int) -> list[np.ndarray]:
    """Each head's mask as a kernel reads it with these strides from the head's slab start. Reads
    past the whole mask find the allocation's padding, 0 or not: one array for each (a fault, where
    the emulator catches one, is the case's verdict before any replay)."""
    nr, nc = bm.shape[-2:]
    idx = (np.arange(bm.shape[0] * bm.shape[1]).reshape(bm.shape[:2])[..., None, None] * nr * nc
           + np.arange(nr)[:, None] * row_stride + np.arange(nc)[None, :] * col_stride)
    pads = (False, True) if idx.max() >= bm.size else (False,)
    return [np.concatenate([bm.reshape(-1), np.full(idx.max() + 1, pad)])[idx] for pad in pads]


def decided_visible(bm, block, n_q: int, n_k: int, tile, causal: bool, class_mask=None,
                    count_columns_only: bool = False, element_col_in_tile: bool = False,
                    element_col_block: int | None = None, element_row_stride: int | None = None,
                    element_row_block: int | None = None, element_col_mod: bool = False,
                    rect_rows_from_tile: bool = False,
                    rect_row_block: int | None = None, element_inverted: bool = False,
                    pad: bool = False, kept_last_only: bool = False, rect_cols_short: bool = False,
                    rect_row_start_up: bool = False, scan_first_column: bool = False,
                    skip_breaks: bool = False) -> np.ndarray:
    """[B, H, Nq, Nk]: what the module's kernel lets each query see, tile by tile: a key tile is
    skipped when no block of its rectangle is kept, runs the per-element block test when some are
    not (partial), and runs whole otherwise; the causal test applies everywhere. The variants are a
    student's misreadings: the rectangle's bytes read from `class_mask` (another layout), a tile
    called partial only when fewer blocks are kept than it has mask columns, and the per-element
    test reading the key's column within its tile, or dividing it by `element_col_block` (the query's
    row by `element_row_block`), or stepping
    from one mask row to the next by `element_row_stride` bytes, or testing for a kept block where a
    dropped one is due (`element_inverted`), and the rectangle's rows found by dividing the tile's
    rows by `rect_row_block` (reads past the whole mask find `pad`, the allocation's padding), the
    count of kept blocks holding only the rectangle's last block (`kept_last_only`: = where += is
    due), the scan of its columns stopping one short (`rect_cols_short`: bc < bc1), or its first row
    rounded up (`rect_row_start_up`: cdiv(q_start, mb_rows)), every column of the scan reading the
    first one (`scan_first_column`: bc0 where bc is due), and a skipped tile ending the loop over
    key tiles (`skip_breaks`: break where continue is due); the element test reading j % mb_cols
    (`element_col_mod`), and the rectangle's last row from the tile's height (`rect_rows_from_tile`)."""
    class_mask = bm if class_mask is None else class_mask
    tm, tn = tile
    off = n_k - n_q
    cm = R.causal_mask(n_q, n_k) if causal else np.ones((n_q, n_k), bool)
    vis = np.zeros(bm.shape[:2] + (n_q, n_k), bool)
    slabs = np.arange(bm.shape[0] * bm.shape[1]).reshape(bm.shape[:2]) * bm.shape[-1] * bm.shape[-2]
    for q0 in range(0, n_q, tm):
        q1 = min(q0 + tm, n_q)
        stopped = np.zeros(bm.shape[:2], bool)          # skip_breaks: the loop has ended
        r0, r1 = q0 // (rect_row_block or block[0]), (q1 - 1) // (rect_row_block or block[0])
        if rect_row_start_up:
            r0 = cdiv(q0, block[0])
        if rect_rows_from_tile:     # the rectangle's last row from the tile's height, not its last row
            r1 = r0 + tm // block[0] - 1
        kv_end = min(n_k, q1 + off) if causal else n_k
        for k0 in range(0, kv_end, tn):
            k1 = min(k0 + tn, n_k)
            c0, c1 = k0 // block[1], (k1 - 1) // block[1]
            if rect_row_block or rect_rows_from_tile:   # rows past the head's mask read on, through the flat buffer
                at = (np.arange(r0, r1 + 1)[:, None] * bm.shape[-1] + np.arange(c0, c1 + 1)[None, :])
                flat = np.concatenate([class_mask.reshape(-1), np.full(at.max(initial=0) + 1, pad)])
                kept = flat[slabs[..., None, None] + at].sum(axis=(-1, -2))
            elif kept_last_only:
                kept = (class_mask[..., r1, c1] != 0).astype(int) if r0 <= r1 else np.zeros(bm.shape[:2], int)
            elif scan_first_column:
                kept = (c1 - c0 + 1) * class_mask[..., r0:r1 + 1, c0].sum(axis=-1)
            else:
                kept = class_mask[..., r0:r1 + 1, c0:c1 + (0 if rect_cols_short else 1)].sum(axis=(-1, -2))
            blocks = (c1 - c0 + 1) * (1 if count_columns_only else max(r1 - r0 + 1, 0))
            partial = (kept < blocks)[..., None, None]
            cols = np.arange(k0, k1) - (k0 if element_col_in_tile else 0)
            # Read as the kernel does, from the head's slab start: a column past the row reads on.
            at = ((np.arange(q0, q1) // (element_row_block or block[0]))[:, None] * (element_row_stride or bm.shape[-1])
                  + ((cols % block[1]) if element_col_mod else (cols // (element_col_block or block[1])))[None, :])
            element = np.concatenate([bm.reshape(-1), np.full(at.max() + 1, pad)])[slabs[..., None, None] + at]
            if element_inverted:
                element = ~element
            if skip_breaks:
                stopped |= kept == 0
            vis[..., q0:q1, k0:k1] = (np.where(partial, element, True) & cm[q0:q1, k0:k1]
                                      & ((kept > 0) & ~stopped)[..., None, None])
    return vis


def tile_decision_causes(ctx, s, v):
    """The kernel's per-tile decision misread: the rectangle's bytes read with the row stride
    n_mb_q or transposed, a tile called partial by a count of columns only, the per-element test
    reading the key's column within its tile, dividing it by mb_rows, or stepping between mask rows
    by n_mb_q."""
    p = ctx.params
    n_q, n_k, causal = p["Nq"], p["Nk"], bool(p.get("causal"))
    block = (p["mb_m"], p["mb_n"])
    bm = np.asarray(ctx.inputs["block_mask"]) != 0
    nr, nc = bm.shape[-2:]
    truth = visible(bm, block, n_q, n_k, causal)
    variants = []
    for cid, (row_stride, col_stride), text in (
            ("block_mask:row_stride_n_mb_q", (nr, 1),
             "the bytes of a tile's rectangle are read as mask[br · n_mb_q + bc], with the number of mask "
             "rows as the row stride: the mask of a head is n_mb_q rows of n_mb_k bytes, byte "
             "br · n_mb_k + bc"),
            ("block_mask:transposed", (1, nc),
             "the bytes of a tile's rectangle are read transposed, mask[bc · n_mb_k + br], when the "
             "kernel decides whether to skip the tile: byte br · n_mb_k + bc is query block br, key "
             "block bc"),
            ("block_mask:transposed", (1, nr),
             "the bytes of a tile's rectangle are read transposed, mask[bc · n_mb_q + br], when the "
             "kernel decides whether to skip the tile: byte br · n_mb_k + bc is query block br, key "
             "block bc")):
        if (row_stride, col_stride) == (nc, 1):
            continue
        variants += [(cid, dict(class_mask=alt), text) for alt in _strided_reads(bm, row_stride, col_stride)]
    variants += [("block_mask:partial_count_columns", dict(count_columns_only=True),
                 "a tile is called partial only when fewer of its rectangle's blocks are kept than it "
                 "has mask columns (bc1 - bc0 + 1), so a rectangle of several mask rows with some blocks "
                 "dropped runs whole: it has (br1 - br0 + 1) · (bc1 - bc0 + 1) blocks"),
                ("block_mask:element_col_in_tile", dict(element_col_in_tile=True),
                 "the per-element test reads the key's mask block from its column within the tile, "
                 "(j - kv_start) / mb_cols, not from the key's own index: key j's block is j / mb_cols")]
    if block[0] != block[1]:
        variants += [("block_mask:element_col_by_rows", dict(element_col_block=block[0], pad=pad),
                      "the per-element test divides the key's index by mb_rows, mask_i[j / mb_rows]: "
                      "key j's mask block is j / mb_cols") for pad in (False, True)]
    variants += [("block_mask:element_col_mod", dict(element_col_mod=True, pad=pad),
                  "the per-element test reads the key's mask byte at j % mb_cols, the key's place inside its "
                  "block: key j's mask block is j / mb_cols") for pad in (False, True)]
    variants += [("block_mask:rect_rows_from_tile_height", dict(rect_rows_from_tile=True, pad=pad),
                  "the last mask row of a tile's rectangle is found from the tile's height, br0 + BLOCK_M / "
                  "mb_rows - 1, not from its last row, q_last / mb_rows") for pad in (False, True)]
    variants += [("block_mask:element_test_inverted", dict(element_inverted=True),
                  "in a partial tile the per-element test masks the keys whose mask block is kept, "
                  "mask_i[j / mb_cols] != 0, and lets the dropped ones through: s = -INFINITY where the "
                  "byte is 0")]
    if block[0] != block[1]:
        variants += [("block_mask:element_rows_by_cols", dict(element_row_block=block[1], pad=pad),
                      "the per-element test finds query row i's mask row as i / mb_cols: it is i / mb_rows")
                     for pad in (False, True)]
        variants += [("block_mask:rect_rows_by_cols", dict(rect_row_block=block[1], pad=pad),
                      "the rows of a tile's rectangle are found by dividing the tile's rows by mb_cols, "
                      "br0 = q_start / mb_cols: query row i's mask row is i / mb_rows") for pad in (False, True)]
    variants += [("block_mask:count_assigned", dict(kept_last_only=True),
                  "the count of a tile's kept mask blocks holds only the last block of its rectangle "
                  "(kept = ... where kept += ... is due): a tile whose last block is dropped is skipped "
                  "even when others are kept"),
                 ("block_mask:scan_end:-1", dict(rect_cols_short=True),
                  "the scan of a tile's mask blocks stops one column short (bc < bc1 where bc <= bc1 is "
                  "due): the blocks of its last mask column are never counted"),
                 ("block_mask:scan_first_column", dict(scan_first_column=True),
                  "the scan of a tile's mask blocks reads column bc0 for every bc (mask[br · n_mb_k + bc0] "
                  "where + bc is due): the first column's blocks are counted once per column"),
                 ("block_mask:skip_breaks", dict(skip_breaks=True),
                  "a skipped tile ends the loop over key tiles (break where continue is due): the key "
                  "tiles after the first one with no kept block never run"),
                 ("block_mask:rect_start_rounded_up", dict(rect_row_start_up=True),
                  "the first mask row of a tile's rectangle is rounded up, (q_start + mb_rows - 1) / mb_rows, "
                  "where q_start / mb_rows, the row that holds query q_start, is due")]
    if nr != nc:
        variants += [("block_mask:element_row_stride_n_mb_q", dict(element_row_stride=nr, pad=pad),
                      "the per-element test finds row i's mask bytes at mask + (i / mb_rows) · n_mb_q, with "
                      "the number of mask rows as the row stride: a head's mask is n_mb_q rows of n_mb_k "
                      "bytes, so row i's start at (i / mb_rows) · n_mb_k") for pad in (False, True)]
    said = set()
    for tm in tiles(ctx, "BLOCK_M"):
        for tn in tiles(ctx, "BLOCK_N"):
            for cid, how, text in variants:
                if cid in said:
                    continue
                vis = decided_visible(bm, block, n_q, n_k, (tm, tn), causal, **how)
                if (getattr(ctx, "probe", None) or not np.array_equal(vis, truth)) and \
                        matches(ctx, *attend(s, v, vis)):
                    said.add(cid)
                    yield Cause(cid, f"{text} (the output matches that, with tiles of {tm} queries × {tn} keys).")


def unguarded_rows(bm, block, n_q: int, n_k: int, tile, causal: bool) -> np.ndarray:
    """[B, H, Nq]: the rows that run a tile in which they see no key before any tile in which they
    see one. Without the guard (m_use = 0 while m_new is -INFINITY) such a tile gives
    exp2(-inf - (-inf)) = NaN, which stays in l and acc."""
    vis = visible(bm, block, n_q, n_k, causal)
    tm, tn = tile
    nan = np.zeros(bm.shape[:2] + (n_q,), bool)
    seen = np.zeros_like(nan)
    for q0 in range(0, n_q, tm):
        q1 = min(q0 + tm, n_q)
        r0, r1 = q0 // block[0], (q1 - 1) // block[0]
        kv_end = min(n_k, q1 + n_k - n_q) if causal else n_k
        for k0 in range(0, kv_end, tn):
            c0, c1 = k0 // block[1], (min(k0 + tn, n_k) - 1) // block[1]
            runs = bm[..., r0:r1 + 1, c0:c1 + 1].any(axis=(-1, -2))[..., None]     # the tile is not skipped
            sees = vis[..., q0:q1, k0:k0 + tn].any(axis=-1)
            nan[..., q0:q1] |= runs & ~seen[..., q0:q1] & ~sees
            seen[..., q0:q1] |= runs & sees
    return nan


def guard_cause(ctx):
    """The -INFINITY guard of the exponent missing: rows that meet a tile where they see no key
    before their first key are NaN, and every other row is right. Where those are just the rows
    with no key at all, empty_rows:nan says the same, and both are stated."""
    p = ctx.params
    n_q, n_k, causal = p["Nq"], p["Nk"], bool(p.get("causal"))
    block = (p["mb_m"], p["mb_n"])
    bm = np.asarray(ctx.inputs["block_mask"]) != 0
    for tm in tiles(ctx, "BLOCK_M"):
        for tn in tiles(ctx, "BLOCK_N"):
            nan = unguarded_rows(bm, block, n_q, n_k, (tm, tn), causal)
            if not nan.any() and not getattr(ctx, "probe", None):
                continue
            o_alt = np.where(nan[..., None], np.nan, ctx.ref["o"])
            lse_alt = np.where(nan, np.nan, ctx.ref["lse"])
            if matches(ctx, o=o_alt, lse=lse_alt):
                yield Cause("softmax:no_guard", (
                    f"the rows that run a tile in which they see no key, before their first visible key, "
                    f"are NaN in o and lse, and every other row is right (the output matches that, with "
                    f"tiles of {tm} queries × {tn} keys): there m_new is still -INFINITY, and "
                    "exp2(s - m_new) = exp2(-inf + inf) = NaN enters l and acc. Subtract 0 while m_new is "
                    "-INFINITY (m_use), so that the masked scores give exp2(-inf) = 0."))
                return


def block_flip_cause(ctx, s, v, limit: int = 24):
    """A few single mask blocks computed though masked or skipped though kept: found one query-block
    row at a time, then replayed on the whole output; the message names them."""
    p = ctx.params
    n_q, n_k, causal = p["Nq"], p["Nk"], bool(p.get("causal"))
    block = (p["mb_m"], p["mb_n"])
    bm = np.asarray(ctx.inputs["block_mask"]) != 0
    o, lse = np.asarray(ctx.out["o"], np.float64), np.asarray(ctx.out["lse"], np.float64)
    if not (np.isfinite(o).all() and not np.isnan(lse).any()):
        return
    bad = bad_row_mask(ctx)
    regions = sorted({(b, h, i // block[0]) for b, h, i in zip(*np.nonzero(bad))})
    if not regions or len(regions) > limit:
        return
    cm = R.causal_mask(n_q, n_k) if causal else np.ones((n_q, n_k), bool)
    flips, alt = [], bm.copy()
    for b, h, br in regions:
        rows = slice(br * block[0], min((br + 1) * block[0], n_q))
        found = None
        n_c = bm.shape[-1]
        # One block flipped, else two (a row of blocks may hold two), fewest first.
        for cols in [(c,) for c in range(n_c)] + ([(c, e) for c in range(n_c) for e in range(c + 1, n_c)]
                                                 if n_c <= 24 else []):
            row_mask = bm[b, h, br].copy()
            row_mask[list(cols)] = ~row_mask[list(cols)]
            vis = row_mask[np.arange(n_k) // block[1]][None, :] & cm[rows]
            o_alt, lse_alt = attend(s[b, h, rows], v[b, h], vis)
            if rel(o[b, h, rows], o_alt) < 1e-3 and rel(lse[b, h, rows], lse_alt) < 1e-3:
                found = cols
                break
        if found is None:
            return
        for bc in found:
            flips.append((b, h, br, bc, bool(bm[b, h, br, bc])))
            alt[b, h, br, bc] = not alt[b, h, br, bc]
    if not matches(ctx, *attend(s, v, visible(alt, block, n_q, n_k, causal))):
        return
    said = [f"(b = {b}, h = {h}, query block {br}, key block {bc}): "
            + ("skipped though kept" if kept else "computed though masked") for b, h, br, bc, kept in flips[:4]]
    more = f", and {len(flips) - 4} more" if len(flips) > 4 else ""
    kinds = {kept for *_, kept in flips}
    what = ("skips a block the mask keeps" if kinds == {True} else "computes a block the mask drops"
            if kinds == {False} else "skips blocks the mask keeps and computes blocks it drops")
    yield Seen(f"the kernel {what}: the output matches the truth with {len(flips)} block(s) of the mask "
            f"flipped, in mask-block coordinates ({_block_words(p)}): " + "; ".join(said) + more
            + ". A tile is skipped iff none of the mask blocks it covers is kept (rows q_start / mb_rows .. "
            "q_last / mb_rows, columns kv_start / mb_cols .. (last key of the tile) / mb_cols); in a partial "
            "tile each score reads its own block, mask[i / mb_rows][j / mb_cols]. Check those bounds "
            "and the test (!= 0: any nonzero byte means kept).")


def skipped_rows_cause(ctx):
    """Rows that see keys but come out exactly as a row that skipped every tile (o = 0, lse = -inf)."""
    o, lse = np.asarray(ctx.out["o"], np.float64), np.asarray(ctx.out["lse"], np.float64)
    bad = bad_row_mask(ctx)
    as_empty = np.isneginf(lse) & (o == 0).all(axis=-1) & np.isfinite(ctx.ref["lse"])
    if not as_empty.any() or (bad & ~as_empty).any():
        return
    p = ctx.params
    b, h, i = (int(x) for x in np.argwhere(as_empty)[0])
    kept = np.flatnonzero(np.asarray(ctx.inputs["block_mask"])[b, h, i // p["mb_m"]]).tolist()
    yield Seen(f"{int(as_empty.sum())} rows that see keys come out as o = 0 and lse = -inf, as a row that "
            f"sees no key does (first o[{b}, {h}, {i}], in query "
            f"block {i // p['mb_m']}, whose kept key blocks are {kept[:8]}{' ...' if len(kept) > 8 else ''}, "
            f"{_block_words(p)}).")


def observed_blocks(ctx):
    """No replay fits: say which query blocks of the mask hold the wrong rows."""
    p = ctx.params
    bad = bad_row_mask(ctx)
    if not bad.any():
        return
    regions = sorted({(int(b), int(h), int(i) // p["mb_m"]) for b, h, i in zip(*np.nonzero(bad))})
    total = bad.shape[0] * bad.shape[1] * cdiv(p["Nq"], p["mb_m"])
    if len(regions) == total:
        return
    said = ", ".join(f"(b = {b}, h = {h}, query block {r})" for b, h, r in regions[:4])
    yield Seen(f"the wrong rows lie in {len(regions)} of the {total} query blocks of "
            f"the mask ({_block_words(p)}): {said}{' ...' if len(regions) > 4 else ''}; the rows of the other "
            "query blocks are right.")


def weight_rows(ctx, s, v, vis) -> list:
    """The failing rows with the keys each really sees (for attention/weights.py)."""
    o, ref = np.asarray(ctx.out["o"], np.float64), ctx.ref["o"]
    rows = []
    for b, h, i in weights.bad_rows(ctx):
        keys = np.flatnonzero(vis[b, h, i])
        nxt = int(keys[-1]) + 1 if keys.size else None
        has_next = nxt is not None and nxt < s.shape[-1]
        rows.append(weights.Row(f"o[{b}, {h}, {i}]", o[b, h, i], ref[b, h, i], s[b, h, i, keys], v[b, h, keys],
                                v[b, h, nxt] if has_next else None, nxt if has_next else None))
    return rows


def diagnose(ctx):
    p = ctx.params
    s, v = replays.scores(ctx.inputs)
    vis = visible(ctx.inputs["block_mask"], (p["mb_m"], p["mb_n"]), p["Nq"], p["Nk"], bool(p.get("causal")))
    yield from empty_row_cause(ctx, nan_only=True)
    yield from mask_causes(ctx, s, v)
    yield from tile_decision_causes(ctx, s, v)
    yield from guard_cause(ctx)
    yield from block_flip_cause(ctx, s, v)
    yield from empty_row_cause(ctx, nan_only=False)
    yield from skipped_rows_cause(ctx)
    yield from replays.output_causes(ctx, s, v, vis)
    yield from replays.exponent_causes(ctx, s, v, vis)
    yield from replays.tile_bug_causes(ctx, s, v, vis)
    yield from replays.setup_causes(ctx, vis)
    yield from replays.store_guard_causes(ctx)
    yield from weights.observation(weight_rows(ctx, s, v, vis))
    yield from observed_blocks(ctx)
