"""Checks for 05_paged_decode: module 04's decode over a paged cache.

Inputs: q [B, H, d]; k_pages, v_pages [num_pages, page_size, Hkv, d]; block_table [B, max_pages]
int32 (physical page ids, shuffled unless shuffle=False; entries past a sequence's last page are -1);
context_lens [B] int32. A few spare pages hold random data no sequence owns.
"""
from __future__ import annotations

import numpy as np

from ...attention import references as R
from ...attention import replays
from ...attention.calls import split_option
from ...attention.inputs import block_table as paged_block_table
from ...attention.inputs import context_lens, decode_qkv, hot_key, valid_decode_shape
from ...spec import F32, Case, Cause

C = Case
CASES = [
    C("contexts_0_1_2_5", dict(B=4, H=2, Hkv=2, d=64, lens="0/1/2/5")),
    C("pages_in_order", dict(B=3, H=4, Hkv=2, d=64, lens="40/17/0", shuffle=False)),
    C("shuffled_partial_last_page", dict(B=3, H=4, Hkv=2, d=64, lens="100/33/1")),
    C("page_size_1", dict(B=2, H=4, Hkv=2, d=64, lens="37/10", page_size=1)),
    C("page_size_8_gqa_4", dict(B=2, H=8, Hkv=2, d=64, lens="61/0", page_size=8)),
    C("page_size_32_gqa_8_d128", dict(B=2, H=8, Hkv=1, d=128, lens="97/64", page_size=32)),
    C("page_size_7_prime", dict(B=2, H=3, Hkv=1, d=64, lens="53/14", page_size=7)),
    C("head_dim_32_page_size_4", dict(B=2, H=2, Hkv=1, d=32, lens="50/20", page_size=4)),
    # d / 4 = 24 float4 chunks per row, not a power of two: a chunk index taken with a bit mask
    # (idx & (d/4 - 1)) where idx % (d/4) is due leaves some features unwritten.
    C("head_dim_96", dict(B=2, H=4, Hkv=1, d=96, lens="83/20")),
    C("shared_prefix", dict(B=2, H=4, Hkv=2, d=64, lens="80/70", shared_prefix=3)),
    C("spare_table_columns", dict(B=2, H=2, Hkv=2, d=64, lens="30/5", max_pages=6)),
    C("many_splits", dict(B=2, H=4, Hkv=2, d=64, lens="300/45", num_splits=8)),
    C("large_logits", dict(B=2, H=4, Hkv=2, d=64, lens="200/3", logit=50.0, num_splits=4)),
    C("lse_near_120", dict(B=2, H=4, Hkv=2, d=64, lens="150/64", shift=120.0, num_splits=4)),
    # Every score far below zero: a combine (or softmax) whose max is seeded at 0 underflows to 0/0.
    C("lse_near_minus_150", dict(B=2, H=4, Hkv=2, d=64, lens="150/7", shift=-150.0, num_splits=4)),
    # 58 splits of 7 keys, and key 395 (split 56) scoring about +150 over the rest: a combine whose max
    # over the splits reads one split per lane (none past the warp's 32) weighs that split by exp(> 88) = inf.
    C("late_split_dominates", dict(B=2, H=4, Hkv=2, d=64, lens="400/37", num_splits=64, hot_key=395, hot=150.0)),
    # Key 2 scoring about +150 over the rest, in the first steps of one split of 300 keys: every later
    # step's max lies far below the running max (exp of the difference overflows if the max is not kept).
    C("early_key_dominates", dict(B=2, H=4, Hkv=2, d=64, lens="300/37", num_splits=1, hot_key=2, hot=150.0)),
    # Key 299 (the last) scoring about +150 over the rest, late in one split of 300 keys: the warps whose keys come
    # first see maxima far below the block's, and the warps' merge must scale by the block's max (a
    # merge relative to the first warp's max takes exp(> 88) = inf).
    C("late_key_dominates", dict(B=2, H=4, Hkv=2, d=64, lens="300/37", num_splits=1, hot_key=299, hot=150.0)),
    C("long_context", dict(B=1, H=8, Hkv=2, d=128, lens="509")),
    # The launch code's own split count (no num_splits) for a batch that fills part of the GPU: 128
    # (sequence, kv head) blocks and contexts up to 1100 keys, where the count lies between 1 and the
    # longest context's 5 chunks of MIN_CHUNK.
    C("batch_with_own_splits", dict(B=32, H=8, Hkv=4, d=32, lens="1100/3/0/260/517")),
    # The heads of a group about +60 and -60 (alternately): 120 apart, past exp's range, so anything
    # one head's state takes from another's (its max, say) underflows the other's weights.
    C("group_heads_far_apart", dict(B=2, H=4, Hkv=1, d=64, lens="40/17", head_shift=60.0)),
    # Not 1/sqrt(d): a kernel that computes its own scale instead of using the argument fails here.
    C("custom_scale", dict(B=2, H=6, Hkv=2, d=64, lens="97/53", scale=0.3)),
]
TOLERANCES = {"o": F32, "lse": F32}
SHRINK_KEYS = ("B", "H", "Hkv", "d", "page_size")
valid = valid_decode_shape


def make_inputs(p, rng):
    B, Hkv, ps = p["B"], p["Hkv"], p.get("page_size", 16)
    lens = context_lens(p)
    block_table, num_pages = paged_block_table(p, lens, rng)
    q, k, v = decode_qkv(p, rng, (num_pages, ps, Hkv))
    if p.get("hot"):
        j = p["hot_key"]
        q, k = hot_key(q, k, sorted({(int(block_table[b, j // ps]), j % ps) for b in range(B) if lens[b] > j}), p, rng)
    inputs = {"q": q, "k_pages": k, "v_pages": v, "block_table": block_table, "context_lens": lens,
              "scale": float(p.get("scale", 1.0 / np.sqrt(p["d"])))}
    if p.get("contiguous_copy"):                           # bench: the same data for module 04
        inputs["k_cache"], inputs["v_cache"] = (_to_contiguous(x, block_table) for x in (k, v))
    return inputs


def _to_contiguous(pages, block_table):
    """[num_pages, page_size, Hkv, d] through the table -> [B, Hkv, max_pages·page_size, d]."""
    B, max_pages = block_table.shape
    _, ps, Hkv, d = pages.shape
    x = pages[np.maximum(block_table, 0)]                  # [B, max_pages, ps, Hkv, d]
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2, 4).reshape(B, Hkv, max_pages * ps, d))


def reference(inputs, p):
    o, lse = R.paged_decode_attention(inputs["q"], inputs["k_pages"], inputs["v_pages"],
                                      inputs["block_table"], inputs["context_lens"], inputs["scale"])
    return {"o": o, "lse": lse}


def call(fn, rt, inputs, p):
    o, lse = fn(rt, inputs["q"], inputs["k_pages"], inputs["v_pages"], inputs["block_table"],
                inputs["context_lens"], inputs["scale"], **split_option(p))
    return {"o": o, "lse": lse}


# ---- diagnosis -------------------------------------------------------------------------------------

def _gathered(ctx, lens):
    """The first lens[b] keys of each sequence through its block table (as far as its pages go)."""
    i = ctx.inputs
    table = np.asarray(i["block_table"])
    reach = np.array([int(np.sum(table[b] >= 0)) for b in range(len(table))]) * i["k_pages"].shape[1]
    lens = np.minimum(lens, reach)
    L = max(int(lens.max(initial=0)), int(np.max(i["context_lens"], initial=0)))
    return (R.gather_pages(i["k_pages"], table, lens, L), R.gather_pages(i["v_pages"], table, lens, L))


def _matches(ctx, k_pages, v_pages, block_table) -> bool:
    """Does the output equal attention over this (wrong) reading of the cache, on rows with keys?"""
    i = ctx.inputs
    if block_table.max(initial=0) >= k_pages.shape[0]:
        return False
    o, _ = R.paged_decode_attention(i["q"], k_pages, v_pages, block_table, i["context_lens"], i["scale"])
    live = np.asarray(i["context_lens"]) > 0
    return bool(live.any()) and replays.close(np.asarray(ctx.out["o"])[live], o[live])


def diagnose(ctx):
    i, p = ctx.inputs, ctx.params
    kp, vp, bt, lens = i["k_pages"], i["v_pages"], np.asarray(i["block_table"]), np.asarray(i["context_lens"])
    num_pages, ps, Hkv, d = kp.shape
    B, max_pages = bt.shape
    logical = np.tile(np.arange(max_pages, dtype=np.int32), (B, 1))
    if replays.row_errors(ctx)[lens > 0].any():
        if not np.array_equal(bt[bt >= 0], logical[bt >= 0]):
            for table, how in ((logical, "j / page_size"),
                               (logical + max_pages * np.arange(B, dtype=np.int32)[:, None],
                                "b · max_pages + j / page_size")):
                if _matches(ctx, kp, vp, table):
                    yield Cause("page:logical_as_physical", (
                        f"the logical page index is used as the physical page: the output matches reading "
                        f"page {how}, which is right only when the pages happen to lie in order. Look the "
                        "page up: page = block_table[b · max_pages + j / page_size]."))
        if B > 1 and _matches(ctx, kp, vp, np.broadcast_to(bt[:1], bt.shape).copy()):
            yield Cause("index_drop:batch:block_table", (
                "every sequence reads sequence 0's row of the block table (the output matches that): the "
                "table's index is missing its row term, block_table[b · max_pages + j / page_size]."))
        # The table's rows found with another dimension as their stride: row b at b · stride.
        flat = bt.reshape(-1)
        for name, stride in (("page_size", ps), ("H", p["H"]), ("Hkv", Hkv), ("d", d), ("num_pages", num_pages),
                             ("B", B), ("max_pages - 1", max_pages - 1), ("max_pages + 1", max_pages + 1)):
            at = np.arange(B)[:, None] * stride + np.arange(max_pages)[None, :]
            if B < 2 or stride == max_pages or at.max() >= flat.size:
                continue
            table = flat[at]
            used = np.arange(max_pages)[None, :] < -(-lens[:, None] // ps)
            if (table[used] < 0).any():
                continue
            if _matches(ctx, kp, vp, np.where(used, table, 0).astype(np.int32)):
                yield Cause(f"index_stride:block_table:{name.replace(' ', '')}", (
                    f"sequence b reads row b · {name} of the block table (the output matches that): its rows "
                    f"are max_pages = {max_pages} entries apart, page = block_table[b · max_pages + j / page_size]. "
                    "Sequence 0 is right, which is why the cases with B = 1 pass."))
        if Hkv > 1 and ps > 1:
            swap = lambda x: np.ascontiguousarray(x.reshape(num_pages, Hkv, ps, d).transpose(0, 2, 1, 3))
            if _matches(ctx, swap(kp), swap(vp), bt):
                yield Cause("page:layout", (
                    "the kernel reads a page as [Hkv, page_size, d] (the output matches it), but it is "
                    "[page_size, Hkv, d]: row (page, slot, kv) starts at ((page · page_size + slot) · Hkv "
                    "+ kv) · d."))
        if ps > 1:
            first = lambda x: np.ascontiguousarray(np.broadcast_to(x[:, :1], x.shape))   # noqa: E731
            if _matches(ctx, first(kp), first(vp), bt):
                yield Cause("page:slot_ignored", (
                    "the slot inside a page is ignored: the output matches every key of a page reading "
                    "the page's first row. Key j sits at slot j % page_size of page "
                    "block_table[b · max_pages + j / page_size]."))
    yield from position_causes(ctx)
    yield from replays.decode_diagnose(ctx, _gathered)


def _read_at(ctx, pos) -> tuple:
    """(o, lse) of attention over every sequence's first context_lens[b] keys, key j read from the
    cache's row pos[b, j] (a flat row, page · page_size + slot; or pos[b, j, c], float4 c of it from
    its own row), or None where a row is outside the cache (the emulator names such a read)."""
    i = ctx.inputs
    kp, vp, lens = i["k_pages"], i["v_pages"], np.asarray(i["context_lens"])
    num_pages, ps, Hkv, d = kp.shape
    used = np.arange(pos.shape[1])[None, :] < lens[:, None]
    if ((pos < 0) | (pos >= num_pages * ps))[used].any() or (pos.ndim == 3 and d % 4):
        return None
    flat = lambda x: np.asarray(x, np.float64).reshape(num_pages * ps, Hkv, d)       # noqa: E731
    if pos.ndim == 2:
        safe = np.where(used, pos, 0)
        k, v = (flat(x)[safe].transpose(0, 2, 1, 3) for x in (kp, vp))              # [B, Hkv, L, d]
    else:               # pos [B, L, d / 4]: each float4 of a row from its own cache row
        safe = np.where(used[..., None], pos, 0)
        cols = np.arange(d).reshape(d // 4, 4)
        k, v = (np.concatenate([flat(x)[safe[..., c]][..., cols[c]] for c in range(d // 4)], axis=-1)
                .transpose(0, 2, 1, 3) for x in (kp, vp))
    return R.decode_attention(i["q"], k, v, lens, i["scale"])


def position_causes(ctx):
    """Keys read from the wrong rows of the cache while the softmax counts the right keys: the page
    and slot computed with / and % exchanged, or the page lookup of the key loop, one step ahead,
    missing at the first step or aimed at the wrong keys."""
    i = ctx.inputs
    bt, lens = np.asarray(i["block_table"]), np.asarray(i["context_lens"])
    ps = i["k_pages"].shape[1]
    B, max_pages = bt.shape
    L = int(lens.max(initial=0))
    if L == 0:
        return
    j = np.arange(L)
    right = lambda b, jj: bt[b, jj // ps] * ps + jj % ps                               # noqa: E731
    if ps > 1 and ps <= max_pages:
        pos = np.array([np.where(j < lens[b], bt[b, np.minimum(j % ps, max_pages - 1)] * ps + j // ps, 0)
                        for b in range(B)])
        alt = _read_at(ctx, pos)
        if alt is not None and replays.matches(ctx, *alt):
            yield Cause("page:div_mod_swapped", (
                "physical_pos exchanges / and %: the output matches key j read from slot j / page_size "
                "of page block_table[b][j % page_size]. The page is block_table[b · max_pages + "
                "j / page_size], the slot j % page_size."))
    # The slot as j & (page_size - 1), right only for a power-of-two page size.
    if ps & (ps - 1):
        pos = np.array([np.where(j < lens[b], bt[b, np.minimum(j // ps, max_pages - 1)] * ps + (j & (ps - 1)), 0)
                        for b in range(B)])
        alt = _read_at(ctx, pos)
        if alt is not None and replays.matches(ctx, *alt):
            yield Cause("page:slot_mask", (
                f"key j is read from slot j & (page_size - 1) of its page (the output matches that): a mask "
                f"is j % page_size only for a page size that is a power of two, and this case's is "
                f"{ps}. The slot is j % page_size."))
    # The table's column from another dimension: j / max_pages where j / page_size is due (the slot right).
    at = np.arange(B)[:, None] * max_pages + np.minimum(j[None, :], lens[:, None] - 1).clip(0) // max_pages
    if max_pages != ps and at.max() < bt.size:      # read on past a row's end, as the kernel does
        pos = np.where(j[None, :] < lens[:, None], bt.reshape(-1)[at] * ps + j[None, :] % ps, 0)
        alt = _read_at(ctx, pos)
        if alt is not None and replays.matches(ctx, *alt):
            yield Cause("page_lookup:column_by_max_pages", (
                "physical_pos finds key j's page at column j / max_pages of the block table (the output "
                "matches that): a page holds page_size keys, so the column is j / page_size, the slot "
                "j % page_size."))
    config = replays.kernel_config(getattr(ctx, "config", None), ctx.params)
    W, KPS = config.get("WARPS"), config.get("KEYS_PER_STEP")
    if not (isinstance(W, int) and isinstance(KPS, int)):
        return
    stride = W * KPS
    # The launch splits the longest context the table can address, max_pages · page_size.
    for chunk in sorted(set(replays.split_sizes(ctx, L)) | set(replays.split_sizes(ctx, max_pages * ps)), reverse=True):
        for cid, text, first_missing, ahead in (
                # Two bugs, one replay: a warp whose first step reads row 0 and the rest right, and a
                # warp whose every step reads its next step's rows (row 0 past the split's end), read
                # the same rows, only for other keys; attention does not depend on the order of its
                # keys, so they give the same o and lse on every input, and no case can tell them apart.
                ("page_lookup:step_shifted",
                 "a warp's page lookups are one step off: either its first step's lookup is missing "
                 "(pos_next = 0 before the loop: the first step reads cache row 0, later steps are "
                 "right), or every step reads the rows looked up for its next step (the next lookup "
                 "overwrote pos_next before pos_here took it: the last step reads row 0). Both read the "
                 "same rows, for other keys, and attention does not depend on the order of its keys, so "
                 "no output tells these two apart. Look up the first step's positions before the loop; "
                 "in the loop, take pos_here = pos_next first, then look up the next step", True, stride),
                ("page_lookup:next_step_keys_per_step",
                 "the look-ahead finds the positions of keys j0 + KEYS_PER_STEP + u, not of the warp's next "
                 "step j0 + WARPS · KEYS_PER_STEP + u: from its second step on, a warp reads other keys' rows "
                 "(row 0 past the split's end)", False, KPS)):
            pos = np.zeros((B, L), np.int64)
            for b in range(B):
                for lo, hi in R.split_ranges(int(lens[b]), chunk):
                    for w in range(W):
                        looked = [lo + w * KPS + u for u in range(KPS)]        # the first lookup's keys
                        for j0 in range(lo + w * KPS, hi, stride):
                            for u in range(KPS):
                                if j0 + u < hi:
                                    jl = looked[u]
                                    first = j0 == lo + w * KPS
                                    pos[b, j0 + u] = 0 if (first and first_missing) or jl >= hi else right(b, jl)
                            looked = [j0 + ahead + u for u in range(KPS)]
            alt = _read_at(ctx, pos)
            if alt is not None and replays.matches(ctx, *alt):
                yield Cause(cid, f"{text} (the output matches that, with {replays.split_words(chunk, lens)}).")
        # Each lane loads its float4 from the position it looked up itself, key j0 + lane % KPS,
        # for every key u of the step (no __shfl_sync from lane u): every key of a step is one row
        # stitched from the step's keys.
        d = i["k_pages"].shape[-1]
        pos = np.zeros((B, L, d // 4), np.int64)
        lane_key = np.arange(d // 4) % KPS
        for b in range(B):
            for lo, hi in R.split_ranges(int(lens[b]), chunk):
                for j0 in range(lo, hi, KPS):
                    src = j0 + lane_key
                    row = np.where(src < hi, right(b, np.minimum(src, hi - 1)), 0)
                    pos[b, j0:min(j0 + KPS, hi)] = row[None, :]
        alt = _read_at(ctx, pos)
        if alt is not None and replays.matches(ctx, *alt):
            yield Cause("page_lookup:not_shuffled", (
                "each lane loads its float4 of every key of a step from the position it looked up "
                "itself, key j0 + lane % KEYS_PER_STEP, not key j0 + u's, which lane u looked up and "
                "__shfl_sync hands to every lane (the output matches every key of a step read as one "
                f"row stitched from the step's keys, with {replays.split_words(chunk, lens)})."))
