"""Wrong versions of 13_decode_tensor_cores (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "13_decode_tensor_cores"
WRONG = [
    Wrong(EX, 'group_packed_with_wrong_kv_head',
          'the block of kv head kv packs query heads g · Hkv + kv (h % Hkv) instead of kv · G + g',
          edits=(
              ('            const size_t at = valid ? (((size_t)b * T + row / G) * H + kv * G + row % G) * D : 0;\n',
               '            const size_t at = valid ? (((size_t)b * T + row / G) * H + (row % G) * H_kv + kv) * D : 0;   // BUG\n'),
              ('        const size_t out = ((size_t)b * T + row / G) * H + kv * G + row % G;   // (b, token, head)\n',
               '        const size_t out = ((size_t)b * T + row / G) * H + (row % G) * H_kv + kv;   // BUG: h % Hkv\n'),
          ),
          expect=('wrong kv head', 'h_kv = h / (H / Hkv)'),
          cases=('gqa_4_page_size_1',),
          cause='gqa:h%Hkv'),
    Wrong(EX, 'mask_top_left',
          "the new tokens' causal mask is aligned top-left: token t sees the keys j <= t",
          edits=(
              ('    const int offset = ctx - T;\n',
               '    const int offset = 0;                                     // BUG: top-left\n'),
          ),
          expect=('top-left', 'context_lens[b] - T + t'),
          cases=('tokens_8_causal',),
          numeric=True,
          cause='mask:top_left'),
    Wrong(EX, 'stage_refilled_before_its_readers_finished',
          'the refill aims one stage too far ahead: it overwrites the stage this iteration reads, before its readers read it',
          edits=(
              ('        const int next = it + STAGES - 1;   // refill the slot stage it - 1 used, while this one computes\n',
               '        const int next = it + STAGES;       // BUG: the slot of stage it, about to be read\n'),
          ),
          expect=('cp.async', 'in flight'),
          cases=('ring_wraps',),
          backends=('cpu',)),
    Wrong(EX, 'empty_split_writes_nothing',
          'a split with no key (past a short context) returns before writing its lse = -inf, and the combine reads its workspace',
          edits=(
              ('    const int start = split * chunk, end = min(start + chunk, ctx);\n',
               '    const int start = split * chunk, end = min(start + chunk, ctx);\n'
               '    if (start >= end) return;                   // BUG: an empty split writes nothing\n'),
          ),
          expect=('never written', 'hold no key'),
          cases=('splits_past_short_context',)),
    Wrong(EX, 'slot_assumes_page_size_16',
          'the slot inside a page is j & 15: right for page_size 16 only',
          edits=(
              ('return page < 0 ? -1 : page * page_size + j % page_size;',
               'return page < 0 ? -1 : page * page_size + (j & 15);   // BUG: page_size 16 assumed'),
          ),
          expect=('page_size', 'j % page_size'),
          cases=('gqa_16_page_size_32',),
          cause='page:slot_16'),
]
