"""Wrong versions of 04_splitkv_decode (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "04_splitkv_decode"
WRONG = [
    Wrong(EX, 'combine_equal_weights',
          'the combine averages the split outputs without weighing them by exp(lse_s)',
          edits=(
              ('        float w = expf(lse_s[s] - lse_max);            // <= 1: cannot overflow, however large the scores\n',
               '        float w = 1.f;                                 // BUG: every split weighs the same\n'),
          ),
          expect=('sequences with a context of at most 1 key are right',),
          cases=('three_splits',)),
    Wrong(EX, 'combine_without_max',
          "the combine exponentiates each split's lse without subtracting the largest one",
          edits=(
              ('        float w = expf(lse_s[s] - lse_max);            // <= 1: cannot overflow, however large the scores\n',
               '        float w = expf(lse_s[s]);                      // BUG: no max subtracted: inf once lse_s > 88\n'),
              ('    if (lane == 0) lse[row] = lse_max + logf(total);\n',
               '    if (lane == 0) lse[row] = logf(total);\n'),
          ),
          expect=('expf(x) is inf in float32',),
          cases=('lse_near_120',),
          numeric=True),
    Wrong(EX, 'gqa_wrong_kv_head',
          'query head h is served by kv head h % H_kv instead of h / (H / H_kv)',
          edits=(
              ('            float4 x = reinterpret_cast<const float4*>(q + ((size_t)b * H + kv * GROUP + g) * d)[lane];\n',
               '            float4 x = reinterpret_cast<const float4*>(q + ((size_t)b * H + g * H_kv + kv) * d)[lane];   // BUG: h % H_kv mapping\n'),
              ('        size_t row = ((size_t)b * H + kv * GROUP + g) * n_splits + split;\n',
               '        size_t row = ((size_t)b * H + g * H_kv + kv) * n_splits + split;\n'),
          ),
          expect=('reads the wrong kv head', 'h_kv = h / (H / Hkv)'),
          cases=('gqa_4_to_1',),
          cause='gqa:h%Hkv'),
    Wrong(EX, 'nan_for_empty_context',
          'the combine divides 0 by 0 for a sequence with context length 0',
          edits=(
              ('    if (used == 0) {                                   // empty context: nothing to weigh\n        if (4 * lane < d) reinterpret_cast<float4*>(o + row * d)[lane] = make_float4(0.f, 0.f, 0.f, 0.f);\n        if (lane == 0) lse[row] = -INFINITY;\n        return;\n    }\n',
               '    // BUG: no special case for an empty context: total = 0, inv = inf, 0 * inf = NaN.\n'),
          ),
          expect=('empty context', 'context_lens[b] = 0',),
          cases=('contexts_0_1_2_5', 'mixed_lengths',),
          cause='empty_rows:nan'),
    Wrong(EX, 'ignores_scale',
          'the launch passes 1/sqrt(d) instead of the scale argument',
          edits=(
              ('rt.int32(max_len), rt.int32(d), rt.int32(chunk), rt.float32(scale * LOG2E)))',
               'rt.int32(max_len), rt.int32(d), rt.int32(chunk), rt.float32(LOG2E / d ** 0.5)))  # BUG: ignores scale'),
          ),
          expect=('ignores its scale argument',),
          cases=('custom_scale',),
          cause='scale:ignored'),
]
