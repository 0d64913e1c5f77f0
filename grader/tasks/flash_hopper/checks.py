"""Checks for 10_flash_hopper: module 06's cases, tolerance rule and diagnoses (the low-precision
prefill kit, grader/attention/lowp_prefill.py) on the Hopper kernel, whose inputs and outputs are
06's. On the CPU the emulator runs its wgmma, TMA and mbarriers (csrc/hopper.inc)."""
from ...attention.lowp_prefill import *  # noqa: F401,F403
from ...spec import Case

# More key tiles than stages (3 at d = 64, 2 at d = 128, 128 keys a tile): every stage is refilled,
# so the empty barriers' parities, the releases and the refills all run.
CASES = CASES + [  # noqa: F405 (the kit's)
    Case("stage_ring_d64", dict(B=1, H=2, Hkv=1, Nq=70, Nk=520, d=64, dtype="float16", causal=False)),
    Case("stage_ring_d128", dict(B=1, H=1, Hkv=1, Nq=130, Nk=600, d=128, dtype="float16", causal=False)),
    Case("stage_ring_causal_d128", dict(B=1, H=1, Hkv=1, Nq=300, Nk=420, d=128, dtype="bfloat16",
                                        causal=True)),
]
# More work tiles (query tiles × heads) than the emulator's 132 SMs: the persistent grid has 132 blocks,
# and the blocks take the other tiles one after another (on the emulator, which runs the blocks one at a
# time, block 0 takes all of them). The K/V ring, the work slots and the turns go on across work tiles.
CASES += [
    Case("persistent_many_tiles", dict(B=1, H=2, Hkv=1, Nq=13400, Nk=200, d=64, dtype="float16", causal=False)),
    # One key tile per work tile: the producer runs through work tiles faster than the consumers, so
    # the two work slots are reused while a consumer may still be reading one.
    Case("persistent_short_tiles", dict(B=1, H=4, Hkv=1, Nq=6720, Nk=100, d=64, dtype="float16", causal=False)),
]
