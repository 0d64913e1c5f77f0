"""Module 05: split-KV decode over a paged cache found through a block table.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'Paged decode: the same attention over a block table of scattered pages'
ENTRY = 'paged_decode'            # the function exercises/05_paged_decode.py defines
GOALS = (
    'Store the cache in fixed-size pages and find each key through a block table, as vLLM does.',
    "Keep module 04's split-KV kernels: only the address of a key row changes.",
    'Handle shuffled pages, a partial last page, shared prefix pages and any page size.',
)
HINTS = (
    "The paged cache is [num_pages, page_size, Hkv, d]: physical position pos = page · page_size + slot, and kv head kv's row starts at (pos · Hkv + kv) · d.",
    'j / page_size is the logical page; the physical page is block_table[b · max_pages + j / page_size]. They agree only when the pages happen to be in order.',
    "Never read block_table past the context: entries after a sequence's last page are -1.",
    "Copy your 04 kernels; in the loop, lane u computes physical_pos of key j0 + stride + u for the next step, and each key's position comes from __shfl_sync(0xffffffff, pos_here, u).",
)
