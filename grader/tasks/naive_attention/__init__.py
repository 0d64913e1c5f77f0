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
    'Flatten the indices: q[b, h, i, c] lives at ((b*H + h)*Nq + i)*d + c. k and v use Hkv and Nk.',
    'The kv head of query head h is h / (H / Hkv) (integer division): H/Hkv query heads share one.',
    'Subtract the row max before expf: expf(50) is fine but expf(100) overflows to inf, and inf/inf is NaN.',
    'lse = m + logf(l), where m is the row max and l = sum_j expf(s_j - m).',
    'A thread whose (i, j) is past the end must return before reading: the grid is rounded up.',
    'TODO(4): one thread per element, so scores_grid = (cdiv(n_k, 16), cdiv(n_q, 16), B * H) for 16×16 blocks; softmax_grid = (cdiv(B * H * n_q, 128),) for 128 threads per block.',
)
