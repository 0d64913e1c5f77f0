"""The course, in order. Every tool reads this list; nothing else hard-codes the exercises.

Each exercise id `NN_name` names modules/NN_name.md, exercises/NN_name.py, solutions/NN_name.py,
notebooks/NN_name.ipynb and the checks in grader/tasks/name.py. `entry` is the Python function
the exercise file defines; `todos` are the numbered places the student fills in, in order.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    entry: str
    goals: tuple[str, ...]
    todos: tuple[str, ...]
    hints: tuple[str, ...]

    @property
    def number(self) -> int:
        return int(self.id[:2])

    @property
    def name(self) -> str:
        return self.id[3:]


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        id="00_naive_attention",
        title="Naive attention: scores, softmax, output",
        entry="naive_attention",
        goals=(
            "Write attention as three kernels: S = scale·QKᵀ, P = softmax(S) row by row, O = PV.",
            "Index [B, H, N, d] tensors and map query heads to kv heads (GQA).",
            "See why the N×N score matrix makes memory grow as N².",
        ),
        todos=(
            "scores kernel: one thread per (query i, key j) computes scale · q_i · k_j",
            "softmax kernel: one thread per row subtracts the row max, exponentiates, normalises, writes lse",
            "output kernel: one thread per (query i, feature c) computes sum_j P[i, j] · v[j, c]",
            "launch code: grids that cover every element",
        ),
        hints=(
            "Flatten the indices: q[b, h, i, c] lives at ((b*H + h)*Nq + i)*d + c. k and v use Hkv and Nk.",
            "The kv head of query head h is h / (H / Hkv) (integer division): H/Hkv query heads share one.",
            "Subtract the row max before expf: expf(50) is fine but expf(100) overflows to inf, and inf/inf is NaN.",
            "lse = m + logf(l), where m is the row max and l = sum_j expf(s_j - m).",
            "A thread whose (i, j) is past the end must return before reading: the grid is rounded up.",
            "TODO(4): one thread per element, so scores_grid = (cdiv(n_k, 16), cdiv(n_q, 16), B * H) for "
            "16×16 blocks; softmax_grid = (cdiv(B * H * n_q, 128),) for 128 threads per block.",
        ),
    ),
    Exercise(
        id="01_online_softmax",
        title="Online softmax: one pass, warp reductions, merging states",
        entry="online_softmax",
        goals=(
            "Keep a running max m and sum l in one pass, rescaling l when the max grows.",
            "Merge two partial (m, l) states, and reduce a warp's states with shuffles.",
            "Write the softmax and its log-sum-exp: the ingredients of FlashAttention and split-KV.",
        ),
        todos=(
            "merge: combine two (m, l) states without NaN when both are empty",
            "per-lane pass: each lane streams its strided elements into (m, l), one merge per element",
            "warp reduction: combine the 32 lanes' states with __shfl_xor_sync",
            "second pass: write y = exp(x - m) / l and lse = m + log(l)",
        ),
        hints=(
            "Merging (m2, l2) into (m, l): m_new = max(m, m2); l = l·exp(m - m_new) + l2·exp(m2 - m_new).",
            "Start from the empty state m = -INFINITY, l = 0. exp(-inf - -inf) is NaN: return early when m_new is -inf.",
            "A single element x is the state (x, 1): the per-lane pass is one merge per element.",
            "for (int offset = 16; offset > 0; offset /= 2) merge your state with __shfl_xor_sync(0xffffffff, m, offset) and the same for l.",
            "After the xor butterfly every lane holds the row's (m, l): no broadcast needed.",
            "TODO(4): a row whose entries are all -inf ends with m = -INFINITY; write y = 0 and lse = "
            "-INFINITY for it instead of computing exp(-inf - -inf).",
        ),
    ),
    Exercise(
        id="02_flash_forward",
        title="FlashAttention forward: tiles, online softmax, one pass",
        entry="flash_forward",
        goals=(
            "Stream K/V tiles through shared memory; never materialise the N×N scores.",
            "Keep the running max and sum per query row and rescale the output as the max grows.",
            "Write o normalised once at the end, and lse for the backward pass and split-KV.",
        ),
        todos=(
            "load this block's query tile into shared memory (transposed, zero past Nq)",
            "load a K/V tile into shared memory (zero past Nk), then a barrier",
            "scores for the tile: a register micro-tile of S, times scale·log2(e), -INFINITY past Nk",
            "online softmax update: new row max, rescale l and acc by exp2(m - m_new), P through shared memory, acc += P V",
            "add up l across the row's threads, write o = acc / l and lse = (m + log2 l) · ln 2",
            "launch code: grid, block and shared memory (opting in past 48 KB)",
        ),
        hints=(
            "One block per (query tile, head, batch): grid = (ceil(Nq / BLOCK_M), H, B), block = (NTHREADS,).",
            "Keys past Nk in the last tile must get score -INFINITY, not 0 (and their V rows zeros, not garbage).",
            "When the max grows from m to m_new, multiply the accumulator and l by exp2(m - m_new) before adding the tile.",
            "__syncthreads() after loading a tile, after writing P, and before the next tile overwrites shared memory.",
            "A row's keys are spread over 8 neighbouring lanes: combine the max (and at the end l) with __shfl_xor_sync, strides 4, 2, 1, outside any if.",
            "Divide by l once at the very end; lse = (m + log2f(l)) * M_LN2_F when the scores are in log2 units.",
            "Past 48 KB of shared memory: kernel.max_dynamic_shared_size_bytes = smem before the launch.",
        ),
    ),
    Exercise(
        id="03_flash_causal",
        title="Causal FlashAttention: masks aligned bottom-right, skipped tiles",
        entry="flash_causal",
        goals=(
            "Mask key j for query i unless j <= i + (Nk - Nq).",
            "Classify tiles as fully visible, diagonal or skipped, so causal costs about half.",
            "Handle rows that see no key at all: output 0 and lse -inf.",
        ),
        todos=(
            "kv_end: one past the last key any row of this query tile can see (skips the tiles above the diagonal)",
            "the diagonal test and the per-element mask j > i + (Nk - Nq) on diagonal tiles",
            "rows with no visible key: exponentiate against 0 while m is -inf, write o = 0 and lse = -INFINITY",
        ),
        hints=(
            "Query row i sees keys 0 .. i + (Nk - Nq); the last row of a tile bounds the keys the whole tile needs.",
            "Only tiles that straddle the diagonal need the per-element test; tiles fully below it need none.",
            "A tile is fully visible when its last key, kv_start + BLOCK_N - 1, is <= q_start + (Nk - Nq).",
            "With Nq > Nk the first Nq - Nk rows see nothing: keep l = 0 and write 0 and -INFINITY.",
            "exp2f(-INFINITY - -INFINITY) is NaN: while m_new is -INFINITY, use 0 in its place.",
            "TODO(3) ends the kernel: the stub has no epilogue, so bring back your 02 TODO(5) (sum l "
            "across the row's threads, write o = acc / l and lse) with l = 0 rows writing 0 and -INFINITY.",
        ),
    ),
    Exercise(
        id="04_splitkv_decode",
        title="Split-KV decode: one token against a long cache, at memory speed",
        entry="splitkv_decode",
        goals=(
            "See why one block per (sequence, head) leaves most of the GPU idle at batch 1.",
            "Split the cache across blocks, write partial outputs with their lse, combine them.",
            "Read each kv head once for all the query heads that share it.",
        ),
        todos=(
            "partial kernel: each warp streams its keys of the split (float4 rows of K and V), scores by warp_sum, online softmax for every query head of the group",
            "partial kernel: merge the warps' states through shared memory and write the split's normalised output and lse to the workspace",
            "combine kernel: merge the splits with the log-sum-exp rescaling; an empty context gives 0 and -inf",
            "launch code: choose the number of splits from the batch, Hkv, the cache length and the SM count",
        ),
        hints=(
            "Block (split, kv, b) serves query heads kv·G .. kv·G+G-1 with G = H / Hkv: load each K and V row once and use it for all G.",
            "Lane t owns features 4t..4t+3: the score is warp_sum(dot4(q, k)), and after the xor butterfly every lane holds it.",
            "A warp's keys may be fewer than its stride, or none: a warp that saw no key has l = 0; skip it when merging the warps.",
            "Subtract the largest split lse before exponentiating in the combine: exp(lse_s) overflows float32 once lse_s > 88.",
            "The combine reads only the splits that hold keys: used = ceil(context_lens[b] / chunk). used = 0 writes o = 0 and lse = -INFINITY.",
            "Aim for a few blocks per SM: splits × Hkv × B ≈ 4 × rt.multiprocessor_count, but no split shorter than a few hundred keys.",
        ),
    ),
    Exercise(
        id="05_paged_decode",
        title="Paged decode: the same attention over a block table of scattered pages",
        entry="paged_decode",
        goals=(
            "Store the cache in fixed-size pages and find each key through a block table, as vLLM does.",
            "Keep module 04's split-KV kernels: only the address of a key row changes.",
            "Handle shuffled pages, a partial last page, shared prefix pages and any page size.",
        ),
        todos=(
            "page lookup: logical position j -> physical position block_table[b][j / page_size] · page_size + j % page_size",
            "partial kernel, as in 04, with the page lookup one step ahead: lane u looks up key u of the next step, __shfl_sync shares it",
            "partial kernel, as in 04: merge the warps and write the split's output and lse",
            "combine kernel, as in 04",
            "launch code: the number of splits, with max_len = max_pages · page_size",
        ),
        hints=(
            "The paged cache is [num_pages, page_size, Hkv, d]: physical position pos = page · page_size + slot, and kv head kv's row starts at (pos · Hkv + kv) · d.",
            "j / page_size is the logical page; the physical page is block_table[b · max_pages + j / page_size]. They agree only when the pages happen to be in order.",
            "Never read block_table past the context: entries after a sequence's last page are -1.",
            "Copy your 04 kernels; in the loop, lane u computes physical_pos of key j0 + stride + u for the next step, and each key's position comes from __shfl_sync(0xffffffff, pos_here, u).",
        ),
    ),
)

BY_ID = {ex.id: ex for ex in EXERCISES}


def resolve(name: str) -> Exercise:
    """Accept `02_flash_forward`, `02`, `2` or `flash_forward`."""
    key = str(name).strip()
    if key in BY_ID:
        return BY_ID[key]
    for ex in EXERCISES:
        if key.isdigit() and int(key) == ex.number:
            return ex
        if key == ex.name or key.replace("-", "_") == ex.name:
            return ex
    known = ", ".join(ex.id for ex in EXERCISES)
    raise KeyError(f"unknown exercise {name!r}. The exercises are: {known}.")
