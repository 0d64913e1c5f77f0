"""Module 10's speed ladder: the Hopper kernel after each idea of the lesson (`grader ladder 10`).

One kernel text (KERNEL below) with compile-time switches; each step turns one more on. Every step is a
complete, correct kernel with the solution's contract (float16 and bfloat16, d = 64 and 128, any Nq and
Nk, GQA, non-causal and causal) and its CONFIG for its d (BLOCK_N, CONSUMERS: 64 query rows per
consumer warpgroup, STAGES):

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
                        on the tensor cores: the solution's loop, spliced in.          OVERLAP=1
    6. +persistent      the solution itself (called as is): one block per SM that takes work tile after
                        work tile from a tile scheduler (an atomic counter, the producer handing each
                        tile to the consumers through two slots), longest first in groups of heads; the
                        K/V ring goes on across work tiles, so the next tile's first K/V copies and its Q
                        overlap the end of this one. Steps 1 to 5 launch one block per (query tile, head,
                        batch), the query tiles from row 0, and copy Q once per block. Step 5 is checked
                        once more untimed, as "(variant, all on)": on the emulator its outputs must equal
                        the solution's bit for bit.

What every step shares with the solution is spliced in from solutions/10_flash_hopper.py, not copied:
the PTX wrappers (types, mbarriers, TMA, wgmma, descriptors), the online softmax (softmax, to_p,
rescale), the overlapped loop and the epilogue (source() cuts them out by their first lines).

Timing (GPU): B=2, H=16, N=4096, float16, non-causal, d = 128 and 64; the median of three timings of 20
calls back to back, next to module 06 and torch's FlashAttention-2 and cuDNN backends.
`grader ladder 10 --nvcc` compiles every step with the local nvcc for sm_90a (ptxas's registers,
spills, warnings and its wgmma advisories: "(C7511) Potential Performance Loss: wgmma.mma_async
instructions are serialized due to ...").
"""
from __future__ import annotations

import functools

from ...attention.baselines import attention_flops, torch_sdpa
from ...attention.ladders import fill, normal_inputs, piece, replace
from ...spec import LadderStep, LadderTiming
from .bench import module_06

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
    // The solution numbers its K/V tiles across a block's work tiles, this work tile's first being tile
    // `first`; here a block has one work tile, whose key tile it is K/V tile it.
    const int first = 0;
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

# The ladder: step 1 has every switch off, each step after it turns the next one on up to step 5 (every
# switch on), and the last step is the solution itself (step 5 is checked once more, untimed, against it:
# "(variant, all on)").
SWITCHES = ("TMA", "WARP_SPEC", "PINGPONG", "OVERLAP")
STEPS = ["wgmma, plain copies", "+TMA, 2 stages", "+warp specialization", "+ping-pong", "+overlap",
         "+persistent (solution)"]

# Module 10's cases: float16 and bfloat16, d 64 and 128, partial tiles, GQA, causal (with query rows
# that see no key), more key tiles than stages.
CHECK_CASES = {
    "cpu": ("tile_plus_1", "gqa_4_to_1", "head_dim_128", "causal_queries_past_key_tiles", "causal_chunked_d128",
            "bf16_tile_plus_1", "bf16_gqa_causal_d128", "stage_ring_d64", "stage_ring_d128",
            "stage_ring_causal_d128"),
    "gpu": ("tile_plus_1", "head_dim_128", "causal_chunked_d128", "bf16_tile_plus_1", "bf16_gqa_causal_d128",
            "stage_ring_d64", "stage_ring_causal_d128"),
}
# The all-on variant differs from the solution in its schedule and its Q copies only (one block per query
# tile): on the emulator, the same outputs bit for bit (on a GPU not required: compared, and the
# difference shown).
SAME_AS_SOLUTION = {"cpu": ("o", "lse")}
WHERE = "solutions/10_flash_hopper.py"
OPTIONS = ("-ftz=true", "-arch=sm_90a")        # the solution's: wgmma and setmaxnreg need sm_90a


# The solution's loop takes the next work tile (and copies its Q) under the last P V, or at once when the
# tile sees no key: the lines that the ladder's loop leaves out.
NEXT_UNDER_PV = "            next = take();                    // no product reads q_s now: the next Q under this P V\n"
NEXT_IF_NONE = "        } else {\n            next = take();\n        }"


@functools.lru_cache(maxsize=None)
def source(solution, d: int) -> str:
    kernel = solution.KERNEL
    return fill(KERNEL, {
        "@SOLUTION_PTX@": piece(kernel, "#if USE_BF16", through="@WGMMA_HELPERS@", where=WHERE),
        "@SOLUTION_SOFTMAX@": piece(kernel, "// The softmax of tile it", block="auto rescale", where=WHERE),
        # The loop without the scheduler's hand-over (a block of the ladder has one work tile).
        "@SOLUTION_LOOP@": replace(NEXT_UNDER_PV, "", where=WHERE)(replace(NEXT_IF_NONE, "        }", where=WHERE)(
            piece(kernel, "if (n_tiles > 0) {", block="if (n_tiles > 0) {", where=WHERE))),
        "@SOLUTION_EPILOGUE@": piece(kernel, "// o = acc / l", block="for (int r = 0; r < 2; ++r) {", where=WHERE),
    }).replace("@WGMMA_HELPERS@", solution.wgmma_helpers(solution.CONFIG[d]["BLOCK_N"], d))


def stages(solution, d: int, sw: dict) -> int:
    """Plain copies: one stage; TMA by one consumer thread: two (double buffering); with a producer:
    the solution's CONFIG."""
    return 1 if not sw["TMA"] else 2 if not sw["WARP_SPEC"] else solution.CONFIG[d]["STAGES"]


def shared_bytes(solution, d: int, sw: dict) -> int:
    """The kernel's layout: 1024 bytes to align the start, the Q tile, STAGES K and V tiles, and with
    TMA four mbarriers per stage."""
    n = stages(solution, d, sw)
    return (1024 + solution.block_m(d) * d * 2 + n * 2 * solution.CONFIG[d]["BLOCK_N"] * d * 2
            + (32 * n if sw["TMA"] else 0))


@functools.lru_cache(maxsize=None)
def _kernel(rt, solution, d, elem, switches):
    sw = dict(switches)
    cfg = solution.CONFIG[d]
    defines = dict(D_HEAD=d, BLOCK_N=cfg["BLOCK_N"], CONSUMERS=cfg["CONSUMERS"], STAGES=stages(solution, d, sw),
                   USE_BF16=int(elem == "bfloat16"), **sw)
    options = tuple(f"-D{key}={int(val)}" for key, val in defines.items()) + OPTIONS
    # Named as a name expression: the kernel's parameter list holds #if lines, so the runtimes do not
    # parse its signature (it depends on the -D options), and the emulator builds only the kernels it
    # parsed or was named.
    kernel = rt.compile(source(solution, d), options=options,
                        name_expressions=("flash_hopper_ladder",)).get_function("flash_hopper_ladder")
    kernel.max_dynamic_shared_size_bytes = shared_bytes(solution, d, sw)
    return kernel


def _step(ctx, label: str, switches: dict | None, timed: bool = True) -> LadderStep:
    """A step with the solution's signature, (rt, q, k, v, scale, causal=False, dtype=None) -> (o, lse):
    the ladder's kernel with these switches (None: the solution's flash_hopper itself)."""
    solution = ctx.solution("10_flash_hopper")
    if switches is None:
        def kernel(rt, d, elem):
            cfg = solution.CONFIG[d]
            return solution._kernel(rt, d, elem, tuple(sorted(cfg.items()))), "flash_hopper", solution.shared_bytes(d)
        return LadderStep(label, solution.flash_hopper, kernel, timed)
    key = tuple(sorted(switches.items()))

    def flash_hopper_ladder(rt, q, k, v, scale, causal=False, dtype=None):
        B, H, n_q, d = q.shape
        H_kv, n_k = k.shape[1], k.shape[2]
        elem = dtype or q.dtype.name
        cfg = solution.CONFIG[d]
        kernel = _kernel(rt, solution, d, elem, key)
        kv = ((rt.tensor_map(k, cfg["BLOCK_N"], elem), rt.tensor_map(v, cfg["BLOCK_N"], elem))
              if switches["TMA"] else (k, v))
        o = rt.empty(q.shape, q.dtype)
        lse = rt.empty((B, H, n_q), "float32")
        grid = ((n_q + solution.block_m(d) - 1) // solution.block_m(d), H, B)
        kernel(grid, (128 * (cfg["CONSUMERS"] + switches["WARP_SPEC"]),),
               (q, *kv, o, lse, rt.int32(H), rt.int32(H_kv), rt.int32(n_q), rt.int32(n_k), rt.float32(scale),
                rt.int32(int(bool(causal)))), shared_mem=shared_bytes(solution, d, switches))
        return o, lse

    def kernel(rt, d, elem):
        return _kernel(rt, solution, d, elem, key), "flash_hopper_ladder", shared_bytes(solution, d, switches)
    return LadderStep(label, flash_hopper_ladder, kernel, timed)


def steps(ctx) -> list[LadderStep]:
    """Steps 1 to 5: the ladder's kernel with the first 0 .. 4 switches on; step 6: the solution; then step 5
    once more, untimed, checked against the solution."""
    step = functools.partial(_step, ctx)

    def on(n: int) -> dict:
        return {name: int(i < n) for i, name in enumerate(SWITCHES)}
    return ([step(label, on(i)) for i, label in enumerate(STEPS[:-1])] + [step(STEPS[-1], None)]
            + [step("(variant, all on)", on(len(SWITCHES)), timed=False)])


# ---- Timing (GPU) -----------------------------------------------------------------------------------

TIMING = LadderTiming(
    shapes=[dict(B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=d, dtype="float16", causal=False) for d in (128, 64)],
    inputs=normal_inputs,
    flops=attention_flops,
    baselines=[("module 06 (mma.sync)", module_06, False), ("torch FA2", torch_sdpa("FLASH_ATTENTION"), True),
               ("torch cuDNN", torch_sdpa("CUDNN_ATTENTION"), True)],
    ratios=("torch cuDNN", "torch FA2"),
    repeats=3,
)
