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
    'TODO(2): the warps\' states are in their registers; to merge them, publish them in shared memory arrays you declare first, sized by what a warp holds per head: m and l are one float per warp (every lane holds the same after warp_sum), acc one float4 per lane. So m_s and l_s are [WARPS][GROUP] floats and acc_s is [WARPS][GROUP][MAX_D / 4] float4s, all compile-time sizes.',
    'TODO(2): __shared__ float m_s[WARPS][GROUP], l_s[WARPS][GROUP]; __shared__ float4 acc_s[WARPS][GROUP][MAX_D / 4]; then per head g: lane 0 of each warp stores m[g] and l[g] in m_s[warp][g] and l_s[warp][g], every lane its acc[g] in acc_s[warp][g][lane]; __syncthreads(); then merge the warps as in module 01. A warp that saw no key has l = 0: skip it.',
    'TODO(2): let one thread take each (head g, float4 c4 of the features): idx = threadIdx.x, threadIdx.x + blockDim.x, ... below GROUP * (d / 4), g = idx / (d / 4), c4 = idx % (d / 4). Its workspace row is row = (b * H + kv * GROUP + g) * n_splits + split. o_part is [B, H, n_splits, d], so the row\'s features start at o_part + row * d: reinterpret_cast<float4*>(o_part + row * d)[c4] = merged acc / l. lse_part is [B, H, n_splits], one float per row: lse_part[row] = (m + log2f(l)) * M_LN2_F (back from log2 to natural log), written by one thread of the row (c4 == 0).',
    'TODO(3): the combine reads only the splits that hold keys (used, given). used = 0 (an empty context) writes o = 0 and lse = -INFINITY.',
    'TODO(3): subtract the largest split lse before exponentiating: exp(lse_s) overflows float32 once lse_s > 88. lse_max by a strided loop and an xor butterfly; w = expf(lse_s - lse_max); o = (Σ w·o_s) / Σ w; lse = lse_max + logf(Σ w).',
    'TODO(4): aim for a few blocks per SM, but no split shorter than MIN_CHUNK keys: max(1, min(cdiv(BLOCKS_PER_SM * rt.multiprocessor_count, B * H_kv), cdiv(max_len, MIN_CHUNK))).',
)
