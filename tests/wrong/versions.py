"""Wrong versions the checker must reject, each with the right explanation.

Each entry is a solution with one planted bug, kept as the exact text edits that plant it, so the
wrong versions follow the solutions as they change: `build` applies the edits to the committed
solution and fails loudly when an edit no longer matches exactly once (then update the edit).

    python tests/wrong/versions.py 02_flash_forward no_rescale > /tmp/no_rescale.py   # one as a file
    grader check 02 --file /tmp/no_rescale.py --backend cpu                            # what it is told

EXPECT phrases must all appear in the message of the first failing case (tests/test_wrong_versions.py);
CASES, when given, are the cases the test runs (to keep CI fast).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Wrong:
    exercise: str
    name: str
    what: str
    edits: tuple            # ((old, new), ...): each old text occurs exactly once in the solution
    expect: tuple           # phrases the grader's message must contain
    cases: tuple | None = None

    @property
    def id(self) -> str:
        return f"{self.exercise}/{self.name}"


def build(w: Wrong, solution_text: str | None = None) -> str:
    """The wrong version's source: the solution (docstring replaced) with the bug's edits applied."""
    text = solution_text if solution_text is not None else (ROOT / "solutions" / f"{w.exercise}.py").read_text()
    for old, new in w.edits:
        n = text.count(old)
        if n != 1:
            raise ValueError(f"{w.id}: the text to replace occurs {n} times in solutions/{w.exercise}.py "
                             f"(it must occur once); update the edit in tests/wrong/versions.py:\n{old}")
        text = text.replace(old, new)
    body = text.split('"""', 2)[2] if text.lstrip().startswith('"""') else text
    return f'"""WRONG VERSION of {w.exercise} ({w.name}): {w.what}."""' + body


def write(w: Wrong, folder) -> Path:
    path = Path(folder) / f"{w.exercise}-{w.name}.py"
    path.write_text(build(w))
    return path


def find(exercise: str, name: str) -> Wrong:
    from grader.catalogue import resolve
    exercise = resolve(exercise).id                     # accepts 01, 1, online_softmax ...
    for w in WRONG:
        if w.exercise == exercise and w.name == name:
            return w
    raise KeyError(f"no wrong version {exercise}/{name}")


WRONG = [
    Wrong('00_naive_attention', 'gqa_wrong_head',
          'the GQA mapping interleaves the groups (h_kv = h % H_kv)',
          edits=(
              ('    int h_kv = h / (H / H_kv);             // GQA: H / H_kv query heads share one kv head\n',
               '    int h_kv = h % H_kv;                   // BUG: interleaved groups instead of consecutive ones\n'),
              ('    int h_kv = h / (H / H_kv);\n',
               '    int h_kv = h % H_kv;                   // BUG: the same wrong mapping\n'),
          ),
          expect=('o: relative error', 'wrong kv head', 'h_kv = h / (H / Hkv)',),
          cases=('primes', 'more_queries_than_keys', 'gqa_4_to_1',)),
    Wrong('00_naive_attention', 'missing_bounds_check',
          'scores_kernel has no bounds test',
          edits=(
              ('    if (i >= n_q || j >= n_k) return;      // the grid is rounded up to whole blocks\n',
               '    // BUG: no `if (i >= n_q || j >= n_k) return;` although the grid is rounded up\n'),
          ),
          expect=('out-of-bounds read', 'scores_kernel', 'bounds test',),
          cases=('tiny', 'tile_plus_1',)),
    Wrong('00_naive_attention', 'python_int_argument',
          'n_q is passed to scores_kernel as a Python int',
          edits=(
              ('    scores(scores_grid, block2d, (q, k, s, rt.int32(H), rt.int32(H_kv), rt.int32(n_q),\n',
               '    scores(scores_grid, block2d, (q, k, s, rt.int32(H), rt.int32(H_kv), n_q,  # BUG: not rt.int32\n'),
          ),
          expect=('Python int', 'int n_q', 'rt.int32(n_q)',),
          cases=('tiny',)),
    Wrong('01_online_softmax', 'merge_without_guard',
          'merge has no guard for two empty states',
          edits=(
              ('    if (m_new == -INFINITY) return;        // both empty: exp(-inf - -inf) would be NaN\n',
               '    // BUG: no `if (m_new == -INFINITY) return;` -- two empty states give l = 0 * NaN = NaN\n'),
          ),
          expect=('lse: ', 'NaN/Inf values where the answer is finite', 'whole rows of y are NaN', 'expf(-inf - -inf)',),
          cases=('one_element', 'fewer_than_a_warp',)),
    Wrong('01_online_softmax', 'nan_on_fully_masked_rows',
          'the second pass forgets rows that are entirely -inf',
          edits=(
              ('    bool masked = (m == -INFINITY);                    // every x was -inf: nothing to normalise\n    float inv_l = 1.0f / l;\n',
               '    float inv_l = 1.0f / l;                            // BUG: l = 0 for a fully masked row\n'),
              ('        y_row[j] = masked ? 0.0f : expf(x_row[j] - m) * inv_l;\n',
               '        y_row[j] = expf(x_row[j] - m) * inv_l;\n'),
              ('        lse[row] = masked ? -INFINITY : m + logf(l);\n',
               '        lse[row] = m + logf(l);\n'),
          ),
          expect=('whole rows of y are NaN', 'expf(-inf - -inf)',),
          cases=('masked_entries', 'fully_masked_rows',)),
    Wrong('01_online_softmax', 'no_max_subtraction',
          'the merge measures every sum against 0 instead of the running max',
          edits=(
              ('    float m_new = fmaxf(m, m2);\n    if (m_new == -INFINITY) return;        // both empty: exp(-inf - -inf) would be NaN\n    l = l * expf(m - m_new) + l2 * expf(m2 - m_new);\n    m = m_new;\n',
               '    // BUG: no max subtraction. Every state is kept relative to 0: l = sum of expf(x).\n    l = l * expf(m) + l2 * expf(m2);\n    m = 0.0f;\n'),
          ),
          expect=('y: ', 'NaN/Inf values where the answer is finite', 'lse: ',),
          cases=('prime_length', 'large_logits',)),
    Wrong('02_flash_forward', 'gqa_modulo',
          'query head h reads kv head h % Hkv',
          edits=(
              ('    const int h_kv = h / (H / H_kv);         // GQA: H / H_kv query heads share one kv head\n',
               '    const int h_kv = h % H_kv;   // BUG         // GQA: H / H_kv query heads share one kv head\n'),
          ),
          expect=('wrong kv head', 'h / (H / Hkv)',),
          cases=('gqa_4_to_1',)),
    Wrong('02_flash_forward', 'lse_in_log2',
          'lse is left in log2 units',
          edits=(
              ('            if (tx == 0) lse[(size_t)(b * H + h) * n_q + i] = (m[r] + log2f(l_row)) * M_LN2_F;\n',
               '            if (tx == 0) lse[(size_t)(b * H + h) * n_q + i] = (m[r] + log2f(l_row));   // BUG: log2 units\n'),
          ),
          expect=('log2 units', 'ln(2)',),
          cases=('tiny', 'primes',)),
    Wrong('02_flash_forward', 'missing_barrier',
          'no __syncthreads() before the next tile overwrites shared memory',
          edits=(
              ('        __syncthreads();                     // everyone is done with k_s, v_s, p_s before the next tile overwrites them\n',
               '        // BUG: no __syncthreads() here: a fast thread overwrites k_s, v_s, p_s while others still read them\n'),
          ),
          expect=('data race', '__syncthreads',),
          cases=('tile_plus_1',)),
    Wrong('02_flash_forward', 'no_bounds_mask',
          'keys past n_k in the last tile are not masked',
          edits=(
              ('        if (kv_start + BLOCK_N > n_k) {      // only the last tile can hold keys past the end\n',
               '        if (false) {      // BUG: the last, partial tile is not masked\n'),
          ),
          expect=('bounds mask', 'past n_k',),
          cases=('tiny', 'primes',)),
    Wrong('02_flash_forward', 'no_final_division',
          'the final 1/l is forgotten',
          edits=(
              ('            const float inv_l = 1.0f / l_row;      // one division per row, not one per key\n',
               '            const float inv_l = 1.0f;   // BUG: should be 1 / l_row      // one division per row, not one per key\n'),
          ),
          expect=('final division by l',),
          cases=('tiny', 'primes',)),
    Wrong('02_flash_forward', 'no_rescale',
          'the accumulator is not rescaled when the running max grows',
          edits=(
              ('            for (int e = 0; e < TD; ++e) acc[r][e] *= alpha;\n',
               '            for (int e = 0; e < TD; ++e) acc[r][e] *= 1.0f;   // BUG: should be alpha\n'),
          ),
          expect=('not rescaled', 'exp(m_old - m_new)',),
          cases=('long', 'many_key_tiles',)),
    Wrong('03_flash_causal', 'diagonal_off_by_one',
          'the diagonal key itself is masked (< instead of <=)',
          edits=(
              ('                    if (j >= n_k || j > i + offset) s[r][n] = -INFINITY;\n',
               '                    if (j >= n_k || j >= i + offset) s[r][n] = -INFINITY;   // BUG: off by one\n'),
          ),
          expect=('diagonal itself',),
          cases=('tiny', 'primes',)),
    Wrong('03_flash_causal', 'empty_rows_nan',
          'rows with no visible key are not guarded',
          edits=(
              ('            const float m_use = m_new == -INFINITY ? 0.0f : m_new;   // exp2(-inf - -inf) would be NaN\n',
               '            const float m_use = m_new;   // BUG: -inf - -inf is NaN\n'),
              ('            const float inv_l = l_row > 0.0f ? 1.0f / l_row : 0.0f;   // l = 0: the row saw no key\n',
               '            const float inv_l = 1.0f / l_row;   // BUG: 1/0\n'),
              ('                lse[(size_t)(b * H + h) * n_q + i] = l_row > 0.0f ? (m[r] + log2f(l_row)) * M_LN2_F : -INFINITY;\n',
               '                lse[(size_t)(b * H + h) * n_q + i] = (m[r] + log2f(l_row)) * M_LN2_F;\n'),
          ),
          expect=('no visible key',),
          cases=('more_queries_than_keys',)),
    Wrong('03_flash_causal', 'loop_stops_early',
          'the key loop is bounded by the first row of the query tile',
          edits=(
              ("    const int q_last = min(q_start + BLOCK_M, n_q) - 1;     // the tile's last row sees the most keys\n",
               '    const int q_last = q_start;   // BUG: the first row sees the fewest keys\n'),
          ),
          expect=('stops too early',),
          cases=('queries_past_keys', 'head_dim_128',)),
    Wrong('03_flash_causal', 'no_diagonal_mask',
          'tiles straddling the diagonal get no per-element mask',
          edits=(
              ('                    if (j >= n_k || j > i + offset) s[r][n] = -INFINITY;\n',
               '                    if (j >= n_k) s[r][n] = -INFINITY;   // BUG: no causal test\n'),
          ),
          expect=('diagonal', 'per-element',),
          cases=('tiny', 'chunked_prefill',)),
    Wrong('03_flash_causal', 'top_left_mask',
          "the causal mask is aligned top-left (PyTorch's is_causal)",
          edits=(
              ('    const int offset = n_k - n_q;            // bottom-right alignment: query i sees keys j <= i + offset\n',
               '    const int offset = 0;   // BUG: top-left alignment            // bottom-right alignment: query i sees keys j <= i + offset\n'),
          ),
          expect=('top-left', 'bottom-right',),
          cases=('tiny', 'chunked_prefill',)),
    Wrong('04_splitkv_decode', 'combine_equal_weights',
          'the combine averages the split outputs without weighing them by exp(lse_s)',
          edits=(
              ('        float w = expf(lse_s[s] - lse_max);            // <= 1: cannot overflow, however large the scores\n',
               '        float w = 1.f;                                 // BUG: every split weighs the same\n'),
          ),
          expect=('several splits', 'combine',),
          cases=('three_splits',)),
    Wrong('04_splitkv_decode', 'combine_without_max',
          "the combine exponentiates each split's lse without subtracting the largest one",
          edits=(
              ('        float w = expf(lse_s[s] - lse_max);            // <= 1: cannot overflow, however large the scores\n',
               '        float w = expf(lse_s[s]);                      // BUG: no max subtracted: inf once lse_s > 88\n'),
              ('    if (lane == 0) lse[row] = lse_max + logf(total);\n',
               '    if (lane == 0) lse[row] = logf(total);\n'),
          ),
          expect=('overflow', 'subtract the max',),
          cases=('lse_near_120',)),
    Wrong('04_splitkv_decode', 'gqa_wrong_kv_head',
          'query head h is served by kv head h % Hkv instead of h / (H / Hkv)',
          edits=(
              ('            float4 x = reinterpret_cast<const float4*>(q + ((size_t)b * n_heads + kv * GROUP + g) * d)[lane];\n',
               '            float4 x = reinterpret_cast<const float4*>(q + ((size_t)b * n_heads + g * n_kv_heads + kv) * d)[lane];   // BUG: h % Hkv mapping\n'),
              ('        size_t row = ((size_t)b * n_heads + kv * GROUP + g) * n_splits + split;\n',
               '        size_t row = ((size_t)b * n_heads + g * n_kv_heads + kv) * n_splits + split;\n'),
          ),
          expect=('gqa mapping', 'kv head',),
          cases=('gqa_4_to_1',)),
    Wrong('04_splitkv_decode', 'nan_for_empty_context',
          'the combine divides 0 by 0 for a sequence with context length 0',
          edits=(
              ('    if (used == 0) {                                   // empty context: nothing to weigh\n        if (4 * lane < d) reinterpret_cast<float4*>(o + row * d)[lane] = make_float4(0.f, 0.f, 0.f, 0.f);\n        if (lane == 0) lse[row] = -INFINITY;\n        return;\n    }\n',
               '    // BUG: no special case for an empty context: total = 0, inv = inf, 0 * inf = NaN.\n'),
          ),
          expect=('empty context', 'context_lens[b] = 0',),
          cases=('contexts_0_1_2_5', 'mixed_lengths',)),
    Wrong('05_paged_decode', 'gqa_wrong_kv_head',
          'query head h is served by kv head h % Hkv instead of h / (H / Hkv)',
          edits=(
              ('            float4 x = reinterpret_cast<const float4*>(q + ((size_t)b * n_heads + kv * GROUP + g) * d)[lane];\n',
               '            float4 x = reinterpret_cast<const float4*>(q + ((size_t)b * n_heads + g * n_kv_heads + kv) * d)[lane];   // BUG: h % Hkv mapping\n'),
              ('        size_t row = ((size_t)b * n_heads + kv * GROUP + g) * n_splits + split;\n',
               '        size_t row = ((size_t)b * n_heads + g * n_kv_heads + kv) * n_splits + split;\n'),
          ),
          expect=('gqa mapping',),
          cases=('page_size_8_gqa_4',)),
    Wrong('05_paged_decode', 'logical_page_as_physical',
          'the kernel reads logical page j / page_size, never the block table',
          edits=(
              ('    int page = block_table[(size_t)b * max_pages + j / page_size];\n',
               '    int page = j / page_size;                      // BUG: the logical page used as the physical one\n'),
          ),
          expect=('logical page index', 'block_table',),
          cases=('shuffled_partial_last_page',)),
    Wrong('05_paged_decode', 'nan_for_empty_context',
          'the combine divides 0 by 0 for a sequence with context length 0',
          edits=(
              ('    if (used == 0) {                                   // empty context: nothing to weigh\n        if (4 * lane < d) reinterpret_cast<float4*>(o + row * d)[lane] = make_float4(0.f, 0.f, 0.f, 0.f);\n        if (lane == 0) lse[row] = -INFINITY;\n        return;\n    }\n',
               '    // BUG: no special case for an empty context: total = 0, inv = inf, 0 * inf = NaN.\n'),
          ),
          expect=('empty context',),
          cases=('contexts_0_1_2_5',)),
    Wrong('05_paged_decode', 'slot_assumes_page_size_16',
          'the slot inside a page is j & 15: right for page_size 16 only',
          edits=(
              ('    int slot = j % page_size;\n',
               '    int slot = j & 15;                             // BUG: assumes page_size = 16\n'),
          ),
          expect=('out-of-bounds read', 'k_pages',),
          cases=('page_size_8_gqa_4',)),
]


if __name__ == "__main__":
    sys.stdout.write(build(find(sys.argv[1], sys.argv[2])))
