"""Wrong versions of 06_flash_tensor_cores (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "06_flash_tensor_cores"
WRONG = [
    Wrong(EX, 'fragment_rows_swapped',
          'the epilogue writes register pair r of a fragment to row g + 8 r the wrong way round',
          edits=(
              ('            const int i = q_start + warp_row + mt * 16 + g + 8 * r;\n',
               '            const int i = q_start + warp_row + mt * 16 + g + 8 * (1 - r);   // BUG: rows g and g + 8 swapped\n'),
          ),
          expect=('lse: relative error',),
          cases=('below_tile', 'primes')),
    Wrong(EX, 'quad_sum_over_wrong_lanes',
          "the final sum of l adds lanes 4 and 8 apart (other rows) instead of the quad's lanes 1 and 2 apart",
          edits=(
              ('            l_row += __shfl_xor_sync(0xffffffffu, l_row, 1);\n'
               '            l_row += __shfl_xor_sync(0xffffffffu, l_row, 2);\n',
               '            l_row += __shfl_xor_sync(0xffffffffu, l_row, 4);   // BUG: lanes of other rows\n'
               '            l_row += __shfl_xor_sync(0xffffffffu, l_row, 8);\n'),
          ),
          expect=('groups of columns are the right answer times different factors',),
          cases=('tiny', 'below_tile')),
    Wrong(EX, 'p_before_the_max_is_final',
          "P is taken against the max of the earlier tiles, before this tile's max is folded in",
          edits=(
              ('                const float alpha = exp2f(m[mt][r] - m_use);\n',
               '                const float alpha = exp2f(m[mt][r] - m_use);\n'
               '                const float m_prev = m[mt][r] == -INFINITY ? 0.0f : m[mt][r];   // BUG: stale max\n'),
              ('                        s[mt][nt][e] = exp2f(fmaf(s[mt][nt][e], scale_log2, -m_use));   // s now holds P\n',
               '                        s[mt][nt][e] = exp2f(fmaf(s[mt][nt][e], scale_log2, -m_prev));  // s now holds P\n'),
          ),
          expect=('stale max', 'fold the tile'),
          cases=('tiny', 'long'),
          cause='softmax:stale_max'),
    Wrong(EX, 'acc_not_rescaled',
          'acc keeps its old scale when the running max grows (l is rescaled)',
          edits=(
              ('                    acc[mt][dt][2 * r] *= alpha;\n                    acc[mt][dt][2 * r + 1] *= alpha;\n',
               '                    // BUG: acc is not rescaled by alpha\n'),
          ),
          expect=('acc is not rescaled',),
          cases=('tile_plus_1', 'long'),
          numeric=True,
          cause='rescale:acc'),
    Wrong(EX, 'tile_read_before_wait_group',
          'the loop reads the K/V tile without waiting for its cp.async copies',
          edits=(
              ('        cp_async_wait<0>();\n        __syncthreads();\n        if (it + 1 < n_tiles) {\n',
               '        __syncthreads();                      // BUG: no cp_async_wait<0>() first\n'
               '        if (it + 1 < n_tiles) {\n'),
          ),
          expect=('cp.async',),
          cases=('tiny',),
          backends=('cpu',)),
]
