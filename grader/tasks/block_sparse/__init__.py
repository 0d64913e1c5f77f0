"""Module 08: block-sparse FlashAttention, a block mask decides which tiles run.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'Block-sparse FlashAttention: a block mask, skipped tiles'
ENTRY = 'block_sparse'            # the function exercises/08_block_sparse.py defines
GOALS = (
    'Iterate over the blocks a mask keeps and skip the others without changing the online softmax.',
    'Handle rows whose blocks are all masked: output 0 and lse -inf.',
    'Know where the speed-up comes from and where it stops (density, load imbalance).',
)
HINTS = (
    'TODO(1): a query tile holds rows q_start .. q_last; row i reads row i / mb_rows of the mask (integer division), so the tile reads mask rows q_start / mb_rows .. q_last / mb_rows.',
    'TODO(1): const int br0 = q_start / mb_rows; const int br1 = q_last / mb_rows; (with mb_rows = BLOCK_M that is one row: br0 == br1 == blockIdx.x).',
    'TODO(2): the key tile holds keys kv_start .. min(kv_start + BLOCK_N, n_k) - 1, so it covers mask columns bc0 = kv_start / mb_cols .. bc1 = (min(kv_start + BLOCK_N, n_k) - 1) / mb_cols. Count the kept bytes (!= 0) of the rectangle br0..br1 × bc0..bc1: mask_bh[(size_t)br * n_mb_k + bc].',
    'TODO(2): if (kept == 0) continue; before the tile is loaded: every thread counted the same bytes, so the whole block skips together, and a skipped tile leaves m, l and acc exactly as they were. Then partial = kept < (br1 - br0 + 1) * (bc1 - bc0 + 1).',
    'TODO(3): the per-element test runs on partial tiles, on the causal diagonal and on the last key tile. Mask a key when any test says so: if (j >= n_k || (causal && j > i + offset) || (partial && mask_i[j / mb_cols] == 0)) s[r][n] = -INFINITY; keep j >= n_k first: it guards the mask read too.',
    'TODO(4): a row whose tiles so far were all masked has m_new = -INFINITY, and exp2f(-INFINITY - -INFINITY) is NaN: m_use = m_new == -INFINITY ? 0.0f : m_new (its p are 0 and l stays 0).',
    "TODO(5) ends the kernel: sum l across the row's 8 threads (a __shfl_xor_sync butterfly), then o = acc * inv_l with inv_l = l_row > 0 ? 1 / l_row : 0, and lse = l_row > 0 ? (m + log2f(l_row)) * M_LN2_F : -INFINITY. A row whose blocks are all masked never ran a tile: l = 0, so it writes 0 and -INFINITY.",
)
