"""Decode of several new tokens over a paged low-precision cache (module 13): inputs, the
same-precision reference that sets the tolerance, and the replays of its bugs.

q [B, T, H, d]; k_pages, v_pages [num_pages, page_size, Hkv, d] in float16 or bfloat16 (bfloat16 as
uint16 bits); block_table [B, max_pages] int32; context_lens [B] int32, the new tokens' keys
included: new token t sees the keys j <= context_lens[b] - T + t (bottom-right). o [B, T, H, d] in
the input type, lse [B, T, H] float32.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import lowp, replays
from . import references as R
from .inputs import block_table, context_lens, decode_qkv, hot_key
from ..spec import Cause, Seen


TILED_ROWS = 4096        # rows of d random values that a bench's pool repeats


def make_inputs(p, rng) -> dict:
    """The case's inputs, q, k and v rounded to p["dtype"]. `hot_key`/`hot`: key hot_key of every
    sequence that holds it scores about `hot` for every query (module 05's late split). `tiled`: the
    pages repeat TILED_ROWS random rows (a bench's cache of gigabytes, made in seconds)."""
    B, T, H, Hkv, ps = p["B"], p["T"], p["H"], p["Hkv"], p.get("page_size", 16)
    lens = context_lens(p)
    table, num_pages = block_table(p, lens, rng)
    if p.get("tiled"):      # the bench's pools of gigabytes: one random block of values, repeated
        q, k, v = decode_qkv(dict(p, H=T * H), rng, (TILED_ROWS,))
        k, v = (np.resize(lowp.encode(x, p["dtype"]), (num_pages, ps, Hkv, p["d"])) for x in (k, v))
        return {"q": lowp.encode(q.reshape(B, T, H, -1), p["dtype"]), "k_pages": k, "v_pages": v,
                "block_table": table, "context_lens": lens, "scale": 1.0 / np.sqrt(p["d"])}
    q, k, v = decode_qkv(dict(p, H=T * H), rng, (num_pages, ps, Hkv))
    if p.get("hot"):
        j = p["hot_key"]
        q, k = hot_key(q, k, sorted({(int(table[b, j // ps]), j % ps) for b in range(B) if lens[b] > j}), p, rng)
    return {"q": lowp.encode(q.reshape(B, T, H, -1), p["dtype"]), "k_pages": lowp.encode(k, p["dtype"]),
            "v_pages": lowp.encode(v, p["dtype"]), "block_table": table, "context_lens": lens,
            "scale": float(p.get("scale", 1.0 / np.sqrt(p["d"])))}


def decoded(inputs, p) -> dict:
    """The inputs as the float values they hold (what the references and the replays read)."""
    return dict(inputs, **{x: lowp.decode(inputs[x], p["dtype"]).astype(np.float64)
                           for x in ("q", "k_pages", "v_pages")})


def reference(inputs, p) -> dict:
    x = decoded(inputs, p)
    o, lse = R.paged_decode_tokens(x["q"], x["k_pages"], x["v_pages"], x["block_table"], x["context_lens"],
                                   x["scale"])
    return {"o": o, "lse": lse}


def tolerances(inputs, p, ref) -> dict:
    """Module 06's rule: lowp.MULTIPLE times the error of a same-precision reference, plus a floor."""
    x = decoded(inputs, p)
    B, T, H, d = x["q"].shape
    k = R.gather_pages(x["k_pages"], x["block_table"], x["context_lens"])
    v = R.gather_pages(x["v_pages"], x["block_table"], x["context_lens"])
    o, lse = np.zeros((B, T, H, d)), np.full((B, T, H), -np.inf)
    for b, n in enumerate(np.asarray(x["context_lens"])):
        if n:
            ob, lb = lowp.same_precision_attention(x["q"][b].transpose(1, 0, 2)[None], k[b][None, :, :n],
                                                   v[b][None, :, :n], x["scale"], p["dtype"], causal=True)
            o[b], lse[b] = ob[0].transpose(1, 0, 2), lb[0].T
    return lowp.tolerances(o, lse, ref, p["dtype"])


def widen(out, p):
    """o holds the input type: widened exactly to float32 for the comparison (the poison kept)."""
    return dict(out, o=lowp.decode(out["o"], p["dtype"]))


# ---- replays ----------------------------------------------------------------------------------------

def attend(x, kv_head=None, top_left=False, slot=None):
    """(o, lse) of module 13's attention over the decoded inputs x with one thing changed, or None
    where the change reads outside the cache: query head h reading kv head kv_head[h]; the mask
    aligned top-left (token t sees the keys j <= t); key j read from slot slot(j) of its page."""
    q, kp, vp, table, lens = x["q"], x["k_pages"], x["v_pages"], np.asarray(x["block_table"]), x["context_lens"]
    B, T, H, d = q.shape
    num_pages, ps, Hkv, _ = kp.shape
    heads = np.array([R.kv_head_of(h, H, Hkv) for h in range(H)] if kv_head is None else kv_head)
    o, lse = np.zeros((B, T, H, d)), np.full((B, T, H), -np.inf)
    for b, n in enumerate(np.asarray(lens)):
        j = np.arange(n)
        pos = table[b, j // ps] * ps + (j % ps if slot is None else slot(j))
        if n and (pos.min() < 0 or pos.max() >= num_pages * ps):
            return None
        k, v = (x_.reshape(num_pages * ps, Hkv, d)[pos][:, heads] for x_ in (kp, vp))     # [n, H, d]
        s = x["scale"] * np.einsum("thd,nhd->htn", q[b], k)
        visible = j[None, :] <= np.arange(T)[:, None] + (0 if top_left else n - T)
        pr, lse_b = R.masked_softmax(s, np.broadcast_to(visible, s.shape))
        lse[b] = lse_b.T
        o[b] = np.einsum("htn,nhd->thd", pr, v)
    return o, lse


def diagnose(ctx):
    p = ctx.params
    ctx = dataclasses.replace(ctx, inputs=decoded(ctx.inputs, p), noise=lowp.EPS[p["dtype"]] / 2)
    x = ctx.inputs
    H, Hkv, T, ps = p["H"], p["Hkv"], p["T"], x["k_pages"].shape[1]
    yield from replays.store_format_causes(ctx)
    if H != Hkv:
        for name, mapping in (("h % Hkv", lambda h: h % Hkv), ("h", lambda h: min(h, Hkv - 1)), ("0", lambda h: 0)):
            alt = attend(x, kv_head=[mapping(h) for h in range(H)])
            if alt is not None and replays.matches(ctx, *alt):
                yield Cause(f"gqa:{name.replace(' ', '')}", (
                    f"query head h reads the wrong kv head ({name}; the output matches it): a block packs "
                    f"the G = H / Hkv = {H // Hkv} consecutive query heads kv · G .. kv · G + G - 1 of kv head "
                    "kv as its rows, h_kv = h / (H / Hkv)."))
    alt = attend(x, top_left=True)
    if alt is not None and replays.matches(ctx, *alt):
        yield Cause("mask:top_left", (
            "the new tokens' causal mask is aligned top-left: the output matches token t seeing the "
            "keys j <= t. The T new tokens are the last T keys of the context, so token t sees "
            f"j <= context_lens[b] - T + t (bottom-right; here T = {T})."))
    if ps != 16:
        alt = attend(x, slot=lambda j: j & 15)
        if alt is not None and replays.matches(ctx, *alt):
            yield Cause("page:slot_16", (
                f"key j is read from slot j & 15 (j % 16) of its page (the output matches that): page_size "
                f"is assumed to be 16, and this case's is {ps}. The slot is j % page_size."))
    yield from empty_split_observation(ctx)


def empty_split_observation(ctx):
    """The rows left holding the grader's NaN (never written, or computed from a workspace nothing
    wrote), when written rows exist and every such row is a sequence's with fewer keys than the block
    table can address: the splits past its context hold no key."""
    lens = np.asarray(ctx.inputs["context_lens"])
    capacity = np.shape(ctx.inputs["block_table"])[1] * ctx.inputs["k_pages"].shape[1]
    poisoned = np.zeros(np.shape(ctx.out["lse"]), bool)
    for name in ("o", "lse"):
        c = ctx.cmp[name]
        for mask in (c.unwritten, getattr(c, "foreign", None)):
            if mask is not None and np.size(mask):
                m = np.asarray(mask, bool)
                poisoned |= m.any(axis=-1) if name == "o" else m
    seqs = np.flatnonzero(poisoned.any(axis=(1, 2)))
    if poisoned.any() and not poisoned.all() and (lens[seqs] < capacity).all():
        yield Seen(
            f"the rows that hold the grader's NaN, never written or computed from a workspace nothing wrote, "
            f"are all rows of sequences shorter than the block table's capacity, max_pages · page_size = "
            f"{capacity} keys (b = {seqs.tolist()}, context_lens {lens[seqs].tolist()}): the splits that start "
            "at or past a sequence's context hold no key of it, and each must still write its rows (o = 0, "
            "lse = -inf, which the combine weighs 0).")
