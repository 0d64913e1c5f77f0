"""Checks for 00_naive_attention: attention with GQA, no mask, materialised scores."""
from __future__ import annotations

from .common import (F32_ABS, F32_REL, Case, attention_call, attention_inputs, attention_reference,
                     attention_shapes)

CASES = attention_shapes() + [
    Case("n_256", dict(B=1, H=1, Hkv=1, Nq=256, Nk=256, d=64)),
    # Scores near ±150: expf overflows past 88.7 unless the row max is subtracted first.
    Case("huge_logits", dict(B=1, H=1, Hkv=1, Nq=20, Nk=33, d=32, logit=150.0)),
]
TOLERANCES = {"o": (F32_REL, F32_ABS), "lse": (F32_REL, F32_ABS)}


make_inputs = attention_inputs
call = attention_call


def reference(inputs, p):
    return attention_reference(inputs)


def diagnose(ctx):
    # The same replayed bugs as FlashAttention's, minus the tiling: a forgotten 1/l, lse's units,
    # the GQA head mapping, the scale.
    from .flash_forward import output_causes, scores, setup_causes
    s, v = scores(ctx.inputs)
    return output_causes(ctx, s, v) or setup_causes(ctx)


def _bench():
    from ..bench import BenchCase
    from .flash_forward import attention_flops, naive_cublas
    shape = dict(B=1, H=16, Hkv=16, Nq=2048, Nk=2048, d=64)
    return [BenchCase("B1_H16_N2048_d64", shape, flops=attention_flops(shape),
                      baselines={"CuPy + cuBLAS (same three steps)": naive_cublas})]


BENCH = _bench()
