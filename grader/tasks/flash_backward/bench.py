"""Benchmark for 09_flash_backward: the backward pass against the naive one on cuBLAS (the N × N
matrices in memory) and torch's memory-efficient backward in float32. `grader bench` reports each
one's time, TFLOP/s (2.5 × the forward's FLOPs) and peak memory."""
from ...attention.baselines import backward_flops, naive_backward, torch_efficient_backward
from ...spec import BenchCase


def _case(name, **p):
    return BenchCase(name, p, flops=backward_flops(p),
                     baselines={"naive (cuBLAS, N×N in memory)": naive_backward,
                                "torch efficient backward": torch_efficient_backward})


BENCH = [
    _case("B2_H16_N4096_d128", B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=128),
    _case("B2_H16_N4096_d128_causal", B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=128, causal=True),
]


# What the work check counts (engine/work.py): under a causal mask, each key tile's loop over query
# tiles starts at the diagonal; a loop over every query tile reads 1.6 times the q and dO here.
WORK_CASE = BenchCase("work_causal_B1_H1_N256_d32", dict(B=1, H=1, Hkv=1, Nq=256, Nk=256, d=32, causal=True))
