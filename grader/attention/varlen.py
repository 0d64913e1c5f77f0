"""Varlen prefill (module 07): packed batches, their float64 reference, and the bugs of packing.

A batch of B sequences is packed token-major: q [total_q, H, d], k and v [total_k, Hkv, d]; sequence
b owns query tokens cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 and key tokens likewise. o is packed
like q; lse is [H, total_q]. Causal masks are bottom-right per sequence.

Case parameters are scalars, so that a shape replays with --shape: `lens` is "a/b/c" (sequence b gets
entry b % 3, as in decode), `lens_k` the same for the keys (default: `lens`); `max_seqlen` raises
max_seqlen_q/k above the longest sequence (a grid with more idle blocks).
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from ..spec import Cause, Seen
from . import references as R
from . import replays, weights


# ---- the packed batch ---------------------------------------------------------------------------

def lengths(p: dict, key: str = "lens") -> list[int]:
    """Per-sequence lengths from "a/b/c", cycled over the batch (lens_k defaults to lens)."""
    text = str(p.get(key, p["lens"]))
    vals = [int(x) for x in text.split("/")]
    return [vals[b % len(vals)] for b in range(p["B"])]


def cu_seqlens(lens) -> np.ndarray:
    """[B + 1] int32 cumulative offsets: 0, n_0, n_0 + n_1, ..."""
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def varlen_inputs(p: dict, rng: np.random.Generator) -> dict:
    """Packed q, k, v (float32, never zeros), cu_seqlens_q/k, max_seqlen_q/k, scale and causal."""
    H, Hkv, d = p["H"], p["Hkv"], p["d"]
    lq, lk = lengths(p), lengths(p, "lens_k")
    q = rng.standard_normal((sum(lq), H, d))
    k = rng.standard_normal((sum(lk), Hkv, d))
    v = rng.standard_normal((sum(lk), Hkv, d))
    if p.get("logit"):                              # scores reach about ±logit (see inputs.py)
        stretch = np.sqrt(p["logit"] / 3.0)
        q, k = q * stretch, k * stretch
    inputs = {"q": q.astype(np.float32), "k": k.astype(np.float32), "v": v.astype(np.float32),
              "cu_seqlens_q": cu_seqlens(lq), "cu_seqlens_k": cu_seqlens(lk),
              "max_seqlen_q": max(max(lq), p.get("max_seqlen", 0)), "max_seqlen_k": max(max(lk), p.get("max_seqlen", 0)),
              "scale": float(p.get("scale", 1.0 / math.sqrt(d))), "causal": bool(p.get("causal", False))}
    if p.get("padded_copy"):                        # bench: the same batch padded for module 03
        inputs.update(padded(inputs))
    return inputs


def padded(inputs) -> dict:
    """q_padded [B, H, max_seqlen_q, d], k_padded and v_padded [B, Hkv, max_seqlen_k, d]: each sequence
    at the start of its row of the batch, zeros after its end."""
    out = {}
    for name, cu, n in (("q", "cu_seqlens_q", "max_seqlen_q"), ("k", "cu_seqlens_k", "max_seqlen_k"),
                        ("v", "cu_seqlens_k", "max_seqlen_k")):
        x, c = inputs[name], inputs[cu]
        pad = np.zeros((len(c) - 1, x.shape[1], inputs[n], x.shape[2]), np.float32)
        for b in range(len(c) - 1):
            pad[b, :, :c[b + 1] - c[b]] = x[c[b]:c[b + 1]].transpose(1, 0, 2)
        out[name + "_padded"] = pad
    return out


def spans(inputs) -> list[tuple[int, int, int, int]]:
    """(q_begin, n_q, k_begin, n_k) of each sequence."""
    cq, ck = (np.asarray(inputs[x], np.int64) for x in ("cu_seqlens_q", "cu_seqlens_k"))
    return [(int(cq[b]), int(cq[b + 1] - cq[b]), int(ck[b]), int(ck[b + 1] - ck[b])) for b in range(len(cq) - 1)]


def sequence(inputs, b: int) -> dict:
    """Sequence b as a batch of one in the prefill layout: q [1, H, n_q, d], k and v [1, Hkv, n_k, d]."""
    qb, nq, kb, nk = spans(inputs)[b]
    def unpack(x, begin, n):
        return np.ascontiguousarray(np.asarray(x)[begin:begin + n].transpose(1, 0, 2)[None])
    return {"q": unpack(inputs["q"], qb, nq), "k": unpack(inputs["k"], kb, nk),
            "v": unpack(inputs["v"], kb, nk), "scale": inputs["scale"]}


def attend(inputs, keys=None, offset=None, causal=None, values=None):
    """The packed batch's (o [total_q, H, d], lse [H, total_q]) in float64, each sequence's rows
    attending to keys[b] = (k_begin, n_k) of the packed k (its own by default) with the causal
    diagonal at offset[b] (n_k - n_q by default), and the values from row values[b] of the packed v
    (k_begin by default). The replays pass other key ranges, value starts and offsets."""
    q, k, v = (np.asarray(inputs[x], np.float64) for x in ("q", "k", "v"))
    causal = inputs["causal"] if causal is None else causal
    total_q, H, d = q.shape
    Hkv = k.shape[1]
    heads = [R.kv_head_of(h, H, Hkv) for h in range(H)]
    o, lse = np.zeros((total_q, H, d)), np.full((H, total_q), -np.inf)
    for b, (qb, nq, kb, nk) in enumerate(spans(inputs)):
        if nq == 0:
            continue
        if keys is not None:
            kb, nk = keys(b)
        off = offset(b) if offset is not None else nk - nq
        vb = values(b) if values is not None else kb
        kk, vv = k[kb:kb + nk][:, heads], v[vb:vb + nk][:, heads]        # [nk, H, d]
        s = inputs["scale"] * np.einsum("ihd,jhd->hij", q[qb:qb + nq], kk)
        visible = (np.arange(nk)[None, :] <= np.arange(nq)[:, None] + off) if causal else None
        p, lse[:, qb:qb + nq] = R.masked_softmax(s, visible)
        o[qb:qb + nq] = np.einsum("hij,jhd->ihd", p, vv)
    return o, lse


def reference(inputs) -> dict:
    o, lse = attend(inputs)
    return {"o": o, "lse": lse}


# ---- what went wrong ----------------------------------------------------------------------------

def _bad_sequences(ctx) -> list[int]:
    """The sequences with a wrong row (o or lse)."""
    o, lse = np.asarray(ctx.out["o"], np.float64), np.asarray(ctx.out["lse"], np.float64)
    ro, rl = ctx.ref["o"], ctx.ref["lse"]
    scale = max(float(np.abs(ro).max()), 1e-6) if ro.size else 1.0
    with np.errstate(invalid="ignore"):
        bad_o = ~(np.abs(o - ro) <= 1e-3 * scale).all(axis=-1).all(axis=-1)           # [total_q]
        bad_l = ~((lse == rl) | (np.abs(lse - rl) <= 1e-3 * np.maximum(1.0, np.abs(np.where(np.isfinite(rl), rl, 0))))).all(axis=0)
    bad = bad_o | bad_l
    return [b for b, (qb, nq, _, _) in enumerate(spans(ctx.inputs)) if nq and bad[qb:qb + nq].any()]


def _count(items, word: str) -> str:
    return word if len(items) == 1 else word + "s"


def _lens_text(ctx, seqs) -> str:
    sp = spans(ctx.inputs)
    return ", ".join(f"{b} (n_q = {sp[b][1]}, n_k = {sp[b][3]})" for b in seqs)


def boundary_causes(ctx):
    """Keys read past the end of the sequence, into the next one; keys found through the wrong
    offsets; the causal diagonal placed by the batch's totals or maxima instead of per sequence."""
    inputs, sp = ctx.inputs, spans(ctx.inputs)
    total_k = np.asarray(inputs["k"]).shape[0]
    max_k, max_q = int(inputs["max_seqlen_k"]), int(inputs["max_seqlen_q"])
    total_q = np.asarray(inputs["q"]).shape[0]
    block_n = replays.tiles(ctx, "BLOCK_N")
    # One bound for the keys of every sequence, as a kernel that uses the wrong n_k reads them.
    bounds = [("the longest sequence's length max_seqlen_k", lambda b: max_k),
              ("the number of keys left in the buffer, total_k - k_begin", lambda b: total_k - sp[b][2])]
    bounds += [(f"whole key tiles of {t} (n_k rounded up to the tile)", lambda b, t=t: -(-sp[b][3] // t) * t)
               for t in block_n]
    for what, bound in bounds:
        def keys(b, bound=bound):
            return sp[b][2], min(bound(b), total_k - sp[b][2])
        if all(keys(b)[1] == sp[b][3] for b in range(len(sp))):
            continue                                # this case cannot tell the bound apart from n_k
        for offset, diag in ((None, "the diagonal where it belongs"), (lambda b: keys(b)[1] - sp[b][1], "")):
            if offset is not None and not inputs["causal"]:
                continue
            o, lse = attend(inputs, keys=keys, offset=offset)
            if replays.matches(ctx, o=o, lse=lse) or replays.matches(ctx, o=o):
                crossing = [b for b in range(len(sp)) if keys(b)[1] > sp[b][3] and sp[b][1]]
                yield Cause("varlen:keys_past_end", f"sequences read keys past their own end, into the next sequence's keys: the output "
                        f"matches rows that see keys up to {what} instead of n_k = cu_seqlens_k[b + 1] - "
                        f"cu_seqlens_k[b] ({_count(crossing, 'sequence')} {_lens_text(ctx, crossing[:4])}). In the packed layout "
                        f"the next sequence starts right after this one: bound the key loads, the loop and "
                        f"the mask by this sequence's n_k.")
                return
    # A top-left mask per sequence; with n_q <= n_k it equals keys counted by n_q, so say both then.
    if inputs["causal"] and any(nq != nk for _, nq, _, nk in sp if nq):
        if replays.matches(ctx, *attend(inputs, offset=lambda b: 0)):
            same = replays.rel(attend(inputs, offset=lambda b: 0)[0],
                               attend(inputs, keys=lambda b: (sp[b][2], min(sp[b][1], total_k - sp[b][2])))[0]) < 1e-9
            yield Cause("mask:top_left", "the causal mask is aligned top-left in each sequence (j <= i): it must be aligned "
                    "bottom-right per sequence, query i sees key j iff j <= i + (n_k - n_q) with that "
                    "sequence's n_q and n_k. They agree only when n_q == n_k, which is why the other "
                    "cases pass." + (" (Counting the keys with n_q instead of n_k gives the same output "
                                     "on this case: check that too.)" if same else ""))
    # Keys found through the query offsets, or counted by the query lengths.
    wrong_keys = [("k_begin = cu_seqlens_q[b] (the query offsets)", lambda b: (sp[b][0], sp[b][3])),
                  ("k_begin = cu_seqlens_q[b] and n_k = cu_seqlens_k[b + 1] - k_begin",
                   lambda b: (sp[b][0], max(0, sp[b][2] + sp[b][3] - sp[b][0]))),
                  ("n_k = n_q (the query length)", lambda b: (sp[b][2], sp[b][1])),
                  ("the query offsets and lengths (cu_seqlens_q for the keys too)", lambda b: (sp[b][0], sp[b][1]))]
    for what, keys in wrong_keys:
        if any(keys(b)[1] and keys(b)[0] + keys(b)[1] > total_k for b in range(len(sp))):
            continue
        if all(keys(b) == (sp[b][2], sp[b][3]) for b in range(len(sp))):
            continue
        if replays.matches(ctx, *attend(inputs, keys=keys)):
            yield Cause("varlen:key_offsets", f"the keys of sequence b are found with {what}: the output matches that. With chunked "
                    f"prefill a sequence has n_q != n_k, so its keys have their own offsets: k_begin = "
                    f"cu_seqlens_k[b], n_k = cu_seqlens_k[b + 1] - k_begin.")
    # k and v found apart, one of them through the query offset (the other right).
    for name, keys, values in (("k", lambda b: (sp[b][0], sp[b][3]), lambda b: sp[b][2]),
                               ("v", None, lambda b: sp[b][0])):
        if any(sp[b][3] and sp[b][0] + sp[b][3] > total_k for b in range(len(sp))) or \
                all(sp[b][0] == sp[b][2] for b in range(len(sp)) if sp[b][1] and sp[b][3]):
            continue
        if replays.matches(ctx, *attend(inputs, keys=keys, values=values)):
            other = "v" if name == "k" else "k"
            yield Cause(f"varlen:key_offsets:{name}", f"the rows of {name} of sequence b start at cu_seqlens_q[b], the query "
                    f"offset, while {other}'s start at cu_seqlens_k[b] (the output matches that). With chunked prefill "
                    f"a sequence has n_q != n_k, so its keys and values have their own offsets: k_begin = cu_seqlens_k[b] "
                    f"for both.")
    # The keys from the right start, counted from the query offset: n_k = cu_seqlens_k[b + 1] - q_begin.
    count = lambda b: (sp[b][2], max(0, sp[b][2] + sp[b][3] - sp[b][0]))  # noqa: E731
    if not any(count(b)[1] and count(b)[0] + count(b)[1] > total_k for b in range(len(sp))) and \
            not all(count(b) == (sp[b][2], sp[b][3]) for b in range(len(sp))) and \
            replays.matches(ctx, *attend(inputs, keys=count)):
        yield Cause("varlen:key_count", "sequence b's keys are counted from the query offset, n_k = cu_seqlens_k[b + 1] - "
                    "q_begin (the output matches that): n_k = cu_seqlens_k[b + 1] - k_begin.")
    if inputs["causal"]:
        for what, off in (("max_seqlen_k - max_seqlen_q", max_k - max_q), ("total_k - total_q", total_k - total_q)):
            if all(off == nk - nq for _, nq, _, nk in sp if nq):
                continue
            if replays.matches(ctx, *attend(inputs, offset=lambda b, off=off: off)):
                yield Cause("varlen:batch_offset", f"the causal diagonal is placed by the whole batch ({what} = {off}), not per sequence: "
                        f"query i of sequence b sees its key j iff j <= i + (n_k - n_q) of that sequence.")
    # lse stored token-major [total_q, H] instead of head-major [H, total_q].
    got = np.asarray(ctx.out["lse"], np.float64)
    H = got.shape[0]
    if H > 1 and total_q > 1 and replays.rel(got.reshape(total_q, H), ctx.ref["lse"].T) < replays.MATCH \
            and not ctx.cmp["lse"].passed:
        yield Cause("varlen:lse_layout", "lse is stored token-major, lse[t · H + h], but its layout is [H, total_q]: store it at "
                "lse[h · total_q + t] with t = q_begin + i.")


def spill_cause(ctx):
    """Rows of sequence b + 1 that hold sequence b's rows past its end: a block that did not stop at
    its own sequence's last query and stored into the next sequence's rows."""
    sp = spans(ctx.inputs)
    out, ref = np.asarray(ctx.out["o"], np.float64), ctx.ref["o"]
    q, k, v = (np.asarray(ctx.inputs[x], np.float64) for x in ("q", "k", "v"))
    H, Hkv = q.shape[1], k.shape[1]
    heads = [R.kv_head_of(h, H, Hkv) for h in range(H)]
    total_q = q.shape[0]
    wrong = ~np.isclose(out, ref, rtol=1e-3, atol=1e-4).all(axis=-1)                 # [total_q, H]
    if not wrong.any():
        return
    explained = np.zeros_like(wrong)
    for b, (qb, nq, kb, nk) in enumerate(sp):
        rows = np.arange(qb + nq, total_q)                   # tokens after the sequence's end
        if nq == 0 or rows.size == 0:
            continue
        i = rows - qb                                        # as rows of sequence b
        s = ctx.inputs["scale"] * np.einsum("ihd,jhd->hij", q[rows], k[kb:kb + nk][:, heads])
        vis = (np.arange(nk)[None, :] <= i[:, None] + nk - nq) if ctx.inputs["causal"] else None
        p, _ = R.masked_softmax(s, vis)
        alt = np.einsum("hij,jhd->ihd", p, v[kb:kb + nk][:, heads])
        explained[rows] |= np.isclose(out[rows], alt, rtol=1e-3, atol=1e-4).all(axis=-1) & wrong[rows]
    if explained.sum() >= 0.9 * wrong.sum():
        t = int(np.argwhere(explained)[0][0])
        b = next(b for b, (qb, nq, _, _) in enumerate(sp) if qb <= t < qb + nq)
        yield Cause("varlen:rows_past_end", f"rows of one sequence were overwritten by the previous sequence's block: o at token {t} "
                f"(sequence {b}) holds the output of a query past the end of an earlier sequence, computed "
                f"against that sequence's keys. A block must stop at its own sequence's last query: return "
                f"when q_start >= n_q, and store only rows i < n_q.")


def layout_causes(ctx):
    """The packed [tokens, heads, d] layout misread: o stored head-major ([H, total_q, d]), or q, k or v
    found with the head term h (not h · d) inside a token's row."""
    ref = ctx.ref["o"]
    total_q, H, d = ref.shape
    if H > 1 and replays.matches(ctx, o=ref.transpose(1, 0, 2).reshape(total_q, H, d)):
        yield Cause("store:o_head_major", "o is stored head-major, at row h · total_q + token (the output matches o laid "
                    "out [H, total_q, d]): the packed o is [total_q, H, d], row (q_begin + i) · H + h.")
    for name in ("q", "k", "v"):
        x = np.asarray(ctx.inputs[name], np.float64)
        n, heads, dd = x.shape
        if heads < 2:
            continue
        flat = x.reshape(-1)
        at = (np.arange(n)[:, None, None] * heads * dd + np.arange(heads)[None, :, None]
              + np.arange(dd)[None, None, :])
        o, lse = attend(dict(ctx.inputs, **{name: flat[at]}))
        if replays.matches(ctx, o=o, lse=lse) or (name == "v" and replays.matches(ctx, o=o)):
            yield Cause(f"index_unscaled:{name}:head", (
                f"{name}'s head offset is h (one element per head) where h · d is due (the output matches "
                f"reading {name}[token · stride + h + c]): head h of a token starts h · d elements into "
                "its row."))


def skipped_rows_observation(ctx):
    """Rows that see keys but come out as o = 0 and lse = -inf: no key tile ran for them."""
    lse, ref = np.asarray(ctx.out["lse"], np.float64), ctx.ref["lse"]
    o = np.asarray(ctx.out["o"], np.float64)
    empty_out = np.isneginf(lse) & (o == 0).all(axis=-1).T          # [H, total_q]
    lost = empty_out & np.isfinite(ref)
    wrong = lost | ~np.isclose(lse, ref, rtol=1e-3, atol=1e-3, equal_nan=False) & np.isfinite(ref)
    if not lost.any() or lost.sum() < 0.9 * wrong.sum():
        return
    h, t = (int(x) for x in np.argwhere(lost)[0])
    b = next(b for b, (qb, nq, _, _) in enumerate(spans(ctx.inputs)) if qb <= t < qb + nq)
    qb, nq, _, nk = spans(ctx.inputs)[b]
    yield Seen(f"rows that see keys come out as o = 0 and lse = -inf, as if they saw none ({int(lost.sum())} "
               f"such rows; the first is token {t}, row {t - qb} of sequence {b}, n_q = {nq}, n_k = {nk}).")


def sequence_context(ctx, b: int):
    """Sequence b as a failing case of module 03's layout, so the prefill replays (masks, rescales,
    1/l, lse units, GQA heads, scale, the weights applied) read it as they read a batch of one."""
    qb, nq, kb, nk = spans(ctx.inputs)[b]
    H = np.asarray(ctx.inputs["q"]).shape[1]
    inputs = sequence(ctx.inputs, b)
    out = {"o": np.asarray(ctx.out["o"])[qb:qb + nq].transpose(1, 0, 2)[None],
           "lse": np.asarray(ctx.out["lse"])[:, qb:qb + nq][None]}
    ref = {"o": ctx.ref["o"][qb:qb + nq].transpose(1, 0, 2)[None], "lse": ctx.ref["lse"][:, qb:qb + nq][None]}
    cmp = {name: SimpleNamespace(passed=replays.rel(out[name], ref[name]) < 1e-4) for name in ref}
    params = dict(B=1, H=H, Hkv=np.asarray(ctx.inputs["k"]).shape[1], Nq=nq, Nk=nk, d=ctx.params["d"])
    if "scale" in ctx.params:
        params["scale"] = ctx.params["scale"]
    return SimpleNamespace(exercise=ctx.exercise, params=params, inputs=inputs, ref=ref, out=out, cmp=cmp,
                           config=getattr(ctx, "config", {}), noise=getattr(ctx, "noise", 0.0))


def diagnose(ctx):
    """The packing bugs first (they strike whole sequences), then the prefill replays of the wrong
    sequences, each read as a batch of one (a cause must reproduce every wrong sequence), then what
    was observed."""
    yield from boundary_causes(ctx)
    yield from spill_cause(ctx)
    yield from layout_causes(ctx)
    yield from skipped_rows_observation(ctx)
    bad = _bad_sequences(ctx)
    if not bad:
        return
    causal = ctx.inputs["causal"]
    good = [x for x, (_, nq, _, _) in enumerate(spans(ctx.inputs)) if nq and x not in bad]
    # Right sequences that can contradict a replay: a row or a key alone fits too many bugs alike.
    telling = [x for x in good if spans(ctx.inputs)[x][1] >= 2 and spans(ctx.inputs)[x][3] >= 2]

    def replayed(b, probe=None):
        sub = sequence_context(ctx, b)
        sub.probe = probe       # a right sequence asks which replays predict it wrong, or right
        s, v = replays.scores(sub.inputs)
        visible = R.causal_mask(sub.params["Nq"], sub.params["Nk"]) if causal else None
        found = []
        if causal:
            found += list(replays.empty_row_causes(sub)) + list(replays.mask_causes(sub, s, v))
        else:
            found += list(replays.noncausal_mask_causes(sub, s, v))
        found += list(replays.prefill_causes(sub, s, v, visible))
        return {c.id: c.text for c in found}

    common = None
    for b in bad[:6]:
        texts = replayed(b)
        common = texts if common is None else {k: t for k, t in common.items() if k in texts}
    for b in telling[:4]:
        if common:
            # A replay that predicts this right sequence wrong (under every parameter it tries) is
            # contradicted by it.
            refuted = set(replayed(b, "wrong")) - set(replayed(b, "right"))
            common = {k: t for k, t in common.items() if k not in refuted}
    for cid, text in (common or {}).items():
        yield Cause(cid, f"in the wrong sequences ({_lens_text(ctx, bad[:4])}), each read as a batch of one: {text}")
    if good:
        yield Seen(f"{_count(bad, 'sequence')} {_lens_text(ctx, bad[:6])} {'is' if len(bad) == 1 else 'are'} wrong "
                   f"and {_count(good, 'sequence')} {', '.join(map(str, good[:6]))} "
                   f"{'is' if len(good) == 1 else 'are'} right.")
