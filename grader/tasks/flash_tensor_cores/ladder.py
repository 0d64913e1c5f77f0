"""Module 06's speed ladder: the tensor-core kernel after each idea of the lesson (`grader ladder 06`).

One kernel text (KERNEL below) with compile-time switches; each step turns one more on. What every
step shares with the solution is spliced in from solutions/06_flash_tensor_cores.py, not copied (CUTS
below names each piece by its first line): its head (the element types, pack2 and the PTX wrappers),
swz and load_tile_async, the kernel's opening lines, the softmax state and S's accumulators, the masks,
the online softmax with P packed as A fragments (TODO 2) and the epilogue (TODO 4). The tile copies and
the plain fragment loads are module 11's ladder's (grader/attention/ladders.py: PLAIN_LOADS). Each step
runs through the solution's own launch code, with the switches added to its CONFIG (so float16 and
bfloat16, d = 64 and 128, any Nq and Nk, GQA, non-causal and causal, the solution's tile sizes for its d):

    1. mma              mma.sync for S = Q Kᵀ and P V; fragments read from shared memory with plain
                        32-bit loads, element by element of the documented fragment layout (V's B
                        fragments, which pair two rows, with two 16-bit loads); K/V tiles copied with
                        plain 16-byte loads and __syncthreads (one stage); no swizzle; P stored to
                        shared memory (a region per warp) and read back as A fragments.
    2. +ldmatrix        ldmatrix / ldmatrix.trans for the Q, K, V (and still P) fragments.   USE_LDMATRIX=1
    3. +P in registers  the S accumulator fragment, rounded, is PV's A fragment: no shared round trip.
                                                                                            P_IN_REGS=1
    4. +cp.async        K/V tiles streamed by cp.async, double-buffered, one tile ahead.        ASYNC=1
    5. +swizzle         the XOR swizzle of the shared tiles: the solution itself (called as is; the
                        variant with every switch on, SWIZZLE=1, is the same kernel and is checked too:
                        its outputs must equal the solution's bit for bit).

Timing (GPU): B=2, H=16, N=4096, float16, non-causal, d = 64 and 128; one timing of 20 calls back to
back per figure, next to module 02's float32 kernel (on the same values, widened) and torch's
FlashAttention-2 backend. TFLOP/s counts 4·B·H·N²·d flops.
"""
from __future__ import annotations

import functools

from ...attention.baselines import attention_flops, torch_sdpa
from ...attention.ladders import PLAIN_LOADS, fill, normal_inputs, pieces, switch_ladder, with_kernel
from ...spec import LadderStep, LadderTiming

KERNEL = r"""
// ---- The solution's head, as is: includes, the check of CONFIG's macros, NTHREADS, WARP_M, MT, NT,
// the element types, pack2, mma_16816, smem_addr, ldmatrix_x4(_trans), cp_async_16, commit and wait
@SOLUTION_HEAD@

// ---- The ladder's switches -------------------------------------------------------------------------
// From the launch code, next to the solution's CONFIG (-DBLOCK_M -DBLOCK_N -DWARPS -DQ_IN_REGS
// -DUSE_BF16), each 0 or 1:
//   USE_LDMATRIX  fragments read with ldmatrix(.trans); 0: plain loads, element pairs by the layout
//   P_IN_REGS     P goes from S's accumulators straight into PV's A fragments; 0: through shared memory
//   ASYNC         K/V tiles by cp.async, two stages; 0: 16-byte loads and stores, one stage
//   SWIZZLE       shared tiles XOR-swizzled (chunk c of row r at c ^ (r % 8)); 0: plain row-major
#if !defined(USE_LDMATRIX) || !defined(P_IN_REGS) || !defined(ASYNC) || !defined(SWIZZLE)
#error "the switches of the ladder come from the launch code as -D options"
#endif

// ---- Shared tiles: the solution's swz, or plain rows -------------------------------------------------
#if SWIZZLE
@SOLUTION_SWZ@
#else
template <int D>
__device__ __forceinline__ int swz(int row, int col)   // element offset of (row, col); col % 8 == 0
{
    return row * D + col;
}
#endif

// Element offset of (row, col) in a [rows][W] tile, any col: the swizzle moves whole 16-byte chunks,
// the position inside a chunk stays.
template <int W>
__device__ __forceinline__ int at(int row, int col)
{
    return swz<W>(row, col - col % 8) + col % 8;
}

// ---- The solution's load_tile_async (cp.async), as is ---------------------------------------------
@SOLUTION_TILES@

// ---- Tile copies (cp.async or plain) and fragment reads by plain loads, as module 11's ladder has them
// (grader/attention/ladders.py) ---------------------------------------------------------------------------
@PLAIN_LOADS@

// ---- Fragments from shared memory: ldmatrix, or plain loads by the layout ---------------------------
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
    frag_by_loads<W>(r, tile, r16, c16, lane);
#endif
}

// The same block with each 8 × 8 matrix transposed: r[i] = rows 2t, 2t + 1 of column g of matrix i.
// For a [key][feature] V tile, the B fragments of two 8-feature tiles (r[0], r[1] and r[2], r[3]).
template <int W>
__device__ __forceinline__ void load_frag_trans(unsigned r[4], const elem_t* tile, int r16, int c16, int lane)
{
#if USE_LDMATRIX
    ldmatrix_x4_trans(r, tile + at<W>(r16 * 16 + lane % 16, c16 * 16 + (lane / 16) * 8));
#else
    frag_trans_by_loads<W>(r, tile, r16, c16, lane);
#endif
}

template <int D>
__global__ void __launch_bounds__(NTHREADS)
flash_tc(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
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
    // shared_bytes() below mirrors this.
    extern __shared__ uint4 smem_u4[];
    elem_t* smem = reinterpret_cast<elem_t*>(smem_u4);
#if !P_IN_REGS
    elem_t* p_s = smem + 2 * STAGES * TILE;
#endif
    elem_t* q_s = smem + (Q_IN_REGS ? (ASYNC ? 2 * TILE : 0) : 2 * STAGES * TILE + P_ELEMS);

    // ---- The solution's opening lines, as is: this lane, the block's query tile, head and kv head, the
    // causal offset and the number of key tiles ---------------------------------------------------------
@SOLUTION_SETUP@

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

@SOLUTION_STATE@

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

        // S = Q Kᵀ: the solution's accumulators, as is, then the products with K read by load_frag
@SOLUTION_S@
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

        // ---- The solution's masks, as is --------------------------------------------------------
@SOLUTION_MASKS@

        // ---- The solution's online softmax on fragment rows (TODO 2), as is: s then holds P, and
        // p[mt][kk] is P as the A fragment of P V for rows warp_row + 16 mt .., keys kv_start + 16 kk ..
        unsigned p[MT][NT / 2][4];
@SOLUTION_SOFTMAX@
#if !P_IN_REGS
        // The round trip: each lane stores its A fragments of P into the warp's rows of p_s, the warp
        // waits for itself, then reads them back. (The barrier at the top of the next iteration keeps
        // the next stores behind these reads.)
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int kk = 0; kk < NT / 2; ++kk)
                #pragma unroll
                for (int x = 0; x < 4; ++x)
                    *reinterpret_cast<unsigned*>(p_s + at<BLOCK_N>(warp_row + mt * 16 + g + 8 * (x % 2),
                                                                   kk * 16 + 8 * (x / 2) + 2 * t)) = p[mt][kk][x];
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

    // ---- The solution's epilogue (TODO 4), as is: o = acc / l, lse -------------------------------
@SOLUTION_EPILOGUE@
}
"""

# The ladder: step 1 has every switch off, each step after it turns the next one on, and the last step
# is the solution itself (the ladder's kernel with every switch on is checked too: "(variant, all on)").
SWITCHES = ("USE_LDMATRIX", "P_IN_REGS", "ASYNC", "SWIZZLE")
STEPS = ["mma", "+ldmatrix", "+P in registers", "+cp.async", "+swizzle (solution)"]

# Module 06's cases (the low-precision prefill kit's): d = 64 and 128, partial tiles, GQA, causal (with
# query tiles past the key tiles), bfloat16. On the GPU, fewer: its compiles are what takes the time.
CHECK_CASES = {
    "cpu": ("tile_plus_1", "gqa_4_to_1", "head_dim_128", "causal_queries_past_key_tiles", "causal_chunked_d128",
            "bf16_gqa_causal_d128"),
    "gpu": ("gqa_4_to_1", "head_dim_128", "causal_chunked_d128", "bf16_gqa_causal_d128"),
}
# The all-on variant is the solution's kernel built by the ladder's text: on the emulator, the same
# outputs bit for bit (on a GPU not required: compared, and the difference shown).
SAME_AS_SOLUTION = {"cpu": ("o", "lse")}
WHERE = "solutions/06_flash_tensor_cores.py"


# The pieces of the solution's kernel text spliced into KERNEL: each from the line that begins with
# the first string (None: the first line) up to, not including, the next that begins with the second.
CUTS = {
    "@SOLUTION_HEAD@": (None, "// ---- Shared memory: swizzled tiles"),
    "@SOLUTION_SWZ@": ("// ---- Shared memory: swizzled tiles", "// Rows [row0, row0 + ROWS)"),
    "@SOLUTION_TILES@": ("// Rows [row0, row0 + ROWS)", "template <int D>"),
    "@SOLUTION_SETUP@": ("const int tid = threadIdx.x, warp", "// Prologue: Q, then K/V tile 0"),
    "@SOLUTION_STATE@": ("// The online-softmax state of this lane's rows", "for (int it = 0; it < n_tiles; ++it) {"),
    "@SOLUTION_S@": ("// s[mt][nt]: the C fragment of S", "// BEGIN SOLUTION TODO(1)"),
    "@SOLUTION_MASKS@": ("// Masks (module 03)", "// p[mt][kk]: P as the A fragment"),
    "@SOLUTION_SOFTMAX@": ("// BEGIN SOLUTION TODO(2)", "// END SOLUTION"),
    "@SOLUTION_EPILOGUE@": ("// BEGIN SOLUTION TODO(4)", "// END SOLUTION"),
}


def source(solution) -> str:
    return fill(KERNEL, {**pieces(solution.KERNEL, CUTS, WHERE), "@PLAIN_LOADS@": PLAIN_LOADS})


def shared_bytes(module, d: int) -> int:
    """The kernel's shared memory: the K/V stages, P (unless in registers), Q (maybe over a stage)."""
    cfg = module.CONFIG[d]
    tile = cfg["BLOCK_N"] * d
    kv = 2 * (2 if cfg["ASYNC"] else 1) * tile
    p = 0 if cfg["P_IN_REGS"] else cfg["BLOCK_M"] * cfg["BLOCK_N"]
    q_off = (2 * tile if cfg["ASYNC"] else 0) if cfg["Q_IN_REGS"] else kv + p
    return module.ELEMENT_BYTES * max(kv + p, q_off + cfg["BLOCK_M"] * d)


def _step(ctx, label: str, switches: dict | None, timed: bool = True) -> LadderStep:
    """A step: the solution's module running the ladder's kernel with these switches (None: the
    solution itself)."""
    module = ctx.solution("06_flash_tensor_cores")
    if switches is not None:
        module = with_kernel(ctx.fresh("06_flash_tensor_cores"), source(module), switches, shared_bytes)

    def kernel(rt, d, dtype):
        return (module._kernel(rt, d, dtype, tuple(module.CONFIG[d].items())), f"flash_tc<{d}>",
                module.shared_bytes(d))
    return LadderStep(label, module.flash_tc, kernel, timed)


def steps(ctx) -> list[LadderStep]:
    return switch_ladder(SWITCHES, STEPS, functools.partial(_step, ctx))


# ---- Timing (GPU) -----------------------------------------------------------------------------------

_widened: dict = {}


def module_02(b):
    """Module 02's float32 kernel on the same values (widened once, not timed)."""
    key = id(b.inputs["q"])
    if key not in _widened:
        _widened.clear()
        _widened[key] = [b.inputs[x].astype(b.rt.xp.float32) for x in "qkv"]
    o, lse = b.solution("02_flash_forward").flash_forward(b.rt, *_widened[key], b.inputs["scale"])
    return {"o": o, "lse": lse}


TIMING = LadderTiming(
    shapes=[dict(B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=d, dtype="float16", causal=False) for d in (64, 128)],
    inputs=normal_inputs,
    flops=attention_flops,
    baselines=[("module 02 (float32)", module_02, False), ("torch FA2", torch_sdpa("FLASH_ATTENTION"), True)],
    ratios=("torch FA2",),
    repeats=1,
)
