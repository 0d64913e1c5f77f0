"""Bugs replayed in float64: a diagnosis names a cause only when replaying it reproduces the output.

Each `*_causes` function takes the failing case's context (engine/diagnose.Context: inputs,
reference, the student's outputs, the comparisons) and returns a sentence for the student, or None.
The replays are the kernels' usual bugs computed on the reference's own inputs: a missing rescale, a
missing bounds mask, a forgotten 1/l, lse in log2 units, the wrong kv head, a top-left causal mask,
a combine without the max ... The student's output must be close to the replay AND far from the truth.
"""
from __future__ import annotations

import math

import numpy as np

from . import references as R

# The tile sizes a student may pick; a tile-shaped bug is replayed with each, unless the kernel
# declares its own (CONFIG's BLOCK_M / BLOCK_N): then with that one only, so that a message never
# names a tile size the kernel does not use.
TILES = (16, 32, 64, 128)


def tiles(ctx, key: str) -> tuple[int, ...]:
    size = kernel_config(getattr(ctx, "config", None), ctx.params).get(key)
    return (int(size),) if isinstance(size, int) and size > 0 else TILES


def kernel_config(config: dict | None, params: dict) -> dict:
    """CONFIG as the kernel was compiled for this case: flat, or keyed by head dimension (06)."""
    config = config or {}
    nested = config.get(params.get("d"))
    return nested if isinstance(nested, dict) else config

# ---- prefill (modules 00, 02, 03) ----------------------------------------------------------------

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


def streamed(s, v, tile, rescale_acc=True, rescale_l=True, visible=None, stale_max=False):
    """The online softmax over key tiles, as a kernel runs it, with the rescale optionally left out,
    or (stale_max) each tile's P taken against the max before the tile (0 before the first)."""
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
            p = np.exp(st - (np.where(np.isfinite(m), m, 0.0) if stale_max else m_use)[..., None])
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
    for _, alt in checks:
        finite = np.asarray(alt, np.float64)[np.isfinite(alt)]
        if finite.size and np.ptp(finite) == 0 and (finite.size > 1 or finite[0] in (0.0, 1.0)):
            # A constant (log l = 0 of one-key rows, say) matches many bugs: it names none. A single
            # value other than 0 or 1 (the lse of a one-row case) is as telling as any row. A -inf
            # where the answer is finite (a row that saw no key) is telling too, beside a constant.
            if not any(np.any(~np.isfinite(a) & np.isfinite(ctx.ref[n])) for n, a in checks):
                return False
    match = max(MATCH, 3 * getattr(ctx, "noise", 0.0))    # a low-precision kernel's own rounding
    close = all(rel(ctx.out[name], alt) < match for name, alt in checks)
    wrong = any(rel(ctx.out[name], ctx.ref[name]) > 10 * match or not ctx.cmp[name].passed
                for name, _ in checks)
    return close and wrong


def tile_bug_causes(ctx, s, v, visible=None) -> str | None:
    """Bugs of the streaming loop: the rescale and the bounds mask of the last, partial key tile."""
    n_k = s.shape[-1]
    for tile in tiles(ctx, "BLOCK_N"):
        o_alt, lse_alt = streamed(s, v, tile, visible=visible, stale_max=True)
        if matches(ctx, o=o_alt, lse=lse_alt):
            return ("P is taken against a stale max: the max of the earlier tiles (0 before the first), "
                    "not m_new, which includes this tile's scores. Fold the tile's row max in first, "
                    "m_new = max(m, rowmax(S)), then P = exp(S - m_new): P may be formed (and rounded) "
                    "only once the max is final.")
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
    # Keys past n_k zero-filled but not masked: score 0, value 0, still counted in l. One such key is
    # a bound one off (j > n_k where j >= n_k is due); a tile's worth is a missing bounds mask.
    for tile, pad in [(None, 1)] + [(t, -n_k % t) for t in tiles(ctx, "BLOCK_N") if -n_k % t > 1]:
        s_pad = np.concatenate([np.where(visible, s, -np.inf) if visible is not None else s,
                                np.zeros(s.shape[:-1] + (pad,))], axis=-1)
        v_pad = np.concatenate([v, np.zeros(v.shape[:-2] + (pad, v.shape[-1]))], axis=-2)
        o_alt, lse_alt = attend(s_pad, v_pad)
        if (matches(ctx, o=o_alt) or matches(ctx, lse=lse_alt)) and tile is None:
            return (f"key n_k = {n_k}, one past the last key, is counted (the output matches one extra key "
                    f"of score 0 and value 0: zero-filled but not masked). The bounds mask is one off: "
                    f"s = -INFINITY where j >= n_k (not j > n_k).")
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


def batch_cause(ctx, visible=None) -> str | None:
    """An index that drops the batch offset: every batch entry reads batch 0's q, k or v."""
    if ctx.params.get("B", 1) < 2:
        return None
    for names in (("q",), ("k",), ("v",), ("k", "v"), ("q", "k", "v")):
        alt = dict(ctx.inputs)
        for x in names:
            alt[x] = np.broadcast_to(ctx.inputs[x][:1], ctx.inputs[x].shape)
        s, v = scores(alt)
        if matches(ctx, o=attend(s, v, visible)[0]):
            which = " and ".join(names)
            return (f"every batch entry reads batch 0's {which}: the index of {which} is missing its batch "
                    f"offset (the b · H · N · d term, b · Hkv · N · d for k and v). Batch entry b = 0 is "
                    "right, which is why the cases with B = 1 pass.")
    return None


def setup_causes(ctx, visible=None) -> str | None:
    """Bugs of the indexing: the batch offset, the kv head of a query head, the scale."""
    p = ctx.params
    cause = batch_cause(ctx, visible)
    if cause:
        return cause
    if p["H"] != p["Hkv"]:
        for name, mapping in (("h % Hkv", lambda h, H, Hkv: h % Hkv), ("h", lambda h, H, Hkv: min(h, Hkv - 1)),
                              ("0", lambda h, H, Hkv: 0)):
            s, v = scores(ctx.inputs, kv_head=mapping)
            if matches(ctx, o=attend(s, v, visible)[0]):
                return (f"query head h reads the wrong kv head ({name}). With grouped-query attention, "
                        f"H / Hkv consecutive query heads share one kv head: h_kv = h / (H / Hkv).")
    d, given = p["d"], ctx.inputs["scale"]
    wrong = [("no scale", 1.0), ("scale applied twice", given ** 2), ("1/d instead of 1/sqrt(d)", 1.0 / d)]
    if abs(given - 1.0 / math.sqrt(d)) > 1e-6 * given:
        wrong.insert(0, ("1/sqrt(d) computed in the kernel", 1.0 / math.sqrt(d)))
    for name, sc in wrong:
        s, v = scores(ctx.inputs, scale=sc)
        if matches(ctx, o=attend(s, v, visible)[0]):
            if name.startswith("1/sqrt(d) computed"):
                return (f"the kernel ignores its scale argument: the output matches scale = 1/sqrt(d) = "
                        f"{1 / math.sqrt(d):.4g}, but this case passes scale = {given:g}. Use the scale "
                        "the function receives (1/sqrt(d) is only its usual value).")
            return (f"the scores use the wrong scale ({name}): s = scale · q·k, with the scale the "
                    f"function receives (here {given:g}).")
    return None


# ---- causal masks (module 03) ----------------------------------------------------------------

def visible_where(n_q, n_k, limit):
    """[n_q, n_k] booleans: key j visible to query i iff j < limit(i) (limit an array over i)."""
    return np.arange(n_k)[None, :] < np.asarray(limit)[:, None]


def tile_limits(n_q, n_k, block_m, block_n, row_of_tile):
    """One past the last key the loop over key tiles reaches, per query row, when a query tile's
    loop ends at the tile holding key `row_of_tile(first, last) + offset`."""
    offset = n_k - n_q
    i = np.arange(n_q)
    first = (i // block_m) * block_m
    last = np.minimum(first + block_m, n_q) - 1
    kv_end = np.clip(row_of_tile(first, last) + offset + 1, 0, n_k)
    return np.minimum(-(-kv_end // block_n) * block_n, n_k)     # whole key tiles


def mask_causes(ctx, s, v) -> str | None:
    n_q, n_k = ctx.params["Nq"], ctx.params["Nk"]
    offset = n_k - n_q
    i = np.arange(n_q)
    if n_q != n_k and matches(ctx, *attend(s, v, visible_where(n_q, n_k, i + 1))):
        return (f"the causal mask is aligned top-left (j <= i). It must be aligned bottom-right: query i "
                f"sees key j iff j <= i + (Nk - Nq), here i + {offset}. The two agree only when Nq == Nk, "
                f"which is why the square cases pass.")
    if matches(ctx, *attend(s, v, visible_where(n_q, n_k, i + offset))):
        return ("the diagonal itself is masked: query i must see key i + (Nk - Nq) too. "
                "The test is j <= i + offset (mask j > i + offset), not j < i + offset.")
    if matches(ctx, o=attend(s, v, visible_where(n_q, n_k, i + offset + 2))[0]):
        return ("each query sees one key too many: mask j > i + offset, where offset = Nk - Nq "
                "(key i + offset + 1 is in the future).")
    for bm in tiles(ctx, "BLOCK_M"):
        for bn in tiles(ctx, "BLOCK_N"):
            # Whole tiles up to the diagonal, with no per-element test inside the diagonal tiles.
            lim = tile_limits(n_q, n_k, bm, bn, lambda first, last: last)
            if matches(ctx, o=attend(s, v, visible_where(n_q, n_k, lim))[0]):
                # Name the tile size only where it shaped the replay: a case smaller than the tile
                # fits any tile size alike, and naming 16 to a kernel with 64-wide tiles misleads.
                sizes = (f"whole tiles of {bm} queries × {bn} keys" if bm < n_q or bn < n_k
                         else "the diagonal tile")
                return (f"keys above the diagonal are counted inside the diagonal tiles (the output matches "
                        f"{sizes}, unmasked). Tiles that straddle the diagonal need the per-element "
                        f"test: s = -INFINITY where j > i + (Nk - Nq).")
            # The loop over key tiles bounded by the first row of the query tile instead of the last.
            lim = np.minimum(i + offset + 1, tile_limits(n_q, n_k, bm, bn, lambda first, last: first))
            if matches(ctx, o=attend(s, v, visible_where(n_q, n_k, np.maximum(lim, 0)))[0]):
                return (f"the loop over key tiles stops too early (the output matches a loop bounded by the "
                        f"first row of each query tile{f' of {bm}' if bm < n_q else ''}). The last row of the "
                        f"query tile sees the most "
                        f"keys: kv_end = min(Nk, last_row + (Nk - Nq) + 1).")
            # The loop bound one short: kv_end = last_row + offset, so a tile that starts at the last
            # row's last key is never run.
            lim = np.minimum(i + offset + 1, tile_limits(n_q, n_k, bm, bn, lambda first, last: last - 1))
            if matches(ctx, o=attend(s, v, visible_where(n_q, n_k, np.maximum(lim, 0)))[0]):
                return ("the loop over key tiles stops one key short: kv_end must be one past the last key the "
                        "tile's last row sees, kv_end = min(Nk, last_row + (Nk - Nq) + 1) (the + 1). Without it, "
                        "a key tile that starts at that last key never runs.")
    return None


def empty_row_cause(ctx) -> str | None:
    """Rows with no visible key (Nq > Nk): NaN, or a finite lse where -inf is due."""
    n_q, n_k = ctx.params["Nq"], ctx.params["Nk"]
    if n_q <= n_k:
        return None
    empty = slice(0, n_q - n_k)
    o, lse = np.asarray(ctx.out["o"], np.float64), np.asarray(ctx.out["lse"], np.float64)
    rest_ok = rel(o[..., n_q - n_k:, :], ctx.ref["o"][..., n_q - n_k:, :]) < 1e-3
    nan_rows = np.isnan(o[..., empty, :]).any() or np.isnan(lse[..., empty]).any()
    wrong_lse = (lse[..., empty] != -np.inf).any()
    wrong_o = (o[..., empty, :] != 0).any()
    if nan_rows or ((wrong_lse or wrong_o) and rest_ok):
        what = "NaN" if nan_rows else ("a finite lse" if wrong_lse else "a nonzero output")
        return (f"rows with no visible key give {what}. With Nq > Nk the first Nq - Nk = {n_q - n_k} rows "
                f"see no key at all: their running max stays -INFINITY, so exponentiate against 0 "
                f"instead (exp2(-inf - -inf) is NaN), keep l = 0, and write o = 0 and lse = -INFINITY "
                f"(guard the final 1/l).")
    return None


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


def decode_diagnose(ctx, kv_cache_fn) -> str | None:
    """Causes shared by 04 and 05. kv_cache_fn(ctx, lens) -> the contiguous (k, v) [B, Hkv, L, d]
    holding at least the first lens[b] keys of each sequence, as the kernel can reach them (for 05:
    the pages gathered through block_table); lens defaults to the context lengths."""
    p = ctx.params
    lens = np.asarray(ctx.inputs["context_lens"])
    o, lse = np.asarray(ctx.out["o"], np.float64), np.asarray(ctx.out["lse"], np.float64)
    bad = row_errors(ctx)                             # [B, H]
    bad_seq = bad.any(axis=1)
    empty = lens == 0
    nonfinite = ~np.isfinite(o).all(axis=-1) | np.isnan(lse) | (lse == np.inf)

    # 1. empty contexts: NaN (or anything but 0 / -inf) exactly where context_lens[b] = 0.
    if empty.any() and bad_seq[empty].any() and not bad_seq[~empty].any():
        what = "NaN" if nonfinite[empty].any() else "not o = 0 and lse = -inf"
        return (f"only the sequences with an empty context (context_lens[b] = 0, here b = "
                f"{np.flatnonzero(empty).tolist()}) are wrong: their output is {what}. A context of length "
                "0 has no split with a key: the combine must write o = 0 and lse = -INFINITY there, never "
                "0/0 or -inf - -inf (NaN).")

    # 2. overflow: non-finite output on rows with keys, where the true lse is above float32's exp range
    # (exp of a score or of a split's lse past 88.7 is inf): nearly every such row must show it.
    from ..engine.diagnose import overflow_rows
    rl = ctx.ref["lse"]
    finite_rows = ~empty[:, None] & np.ones_like(bad)
    if (nonfinite & finite_rows).any():
        top = float(np.max(rl[np.isfinite(rl)], initial=-np.inf))
        if top > 80 and overflow_rows("lse", nonfinite & finite_rows, rl):
            return (f"overflow: Inf/NaN where the answer is finite, on rows whose lse reaches {top:.0f}. "
                    "expf(x) is inf in float32 for x > 88.7, so exp(lse_s) of a split overflows. Subtract "
                    "the max first: in the combine, weights are exp(lse_s - max_s lse_s) (the largest is 1), "
                    "and in the partial kernel p = exp(s - m) with m the running max.")

    # 3. the scale argument ignored: the output matches 1/sqrt(d) where the case passes another scale.
    d, given = ctx.inputs["q"].shape[-1], ctx.inputs["scale"]
    if abs(given - 1.0 / math.sqrt(d)) > 1e-6 * given and (~empty).any():
        k, v = kv_cache_fn(ctx, lens)
        alt_o, _ = R.decode_attention(ctx.inputs["q"], k, v, lens, 1.0 / math.sqrt(d))
        if close(o[~empty], alt_o[~empty]):
            return (f"the kernel ignores its scale argument: the output matches scale = 1/sqrt(d) = "
                    f"{1 / math.sqrt(d):.4g}, but this case passes scale = {given:g}. Use the scale the "
                    "function receives (1/sqrt(d) is only its usual value).")

    # 4. GQA: some query heads read the wrong kv head.
    H, Hkv = p["H"], p["Hkv"]
    if H != Hkv and bad.any():
        k, v = kv_cache_fn(ctx, lens)
        q, scale = ctx.inputs["q"], ctx.inputs["scale"]
        group = H // Hkv
        for b, h in zip(*np.nonzero(bad & ~empty[:, None])):
            for g in range(Hkv):
                if g == h // group:
                    continue
                alt_o, _ = R.decode_attention(q[b:b + 1, h:h + 1], k[b:b + 1, g:g + 1], v[b:b + 1, g:g + 1],
                                              lens[b:b + 1], scale)
                if close(o[b, h], alt_o[0, 0]):
                    return (f"GQA mapping: query head h = {h} attended to kv head {g}, but it must read kv "
                            f"head h / (H / Hkv) = {h // group} (H = {H}, Hkv = {Hkv}: consecutive groups of "
                            f"{group} query heads share one kv head). Check the head index of q, o and lse "
                            "in a block that serves a kv head's whole group.")
        if not bad[:, ::group].any():
            return (f"GQA mapping: only the query heads that are not the first of their group are wrong "
                    f"(H = {H}, Hkv = {Hkv}). Every one of the H / Hkv = {group} heads of the group "
                    "must be computed and written, each with its own q.")

    # 5. lse in log2 units, a key too many or too few: replayed on the rows with keys.
    live = ~empty
    # Sequences without keys replay as themselves (o = 0, lse = -inf), so the whole output compares.
    if live.any() and not nonfinite[live].any():
        if matches(ctx, lse=ctx.ref["lse"] / math.log(2.0)):
            return ("lse is in log2 units: the output matches lse / ln 2. A split's partial lse is "
                    "(m + log2(l)) · ln 2 when m comes from exp2 scores; without the factor ln 2 the "
                    "combine weighs the splits wrongly and the final lse is off by 1/ln 2.")
        for delta, what in ((1, "one key too many: key context_lens[b], past the end of the context, "
                                "is counted (a loop bound or guard with <= where < is due)"),
                            (-1, "one key too few: the last key of each context, context_lens[b] - 1, "
                                 "is left out (a bound one short: < end - 1, or <= where < ... is due)")):
            alt_lens = np.where(live, lens + delta, 0)
            k, v = kv_cache_fn(ctx, alt_lens)
            if k.shape[2] < alt_lens.max():
                continue
            alt_o, _ = R.decode_attention(ctx.inputs["q"], k, v, alt_lens, ctx.inputs["scale"])
            if matches(ctx, o=alt_o):
                return f"each sequence attends to {what}."

    # 6. the weights the kernel applied, where they can be read back (contexts shorter than d).
    cause = decode_shape_cause(ctx, kv_cache_fn)
    if cause:
        return cause

    # 7. the combine with the exponent of its weights flipped, for the split sizes a launch may pick.
    cause = combine_sign_cause(ctx, kv_cache_fn)
    if cause:
        return cause

    # 8. splits and the combine: correct for short contexts, wrong for long ones.
    if bad_seq[live].any() and (~bad_seq & live).any():
        ok_max = int(lens[~bad_seq & live].max())
        bad_min = int(lens[bad_seq & live].min())
        if bad_min > ok_max and ok_max >= 1:
            return (f"sequences with a context of at most {ok_max} keys are right, longer ones ({bad_min} "
                    "keys and up) are wrong" + (": the error starts where a context spans several splits. "
                    "Check " if p.get("num_splits", 1) > 1 else ". If the launch code splits them, check ")
                    + "the combine (weights exp(lse_s - lse_max) over exactly the splits that hold keys, "
                    "divided by their sum) and the split bounds (start = split·chunk, end = "
                    "min(start + chunk, context_lens[b])); otherwise the loop over a context's keys.")
    if p.get("num_splits", 1) > 1 and bad[live].all() and not nonfinite.any():
        return (f"every row is wrong in a case that forces {p['num_splits']} splits: check the combine "
                "(each split weighted by exp(lse_s - lse_max), divided by the sum of the weights, "
                "lse = lse_max + log(sum)) and that each split's partial output is normalised by its own l.")
    return None


def decode_shape_cause(ctx, kv_cache_fn) -> str | None:
    """The weights the kernel applied, read back from its output (attention/weights.py)."""
    from . import weights
    lens = np.asarray(ctx.inputs["context_lens"])
    k, v = kv_cache_fn(ctx, lens + 1)
    return weights.cause(weights.decode_rows(ctx, k, v, lens))


def combine_sign_cause(ctx, kv_cache_fn) -> str | None:
    """The combine weighting split s by exp(lse_max - lse_s) instead of exp(lse_s - lse_max)."""
    lens = np.asarray(ctx.inputs["context_lens"])
    if not lens.any() or not np.isfinite(ctx.out["o"]).all():
        return None
    k, v = kv_cache_fn(ctx, lens)
    table = ctx.inputs.get("block_table")          # a paged cache's capacity: max_pages · page_size
    L = np.shape(table)[1] * ctx.inputs["k_pages"].shape[1] if table is not None else k.shape[2]
    forced = ctx.params.get("num_splits")
    counts = [forced] if forced else range(2, min(L, 64) + 1)
    for chunk in sorted({max(1, -(-L // n)) for n in counts}, reverse=True):
        o_part, lse_part = R.decode_partials(ctx.inputs["q"], k, v, lens, chunk, ctx.inputs["scale"])
        if not (np.isfinite(lse_part).sum(axis=-1) > 1).any():
            continue                                   # one split per sequence: nothing to weigh
        flipped = np.where(np.isfinite(lse_part), -lse_part, -np.inf)
        o_alt, _ = R.combine_partials(o_part, flipped)
        if matches(ctx, o=o_alt):
            return (f"the combine weighs the splits by exp(lse_max - lse_s), the exponent's sign flipped "
                    f"(the output matches it with splits of {chunk} keys): split s's weight is "
                    "exp(lse_s - lse_max) <= 1, the largest split weighing 1.")
    return None

