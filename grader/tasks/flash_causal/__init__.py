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
    'Query row i sees keys 0 .. i + (Nk - Nq); the last row of a tile bounds the keys the whole tile needs.',
    'Only tiles that straddle the diagonal need the per-element test; tiles fully below it need none.',
    'A tile is fully visible when its last key, kv_start + BLOCK_N - 1, is <= q_start + (Nk - Nq).',
    'With Nq > Nk the first Nq - Nk rows see nothing: keep l = 0 and write 0 and -INFINITY.',
    'exp2f(-INFINITY - -INFINITY) is NaN: while m_new is -INFINITY, use 0 in its place.',
    "TODO(3) ends the kernel: the stub has no epilogue, so bring back your 02 TODO(5) (sum l across the row's threads, write o = acc / l and lse) with l = 0 rows writing 0 and -INFINITY.",
)
