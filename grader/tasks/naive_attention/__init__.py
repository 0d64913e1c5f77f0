"""Module 00: attention as three kernels (scores, softmax, output), the N×N matrix in memory.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'Naive attention: scores, softmax, output'
ENTRY = 'naive_attention'            # the function exercises/00_naive_attention.py defines
GOALS = (
    'Write attention as three kernels: S = scale·QKᵀ, P = softmax(S) row by row, O = PV.',
    'Index [B, H, N, d] tensors and map query heads to kv heads (GQA).',
    'See why the N×N score matrix makes memory grow as N².',
)
HINTS = (
    'TODO(1): one thread, one score. Before anything else, a thread whose i or j lies past the matrix (i >= n_q or j >= n_k) returns: the grid is rounded up to whole 16×16 blocks.',
    'TODO(1): bh = b*H + h, so b = bh / H and h = bh % H; the kv head is h_kv = h / (H / H_kv) (integer division: H / H_kv consecutive query heads share one).',
    'TODO(1): row i of q starts at q + ((size_t)(b * H + h) * n_q + i) * d and row j of k at k + ((size_t)(b * H_kv + h_kv) * n_k + j) * d. Keep those two pointers (q_i, k_j) and sum q_i[c] * k_j[c] over c < d in a float.',
    'TODO(1): if (i >= n_q || j >= n_k) return; ... then, after the loop, s[((size_t)bh * n_q + i) * n_k + j] = scale * dot;',
    'TODO(2): three loops over the row: its max m, then l = sum of expf(s_j - m), then s_j = expf(s_j - m) / l. Subtracting m keeps every expf at or below 1 (expf overflows past 88.7).',
    'TODO(2): if (row >= n_rows) return; float* s_row = s + (size_t)row * n_k; start m at -INFINITY and update it with fmaxf; finish with lse[row] = m + logf(l).',
    'TODO(3): the same shape as TODO(1) with c in place of j: return if i >= n_q or c >= d, find b, h, h_kv, then sum over the keys j < n_k (not n_q).',
    'TODO(3): p_i = p + ((size_t)bh * n_q + i) * n_k is row i of P; v_c = v + (size_t)(b * H_kv + h_kv) * n_k * d + c is column c of V, whose element j is v_c[(size_t)j * d]. Store the sum at o[((size_t)bh * n_q + i) * d + c].',
    'TODO(4): a grid dimension is the number of elements along that axis divided by the threads per block along it, rounded up: cdiv(elements, threads). x goes with the index that is fastest in memory (j for the scores, c for the output).',
    'TODO(4): scores_grid = (cdiv(n_k, 16), cdiv(n_q, 16), B * H); softmax_grid = (cdiv(B * H * n_q, 128),); output_grid = (cdiv(d, 16), cdiv(n_q, 16), B * H).',
)
