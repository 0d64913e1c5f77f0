"""Benchmark for 10_flash_hopper: d 128 and 64, float16 and bfloat16, full and causal, at B=2 H=16
N=4096, B=1 H=16 N=16384 and B=16 H=16 N=1024 (many short sequences: the persistent grid's case),
against module 06 (mma.sync) and, where PyTorch is importable, torch's FlashAttention-2 and cuDNN
backends, on the same inputs in the same run."""
from ...attention.baselines import attention_flops, torch_sdpa
from ...attention.lowp_prefill import call
from ...spec import BenchCase


def module_06(b):
    """The course's own module 06 on the same inputs: FlashAttention-2's design on mma.sync."""
    return call(b.solution("06_flash_tensor_cores").flash_tc, b.rt, b.inputs, b.params)


def _case(name, p):
    return BenchCase(name, p, flops=attention_flops(p, causal=p["causal"]),
                     baselines={"module 06 (mma.sync)": module_06,
                                "torch FlashAttention-2": torch_sdpa("FLASH_ATTENTION"),
                                "torch cuDNN": torch_sdpa("CUDNN_ATTENTION")})


BENCH = [
    _case(f"{dtype}_{'causal' if causal else 'full'}_B{B}_H16_N{n}_d{d}",
          dict(B=B, H=16, Hkv=16, Nq=n, Nk=n, d=d, dtype=dtype, causal=causal))
    for B, n in ((2, 4096), (1, 16384), (16, 1024)) for d in (128, 64)
    for dtype in ("float16", "bfloat16") for causal in (False, True)
]

# What the work check counts (engine/work.py): under causality a query tile reads the key tiles up to
# its diagonal only (TMA's reads through k_map and v_map are traced). Three query tiles of 192 rows over
# five key tiles of 128: 10 key tiles read, where all of them would be 15.
WORK_CASE = BenchCase("work_causal_B1_H1_N576_d64", dict(B=1, H=1, Hkv=1, Nq=576, Nk=576, d=64, dtype="float16",
                                                         causal=True))
