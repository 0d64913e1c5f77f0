"""Wrong versions of 00_naive_attention (grader/wrong.py says how they are kept and checked)."""
from ...wrong import Wrong

EX = "00_naive_attention"
WRONG = [
    Wrong(EX, 'gqa_wrong_head',
          'the GQA mapping interleaves the groups (h_kv = h % H_kv)',
          edits=(
              ('    int h_kv = h / (H / H_kv);             // GQA: H / H_kv query heads share one kv head\n',
               '    int h_kv = h % H_kv;                   // BUG: interleaved groups instead of consecutive ones\n'),
              ('    int h_kv = h / (H / H_kv);\n',
               '    int h_kv = h % H_kv;                   // BUG: the same wrong mapping\n'),
          ),
          expect=('o: relative error', 'wrong kv head', 'h_kv = h / (H / Hkv)',),
          cases=('primes', 'more_queries_than_keys', 'gqa_4_to_1',),
          numeric=True,
          cause='gqa:h%Hkv'),
    Wrong(EX, 'missing_bounds_check',
          'scores_kernel has no bounds test',
          edits=(
              ('    if (i >= n_q || j >= n_k) return;      // the grid is rounded up to whole blocks\n',
               '    // BUG: no `if (i >= n_q || j >= n_k) return;` although the grid is rounded up\n'),
          ),
          expect=('out-of-bounds read', 'scores_kernel', 'bounds test',),
          cases=('tiny', 'tile_plus_1',),
          backends=("cpu",)),
    Wrong(EX, 'python_int_argument',
          'n_q is passed to scores_kernel as a Python int',
          edits=(
              ('    scores(scores_grid, block2d, (q, k, s, rt.int32(H), rt.int32(H_kv), rt.int32(n_q),\n',
               '    scores(scores_grid, block2d, (q, k, s, rt.int32(H), rt.int32(H_kv), n_q,  # BUG: not rt.int32\n'),
          ),
          expect=('Python int', 'int n_q', 'rt.int32(n_q)',),
          cases=('tiny',)),
]
