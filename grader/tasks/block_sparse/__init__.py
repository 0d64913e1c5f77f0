"""Module 08: block-sparse FlashAttention, a block mask decides which tiles run.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'Block-sparse FlashAttention: a block mask, skipped tiles'
ENTRY = 'block_sparse'            # the function exercises/08_block_sparse.py defines
GOALS = (
    'Iterate over the blocks a mask keeps and skip the others without changing the online softmax.',
    'Handle rows whose blocks are all masked: output 0 and lse -inf.',
    'Know where the speed-up comes from and where it stops (density, load imbalance).',
)
HINTS = ()
