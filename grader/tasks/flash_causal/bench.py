"""Benchmark for 03_flash_causal: causal should cost about half of 02's unmasked kernel."""
from ...attention.baselines import attention_flops, key_tiles, naive_cublas_causal
from ...spec import BenchCase, BenchContext


def no_mask_02(b: BenchContext) -> dict:
    """The 02 solution (no mask) on the same inputs."""
    fn = b.solution("02_flash_forward").flash_forward
    o, lse = fn(b.rt, b.inputs["q"], b.inputs["k"], b.inputs["v"], b.inputs["scale"])
    return {"o": o, "lse": lse}


def _case(name, p):
    return BenchCase(name, p, flops=attention_flops(p, causal=True),
                     baselines={"02 solution (no mask)": no_mask_02, "naive causal (cuBLAS)": naive_cublas_causal})


BENCH = [
    _case("causal_B2_H16_N4096_d128", dict(B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=128)),
    _case("causal_B4_H8_Hkv2_N1024_d64", dict(B=4, H=8, Hkv=2, Nq=1024, Nk=1024, d=64)),
]

# What `grader bench 03 --backend cpu` counts on the emulator, and the schedule's key tiles.
_COUNT = dict(B=1, H=4, Hkv=4, Nq=512, Nk=512, d=64)
COUNTER_CASE = BenchCase("counters_causal_B1_H4_N512_d64", _COUNT, flops=attention_flops(_COUNT, causal=True))


def tiles(p, config, inputs=None):
    return key_tiles(p, config, causal=True)


# What the work check counts (engine/work.py): a causal mask leaves half the key tiles empty, which a
# kernel that skips them never reads. Four query tiles: one key tile too many per query tile reads
# 1.3 times the finished version's k and v (at six, 1.24: under READ_FACTOR).
WORK_CASE = BenchCase("work_causal_B1_H1_N256_d32", dict(B=1, H=1, Hkv=1, Nq=256, Nk=256, d=32))
