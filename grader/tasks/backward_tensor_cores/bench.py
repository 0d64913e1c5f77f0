"""Benchmark for 11_backward_tensor_cores: the backward pass in float16 and bfloat16 against module 09's
float32 backward (on the same values, widened) and, where PyTorch is importable, the backward of its
FlashAttention-2 and cuDNN SDPA backends (the forward run once, untimed; each call one backward).
TFLOP/s with the backward's count, 2.5 × the forward's FLOPs (halved under causal)."""
from ...attention.baselines import backward_flops, torch_sdpa_backward
from ...spec import BenchCase

_widened: dict = {}


def float32_09(b):
    """Module 09's solution on the same inputs in float32 (the widening, done once, is not timed)."""
    xp = b.rt.xp
    key = id(b.inputs["q"])
    if key not in _widened:
        _widened.clear()

        def wide(x):
            if b.params["dtype"] == "bfloat16":       # bfloat16 bits: the upper half of a float32
                return (x.view(xp.uint16).astype(xp.uint32) << 16).view(xp.float32)
            return x.astype(xp.float32)
        _widened[key] = {n: wide(b.inputs[n]) for n in ("q", "k", "v", "o", "do")}
    x = dict(b.inputs, **_widened[key])
    fn = b.solution("09_flash_backward").flash_backward
    dq, dk, dv = fn(b.rt, x["q"], x["k"], x["v"], x["o"], x["lse"], x["do"], x["scale"], causal=x["causal"])
    return {"dq": dq, "dk": dk, "dv": dv}


def _case(d, dtype, causal):
    p = dict(B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=d, dtype=dtype, causal=causal)
    return BenchCase(f"{dtype}_{'causal' if causal else 'full'}_B2_H16_N4096_d{d}", p, flops=backward_flops(p),
                     baselines={"09 solution (float32)": float32_09,
                                "torch FlashAttention-2 backward": torch_sdpa_backward("FLASH_ATTENTION"),
                                "torch cuDNN backward": torch_sdpa_backward("CUDNN_ATTENTION")})


BENCH = [_case(d, dtype, causal) for d in (128, 64) for dtype in ("float16", "bfloat16") for causal in (False, True)]


# What the work check counts (engine/work.py): under a causal mask, each key tile's loop over query
# tiles starts at the diagonal; a loop over every query tile reads 1.6 times the q and dO here (at
# N = 256 it would be 1.33 times, inside the check's allowance).
WORK_CASE = BenchCase("work_causal_B1_H1_N512_d64", dict(B=1, H=1, Hkv=1, Nq=512, Nk=512, d=64, dtype="float16",
                                                        causal=True))
