"""Module 11's speed ladder: the tensor-core backward after each idea of the lesson (`grader ladder 11`).

One kernel text (KERNEL below) with compile-time switches; each step turns one more on. Every step is a
complete, correct kernel with the solution's contract (float16 and bfloat16, d = 64 and 128, any Nq
and Nk, GQA, non-causal and causal), its CONFIG for its d (BLOCK_M query rows per step, BLOCK_N = 128
keys per block, one warp per 16 keys), its algorithm (one block per key tile and kv head, the
transposed products Sᵀ = K Qᵀ and dPᵀ = V dOᵀ, dQ added to a float32 accumulator by atomics) and its
launch code (backward_preprocess, the kernel, convert_dq):

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

What every step shares with the solution is spliced in from solutions/11_backward_tensor_cores.py, not
copied (CUTS below names each piece by its first line): the includes, CONFIG's constants, the types and
PTX wrappers (mma, ldmatrix, cp.async), swz, load_tile_async, block16 (every step computes a lane's part
of an address once), block16_across, atomic_add2, backward_preprocess, product_t_step and add_product
(TODO 1 and 3, their fragments read through frag and frag_trans: through_frag), to_a_fragments, the
kernel's opening lines (the block's key tile, GQA group and causal first step), P from lse (TODO 2), dSᵀ
with its stores (TODO 4, step 3 on), the dK / dV stores (TODO 6) and convert_dq. The tile copies and the
plain fragment loads are module 06's ladder's (grader/attention/ladders.py: PLAIN_LOADS). Each step is a
fresh copy of the solution's Python module with this KERNEL and the switches added to CONFIG[d] (so: the
solution's launch code, its -D options plus the switches), and its own shared_bytes.

Timing (GPU): B=2, H=16, N=4096, float16, non-causal, d = 128 and 64, the backward's three launches;
the median of three timings of 20 calls back to back; next to module 09's float32 backward (grader
bench 11's baseline: the same values widened) and torch's FlashAttention-2 and cuDNN backward (the
forward once, untimed; each call one torch.autograd.grad), o and lse from module 06's forward. TFLOP/s
counts 2.5 × 4·B·H·N²·d flops (the backward's count). The other variants the lesson compares (section
12: dQ by a separate pass, other tiles, ...) are in variants.py beside this file: `grader ladder 11
--variants`.
"""
from __future__ import annotations

import functools
import re

from ...attention.baselines import backward_flops, torch_sdpa_backward
from ...attention.ladders import PLAIN_LOADS, fill, normal_inputs, piece, pieces, switch_ladder, with_kernel
from ...errors import GraderError
from ...spec import LadderStep, LadderTiming
from .bench import float32_09

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
// The element offset of (row, col), any col, for the plain loads below: swz (which keeps col % 8).
template <int W>
__device__ __forceinline__ int at(int row, int col) { return swz<W>(row, col); }

// ---- The solution's load_tile_async (cp.async), block16, block16_across, atomic_add2 and
// backward_preprocess, as is -----------------------------------------------------------------------------
@SOLUTION_TILES@

// ---- Tile copies (cp.async or plain) and fragment reads by plain loads, as module 06's ladder has them
// (grader/attention/ladders.py) ---------------------------------------------------------------------------
@PLAIN_LOADS@

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
    frag_by_loads<W>(r, tile, r16, c16, lane);
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
    frag_trans_by_loads<W>(r, tile, r16, c16, lane);
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

// ---- The solution's product_t_step, its fragments read by frag (ldmatrix, or plain loads) -------------
@SOLUTION_PRODUCT_STEP@

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

// ---- The solution's add_product, its fragments read by frag_trans ------------------------------------
@SOLUTION_ADD_PRODUCT@

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

# The ladder: step 1 has every switch off, each step after it turns the next one on, and the last step
# is the solution itself (the ladder's kernel with every switch on is checked too: "(variant, all on)").
SWITCHES = ("USE_LDMATRIX", "PT_IN_REGS", "ASYNC", "SWIZZLE", "ATOMIC2", "UNROLL", "DQ_TWO")
STEPS = ["mma", "+ldmatrix", "+Pᵀ in registers", "+cp.async",
         "+swizzle", "+8-byte atomics", "+unrolled", "+two dQ chains (solution)"]

# Module 11's cases (tiny, a tile plus one, GQA, scores far below zero, causal with query rows past the
# key tiles, bfloat16 GQA causal at d = 128, float16 at d = 128): the variants' (variants.py), and d = 128.
CASES = ("tiny", "tile_plus_1", "gqa_4_to_1", "scores_far_below_zero", "causal_queries_past_key_tiles",
         "bf16_gqa_causal_d128")
CHECK_CASES = {"cpu": CASES + ("head_dim_128",), "gpu": CASES + ("head_dim_128",)}
# The all-on variant sums what the solution sums in the same order: on the emulator every gradient is the
# solution's bit for bit; on a GPU dQ's atomics add in any order, so dK and dV only.
SAME_AS_SOLUTION = {"cpu": ("dq", "dk", "dv"), "gpu": ("dk", "dv")}
WHERE = "solutions/11_backward_tensor_cores.py"


# The pieces of the solution's kernel text spliced into KERNEL: each from the line that begins with
# the first string (None: the first line) up to, not including, the next that begins with the second.
CUTS = {
    "@SOLUTION_HEAD@": (None, "// ---- Shared memory: swizzled tiles"),
    "@SOLUTION_SWZ@": ("// ---- Shared memory: swizzled tiles", "// Rows [row0, row0 + ROWS)"),
    "@SOLUTION_TILES@": ("// Rows [row0, row0 + ROWS)", "// ---- The products of one step"),
    "@SOLUTION_TO_A@": ("// The C fragments of x (16 rows", "// acc += A · b_t"),
    "@SOLUTION_SETUP@": ("const int tid = threadIdx.x, warp", "// Stage it % 2 of step it"),
    "@SOLUTION_P@": ("// BEGIN SOLUTION TODO(2)", "// END SOLUTION"),
    "@SOLUTION_DS@": ("// BEGIN SOLUTION TODO(4)", "// END SOLUTION"),
    "@SOLUTION_STORE@": ("// BEGIN SOLUTION TODO(6): store the warp's rows", "// END SOLUTION"),
    "@SOLUTION_CONVERT@": ("// dq = scale · dq_acc", None),
}


# The solution's products read their fragments with ldmatrix at block16's (or block16_across's) address;
# the ladder's read them through frag, frag_trans and frag_trans_across, which do so only with USE_LDMATRIX.
LDMATRIX = re.compile(r"ldmatrix_x4(_trans)?\((\w+), (\w+) \+ (block16(?:_across)?)<(\w+)>\(([^;]*), lane\)\);")


def through_frag(text: str) -> str:
    if not LDMATRIX.search(text):
        raise GraderError(f"{WHERE}: no ldmatrix_x4 at a block16 address in {text[:80]!r}")
    return LDMATRIX.sub(lambda m: f"frag{m[1] or ''}{'_across' if m[4].endswith('across') else ''}<{m[5]}>"
                                  f"({m[2]}, {m[3]}, {m[6]}, lane);", text)


def source(solution) -> str:
    kernel = solution.KERNEL
    return fill(KERNEL, {
        **pieces(kernel, CUTS, WHERE), "@PLAIN_LOADS@": PLAIN_LOADS,
        "@SOLUTION_PRODUCT_STEP@": through_frag(piece(kernel, "// One 16-feature step kk of x +=",
                                                      block="__device__ __forceinline__ void product_t_step", where=WHERE)),
        "@SOLUTION_ADD_PRODUCT@": through_frag(piece(kernel, "// acc += A · b_t, summed over",
                                                     block="__device__ __forceinline__ void add_product", where=WHERE)),
    })


def shared_bytes(module, d: int) -> int:
    """The kernel's layout: K and V, dSᵀ (and Pᵀ without PT_IN_REGS), STAGES stages of a Q tile, a dO
    tile and BLOCK_M floats of lse and of D."""
    cfg = module.CONFIG[d]
    m, n, e = cfg["BLOCK_M"], cfg["BLOCK_N"], module.ELEMENT_BYTES
    stages = 2 if cfg["ASYNC"] else 1
    return e * (2 * n * d + n * m * (1 if cfg["PT_IN_REGS"] else 2)) + stages * (e * 2 * m * d + 4 * 2 * m)


def kernel_of(module):
    """The step's kernel(rt, d, dtype) for LadderStep: its main kernel, as the launch code builds it."""
    def kernel(rt, d, dtype):
        name = f"flash_backward_tc<{d}>"
        built = module._module(rt, dtype, tuple(module.CONFIG[d].items()))
        return built.get_function(name), name, module.shared_bytes(d)
    return kernel


def _step(ctx, label: str, switches: dict | None, timed: bool = True) -> LadderStep:
    """A step: the solution's module running the ladder's kernel with these switches (None: the
    solution itself)."""
    module = ctx.solution("11_backward_tensor_cores")
    if switches is not None:
        module = with_kernel(ctx.fresh("11_backward_tensor_cores"), source(module), switches, shared_bytes)
    return LadderStep(label, module.flash_backward_tc, kernel_of(module), timed)


def steps(ctx) -> list[LadderStep]:
    return switch_ladder(SWITCHES, STEPS, functools.partial(_step, ctx))


# ---- Timing (GPU) -----------------------------------------------------------------------------------

def timing_inputs(rt, params, solution) -> dict:
    """q, k, v and dO float16 from a standard normal; o and lse from module 06's forward."""
    x = normal_inputs(rt, params, names=("q", "k", "v", "do"))
    x["o"], x["lse"] = solution("06_flash_tensor_cores").flash_tc(rt, x["q"], x["k"], x["v"], x["scale"])
    return x


TIMING = LadderTiming(
    shapes=[dict(B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=d, dtype="float16", causal=False) for d in (128, 64)],
    inputs=timing_inputs,
    flops=backward_flops,
    baselines=[("module 09 (float32)", float32_09, False),
               ("torch FA2", torch_sdpa_backward("FLASH_ATTENTION"), True),
               ("torch cuDNN", torch_sdpa_backward("CUDNN_ATTENTION"), True)],
    ratios=("torch cuDNN", "torch FA2"),
    repeats=3,
)
