"""Wrong versions of 14_backward_hopper (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "14_backward_hopper"
WRONG = [
    Wrong(EX, 'd_copied_from_head_0',
          "the bulk copy of a step's D rows leaves out the head: every head subtracts head 0's D",
          edits=(
              ('delta_pad + row, BLOCK_M * 4, do_full(s));\n',
               'delta_pad + m_start, BLOCK_M * 4, do_full(s));   // BUG: not the head\'s rows\n'),
          ),
          # No replay models it: the check says which gradients are wrong (dV is right), and the first
          # divergence (off in the tests: GRADER_TRACE=0) names the bulk copy's read of delta_pad[0, 0]
          # where the finished version reads delta_pad[1, 0].
          expect=('relative error', 'dV is right; dQ and dK are wrong'),
          cases=('below_tile',)),
    Wrong(EX, 'd_pair_first',
          "both queries of a lane's pair subtract the first one's D",
          edits=(
              ('(dsT[j][e] - (e % 2 ? d2.y : d2.x));\n',
               '(dsT[j][e] - d2.x);   // BUG: the first query\'s D for both\n'),
          ),
          expect=("both subtract the first one's D",),
          cases=('tiny', 'below_tile'),   # Nk = 5 < 8 keys alone fits D:key_half as well
          cause='D:pair_first'),
    Wrong(EX, 'prep_delta_unpadded_row',
          "backward_prep stores D at the unpadded row bh · n_q + i, where the padded row is due",
          edits=(
              ('        delta_pad[row] = acc;\n',
               '        delta_pad[(size_t)bh * n_q + i] = acc;   // BUG: the unpadded row\n'),
          ),
          expect=('order in which the blocks run', 'delta_pad'),
          cases=('below_tile',),
          backends=('cpu',)),   # on a GPU: a race, and head 1's padded rows left unset
    Wrong(EX, 'ds_without_p',
          'dS is formed without the factor P: dS = dP - D',
          edits=(
              ('dsT[j][e] = pT[j][e] * (dsT[j][e] - (e % 2 ? d2.y : d2.x));\n',
               'dsT[j][e] = dsT[j][e] - (e % 2 ? d2.y : d2.x);   // BUG: no P\n'),
          ),
          expect=('without the factor P',),
          cases=('tiny', 'causal_square'),
          cause='dS:no_p'),
    Wrong(EX, 'dk_without_scale',
          'dK is stored without the scale of S = scale · Q Kᵀ',
          edits=(
              ('to_elem2(scale * dk_acc[j][2 * r], scale * dk_acc[j][2 * r + 1]);\n',
               'to_elem2(dk_acc[j][2 * r], dk_acc[j][2 * r + 1]);   // BUG: no scale\n'),
          ),
          expect=('dK is computed without the scale',),
          cases=('tiny', 'gqa_4_to_1'),
          numeric=True,
          cause='dk:scale_missing'),
    Wrong(EX, 'dq_stored_not_added',
          "the adding thread stores each dQ part into dq_acc with plain stores, not the bulk reduction",
          edits=(
              ('                    bulk_reduce_add(dq_acc + dq_part(b * H + h, m_start + (c % Q_BOXES) * 64, (c / Q_BOXES) * 64, n_pad),\n'
               '                                    smem_addr(dq_s + c * PART), PART * 4);\n',
               '                    float* dst = dq_acc + dq_part(b * H + h, m_start + (c % Q_BOXES) * 64, (c / Q_BOXES) * 64, n_pad);\n'
               '                    for (int e = 0; e < PART; ++e) dst[e] = dq_s[c * PART + e];   // BUG: stored, not added\n'),
          ),
          # The first divergence adds the line of the store and the two blocks (off in the tests).
          expect=('order in which the blocks run', 'dq_acc'),
          cases=('head_dim_128',),
          backends=('cpu',)),
    Wrong(EX, 'dq_plain_add',
          "the adding thread adds each dQ part into dq_acc with a plain +=, not the bulk reduction",
          edits=(
              ('                    bulk_reduce_add(dq_acc + dq_part(b * H + h, m_start + (c % Q_BOXES) * 64, (c / Q_BOXES) * 64, n_pad),\n'
               '                                    smem_addr(dq_s + c * PART), PART * 4);\n',
               '                    float* dst = dq_acc + dq_part(b * H + h, m_start + (c % Q_BOXES) * 64, (c / Q_BOXES) * 64, n_pad);\n'
               '                    for (int e = 0; e < PART; ++e) dst[e] += dq_s[c * PART + e];   // BUG: a race between key blocks\n'),
          ),
          # Two key blocks add in either order to the same floats (a + b = b + a): three are needed.
          expect=('order in which the blocks run', 'dq_acc'),
          cases=('three_key_blocks',),
          backends=('cpu',)),   # on a GPU the blocks lose updates only when they overlap in time
    Wrong(EX, 'dq_part_overwritten',
          "a consumer writes its next dQ part into dq_s without waiting on dq_empty",
          edits=(
              ('        mbar_wait(dq_empty(cw), (it & 1) ^ 1);\n',
               '        // BUG: no mbar_wait(dq_empty(cw), ...) before the part is written again\n'),
          ),
          expect=('rewritten after that instruction', 'wait_group'),
          cases=('stage_ring_d128',),
          backends=('cpu',)),
    Wrong(EX, 'dq_released_before_read',
          "the adding thread hands a dQ part back (dq_empty) before wait_group.read says the reduction has read it",
          edits=(
              ('                    bulk_wait_read<0>();\n                    mbar_arrive(dq_empty(c));\n',
               '                    mbar_arrive(dq_empty(c));   // BUG: before the reduction has read it\n'
               '                    bulk_wait_read<0>();\n'),
          ),
          expect=('rewritten after that instruction', 'wait_group'),
          cases=('stage_ring_d128',),
          backends=('cpu',)),
    Wrong(EX, 'empty_wait_wrong_parity',
          "the producer waits on a stage's 'empty' barrier with the consumers' parity, not the opposite",
          edits=(
              ('                mbar_wait(empty(s), ((it / STAGES) & 1) ^ 1);\n',
               '                mbar_wait(empty(s), (it / STAGES) & 1);   // BUG: the parity of the full wait\n'),
          ),
          expect=('hangs', 'parity'),
          cases=('tiny',),
          backends=('cpu',)),
    Wrong(EX, 'ds_stores_not_fenced',
          "the consumers store dSᵀ into shared memory with no fence.proxy.async before wgmma reads it for dQ",
          edits=(
              ('        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // wgmma reads through the async proxy\n',
               ''),
          ),
          expect=('fence.proxy.async',),
          cases=('tiny',),
          backends=('cpu',)),
    Wrong(EX, 'dq_stores_not_fenced',
          "the consumers write their dQ parts with no fence.proxy.async before the bulk reduction reads them",
          edits=(
              ('        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the bulk copy reads through the async proxy\n',
               ''),
          ),
          expect=('fence.proxy.async',),
          cases=('tiny',),
          backends=('cpu',)),
]
