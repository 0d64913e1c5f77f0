"""Module 07: variable-length prefill, a packed batch of prompts of different lengths (cu_seqlens).

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'Varlen prefill: a packed batch of prompts, cu_seqlens, no padding'
ENTRY = 'varlen_prefill'          # the function exercises/07_varlen_prefill.py defines
GOALS = (
    'Pack a batch token-major and find each sequence through cumulative offsets (cu_seqlens).',
    'Map blocks to (sequence, query tile) and never read across a sequence boundary.',
    'Apply the causal mask bottom-right per sequence, for chunked prefill too.',
)
HINTS = (
    "TODO(1): blockIdx.z is the sequence b. Its queries are tokens cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of the packed q: q_begin = cu_seqlens_q[b], n_q = cu_seqlens_q[b + 1] - q_begin, and the same for the keys with cu_seqlens_k.",
    "TODO(1): the grid has a query tile for every tile of the longest sequence; a shorter sequence has fewer, so `if (q_start >= n_q) return;` (before any __syncthreads: the whole block leaves together).",
    "TODO(2): token t, head h of q is at q + (t · H + h) · D, so query i of this sequence is at q_seq + i · q_stride with q_seq = q + (size_t)q_begin * q_stride + h * D. The keys use kv_stride and h_kv: k_seq = k + (size_t)k_begin * kv_stride + h_kv * D, v_seq likewise.",
    "TODO(3): everything past this sequence's n_k belongs to the next sequence: kv_end = causal ? min(n_k, q_last + offset + 1) : n_k, with q_last (the tile's last row) and offset = n_k - n_q of this sequence declared just above.",
    "TODO(3): in the per-element loop, if (j >= n_k || (causal && j > i + offset)) s[r][n] = -INFINITY;",
    "TODO(4): o is packed like q: float* o_i = o + (size_t)(q_begin + i) * q_stride + h * D; then the float4 stores of 03's epilogue. lse is [H, total_q]: lse[(size_t)h * total_q + q_begin + i] (thread tx == 0 only).",
)
