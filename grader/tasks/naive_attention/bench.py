"""Benchmark for 00_naive_attention: the student's three kernels against the same three steps on cuBLAS."""
from ...attention.baselines import attention_flops, naive_cublas
from ...spec import BenchCase

_SHAPE = dict(B=1, H=16, Hkv=16, Nq=2048, Nk=2048, d=64)
BENCH = [
    BenchCase("B1_H16_N2048_d64", _SHAPE, flops=attention_flops(_SHAPE),
              baselines={"CuPy + cuBLAS (same three steps)": naive_cublas}),
]

# What the work check counts (engine/work.py): the blocks each kernel launches and what they read,
# against the finished version's, on the emulator.
WORK_CASE = BenchCase("work_B1_H2_N128_d32", dict(B=1, H=2, Hkv=2, Nq=128, Nk=128, d=32))
