"""Wrong versions of 02_flash_forward (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "02_flash_forward"
WRONG = [
    Wrong(EX, 'gqa_modulo',
          'query head h reads kv head h % H_kv',
          edits=(
              ('    const int h_kv = h / (H / H_kv);         // GQA: H / H_kv query heads share one kv head\n',
               '    const int h_kv = h % H_kv;   // BUG         // GQA: H / H_kv query heads share one kv head\n'),
          ),
          expect=('wrong kv head', 'h / (H / Hkv)',),
          cases=('gqa_4_to_1',)),
    Wrong(EX, 'lse_in_log2',
          'lse is left in log2 units',
          edits=(
              ('            if (tx == 0) lse[(size_t)(b * H + h) * n_q + i] = (m[r] + log2f(l_row)) * M_LN2_F;\n',
               '            if (tx == 0) lse[(size_t)(b * H + h) * n_q + i] = (m[r] + log2f(l_row));   // BUG: log2 units\n'),
          ),
          expect=('log2 units', 'ln(2)',),
          cases=('tiny', 'primes',)),
    Wrong(EX, 'missing_barrier',
          'no __syncthreads() before the next tile overwrites shared memory',
          edits=(
              ('        __syncthreads();                     // everyone is done with k_s, v_s, p_s before the next tile overwrites them\n',
               '        // BUG: no __syncthreads() here: a fast thread overwrites k_s, v_s, p_s while others still read them\n'),
          ),
          expect=('data race', '__syncthreads',),
          cases=('tile_plus_1',),
          backends=("cpu",)),
    Wrong(EX, 'no_bounds_mask',
          'keys past n_k in the last tile are not masked',
          edits=(
              ('        if (kv_start + BLOCK_N > n_k) {      // only the last tile can hold keys past the end\n',
               '        if (false) {      // BUG: the last, partial tile is not masked\n'),
          ),
          expect=('bounds mask', 'past n_k',),
          cases=('tiny', 'primes',)),
    Wrong(EX, 'no_final_division',
          'the final 1/l is forgotten',
          edits=(
              ('            const float inv_l = 1.0f / l_row;      // one division per row, not one per key\n',
               '            const float inv_l = 1.0f;   // BUG: should be 1 / l_row      // one division per row, not one per key\n'),
          ),
          expect=('final division by l',),
          cases=('tiny', 'primes',)),
    Wrong(EX, 'no_rescale',
          'the accumulator is not rescaled when the running max grows',
          edits=(
              ('            for (int e = 0; e < TD; ++e) acc[r][e] *= alpha;\n',
               '            for (int e = 0; e < TD; ++e) acc[r][e] *= 1.0f;   // BUG: should be alpha\n'),
          ),
          expect=('not rescaled', 'exp(m_old - m_new)',),
          cases=('long', 'many_key_tiles',),
          numeric=True),
    Wrong(EX, 'ignores_scale',
          'the kernel computes 1/sqrt(d) itself instead of using its scale argument',
          edits=(
              ('    const float scale_log2 = scale * M_LOG2E_F;\n',
               '    const float scale_log2 = rsqrtf((float)D) * M_LOG2E_F;   // BUG: ignores the scale argument\n'),
          ),
          expect=('ignores its scale argument',),
          cases=('custom_scale',)),
]
