"""Module 01: the row softmax in one pass with a running (m, l), warp reductions and merges.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'Online softmax: one pass, warp reductions, merging states'
ENTRY = 'online_softmax'            # the function exercises/01_online_softmax.py defines
GOALS = (
    'Keep a running max m and sum l in one pass, rescaling l when the max grows.',
    "Merge two partial (m, l) states, and reduce a warp's states with shuffles.",
    'Write the softmax and its log-sum-exp: the ingredients of FlashAttention and split-KV.',
)
HINTS = (
    'Merging (m2, l2) into (m, l): m_new = max(m, m2); l = l·exp(m - m_new) + l2·exp(m2 - m_new).',
    'Start from the empty state m = -INFINITY, l = 0. exp(-inf - -inf) is NaN: return early when m_new is -inf.',
    'A single element x is the state (x, 1): the per-lane pass is one merge per element.',
    'for (int offset = 16; offset > 0; offset /= 2) merge your state with __shfl_xor_sync(0xffffffff, m, offset) and the same for l.',
    "After the xor butterfly every lane holds the row's (m, l): no broadcast needed.",
    'TODO(4): a row whose entries are all -inf ends with m = -INFINITY; write y = 0 and lse = -INFINITY for it instead of computing exp(-inf - -inf).',
)
