"""Module 03: causal FlashAttention, masks aligned bottom-right, tiles above the diagonal skipped.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'Causal FlashAttention: masks aligned bottom-right, skipped tiles'
ENTRY = 'flash_causal'            # the function exercises/03_flash_causal.py defines
GOALS = (
    'Mask key j for query i unless j <= i + (Nk - Nq).',
    'Classify tiles as fully visible, diagonal or skipped, so causal costs about half.',
    'Handle rows that see no key at all: output 0 and lse -inf.',
)
HINTS = (
    'TODO(1): query row i sees keys 0 .. i + (Nk - Nq), so the last row of a query tile bounds the keys the whole tile needs.',
    "TODO(1): q_last = min(q_start + BLOCK_M, n_q) - 1; kv_end = min(n_k, q_last + offset + 1). With kv_end <= 0 the loop does not run and the tile's rows write 0 and -INFINITY.",
    'TODO(2): only tiles that straddle the diagonal need the per-element test. A tile is fully visible when its last key, kv_start + BLOCK_N - 1, is <= q_start + offset (what its first row sees); diagonal is the opposite.',
    'TODO(2): in the per-element loop, if (j >= n_k || j > i + offset) s[r][n] = -INFINITY; keep j >= n_k: the last, partial tile needs it whether or not it is diagonal.',
    'TODO(3): a row that has seen no visible key yet has m_new = -INFINITY, and exp2f(-INFINITY - -INFINITY) is NaN: exponentiate against 0 instead, m_use = m_new == -INFINITY ? 0.0f : m_new (its p are 0 and l stays 0).',
    "TODO(3) ends the kernel: the stub has no epilogue, so bring back your 02 TODO(5) (sum l across the row's 8 threads, write o = acc / l and lse) with inv_l = l_row > 0 ? 1 / l_row : 0 and lse = l_row > 0 ? (m + log2f(l_row)) * M_LN2_F : -INFINITY.",
)
