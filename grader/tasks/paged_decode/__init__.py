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
    "TODO(1): the paged cache is [num_pages, page_size, Hkv, d]: physical position pos = page · page_size + slot, and kv head kv's row starts at (pos · Hkv + kv) · d (kv_offset, given).",
    'TODO(1): j / page_size is the logical page; the physical one is block_table[b * max_pages + j / page_size], and slot = j % page_size. The two pages agree only when the pages happen to be in order.',
    "TODO(2): copy your 04 key loop and take each key's row from kv_offset(pos, kv, H_kv, d). Never look up a key at or past end: entries after a sequence's last page are -1.",
    "TODO(2): one step ahead: lane u = lane % KEYS_PER_STEP computes pos_next = physical_pos(...) of key j0 + stride + u (stride = WARPS * KEYS_PER_STEP) while this step's loads are in flight; at the top of a step, key j0 + u takes its position from __shfl_sync(0xffffffff, pos_here, u).",
    'TODO(3), TODO(4), TODO(5): your 04 TODO(2), TODO(3) and TODO(4), unchanged; the launch code already passes max_len = max_pages * page_size.',
)
