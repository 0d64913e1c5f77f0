"""Module 14 end to end: one training step, module 10's forward (o and lse from the Hopper kernel),
then module 14's backward from them, checked as tests/test_backward_tc.py checks 06 then 11: against
the float64 gradients always, against PyTorch's autograd where PyTorch is installed; on the CPU
emulator, and on an sm_90 GPU where one is visible."""
from __future__ import annotations

import numpy as np
import pytest

from grader.attention import backward_lowp
from grader.course import load
from test_backward_tc import check_training_step


def runtime(backend):
    from grader.runtimes import get_runtime
    rt = get_runtime(backend)
    if backend == "gpu" and rt.compute_capability != "90":
        pytest.skip(f"modules 10 and 14 need an sm_90 GPU, this is sm_{rt.compute_capability}")
    return rt


@pytest.mark.parametrize("backend", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype, d, causal, shape", [
    # GQA 2:1, causal with Nq < Nk (bottom-right): two key blocks of 128, the second one partial.
    ("float16", 64, True, dict(B=1, H=2, Hkv=1, Nq=40, Nk=150)),
    # d = 128, 64 queries a step: three query tiles through the two stages, one partial key block.
    ("bfloat16", 128, False, dict(B=1, H=1, Hkv=1, Nq=150, Nk=70)),
])
def test_one_training_step_forward_of_10_then_backward_of_14(backend, dtype, d, causal, shape):
    """q, k, v, dO in 16 bits; module 10 computes o and lse, module 14 the gradients from them."""
    p = dict(shape, d=d, dtype=dtype, causal=causal)
    x = backward_lowp.backward_lowp_inputs(p, np.random.default_rng(14))
    check_training_step(runtime(backend), x, dtype, load("10_flash_hopper").flash_hopper,
                        load("14_backward_hopper").flash_backward_hopper)
