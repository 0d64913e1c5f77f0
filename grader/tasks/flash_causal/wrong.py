"""Wrong versions of 03_flash_causal (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "03_flash_causal"
WRONG = [
    Wrong(EX, 'diagonal_off_by_one',
          'the diagonal key itself is masked (< instead of <=)',
          edits=(
              ('                    if (j >= n_k || j > i + offset) s[r][n] = -INFINITY;\n',
               '                    if (j >= n_k || j >= i + offset) s[r][n] = -INFINITY;   // BUG: off by one\n'),
          ),
          expect=('diagonal itself',),
          cases=('tiny', 'primes',),
          cause='mask:diagonal_excluded'),
    Wrong(EX, 'empty_rows_nan',
          'rows with no visible key are not guarded',
          edits=(
              ('            const float m_use = m_new == -INFINITY ? 0.0f : m_new;   // exp2(-inf - -inf) would be NaN\n',
               '            const float m_use = m_new;   // BUG: -inf - -inf is NaN\n'),
              ('            const float inv_l = l_row > 0.0f ? 1.0f / l_row : 0.0f;   // l = 0: the row saw no key\n',
               '            const float inv_l = 1.0f / l_row;   // BUG: 1/0\n'),
              ('                lse[(size_t)(b * H + h) * n_q + i] = l_row > 0.0f ? (m[r] + log2f(l_row)) * M_LN2_F : -INFINITY;\n',
               '                lse[(size_t)(b * H + h) * n_q + i] = (m[r] + log2f(l_row)) * M_LN2_F;\n'),
          ),
          expect=('no visible key',),
          cases=('more_queries_than_keys',),
          cause='empty_rows:nan'),
    Wrong(EX, 'loop_stops_early',
          'the key loop is bounded by the first row of the query tile',
          edits=(
              ("    const int q_last = min(q_start + BLOCK_M, n_q) - 1;     // the tile's last row sees the most keys\n",
               '    const int q_last = q_start;   // BUG: the first row sees the fewest keys\n'),
          ),
          expect=('stops too early',),
          cases=('queries_past_keys', 'head_dim_128',),
          cause='key_tiles_end:first_row'),
    Wrong(EX, 'no_diagonal_mask',
          'tiles straddling the diagonal get no per-element mask',
          edits=(
              ('                    if (j >= n_k || j > i + offset) s[r][n] = -INFINITY;\n',
               '                    if (j >= n_k) s[r][n] = -INFINITY;   // BUG: no causal test\n'),
          ),
          expect=('diagonal', 'per-element',),
          cases=('tiny', 'chunked_prefill', 'tile_plus_1'),
          cause='mask:diagonal_tiles_unmasked'),
    Wrong(EX, 'top_left_mask',
          "the causal mask is aligned top-left (PyTorch's is_causal)",
          edits=(
              ('    const int offset = n_k - n_q;            // bottom-right alignment: query i sees keys j <= i + offset\n',
               '    const int offset = 0;   // BUG: top-left alignment            // bottom-right alignment: query i sees keys j <= i + offset\n'),
          ),
          expect=('top-left', 'bottom-right',),
          cases=('tiny', 'chunked_prefill',),
          numeric=True,
          cause='mask:top_left'),
]
