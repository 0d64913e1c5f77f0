#!/usr/bin/env python3
"""Module 10's speed ladder: the time of the Hopper kernel after each idea of the lesson.

    python scripts/hopper_ladder.py                # on an H100: check each step, then time them (~2 min)
    python scripts/hopper_ladder.py --out f.json   # the same, and the figures as JSON
    python scripts/hopper_ladder.py --check        # every step on the CPU emulator, module 10's checks
    python scripts/hopper_ladder.py --nvcc         # every step compiled by nvcc for sm_90a (ptxas -v)

One kernel text (below), derived from solutions/10_flash_hopper.py, with compile-time switches; each
step turns one more on. Every step is a complete, correct kernel with the solution's contract (float16
and bfloat16, d = 64 and 128, any Nq and Nk, GQA, non-causal and causal) and its CONFIG for its d
(BLOCK_N, CONSUMERS: 64 query rows per consumer warpgroup, STAGES):

    1. wgmma            S = Q Kᵀ and P V by wgmma.mma_async, Q, K and V read from shared memory through
                        descriptors in the 128-byte swizzle. The tiles are copied there by every thread
                        with 16-byte loads and stores, each chunk put where the swizzle wants it, then
                        fence.proxy.async (the tensor cores read through the async proxy) and
                        __syncthreads; one stage; consumer warpgroups only.
    2. +TMA             K/V tiles by TMA (a tensor map, one thread issuing the copies), each completing
                        a 'full' mbarrier with its bytes; two stages, refilled one tile ahead once
                        every warpgroup has passed the __syncthreads after its reads.      TMA=1
    3. +warp spec.      a producer warpgroup (one thread issues every copy) and the consumers meet only
                        at mbarriers: 'full' and 'empty' per stage, the solution's STAGES; setmaxnreg
                        gives the producer 24 registers and the consumers the rest.   WARP_SPEC=1
    4. +ping-pong       the consumers take turns issuing their products (named barriers): one's
                        softmax runs while the other's products do.                   PINGPONG=1
    5. +overlap         S of tile j issued with P V of tile j - 1, the softmax of tile j run while P V is
                        on the tensor cores: the solution itself (called as is). The variant with every
                        switch on (OVERLAP=1: the solution's loop, spliced in) is checked and compiled too.
                        It differs from the solution in one thing only: every step here has the consumers
                        copy Q (once per block) with plain stores, where the solution of 2026-11-26 has the
                        producer copy it by TMA.

What every step shares with the solution is taken from its text, not copied: the PTX wrappers (types,
mbarriers, TMA, wgmma, descriptors), the online softmax (softmax, to_p, rescale), the overlapped loop
and the epilogue (solution_code below cuts them out by their first lines).

Checks: module 10's own machinery (grader/engine/runner.run_case on cases of
grader/tasks/flash_hopper/checks.py: inputs, float64 reference, the low-precision tolerance rule, the
emulator's faults, race and poison checks). Timing (GPU): B=2, H=16, N=4096, float16, non-causal, d =
128 and 64; scripts/tc_ladder.py's method (5 warm-up calls, then 20 queued back to back between two
CUDA events, ms per call), next to module 06 and torch's FlashAttention-2 and cuDNN backends (if torch
is importable). TFLOP/s counts 4·B·H·N²·d flops.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _script(name):
    """A module of scripts/ (not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TC = _script("tc_ladder")                      # module 06's ladder: its loader, timing and events
SOL = TC.load("solution_10", "10_flash_hopper.py")
SOL06 = TC.SOL

KERNEL = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// From the launch code: the solution's CONFIG for this d (D_HEAD, BLOCK_N, CONSUMERS), USE_BF16, the
// number of STAGES in the ring of K/V tiles, and the switches of the ladder, each 0 or 1:
//   TMA        K/V tiles copied by TMA, issued by one thread, each completing its stage's 'full'
//              mbarrier with its bytes; 0: one stage, copied by every thread with 16-byte loads and
//              stores into the swizzled layout, then fence.proxy.async and __syncthreads
//   WARP_SPEC  a producer warpgroup (one thread issues the copies) and CONSUMERS consumer warpgroups,
//              which hand each stage back on its 'empty' mbarriers; setmaxnreg. 0: consumers only, the
//              stages handed back by a __syncthreads per tile
//   PINGPONG   the consumers take turns issuing their products (named barriers 1 .. CONSUMERS)
//   OVERLAP    S of tile it issued with P V of tile it - 1, the softmax of tile it run while P V is on
//              the tensor cores (the solution's loop); 0: each product waited for as soon as issued
// In every step the consumers copy Q (once per block) with 16-byte loads and stores.
#if !defined(D_HEAD) || !defined(BLOCK_N) || !defined(CONSUMERS) || !defined(STAGES) || !defined(USE_BF16) || \
    !defined(TMA) || !defined(WARP_SPEC) || !defined(PINGPONG) || !defined(OVERLAP)
#error "the sizes and the switches come from the launch code as -D options"
#endif
#if (WARP_SPEC && !TMA) || ((PINGPONG || OVERLAP) && !WARP_SPEC) || (!TMA && STAGES != 1)
#error "the ladder's order: WARP_SPEC needs TMA, PINGPONG and OVERLAP need WARP_SPEC, plain copies one stage"
#endif
constexpr int D = D_HEAD, BOX = 64, BOXES = D / BOX;  // a 64-feature box: one 128-byte swizzled row
constexpr int BLOCK_M = 64 * CONSUMERS;               // query rows per block: 64 per consumer warpgroup
constexpr int NTHREADS = 128 * (CONSUMERS + WARP_SPEC);   // and the producer's warpgroup, if any
constexpr int S_TILES = BLOCK_N / 8, O_TILES = D / 8, P_STEPS = BLOCK_N / 16;   // as in the solution
static_assert(BOXES * BOX == D, "D must be a multiple of 64");

// ---- The solution's element types and PTX wrappers (mbarriers, TMA, wgmma, descriptors), as is ----
@SOLUTION_PTX@

// ---- Plain copies into the swizzled layout -------------------------------------------------------
// Ordinary stores to shared memory reach the async proxy (TMA and wgmma) only through this fence; a
// barrier after it orders every thread's fenced stores before the wgmma that reads them.
__device__ __forceinline__ void publish_to_async_proxy() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Rows [row0, row0 + ROWS) of a [n_rows][D] matrix into shared memory in the layout a TMA box with the
// 128-byte swizzle has (the one the descriptors describe): box c (features 64c ..) at dst + c ·
// box_bytes, row r 128 r bytes into it, its 16-byte chunk j at chunk j ^ (r % 8). Rows past n_rows are
// zeros, as TMA fills them. THREADS threads (tid = 0 .. THREADS - 1), 16 bytes each per step,
// consecutive threads on consecutive chunks of a row (coalesced reads).
template <int ROWS, int THREADS>
__device__ __forceinline__ void copy_rows_swizzled(unsigned char* dst, int box_bytes, const elem_t* src,
                                                   int row0, int n_rows, int tid)
{
    constexpr int CHUNKS = D / 8, TOTAL = ROWS * CHUNKS;   // 16-byte chunks: of a row, of the tile
    #pragma unroll
    for (int i0 = 0; i0 < TOTAL; i0 += THREADS) {
        const int i = i0 + tid, r = i / CHUNKS, j = i % CHUNKS;
        if (TOTAL % THREADS != 0 && i >= TOTAL) break;
        uint4 x = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + r < n_rows) x = *reinterpret_cast<const uint4*>(src + (size_t)(row0 + r) * D + 8 * j);
        *reinterpret_cast<uint4*>(dst + (j / 8) * box_bytes + 128 * r + 16 * ((j % 8) ^ (r % 8))) = x;
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
flash_hopper_ladder(const elem_t* __restrict__ q,
#if TMA
                    const __grid_constant__ TensorMap k_map, const __grid_constant__ TensorMap v_map,
#else
                    const elem_t* __restrict__ k, const elem_t* __restrict__ v,
#endif
                    elem_t* __restrict__ o, float* __restrict__ lse,
                    int H, int H_kv, int n_q, int n_k, float scale, int causal)
{
    // Shared memory, from a 1024-byte boundary (the swizzle's period): the Q tile, STAGES K tiles,
    // STAGES V tiles, each as BOXES boxes of rows × 128 bytes; then (TMA) the mbarriers.
    extern __shared__ unsigned char smem_raw[];
    const unsigned raw = smem_addr(smem_raw);
    unsigned char* q_s = smem_raw + (((raw + 1023) & ~1023u) - raw);
    constexpr int Q_BYTES = BLOCK_M * D * 2, KV_BYTES = BLOCK_N * D * 2;
    unsigned char* k_s = q_s + Q_BYTES;
    unsigned char* v_s = k_s + STAGES * KV_BYTES;

    const int q_start = (gridDim.x - 1 - blockIdx.x) * BLOCK_M;    // module 03's order: last tiles first
    const int h = blockIdx.y, b = blockIdx.z, h_kv = h / (H / H_kv);
    const int offset = n_k - n_q;                 // query i sees keys j <= i + offset (bottom-right)
    const int q_last = min(q_start + BLOCK_M, n_q) - 1;
    const int kv_end = causal ? min(n_k, q_last + offset + 1) : n_k;
    const int n_tiles = kv_end > 0 ? (kv_end + BLOCK_N - 1) / BLOCK_N : 0;
    const int wg = threadIdx.x / 128;

#if TMA
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(v_s + STAGES * KV_BYTES);
    auto k_full = [&](int s) { return smem_addr(bars + s); };
    auto v_full = [&](int s) { return smem_addr(bars + STAGES + s); };
#if WARP_SPEC
    auto k_empty = [&](int s) { return smem_addr(bars + 2 * STAGES + s); };
    auto v_empty = [&](int s) { return smem_addr(bars + 3 * STAGES + s); };
#endif
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(k_full(s), 1);               // one arrival (the expect_tx), then the bytes
            mbar_init(v_full(s), 1);
#if WARP_SPEC
            mbar_init(k_empty(s), 4 * CONSUMERS);  // one arrival per consumer warp
            mbar_init(v_empty(s), 4 * CONSUMERS);
#endif
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");   // visible to the TMA unit
    }
    __syncthreads();
    // Tile it of K or V into its stage: announce the tile's bytes on the stage's 'full' barrier, then
    // one copy per 64-feature box (rows past n_k arrive as zeros). One thread issues it.
    auto tma_tile = [&](const TensorMap& map, unsigned char* stages, unsigned full, int it) {
        const unsigned dst = smem_addr(stages + (it % STAGES) * KV_BYTES);
        mbar_expect_tx(full, KV_BYTES);
        for (int c = 0; c < BOXES; ++c)
            tma_load(dst + c * BLOCK_N * 128, map, c * BOX, it * BLOCK_N, b * H_kv + h_kv, full);
    };
#endif

#if WARP_SPEC
    if (wg == 0) {
        // ---- Producer: thread 0 refills each stage once the consumers have released its last use.
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        if (threadIdx.x == 0) {
            for (int it = 0; it < n_tiles; ++it) {
                const int s = it % STAGES;
                const unsigned phase = (it / STAGES) & 1;   // tile it is use it / STAGES of stage s
                mbar_wait(k_empty(s), phase ^ 1);           // the previous use released (the first passes)
                tma_tile(k_map, k_s, k_full(s), it);
                mbar_wait(v_empty(s), phase ^ 1);
                tma_tile(v_map, v_s, v_full(s), it);
            }
        }
        return;
    }
    // The consumers take the registers the producer gave back (the solution's counts: 128 · 24 +
    // CONSUMERS · 128 · regs fits the 64K-register file).
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(CONSUMERS == 2 ? 240 : 160));
#elif TMA
    // No producer: thread 0 issues the first STAGES - 1 tiles now, the others in the loop, one
    // iteration ahead (STAGES - 1 tiles ahead of the one being read).
    if (threadIdx.x == 0) {
        for (int it = 0; it < min(STAGES - 1, n_tiles); ++it) {
            tma_tile(k_map, k_s, k_full(it), it);
            tma_tile(v_map, v_s, v_full(it), it);
        }
    }
#else
    const elem_t* k_bh = k + (size_t)(b * H_kv + h_kv) * n_k * D;
    const elem_t* v_bh = v + (size_t)(b * H_kv + h_kv) * n_k * D;
#endif

    // ---- Consumers --------------------------------------------------------------------------------
    const int cw = wg - WARP_SPEC;                         // this consumer: query rows 64 cw ..
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int row0 = q_start + cw * 64 + warp * 16 + g;    // this lane's rows: row0 and row0 + 8
    const float scale_log2 = scale * 1.4426950408889634f;
    const unsigned q_base = smem_addr(q_s) + cw * 64 * 128;

    // Q: this consumer's 64 rows of each box, copied by its 128 threads, published to the async proxy,
    // and the warpgroup's own named barrier (1 + CONSUMERS + cw) so that all 128 threads' stores are
    // fenced before its first wgmma reads them.
    copy_rows_swizzled<64, 128>(q_s + cw * 64 * 128, BLOCK_M * 128, q + (size_t)(b * H + h) * n_q * D,
                                q_start + cw * 64, n_q, threadIdx.x % 128);
    publish_to_async_proxy();
    asm volatile("bar.sync %0, 128;" :: "r"(1 + CONSUMERS + cw) : "memory");

#if PINGPONG
    // Consumer cw waits on named barrier 1 + cw for its turn and, once its products are issued, lets
    // the next consumer go; the last one starts consumer 0. (As in the solution.)
    auto my_turn = [&]() { asm volatile("bar.sync %0, 256;" :: "r"(1 + cw) : "memory"); };
    auto next_turn = [&]() { asm volatile("bar.arrive %0, 256;" :: "r"(1 + (cw + 1) % CONSUMERS) : "memory"); };
    if (cw == CONSUMERS - 1) asm volatile("bar.arrive 1, 256;" ::: "memory");
#else
    auto my_turn = []() {};                                // no turns: every consumer issues at once
    auto next_turn = []() {};
#endif
#if WARP_SPEC
    // A stage goes back to the producer once the wgmma that read it are complete: an arrival per warp.
    auto release = [&](unsigned bar) { __syncwarp(); if (lane == 0) mbar_arrive(bar); };
#endif

    // The online-softmax state of this lane's two rows (row0, row0 + 8), and its part of acc.
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[O_TILES][4] = {};

    // S = Q K_itᵀ, issued and committed (not waited for): D / 16 k-steps, 32 bytes into the rows of
    // box kk / 4 each, Q's and K's descriptors K-major with the 1024-byte stride between 8-row atoms.
    auto issue_s = [&](float (&s)[S_TILES][4], int it) {
        const int st = it % STAGES;
#if TMA
        mbar_wait(k_full(st), (it / STAGES) & 1);          // tile it has landed
#endif
        const unsigned k_base = smem_addr(k_s + st * KV_BYTES);
        wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const unsigned long long dq = desc(q_base + (kk / 4) * BLOCK_M * 128 + (kk % 4) * 32, 16, 1024);
            const unsigned long long dk = desc(k_base + (kk / 4) * BLOCK_N * 128 + (kk % 4) * 32, 16, 1024);
            if (kk == 0) wgmma_s0(s, dq, dk); else wgmma_s(s, dq, dk);
        }
        wgmma_commit();
    };
    // acc += P V_it, issued and committed: one k-step per 16 keys (16 rows of 128 bytes), V read
    // transposed (MN-major: leading offset = the distance between boxes).
    auto issue_o = [&](const unsigned (&p)[P_STEPS][4], int it) {
        const int st = it % STAGES;
#if TMA
        mbar_wait(v_full(st), (it / STAGES) & 1);
#endif
        const unsigned v_base = smem_addr(v_s + st * KV_BYTES);
        wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < P_STEPS; ++kk)
            wgmma_o(acc, p[kk], desc(v_base + kk * 16 * 128, BLOCK_N * 128, 1024));
        wgmma_commit();
    };

    // ---- The solution's softmax, to_p and rescale, as is --------------------------------------------
@SOLUTION_SOFTMAX@

#if OVERLAP
    // ---- The solution's loop, as is: S of tile it and P V of tile it - 1 on the tensor cores together;
    // the softmax of tile it between wgmma_wait<1> (S done) and wgmma_wait<0> (P V done).
@SOLUTION_LOOP@
#else
    // One tile at a time: each product is waited for as soon as it is issued, and the softmax sits
    // between the two. With PINGPONG each product is a turn of its own, so that one consumer's
    // softmax (and its waits) fall under the other consumers' products.
    for (int it = 0; it < n_tiles; ++it) {
#if !WARP_SPEC
        // Consumers only: every warpgroup is done with tile it - 1 (its wgmma waited for), so the
        // stage that held it may be written again.
        __syncthreads();
#if TMA
        if (threadIdx.x == 0 && it + STAGES - 1 < n_tiles) {   // into the stage of tile it - 1
            tma_tile(k_map, k_s, k_full((it + STAGES - 1) % STAGES), it + STAGES - 1);
            tma_tile(v_map, v_s, v_full((it + STAGES - 1) % STAGES), it + STAGES - 1);
        }
#else
        copy_rows_swizzled<BLOCK_N, NTHREADS>(k_s, BLOCK_N * 128, k_bh, it * BLOCK_N, n_k, threadIdx.x);
        copy_rows_swizzled<BLOCK_N, NTHREADS>(v_s, BLOCK_N * 128, v_bh, it * BLOCK_N, n_k, threadIdx.x);
        publish_to_async_proxy();
        __syncthreads();                                   // tile it is in, for every warpgroup
#endif
#endif
        float s[S_TILES][4], alpha[2];
        unsigned p[P_STEPS][4];
        my_turn();
        issue_s(s, it);
        next_turn();
        wgmma_wait<0>();                                   // S is complete: K has been read
#if WARP_SPEC
        release(k_empty(it % STAGES));
#endif
        softmax(s, alpha, it);
        to_p(s, p);
        rescale(alpha);                                    // no product writes acc now
        my_turn();
        issue_o(p, it);
        next_turn();
        wgmma_wait<0>();                                   // P V is complete: V has been read
#if WARP_SPEC
        release(v_empty(it % STAGES));
#endif
    }
#endif

    // ---- The solution's epilogue, as is -----------------------------------------------------------
@SOLUTION_EPILOGUE@
}
"""

# The ladder: each step one switch more. None: the solution's own flash_hopper.
STEPS = [
    ("wgmma, plain copies", dict(TMA=0, WARP_SPEC=0, PINGPONG=0, OVERLAP=0)),
    ("+TMA, 2 stages", dict(TMA=1, WARP_SPEC=0, PINGPONG=0, OVERLAP=0)),
    ("+warp specialization", dict(TMA=1, WARP_SPEC=1, PINGPONG=0, OVERLAP=0)),
    ("+ping-pong", dict(TMA=1, WARP_SPEC=1, PINGPONG=1, OVERLAP=0)),
    ("+overlap (solution)", None),
]
ALL_ON = ("(variant, all on)", dict(TMA=1, WARP_SPEC=1, PINGPONG=1, OVERLAP=1))

# Module 10's cases (grader/tasks/flash_hopper/checks.py): float16 and bfloat16, d 64 and 128, partial
# tiles, GQA, causal (with query rows that see no key), more key tiles than stages.
CHECK_CASES = ("tile_plus_1", "gqa_4_to_1", "head_dim_128", "causal_queries_past_key_tiles",
               "causal_chunked_d128", "bf16_tile_plus_1", "bf16_gqa_causal_d128", "stage_ring_d64",
               "stage_ring_d128", "stage_ring_causal_d128")
GPU_CHECK_CASES = ("tile_plus_1", "head_dim_128", "causal_chunked_d128", "bf16_tile_plus_1", "bf16_gqa_causal_d128",
                   "stage_ring_d64", "stage_ring_causal_d128")
BENCH = dict(B=2, H=16, N=4096)
SEED = 0


# ---- The kernel text: the ladder's own lines and the solution's -------------------------------------

_MARKER = re.compile(r"^\s*//\s*(BEGIN|END) SOLUTION")


def solution_code(first: str, *, through: str | None = None, block: str | None = None) -> str:
    """Lines of the solution's KERNEL: from the one that begins with `first` (after its indentation) to
    the next one that begins with `through`, or to the end of the block that the next line beginning
    with `block` opens (its closing "}" or "};" at the same indentation); the BEGIN/END SOLUTION marker
    lines left out. An error names what was not found, should the solution's text move."""
    lines = SOL.KERNEL.split("\n")
    starts = [i for i, s in enumerate(lines) if s.strip().startswith(first)]
    if len(starts) != 1:
        raise RuntimeError(f"solutions/10_flash_hopper.py: {len(starts)} lines begin with {first!r}, not one")
    end = through or block
    try:
        j = next(k for k in range(starts[0], len(lines)) if lines[k].strip().startswith(end))
        if block:
            indent = lines[j][: len(lines[j]) - len(lines[j].lstrip())]
            j = next(k for k in range(j + 1, len(lines)) if lines[k] in (indent + "}", indent + "};"))
    except StopIteration:
        raise RuntimeError(f"solutions/10_flash_hopper.py: no end {end!r} after {first!r}") from None
    return "\n".join(s for s in lines[starts[0]: j + 1] if not _MARKER.match(s))


@functools.lru_cache(maxsize=None)
def source(d: int) -> str:
    pieces = {
        "@SOLUTION_PTX@": solution_code("#if USE_BF16", through="@WGMMA_HELPERS@"),
        "@SOLUTION_SOFTMAX@": solution_code("// The softmax of tile it on S", block="auto rescale"),
        "@SOLUTION_LOOP@": solution_code("if (n_tiles > 0) {", block="if (n_tiles > 0) {"),
        "@SOLUTION_EPILOGUE@": solution_code("// o = acc / l", block="for (int r = 0; r < 2; ++r) {"),
    }
    text = KERNEL
    for key, piece in pieces.items():
        text = text.replace(key, piece)
    return text.replace("@WGMMA_HELPERS@", SOL.wgmma_helpers(SOL.CONFIG[d]["BLOCK_N"], d))


def stages(d: int, sw: dict) -> int:
    """Plain copies: one stage; TMA by one consumer thread: two (double buffering); with a producer:
    the solution's CONFIG."""
    return 1 if not sw["TMA"] else 2 if not sw["WARP_SPEC"] else SOL.CONFIG[d]["STAGES"]


def defines(d: int, elem: str, sw: dict) -> dict:
    cfg = SOL.CONFIG[d]
    return dict(D_HEAD=d, BLOCK_N=cfg["BLOCK_N"], CONSUMERS=cfg["CONSUMERS"], STAGES=stages(d, sw),
                USE_BF16=int(elem == "bfloat16"), **sw)


def shared_bytes(d: int, sw: dict) -> int:
    """The kernel's layout: 1024 bytes to align the start, the Q tile, STAGES K and V tiles, and with
    TMA four mbarriers per stage."""
    n = stages(d, sw)
    return 1024 + SOL.block_m(d) * d * 2 + n * 2 * SOL.CONFIG[d]["BLOCK_N"] * d * 2 + (32 * n if sw["TMA"] else 0)


OPTIONS = ("-ftz=true", "-arch=sm_90a")        # the solution's: wgmma and setmaxnreg need sm_90a

RESOURCES: dict = {}   # (switches, d, elem) -> registers and local bytes of each compiled step


@functools.lru_cache(maxsize=None)
def _kernel(rt, d, elem, switches):
    sw = dict(switches)
    options = tuple(f"-D{key}={int(val)}" for key, val in defines(d, elem, sw).items()) + OPTIONS
    # Named as a name expression: the kernel's parameter list holds #if lines, so the runtimes do not
    # parse its signature (it depends on the -D options), and the emulator builds only the kernels it
    # parsed or was named.
    kernel = rt.compile(source(d), options=options,
                        name_expressions=("flash_hopper_ladder",)).get_function("flash_hopper_ladder")
    kernel.max_dynamic_shared_size_bytes = shared_bytes(d, sw)
    # The emulator: ptxas's report from its NVRTC pass (sm_90a); a GPU: the driver's attributes.
    info = getattr(rt, "ptxas_report", {}).get("flash_hopper_ladder") or kernel.attributes
    RESOURCES[switches, d, elem] = dict(num_regs=info.get("num_regs", "?"),
                                        local_size_bytes=info.get("local_size_bytes", "?"))
    return kernel


def ladder_step(switches):
    """The function of one step, with the solution's signature: (rt, q, k, v, scale, causal=False,
    dtype=None) -> (o, lse). None: the solution's flash_hopper itself."""
    if switches is None:
        return SOL.flash_hopper

    def flash_hopper_ladder(rt, q, k, v, scale, causal=False, dtype=None):
        B, H, n_q, d = q.shape
        H_kv, n_k = k.shape[1], k.shape[2]
        elem = dtype or q.dtype.name
        cfg = SOL.CONFIG[d]
        kernel = _kernel(rt, d, elem, tuple(sorted(switches.items())))
        kv = ((rt.tensor_map(k, cfg["BLOCK_N"], elem), rt.tensor_map(v, cfg["BLOCK_N"], elem))
              if switches["TMA"] else (k, v))
        o = rt.empty(q.shape, q.dtype)
        lse = rt.empty((B, H, n_q), "float32")
        grid = ((n_q + SOL.block_m(d) - 1) // SOL.block_m(d), H, B)
        kernel(grid, (128 * (cfg["CONSUMERS"] + switches["WARP_SPEC"]),),
               (q, *kv, o, lse, rt.int32(H), rt.int32(H_kv), rt.int32(n_q), rt.int32(n_k), rt.float32(scale),
                rt.int32(int(bool(causal)))), shared_mem=shared_bytes(d, switches))
        return o, lse
    return flash_hopper_ladder


# ---- Checks: module 10's cases, reference, tolerance rule and faults ---------------------------------

def run_checks(rt, case_names, steps) -> int:
    from grader.catalogue import resolve
    from grader.engine.runner import run_case
    from grader.tasks import load_task
    ex = resolve("10_flash_hopper")
    cases = {c.name: c for c in load_task(ex).CASES}
    failures = 0
    for label, sw in steps:
        fn = ladder_step(sw)
        for name in case_names:
            t0 = time.time()
            res = run_case(ex, cases[name], fn, rt, SEED, Path(__file__))
            failures += not res.passed
            p = res.params
            err = f"rel err {res.rel_err:.2e}  max abs {res.max_abs_err:.2e}" if res.rel_err is not None else ""
            print(f"  {'ok  ' if res.passed else 'FAIL'} {label:22} {name:30} {p['dtype']:8} d={p['d']:<3} "
                  f"{'causal' if p['causal'] else '      '} {err}  ({time.time() - t0:.1f} s)", flush=True)
            if not res.passed:
                print("       " + res.message.replace("\n", "\n       "), flush=True)
    return failures


def resource_lines(steps):
    """(step, d, type, registers, local bytes, shared bytes) of each step compiled so far."""
    labels = {tuple(sorted(sw.items())): label for label, sw in steps if sw is not None}
    for (switches, d, elem), info in RESOURCES.items():
        yield (labels[switches], d, elem, info["num_regs"], info["local_size_bytes"],
               shared_bytes(d, dict(switches)))


def print_resources(steps):
    for label, d, elem, regs, local, smem in resource_lines(steps):
        print(f"  {label:22} d={d:<3} {elem:8} {regs} registers, {local} B local (spill), "
              f"{smem // 1024} KB shared")


def check_all(rt, case_names, where: str) -> int:
    """Every step and the all-on variant on the named cases, then their registers; the failures."""
    failures = run_checks(rt, case_names, STEPS + [ALL_ON])
    print(f"\n## Registers ({where})")
    print_resources(STEPS + [ALL_ON])
    return failures


def cpu_check() -> int:
    from grader.runtimes import get_runtime
    t0 = time.time()
    print("# CPU emulator: every step on module 10's cases (its reference, tolerance rule, faults and race "
          "checks)")
    failures = check_all(get_runtime("cpu"), CHECK_CASES, "ptxas for sm_90a, through NVRTC")
    if failures:
        print(f"\nFAILED: {failures} check(s) ({time.time() - t0:.0f} s)")
        return 1
    print(f"\nall steps ok ({time.time() - t0:.0f} s)")
    return 0


# ---- Compile with nvcc (no GPU needed) --------------------------------------------------------------

def nvcc_compile() -> int:
    """Every step, d and type compiled by the local nvcc for sm_90a with ptxas -v: what a GPU run would
    compile (through NVRTC) fails here first. ptxas's warnings are shown, and so are its wgmma
    advisories, which it prints as "info" lines numbered C75xx: "(C7511) Potential Performance Loss:
    wgmma.mma_async instructions are serialized due to ...", "(C7517) warpgroup.wait is injected ..."."""
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, sw in STEPS[:-1] + [ALL_ON]:
            for d in SOL.HEAD_DIMS:
                src = Path(tmp) / f"ladder_d{d}.cu"
                src.write_text(source(d))
                for elem in SOL.DTYPES:
                    opts = [f"-D{key}={int(val)}" for key, val in defines(d, elem, sw).items()]
                    cmd = ["nvcc", "-std=c++17", "-arch=sm_90a", "-cubin", "-ftz=true",
                           "-Xptxas", "-v,-warn-spills,-warn-lmem-usage",
                           *opts, "-o", str(Path(tmp) / "k.cubin"), str(src)]
                    out = subprocess.run(cmd, capture_output=True, text=True)
                    log = out.stdout + out.stderr
                    regs = re.search(r"Used (\d+) registers", log)
                    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
                    warn = [line.strip() for line in log.splitlines()
                            if "warning" in line.lower() or re.search(r"\(C75\d\d\)", line)]
                    warn.sort(key=lambda line: "performance loss" not in line.lower())   # serialization first
                    if out.returncode:
                        failures += 1
                        print(f"  FAIL {label:22} d={d:<3} {elem:8}\n{log}")
                    else:
                        print(f"  ok   {label:22} d={d:<3} {elem:8} {regs.group(1) if regs else '?'} registers, "
                              f"spills {spill.group(1) + ' B stored, ' + spill.group(2) + ' B loaded' if spill else '?'}"
                              + (f", {len(warn)} ptxas warning(s) or advisories, first: {warn[0]}" if warn else ""), flush=True)
    return 1 if failures else 0


# ---- Timing (GPU) -------------------------------------------------------------------------------------

def contenders(rt, inputs, params):
    """(label, call, torch's) of everything timed on one input: the steps, module 06, torch's
    FlashAttention-2 and cuDNN backends (grader bench 10's baselines)."""
    from grader.attention.baselines import torch_sdpa
    from grader.attention.lowp_prefill import call
    from grader.spec import BenchContext

    def ours(fn):
        return lambda: call(fn, rt, inputs, params)

    def torch_backend(name):
        run = torch_sdpa(name)
        return lambda: run(BenchContext(rt, inputs, params, None))
    return ([(label, ours(ladder_step(sw)), False) for label, sw in STEPS]
            + [("module 06 (mma.sync)", ours(SOL06.flash_tc), False),
               ("torch FA2", torch_backend("FLASH_ATTENTION"), True),
               ("torch cuDNN", torch_backend("CUDNN_ATTENTION"), True)])


def gpu_main(out_path: str | None) -> int:
    from grader.attention.lowp_prefill import call
    from grader.runtimes import get_runtime
    rt = get_runtime("gpu")
    cp = rt.xp
    t_start = time.time()
    print(f"# {rt.device_name}, CuPy {cp.__version__}")
    print("\n## Correctness: module 10's cases on the GPU, every step")
    if check_all(rt, GPU_CHECK_CASES, "the driver's attributes"):
        print("\ncheck(s) FAILED: no timing")
        return 1
    try:
        import torch
        torch_event = (TC.make_event(torch=torch), torch.cuda.synchronize)
    except Exception as e:
        print(f"torch is not usable ({type(e).__name__}: {e}): no FlashAttention-2 or cuDNN baseline")
        torch_event = None

    B, H, N = BENCH["B"], BENCH["H"], BENCH["N"]
    cupy_event = (TC.make_event(cp=cp), rt.synchronize)
    rows = []   # step, d, ms, TFLOP/s, and for a step how far its o lies from the solution's there
    for d in (128, 64):
        params = dict(B=B, H=H, Hkv=H, Nq=N, Nk=N, d=d, dtype="float16", causal=False)
        inputs = {x: cp.random.standard_normal((B, H, N, d), dtype=cp.float32).astype(cp.float16) for x in "qkv"}
        inputs["scale"] = 1.0 / d ** 0.5
        o_solution = call(SOL.flash_hopper, rt, inputs, params)["o"].astype(cp.float32)
        for label, fn, is_torch in contenders(rt, inputs, params):
            if is_torch and torch_event is None:
                continue
            try:
                o = fn()["o"]
                # The median of three timings: one of 20 back-to-back calls can catch a slow spell
                # of the GPU (a step once timed 12x its usual time, and never again).
                ms = statistics.median(TC.time_calls(fn, *(torch_event if is_torch else cupy_event))
                                       for _ in range(3))
            except Exception as e:             # a baseline may be missing (a backend refusing)
                print(f"  {label} at d={d}: not timed ({type(e).__name__}: {str(e).splitlines()[0]})")
                continue
            diff = float(cp.abs(o.astype(cp.float32) - o_solution).max()) if label in dict(STEPS) else None
            rows.append(dict(step=label, d=d, ms=ms, tflops=4 * B * H * N * N * d / (ms * 1e-3) / 1e12,
                             max_abs_diff_vs_solution=diff))
            print(f"  timed d={d:<3} {label:22} {ms:.3f} ms", flush=True)

    print(f"\n## Speed ladder: B={B}, H={H}, N={N}, float16, non-causal, ms per call "
          f"(median of 3 timings of {TC.REPS} calls back to back after {TC.WARMUP} warm-up), {rt.device_name}\n")
    print("| step | d | ms | TFLOP/s | × cuDNN | × FA2 | max abs Δo vs solution |")
    print("|---|---|---|---|---|---|---|")
    ms_of = {(r["step"], r["d"]): r["ms"] for r in rows}
    for r in rows:
        for key, base in (("x_cudnn", "torch cuDNN"), ("x_fa2", "torch FA2")):
            r[key] = ms_of[base, r["d"]] / r["ms"] if (base, r["d"]) in ms_of else None
        ratios = [f"{x:.2f}×" if x is not None else "—" for x in (r["x_cudnn"], r["x_fa2"])]
        diff = "" if r["max_abs_diff_vs_solution"] is None else f"{r['max_abs_diff_vs_solution']:.1e}"
        print(f"| {r['step']} | {r['d']} | {r['ms']:.3f} | {r['tflops']:.0f} | {ratios[0]} | {ratios[1]} | {diff} |")
    print(f"\n(× cuDNN, × FA2: that backend's time / this time, speed relative to it; "
          f"{time.time() - t_start:.0f} s in all)")
    if out_path:
        Path(out_path).write_text(json.dumps(dict(
            gpu=rt.device_name, date=datetime.date.today().isoformat(), script="scripts/hopper_ladder.py",
            shape=dict(BENCH, dtype="float16", causal=False), method=f"{TC.WARMUP} warm-up, {TC.REPS} calls "
            "back to back between two CUDA events, ms per call, the median of three such timings", rows=rows,
            resources=[dict(step=s, d=d, dtype=e, num_regs=r, local_bytes=lo, shared_bytes=sm)
                       for s, d, e, r, lo, sm in resource_lines(STEPS + [ALL_ON])]), indent=1) + "\n")
        print(f"figures written to {out_path}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="check every step on the CPU emulator only")
    mode.add_argument("--nvcc", action="store_true", help="compile every step with the local nvcc for sm_90a")
    ap.add_argument("--out", help="GPU mode: also write the figures to this JSON file")
    args = ap.parse_args()
    if args.check:
        return cpu_check()
    if args.nvcc:
        return nvcc_compile()
    return gpu_main(args.out)


if __name__ == "__main__":
    sys.exit(main())
