"""Module 04: split-KV decode, one query token against a long contiguous cache.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'Split-KV decode: one token against a long cache, at memory speed'
ENTRY = 'splitkv_decode'            # the function exercises/04_splitkv_decode.py defines
GOALS = (
    'See why one block per (sequence, head) leaves most of the GPU idle at batch 1.',
    'Split the cache across blocks, write partial outputs with their lse, combine them.',
    'Read each kv head once for all the query heads that share it.',
)
HINTS = (
    'TODO(1): block (split, kv, b) serves query heads kv·GROUP .. kv·GROUP + GROUP - 1, which all read kv head kv: load each K and V row once and use it for all GROUP heads.',
    "TODO(1): lane t owns features 4t .. 4t+3 (one float4), so a score is warp_sum(dot4(qv[g], kr[u])), and after the xor butterfly every lane holds it. Issue a step's KEYS_PER_STEP loads of K and V before using any of them.",
    'TODO(1): for (int j0 = start + warp * KEYS_PER_STEP; j0 < end; j0 += WARPS * KEYS_PER_STEP); per head g: s[u] (-INFINITY for j0 + u >= end), m_new = max(m[g], s[u]), alpha = exp2f(m[g] - m_new) on l[g] and acc[g], then p = exp2f(s[u] - m_new) into l[g] and p · vr[u] into acc[g].',
    'TODO(2): lane 0 of each warp stores m[g] and l[g] in m_s[warp][g] and l_s[warp][g], every lane its acc[g] in acc_s[warp][g][lane]; __syncthreads(); then merge the warps as in module 01. A warp that saw no key has l = 0: skip it.',
    'TODO(2): row = (b * H + kv * GROUP + g) * n_splits + split; o_part[row] = merged acc / l and lse_part[row] = (m + log2f(l)) * M_LN2_F, back from log2 to natural log.',
    'TODO(3): the combine reads only the splits that hold keys (used, given). used = 0 (an empty context) writes o = 0 and lse = -INFINITY.',
    'TODO(3): subtract the largest split lse before exponentiating: exp(lse_s) overflows float32 once lse_s > 88. lse_max by a strided loop and an xor butterfly; w = expf(lse_s - lse_max); o = (Σ w·o_s) / Σ w; lse = lse_max + logf(Σ w).',
    'TODO(4): aim for a few blocks per SM, but no split shorter than MIN_CHUNK keys: max(1, min(cdiv(BLOCKS_PER_SM * rt.multiprocessor_count, B * H_kv), cdiv(max_len, MIN_CHUNK))).',
)
