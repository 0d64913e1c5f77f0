"""Benchmark for 02_flash_forward: the tiled kernel against naive attention on cuBLAS."""
from ...attention.baselines import attention_flops, key_tiles, naive_cublas
from ...spec import BenchCase

_BIG = dict(B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=128)
_SMALL = dict(B=4, H=8, Hkv=2, Nq=1024, Nk=1024, d=64)
BENCH = [
    BenchCase("B2_H16_N4096_d128", _BIG, flops=attention_flops(_BIG),
              baselines={"naive (cuBLAS)": naive_cublas}),
    BenchCase("B4_H8_Hkv2_N1024_d64", _SMALL, flops=attention_flops(_SMALL),
              baselines={"naive (cuBLAS)": naive_cublas}),
]

# What `grader bench 02 --backend cpu` counts on the emulator, and the schedule's key tiles.
_COUNT = dict(B=1, H=4, Hkv=4, Nq=512, Nk=512, d=64)
COUNTER_CASE = BenchCase("counters_B1_H4_N512_d64", _COUNT, flops=attention_flops(_COUNT))


def tiles(p, config, inputs=None):
    return key_tiles(p, config)


# What the work check counts (engine/work.py): a query tile reads each key tile once. Two key tiles, so
# that one tile more than the keys need is half as much work again, not a quarter.
WORK_CASE = BenchCase("work_B1_H2_Hkv1_N128x128_d32", dict(B=1, H=2, Hkv=1, Nq=128, Nk=128, d=32))
