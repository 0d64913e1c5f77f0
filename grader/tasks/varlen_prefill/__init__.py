"""Module 07: variable-length prefill, a packed batch of prompts of different lengths (cu_seqlens).

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'Varlen prefill: a packed batch of prompts, cu_seqlens, no padding'
ENTRY = 'varlen_prefill'          # the function exercises/07_varlen_prefill.py defines
GOALS = (
    'Pack a batch token-major and find each sequence through cumulative offsets (cu_seqlens).',
    'Map blocks to (sequence, query tile) and never read across a sequence boundary.',
    'Apply the causal mask bottom-right per sequence, for chunked prefill too.',
)
HINTS = ()
