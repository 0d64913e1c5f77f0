"""Module 09: the FlashAttention backward pass, dQ, dK and dV without the N x N matrices.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'The backward pass: dQ, dK, dV without the N x N matrix'
ENTRY = 'flash_backward'          # the function exercises/09_flash_backward.py defines
GOALS = (
    'Derive dV, dP, dS = P ∘ (dP - D), dQ and dK, and see why D = rowsum(dO ∘ O).',
    'Recompute P from the saved lse instead of storing it: one exp per score, no second pass.',
    'Parallelise over key tiles: dK and dV in registers, dQ added atomically by every key tile.',
)
HINTS = (
    "TODO(1): one warp per row: lanes take c = lane, lane + 32, ...; acc += do_i[c] * o_i[c]; then a butterfly of __shfl_xor_sync over strides 16, 8, 4, 2, 1; lane 0 writes delta[row]. In the same loop, dq_i[c] = 0.0f.",
    "TODO(2): the forward pass saved lse_i = log sum_j exp(scale · s_ij) (s = q·k, unscaled here), so P_ij = exp(scale · s_ij - lse_i) needs no max and no sum. In exp2 units: exp2f(s[r][n] * scale_log2 - lse_s[qr]) (lse_s is already multiplied by log2 e). Give 0 where the key is not visible and where lse_s[qr] == -INFINITY.",
    "TODO(3): const float ds = p * (dp[r][n] - delta_s[qr]);",
    "TODO(4): w_s = half == 0 ? p_s : ds_s and x_s = half == 0 ? do_s : q_s; for each row r of the tile, load w[n] = w_s[r * LDP + kj * KEYS_K + n] and x[e] = x_s[r * LD + slice_col(e, kx)] (float4 at a time), then acc[n][e] += w[n] * x[e].",
    "TODO(4), the store: row j = k_start + kj * KEYS_K + n of dv (half 0) or dk (half 1), if j < n_k; features slice_col(e, kx); dk gets scale * acc[n][e], dv gets acc[n][e].",
    "TODO(5): for the thread's rows qi + (2r + half) · ROW_GROUPS: acc_q[r][e] = sum over j of ds_s[row * LDP + j] * k_s[j * LD + slice_col(e, qx)]; then, for rows i = m_start + row < n_q, atomicAdd(&dq[(bh + i) * D + slice_col(e, qx)], scale * acc_q[r][e]). A plain += would lose the other key tiles' shares.",
)
