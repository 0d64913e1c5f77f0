"""Module 02: the tiled FlashAttention forward pass, online softmax over K/V tiles, GQA.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'FlashAttention forward: tiles, online softmax, one pass'
ENTRY = 'flash_forward'            # the function exercises/02_flash_forward.py defines
GOALS = (
    'Stream K/V tiles through shared memory; never materialise the N×N scores.',
    'Keep the running max and sum per query row and rescale the output as the max grows.',
    'Write o normalised once at the end, and lse for the backward pass and split-KV.',
)
HINTS = (
    'One block per (query tile, head, batch): grid = (ceil(Nq / BLOCK_M), H, B), block = (NTHREADS,).',
    'Keys past Nk in the last tile must get score -INFINITY, not 0 (and their V rows zeros, not garbage).',
    'When the max grows from m to m_new, multiply the accumulator and l by exp2(m - m_new) before adding the tile.',
    '__syncthreads() after loading a tile, after writing P, and before the next tile overwrites shared memory.',
    "A row's keys are spread over 8 neighbouring lanes: combine the max (and at the end l) with __shfl_xor_sync, strides 4, 2, 1, outside any if.",
    'Divide by l once at the very end; lse = (m + log2f(l)) * M_LN2_F when the scores are in log2 units.',
    'Past 48 KB of shared memory: kernel.max_dynamic_shared_size_bytes = smem before the launch.',
)
