"""The backward pass in float16 and bfloat16 (module 11): inputs, the same-precision reference
gradients, the tolerance they earn, and the diagnosis.

The inputs q, k, v, o and dO are 16-bit (bfloat16 travels as uint16 bits, as in module 06), lse is
float32. The reference is module 09's float64 gradients (grader/attention/backward.py) on the decoded,
rounded inputs, so the inputs' rounding costs nothing. What a correct kernel still loses: P rounded to
the input type before dV = Pᵀ dO, dS rounded before dK = dSᵀ Q and dQ = dS K, D taken from the rounded
o, and dQ, dK, dV rounded at the end. The same-precision reference does exactly that, with float32
products and sums; each gradient's tolerance is lowp.MULTIPLE times its error plus a floor (module 06's
rule, grader/attention/lowp.py), so a correct kernel passes and a structural bug does not.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import backward, lowp
from . import references as R
from .inputs import attention_inputs
from ..spec import Cause, Tolerance
from .fragments import pieces_transposed, quadrants_swapped
from .replays import kernel_config

OUTPUTS = backward.OUTPUTS
SIXTEEN_BIT = ("q", "k", "v", "o", "do")


def backward_lowp_inputs(p: dict, rng: np.random.Generator) -> dict:
    """q, k, v rounded to p["dtype"]; o (rounded) and lse (float32) from the float64 forward on the
    rounded inputs, as a forward kernel hands them over; dO random (times p["do_scale"], a loss scale),
    rounded; scale; causal."""
    dtype = p["dtype"]
    x = attention_inputs(p, rng)
    for name in ("q", "k", "v"):
        x[name] = lowp.encode(x[name], dtype)
    q, k, v = (lowp.decode(x[name], dtype).astype(np.float64) for name in ("q", "k", "v"))
    causal = bool(p.get("causal", False))
    o, lse = R.attention(q, k, v, x["scale"], causal=causal)
    x.update(o=lowp.encode(o, dtype), lse=lse.astype(np.float32), causal=causal,
             do=lowp.encode(rng.standard_normal(o.shape) * p.get("do_scale", 1.0), dtype))
    return x


def decoded(inputs: dict, dtype: str) -> dict:
    """The inputs as the float64 values they hold (what the references and the replays read)."""
    return dict(inputs, **{x: lowp.decode(inputs[x], dtype).astype(np.float64) for x in SIXTEEN_BIT})


def reference(inputs: dict, dtype: str) -> dict:
    return backward.reference(decoded(inputs, dtype))


def same_precision_gradients(inputs: dict, dtype: str) -> dict:
    """The gradients as a 16-bit tensor-core kernel computes them: float32 scores, P = exp(s - lse) and
    dP; D = rowsum(dO ∘ O) in float32 from the rounded o; P rounded before Pᵀ dO, dS = P ∘ (dP - D)
    rounded before dSᵀ Q and dS K (float32 products and sums, summed in float32 over a GQA group); the
    gradients rounded to dtype at the end."""
    x = {n: np.asarray(v, np.float32) for n, v in decoded(inputs, dtype).items() if n in SIXTEEN_BIT}
    lse = np.asarray(inputs["lse"], np.float32)
    scale = np.float32(inputs["scale"])
    B, H, n_q, d = x["q"].shape
    Hkv, n_k = x["k"].shape[1:3]
    vis = backward.visible_of(inputs)
    dq = np.zeros((B, H, n_q, d), np.float32)
    dk, dv = np.zeros((B, Hkv, n_k, d), np.float32), np.zeros((B, Hkv, n_k, d), np.float32)
    for b in range(B):
        for h in range(H):
            g = R.kv_head_of(h, H, Hkv)
            q, k, v, o, do = x["q"][b, h], x["k"][b, g], x["v"][b, g], x["o"][b, h], x["do"][b, h]
            s = (q @ k.T) * scale
            with np.errstate(over="ignore", invalid="ignore"):
                p = np.exp(s - np.where(np.isfinite(lse[b, h]), lse[b, h], np.inf)[:, None]).astype(np.float32)
            if vis is not None:
                p = np.where(vis, p, np.float32(0))
            dp = do @ v.T
            delta = (do * o).sum(axis=-1, dtype=np.float32)
            ds = lowp.rounded(p * (dp - delta[:, None]), dtype).astype(np.float32)
            dv[b, g] += lowp.rounded(p, dtype).astype(np.float32).T @ do
            dk[b, g] += ds.T @ q
            dq[b, h] = ds @ k
    return {"dq": lowp.rounded(scale * dq, dtype), "dk": lowp.rounded(scale * dk, dtype),
            "dv": lowp.rounded(dv, dtype)}


CANCELLATION = 1e-5    # float32's noise in dP - D, relative to the size of the terms a gradient sums


def tolerances(inputs: dict, dtype: str, ref: dict) -> dict:
    """Each gradient: lowp.MULTIPLE times the same-precision reference's error, plus EPS/8 of the type
    (module 06's rule, grader/attention/lowp.py), the error relative to the gradient's norm floored at
    0.01 per element as the comparison measures it. Where a gradient cancels (a row with one key has
    dS = P ∘ (dP - D) = 0 exactly) what is left is float32 noise in dP - D, which no two kernels share:
    there the bound is at least CANCELLATION times the size of the terms (backward.magnitudes), as
    module 09 widens its float32 tolerance."""
    sp = same_precision_gradients(inputs, dtype)
    mags = backward.magnitudes(decoded(inputs, dtype))
    out = {}
    for name in OUTPUTS:
        floor = 1e-2 * np.sqrt(max(ref[name].size, 1))
        low = lowp.tolerance(sp[name], ref[name], lowp.EPS[dtype] / 8, floor)
        ratio = np.linalg.norm(mags[name]) / max(np.linalg.norm(ref[name]), floor)
        out[name] = Tolerance(max(low.rel, CANCELLATION * ratio),
                              max(low.abs, CANCELLATION * float(mags[name].max(initial=0.0))))
    return out


def widen(out: dict, dtype: str) -> dict:
    """The gradients hold the input type: widened exactly to float32 (the poison kept)."""
    return {name: lowp.decode(val, dtype) for name, val in out.items()}


# ---- what went wrong --------------------------------------------------------------------------------

def rounding_noise(inputs: dict, dtype: str, ref: dict) -> float:
    """How far a correct kernel's gradients lie from the float64 ones, relative (the largest of the
    three, measured on the same-precision reference): the slack a replay's match must allow."""
    sp = same_precision_gradients(inputs, dtype)
    return max(backward._distance(sp[n], ref[n], ref[n]) for n in OUTPUTS)


def _dq_parts(ctx, d: int) -> int | None:
    """How many parts of the features dQ's warps split between them (module 11: DQ_SPLIT = (BLOCK_N
    / 16) / (BLOCK_M / 16)), from the kernel's CONFIG; None where it does not say."""
    config = kernel_config(getattr(ctx, "config", None), ctx.params)
    bm, bn = config.get("BLOCK_M"), config.get("BLOCK_N")
    if not (isinstance(bm, int) and isinstance(bn, int)) or bm % 16 or bn % bm:
        return None
    parts = bn // bm
    return parts if parts > 1 and d % parts == 0 else None


def _kernel_like(ctx, **kw) -> bool:
    """Do the gradients match backward.gradients(**kw) computed as this kernel computes: in float32, Pᵀ
    and dSᵀ rounded to the input type before their products, the gradients stored in it? Sums of terms
    past 1e36 overflow float32 or not by the order they are added in, which the replay does not share
    with the kernel: there, both count alike as overflowed."""
    dtype = ctx.params["dtype"]
    with np.errstate(over="ignore", invalid="ignore"):
        alt = backward.gradients(ctx.inputs, dv_p=lambda p: lowp.rounded(p, dtype),
                                 ds_of=lambda p, dp, D: lowp.rounded(p * (dp - D), dtype), work=np.float32, **kw)
        alt = {n: lowp.rounded(x, dtype) for n, x in zip(OUTPUTS, alt)}      # stored in the input type
    big = lambda x: np.where(~np.isfinite(x) | (np.abs(x) > 1e36), np.inf, x)   # noqa: E731
    return backward._matches(dataclasses.replace(ctx, out={n: big(np.asarray(x, np.float64)) for n, x in ctx.out.items()}),
                             {n: big(x) for n, x in alt.items()})


def fragment_causes(ctx):
    """dV and dK (only) wrong in the way an operand read without .trans makes them: dV = Pᵀ T(dO) and
    dK = scale · dSᵀ T(Q), T transposing every 8 × 8 piece of the query tiles (P and dS themselves
    computed from the true Q and dO)."""
    bent = {n: pieces_transposed(np.asarray(ctx.inputs[n], np.float64)) for n in ("do", "q")}
    alt = dict(zip(OUTPUTS, backward.gradients(ctx.inputs, rights=bent,
                                               delta=lambda p, dp, do, o, b, h: (do * o).sum(axis=-1))))
    if backward._matches(ctx, alt):
        yield Cause("fragment:dkdv_b:transposed", (
            "dK and dV match Q and dO read with every 8 × 8 piece transposed (dQ is right): their B "
            "fragments were read with ldmatrix_x4 where ldmatrix_x4_trans is due. In dV += Pᵀ dO and "
            "dK += dSᵀ Q the k index is the query, and B wants two neighbouring queries of one feature "
            "in a register: dO and Q are stored [query][feature], so each 8 × 8 matrix must be "
            "transposed on the way."))
    # Sᵀ = K Qᵀ and dPᵀ = V dOᵀ with their B registers paired (b[0], b[1]), (b[2], b[3]): each
    # 16 × 16 block of Q and dO (16 queries × 16 features) read with its off-diagonal pieces exchanged.
    bent = {n: quadrants_swapped(np.asarray(ctx.inputs[n], np.float64)) for n in ("q", "do")}
    # P = exp(S - lse) with the forward's lse, not normalised: far from 1, and past the 16-bit range
    # (inf) where S is far too large, so the products' operands are rounded as the kernel's are.
    from_lse = backward._exp_with(lambda s, lse: np.where(np.isfinite(lse), lse, np.inf)[:, None])
    if _kernel_like(ctx, lefts=bent, probs=from_lse):
        yield Cause("fragment:st_b:quadrants", (
            "the gradients match Sᵀ = K Qᵀ and dPᵀ = V dOᵀ computed with Q and dO read with the off-diagonal "
            "8 × 8 pieces of each 16 × 16 block exchanged (queries 8-15 of features 0-7 with queries 0-7 of "
            "features 8-15): their B fragments are paired wrongly. From one ldmatrix_x4 of a 16 × 16 block, "
            "the 8-query tile 2np takes (b[0], b[2]), features 0-7 then 8-15 of queries 0-7, and tile "
            "2np + 1 takes (b[1], b[3])."))
    # The lse of one query of each pair (2t, 2t + 1) used for the other: a lane holds two neighbouring
    # queries of a fragment row and reads their lse with one 8-byte load. P = exp(S - lse') can
    # overflow where lse' is far below the row's own, so the replay computes as the kernel does.
    for which, pick in (("first", lambda i: i - i % 2), ("second", lambda i: i | 1), ("other", lambda i: i ^ 1),
                        ("t_index", lambda i: i - i % 8 + (i % 8) // 2 + i % 2)):
        def pair_p(s, lse, vis, pick=pick, which=which):
            padded = np.append(lse, 0.0)                 # a query past n_q: its lse is the tile's zero fill
            other = padded[np.minimum(pick(np.arange(lse.shape[0])), lse.shape[0])]
            if which != "t_index":
                return from_lse(s, other, vis)
            # Another row's lse, as the kernel's exp2f takes it: in float32, inf past its range, and
            # inf where that row saw no key (lse = -inf) and this one sees some.
            with np.errstate(over="ignore", invalid="ignore"):
                p = np.exp(np.float32(s) - np.float32(other)[:, None]).astype(np.float64)
            return np.where(vis, p, 0.0) if vis is not None else p
        if _kernel_like(ctx, probs=pair_p):
            if which == "t_index":
                yield Cause("P:lse_pair_t_index", (
                    "P of queries 8 nt + 2t and 8 nt + 2t + 1 is recomputed with the lse of queries 8 nt + t and "
                    "8 nt + t + 1 (the output matches that): the lane's pair of lse is read at lse_t[nt * 8 + t], "
                    "where its two queries start at nt * 8 + 2t. (On a GPU that 8-byte read is also misaligned "
                    "for odd t.)"))
                continue
            yield Cause(f"P:lse_pair_{which}", (
                (f"P of queries 2i and 2i + 1 is recomputed with the {which} one's lse" if which != "other" else
                 "P of each query is recomputed with its neighbour's lse, 2i with that of 2i + 1 and the other "
                 "way round") +
                " (the output matches that): a lane's two neighbouring queries (2t and 2t + 1 of a fragment "
                "row) each take their own lse, the .x and the .y of the pair it read."))
    # The pair's lse picked by e / 2, the element's key half, where e % 2, its query, is due: keys g take
    # the first query's lse, keys g + 8 the second's.
    def by_key_half(s, lse, vis):
        padded = np.append(lse, 0.0)                     # a query past n_q: its lse is the tile's zero fill
        i, n = np.arange(lse.shape[0]), lse.shape[0]
        upper = (np.arange(s.shape[-1]) % 16 < 8)[None, :]
        shift = np.where(upper, padded[np.minimum(i - i % 2, n)][:, None], padded[np.minimum(i | 1, n)][:, None])
        with np.errstate(over="ignore", invalid="ignore"):
            p = np.exp(s - np.where(np.isfinite(shift), shift, np.inf))
        return np.where(vis, p, 0.0) if vis is not None else p
    if _kernel_like(ctx, probs=by_key_half):
        yield Cause("P:lse_key_half", (
            "P takes the lse of the lane's first query for its keys g and of its second query for keys g + 8 "
            "(the output matches that): the lse is chosen by e / 2, the key half of element e, where e % 2, "
            "its query, is due. Element e of a C fragment is key g + 8 (e / 2), query 2t + e % 2."))
    # dS's A fragment for dQ with registers 1 and 2 exchanged: in each 16 × 16 block (16 queries ×
    # 16 keys), queries 8-15 of keys 0-7 and queries 0-7 of keys 8-15 trade places.
    if backward._replay(ctx, dq_ds=lambda p, ds: quadrants_swapped(ds)):
        yield Cause("fragment:dq_a:quadrants", (
            "dQ matches dS read with registers a[1] and a[2] of its A fragment exchanged (dK and dV are "
            "right): in each 16 × 16 block of dS, queries 8-15 of keys 0-7 and queries 0-7 of keys 8-15 "
            "trade places. A's registers are a[0] (row g, keys 2t ..), a[1] (row g + 8), a[2] (row g, keys "
            "2t + 8 ..), a[3]: dS read for dQ with ldmatrix_x4_trans of block16_across gives them in that "
            "order (block16 gives a[1] and a[2] the other way round), and each register of dSᵀ must be "
            "stored at key warp_key + g + 8 (x % 2), queries 16 kk + 8 (x / 2) + 2t."))
    # K read for dQ with its B registers paired as for a plain ldmatrix: each 16 × 16 block of K (keys ×
    # features) with its off-diagonal pieces exchanged.
    if backward._replay(ctx, dq_k=quadrants_swapped):
        yield Cause("fragment:dq_b:quadrants", (
            "dQ matches dS K with K's off-diagonal 8 × 8 pieces of each 16 × 16 block exchanged (keys 8-15 of "
            "features 0-7 with keys 0-7 of features 8-15; dK and dV are right): K's B fragments for dQ are "
            "paired wrongly. From ldmatrix_x4_trans of a 16 × 16 block of k_s, feature tile 2dp takes "
            "(kb[0], kb[1]), keys 0-7 then 8-15, and feature tile 2dp + 1 takes (kb[2], kb[3])."))
    # dQ's key loop with two sets of accumulators (even 16-key steps into dq_frag, odd ones into dq_odd),
    # one of them never reaching the reductions: dQ = scale · dS K over half of each tile's key steps.
    step_parity = (np.arange(np.shape(ctx.inputs["k"])[-2]) // 16) % 2
    for kept, cid, lost in ((0, "dq:odd_steps_dropped", "the odd steps' set, dq_odd, never reaches them"),
                            (1, "dq:even_steps_dropped", "only the odd steps' set, dq_odd, reaches them")):
        if backward._replay(ctx, dq_ds=lambda p, ds, keep=(step_parity == kept): ds * keep[None, :]):
            yield Cause(cid, (
                f"dQ matches dS K summed over the {'even' if kept == 0 else 'odd'} 16-key steps kk of each key "
                f"tile alone (dK and dV are right): the reductions add the sum of one set of accumulators, and "
                f"{lost}. After the key loop, dq_frag[dt][e] += dq_odd[dt][e]; then atomic_add2 adds dq_frag."))
    # D chosen by the element's key half (e / 2) where its query (e % 2) is due: keys g of a warp's 16
    # take the pair's first query's D, keys g + 8 the second's.
    n_k = np.shape(ctx.inputs["k"])[-2]
    upper = (np.arange(n_k) % 16 < 8)[None, :]
    def by_key_half(p, dp, D):
        Dp = np.append(D[:, 0], 0.0)                    # a query past n_q: the tile's zero fill
        i = np.arange(D.shape[0])
        first, second = Dp[i - i % 2][:, None], Dp[np.minimum(i | 1, D.shape[0])][:, None]
        return p * (dp - np.where(upper, first, second))
    if backward._replay(ctx, ds_of=by_key_half):
        yield Cause("D:key_half", (
            "dS takes the D of the lane's first query for its keys g and of its second query for keys g + 8 (the "
            "output matches that): D is chosen by e / 2, which is the key half of element e, where e % 2, its "
            "query, is due. Element e of a C fragment is key g + 8 (e / 2), query 2t + e % 2."))
    d = np.shape(ctx.inputs["q"])[-1]
    parts = _dq_parts(ctx, d)
    if parts:
        w = d // parts
        if backward._replay(ctx, dq_k=lambda k: np.tile(k[:, :w], parts)):
            yield Cause("fragment:dq_b:feature_part", (
                f"dQ's features in every part of {w} hold those of the first part, features 0 .. {w - 1} "
                f"(the output matches dS K with K's first {w} features read for each part; dK and dV are "
                f"right): the {parts} warps of a row tile of dQ each take their own {w} features, so the "
                "K block each reads starts at its part: block16<D>(kk, fq · DQ_DT / 2 + dp, lane)."))
        # Each part added to dQ at feature fq · DQ_DT (its start counted in 8-feature tiles) where
        # fq · DQ_DT · 8 is due: the parts land overlapping near the first features.
        dq, dk, dv = backward.gradients(ctx.inputs)
        moved = np.zeros_like(dq)
        for fq in range(parts):
            moved[..., fq * w // 8: fq * w // 8 + w] += dq[..., fq * w: (fq + 1) * w]
        if backward._matches(ctx, dict(dq=moved, dk=dk, dv=dv)):
            yield Cause("dq:part_offset_in_tiles", (
                f"dQ matches each warp's part of {w} features added at feature fq · {w // 8}, where it "
                f"starts at fq · {w} (dK and dV are right): the parts overlap over the first features and "
                f"leave the last ones 0. The offset of part fq counts 8-feature tiles, fq · DQ_DT, where "
                "features are due: the atomic pointer's column is fq · DQ_DT · 8 + 2t."))


def diagnose(ctx, dtype: str):
    """Module 09's replays (backward.diagnose) on the decoded inputs, with the case's rounding noise
    allowed; then the fragment replays of this module."""
    x = decoded(ctx.inputs, dtype)
    ctx = dataclasses.replace(ctx, inputs=x, noise=rounding_noise(ctx.inputs, dtype, ctx.ref))
    yield from fragment_causes(ctx)
    yield from backward.diagnose(ctx)
