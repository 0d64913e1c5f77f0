"""Wrong versions of 09_flash_backward (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "09_flash_backward"
WRONG = [
    Wrong(EX, 'no_delta',
          'D is forgotten: dS = P ∘ dP',
          edits=(
              ('                        const float ds = p * (dp[r][n] - delta_s[qr]);\n',
               '                        const float ds = p * dp[r][n];   // BUG: no D\n'),
          ),
          expect=('D is missing', 'rowsum(dO ∘ O)'),
          cases=('tiny', 'causal_chunked'),
          cause='D:missing'),
    Wrong(EX, 'delta_from_v',
          'D is computed from V instead of O (the preprocessing kernel gets v)',
          edits=(
              ('(o, do, delta, dq, rt.int32(rows), rt.int32(d)))',
               '(v, do, delta, dq, rt.int32(rows), rt.int32(d)))   # BUG: v, not o'),
          ),
          expect=('from V instead of O',),
          cases=('one_query_one_key', 'tiny'),
          cause='D:from_v'),
    Wrong(EX, 'p_without_scale',
          'P is recomputed without the scale',
          edits=(
              ('exp2f(s[r][n] * scale_log2 - lse_s[qr])', 'exp2f(s[r][n] * M_LOG2E_F - lse_s[qr]) /* BUG: no scale */'),
          ),
          expect=('without the scale',),
          cases=('tiny', 'causal_gqa'),
          cause='P:no_scale'),
    Wrong(EX, 'p_without_lse',
          'P is recomputed as exp(s), without the lse of the forward pass',
          edits=(
              ('exp2f(s[r][n] * scale_log2 - lse_s[qr])', 'exp2f(s[r][n] * scale_log2) /* BUG: no lse */'),
          ),
          expect=('without lse',),
          cases=('tiny', 'primes'),
          cause='P:no_lse'),
    Wrong(EX, 'gqa_group_not_summed',
          'dK and dV start again at 0 for every query head of a GQA group, so only the last head is stored',
          edits=(
              ('        const size_t bh = (size_t)(b * H + h) * n_q;\n',
               '        const size_t bh = (size_t)(b * H + h) * n_q;\n'
               '        for (int n = 0; n < KEYS_K; ++n) for (int e = 0; e < FEATS_K; ++e) acc[n][e] = 0.0f;   // BUG: per head\n'),
          ),
          expect=('GQA', 'sums over those heads'),
          cases=('gqa_4_to_1', 'causal_gqa'),
          numeric=True,
          cause='gqa:not_summed'),
    Wrong(EX, 'dq_race',
          'blocks add into dQ with a plain +=, not atomicAdd',
          edits=(
              ('                        atomicAdd(&dq[(bh + i) * D + slice_col(e, qx)], scale * acc_q[r][e]);\n',
               '                        dq[(bh + i) * D + slice_col(e, qx)] += scale * acc_q[r][e];   // BUG: a race between key tiles\n'),
          ),
          expect=('order in which the blocks run', 'atomicAdd'),
          cases=('long', 'many_key_tiles'),
          backends=('cpu',)),   # on a GPU the blocks lose updates only when they overlap in time
]
