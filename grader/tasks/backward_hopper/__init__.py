"""Module 14: the training backward on Hopper: wgmma, TMA, a bulk copy and a bulk reduction.

The catalogue data of the module; its folder holds the rest (see grader/tasks/__init__.py).
"""

TITLE = 'The backward pass on Hopper: wgmma, TMA, a producer and two consumers'
ENTRY = 'flash_backward_hopper'   # the function exercises/14_backward_hopper.py defines
GOALS = (
    "Run module 11's five products on wgmma: Sᵀ and dPᵀ from shared memory, dV and dK with Pᵀ and dSᵀ from registers, dQ with both operands read transposed.",
    "Feed a consumer's steps from a producer: Q and dO by TMA, lse · log2 e and D as padded rows by one bulk copy, stages handed back and forth on mbarriers.",
    "Hand dSᵀ between warpgroups through shared memory: the swizzled stores, the proxy fence and the named barrier the tensor cores need.",
    "Take dQ's accumulation off the consumers: its parts through shared memory to a bulk reduction into float32, and a cheap conversion pass.",
)
HINTS = ()
