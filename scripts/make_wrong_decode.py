#!/usr/bin/env python3
"""Regenerate tests/wrong/04_splitkv_decode/ and tests/wrong/05_paged_decode/ from the solutions.

Each wrong version is the full solution with one planted bug (one exact text replacement), plus
EXPECT (phrases the checker's message must contain) and CASES (the cases that show the bug).

    python scripts/make_wrong_decode.py
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COMBINE_NAN = ('''    if (used == 0) {                                   // empty context: nothing to weigh
        if (4 * lane < d) reinterpret_cast<float4*>(o + row * d)[lane] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (lane == 0) lse[row] = -INFINITY;
        return;
    }
''', '''    // BUG: no special case for an empty context: total = 0, inv = inf, 0 * inf = NaN.
''')
COMBINE_NO_MAX = ('''        float w = expf(lse_s[s] - lse_max);            // <= 1: cannot overflow, however large the scores''',
                  '''        float w = expf(lse_s[s]);                      // BUG: no max subtracted: inf once lse_s > 88''')
COMBINE_NO_MAX_LSE = ('''    if (lane == 0) lse[row] = lse_max + logf(total);''',
                      '''    if (lane == 0) lse[row] = logf(total);''')
COMBINE_EQUAL = ('''        float w = expf(lse_s[s] - lse_max);            // <= 1: cannot overflow, however large the scores''',
                 '''        float w = 1.f;                                 // BUG: every split weighs the same''')
GQA_Q = ('''q + ((size_t)b * n_heads + kv * GROUP + g) * d)[lane];''',
         '''q + ((size_t)b * n_heads + g * n_kv_heads + kv) * d)[lane];   // BUG: h % Hkv mapping''')
GQA_ROW = ('''        size_t row = ((size_t)b * n_heads + kv * GROUP + g) * n_splits + split;''',
           '''        size_t row = ((size_t)b * n_heads + g * n_kv_heads + kv) * n_splits + split;''')
LOGICAL_PAGE = ('''    int page = block_table[(size_t)b * max_pages + j / page_size];''',
                '''    int page = j / page_size;                      // BUG: the logical page used as the physical one''')
LAYOUT = ('''    return (((size_t)page * page_size + slot) * n_kv_heads + kv) * d;''',
          '''    return (((size_t)page * n_kv_heads + kv) * page_size + slot) * d;   // BUG: page read as [Hkv, page_size, d]''')
SLOT16 = ('''    int slot = j % page_size;''', '''    int slot = j & 15;                             // BUG: assumes page_size = 16''')

WRONG = {
    "04_splitkv_decode": {
        "combine_without_max": ("The combine exponentiates each split's lse without subtracting the largest one.",
                                [COMBINE_NO_MAX, COMBINE_NO_MAX_LSE], ["overflow", "subtract the max"], ["lse_near_120"]),
        "nan_for_empty_context": ("The combine divides 0 by 0 for a sequence with context length 0.",
                                  [COMBINE_NAN], ["empty context", "context_lens[b] = 0"],
                                  ["contexts_0_1_2_5", "mixed_lengths"]),
        "gqa_wrong_kv_head": ("Query head h is served by kv head h % Hkv instead of h / (H / Hkv).",
                              [GQA_Q, GQA_ROW], ["gqa mapping", "kv head"], ["gqa_4_to_1"]),
        "combine_equal_weights": ("The combine averages the split outputs without weighing them by exp(lse_s).",
                                  [COMBINE_EQUAL], ["several splits", "combine"], ["three_splits"]),
    },
    "05_paged_decode": {
        "logical_page_as_physical": ("The kernel reads logical page j / page_size, never the block table.",
                                     [LOGICAL_PAGE], ["logical page index", "block_table"],
                                     ["shuffled_partial_last_page"]),
        "page_layout_swapped": ("A page is read as [Hkv, page_size, d] instead of [page_size, Hkv, d].",
                                [LAYOUT], ["page layout"], ["shuffled_partial_last_page"]),
        "slot_assumes_page_size_16": ("The slot inside a page is j & 15: right for page_size 16 only.",
                                      [SLOT16], ["out-of-bounds read", "k_pages"], ["page_size_8_gqa_4"]),
        "nan_for_empty_context": ("The combine divides 0 by 0 for a sequence with context length 0.",
                                  [COMBINE_NAN], ["empty context"], ["contexts_0_1_2_5"]),
        "gqa_wrong_kv_head": ("Query head h is served by kv head h % Hkv instead of h / (H / Hkv).",
                              [GQA_Q, GQA_ROW], ["gqa mapping"], ["page_size_8_gqa_4"]),
    },
}


def main():
    for ex_id, bugs in WRONG.items():
        solution = (ROOT / "solutions" / f"{ex_id}.py").read_text()
        doc_end = solution.index('"""', 3) + 3
        folder = ROOT / "tests" / "wrong" / ex_id
        folder.mkdir(parents=True, exist_ok=True)
        for name, (what, edits, expect, cases) in bugs.items():
            text = solution
            for old, new in edits:
                assert text.count(old) == 1, (ex_id, name, old[:60])
                text = text.replace(old, new)
            header = (f'"""WRONG ({ex_id}): {what}\n\nGenerated by scripts/make_wrong_decode.py from '
                      f'solutions/{ex_id}.py."""\nEXPECT = {expect!r}\nCASES = {cases!r}\n')
            (folder / f"{name}.py").write_text(header + text[doc_end:])
            print(f"wrote tests/wrong/{ex_id}/{name}.py")


if __name__ == "__main__":
    main()
