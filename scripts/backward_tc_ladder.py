#!/usr/bin/env python3
"""Module 11's speed ladder: the time of the tensor-core backward after each idea of the lesson.

    python scripts/backward_tc_ladder.py                # on a GPU: check each step, then time them
    python scripts/backward_tc_ladder.py --out f.json   # the same, and the figures as JSON
    python scripts/backward_tc_ladder.py --check        # every step on the CPU emulator, module 11's cases

One kernel text (below), derived from solutions/11_backward_tensor_cores.py, with compile-time switches;
each step turns one more on. Every step is a complete, correct kernel with the solution's contract
(float16 and bfloat16, d = 64 and 128, any Nq and Nk, GQA, non-causal and causal), its CONFIG for its d
(BLOCK_M query rows per step, BLOCK_N = 128 keys per block, one warp per 16 keys), its algorithm (one
block per key tile and kv head, the transposed products Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, dQ added to a float32
accumulator by atomics) and its launch code (backward_preprocess, the kernel, convert_dq):

    1. mma              mma.sync for all five products. Fragments read from shared memory with plain
                        loads, element by element of the documented fragment layout: 32 bits where a
                        register's two elements are neighbours in a row of the tile (K, V as A; Q, dO
                        as B of Sᵀ and dPᵀ), two 16-bit loads where they sit in two rows (dO, Q as B of
                        dV and dK, K as B of dQ, dS as A of dQ). Pᵀ and dSᵀ, rounded, stored from their
                        C fragments to shared memory (pt_s, ds_s: [key][query]) and read back as the A
                        fragments of dV += Pᵀ dO and dK += dSᵀ Q. Q, dO, lse and D of each step (and K,
                        V once) copied with plain 16-byte (lse, D: 4-byte) loads and stores, one stage,
                        __syncthreads before and after. No swizzle (plain row-major tiles). dQ added by
                        two 4-byte float atomicAdd per pair of features. The products' loop over the
                        features (Sᵀ, then dPᵀ, each its own loop) and dQ's loop over the keys kept
                        rolled (#pragma unroll 1).
    2. +ldmatrix        ldmatrix / ldmatrix.trans for every fragment (dS as A of dQ read across first,
                        block16_across, so that the registers come in A's order).     USE_LDMATRIX=1
    3. +Pᵀ in registers the C fragments of Sᵀ and dPᵀ, turned into Pᵀ and dSᵀ and rounded, are the A
                        fragments of dV += Pᵀ dO and dK += dSᵀ Q: no round trip (pt_s is gone); dSᵀ is
                        still stored to ds_s, from its A fragments, for dQ.            PT_IN_REGS=1
    4. +cp.async        the step's Q, dO, lse and D by cp.async into two stages, the next step's copies
                        issued right after the barrier that opens this one (K and V by cp.async too,
                        in the prologue).                                              ASYNC=1
    5. +swizzle         the solution's XOR swizzle of every 16-bit tile (swz).          SWIZZLE=1
    6. +8-byte atomics  dQ's two neighbouring features of a row in one 8-byte reduction (atomic_add2,
                        float2 atomicAdd on sm_90).                                     ATOMIC2=1
    7. +unrolled        Sᵀ and dPᵀ in one loop over the features, fully unrolled, and dQ's key loop
                        unrolled 4 of its 8 times (the previous solution).              UNROLL=1
    8. +two dQ chains   the solution itself (called as is): dQ's key loop fully unrolled, its even and
                        odd steps added into two sets of accumulators, summed before the reductions.
                        The variant with every switch on (DQ_TWO=1) is the same kernel, and is checked
                        too: on the emulator its gradients must equal the solution's bit for bit (they
                        sum the same products in the same order; steps 1 to 7 sum dQ in one chain, so
                        their dQ differs from the solution's in the last bits), on a GPU its dK and dV
                        (dQ's atomics add in any order there).

What every step shares with the solution is taken from its text, not copied (solution_code below cuts it
out by first lines): the includes, CONFIG's constants, the types and PTX wrappers (mma, ldmatrix,
cp.async), swz, load_tile_async, block16 (every step computes a lane's part of an address once),
block16_across, atomic_add2, backward_preprocess, to_a_fragments, the kernel's opening lines (the
block's key tile, GQA group and causal first step), P from lse (TODO 2), dSᵀ with its stores (TODO 4,
step 3 on), the dK / dV stores (TODO 6) and convert_dq.
Each step is a fresh copy of the solution's Python module with this KERNEL and the switches added to
CONFIG[d] (so: the solution's launch code, its -D options plus the switches), and its own shared_bytes.

Checks: module 11's own machinery (grader/engine/runner.run_case on cases of
grader/tasks/backward_tensor_cores/checks.py: inputs, float64 reference, the low-precision tolerance
rule, the emulator's faults, race, poison and block-order checks), on scripts/backward_tc_variants.py's
cases plus float16 at d = 128. Timing (GPU): B=2, H=16, N=4096, float16, non-causal, d = 128 and 64, the
backward's three launches; scripts/tc_ladder.py's method (5 warm-up calls, then 20 queued back to back
between two CUDA events, ms per call), the median of three such timings; next to module 09's float32
backward (grader bench 11's baseline: the same values widened) and torch's FlashAttention-2 and cuDNN
backward (grader's torch_sdpa_backward: the forward once, untimed; each call one torch.autograd.grad),
o and lse from module 06's forward. TFLOP/s counts 2.5 × 4·B·H·N²·d flops (grader's backward_flops).
"""
from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import json
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _script(name):
    """A module of scripts/ (not a package), registered under its name (its dataclasses need that)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


TC = _script("tc_ladder")                      # module 06's ladder: its loader, timing and events
BV = _script("backward_tc_variants")           # module 11's variants: the solution loader, the cases
SOL = BV.SOL                                   # solutions/11_backward_tensor_cores.py
SOL06 = TC.SOL                                 # solutions/06_flash_tensor_cores.py: o and lse for timing

KERNEL = r"""
// ---- The solution's head, as is: includes, CONFIG's constants (WARPS, NT, QSTEPS, ROW_TILES, DQ_SPLIT),
// the element types, pack2, mma_16816, ldmatrix_x4(_trans), cp_async_16 / _4, commit and wait ---------
@SOLUTION_HEAD@

// ---- The ladder's switches ----------------------------------------------------------------------------
// From the launch code, next to the solution's CONFIG (-DBLOCK_M -DBLOCK_N -DUSE_BF16), each 0 or 1:
//   USE_LDMATRIX  fragments read with ldmatrix(.trans); 0: plain loads by the fragment layout, 32 bits
//                 where a register's two elements are neighbours in a tile row, two 16-bit loads where
//                 they sit in two rows (the operands read transposed)
//   PT_IN_REGS    Pᵀ and dSᵀ go from the C fragments of Sᵀ and dPᵀ straight into the A fragments of
//                 dV += Pᵀ dO and dK += dSᵀ Q (dSᵀ still stored to ds_s for dQ); 0: both stored to
//                 shared memory (pt_s, ds_s) and read back as A fragments
//   ASYNC         each step's Q, dO, lse and D by cp.async, two stages, the next step's copies in
//                 flight during this one (K, V by cp.async too); 0: one stage, plain loads and
//                 stores, __syncthreads before and after
//   SWIZZLE       the 16-bit tiles XOR-swizzled (the solution's swz); 0: plain row-major
//   ATOMIC2       dQ added 8 bytes at a time (atomic_add2); 0: two 4-byte atomicAdd
//   UNROLL        Sᵀ and dPᵀ in one loop over the features, fully unrolled, and dQ's key loop unrolled
//                 4 times; 0: Sᵀ, then dPᵀ, each in its own loop over the features, and dQ's loop over
//                 the keys, all rolled (#pragma unroll 1)
//   DQ_TWO        the solution's dQ: its key loop fully unrolled, the even steps into dq_frag and the
//                 odd ones into dq_odd (two mma chains per feature tile), summed before the reductions
#if !defined(USE_LDMATRIX) || !defined(PT_IN_REGS) || !defined(ASYNC) || !defined(SWIZZLE) || \
    !defined(ATOMIC2) || !defined(UNROLL) || !defined(DQ_TWO)
#error "the switches of the ladder come from the launch code as -D options"
#endif

// ---- Shared tiles: the solution's swz, or plain rows --------------------------------------------------
#if SWIZZLE
@SOLUTION_SWZ@
#else
// Element (row, col) of a [rows][W] tile, row-major: the 8 rows an ldmatrix matrix (or 8 lanes of a
// fragment) reads at one column lie W · 2 bytes apart, in the same banks when W · 2 is a multiple of 128.
template <int W>
__device__ __forceinline__ int swz(int row, int col) { return row * W + col; }
#endif

// ---- The solution's load_tile_async (cp.async), block16, block16_across, atomic_add2 and
// backward_preprocess, as is -----------------------------------------------------------------------------
@SOLUTION_TILES@

// Rows [row0, row0 + ROWS) of a [n_rows][D] matrix -> a [ROWS][D] tile, 16 bytes per thread and step,
// zeros past n_rows: by cp.async (the solution's load_tile_async: not waited for here), or by plain
// loads and stores (visible to the block after a __syncthreads).
template <int ROWS, int D>
__device__ __forceinline__ void load_tile(elem_t* tile, const elem_t* src, int row0, int n_rows, int tid)
{
#if ASYNC
    load_tile_async<ROWS, D>(tile, src, row0, n_rows, tid);
#else
    constexpr int CHUNKS = D / 8;
    constexpr int ROW_STEP = NTHREADS / CHUNKS;
    static_assert(NTHREADS % CHUNKS == 0 && ROWS % ROW_STEP == 0, "the block copies whole rows");
    const int r = tid / CHUNKS, c = (tid % CHUNKS) * 8;
    #pragma unroll
    for (int n = 0; n < ROWS / ROW_STEP; ++n) {
        const int row = r + n * ROW_STEP;
        uint4 x = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + row < n_rows) x = *reinterpret_cast<const uint4*>(src + (size_t)(row0 + row) * D + c);
        *reinterpret_cast<uint4*>(tile + swz<D>(row, c)) = x;
    }
#endif
}

// ---- Fragments from shared memory: ldmatrix, or plain loads by the layout -----------------------------
// Lane l: g = l / 4, t = l % 4. Each function gives the four registers that one ldmatrix_x4 gives for
// the 16 × 16 block (rows 16 r16 .., cols 16 c16 ..) of a [rows][W] tile.

// ldmatrix_x4 at block16's addresses: r[i] = matrix i (rows 8 (i % 2) .., cols 8 (i / 2) ..), row g,
// cols 2t, 2t + 1. As A (K, V; Pᵀ, dSᵀ read back): the A fragment of the block. For a [n][k] tile as B
// (Q, dO in Sᵀ and dPᵀ): (r[0], r[2]) and (r[1], r[3]) are the B fragments of two 8-column tiles.
template <int W>
__device__ __forceinline__ void frag(unsigned r[4], const elem_t* tile, int r16, int c16, int lane)
{
#if USE_LDMATRIX
    ldmatrix_x4(r, tile + block16<W>(r16, c16, lane));
#else
    const int g = lane / 4, t = lane % 4;
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        r[i] = *reinterpret_cast<const unsigned*>(tile + swz<W>(r16 * 16 + 8 * (i % 2) + g, c16 * 16 + 8 * (i / 2) + 2 * t));
#endif
}

// ldmatrix_x4_trans at block16's addresses: each matrix transposed, r[i] = rows 2t, 2t + 1 of column g
// of matrix i. For a [k][n] tile as B (dO, Q in dV and dK; K in dQ): (r[0], r[1]) and (r[2], r[3]) are
// the B fragments of two 8-column tiles. The two elements of a register sit in two rows of the tile:
// without ldmatrix, two 16-bit loads.
template <int W>
__device__ __forceinline__ void frag_trans(unsigned r[4], const elem_t* tile, int r16, int c16, int lane)
{
#if USE_LDMATRIX
    ldmatrix_x4_trans(r, tile + block16<W>(r16, c16, lane));
#else
    const int g = lane / 4, t = lane % 4;
    const unsigned short* bits = reinterpret_cast<const unsigned short*>(tile);
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = r16 * 16 + 8 * (i % 2) + 2 * t, col = c16 * 16 + 8 * (i / 2) + g;
        r[i] = (unsigned)bits[swz<W>(row, col)] | ((unsigned)bits[swz<W>(row + 1, col)] << 16);
    }
#endif
}

// ldmatrix_x4_trans at block16_across's addresses: the matrices across first (matrix i: rows 8 (i / 2)
// .., cols 8 (i % 2) ..), each transposed. For ds_s [key][query], block (keys 16 r16 .., queries 16 c16
// ..): the A fragment of dS (queries × keys) in A's register order (lesson, section 3).
template <int W>
__device__ __forceinline__ void frag_trans_across(unsigned r[4], const elem_t* tile, int r16, int c16, int lane)
{
#if USE_LDMATRIX
    ldmatrix_x4_trans(r, tile + block16_across<W>(r16, c16, lane));
#else
    const int g = lane / 4, t = lane % 4;
    const unsigned short* bits = reinterpret_cast<const unsigned short*>(tile);
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = r16 * 16 + 8 * (i / 2) + 2 * t, col = c16 * 16 + 8 * (i % 2) + g;
        r[i] = (unsigned)bits[swz<W>(row, col)] | ((unsigned)bits[swz<W>(row + 1, col)] << 16);
    }
#endif
}

// ---- The products of one step, per warp (the solution's, through frag) --------------------------------
// One 16-feature step kk of x += (the warp's 16 rows of a_s) · (the rows of b_t)ᵀ: Sᵀ = K Qᵀ with (k_s,
// Q tile), dPᵀ = V dOᵀ with (v_s, dO tile); x[nt]: rows warp_key + g (+ 8), columns 8 nt + 2t (+ 1).
template <int D>
__device__ __forceinline__ void product_t_step(float (&x)[NT][4], const elem_t* a_s, const elem_t* b_t, int kk,
                                               int warp, int lane)
{
    unsigned a[4];
    frag<D>(a, a_s, warp, kk, lane);
    #pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
        unsigned b[4];
        frag<D>(b, b_t, np, kk, lane);
        mma_16816(x[2 * np], a, b[0], b[2]);
        mma_16816(x[2 * np + 1], a, b[1], b[3]);
    }
}

// x = a_s · b_tᵀ and y = c_s · d_tᵀ over the D features: Sᵀ and dPᵀ.
template <int D>
__device__ __forceinline__ void products_t(float (&x)[NT][4], const elem_t* a_s, const elem_t* b_t,
                                           float (&y)[NT][4], const elem_t* c_s, const elem_t* d_t, int warp, int lane)
{
    #pragma unroll
    for (int nt = 0; nt < NT; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) { x[nt][e] = 0.0f; y[nt][e] = 0.0f; }
#if UNROLL
    // The solution's: one loop, both products per feature step, fully unrolled.
    #pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        product_t_step<D>(x, a_s, b_t, kk, warp, lane);
        product_t_step<D>(y, c_s, d_t, kk, warp, lane);
    }
#else
    // One product after the other, each loop rolled.
    #pragma unroll 1
    for (int kk = 0; kk < D / 16; ++kk) product_t_step<D>(x, a_s, b_t, kk, warp, lane);
    #pragma unroll 1
    for (int kk = 0; kk < D / 16; ++kk) product_t_step<D>(y, c_s, d_t, kk, warp, lane);
#endif
}

// ---- The solution's to_a_fragments, as is --------------------------------------------------------------
@SOLUTION_TO_A@

// acc += A · b_t over the tile's BLOCK_M queries: dV += Pᵀ dO with (Pᵀ, dO tile), dK += dSᵀ Q with (dSᵀ,
// Q tile); per 16-query step kk and 16 features dp, B read transposed (feature tiles 2dp, 2dp + 1).
template <int D>
__device__ __forceinline__ void add_product(float (&acc)[D / 8][4], const unsigned (&a)[QSTEPS][4], const elem_t* b_t, int lane)
{
    #pragma unroll
    for (int kk = 0; kk < QSTEPS; ++kk) {
        #pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
            unsigned b[4];
            frag_trans<D>(b, b_t, kk, dp, lane);
            mma_16816(acc[2 * dp], a[kk], b[0], b[1]);
            mma_16816(acc[2 * dp + 1], a[kk], b[2], b[3]);
        }
    }
}

#if !PT_IN_REGS
// The round trip: the C fragments x (the warp's 16 keys × BLOCK_M queries), rounded, into rows warp_key
// .. of a [BLOCK_N][BLOCK_M] tile (two neighbours of a row per 4-byte store), then, once the warp has
// waited for itself, read back as A fragments (a[kk]: queries 16 kk ..).
__device__ __forceinline__ void through_shared(unsigned (&a)[QSTEPS][4], const float (&x)[NT][4], elem_t* tile,
                                               int warp, int lane)
{
    const int g = lane / 4, t = lane % 4, row = warp * 16 + g;
    #pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        *reinterpret_cast<unsigned*>(tile + swz<BLOCK_M>(row, nt * 8 + 2 * t)) = pack2(x[nt][0], x[nt][1]);
        *reinterpret_cast<unsigned*>(tile + swz<BLOCK_M>(row + 8, nt * 8 + 2 * t)) = pack2(x[nt][2], x[nt][3]);
    }
    __syncwarp();
    #pragma unroll
    for (int kk = 0; kk < QSTEPS; ++kk) frag<BLOCK_M>(a[kk], tile, warp, kk, lane);
}
#endif

template <int D>
__global__ void __launch_bounds__(NTHREADS)
flash_backward_tc(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
                  const elem_t* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
                  float* __restrict__ dq_acc, elem_t* __restrict__ dk, elem_t* __restrict__ dv,
                  int H, int H_kv, int n_q, int n_k, float scale, int causal)
{
    static_assert(D % 64 == 0, "the swizzle permutes 8 chunks of 16 bytes: D must be a multiple of 64");
    constexpr int DT = D / 8;                // 8-feature MMA tiles of dK and dV
    constexpr int DQ_DT = DT / DQ_SPLIT;     // 8-feature tiles of dQ per warp
    static_assert(DQ_DT % 2 == 0, "dQ's B fragments come 16 features at a time");
    constexpr int STAGE = 2 * BLOCK_M * D + 4 * BLOCK_M;   // elements of one stage: Q, dO, lse and D
    constexpr int STAGES = ASYNC ? 2 : 1;

    // Shared memory (shared_bytes() in the Python mirrors it): K and V of the block's keys; dSᵀ of the
    // step [key][query]; without PT_IN_REGS, Pᵀ of the step likewise; STAGES stages of
    // [Q tile | dO tile | lse | D].
    extern __shared__ uint4 smem_u4[];
    elem_t* k_s = reinterpret_cast<elem_t*>(smem_u4);    // [BLOCK_N][D]
    elem_t* v_s = k_s + BLOCK_N * D;                     // [BLOCK_N][D]
    elem_t* ds_s = v_s + BLOCK_N * D;                    // [BLOCK_N][BLOCK_M]
#if PT_IN_REGS
    elem_t* stages = ds_s + BLOCK_N * BLOCK_M;           // stage s: stages + s · STAGE
#else
    elem_t* pt_s = ds_s + BLOCK_N * BLOCK_M;             // [BLOCK_N][BLOCK_M]
    elem_t* stages = pt_s + BLOCK_N * BLOCK_M;
#endif

    // ---- The solution's opening lines, as is: the block's key tile, kv head and GQA group, the causal
    // first query tile m_begin, the steps (query head, query tile) ------------------------------------
@SOLUTION_SETUP@

    // Stage it % STAGES of step it: the query tile's rows of Q and dO (zeros past n_q), its lse and D
    // (zeros past n_q, masked below).
    auto load_step = [&](int it) {
        elem_t* st = stages + (it % STAGES) * STAGE;
        const int h = h_kv * group + it / m_tiles, m_start = m_begin + (it % m_tiles) * BLOCK_M;
        const size_t bh = (size_t)(b * H + h) * n_q;
        load_tile<BLOCK_M, D>(st, q + bh * D, m_start, n_q, tid);
        load_tile<BLOCK_M, D>(st + BLOCK_M * D, dout + bh * D, m_start, n_q, tid);
        float* rows_s = reinterpret_cast<float*>(st + 2 * BLOCK_M * D);   // lse, then D: float32
        if (tid < 2 * BLOCK_M) {
            const int r = tid % BLOCK_M;
            const bool valid = m_start + r < n_q;
#if ASYNC
            cp_async_4(rows_s + tid, (tid < BLOCK_M ? lse : delta) + bh + (valid ? m_start + r : 0), valid);
#else
            rows_s[tid] = valid ? (tid < BLOCK_M ? lse : delta)[bh + m_start + r] : 0.0f;
#endif
        }
    };

    // Prologue: K and V (with ASYNC one group of copies, the first step's stage another).
    load_tile<BLOCK_N, D>(k_s, k_b, k_start, n_k, tid);
    load_tile<BLOCK_N, D>(v_s, v_b, k_start, n_k, tid);
#if ASYNC
    cp_async_commit();
    if (n_steps > 0) load_step(0);
    cp_async_commit();
#endif

    float dv_acc[DT][4], dk_acc[DT][4];
    #pragma unroll
    for (int dt = 0; dt < DT; ++dt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) { dv_acc[dt][e] = 0.0f; dk_acc[dt][e] = 0.0f; }

    for (int it = 0; it < n_steps; ++it) {
        const int h = h_kv * group + it / m_tiles, m_start = m_begin + (it % m_tiles) * BLOCK_M;
        const size_t bh = (size_t)(b * H + h) * n_q;
        const elem_t* q_t = stages + (it % STAGES) * STAGE;   // this step's Q tile [BLOCK_M][D]
        const elem_t* do_t = q_t + BLOCK_M * D;              // and dO tile
        const float* lse_t = reinterpret_cast<const float*>(do_t + BLOCK_M * D);   // [BLOCK_M], natural log
        const float* delta_t = lse_t + BLOCK_M;                                    // [BLOCK_M]
#if ASYNC
        // This step's stage has landed (and K, V at the first step); every warp is done with the last
        // step (its stage, ds_s), so the next step's copies may go.
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_steps) load_step(it + 1);
        cp_async_commit();
#else
        __syncthreads();                     // every warp is done with the last step (its stage, pt_s, ds_s)
        load_step(it);
        __syncthreads();                     // this step's stage is in (and K, V at the first step)
#endif
        const bool masked = (causal && k_start + BLOCK_N - 1 > m_start + offset)
                            || k_start + BLOCK_N > n_k || m_start + BLOCK_M > n_q;

        // Sᵀ = K Qᵀ (unscaled) and dPᵀ = V dOᵀ; Pᵀ (the solution's TODO 2, as is), then dV += Pᵀ dO.
        float pT[NT][4], dsT[NT][4];
        products_t<D>(pT, k_s, q_t, dsT, v_s, do_t, warp, lane);
@SOLUTION_P@
        unsigned a[QSTEPS][4];                           // A fragments: Pᵀ, then dSᵀ
#if PT_IN_REGS
        to_a_fragments(a, pT);
#else
        through_shared(a, pT, pt_s, warp, lane);
#endif
        add_product<D>(dv_acc, a, do_t, lane);

        // dSᵀ, dK += dSᵀ Q, and dSᵀ in ds_s for dQ.
#if PT_IN_REGS
        // (The solution's TODO 4, as is.)
@SOLUTION_DS@
#else
        #pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const float2 d2 = *reinterpret_cast<const float2*>(&delta_t[nt * 8 + 2 * t]);
            #pragma unroll
            for (int e = 0; e < 4; ++e) dsT[nt][e] = pT[nt][e] * (dsT[nt][e] - (e % 2 ? d2.y : d2.x));
        }
        through_shared(a, dsT, ds_s, warp, lane);        // ds_s holds dSᵀ for dQ, too
        add_product<D>(dk_acc, a, q_t, lane);
#endif
        __syncthreads();                     // every warp's keys of dSᵀ are in ds_s

        // dQ += dS K: warp w takes row tile mq = w % ROW_TILES of the query tile and the features of its
        // part fq = w / ROW_TILES; C fragments, rows 16 mq + g (+ 8), features 8 (fq · DQ_DT + dt) + 2t (+ 1).
        const int mq = warp % ROW_TILES, fq = warp / ROW_TILES;
        float dq_frag[DQ_DT][4], dq_odd[DQ_DT][4];
        #pragma unroll
        for (int dt = 0; dt < DQ_DT; ++dt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) { dq_frag[dt][e] = 0.0f; dq_odd[dt][e] = 0.0f; }
#if DQ_TWO
        #pragma unroll
#elif UNROLL
        #pragma unroll 4
#else
        #pragma unroll 1
#endif
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
            unsigned ds_a[4];
            frag_trans_across<BLOCK_M>(ds_a, ds_s, kk, mq, lane);
            #pragma unroll
            for (int dp = 0; dp < DQ_DT / 2; ++dp) {
                unsigned kb[4];                  // K as B: the keys are the k index
                frag_trans<D>(kb, k_s, kk, fq * DQ_DT / 2 + dp, lane);
                mma_16816(DQ_TWO && kk % 2 ? dq_odd[2 * dp] : dq_frag[2 * dp], ds_a, kb[0], kb[1]);
                mma_16816(DQ_TWO && kk % 2 ? dq_odd[2 * dp + 1] : dq_frag[2 * dp + 1], ds_a, kb[2], kb[3]);
            }
        }
#if DQ_TWO
        #pragma unroll
        for (int dt = 0; dt < DQ_DT; ++dt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) dq_frag[dt][e] += dq_odd[dt][e];
#endif
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int i = m_start + mq * 16 + g + 8 * r;
            if (i < n_q) {
                float* row = dq_acc + (bh + i) * D + fq * DQ_DT * 8 + 2 * t;
                #pragma unroll
                for (int dt = 0; dt < DQ_DT; ++dt) {
#if ATOMIC2
                    atomic_add2(row + dt * 8, dq_frag[dt][2 * r], dq_frag[dt][2 * r + 1]);
#else
                    atomicAdd(row + dt * 8, dq_frag[dt][2 * r]);
                    atomicAdd(row + dt * 8 + 1, dq_frag[dt][2 * r + 1]);
#endif
                }
            }
        }
    }
#if ASYNC
    cp_async_wait<0>();                      // no copy outlives the block
#endif

    // dV and scale · dK (the solution's TODO 6, as is).
@SOLUTION_STORE@
}

// ---- The solution's convert_dq, as is -------------------------------------------------------------------
@SOLUTION_CONVERT@
"""

SWITCHES = ("USE_LDMATRIX", "PT_IN_REGS", "ASYNC", "SWIZZLE", "ATOMIC2", "UNROLL", "DQ_TWO")


def _switches(n_on: int) -> dict:
    """The first n_on switches on, the others off."""
    return {name: int(i < n_on) for i, name in enumerate(SWITCHES)}


# The ladder: each step one switch more. None: the solution's own flash_backward_tc.
STEPS = [
    ("mma", _switches(0)),
    ("+ldmatrix", _switches(1)),
    ("+Pᵀ in registers", _switches(2)),
    ("+cp.async", _switches(3)),
    ("+swizzle", _switches(4)),
    ("+8-byte atomics", _switches(5)),
    ("+unrolled", _switches(6)),
    ("+two dQ chains (solution)", None),
]
ALL_ON = ("(variant, all on)", _switches(7))
SOLUTION_LABEL = STEPS[-1][0]

# scripts/backward_tc_variants.py's cases (tiny, a tile plus one, GQA, scores far below zero, causal with
# query rows past the key tiles, bfloat16 GQA causal at d = 128) and float16 at d = 128.
CHECK_CASES = tuple(BV.CHECK_CASES) + ("head_dim_128",)
GPU_CHECK_CASES = CHECK_CASES
BENCH = dict(B=2, H=16, N=4096)
SEED = BV.SEED


# ---- The kernel text: the ladder's own lines and the solution's -----------------------------------------

_MARKER = re.compile(r"^\s*//\s*(BEGIN|END) SOLUTION")


def solution_code(first: str | None, before: str | None) -> str:
    """Lines of the solution's KERNEL from the one that begins with `first` (after its indentation; None:
    the first line) up to, not including, the next one that begins with `before` (None: to the end); the
    BEGIN/END SOLUTION marker lines left out. An error names what was not found, should the text move."""
    lines = SOL.KERNEL.strip("\n").split("\n")
    if first is None:
        start = 0
    else:
        starts = [i for i, s in enumerate(lines) if s.strip().startswith(first)]
        if len(starts) != 1:
            raise RuntimeError(f"solutions/11_backward_tensor_cores.py: {len(starts)} lines begin with {first!r}, not one")
        start = starts[0]
    end = len(lines)
    if before is not None:
        end = next((k for k in range(start + 1, len(lines)) if lines[k].strip().startswith(before)), None)
        if end is None:
            raise RuntimeError(f"solutions/11_backward_tensor_cores.py: no line {before!r} after {first!r}")
    return "\n".join(s for s in lines[start:end] if not _MARKER.match(s)).rstrip()


@functools.lru_cache(maxsize=None)
def source() -> str:
    pieces = {
        "@SOLUTION_HEAD@": solution_code(None, "// ---- Shared memory: swizzled tiles"),
        "@SOLUTION_SWZ@": solution_code("// ---- Shared memory: swizzled tiles", "// Rows [row0, row0 + ROWS)"),
        "@SOLUTION_TILES@": solution_code("// Rows [row0, row0 + ROWS)", "// ---- The products of one step"),
        "@SOLUTION_TO_A@": solution_code("// The C fragments of x (16 rows", "// acc += A · b_t"),
        "@SOLUTION_SETUP@": solution_code("const int tid = threadIdx.x, warp", "// Stage it % 2 of step it"),
        "@SOLUTION_P@": solution_code("// BEGIN SOLUTION TODO(2)", "// END SOLUTION"),
        "@SOLUTION_DS@": solution_code("// BEGIN SOLUTION TODO(4)", "// END SOLUTION"),
        "@SOLUTION_STORE@": solution_code("// BEGIN SOLUTION TODO(6): store the warp's rows", "// END SOLUTION"),
        "@SOLUTION_CONVERT@": solution_code("// dq = scale · dq_acc", None),
    }
    text = KERNEL
    for key, piece in pieces.items():
        assert text.count(key) == 1, key
        text = text.replace(key, piece)
    return text


def shared_bytes(d: int, sw: dict) -> int:
    """The kernel's layout: K and V, dSᵀ (and Pᵀ without PT_IN_REGS), STAGES stages of a Q tile, a dO
    tile and BLOCK_M floats of lse and of D."""
    m, n, e = SOL.CONFIG[d]["BLOCK_M"], SOL.CONFIG[d]["BLOCK_N"], SOL.ELEMENT_BYTES
    stages = 2 if sw["ASYNC"] else 1
    return e * (2 * n * d + n * m * (1 if sw["PT_IN_REGS"] else 2)) + stages * (e * 2 * m * d + 4 * 2 * m)


@functools.lru_cache(maxsize=None)
def step_module(switches: tuple):
    """A fresh copy of the solution's module with the ladder's KERNEL, the switches added to CONFIG[d]
    (they become -D options in its _module) and the step's shared_bytes: the solution's launch code."""
    sw = dict(switches)
    mod = BV.load_solution("solution_11_ladder_" + "".join(str(v) for _, v in switches))
    mod.KERNEL = source()
    mod.CONFIG = {d: dict(mod.CONFIG[d], **sw) for d in mod.CONFIG}
    mod.shared_bytes = lambda d: shared_bytes(d, sw)
    return mod


RESOURCES: dict = {}   # (step label, d, elem) -> registers and local bytes of the main kernel


def _record(rt, mod, label, d, elem):
    """The main kernel's registers, read when its module is first built: on the emulator, ptxas's report
    from its NVRTC pass (sm_90); on a GPU, the driver's attributes."""
    if (label, d, elem) in RESOURCES:
        return
    module = mod._module(rt, elem, tuple(mod.CONFIG[d].items()))
    name = f"flash_backward_tc<{d}>"
    info = getattr(rt, "ptxas_report", {}).get(name)
    if not info:
        try:
            info = module.get_function(name).attributes
        except Exception:
            info = {}
    RESOURCES[label, d, elem] = dict(num_regs=info.get("num_regs", "?"), local_size_bytes=info.get("local_size_bytes", "?"),
                                     shared_bytes=mod.shared_bytes(d))


def ladder_step(label: str, switches: dict | None):
    """The function of one step, with the solution's signature: (rt, q, k, v, o, lse, do, scale,
    causal=False, dtype=None) -> (dq, dk, dv). None: the solution's flash_backward_tc itself."""
    mod = SOL if switches is None else step_module(tuple(sorted(switches.items())))

    def flash_backward_tc_ladder(rt, q, k, v, o, lse, do, scale, causal=False, dtype=None):
        d = q.shape[-1]
        if d in mod.CONFIG:
            _record(rt, mod, label, d, mod.element_type((q, k, v, o, do), dtype))
        return mod.flash_backward_tc(rt, q, k, v, o, lse, do, scale, causal=causal, dtype=dtype)
    return flash_backward_tc_ladder


# ---- Checks: module 11's cases, reference, tolerance rule and faults ------------------------------------

GRADS = ("dq", "dk", "dv")


def _diff(out: dict, base: dict) -> dict:
    """Per gradient: 0.0 where bit for bit the same as base (NaN for NaN), else the largest |difference|."""
    res = {}
    for name in GRADS:
        a, b = np.asarray(out[name], dtype=np.float64), np.asarray(base[name], dtype=np.float64)
        res[name] = 0.0 if np.array_equal(a, b, equal_nan=True) else float(np.nan_to_num(np.abs(a - b), nan=np.inf).max())
    return res


def run_checks(rt, case_names, steps, exact: tuple) -> set:
    """Every step on the named cases: module 11's verdict, and how far its gradients lie from the
    solution's on the same inputs (ALL_ON must equal them bit for bit in `exact`). -> the labels of
    the steps that failed a check."""
    from grader.catalogue import resolve
    from grader.engine.runner import run_case
    from grader.tasks import load_task
    ex = resolve("11_backward_tensor_cores")
    cases = {c.name: c for c in load_task(ex).CASES}
    solution = {}                              # case -> (result, outputs) of the solution
    for name in case_names:
        keep = {}
        t0 = time.time()
        res = run_case(ex, cases[name], ladder_step(SOLUTION_LABEL, None), rt, SEED, Path(__file__), keep)
        solution[name] = (res, keep.get("out"), time.time() - t0)
    failed = set()
    for label, sw in steps:
        fn = ladder_step(label, sw)
        for name in case_names:
            if sw is None:
                res, out, dt = solution[name]
            else:
                keep = {}
                t0 = time.time()
                res = run_case(ex, cases[name], fn, rt, SEED, Path(__file__), keep)
                out, dt = keep.get("out"), time.time() - t0
            ok = res.passed
            vs = ""
            if sw is not None and out is not None and solution[name][1] is not None:
                diff = _diff(out, solution[name][1])
                if all(v == 0.0 for v in diff.values()):
                    vs = "= solution, bit for bit"
                else:
                    vs = "vs solution max |Δ| " + " ".join(f"{g} {diff[g]:.1e}" for g in GRADS)
                if (label, sw) == ALL_ON and any(diff[g] != 0.0 for g in exact):
                    ok = False
                    vs += f"  (must equal the solution's {', '.join(exact)} bit for bit)"
            if not ok:
                failed.add(label)
            p = res.params
            err = f"rel err {res.rel_err:.2e}" if res.rel_err is not None else ""
            print(f"  {'ok  ' if ok else 'FAIL'} {label:22} {name:30} {p['dtype']:8} d={p['d']:<3} "
                  f"{'causal' if p['causal'] else '      '} {err:18} {vs}  ({dt:.1f} s)", flush=True)
            if not res.passed:
                print("       " + res.message.replace("\n", "\n       "), flush=True)
    return failed


def resource_lines(steps):
    """(step, d, type, registers, local bytes, shared bytes) of each step compiled so far, in ladder order."""
    order = {label: i for i, (label, _) in enumerate(steps)}
    for (label, d, elem), info in sorted(RESOURCES.items(), key=lambda kv: (order.get(kv[0][0], 99), -kv[0][1], kv[0][2])):
        yield label, d, elem, info["num_regs"], info["local_size_bytes"], info["shared_bytes"]


def check_all(rt, case_names, where: str, exact: tuple) -> set:
    """Every step and the all-on variant on the named cases, then their registers; the labels that failed."""
    failed = run_checks(rt, case_names, STEPS + [ALL_ON], exact)
    print(f"\n## Registers of flash_backward_tc ({where})")
    for label, d, elem, regs, local, smem in resource_lines(STEPS + [ALL_ON]):
        print(f"  {label:22} d={d:<3} {elem:8} {regs} registers, {local} B local (stack, spills), "
              f"{smem / 1024:.1f} KB shared")
    return failed


def cpu_check() -> int:
    from grader.runtimes import get_runtime
    t0 = time.time()
    print("# CPU emulator: every step on module 11's cases (its reference, tolerance rule, faults, race and "
          "block-order checks); the all-on variant must equal the solution bit for bit")
    failed = check_all(get_runtime("cpu"), CHECK_CASES, "ptxas for sm_90, through NVRTC", exact=GRADS)
    if failed:
        print(f"\nFAILED: {sorted(failed)} ({time.time() - t0:.0f} s)")
        return 1
    print(f"\nall steps ok ({time.time() - t0:.0f} s)")
    return 0


# ---- Timing (GPU) ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _course_solution(ex_id: str):
    """What BenchContext.solution gives grader bench's baselines: the course's finished module."""
    return TC.load("solution_" + ex_id.replace("_", "")[:2] + "_bench", ex_id + ".py")


def contenders(rt, inputs, params, skip):
    """(label, call, torch's) of everything timed on one input: the steps that passed their checks,
    module 09's float32 backward, torch's FlashAttention-2 and cuDNN backward (grader bench 11's
    baselines)."""
    from grader.attention.baselines import torch_sdpa_backward
    from grader.spec import BenchContext
    from grader.tasks.backward_tensor_cores.bench import float32_09
    args = tuple(inputs[x] for x in ("q", "k", "v", "o", "lse", "do", "scale"))
    ctx = BenchContext(rt, inputs, params, _course_solution)

    def ours(label, sw):
        fn = ladder_step(label, sw)
        return lambda: dict(zip(GRADS, fn(rt, *args, causal=False)))

    def baseline(run):
        return lambda: run(ctx)
    return ([(label, ours(label, sw), False) for label, sw in STEPS if label not in skip]
            + [("module 09 (float32)", baseline(float32_09), False),
               ("torch FA2", baseline(torch_sdpa_backward("FLASH_ATTENTION")), True),
               ("torch cuDNN", baseline(torch_sdpa_backward("CUDNN_ATTENTION")), True)])


def gpu_main(out_path: str | None) -> int:
    from grader.attention.baselines import backward_flops
    from grader.runtimes import get_runtime
    rt = get_runtime("gpu")
    cp = rt.xp
    t_start = time.time()
    print(f"# {rt.device_name}, CuPy {cp.__version__}")
    print("\n## Correctness: module 11's cases on the GPU, every step (the all-on variant's dK and dV must "
          "equal the solution's bit for bit; dQ's atomics add in any order)")
    failed = check_all(rt, GPU_CHECK_CASES, "the driver's attributes", exact=("dk", "dv"))
    if failed:
        print(f"\ncheck(s) FAILED: {sorted(failed)}: those steps are not timed")
    try:
        import torch
        torch_event = (TC.make_event(torch=torch), torch.cuda.synchronize)
        print(f"\n# torch {torch.__version__}")
    except Exception as e:
        print(f"torch is not usable ({type(e).__name__}: {e}): no FlashAttention-2 or cuDNN baseline")
        torch_event = None

    B, H, N = BENCH["B"], BENCH["H"], BENCH["N"]
    cupy_event = (TC.make_event(cp=cp), rt.synchronize)
    rows = []
    result = dict(gpu=rt.device_name, date=datetime.date.today().isoformat(), script="scripts/backward_tc_ladder.py",
                  shape=dict(BENCH, dtype="float16", causal=False),
                  method=f"{TC.WARMUP} warm-up, {TC.REPS} calls back to back between two CUDA events, ms per call, "
                         "the median of three such timings; the backward's three launches (preprocess, kernel, "
                         "convert_dq); torch: one torch.autograd.grad per call",
                  failed_checks=sorted(failed), rows=rows)

    def write():
        result["resources"] = [dict(step=s, d=d, dtype=e, num_regs=r, local_bytes=lo, shared_bytes=sm)
                               for s, d, e, r, lo, sm in resource_lines(STEPS + [ALL_ON])]
        if out_path:
            Path(out_path).write_text(json.dumps(result, indent=1) + "\n")

    print("\n## Timing")
    for d in (128, 64):
        params = dict(B=B, H=H, Hkv=H, Nq=N, Nk=N, d=d, dtype="float16", causal=False)
        inputs = {x: cp.random.standard_normal((B, H, N, d), dtype=cp.float32).astype(cp.float16)
                  for x in ("q", "k", "v", "do")}
        inputs["scale"], inputs["causal"] = 1.0 / d ** 0.5, False
        inputs["o"], inputs["lse"] = SOL06.flash_tc(rt, inputs["q"], inputs["k"], inputs["v"], inputs["scale"])
        flops = backward_flops(params)
        todo = contenders(rt, inputs, params, skip=failed)
        # The solution's gradients, which each step's are compared with (its own rerun too: dQ's atomics
        # add in any order, so its last bits move from run to run).
        base = {label: fn for label, fn, _ in todo}.get(SOLUTION_LABEL)
        base = {g: cp.asnumpy(x).astype(np.float32) for g, x in base().items()} if base else None
        for label, fn, is_torch in todo:
            if is_torch and torch_event is None:
                continue
            try:
                out = fn()
                ms = statistics.median(TC.time_calls(fn, *(torch_event if is_torch else cupy_event))
                                       for _ in range(3))
            except Exception as e:             # a baseline may be missing (a backend refusing)
                print(f"  {label} at d={d}: not timed ({type(e).__name__}: {str(e).splitlines()[0]})")
                continue
            diff = None
            if label in dict(STEPS) and base is not None:
                diff = _diff({g: cp.asnumpy(out[g]).astype(np.float32) for g in GRADS}, base)
            rows.append(dict(step=label, d=d, ms=ms, tflops=flops / (ms * 1e-3) / 1e12, diff_vs_solution=diff))
            print(f"  timed d={d:<3} {label:22} {ms:8.3f} ms", flush=True)
            write()

    print(f"\n## Speed ladder: B={B}, H={H}, N={N}, float16, non-causal, the backward, ms per call (median of 3 "
          f"timings of {TC.REPS} calls back to back after {TC.WARMUP} warm-up), {rt.device_name}, "
          f"{result['date']}\n")
    print("| step | d | ms | TFLOP/s | × previous | × cuDNN | × FA2 | max abs Δ vs solution (dq dk dv) |")
    print("|---|---|---|---|---|---|---|---|")
    ms_of = {(r["step"], r["d"]): r["ms"] for r in rows}
    step_labels = [label for label, _ in STEPS]
    for r in rows:
        for key, base_label in (("x_cudnn", "torch cuDNN"), ("x_fa2", "torch FA2")):
            r[key] = ms_of[base_label, r["d"]] / r["ms"] if (base_label, r["d"]) in ms_of else None
        prev = None
        if r["step"] in step_labels and step_labels.index(r["step"]) > 0:
            prev = ms_of.get((step_labels[step_labels.index(r["step"]) - 1], r["d"]))
        r["x_previous"] = prev / r["ms"] if prev else None
        ratios = [f"{x:.2f}×" if x is not None else "—" for x in (r["x_previous"], r["x_cudnn"], r["x_fa2"])]
        diff = "" if r["diff_vs_solution"] is None else " ".join(
            "0" if r["diff_vs_solution"][g] == 0.0 else f"{r['diff_vs_solution'][g]:.1e}" for g in GRADS)
        print(f"| {r['step']} | {r['d']} | {r['ms']:.3f} | {r['tflops']:.0f} | {ratios[0]} | {ratios[1]} | "
              f"{ratios[2]} | {diff} |")
    print(f"\n(× previous: the step before's time / this time; × cuDNN, × FA2: that backend's time / this time; "
          f"{time.time() - t_start:.0f} s in all)")
    write()
    if out_path:
        print(f"figures written to {out_path}")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="check every step on the CPU emulator only")
    ap.add_argument("--out", help="GPU mode: also write the figures to this JSON file")
    args = ap.parse_args()
    if args.check:
        return cpu_check()
    return gpu_main(args.out)


if __name__ == "__main__":
    sys.exit(main())
