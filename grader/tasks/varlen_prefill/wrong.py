"""Wrong versions of 07_varlen_prefill (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "07_varlen_prefill"
WRONG = [
    Wrong(EX, 'bounded_by_max_seqlen',
          "every sequence's keys are bounded by the longest sequence's length, reading into the next sequence",
          edits=(
              ('               int H, int H_kv, int total_q, int causal, float scale)\n',
               '               int H, int H_kv, int total_q, int causal, float scale, int max_seqlen_k)\n'),
              ('    const int k_begin = cu_seqlens_k[b], n_k = cu_seqlens_k[b + 1] - k_begin;\n',
               '    const int k_begin = cu_seqlens_k[b], n_k = max_seqlen_k;   // BUG: the longest length, not this one\n'),
              ('rt.int32(total_q), rt.int32(1 if causal else 0), rt.float32(scale)),\n',
               'rt.int32(total_q), rt.int32(1 if causal else 0), rt.float32(scale), rt.int32(max_seqlen_k)),\n'),
          ),
          expect=('next sequence',),
          cases=('lengths_0_and_1', 'one_long_many_short'),
          cause='varlen:keys_past_end',
          # On a GPU the last sequence reads past the end of k and v, whatever memory holds there: no
          # replay reproduces that case, so the cause is withdrawn. The emulator names the read.
          backends=('cpu',)),
    Wrong(EX, 'keys_at_query_offsets',
          'the keys are found through cu_seqlens_q (right only when every sequence has n_q = n_k)',
          edits=(
              ('    const int k_begin = cu_seqlens_k[b], n_k = cu_seqlens_k[b + 1] - k_begin;\n',
               '    const int k_begin = cu_seqlens_q[b], n_k = cu_seqlens_k[b + 1] - cu_seqlens_k[b];   // BUG: query offsets\n'),
          ),
          expect=('cu_seqlens_q', 'k_begin = cu_seqlens_k[b]'),
          cases=('chunked_prefill', 'gqa_4_to_1'),
          numeric=True,
          cause='varlen:key_offsets'),
    Wrong(EX, 'lse_token_major',
          'lse is stored token-major, [total_q, H], not [H, total_q]',
          edits=(
              ('                lse[(size_t)h * total_q + q_begin + i] =',
               '                lse[(size_t)(q_begin + i) * H + h] =   /* BUG: token-major */'),
          ),
          expect=('token-major', '[H, total_q]'),
          cases=('lengths_0_and_1', 'causal'),
          cause='varlen:lse_layout'),
    Wrong(EX, 'rows_spill_into_next_sequence',
          "blocks do not stop at their sequence's end and store rows past it, over the next sequence's rows",
          edits=(
              ('    if (q_start >= n_q) return;              // the grid covers the longest sequence; this one is shorter\n',
               ''),
              ("        if (i < n_q) {                       // rows past this sequence's end belong to the next one\n",
               '        if (q_begin + i < total_q) {   // BUG: the end of the buffer, not of the sequence\n'),
          ),
          expect=('order in which the blocks run', 'own part'),
          cases=('lengths_0_and_1', 'one_long_many_short'),
          backends=('cpu',)),   # on a GPU the blocks race: the output may even come out right
    Wrong(EX, 'top_left_per_sequence',
          "the causal mask is aligned top-left in each sequence (PyTorch's is_causal)",
          edits=(
              ('    const int offset = n_k - n_q;            // causal, per sequence: query i sees keys j <= i + offset\n',
               '    const int offset = 0;   // BUG: top-left\n'),
          ),
          expect=('top-left', 'bottom-right'),
          cases=('chunked_prefill_causal', 'causal_queries_past_keys'),
          cause='mask:top_left'),
]
