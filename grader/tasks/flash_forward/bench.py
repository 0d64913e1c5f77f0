"""Benchmark for 02_flash_forward: the tiled kernel against naive attention on cuBLAS."""
from ...attention.baselines import attention_flops, naive_cublas
from ...spec import BenchCase

_BIG = dict(B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=128)
_SMALL = dict(B=4, H=8, Hkv=2, Nq=1024, Nk=1024, d=64)
BENCH = [
    BenchCase("B2_H16_N4096_d128", _BIG, flops=attention_flops(_BIG),
              baselines={"naive (cuBLAS)": naive_cublas}),
    BenchCase("B4_H8_Hkv2_N1024_d64", _SMALL, flops=attention_flops(_SMALL),
              baselines={"naive (cuBLAS)": naive_cublas}),
]
