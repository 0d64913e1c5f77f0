"""The backward pass (module 09): inputs, the float64 reference gradients, and the bugs replayed.

For one head, with S = scale · Q K^T (masked), P = softmax(S), O = P V and dO = dL/dO:

    dV = P^T dO      dP = dO V^T      D_i = sum_j P_ij dP_ij = sum_c dO_ic O_ic
    dS = P ∘ (dP - D)      dQ = scale · dS K      dK = scale · dS^T Q

With GQA, dK and dV of a kv head are the sums over the query heads that share it. The reference
computes P from the scores directly (not from the kernel's lse), so it is independent of the
recomputation it checks; tests/test_backward.py checks it against finite differences of the forward.
"""
from __future__ import annotations

import math

import numpy as np

from ..spec import Cause, Seen
from . import references as R
from .inputs import attention_inputs
from . import lowp, replays
from .replays import MATCH, kernel_config, tiles

OUTPUTS = ("dq", "dk", "dv")


def backward_inputs(p: dict, rng: np.random.Generator) -> dict:
    """q, k, v as for prefill; o and lse from the float64 forward (rounded to float32, as a forward
    kernel hands them over); dO random; scale; causal."""
    x = attention_inputs(p, rng)
    causal = bool(p.get("causal", False))
    o, lse = R.attention(x["q"], x["k"], x["v"], x["scale"], causal=causal)
    x.update(o=o.astype(np.float32), lse=lse.astype(np.float32), causal=causal,
             do=rng.standard_normal(o.shape).astype(np.float32))
    return x


def visible_of(inputs) -> np.ndarray | None:
    n_q, n_k = np.asarray(inputs["q"]).shape[2], np.asarray(inputs["k"]).shape[2]
    return R.causal_mask(n_q, n_k) if inputs["causal"] else None


def gradients(inputs, *, probs=None, delta=None, heads=None, dq_scale=1.0, dk_scale=1.0, visible="auto",
              ds_of=None, dkdv_x=("do", "q"), rights=None, dq_ds=None, dq_k=None, lefts=None, dv_p=None,
              work=np.float64):
    """(dq, dk, dv) in float64. The keyword arguments replay bugs:
    probs(s, lse, visible) -> P    how P is recomputed (default: the true softmax)
    delta(p, dp, do, o, b, h) -> D the row term of dS (default: rowsum(dO ∘ O) with the given O, as a
                                   kernel computes it, independent of the P it recomputes)
    heads(h_kv, group) -> list     the query heads summed into dK and dV of kv head h_kv (default: all)
    dq_scale, dk_scale             factors on dQ and dK (a scale dropped or applied twice)
    ds_of(p, dp, D) -> dS          how dS is formed (default: P ∘ (dP - D))
    dkdv_x                         the right-hand operands of dV = P^T x and dK = scale · dS^T x
                                   (default: dO and Q)
    rights                         {"do": array, "q": array}: those operands' values, where they are
                                   not the inputs' (an operand read in another layout)
    dq_ds(p, ds) -> array          the left operand of dQ = scale · dS K (default: dS; P, or dS read in
                                   another layout)
    dq_k(k) -> array               its right operand (default: K)
    dv_p(p) -> array               the P of dV = P^T dO (default: P; P rounded to 16 bits, say)
    lefts                          {"q": array, "do": array}: the Q of S = scale · Q K^T and the dO of
                                   dP = dO V^T, where they are not the inputs' (read in another layout)
    visible                        the mask (default: the case's)
    work                           the type the products are computed in (float32: overflows as a
                                   kernel's float32 sums do)."""
    q, k, v, do, o = (np.asarray(inputs[x], work) for x in ("q", "k", "v", "do", "o"))
    lse = np.asarray(inputs["lse"], work)
    scale = inputs["scale"]
    B, H = q.shape[:2]
    Hkv = k.shape[1]
    group = H // Hkv
    vis = visible_of(inputs) if isinstance(visible, str) else visible
    dq, dk, dv = np.zeros(q.shape, work), np.zeros(k.shape, work), np.zeros(k.shape, work)
    for b in range(B):
        for g in range(Hkv):
            summed = range(g * group, (g + 1) * group) if heads is None else heads(g, group)
            for h in range(g * group, (g + 1) * group):
                q_s = q[b, h] if lefts is None or "q" not in lefts else np.asarray(lefts["q"], work)[b, h]
                do_p = do[b, h] if lefts is None or "do" not in lefts else np.asarray(lefts["do"], work)[b, h]
                s = scale * q_s @ k[b, g].T
                p = R.masked_softmax(s, vis)[0] if probs is None else probs(s, lse[b, h], vis)
                dp = do_p @ v[b, g].T
                D = (do[b, h] * o[b, h]).sum(axis=-1) if delta is None else delta(p, dp, do[b, h], o[b, h], b, h)
                ds = np.asarray(p * (dp - D[:, None]) if ds_of is None else ds_of(p, dp, D[:, None]), work)
                dq[b, h] = dq_scale * scale * (ds if dq_ds is None else dq_ds(p, ds)) @ \
                    (k[b, g] if dq_k is None else dq_k(k[b, g]))
                if h in summed:
                    x = {"do": do[b, h], "q": q[b, h]}
                    x.update({n: np.asarray(a, work)[b, h] for n, a in (rights or {}).items()})
                    dk[b, g] += dk_scale * scale * ds.T @ x[dkdv_x[1]]
                    dv[b, g] += np.asarray(p if dv_p is None else dv_p(p), work).T @ x[dkdv_x[0]]
    return dq, dk, dv


def reference(inputs) -> dict:
    """The exact gradients: D = rowsum(P ∘ dP) from P itself (equal to rowsum(dO ∘ O) for the exact O)."""
    return dict(zip(OUTPUTS, gradients(inputs, delta=lambda p, dp, do, o, b, h: (p * dp).sum(axis=-1))))


def magnitudes(inputs) -> dict:
    """What float32 rounding scales with: each gradient computed with |·| of every term, so with no
    cancellation. A row with one key has dS = P (dP - D) = 0 exactly, and its dQ is pure rounding of
    terms of this size."""
    q, k, do, o = (np.abs(np.asarray(inputs[x], np.float64)) for x in ("q", "k", "do", "o"))
    v = np.asarray(inputs["v"], np.float64)
    B, H = q.shape[:2]
    Hkv = k.shape[1]
    vis = visible_of(inputs)
    mag = {"dq": np.zeros(q.shape), "dk": np.zeros(k.shape), "dv": np.zeros(k.shape)}
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            s = inputs["scale"] * np.asarray(inputs["q"], np.float64)[b, h] @ np.asarray(inputs["k"], np.float64)[b, g].T
            p = R.masked_softmax(s, vis)[0]
            terms = p * (np.abs(np.asarray(inputs["do"], np.float64)[b, h] @ v[b, g].T)
                         + (do[b, h] * o[b, h]).sum(axis=-1)[:, None])
            mag["dq"][b, h] = inputs["scale"] * terms @ k[b, g]
            mag["dk"][b, g] += inputs["scale"] * terms.T @ q[b, h]
            mag["dv"][b, g] += p.T @ do[b, h]
    return mag


ROUNDING = 0.1    # the tolerance's share of the terms' size: 2e-6 of it, some 30 float32 roundings


def tolerances(inputs, ref, base) -> dict:
    """`base`, widened where the gradient is much smaller than the terms it sums (`magnitudes`): there
    float32 cannot do better than a few roundings of those terms. Elsewhere `base` itself."""
    from ..spec import Tolerance
    out = {}
    for name, m in magnitudes(inputs).items():
        floor = 1e-2 * np.sqrt(max(m.size, 1))
        ratio = np.linalg.norm(m) / max(np.linalg.norm(ref[name]), floor)
        out[name] = Tolerance(base.rel * max(1.0, ROUNDING * ratio),
                              base.abs * max(1.0, ROUNDING * float(m.max(initial=0.0))))
    return out


# ---- what went wrong ----------------------------------------------------------------------------

def _wrong(ctx, name) -> bool:
    return not ctx.cmp[name].passed


def _distance(got, want, ref) -> float:
    """Relative distance, against the larger of want and the reference, floored like the comparison
    (0.01 per element): a gradient that cancels to 0 (one key per row) is not compared bit for bit."""
    got, want, ref = (np.asarray(x, np.float64) for x in (got, want, ref))
    if (np.isfinite(got) != np.isfinite(want)).any():
        return math.inf
    ok = np.isfinite(want)
    denom = max(np.linalg.norm(np.where(ok, want, 0.0)), np.linalg.norm(np.where(np.isfinite(ref), ref, 0.0)),
                1e-2 * math.sqrt(max(want.size, 1)))
    return float(np.linalg.norm(np.where(ok, got - want, 0.0)) / denom)


def _matches(ctx, alt: dict) -> bool:
    """Every output is close to the replay, and the replay is not the truth where the kernel is wrong.
    A low-precision kernel's own rounding (ctx.noise, module 11) widens "close"."""
    match = max(MATCH, 3 * getattr(ctx, "noise", 0.0))
    wrong = [n for n in OUTPUTS if _wrong(ctx, n)]
    if not wrong:
        return False
    if all(_distance(alt[n], ctx.ref[n], ctx.ref[n]) < 10 * match for n in wrong):
        return False
    return all(_distance(ctx.out[n], alt[n], ctx.ref[n]) < match for n in OUTPUTS if n in alt)


def _replay(ctx, **kw) -> bool:
    return _matches(ctx, dict(zip(OUTPUTS, gradients(ctx.inputs, **kw))))


def _replay_padded(ctx, block_m: int, **kw) -> bool:
    """_replay with the query rows padded to whole tiles of block_m, as a kernel's tiles hold them: q,
    o and dO zero there (their D is 0), lse 0; their P still reaches dK and dV (0 · inf is NaN there
    when a wrong shift overflows it). The mask keeps the case's offset Nk - Nq."""
    x = dict(ctx.inputs)
    n_q, n_k = np.shape(x["q"])[2], np.shape(x["k"])[2]
    pad = -n_q % block_m
    for name in ("q", "o", "do", "lse"):
        a = np.asarray(x[name], np.float64)
        x[name] = np.concatenate([a, np.zeros(a.shape[:2] + (pad,) + a.shape[3:])], axis=2)
    rows = np.arange(n_q + pad)[:, None]
    vis = (np.arange(n_k)[None, :] <= rows + n_k - n_q) if x.get("causal") else None
    with np.errstate(over="ignore", invalid="ignore"):
        dq, dk, dv = gradients(x, visible=vis, **kw)
    return _matches(ctx, dict(dq=dq[:, :, :n_q], dk=dk, dv=dv))


def _exp_with(shift):
    """P = exp(s - shift(s, lse)) on the visible entries, 0 elsewhere."""
    def probs(s, lse, vis):
        with np.errstate(over="ignore", invalid="ignore"):
            p = np.exp(s - shift(s, lse))
        return np.where(vis, p, 0.0) if vis is not None else p
    return probs


def recompute_causes(ctx):
    """P recomputed wrongly: the scale, the lse, the mask."""
    scale = ctx.inputs["scale"]
    lse_col = lambda lse: np.where(np.isfinite(lse), lse, np.inf)[:, None]           # noqa: E731
    cands = [
        ("P is recomputed without the scale: P = exp(q·k - lse), where the forward pass used s = scale · q·k. "
         "Multiply the scores by scale (scale · log2 e in exp2 units) before subtracting lse.",
         _exp_with(lambda s, lse: s - s / scale + lse_col(lse))),
        ("P is recomputed with the scale applied twice: P = exp(scale² · q·k - lse).",
         _exp_with(lambda s, lse: s - s * scale + lse_col(lse))),
        ("P is recomputed without lse: exp(s) is the unnormalised weight. The forward pass's lse is what "
         "turns it into the softmax: P = exp(s - lse), one subtraction, no second pass over the keys.",
         _exp_with(lambda s, lse: 0.0 * s)),
        ("P is recomputed with lse in the wrong units: the scores are in log2 units (exp2f) but lse is the "
         "natural-log lse. Multiply lse by log2 e too: P = exp2(s · scale · log2 e - lse · log2 e).",
         _exp_with(lambda s, lse: lse_col(lse) * math.log(2.0))),
        ("P is recomputed with a natural exponent against lse in log2 units: P = exp(s - lse · log2 e). "
         "Use one base for both: P = exp2(s · scale · log2 e - lse · log2 e), or expf(s · scale - lse).",
         _exp_with(lambda s, lse: lse_col(lse) / math.log(2.0))),
    ]
    cands.append(("P is recomputed with lse scaled too: exp2((s - lse) · scale · log2 e), the scale applied to the "
                  "difference. Only the scores take the scale: P = exp2(s · scale · log2 e - lse · log2 e).",
                  _exp_with(lambda s, lse: lse_col(lse) * scale / math.log(2.0))))
    for cid, (text, probs) in zip(("P:no_scale", "P:scale_twice", "P:no_lse", "P:lse_units", "P:lse_units",
                                   "P:lse_scaled"), cands):
        if _replay(ctx, probs=probs):
            yield Cause(cid, text)
    vis = visible_of(ctx.inputs)
    if vis is not None:
        n_q, n_k = vis.shape
        full = _exp_with(lambda s, lse: lse_col(lse))
        if _replay(ctx, probs=lambda s, lse, v: full(s, lse, None)):
            yield Cause("mask:missing", "the causal mask is missing in the backward pass: P is recomputed for keys j > i + (Nk - Nq) "
                    "too. Those keys had weight 0 in the forward pass; give them P = 0 here.")
        # The per-element mask missing, in the tiles a causal kernel visits: key tile K with query
        # tile Q when K's first key is within what Q's last row sees.
        for bm in tiles(ctx, "BLOCK_M"):
            for bn in tiles(ctx, "BLOCK_N"):
                tiled = replays.visible_where(n_q, n_k, replays.tile_limits(n_q, n_k, bm, bn, lambda f, last: last))
                if not np.array_equal(tiled, vis) and _replay(ctx, probs=lambda s, lse, v, t=tiled: full(s, lse, t)):
                    yield Cause("mask:diagonal_tiles_unmasked", (
                        f"keys above the diagonal get P inside the tiles that straddle it (the output matches "
                        f"tiles of {bm} queries × {bn} keys recomputing P there without the causal test): a "
                        "tile that straddles the diagonal needs P = 0 where j > i + (Nk - Nq), as in the "
                        "forward pass."))
        yield from visited_causes(ctx, full, vis)
        top_left = np.arange(n_k)[None, :] <= np.arange(n_q)[:, None]
        # In the tiles the kernel visits: with Nq > Nk a key block's loop skips rows that j <= i lets see.
        seen = [visited(n_q, n_k, bm, bn, lambda k0, off: k0 - off)
                for bm in tiles(ctx, "BLOCK_M") for bn in tiles(ctx, "BLOCK_N")]
        # Or only where the kernel runs its per-element test (module 11): in the tiles the diagonal
        # cuts, or past n_q or n_k; a tile wholly below the diagonal sees all its keys.
        tested = [~whole_tiles(n_q, n_k, bm, bn) for bm in tiles(ctx, "BLOCK_M") for bn in tiles(ctx, "BLOCK_N")]
        candidates = [top_left] + [top_left & x for x in seen if (top_left & ~x).any()] + \
            [x & (top_left | ~m) for x in seen for m in tested]
        # A row that sees no key (lse = -inf) and that the wrong mask lets see some: P = exp(s + inf).
        raw = _exp_with(lambda s, lse: lse[:, None])
        if n_q != n_k and any(_replay(ctx, probs=lambda s, lse, v, t=t, f=f: f(s, lse, t))
                              for t in candidates for f in (full, raw)):
            yield Cause("mask:top_left", "the causal mask of the backward pass is aligned top-left (j <= i). It must match the forward "
                    "pass: bottom-right, key j visible to query i iff j <= i + (Nk - Nq).")
    yield from unmasked_p_causes(ctx, _exp_with(lambda s, lse: lse_col(lse)))


def whole_tiles(n_q: int, n_k: int, block_m: int, block_n: int) -> np.ndarray:
    """[n_q, n_k]: the pairs in tiles (block_m queries × block_n keys) that a causal kernel runs
    without its per-element test: wholly below the bottom-right diagonal and inside n_q and n_k."""
    offset = n_k - n_q
    k_start = (np.arange(n_k) // block_n) * block_n
    m_start = (np.arange(n_q) // block_m) * block_m
    return (k_start[None, :] + block_n - 1 <= m_start[:, None] + offset) & \
        (k_start[None, :] + block_n <= n_k) & (m_start[:, None] + block_m <= n_q)


def visited(n_q: int, n_k: int, block_m: int, block_n: int, begin) -> np.ndarray:
    """[n_q, n_k]: the pairs (i, j) the kernel visits. A key block starting at k_start runs the query
    tiles from m_begin = max(0, begin(k_start, offset)) rounded down to a tile, to the end (the
    solution's begin: k_start - offset, the first row that sees key k_start)."""
    offset = n_k - n_q
    k_start = (np.arange(n_k) // block_n) * block_n
    m_begin = np.maximum(0, begin(k_start, offset)) // block_m * block_m
    return np.arange(n_q)[:, None] >= m_begin[None, :]


def visited_causes(ctx, full, vis):
    """Causal: the key block's loop over query tiles starting elsewhere than at the first row that
    sees it, or P's causal test, inside the visited tiles, missing or reading the key's index within
    its tile."""
    n_q, n_k = vis.shape
    j = np.arange(n_k)[None, :]
    i = np.arange(n_q)[:, None]
    offset = n_k - n_q
    for bm in tiles(ctx, "BLOCK_M"):
        for bn in tiles(ctx, "BLOCK_N"):
            seen = visited(n_q, n_k, bm, bn, lambda k0, off: k0 - off)
            for cid, text, p_vis in (
                    ("loop_start:query_tiles:offset_sign", (
                        f"each key block's loop over query tiles starts at (k_start + offset) / BLOCK_M, "
                        f"the offset's sign flipped (the output matches it, with tiles of {bm} queries × "
                        f"{bn} keys): the first row that sees key k_start is i = k_start - offset, so "
                        "m_begin = max(0, (k_start - offset) / BLOCK_M · BLOCK_M)."),
                     vis & visited(n_q, n_k, bm, bn, lambda k0, off: k0 + off)),
                    ("loop_start:query_tiles:no_offset", (
                        f"each key block's loop over query tiles starts at k_start / BLOCK_M, without the "
                        f"offset (the output matches it, with tiles of {bm} queries × {bn} keys): the first "
                        "row that sees key k_start is i = k_start - offset, offset = Nk - Nq, so m_begin = "
                        "max(0, (k_start - offset) / BLOCK_M · BLOCK_M)."),
                     vis & visited(n_q, n_k, bm, bn, lambda k0, off: k0)),
                    ("mask:tile_relative_key", (
                        f"P's causal test compares the key's index within its tile, j, with i + offset, not "
                        f"k_start + j (the output matches it, with key tiles of {bn}): right in the first key "
                        "block only."),
                     seen & (j - (j // bn) * bn <= i + offset))):
                if not np.array_equal(p_vis, vis) and _replay(ctx, probs=lambda s, lse, v, t=p_vis: full(s, lse, t)):
                    yield Cause(cid, text)


def unmasked_p_causes(ctx, full):
    """P recomputed without its visibility test, in the tiles the kernel visits: under causal the keys
    past the diagonal get weight, and so do the zero-filled keys past n_k of the last, partial key
    block, whose score is 0: their P = exp(0 - lse) is harmless (their K row is 0, their dK and dV are
    never stored) until it overflows float32 (lse < -88.7), where dQ gets inf · 0 = NaN."""
    vis = visible_of(ctx.inputs)
    lse = np.asarray(ctx.inputs["lse"], np.float64)
    n_q, n_k = np.asarray(ctx.inputs["q"]).shape[2], np.asarray(ctx.inputs["k"]).shape[2]
    for bm in tiles(ctx, "BLOCK_M"):
        for bn in tiles(ctx, "BLOCK_N"):
            seen = visited(n_q, n_k, bm, bn, lambda k0, off: k0 - off) if vis is not None else np.ones((n_q, n_k), bool)
            alt = dict(zip(OUTPUTS, gradients(ctx.inputs, probs=lambda s, l, v: full(s, l, seen))))
            if n_k % bn:
                with np.errstate(over="ignore", invalid="ignore"):
                    overflow = np.isfinite(lse) & (-lse / math.log(2.0) >= 128.0)   # exp2f(-lse · log2 e) = inf
                nan_rows = overflow & seen[:, n_k - 1]                   # rows that visit the last key block
                alt["dq"] = np.where(nan_rows[..., None], np.nan, alt["dq"])
            if _matches(ctx, alt):
                yield Cause("mask:missing", (
                    f"P is recomputed without its visibility test in the tiles the kernel visits (the output "
                    f"matches it, with tiles of {bm} queries × {bn} keys): "
                    + ("keys j > i + (Nk - Nq) had weight 0 in the forward pass, and " if vis is not None else "")
                    + f"the zero-filled keys past n_k = {n_k} get P = exp(0 - lse), which overflows where lse "
                    "< -88.7 (dQ is then inf · 0 = NaN). P = 0 where the key is not visible: "
                    "k_start + j >= n_k" + (" or j > i + offset." if vis is not None else ".")))


def delta_causes(ctx):
    """D forgotten, or computed from the wrong arrays; dS with its sign flipped."""
    if _replay(ctx, dq_scale=-1.0, dk_scale=-1.0):
        yield Cause("dS:sign", "dS has the wrong sign: dQ and dK are the negated truth and dV is right (the output "
                "matches that). dS = P ∘ (dP - D), dP minus the row term D, not D - dP.")
    if _replay(ctx, delta=lambda p, dp, do, o, b, h: np.zeros(p.shape[0])):
        yield Cause("D:missing", "D is missing: dS = P ∘ dP, without the row term. The softmax's Jacobian subtracts "
                "D_i = sum_j P_ij dP_ij = rowsum(dO ∘ O) from every dP_ij of row i: dS = P ∘ (dP - D).")
    v = np.asarray(ctx.inputs["v"], np.float64)
    n_q, d = np.asarray(ctx.inputs["q"]).shape[2:]
    H = np.asarray(ctx.inputs["q"]).shape[1]
    flat = v.reshape(-1)

    def v_as_o(p, dp, do, o, b, h):        # v's memory read with o's shape: the arrays swapped
        start = (b * H + h) * n_q * d
        if start + n_q * d > flat.size:
            return np.full(p.shape[0], np.nan)
        return (do * flat[start:start + n_q * d].reshape(n_q, d)).sum(axis=-1)
    if _replay(ctx, delta=v_as_o):
        yield Cause("D:from_v", "D is computed from V instead of O: D_i must be rowsum(dO ∘ O), the output of the forward "
                "pass (check which array backward_preprocess receives).")
    for cid, arrays, delta in (("D:from_do_do", "dO ∘ dO", lambda p, dp, do, o, b, h: (do * do).sum(axis=-1)),
                               ("D:from_o_o", "O ∘ O", lambda p, dp, do, o, b, h: (o * o).sum(axis=-1))):
        if _replay(ctx, delta=delta):
            yield Cause(cid, f"D is rowsum({arrays}) (the output matches that): D_i = rowsum(dO ∘ O), the upstream "
                        "gradient times the forward output.")
    d_feat = np.asarray(ctx.inputs["q"]).shape[3]
    for lanes in (16, 8, 4, 2, 1):            # lane 0 ends with the sums of lanes 0 .. lanes - 1 only
        part = (np.arange(d_feat) % 32) < lanes
        if part.all():
            continue
        if _replay(ctx, delta=lambda p, dp, do, o, b, h, part=part: (do * o)[:, part].sum(axis=-1)):
            yield Cause("D:partial_lanes", f"D sums only part of its row: the output matches D_i = sum of dO ∘ O over the features "
                    f"c with c mod 32 < {lanes}, the partial sums of lanes 0 .. {lanes - 1}. The warp's reduction "
                    f"misses lanes: a butterfly of __shfl_xor_sync must start at stride 16 (then 8, 4, 2, 1) "
                    f"for all 32 lanes' sums to reach lane 0.")
    for step in (2, 4, 8, 16):                # a butterfly that stops early: lanes c with c % step == 0
        part = (np.arange(d_feat) % 32) % step == 0
        if _replay(ctx, delta=lambda p, dp, do, o, b, h, part=part: (do * o)[:, part].sum(axis=-1)):
            yield Cause("D:partial_lanes", (
                f"D sums only part of its row: the output matches D_i = sum of dO ∘ O over the lanes c "
                f"with c mod {step} = 0, what lane 0 holds when the butterfly stops before stride "
                f"{step // 2}. Run the __shfl_xor_sync butterfly down to stride 1 (16, 8, 4, 2, 1)."))
    # A butterfly that assigns, acc = shfl(acc, stride), where acc += is due: lane t ends with the
    # partial sum of lane t ^ 31 alone (the features c with c mod 32 = 31 for lane 0).
    part = (np.arange(d_feat) % 32) == 31
    if _replay(ctx, delta=lambda p, dp, do, o, b, h, part=part: (do * o)[:, part].sum(axis=-1)):
        yield Cause("D:butterfly_assigns", (
            "D holds one lane's partial sum only: the output matches lane 0 ending with lane 31's (the features "
            "c with c mod 32 = 31), what a butterfly that assigns, acc = __shfl_xor_sync(.., acc, stride), leaves "
            "it. Each step adds the partner's value: acc += __shfl_xor_sync(.., acc, stride)."))
    # dS without its factor P: dS = dP - D, in every pair the kernel visits (masked ones too).
    vis = visible_of(ctx.inputs)
    n_k = np.asarray(ctx.inputs["k"]).shape[2]
    seen_all = [None] if vis is None else [
        visited(n_q, n_k, bm, bn, lambda k0, off: k0 - off) for bm in tiles(ctx, "BLOCK_M") for bn in tiles(ctx, "BLOCK_N")]
    for seen in seen_all:
        if _replay(ctx, ds_of=lambda p, dp, D, seen=seen: (dp - D) if seen is None else np.where(seen, dp - D, 0.0)):
            yield Cause("dS:no_p", "dS is dP - D, without the factor P (the output matches that): the softmax's Jacobian "
                        "gives dS = P ∘ (dP - D), each element times its own P.")
            break
    if _replay(ctx, delta=lambda p, dp, do, o, b, h: dp.sum(axis=-1)):
        yield Cause("D:plain_rowsum", "D is the plain row sum of dP = dO V^T. It is the P-weighted sum, D_i = sum_j P_ij dP_ij, "
                "which equals rowsum(dO ∘ O) since O = P V.")
    return


def accumulation_causes(ctx):
    """dK and dV not summed over a GQA group; a scale dropped on dQ or dK."""
    H, Hkv = np.asarray(ctx.inputs["q"]).shape[1], np.asarray(ctx.inputs["k"]).shape[1]
    if H != Hkv:
        for what, heads in (("only the first query head of each group", lambda g, n: [g * n]),
                            ("only the last query head of each group (each head overwrote the previous)",
                             lambda g, n: [g * n + n - 1])):
            if _replay(ctx, heads=heads):
                yield Cause("gqa:not_summed", f"dK and dV hold {what}. With GQA, H / Hkv = {H // Hkv} query heads share a kv head, so "
                        f"its dK and dV are the sums over those heads: accumulate all of them before storing.")
    # Both halves of a query tile's dQ rows added at the first half's rows: those rows get twice
    # their dQ and the second half none.
    dq = ctx.ref["dq"]
    for bm in tiles(ctx, "BLOCK_M"):
        first_half = (np.arange(dq.shape[2]) % bm) < bm // 2
        alt = dict(dq=dq * np.where(first_half, 2.0, 0.0)[:, None], dk=ctx.ref["dk"], dv=ctx.ref["dv"])
        # Only a case with rows in a second half shows them empty: dQ doubled alone fits other
        # bugs too, so there the match is plain (it confirms a cause, never proposes one).
        if _matches(ctx, alt):
            yield Cause("dq:rows_first_half_twice", plain=dq.shape[2] <= bm // 2, text=(
                f"in each query tile of {bm} rows, the first {bm // 2} rows hold twice their dQ and the other "
                f"{bm - bm // 2} none (the output matches that): the dQ store adds the second half's rows at "
                "the first half's. Thread (qi, half) owns rows qi + (2 · r + half) · ROW_GROUPS: use the "
                "same row in the dS read and in the atomicAdd."))
    # The dS rows read for dQ from the first half of a thread's rows (qi + ROW_GROUPS · r), added at its
    # interleaved rows qi + (2 r + half) · ROW_GROUPS: 16-row groups 2r and 2r + 1 both get group r's dQ.
    for bm in tiles(ctx, "BLOCK_M"):
        for groups in sorted({n // 16 for n in tiles(ctx, "NTHREADS") if n % 16 == 0}):
            if groups >= bm or bm % (2 * groups):
                continue
            n_q = dq.shape[2]
            rows = np.arange(n_q)
            local = rows % bm
            src = rows - local + local % groups + (local // groups) // 2 * groups
            alt_dq = np.where((src < n_q)[:, None], dq[:, :, np.minimum(src, n_q - 1)], 0.0)
            if _matches(ctx, dict(dq=alt_dq, dk=ctx.ref["dk"], dv=ctx.ref["dv"])):
                yield Cause("dq:rows_read_first_half", (
                    f"each thread's dQ rows qi + (2r + half) · {groups} hold the dQ of row qi + r · {groups} (the output "
                    f"matches that, tiles of {bm}): the dS row read for dQ is the first half's, where it must "
                    "be the row the atomicAdd adds to, qi + (2r + half) · ROW_GROUPS, in both places."))
            # The right dS rows added at the wrong rows: at qi + r · ROW_GROUPS (16-row group r gets groups
            # 2r and 2r + 1, the later groups nothing), or at qi + 2r · ROW_GROUPS, the atomicAdd's row
            # without its half (group 2r gets its own and group 2r + 1's, group 2r + 1 nothing).
            for cid, to, text in (
                    ("dq:rows_added_first_half", src,
                     f"each thread's dQ of rows qi + (2r + half) · {groups} is added at row qi + r · {groups} (the "
                     f"output matches that, tiles of {bm}: row groups 2r and 2r + 1 summed into group r, the later "
                     "groups 0): the atomicAdd's row must be the row whose dS it read, qi + (2r + half) · "
                     "ROW_GROUPS."),
                    ("dq:rows_added_even_group", rows - local + local % groups + (local // groups) // 2 * 2 * groups,
                     f"each thread's dQ of rows qi + (2r + 1) · {groups} is added at row qi + 2r · {groups} (the "
                     f"output matches that, tiles of {bm}: row groups 2r and 2r + 1 summed into group 2r, group "
                     "2r + 1 left 0): the atomicAdd's row leaves out the half, where it must be the row whose "
                     "dS it read, qi + (2r + half) · ROW_GROUPS.")):
                alt_dq = np.zeros_like(dq)
                np.add.at(alt_dq, (slice(None), slice(None), to), dq)
                if _matches(ctx, dict(dq=alt_dq, dk=ctx.ref["dk"], dv=ctx.ref["dv"])):
                    yield Cause(cid, text)
    for name, kw in (("dQ", "dq_scale"), ("dK", "dk_scale")):
        for factor, what in ((1.0 / ctx.inputs["scale"], "without the scale"), (ctx.inputs["scale"], "with the scale twice")):
            if _replay(ctx, **{kw: factor}):
                yield Cause(f"{name.lower()}:scale_{'missing' if factor != ctx.inputs['scale'] else 'twice'}", f"{name} is computed {what}: S = scale · Q K^T, so {name} = scale · "
                        f"{'dS K' if name == 'dQ' else 'dS^T Q'}, once.")
    # dS = P · dP - D: the -D reaches every pair the kernel visits (under causal, the tiles from
    # each key block's first row on), also those with P = 0.
    n_q, n_k = np.asarray(ctx.inputs["q"]).shape[2], np.asarray(ctx.inputs["k"]).shape[2]
    shapes = [(bm, bn) for bm in tiles(ctx, "BLOCK_M") for bn in tiles(ctx, "BLOCK_N")] \
        if ctx.inputs["causal"] else [(None, None)]
    for bm, bn in shapes:
        seen = visited(n_q, n_k, bm, bn, lambda k0, off: k0 - off) if bm else np.ones((n_q, n_k), bool)
        if _replay(ctx, ds_of=lambda p, dp, D, seen=seen: p * dp - D * seen):
            yield Cause("dS:precedence", (
                "dS is P · dP - D, without the parentheses (the output matches it): D multiplies P too, "
                "dS = P ∘ (dP - D). The dropped D · (1 - P) reaches every pair the kernel visits, also "
                "those with P = 0."))
            break
    if _replay(ctx, dkdv_x=("q", "do")):
        yield Cause("dkdv:operands_swapped", (
            "dV and dK take each other's right-hand operand (the output matches dV = P^T Q and dK = "
            "scale · dS^T dO): dV = P^T dO and dK = scale · dS^T Q."))
    for operands, cid, text in ((("do", "do"), "dk:from_do", "dK is scale · dS^T dO (the output matches that; dV is "
                                 "right): dK's right-hand operand is the Q tile, dK = scale · dS^T Q"),
                                (("q", "q"), "dv:from_q", "dV is P^T Q (the output matches that; dK is right): dV's "
                                 "right-hand operand is the dO tile, dV = P^T dO")):
        if _replay(ctx, dkdv_x=operands):
            yield Cause(cid, text + ".")
    if _replay(ctx, dq_ds=lambda p, ds: p):
        yield Cause("dq:from_p", (
            "dQ is scale · P K, with P where dS is due (the output matches that; dK and dV are right): "
            "the dS that dQ reads holds P. Check what is in it when dQ reads it: dS = P ∘ (dP - D) must "
            "be formed before it is stored for dQ."))
    # The D of one query of each pair (2t, 2t + 1) used for both: a thread holds two neighbouring
    # queries of a fragment row and read one D for the two.
    for which, pick in (("first", lambda i: i - i % 2), ("second", lambda i: i | 1), ("other", lambda i: i ^ 1)):
        def pair_d(p, dp, do, o, b, h, pick=pick):
            D = np.append((do * o).sum(axis=-1), 0.0)      # a query past n_q: its D is the tile's zero fill
            return D[np.minimum(pick(np.arange(D.shape[0] - 1)), D.shape[0] - 1)]
        if _replay(ctx, delta=pair_d):
            yield Cause(f"D:pair_{which}", (
                (f"dS of queries 2i and 2i + 1 both subtract the {which} one's D" if which != "other" else
                 "dS of each query subtracts its neighbour's D, 2i that of 2i + 1 and the other way round") +
                " (the output matches that): "
                "a lane's two neighbouring queries (2t and 2t + 1 of a fragment row) each take their own "
                "D, the .x and the .y of the pair it read."))
    # Each query tile's dQ added at tile 0's rows: rows r < BLOCK_M hold the sum over the tiles of
    # their row r, the rest keep the zeros dQ started with.
    for bm in tiles(ctx, "BLOCK_M"):
        if dq.shape[2] > bm:
            rows = np.arange(dq.shape[2])
            alt_dq = np.zeros_like(dq)
            np.add.at(alt_dq, (slice(None), slice(None), rows % bm), dq[:, :, rows])
            if _matches(ctx, dict(dq=alt_dq, dk=ctx.ref["dk"], dv=ctx.ref["dv"])):
                yield Cause("index_drop:tile_start:dq", (
                    f"every query tile adds its dQ rows at tile 0's rows (the output matches rows 0 .. "
                    f"{bm - 1} holding the sum over the tiles and the other rows 0, tiles of {bm}): the dQ "
                    "row is m_start + the row within the tile."))
    # D of the wrong row: a thread's rows qi, qi + ROW_GROUPS, ... all subtract its first row's D.
    for bm in tiles(ctx, "BLOCK_M"):
        for groups in sorted({n // 16 for n in tiles(ctx, "NTHREADS") if n % 16 == 0} or {16}):
            if groups >= bm:
                continue
            def first_row_d(p, dp, do, o, b, h, bm=bm, groups=groups):
                D = (do * o).sum(axis=-1)
                i = np.arange(D.shape[0])
                return D[np.minimum((i // bm) * bm + (i % bm) % groups, D.shape[0] - 1)]
            if _replay(ctx, delta=first_row_d):
                yield Cause("D:row", (
                    f"each thread subtracts its first row's D from all its rows (the output matches D of "
                    f"row qi for rows qi + {groups} · r, tiles of {bm}): dS = P ∘ (dP - D) takes the D of "
                    "the row it is on."))
            # The same slip in P: every row of the thread recomputed against its first row's lse.
            def first_row_p(s, lse, vis, bm=bm, groups=groups):
                i = np.arange(lse.shape[0])
                other = lse[(i // bm) * bm + (i % bm) % groups]
                with np.errstate(over="ignore", invalid="ignore"):   # in float32, as the kernel: it overflows
                    p = np.exp((s - np.where(np.isfinite(other), other, np.inf)[:, None]).astype(np.float32))
                return np.where(vis, p.astype(np.float64), 0.0) if vis is not None else p.astype(np.float64)
            if _replay_padded(ctx, bm, probs=first_row_p):
                yield Cause("P:lse_row", (
                    f"each thread recomputes P of all its rows against its first row's lse (the output "
                    f"matches lse of row qi for rows qi + {groups} · r, tiles of {bm}): P = exp(s - lse) "
                    "takes the lse of the row it is on."))
    sc = ctx.inputs["scale"]
    if _matches(ctx, dict(dq=ctx.ref["dq"], dk=ctx.ref["dk"] / sc, dv=ctx.ref["dv"] * sc)):
        yield Cause("dkdv:scale_swapped", (
            "the scale is applied to dV instead of dK (the output matches dK / scale and dV · scale): "
            "dK = scale · dS^T Q, while dV = P^T dO has no scale."))
    return


def located(ctx):
    """Which gradients are right and which are wrong (an observation, not a replay)."""
    wrong = [n for n in OUTPUTS if _wrong(ctx, n)]
    # A gradient that is 0 in this case (one key per row: dS = P (dP - D) = 0) is right by any kernel
    # that writes zeros: it says nothing about the code that computes it.
    zero = [n for n in OUTPUTS if n not in wrong and not np.any(np.abs(np.asarray(ctx.ref[n], np.float64)) > 1e-9)]
    right = [n for n in OUTPUTS if n not in wrong and n not in zero]
    names = {"dq": "dQ", "dk": "dK", "dv": "dV"}
    said = lambda ns: " and ".join(names[n] for n in ns)              # noqa: E731
    if wrong and (right or zero):
        parts = [f"{said(right)} {'is' if len(right) == 1 else 'are'} right"] if right else []
        if zero:
            parts.append(f"{said(zero)} {'is' if len(zero) == 1 else 'are'} 0 in this case (a row with one key has "
                         f"dS = 0), so {'its' if len(zero) == 1 else 'their'} matching says nothing")
        yield Seen(f"{'; '.join(parts)}; {said(wrong)} {'is' if len(wrong) == 1 else 'are'} wrong.")


def store_causes(ctx):
    """dK and dV stored at permuted rows of their key block: a thread's keys kj · KEYS_K + n written
    to row kj + n · (BLOCK_N / KEYS_K) (rows that land past n_k dropped, the rows left over never
    written); or a gradient's two neighbouring features exchanged by its store."""
    names = {"dq": "dQ", "dk": "dK", "dv": "dV"}
    for name in OUTPUTS:
        x = np.asarray(ctx.ref[name])
        if x.size == 0 or x.shape[-1] % 2:      # no rows (Nq = 0: dq is empty), or no pairs
            continue
        swapped = x.reshape(x.shape[:-1] + (-1, 2))[..., ::-1].reshape(x.shape)
        if _matches(ctx, {**{n: ctx.ref[n] for n in OUTPUTS}, name: swapped}):
            yield Cause(f"store:{name}_pairs_swapped", (
                f"{names[name]} holds features 2c and 2c + 1 exchanged (the output matches that; the other "
                f"gradients are right): its store writes each pair (lo, hi) as (hi, lo). The first value of "
                f"a pair goes to the even feature (the low half of the 32-bit pair, .x of a float2)."))
    dtype = ctx.params.get("dtype")
    if dtype in ("float16", "bfloat16"):
        other = "bfloat16" if dtype == "float16" else "float16"
        for name in OUTPUTS:
            bits = lowp.stored_as(ctx.ref[name], other, dtype)
            if _matches(ctx, {**{n: ctx.ref[n] for n in OUTPUTS}, name: bits}):
                yield Cause(f"store:{name}_other_type", (
                    f"{names[name]} holds {other} bits read as {dtype} (the output matches that; the other gradients "
                    f"are right): its store converts to {other} (__floats2{'half2' if other == 'float16' else 'bfloat162'}_rn, "
                    f"{'__half2' if other == 'float16' else '__nv_bfloat162'}) where the element type is {dtype}: "
                    "store with elem2_t and to_elem2, which follow USE_BF16."))
    config = kernel_config(getattr(ctx, "config", None), ctx.params)
    bn, nt = config.get("BLOCK_N"), config.get("NTHREADS")
    if not (isinstance(bn, int) and isinstance(nt, int)) or nt < 16 or (bn * 8) % (nt // 2):
        return
    kk = bn * 8 // (nt // 2)                      # KEYS_K: a thread's keys in dK and dV
    if kk < 2 or bn % kk:
        return
    n_k = np.shape(ctx.ref["dk"])[2]
    dest, src, moved = [], [], False
    for k0 in range(0, n_k, bn):
        for kj in range(bn // kk):
            for n in range(kk):
                to, key = k0 + kj + n * (bn // kk), k0 + kj * kk + n
                moved |= to != key and min(to, key) < n_k
                if to < n_k and key < n_k:      # a zero-filled key past n_k stores 0 (its P is 0)
                    dest.append(to)
                    src.append(key)
    if not moved:
        return
    alt = {"dq": ctx.ref["dq"]}
    for name in ("dk", "dv"):              # the launch zero-fills dK and dV: a row left over stays 0
        alt[name] = np.zeros_like(ctx.ref[name])
        alt[name][:, :, dest] = ctx.ref[name][:, :, src]
    if _matches(ctx, alt):
        yield Cause("store:dkdv_rows_interleaved", (
            f"dK and dV hold the right rows in the wrong places within each key block of {bn}: a thread's keys "
            f"kj · KEYS_K + n (KEYS_K = {kk}) are stored at row kj + n · (BLOCK_N / KEYS_K) (the output matches "
            "that; dQ is right). Store key j = k_start + kj · KEYS_K + n at row j."))


def diagnose(ctx):
    yield from recompute_causes(ctx)
    yield from store_causes(ctx)
    yield from delta_causes(ctx)
    yield from accumulation_causes(ctx)
    yield from located(ctx)
