"""Float64 references for every module, written for clarity, not speed.

They follow the numeric conventions of docs/design.md:
- q [B, H, Nq, d]; k, v [B, Hkv, Nk, d]; query head h reads kv head h // (H // Hkv).
- scale defaults to 1/sqrt(d); lse is the natural-log log-sum-exp of the scaled scores.
- causal masks are aligned bottom-right: query i sees key j iff j <= i + (Nk - Nq).
- a row that sees no key outputs 0 and has lse = -inf (never NaN).
"""
from __future__ import annotations

import math

import numpy as np


def default_scale(d: int) -> float:
    return 1.0 / math.sqrt(d)


def kv_head_of(h: int, n_heads: int, n_kv_heads: int) -> int:
    """Grouped-query attention: consecutive groups of H // Hkv query heads share one kv head."""
    if n_heads % n_kv_heads:
        raise ValueError(f"H={n_heads} is not a multiple of Hkv={n_kv_heads}")
    return h // (n_heads // n_kv_heads)


def causal_mask(n_q: int, n_k: int) -> np.ndarray:
    """[n_q, n_k] booleans, True where query i may see key j (bottom-right aligned)."""
    i = np.arange(n_q)[:, None]
    j = np.arange(n_k)[None, :]
    return j <= i + (n_k - n_q)


def masked_softmax(s: np.ndarray, visible: np.ndarray | None = None):
    """Row softmax of s over the visible entries -> (p, lse). Rows with nothing visible: p = 0, lse = -inf."""
    s = np.asarray(s, dtype=np.float64)
    if visible is None:
        visible = np.ones(s.shape, dtype=bool)
    if s.shape[-1] == 0:                                # no keys at all (a context of length 0)
        return np.zeros(s.shape), np.full(s.shape[:-1], -np.inf)
    s = np.where(visible, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)          # avoid -inf - -inf on empty rows
    e = np.where(visible, np.exp(s - m_safe), 0.0)
    l = e.sum(axis=-1, keepdims=True)
    p = np.divide(e, l, out=np.zeros_like(e), where=l > 0)
    with np.errstate(divide="ignore"):
        lse = np.where(l[..., 0] > 0, m_safe[..., 0] + np.log(l[..., 0]), -np.inf)
    return p, lse


def attention(q, k, v, scale=None, causal=False):
    """Prefill attention with GQA and an optional bottom-right causal mask -> (o, lse), float64."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, H, n_q, d = q.shape
    _, Hkv, n_k, _ = k.shape
    scale = default_scale(d) if scale is None else float(scale)
    visible = causal_mask(n_q, n_k) if causal else np.ones((n_q, n_k), dtype=bool)
    o = np.zeros((B, H, n_q, d))
    lse = np.zeros((B, H, n_q))
    for b in range(B):
        for h in range(H):
            g = kv_head_of(h, H, Hkv)
            s = scale * (q[b, h] @ k[b, g].T)
            p, lse[b, h] = masked_softmax(s, visible)
            o[b, h] = p @ v[b, g]
    return o, lse


def attention_direct(q, k, v, scale=None, causal=False):
    """The textbook formula, one score at a time; slow, for testing the references themselves."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, H, n_q, d = q.shape
    _, Hkv, n_k, _ = k.shape
    scale = default_scale(d) if scale is None else float(scale)
    o = np.zeros((B, H, n_q, d))
    lse = np.full((B, H, n_q), -np.inf)
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            for i in range(n_q):
                keys = [j for j in range(n_k) if not causal or j <= i + (n_k - n_q)]
                if not keys:
                    continue
                scores = [scale * sum(q[b, h, i, t] * k[b, g, j, t] for t in range(d)) for j in keys]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = sum(weights)
                for w, j in zip(weights, keys):
                    o[b, h, i] += (w / total) * v[b, g, j]
                lse[b, h, i] = top + math.log(total)
    return o, lse


# ---- online softmax (module 01) ---------------------------------------------------------------

def softmax(x):
    """Row softmax of x [..., n] -> (y, lse), float64."""
    return masked_softmax(x)


def softmax_state(x):
    """The (m, l) state of a row chunk: m = max x, l = sum exp(x - m). Empty chunk: (-inf, 0)."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape[-1] == 0:
        return np.full(x.shape[:-1], -np.inf), np.zeros(x.shape[:-1])
    m = x.max(axis=-1)
    return m, np.exp(x - m[..., None]).sum(axis=-1)


def merge_states(m1, l1, m2, l2):
    """Merge two partial softmax states: rescale each sum to the new max, then add.

    An empty state (-inf, 0) is the identity; merging two empty states stays empty (no NaN).
    """
    m1, l1, m2, l2 = (np.asarray(a, dtype=np.float64) for a in (m1, l1, m2, l2))
    m = np.maximum(m1, m2)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    l = l1 * np.exp(np.where(l1 > 0, m1 - m_safe, -np.inf)) + l2 * np.exp(np.where(l2 > 0, m2 - m_safe, -np.inf))
    return m, l


def online_softmax_state(x, chunk: int):
    """(m, l) of each row, computed chunk by chunk with merge_states, as a kernel streams a row."""
    x = np.asarray(x, dtype=np.float64)
    m, l = softmax_state(x[..., :0])
    for start in range(0, x.shape[-1], chunk):
        m, l = merge_states(m, l, *softmax_state(x[..., start:start + chunk]))
    return m, l


# ---- decode (modules 04 and 05) -------------------------------------------------------------

def decode_attention(q, k_cache, v_cache, context_lens, scale=None):
    """One query token per sequence over a contiguous cache -> (o [B, H, d], lse [B, H]).

    q [B, H, d]; k_cache, v_cache [B, Hkv, max_len, d]; context_lens [B]: sequence b attends to
    its first context_lens[b] cached positions. Length 0 gives o = 0, lse = -inf.
    """
    q = np.asarray(q, dtype=np.float64)
    B, H, d = q.shape
    o = np.zeros((B, H, d))
    lse = np.full((B, H), -np.inf)
    for b in range(B):
        n = int(context_lens[b])
        ob, lb = attention(q[b][None, :, None, :], np.asarray(k_cache)[b][None, :, :n],
                           np.asarray(v_cache)[b][None, :, :n], scale=scale)
        o[b], lse[b] = ob[0, :, 0], lb[0, :, 0]
    return o, lse


def split_ranges(length: int, chunk: int) -> list[tuple[int, int]]:
    """The [start, end) key ranges of a context split into chunks of `chunk` positions."""
    return [(s, min(s + chunk, length)) for s in range(0, length, chunk)]


def decode_partials(q, k_cache, v_cache, context_lens, chunk: int, scale=None):
    """Split-KV decode, first half: per split s, the normalised partial output and its lse.

    Returns o_part [B, H, S, d] and lse_part [B, H, S] with S = ceil(max_len / chunk); splits past a
    sequence's context are empty (o = 0, lse = -inf).
    """
    k_cache = np.asarray(k_cache)
    B, H, d = np.asarray(q).shape
    n_splits = max(1, -(-k_cache.shape[2] // chunk))
    o_part = np.zeros((B, H, n_splits, d))
    lse_part = np.full((B, H, n_splits), -np.inf)
    for b in range(B):
        for s, (lo, hi) in enumerate(split_ranges(int(context_lens[b]), chunk)):
            ob, lb = attention(np.asarray(q)[b][None, :, None, :], k_cache[b][None, :, lo:hi],
                               np.asarray(v_cache)[b][None, :, lo:hi], scale=scale)
            o_part[b, :, s], lse_part[b, :, s] = ob[0, :, 0], lb[0, :, 0]
    return o_part, lse_part


def combine_partials(o_part, lse_part):
    """Split-KV decode, second half: o = sum_s exp(lse_s - lse) o_s with lse = logsumexp_s lse_s."""
    o_part, lse_part = np.asarray(o_part, np.float64), np.asarray(lse_part, np.float64)
    top = lse_part.max(axis=-1, keepdims=True)
    top_safe = np.where(np.isfinite(top), top, 0.0)
    w = np.exp(lse_part - top_safe)                     # exp(-inf) = 0 for empty splits
    total = w.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = np.where(total[..., 0] > 0, top_safe[..., 0] + np.log(total[..., 0]), -np.inf)
    weights = np.divide(w, total, out=np.zeros_like(w), where=total > 0)
    return (weights[..., None] * o_part).sum(axis=-2), lse


def gather_pages(cache_pages, block_table, context_lens, max_len=None):
    """A paged cache [num_pages, page_size, Hkv, d] -> contiguous [B, Hkv, max_len, d] (zeros past the context)."""
    cache_pages = np.asarray(cache_pages)
    _, page_size, Hkv, d = cache_pages.shape
    B = len(context_lens)
    max_len = int(max(context_lens, default=0)) if max_len is None else max_len
    out = np.zeros((B, Hkv, max_len, d), dtype=cache_pages.dtype)
    for b in range(B):
        for pos in range(int(context_lens[b])):
            page = block_table[b][pos // page_size]
            out[b, :, pos] = cache_pages[page, pos % page_size]
    return out


def paged_decode_attention(q, k_pages, v_pages, block_table, context_lens, scale=None):
    """Decode over a paged cache: gather each sequence's pages in logical order, then attend."""
    k = gather_pages(k_pages, block_table, context_lens)
    v = gather_pages(v_pages, block_table, context_lens)
    return decode_attention(q, k, v, context_lens, scale=scale)


def paged_decode_tokens(q, k_pages, v_pages, block_table, context_lens, scale=None):
    """Decode of T new tokens per sequence over a paged cache (module 13) -> (o [B, T, H, d], lse [B, T, H]).

    q [B, T, H, d]; context_lens[b] counts the new tokens' keys too, and new token t sees the keys
    j <= context_lens[b] - T + t: the causal mask aligned bottom-right, as in prefill. A token that
    sees no key (context_lens[b] < T - t) gives o = 0, lse = -inf.
    """
    q = np.asarray(q, dtype=np.float64)
    B, T, H, d = q.shape
    k = gather_pages(k_pages, block_table, context_lens)
    v = gather_pages(v_pages, block_table, context_lens)
    o = np.zeros((B, T, H, d))
    lse = np.full((B, T, H), -np.inf)
    for b in range(B):
        n = int(context_lens[b])
        ob, lb = attention(q[b].transpose(1, 0, 2)[None], k[b][None, :, :n], v[b][None, :, :n], scale=scale,
                           causal=True)
        o[b], lse[b] = ob[0].transpose(1, 0, 2), lb[0].T
    return o, lse
