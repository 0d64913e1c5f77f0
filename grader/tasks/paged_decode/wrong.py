"""Wrong versions of 05_paged_decode (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "05_paged_decode"
WRONG = [
    Wrong(EX, 'gqa_wrong_kv_head',
          'query head h is served by kv head h % H_kv instead of h / (H / H_kv)',
          edits=(
              ('            float4 x = reinterpret_cast<const float4*>(q + ((size_t)b * H + kv * GROUP + g) * d)[lane];\n',
               '            float4 x = reinterpret_cast<const float4*>(q + ((size_t)b * H + g * H_kv + kv) * d)[lane];   // BUG: h % H_kv mapping\n'),
              ('        size_t row = ((size_t)b * H + kv * GROUP + g) * n_splits + split;\n',
               '        size_t row = ((size_t)b * H + g * H_kv + kv) * n_splits + split;\n'),
          ),
          expect=('reads the wrong kv head', 'h_kv = h / (H / Hkv)'),
          cases=('page_size_8_gqa_4',),
          cause='gqa:h%Hkv'),
    Wrong(EX, 'logical_page_as_physical',
          'the kernel reads logical page j / page_size, never the block table',
          edits=(
              ('    int page = block_table[(size_t)b * max_pages + j / page_size];\n',
               '    int page = j / page_size;                      // BUG: the logical page used as the physical one\n'),
          ),
          expect=('logical page index', 'block_table',),
          cases=('shuffled_partial_last_page',),
          numeric=True,
          cause='page:logical_as_physical'),
    Wrong(EX, 'nan_for_empty_context',
          'the combine divides 0 by 0 for a sequence with context length 0',
          edits=(
              ('    if (used == 0) {                                   // empty context: nothing to weigh\n        if (4 * lane < d) reinterpret_cast<float4*>(o + row * d)[lane] = make_float4(0.f, 0.f, 0.f, 0.f);\n        if (lane == 0) lse[row] = -INFINITY;\n        return;\n    }\n',
               '    // BUG: no special case for an empty context: total = 0, inv = inf, 0 * inf = NaN.\n'),
          ),
          expect=('empty context',),
          cases=('contexts_0_1_2_5',),
          cause='empty_rows:nan'),
    Wrong(EX, 'slot_assumes_page_size_16',
          'the slot inside a page is j & 15: right for page_size 16 only',
          edits=(
              ('    int slot = j % page_size;\n',
               '    int slot = j & 15;                             // BUG: assumes page_size = 16\n'),
          ),
          expect=('out-of-bounds read', 'k_pages',),
          cases=('page_size_8_gqa_4',),
          backends=("cpu",)),
    Wrong(EX, 'block_table_row_stride_in_keys',
          'the block table row is strided by max_pages · page_size: rows b >= 1 read past the table',
          edits=(
              ('    int page = block_table[(size_t)b * max_pages + j / page_size];\n',
               '    int page = block_table[(size_t)b * max_pages * page_size + j / page_size];   // BUG: a row has max_pages entries\n'),
          ),
          expect=('block_table',),
          cases=('pages_in_order',)),
]
