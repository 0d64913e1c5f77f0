"""Module 14's speed ladder: the Hopper backward after each idea of the lesson (`grader ladder 14`).

Every step is a complete, correct kernel with the solution's contract (float16 and bfloat16, d = 64
and 128, any Nq and Nk, GQA, causal or not):

    1. 11's design      module 11's solution: mma.sync fragments, ldmatrix, cp.async, one warp per 16
                        keys, dQ added with float32 atomics.
    2. wgmma, TMA       the solution's kernel with one stage of Q, dO, lse and D, and each consumer
                        adding its dQ part with float32 atomics itself (two floats per reduction): the
                        five products on wgmma, the copies by a producer warpgroup.
    3. +stages          two stages: the producer brings the next query tile while the consumers
                        work on this one.
    4. +bulk dQ         the solution: the consumers write dQ to shared memory and the producer's
                        second warp adds it with one bulk reduction per part, while they go on.

Steps 2 and 3 are the solution's own text with two edits (spliced from solutions/14_backward_hopper.py,
not copied): the consumers' dQ write becomes atomics into the same place of dq_acc, and the adding
thread has nothing to do.

Timing (GPU): B=2, H=16, N=4096, float16, non-causal, d = 128 and 64; the median of three timings of 20
calls back to back, next to torch's FlashAttention-2 and cuDNN backward.
"""
from __future__ import annotations

from ...attention.baselines import backward_flops, torch_sdpa_backward
from ...attention.ladders import replace, with_kernel
from ...spec import LadderStep, LadderTiming
from .bench import inputs as bench_inputs

EX = "14_backward_hopper"
WHERE = "solutions/14_backward_hopper.py"

# The consumers' dQ, from the solution's shared-memory handoff to atomics of their own.
_ATOMICS = (
    replace("""        mbar_wait(dq_empty(cw), (it & 1) ^ 1);
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = warp * 16 + g + 8 * r;            // of the part's 64 queries
            #pragma unroll
            for (int j = 0; j < DQ_TILES; ++j)               // features 8j + 2t, + 1: chunk j, swizzled
                *reinterpret_cast<float2*>(dq_s + cw * PART + row * 64 + ((j ^ (row % 8)) * 8) + 2 * t) =
                    make_float2(dq[j][2 * r], dq[j][2 * r + 1]);
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the bulk copy reads through the async proxy
        __syncwarp();
        if (lane == 0) mbar_arrive(dq_full(cw));
""", """        // Ladder: each consumer adds its part itself, two floats per atomic reduction.
        float* part = dq_acc + dq_part(b * H + h, m_start + mq * 64, fq * 64, n_pad);
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = warp * 16 + g + 8 * r;
            if (m_start + mq * 64 + row < n_q) {
                #pragma unroll
                for (int j = 0; j < DQ_TILES; ++j)
                    atomicAdd(reinterpret_cast<float2*>(part + row * 64 + ((j ^ (row % 8)) * 8) + 2 * t),
                              make_float2(dq[j][2 * r], dq[j][2 * r + 1]));
            }
        }
""", WHERE),
    replace("} else if (threadIdx.x == 32 && n_steps > 0) {", "} else if (false) {   // ladder: no adding thread",
            WHERE),
)


def _atomics_step(ctx, label: str, stages: int) -> LadderStep:
    module = ctx.fresh(EX)
    kernel = module.KERNEL
    for edit in _ATOMICS:
        kernel = edit(kernel)
    with_kernel(module, kernel, {"STAGES": stages})
    return LadderStep(label, module.flash_backward_hopper)


def steps(ctx) -> list[LadderStep]:
    return [LadderStep("1. 11's design (mma.sync)", ctx.solution("11_backward_tensor_cores").flash_backward_tc),
            _atomics_step(ctx, "2. wgmma, TMA, producer (1 stage, dQ atomics)", 1),
            _atomics_step(ctx, "3. +stages (2)", 2),
            LadderStep("4. +dQ by bulk reduction (the solution)", ctx.solution(EX).flash_backward_hopper)]


CHECK_CASES = {"cpu": ("tiny", "tile_plus_1", "head_dim_128", "stage_ring_d128", "causal_gqa"),
               "gpu": ("tiny", "tile_plus_1", "head_dim_128", "stage_ring_d128", "causal_gqa")}
SAME_AS_SOLUTION: dict = {}


# ---- Timing (GPU) -----------------------------------------------------------------------------------

TIMING = LadderTiming(
    shapes=[dict(B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=d, dtype="float16", causal=False) for d in (128, 64)],
    inputs=bench_inputs,            # the bench's: q, k, v, dO normal, o and lse from module 10's forward
    flops=backward_flops,
    baselines=[("torch FA2", torch_sdpa_backward("FLASH_ATTENTION"), True),
               ("torch cuDNN", torch_sdpa_backward("CUDNN_ATTENTION"), True)],
    ratios=("torch cuDNN", "torch FA2"),
    repeats=3,
)
