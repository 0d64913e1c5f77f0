#!/usr/bin/env python3
"""Regenerate tests/wrong/02_flash_forward/ and tests/wrong/03_flash_causal/ from the solutions.

Each wrong version is the solution with one planted bug (one text replacement), headed by EXPECT (the
phrases the diagnosis must print) and CASES (the cases the test runs). Run after editing a solution:

    python scripts/make_wrong_flash.py            # rewrite the files
    python scripts/make_wrong_flash.py --check    # exit 1 if a replacement no longer applies
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (exercise, bug name, what is wrong, [(old, new), ...], EXPECT, CASES)
BUGS = [
    ("02_flash_forward", "no_rescale", "the accumulator is not rescaled when the running max grows",
     [("            for (int e = 0; e < TD; ++e) acc[r][e] *= alpha;\n",
       "            for (int e = 0; e < TD; ++e) acc[r][e] *= 1.0f;   // BUG: should be alpha\n")],
     ["not rescaled", "exp(m_old - m_new)"], ["long", "many_key_tiles"]),
    ("02_flash_forward", "no_final_division", "the final 1/l is forgotten",
     [("            const float inv_l = 1.0f / l_row;",
       "            const float inv_l = 1.0f;   // BUG: should be 1 / l_row")],
     ["final division by l"], ["tiny", "primes"]),
    ("02_flash_forward", "no_bounds_mask", "keys past n_k in the last tile are not masked",
     [("        if (kv_start + BLOCK_N > n_k) {      // only the last tile can hold keys past the end\n",
       "        if (false) {      // BUG: the last, partial tile is not masked\n")],
     ["bounds mask", "past n_k"], ["tiny", "primes"]),
    ("02_flash_forward", "missing_barrier", "no __syncthreads() before the next tile overwrites shared memory",
     [("        __syncthreads();                     // everyone is done with k_s, v_s, p_s before the next tile overwrites them\n",
       "        // BUG: no __syncthreads() here: a fast thread overwrites k_s, v_s, p_s while others still read them\n")],
     ["data race", "__syncthreads"], ["tile_plus_1"]),
    ("02_flash_forward", "lse_in_log2", "lse is left in log2 units",
     [("(m[r] + log2f(l_row)) * M_LN2_F;", "(m[r] + log2f(l_row));   // BUG: log2 units")],
     ["log2 units", "ln(2)"], ["tiny", "primes"]),
    ("02_flash_forward", "gqa_modulo", "query head h reads kv head h % Hkv",
     [("    const int h_kv = h / (H / H_kv);", "    const int h_kv = h % H_kv;   // BUG")],
     ["wrong kv head", "h / (H / Hkv)"], ["gqa_4_to_1"]),
    ("03_flash_causal", "top_left_mask", "the causal mask is aligned top-left (PyTorch's is_causal)",
     [("    const int offset = n_k - n_q;", "    const int offset = 0;   // BUG: top-left alignment")],
     ["top-left", "bottom-right"], ["tiny", "chunked_prefill"]),
    ("03_flash_causal", "no_diagonal_mask", "tiles straddling the diagonal get no per-element mask",
     [("                    if (j >= n_k || j > i + offset) s[r][n] = -INFINITY;\n",
       "                    if (j >= n_k) s[r][n] = -INFINITY;   // BUG: no causal test\n")],
     ["diagonal", "per-element"], ["tiny", "chunked_prefill"]),
    ("03_flash_causal", "diagonal_off_by_one", "the diagonal key itself is masked (< instead of <=)",
     [("                    if (j >= n_k || j > i + offset) s[r][n] = -INFINITY;\n",
       "                    if (j >= n_k || j >= i + offset) s[r][n] = -INFINITY;   // BUG: off by one\n")],
     ["diagonal itself"], ["tiny", "primes"]),
    ("03_flash_causal", "empty_rows_nan", "rows with no visible key are not guarded",
     [("            const float m_use = m_new == -INFINITY ? 0.0f : m_new;   // exp2(-inf - -inf) would be NaN\n",
       "            const float m_use = m_new;   // BUG: -inf - -inf is NaN\n"),
      ("            const float inv_l = l_row > 0.0f ? 1.0f / l_row : 0.0f;   // l = 0: the row saw no key\n",
       "            const float inv_l = 1.0f / l_row;   // BUG: 1/0\n"),
      ("l_row > 0.0f ? (m[r] + log2f(l_row)) * M_LN2_F : -INFINITY;", "(m[r] + log2f(l_row)) * M_LN2_F;")],
     ["no visible key"], ["more_queries_than_keys"]),
    ("03_flash_causal", "loop_stops_early", "the key loop is bounded by the first row of the query tile",
     [("    const int q_last = min(q_start + BLOCK_M, n_q) - 1;     // the tile's last row sees the most keys\n",
       "    const int q_last = q_start;   // BUG: the first row sees the fewest keys\n")],
     ["stops too early"], ["queries_past_keys", "head_dim_128"]),
]


def main() -> int:
    check = "--check" in sys.argv
    bad = 0
    for ex_id, name, what, edits, expect, cases in BUGS:
        text = (ROOT / "solutions" / f"{ex_id}.py").read_text()
        for old, new in edits:
            if text.count(old) != 1:
                print(f"{ex_id}/{name}: the text to replace occurs {text.count(old)} times: {old.strip()[:60]!r}")
                bad += 1
                break
            text = text.replace(old, new)
        header = (f'"""Wrong version of {ex_id}: {what}.\n\nGenerated by scripts/make_wrong_flash.py from '
                  f'solutions/{ex_id}.py; the checker must reject it\nand say why."""\n'
                  f"EXPECT = {expect!r}\nCASES = {cases!r}\n\n")
        body = text.split('"""', 2)[2].lstrip("\n")      # drop the solution's docstring
        out = ROOT / "tests" / "wrong" / ex_id / f"{name}.py"
        if not check:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(header + body)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
