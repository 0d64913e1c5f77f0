"""Benchmark for 06_flash_tensor_cores: float16 and bfloat16 against naive attention on cuBLAS and,
where PyTorch is importable, torch's FlashAttention-2 and cuDNN backends (same inputs, same run)."""
from ...attention.baselines import attention_flops, lowp_naive_cublas, torch_sdpa
from ...spec import BenchCase


def _case(name, p):
    return BenchCase(name, p, flops=attention_flops(p, causal=p["causal"]),
                     baselines={"naive (cuBLAS, same dtype)": lowp_naive_cublas,
                                "torch FlashAttention-2": torch_sdpa("FLASH_ATTENTION"),
                                "torch cuDNN": torch_sdpa("CUDNN_ATTENTION")})


BENCH = [
    _case(f"{dtype}_{'causal' if causal else 'full'}_B2_H16_N4096_d128",
          dict(B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=128, dtype=dtype, causal=causal))
    for dtype in ("float16", "bfloat16") for causal in (False, True)
]


# What the work check counts (engine/work.py): a causal mask leaves the key tiles above the diagonal empty.
WORK_CASE = BenchCase("work_causal_B1_H2_N256_d64", dict(B=1, H=2, Hkv=1, Nq=256, Nk=256, d=64, dtype="float16", causal=True))
