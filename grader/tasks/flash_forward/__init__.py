"""Module 02: the tiled FlashAttention forward pass, online softmax over K/V tiles, GQA.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'FlashAttention forward: tiles, online softmax, one pass'
ENTRY = 'flash_forward'            # the function exercises/02_flash_forward.py defines
GOALS = (
    'Stream K/V tiles through shared memory; never materialise the N×N scores.',
    'Keep the running max and sum per query row and rescale the output as the max grows.',
    'Write o normalised once at the end, and lse for the backward pass and split-KV.',
)
HINTS = (
    'TODO(1): neighbouring threads should take neighbouring rows r = idx % BLOCK_M, so that their transposed stores q_s[c * BLOCK_M + r] do not collide; each thread reads a float4 of its row, zeros when q_start + r >= n_q.',
    'TODO(2): K goes in transposed like Q (k_s[c * BLOCK_N + j]), V row by row (v_s[j * D + c]); keys past n_k get zeros, not garbage (0 · NaN is NaN). End with __syncthreads(): the whole tile is there before anyone reads it.',
    "TODO(3): float s[TM][TN], zeroed; for each feature c, read this thread's 4 rows as one float4 at q_s[c * BLOCK_M + ty * TM] and its TN keys at k_s[c * BLOCK_N + slice_col(n, tx)], and add their outer product to s. Multiply by scale_log2 at the end.",
    'TODO(3): keys past n_k in the last tile must get score -INFINITY, not 0: when kv_start + BLOCK_N > n_k, set s[r][n] = -INFINITY wherever kv_start + slice_col(n, tx) >= n_k.',
    "TODO(4): a row's keys are spread over 8 neighbouring lanes (tx = 0..7): take the max over your TN keys, then combine it with __shfl_xor_sync at strides 4, 2, 1, outside any if.",
    'TODO(4): when the max grows from m to m_new, multiply l and every acc[r][e] by alpha = exp2f(m - m_new) before adding the tile; then s[r][n] = exp2f(s[r][n] - m_new) is P, and l[r] += s[r][n].',
    "TODO(4): write P transposed: for key j = slice_col(n, tx), p_s[j * BLOCK_M + p_col(j, ty) + r] = s[r][n] (p_col swizzles the rows' chunk so the 8 threads of a row hit different banks), __syncthreads(), then acc[r][e] += p_s[j * BLOCK_M + p_col(j, ty) + r] * v_s[j * D + slice_col(e, tx)] over the tile's keys j, and __syncthreads() again before the next tile overwrites k_s, v_s and p_s.",
    "TODO(5): add up a row's 8 partial l with __shfl_xor_sync (strides 4, 2, 1) before any if; then, for rows i < n_q, o = acc * (1 / l) and, from tx == 0, lse = (m + log2f(l)) * M_LN2_F (the scores are in log2 units).",
    'TODO(6): grid = (cdiv(n_q, BLOCK_M), H, B), block = (NTHREADS,), smem = shared_bytes(d); past 48 KB, kernel.max_dynamic_shared_size_bytes = smem before the launch.',
)
