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
    'TODO(1): the merged max is the larger of the two. Each sum was measured against its own max, so rescale both to the new max before adding them.',
    'TODO(1): m_new = fmaxf(m, m2); l = l * expf(m - m_new) + l2 * expf(m2 - m_new); m = m_new;',
    'TODO(1): two empty states give m_new = -INFINITY, and expf(-inf - -inf) is NaN: if (m_new == -INFINITY) return; before the rescale leaves (m, l) = (-inf, 0).',
    'TODO(2): a single element x is the state (x, 1), so the per-lane pass is one merge per element: no new formula.',
    'TODO(2): for (int j = lane; j < n; j += 32) merge(m, l, x_row[j], 1.0f);',
    "TODO(3): __shfl_xor_sync(0xffffffffu, v, offset) returns v as held by lane lane ^ offset. With offsets 16, 8, 4, 2, 1, each lane merges its partner's state five times and ends with the row's (m, l): no broadcast needed.",
    'TODO(3): for (int offset = 16; offset > 0; offset /= 2) { float m_other = __shfl_xor_sync(0xffffffffu, m, offset); float l_other = __shfl_xor_sync(0xffffffffu, l, offset); merge(m, l, m_other, l_other); }',
    'TODO(4): walk the same strided elements again: y_row[j] = expf(x_row[j] - m) * inv_l with inv_l = 1.0f / l computed once; lane 0 alone writes lse[row] = m + logf(l).',
    'TODO(4): a row whose entries are all -inf ends with m = -INFINITY and l = 0: write y = 0 and lse = -INFINITY for it instead of computing expf(-inf - -inf) / 0.',
)
