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
    "TODO(2): the forward pass saved lse_i = log sum_j exp(scale · s_ij) (s = q·k, unscaled here), so P_ij = exp(scale · s_ij - lse_i) needs no max and no sum. In exp2 units: exp2f(s[n] * scale_log2 - lse_s[qi]) (lse_s is already multiplied by log2 e). Give 0 where the key is not visible and where lse_s[qi] == -INFINITY.",
    "TODO(3): const float ds = p * (dp[n] - delta_s[qi]);",
    "TODO(4): for each row r of the tile: p = p_s[r * LDP + kj], ds = ds_s[r * LDP + kj]; for each feature c = kx + e * KEY_THREADS: acc_dv[e] += p * do_s[r * LD + c]; acc_dk[e] += ds * q_s[r * LD + c]. At the end: dv[row + c] = acc_dv[e]; dk[row + c] = scale * acc_dk[e] for k_start + kj < n_k.",
    "TODO(5): for row i < n_q and features c = qx + e * ROW_THREADS: acc = sum over j of ds_s[qi * LDP + j] * k_s[j * LD + c]; then atomicAdd(&dq[(bh + i) * D + c], scale * acc). A plain += would lose the other key tiles' shares.",
)
