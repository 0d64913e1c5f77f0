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
    'Block (split, kv, b) serves query heads kv·G .. kv·G+G-1 with G = H / Hkv: load each K and V row once and use it for all G.',
    'Lane t owns features 4t..4t+3: the score is warp_sum(dot4(q, k)), and after the xor butterfly every lane holds it.',
    "A warp's keys may be fewer than its stride, or none: a warp that saw no key has l = 0; skip it when merging the warps.",
    'Subtract the largest split lse before exponentiating in the combine: exp(lse_s) overflows float32 once lse_s > 88.',
    'The combine reads only the splits that hold keys: used = ceil(context_lens[b] / chunk). used = 0 writes o = 0 and lse = -INFINITY.',
    'Aim for a few blocks per SM: splits × Hkv × B ≈ 4 × rt.multiprocessor_count, but no split shorter than a few hundred keys.',
)
