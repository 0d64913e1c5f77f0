"""Wrong versions of 01_online_softmax (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "01_online_softmax"
WRONG = [
    Wrong(EX, 'merge_without_guard',
          'merge has no guard for two empty states',
          edits=(
              ('    if (m_new == -INFINITY) return;        // both empty: exp(-inf - -inf) would be NaN\n',
               '    // BUG: no `if (m_new == -INFINITY) return;` -- two empty states give l = 0 * NaN = NaN\n'),
          ),
          expect=('lse: ', 'computed where the answer is finite', 'no guard for two empty states'),
          cases=('one_element', 'fewer_than_a_warp', 'one_warp'),
          cause='merge:no_guard'),
    Wrong(EX, 'nan_on_fully_masked_rows',
          'the second pass forgets rows that are entirely -inf',
          edits=(
              ('    bool masked = (m == -INFINITY);                    // every x was -inf: nothing to normalise\n    float inv_l = 1.0f / l;\n',
               '    float inv_l = 1.0f / l;                            // BUG: l = 0 for a fully masked row\n'),
              ('        y_row[j] = masked ? 0.0f : expf(x_row[j] - m) * inv_l;\n',
               '        y_row[j] = expf(x_row[j] - m) * inv_l;\n'),
              ('        lse[row] = masked ? -INFINITY : m + logf(l);\n',
               '        lse[row] = m + logf(l);\n'),
          ),
          expect=('computed where the answer is finite', 'rows with no visible key, and only they, are NaN'),
          cases=('masked_entries', 'fully_masked_rows',),
          cause='empty_rows:nan'),
    Wrong(EX, 'merge_keeps_own_sum_unscaled',
          'merge rescales only the incoming sum, not its own, when the max grows',
          edits=(
              ('    l = l * expf(m - m_new) + l2 * expf(m2 - m_new);\n',
               '    l = l + l2 * expf(m2 - m_new);         // BUG: l was measured against the old max\n'),
          ),
          expect=('merge (TODO 1) does not rescale its own sum l',),
          cases=('fewer_than_a_warp', 'prime_length',),
          cause='merge:no_rescale_l'),
    Wrong(EX, 'no_max_subtraction',
          'the merge measures every sum against 0 instead of the running max',
          edits=(
              ('    float m_new = fmaxf(m, m2);\n    if (m_new == -INFINITY) return;        // both empty: exp(-inf - -inf) would be NaN\n    l = l * expf(m - m_new) + l2 * expf(m2 - m_new);\n    m = m_new;\n',
               '    // BUG: no max subtraction. Every state is kept relative to 0: l = sum of expf(x).\n    l = l * expf(m) + l2 * expf(m2);\n    m = 0.0f;\n'),
          ),
          expect=('y: ', 'computed where the answer is finite', 'lse: ', 'expf(x) is inf in float32'),
          cases=('prime_length', 'huge_logits',),
          numeric=True),
]
