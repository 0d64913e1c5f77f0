#!/usr/bin/env python3
"""Module 06's speed ladder: the time of the tensor-core kernel after each idea of the lesson.

    python scripts/tc_ladder.py            # on a GPU: check each step, then time them (a few minutes)
    python scripts/tc_ladder.py --check    # every step on the CPU emulator, against float64 NumPy

One kernel text (below), derived from solutions/06_flash_tensor_cores.py, with compile-time switches;
each step turns one more on. Every step is a complete, correct kernel (float16, d = 64 and 128, any Nq
and Nk, non-causal and causal), with the solution's CONFIG for its d (BLOCK_M, BLOCK_N, WARPS, Q_IN_REGS):

    1. mma              mma.sync for S = Q Kᵀ and P V; fragments read from shared memory with plain
                        32-bit loads, element by element of the documented fragment layout (V's B
                        fragments, which pair two rows, with two 16-bit loads); K/V tiles copied with
                        plain 16-byte loads and __syncthreads (one stage); no swizzle; P written to
                        shared memory (a region per warp) and read back as A fragments.
    2. +ldmatrix        ldmatrix / ldmatrix.trans for the Q, K, V (and still P) fragments.   USE_LDMATRIX=1
    3. +P in registers  the S accumulator fragment, rounded, is PV's A fragment: no shared round trip.
                                                                                            P_IN_REGS=1
    4. +cp.async        K/V tiles streamed by cp.async, double-buffered, one tile ahead.        ASYNC=1
    5. +swizzle         the XOR swizzle of the shared tiles: the solution itself (called as is; the
                        variant with every switch on, SWIZZLE=1, is the same kernel and is checked too).

Timing (GPU): B=2, H=16, N=4096, float16, non-causal; 5 warm-up calls, then 20 calls queued back to
back between two CUDA events, ms per call; next to module 02's float32 kernel and torch's
FlashAttention-2 backend (if torch is importable). TFLOP/s counts 4·B·H·N²·d flops.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KERNEL = r"""
#include <cuda_fp16.h>

// From the launch code: -DBLOCK_M -DBLOCK_N -DWARPS -DQ_IN_REGS (the solution's CONFIG) and the
// switches of the ladder, each 0 or 1:
//   USE_LDMATRIX  fragments read with ldmatrix(.trans); 0: plain loads, element pairs by the layout
//   P_IN_REGS     P goes from S's accumulators straight into PV's A fragments; 0: through shared memory
//   ASYNC         K/V tiles by cp.async, two stages; 0: 16-byte loads and stores, one stage
//   SWIZZLE       shared tiles XOR-swizzled (chunk c of row r at c ^ (r % 8)); 0: plain row-major
#if !defined(BLOCK_M) || !defined(BLOCK_N) || !defined(WARPS) || !defined(Q_IN_REGS) || \
    !defined(USE_LDMATRIX) || !defined(P_IN_REGS) || !defined(ASYNC) || !defined(SWIZZLE)
#error "the tile sizes and the switches come from the launch code as -D options"
#endif
constexpr int NTHREADS = WARPS * 32;
constexpr int WARP_M = BLOCK_M / WARPS;     // query rows per warp
constexpr int MT = WARP_M / 16;             // 16-row MMA tiles per warp
constexpr int NT = BLOCK_N / 8;             // 8-key MMA tiles of S per warp
static_assert(WARP_M % 16 == 0, "a warp owns whole 16-row MMA tiles");
static_assert(BLOCK_N % 16 == 0, "P V takes keys 16 at a time");

typedef __half elem_t;

__device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    __half2 x = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&x);
}

// ---- The PTX instructions (as in the solution) -----------------------------------------------------
// Fragments of mma.m16n8k16 (lane = 4 g + t):
//   A, 16 × 16:  a[0] = (row g, cols 2t, 2t+1)  a[1] = (row g+8, cols 2t, 2t+1)
//                a[2] = (row g, cols 2t+8, 2t+9) a[3] = (row g+8, cols 2t+8, 2t+9)
//   B, 16 × 8:   b0 = (k 2t, 2t+1; col g)   b1 = (k 2t+8, 2t+9; col g)
//   C, 16 × 8:   d[0], d[1] = (row g, cols 2t, 2t+1)   d[2], d[3] = (row g+8, cols 2t, 2t+1)
__device__ __forceinline__ void mma_16816(float d[4], const unsigned a[4], unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
                   "f"(d[0]), "f"(d[1]), "f"(d[2]), "f"(d[3]));
}

__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

#if USE_LDMATRIX
__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const elem_t* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const elem_t* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
#endif

#if ASYNC
__device__ __forceinline__ void cp_async_16(elem_t* dst, const elem_t* src, bool valid)
{
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }
#endif

// ---- Shared tiles --------------------------------------------------------------------------------
// Element offset of (row, col) in a [rows][W] tile, swizzled or not (any col: the swizzle moves whole
// 16-byte chunks, the position inside a chunk stays).
template <int W>
__device__ __forceinline__ int at(int row, int col)
{
#if SWIZZLE
    return row * W + (((col / 8) ^ (row % 8)) * 8) + col % 8;
#else
    return row * W + col;
#endif
}

// Rows [row0, row0 + ROWS) of a [n_rows][D] matrix -> a [ROWS][D] tile, 16 bytes per thread and step
// (coalesced); rows past n_rows are zero-filled.
template <int ROWS, int D>
__device__ __forceinline__ void load_tile(elem_t* tile, const elem_t* src, int row0, int n_rows, int tid)
{
    constexpr int CHUNKS = D / 8;                // 16-byte chunks per row
    constexpr int ROW_STEP = NTHREADS / CHUNKS;  // rows that one pass of the block copies
    static_assert(NTHREADS % CHUNKS == 0 && ROW_STEP % 8 == 0 && ROWS % ROW_STEP == 0,
                  "the block copies whole rows, ROW_STEP (a multiple of 8) at a time");
    const int r = tid / CHUNKS, c = (tid % CHUNKS) * 8;
    #pragma unroll
    for (int n = 0; n < ROWS / ROW_STEP; ++n) {
        const int row = r + n * ROW_STEP;
        const bool valid = row0 + row < n_rows;
        elem_t* dst = tile + at<D>(row, c);
        const elem_t* g = src + (size_t)(row0 + row) * D + c;
#if ASYNC
        cp_async_16(dst, valid ? g : src, valid);     // not waited for here: see the pipeline
#else
        uint4 x = {0u, 0u, 0u, 0u};
        if (valid) x = *reinterpret_cast<const uint4*>(g);
        *reinterpret_cast<uint4*>(dst) = x;           // visible to the block after a __syncthreads
#endif
    }
}

// The four registers of the 16 × 16 block at rows 16 r16 .., cols 16 c16 .. of a [rows][W] tile, in
// A's layout: r[i] = matrix i (rows 8 (i % 2) .., cols 8 (i / 2) ..), row g, cols 2t, 2t + 1. That is
// Q's and P's A fragment and, for a [key][feature] K tile, the B fragments of two 8-key tiles
// (r[0], r[2] and r[1], r[3]).
template <int W>
__device__ __forceinline__ void load_frag(unsigned r[4], const elem_t* tile, int r16, int c16, int lane)
{
#if USE_LDMATRIX
    ldmatrix_x4(r, tile + at<W>(r16 * 16 + lane % 16, c16 * 16 + (lane / 16) * 8));
#else
    const int g = lane / 4, t = lane % 4;
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        r[i] = *reinterpret_cast<const unsigned*>(tile + at<W>(r16 * 16 + 8 * (i % 2) + g, c16 * 16 + 8 * (i / 2) + 2 * t));
#endif
}

// The same block with each 8 × 8 matrix transposed: r[i] = rows 2t, 2t + 1 of column g of matrix i.
// For a [key][feature] V tile, the B fragments of two 8-feature tiles (r[0], r[1] and r[2], r[3]).
// Without ldmatrix the two elements sit in two rows: two 16-bit loads per register.
template <int W>
__device__ __forceinline__ void load_frag_trans(unsigned r[4], const elem_t* tile, int r16, int c16, int lane)
{
#if USE_LDMATRIX
    ldmatrix_x4_trans(r, tile + at<W>(r16 * 16 + lane % 16, c16 * 16 + (lane / 16) * 8));
#else
    const int g = lane / 4, t = lane % 4;
    const unsigned short* bits = reinterpret_cast<const unsigned short*>(tile);
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = r16 * 16 + 8 * (i % 2) + 2 * t, col = c16 * 16 + 8 * (i / 2) + g;
        r[i] = (unsigned)bits[at<W>(row, col)] | ((unsigned)bits[at<W>(row + 1, col)] << 16);
    }
#endif
}

template <int D>
__global__ void __launch_bounds__(NTHREADS)
flash_tc_ladder(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
                elem_t* __restrict__ o, float* __restrict__ lse,
                int H, int H_kv, int n_q, int n_k, float scale, int causal)
{
    static_assert(D % 64 == 0, "the swizzle permutes 8 chunks of 16 bytes: D must be a multiple of 64");
    constexpr int KSTEPS = D / 16;
    constexpr int DT = D / 8;
    constexpr int TILE = BLOCK_N * D;        // elements of one K or V tile
    constexpr int STAGES = ASYNC ? 2 : 1;
    constexpr int P_ELEMS = P_IN_REGS ? 0 : BLOCK_M * BLOCK_N;

    // Shared memory: STAGES × [K tile | V tile], then P ([BLOCK_M][BLOCK_N], warp w its WARP_M rows),
    // then Q. With Q_IN_REGS, Q's fragments are read before the stage it borrows is first written:
    // stage 1 with ASYNC (tile 0 goes to stage 0 at once), stage 0 without (written after a barrier).
    // Python's shared_bytes() mirrors this.
    extern __shared__ uint4 smem_u4[];
    elem_t* smem = reinterpret_cast<elem_t*>(smem_u4);
#if !P_IN_REGS
    elem_t* p_s = smem + 2 * STAGES * TILE;
#endif
    elem_t* q_s = smem + (Q_IN_REGS ? (ASYNC ? 2 * TILE : 0) : 2 * STAGES * TILE + P_ELEMS);

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const int q_start = (gridDim.x - 1 - blockIdx.x) * BLOCK_M;
    const int h = blockIdx.y, b = blockIdx.z;
    const int h_kv = h / (H / H_kv);
    const elem_t* q_bh = q + (size_t)(b * H + h) * n_q * D;
    const elem_t* k_bh = k + (size_t)(b * H_kv + h_kv) * n_k * D;
    const elem_t* v_bh = v + (size_t)(b * H_kv + h_kv) * n_k * D;
    const int warp_row = warp * WARP_M;
    const float scale_log2 = scale * M_LOG2E_F;
    const int offset = n_k - n_q;
    const int q_last = min(q_start + BLOCK_M, n_q) - 1;
    const int kv_end = causal ? min(n_k, q_last + offset + 1) : n_k;
    const int n_tiles = kv_end > 0 ? (kv_end + BLOCK_N - 1) / BLOCK_N : 0;

    // Prologue: Q (and with ASYNC, K/V tile 0 into stage 0 as a second group of copies).
    load_tile<BLOCK_M, D>(q_s, q_bh, q_start, n_q, tid);
#if ASYNC
    cp_async_commit();
    if (n_tiles > 0) {
        load_tile<BLOCK_N, D>(smem, k_bh, 0, n_k, tid);
        load_tile<BLOCK_N, D>(smem + TILE, v_bh, 0, n_k, tid);
    }
    cp_async_commit();
#endif

#if Q_IN_REGS
    unsigned q_frag[MT][KSTEPS][4];
#if ASYNC
    cp_async_wait<1>();                      // Q has landed (tile 0 may still be in flight)
#endif
    __syncthreads();
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk)
            load_frag<D>(q_frag[mt][kk], q_s, warp_row / 16 + mt, kk, lane);
#endif
    auto q_fragment = [&](unsigned (&a)[4], int mt, int kk) {
#if Q_IN_REGS
        #pragma unroll
        for (int x = 0; x < 4; ++x) a[x] = q_frag[mt][kk][x];
#else
        load_frag<D>(a, q_s, warp_row / 16 + mt, kk, lane);
#endif
    };

    float m[MT][2], l[MT][2], acc[MT][DT][4];
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        #pragma unroll
        for (int r = 0; r < 2; ++r) { m[mt][r] = -INFINITY; l[mt][r] = 0.0f; }
        #pragma unroll
        for (int dt = 0; dt < DT; ++dt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][dt][e] = 0.0f;
    }

    for (int it = 0; it < n_tiles; ++it) {
        const int kv_start = it * BLOCK_N;
#if ASYNC
        const elem_t* k_t = smem + (it % 2) * 2 * TILE;      // this tile's stage
        cp_async_wait<0>();                  // tile it (issued an iteration ago) is in, for this thread
        __syncthreads();                     // ... and for all; every warp is done with tile it - 1
        if (it + 1 < n_tiles) {
            elem_t* next = smem + ((it + 1) % 2) * 2 * TILE;
            load_tile<BLOCK_N, D>(next, k_bh, kv_start + BLOCK_N, n_k, tid);
            load_tile<BLOCK_N, D>(next + TILE, v_bh, kv_start + BLOCK_N, n_k, tid);
            cp_async_commit();
        }
#else
        const elem_t* k_t = smem;            // one stage: load, wait, compute, wait
        __syncthreads();                     // every warp is done with tile it - 1 (and with Q)
        load_tile<BLOCK_N, D>(smem, k_bh, kv_start, n_k, tid);
        load_tile<BLOCK_N, D>(smem + TILE, v_bh, kv_start, n_k, tid);
        __syncthreads();                     // tile it is in
#endif
        const elem_t* v_t = k_t + TILE;

        // S = Q Kᵀ
        float s[MT][NT][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                #pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
        #pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
            unsigned a[MT][4];
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) q_fragment(a[mt], mt, kk);
            #pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                unsigned kb[4];
                load_frag<D>(kb, k_t, np, kk, lane);
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_16816(s[mt][2 * np], a[mt], kb[0], kb[2]);
                    mma_16816(s[mt][2 * np + 1], a[mt], kb[1], kb[3]);
                }
            }
        }

        // Masks: keys past n_k, and with causal the keys above the diagonal.
        const bool diagonal = causal && kv_start + BLOCK_N - 1 > q_start + offset;
        if (diagonal || kv_start + BLOCK_N > n_k) {
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                #pragma unroll
                for (int nt = 0; nt < NT; ++nt)
                    #pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int i = q_start + warp_row + mt * 16 + g + 8 * (e / 2);
                        const int j = kv_start + nt * 8 + 2 * t + e % 2;
                        if (j >= n_k || (causal && j > i + offset)) s[mt][nt][e] = -INFINITY;
                    }
        }

        // The online softmax on fragment rows (as in the solution); s then holds P.
        // p[mt][kk]: P as the A fragment of P V for rows warp_row + 16 mt .., keys kv_start + 16 kk ..
        unsigned p[MT][NT / 2][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                float mx = -INFINITY;
                #pragma unroll
                for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_new = fmaxf(m[mt][r], mx * scale_log2);
                const float m_use = m_new == -INFINITY ? 0.0f : m_new;
                const float alpha = exp2f(m[mt][r] - m_use);
                m[mt][r] = m_new;
                l[mt][r] *= alpha;
                #pragma unroll
                for (int dt = 0; dt < DT; ++dt) {
                    acc[mt][dt][2 * r] *= alpha;
                    acc[mt][dt][2 * r + 1] *= alpha;
                }
                #pragma unroll
                for (int nt = 0; nt < NT; ++nt)
                    #pragma unroll
                    for (int e = 2 * r; e < 2 * r + 2; ++e) {
                        s[mt][nt][e] = exp2f(fmaf(s[mt][nt][e], scale_log2, -m_use));
                        l[mt][r] += s[mt][nt][e];
                    }
            }
#if P_IN_REGS
            // S tiles 2kk and 2kk + 1, element for element, are the A fragment of keys 16 kk ..
            #pragma unroll
            for (int kk = 0; kk < NT / 2; ++kk) {
                p[mt][kk][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                p[mt][kk][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                p[mt][kk][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                p[mt][kk][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#endif
        }
#if !P_IN_REGS
        // The round trip: each lane stores its C fragments (rounded) into the warp's rows of p_s, the
        // warp waits for itself, then reads them back as A fragments. (The barrier at the top of the
        // next iteration keeps the next stores behind these reads.)
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int row = warp_row + mt * 16 + g, col = nt * 8 + 2 * t;
                *reinterpret_cast<unsigned*>(p_s + at<BLOCK_N>(row, col)) = pack2(s[mt][nt][0], s[mt][nt][1]);
                *reinterpret_cast<unsigned*>(p_s + at<BLOCK_N>(row + 8, col)) = pack2(s[mt][nt][2], s[mt][nt][3]);
            }
        __syncwarp();
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int kk = 0; kk < NT / 2; ++kk)
                load_frag<BLOCK_N>(p[mt][kk], p_s, warp_row / 16 + mt, kk, lane);
#endif

        // acc += P V
        #pragma unroll
        for (int kk = 0; kk < NT / 2; ++kk) {
            #pragma unroll
            for (int dp = 0; dp < DT / 2; ++dp) {
                unsigned vb[4];
                load_frag_trans<D>(vb, v_t, kk, dp, lane);
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_16816(acc[mt][2 * dp], p[mt][kk], vb[0], vb[1]);
                    mma_16816(acc[mt][2 * dp + 1], p[mt][kk], vb[2], vb[3]);
                }
            }
        }
    }
#if ASYNC
    cp_async_wait<0>();                      // no copy outlives the block
#endif

    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l_row = l[mt][r];
            l_row += __shfl_xor_sync(0xffffffffu, l_row, 1);
            l_row += __shfl_xor_sync(0xffffffffu, l_row, 2);
            const int i = q_start + warp_row + mt * 16 + g + 8 * r;
            if (i < n_q) {
                const float inv_l = l_row > 0.0f ? 1.0f / l_row : 0.0f;
                elem_t* o_i = o + ((size_t)(b * H + h) * n_q + i) * D;
                #pragma unroll
                for (int dt = 0; dt < DT; ++dt)
                    *reinterpret_cast<__half2*>(o_i + dt * 8 + 2 * t) =
                        __floats2half2_rn(acc[mt][dt][2 * r] * inv_l, acc[mt][dt][2 * r + 1] * inv_l);
                if (t == 0)
                    lse[(size_t)(b * H + h) * n_q + i] =
                        l_row > 0.0f ? (m[mt][r] + log2f(l_row)) * M_LN2_F : -INFINITY;
            }
        }
}
"""

# The ladder: each step one switch more. None: the solution's own flash_tc.
STEPS = [
    ("mma", dict(USE_LDMATRIX=0, P_IN_REGS=0, ASYNC=0, SWIZZLE=0)),
    ("+ldmatrix", dict(USE_LDMATRIX=1, P_IN_REGS=0, ASYNC=0, SWIZZLE=0)),
    ("+P in registers", dict(USE_LDMATRIX=1, P_IN_REGS=1, ASYNC=0, SWIZZLE=0)),
    ("+cp.async", dict(USE_LDMATRIX=1, P_IN_REGS=1, ASYNC=1, SWIZZLE=0)),
    ("+swizzle (solution)", None),
]
ALL_ON = ("(variant, all on)", dict(USE_LDMATRIX=1, P_IN_REGS=1, ASYNC=1, SWIZZLE=1))

CHECK_SHAPES = [(1, 2, 1, 70, 130, 64), (1, 1, 1, 129, 65, 128)]   # (B, H, Hkv, Nq, Nk, d)
GPU_CHECK_SHAPES = [(1, 2, 1, 70, 130, 64), (1, 2, 2, 129, 300, 128)]
BENCH = dict(B=2, H=16, N=4096)
WARMUP, REPS = 5, 20
TOL = 5e-3


def load(name, filename):
    spec = importlib.util.spec_from_file_location(name, ROOT / "solutions" / filename)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SOL = load("solution_06", "06_flash_tensor_cores.py")


def shared_bytes(d, sw):
    """The kernel's shared-memory layout: K/V stages, P (unless in registers), Q (maybe over a stage)."""
    cfg = SOL.CONFIG[d]
    tile = cfg["BLOCK_N"] * d
    kv = 2 * (2 if sw["ASYNC"] else 1) * tile
    p = 0 if sw["P_IN_REGS"] else cfg["BLOCK_M"] * cfg["BLOCK_N"]
    q_off = (2 * tile if sw["ASYNC"] else 0) if cfg["Q_IN_REGS"] else kv + p
    return 2 * max(kv + p, q_off + cfg["BLOCK_M"] * d)


@functools.lru_cache(maxsize=None)
def _kernel(rt, d, switches):
    sw = dict(switches)
    options = tuple(f"-D{key}={int(val)}" for key, val in {**SOL.CONFIG[d], **sw}.items()) + ("-ftz=true",)
    name = f"flash_tc_ladder<{d}>"
    kernel = rt.compile(KERNEL, options=options, name_expressions=[name]).get_function(name)
    smem = shared_bytes(d, sw)
    if smem > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = smem
    return kernel, smem


def ladder_call(rt, switches, q, k, v, scale, causal=False):
    """One step of the ladder: q [B, H, Nq, d], k, v [B, Hkv, Nk, d] float16 -> (o, lse)."""
    if switches is None:
        return SOL.flash_tc(rt, q, k, v, scale, causal=causal)
    B, H, n_q, d = q.shape
    H_kv, n_k = k.shape[1], k.shape[2]
    kernel, smem = _kernel(rt, d, tuple(sorted(switches.items())))
    cfg = SOL.CONFIG[d]
    o = rt.empty(q.shape, q.dtype)
    lse = rt.empty((B, H, n_q), "float32")
    grid = ((n_q + cfg["BLOCK_M"] - 1) // cfg["BLOCK_M"], H, B)
    kernel(grid, (cfg["WARPS"] * 32,), (q, k, v, o, lse, rt.int32(H), rt.int32(H_kv), rt.int32(n_q),
                                        rt.int32(n_k), rt.float32(scale), rt.int32(int(bool(causal)))),
           shared_mem=smem)
    return o, lse


def reference(q, k, v, scale, causal=False):
    """float64 attention with GQA and the bottom-right causal mask -> (o, lse)."""
    H, Hkv = q.shape[1], k.shape[1]
    k = np.repeat(k.astype(np.float64), H // Hkv, axis=1)
    v = np.repeat(v.astype(np.float64), H // Hkv, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k) * scale
    if causal:
        n_q, n_k = s.shape[-2:]
        s = np.where(np.arange(n_k)[None, :] > np.arange(n_q)[:, None] + n_k - n_q, -np.inf, s)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    o = np.einsum("bhij,bhjd->bhid", p, v) / np.where(l > 0, l, 1.0)
    with np.errstate(divide="ignore"):
        lse = (np.log(l) + m)[..., 0]
    return o, lse


def check_step(rt, label, switches, shape, causal=False, seed=0):
    """Run one step on one shape; return (relative error of o, absolute error of lse)."""
    B, H, Hkv, n_q, n_k, d = shape
    rng = np.random.default_rng(seed)
    host = [rng.standard_normal(s).astype(np.float16)
            for s in ((B, H, n_q, d), (B, Hkv, n_k, d), (B, Hkv, n_k, d))]
    scale = 1.0 / np.sqrt(d)
    o, lse = ladder_call(rt, switches, *[rt.asarray(x) for x in host], scale, causal)
    rt.synchronize()
    o = rt.to_numpy(o).astype(np.float64)
    lse = rt.to_numpy(lse).astype(np.float64)
    o_ref, lse_ref = reference(*host, scale, causal)
    err_o = float(np.nan_to_num(np.abs(o - o_ref), nan=np.inf).max()) / max(float(np.abs(o_ref).max()), 1e-30)
    same_inf = np.array_equal(np.isneginf(lse), np.isneginf(lse_ref))
    fin = np.isfinite(lse_ref)
    err_lse = float(np.nan_to_num(np.abs(lse[fin] - lse_ref[fin]), nan=np.inf).max()) if fin.any() else 0.0
    if not same_inf:
        err_lse = float("inf")
    return err_o, err_lse


def run_checks(rt, shapes, steps, causal_too=False):
    failures = 0
    for label, sw in steps:
        for shape in shapes:
            for causal in ((False, True) if causal_too else (False,)):
                t0 = time.time()
                err_o, err_lse = check_step(rt, label, sw, shape, causal)
                ok = err_o <= TOL and err_lse <= TOL
                failures += not ok
                print(f"  {'ok  ' if ok else 'FAIL'} {label:22} {str(shape):24} {'causal' if causal else '      '} "
                      f"o rel err {err_o:.2e}   lse err {err_lse:.2e}   ({time.time() - t0:.1f} s)", flush=True)
    return failures


# ---------------------------------------------------------------------------------------------
# Timing (GPU)

def time_calls(fn, event, sync):
    """ms per call: WARMUP calls, then REPS calls queued back to back between two events."""
    for _ in range(WARMUP):
        fn()
    start, end = event(), event()
    start.record()
    for _ in range(REPS):
        fn()
    end.record()
    sync()
    return start.elapsed(end) / REPS


def make_event(cp=None, torch=None):
    class Event:
        def __init__(self):
            self.e = cp.cuda.Event() if cp is not None else torch.cuda.Event(enable_timing=True)

        def record(self):
            self.e.record()

        def elapsed(self, other):
            return cp.cuda.get_elapsed_time(self.e, other.e) if cp is not None else self.e.elapsed_time(other.e)
    return Event


def gpu_main() -> int:
    from grader.runtimes import get_runtime
    rt = get_runtime("gpu")
    cp = rt.xp
    t_start = time.time()
    print(f"# {rt.device_name}, CuPy {cp.__version__}")
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        torch_ok = torch.cuda.is_available()
    except Exception as e:
        print(f"torch is not usable ({type(e).__name__}: {e}): no FlashAttention-2 baseline")
        torch_ok = False

    print("\n## Correctness (float16, one small shape per d, non-causal and causal)")
    failures = run_checks(rt, GPU_CHECK_SHAPES, STEPS + [ALL_ON], causal_too=True)
    for d in (64, 128):
        for label, sw in STEPS[:-1]:
            kernel, smem = _kernel(rt, d, tuple(sorted(sw.items())))
            try:
                a = kernel.attributes
                print(f"  d={d:<3} {label:22} {a.get('num_regs', '?')} registers, "
                      f"{a.get('local_size_bytes', '?')} B local (spill), {smem // 1024} KB shared")
            except Exception as e:   # attributes are a nicety
                print(f"  d={d:<3} {label:22} (no attributes: {e})")
    if failures:
        print(f"\n{failures} check(s) FAILED: no timing")
        return 1

    mod02 = load("solution_02", "02_flash_forward.py")
    B, H, N = BENCH["B"], BENCH["H"], BENCH["N"]
    CupyEvent = make_event(cp=cp)
    rows = []   # (step, d, ms)
    for d in (64, 128):
        x = [cp.random.standard_normal((B, H, N, d), dtype=cp.float32) for _ in range(3)]
        q16 = [a.astype(cp.float16) for a in x]
        scale = 1.0 / np.sqrt(d)
        results = {}
        results["module 02 (float32)"] = time_calls(lambda: mod02.flash_forward(rt, *x, scale), CupyEvent, rt.synchronize)
        for label, sw in STEPS:
            results[label] = time_calls(lambda: ladder_call(rt, sw, *q16, scale), CupyEvent, rt.synchronize)
        if torch_ok:
            try:
                qkv = [torch.from_dlpack(a) for a in q16]
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    f = lambda: torch.nn.functional.scaled_dot_product_attention(*qkv)  # noqa: E731
                    results["torch FA2"] = time_calls(f, make_event(torch=torch), torch.cuda.synchronize)
            except Exception as e:
                print(f"torch FA2 at d={d} not usable: {type(e).__name__}: {e}")
        rows += [(label, d, ms) for label, ms in results.items()]

    print(f"\n## Speed ladder: B={B}, H={H}, N={N}, float16 (module 02: float32), non-causal, ms per call "
          f"({REPS} calls back to back after {WARMUP} warm-up)\n")
    print("| step | d | ms | TFLOP/s | × FA2 |")
    print("|---|---|---|---|---|")
    fa2 = {d: ms for label, d, ms in rows if label == "torch FA2"}
    for label, d, ms in rows:
        tf = 4 * B * H * N * N * d / (ms * 1e-3) / 1e12
        ratio = f"{fa2[d] / ms:.2f}×" if d in fa2 else "—"
        print(f"| {label} | {d} | {ms:.3f} | {tf:.0f} | {ratio} |")
    print(f"\n(× FA2: FlashAttention-2's time / this time, speed relative to FA2; {time.time() - t_start:.0f} s in all)")
    return 0


def cpu_check() -> int:
    from grader.runtimes import get_runtime
    rt = get_runtime("cpu")
    rt.poison_outputs = True          # an output element never written is caught, not passed by luck
    print(f"# CPU emulator: every step, float16, non-causal and causal, against float64 NumPy (fail above {TOL:g})")
    failures = run_checks(rt, CHECK_SHAPES, STEPS + [ALL_ON], causal_too=True)
    if failures:
        print(f"\nFAILED: {failures} check(s) off by more than {TOL:g}")
        return 1
    print("\nall steps ok")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="check every step on the CPU emulator only")
    args = ap.parse_args()
    return cpu_check() if args.check else gpu_main()


if __name__ == "__main__":
    sys.exit(main())
