"""Wrong versions of 11_backward_tensor_cores (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "11_backward_tensor_cores"
WRONG = [
    Wrong(EX, 'ds_without_delta',
          'dS is formed without subtracting D: dS = P ∘ dP',
          edits=(
              ('            for (int e = 0; e < 4; ++e) dsT[nt][e] = pT[nt][e] * (dsT[nt][e] - (e % 2 ? d2.y : d2.x));\n',
               '            for (int e = 0; e < 4; ++e) dsT[nt][e] = pT[nt][e] * dsT[nt][e] + 0.0f * d2.x;   // BUG: no D\n'),
          ),
          expect=('D is missing', 'rowsum(dO ∘ O)'),
          cases=('tiny', 'causal_square'),
          cause='D:missing'),
    Wrong(EX, 'b_fragment_untransposed',
          "dV and dK read their B operand (dO, Q) with ldmatrix_x4, where ldmatrix_x4_trans is due",
          edits=(
              ('            ldmatrix_x4_trans(b, b_t + block16<D>(kk, dp, lane));\n',
               '            ldmatrix_x4(b, b_t + block16<D>(kk, dp, lane));   // BUG: not transposed\n'),
          ),
          expect=('ldmatrix_x4_trans',),
          cases=('below_tile', 'primes'),
          cause='fragment:dkdv_b:transposed'),
    Wrong(EX, 'dk_without_scale',
          'dK is stored without the scale of S = scale · Q Kᵀ',
          edits=(
              ('                    to_elem2(scale * dk_acc[dt][2 * r], scale * dk_acc[dt][2 * r + 1]);\n',
               '                    to_elem2(dk_acc[dt][2 * r], dk_acc[dt][2 * r + 1]);   // BUG: no scale\n'),
          ),
          expect=('dK is computed without the scale',),
          cases=('tiny', 'gqa_4_to_1'),
          cause='dk:scale_missing'),
    Wrong(EX, 'dq_race',
          "key tiles add into dQ's accumulator with a plain +=, not atomicAdd",
          edits=(
              ('                for (int dt = 0; dt < DQ_DT; ++dt) atomic_add2(row + dt * 8, dq_frag[dt][2 * r], dq_frag[dt][2 * r + 1]);\n',
               '                for (int dt = 0; dt < DQ_DT; ++dt) {   // BUG: a race between key tiles\n'
               '                    row[dt * 8] += dq_frag[dt][2 * r];\n'
               '                    row[dt * 8 + 1] += dq_frag[dt][2 * r + 1];\n'
               '                }\n'),
          ),
          expect=('order in which the blocks run', 'atomicAdd'),
          cases=('long',),
          backends=('cpu',)),   # on a GPU the blocks lose updates only when they overlap in time
    Wrong(EX, 'gqa_group_not_summed',
          'dK and dV start again at 0 for every query head of a GQA group, so only the last head is stored',
          edits=(
              ('        const size_t bh = (size_t)(b * H + h) * n_q;\n        const elem_t* q_t',
               '        const size_t bh = (size_t)(b * H + h) * n_q;\n'
               '        if (it % m_tiles == 0)   // BUG: a new head starts from 0\n'
               '            for (int dt = 0; dt < DT; ++dt) for (int e = 0; e < 4; ++e) { dv_acc[dt][e] = 0.0f; dk_acc[dt][e] = 0.0f; }\n'
               '        const elem_t* q_t'),
          ),
          expect=('GQA', 'sums over those heads'),
          cases=('gqa_4_to_1', 'causal_gqa'),
          numeric=True,
          cause='gqa:not_summed'),
    Wrong(EX, 'dq_odd_set_dropped',
          "dQ's odd 16-key steps add into dq_odd, which is never added into dq_frag before the reductions",
          edits=(
              ('            for (int e = 0; e < 4; ++e) dq_frag[dt][e] += dq_odd[dt][e];\n',
               '            for (int e = 0; e < 4; ++e) dq_frag[dt][e] += 0.0f * dq_odd[dt][e];   // BUG: dq_odd dropped\n'),
          ),
          expect=('even 16-key steps', 'dq_odd'),
          cases=('primes', 'head_dim_128'),
          cause='dq:odd_steps_dropped'),
]
