"""Wrong versions of 08_block_sparse (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "08_block_sparse"
WRONG = [
    Wrong(EX, 'mask_transposed',
          'the skip decision reads the mask transposed (column bc as the row)',
          edits=(
              ('                kept += mask_bh[(size_t)br * n_mb_k + bc] != 0;\n',
               '                kept += mask_bh[(size_t)bc * n_mb_k + br] != 0;   // BUG: transposed\n'),
          ),
          expect=('transposed',),
          cases=('empty_rows', 'random_30'),
          numeric=True),
    Wrong(EX, 'no_partial_test',
          'partial tiles get no per-element block test (only right when the mask blocks are the tiles)',
          edits=(
              ('                    if (j >= n_k || (causal && j > i + offset) || (partial && mask_i[j / mb_cols] == 0))\n',
               '                    if (j >= n_k || (causal && j > i + offset))   // BUG: no block test\n'),
          ),
          expect=('partly kept', 'per-element'),
          cases=('blocks_32x32', 'blocks_48x80')),
    Wrong(EX, 'tile_coordinates',
          'the mask is indexed with the kernel tile index instead of the mask block',
          edits=(
              ('    const int br0 = q_start / mb_rows;\n    const int br1 = q_last / mb_rows;\n',
               '    const int br0 = q_start / BLOCK_M;   // BUG: tile coordinates\n    const int br1 = br0;\n'),
              ('        const int bc0 = kv_start / mb_cols;\n        const int bc1 = (min(kv_start + BLOCK_N, n_k) - 1) / mb_cols;\n',
               '        const int bc0 = kv_start / BLOCK_N;   // BUG: tile coordinates\n        const int bc1 = bc0;\n'),
          ),
          expect=('kernel-tile coordinates',),
          cases=('blocks_32x32',)),
    Wrong(EX, 'empty_rows_nan',
          'rows whose blocks are all masked are not guarded',
          edits=(
              ('            const float m_use = m_new == -INFINITY ? 0.0f : m_new;   // exp2(-inf - -inf) would be NaN\n',
               '            const float m_use = m_new;   // BUG: -inf - -inf is NaN\n'),
              ('            const float inv_l = l_row > 0.0f ? 1.0f / l_row : 0.0f;   // l = 0: the row saw no key\n',
               '            const float inv_l = 1.0f / l_row;   // BUG: 1/0\n'),
              ('                lse[(size_t)(b * H + h) * n_q + i] = l_row > 0.0f ? (m[r] + log2f(l_row)) * M_LN2_F : -INFINITY;\n',
               '                lse[(size_t)(b * H + h) * n_q + i] = (m[r] + log2f(l_row)) * M_LN2_F;\n'),
          ),
          expect=('no visible key', 'every block of its mask row is masked'),
          cases=('empty_rows',)),
    Wrong(EX, 'causal_drops_block_mask',
          'on tiles that straddle the causal diagonal only the causal test is applied',
          edits=(
              ('|| (partial && mask_i[j / mb_cols] == 0))\n',
               '|| (partial && !diagonal && mask_i[j / mb_cols] == 0))   // BUG\n'),
          ),
          expect=('diagonal', 'block mask is not applied'),
          cases=('causal_random_chunk',)),
    Wrong(EX, 'skip_only_full_rows',
          'the skip decision reads only the first mask block of the tile',
          edits=(
              ('            for (int bc = bc0; bc <= bc1; ++bc)\n',
               '            for (int bc = bc0; bc <= bc0; ++bc)   // BUG: only the first column of blocks\n'),
          ),
          expect=('skip',),
          cases=('blocks_32x32',)),
]
