"""Benchmark for 14_backward_hopper: the Hopper backward against module 11's (mma.sync) and the backward
of torch's FlashAttention-2 and cuDNN SDPA backends, on the same inputs (o and lse from the forward,
the torch forward run once, untimed; each call one backward). TFLOP/s with the backward's count, 2.5 ×
the forward's FLOPs (halved under causal)."""
from ...attention.baselines import backward_flops, torch_sdpa_backward
from ...spec import BenchCase


def inputs(rt, params, solution) -> dict:
    """q, k, v and dO from a standard normal in the case's type (bfloat16 as uint16 bits), made on the
    device; o and lse from module 10's forward on them (a float64 forward on the host would take
    minutes at N = 16384)."""
    xp = rt.xp
    shape = (params["B"], params["H"], params["Nq"], params["d"])
    bf16 = params["dtype"] == "bfloat16"

    def normal():
        x = xp.random.standard_normal(shape).astype(xp.float32)
        return (x.view(xp.uint32) >> 16).astype(xp.uint16) if bf16 else x.astype(xp.float16)
    x = {n: normal() for n in ("q", "k", "v", "do")}
    x.update(scale=params["d"] ** -0.5, causal=params["causal"])
    x["o"], x["lse"] = solution("10_flash_hopper").flash_hopper(rt, x["q"], x["k"], x["v"], x["scale"],
                                                                causal=x["causal"], dtype=params["dtype"])
    return x


def module_11(b):
    """Module 11's solution (mma.sync) on the same inputs."""
    fn = b.solution("11_backward_tensor_cores").flash_backward_tc
    x = b.inputs
    dtype = b.params["dtype"] if b.params["dtype"] == "bfloat16" else None
    dq, dk, dv = fn(b.rt, x["q"], x["k"], x["v"], x["o"], x["lse"], x["do"], x["scale"], causal=x["causal"],
                    dtype=dtype)
    return {"dq": dq, "dk": dk, "dv": dv}


def _case(B, N, d, dtype, causal):
    p = dict(B=B, H=16, Hkv=16, Nq=N, Nk=N, d=d, dtype=dtype, causal=causal)
    return BenchCase(f"{dtype}_{'causal' if causal else 'full'}_B{B}_H16_N{N}_d{d}", p, flops=backward_flops(p),
                     baselines={"11 solution (mma.sync)": module_11,
                                "torch FlashAttention-2 backward": torch_sdpa_backward("FLASH_ATTENTION"),
                                "torch cuDNN backward": torch_sdpa_backward("CUDNN_ATTENTION")})


BENCH = [_case(B, N, d, dtype, causal) for B, N in ((2, 4096), (1, 16384)) for d in (128, 64)
         for dtype in ("float16", "bfloat16") for causal in (False, True)]

# What the work check counts (engine/work.py): under a causal mask, each key tile's loop over query
# tiles starts at the diagonal (TMA's reads through the tensor maps are traced): 10 query tiles of 128
# rows read over the 4 key tiles here, where a loop over every query tile reads 16.
WORK_CASE = BenchCase("work_causal_B1_H1_N512_d64", dict(B=1, H=1, Hkv=1, Nq=512, Nk=512, d=64, dtype="float16",
                                                        causal=True))
