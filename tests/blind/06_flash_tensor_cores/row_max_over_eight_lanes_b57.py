# BLIND: In TODO(2) the row max gets a third shuffle, 'mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));' after offsets 1 and 2 (a reduction over 8 lanes), so query rows 2k and 2k+1 (lane groups g and g^1) share the larger of their two maxima: a valid shift in float32 (bfloat16 is unaffected), but in float16 a row whose max is ~17 or more (scaled, natural units) below its neighbour's gets P below float16's range when P is packed, e.g. float16, d=64, Nq=2, Nk=64, every k row = u, q0 = 0, q1 = c*u with scale*c*|u|^2 = 40: o row 0 is 0 instead of the mean of v.
"""06 · FlashAttention on tensor cores. Read modules/06_flash_tensor_cores.md, then fill in each TODO.

Module 03's algorithm (online softmax, bottom-right causal mask, skipped tiles), now in float16 or
bfloat16 with FlashAttention-2's data flow on the tensor cores: each warp multiplies 16×16 by 16×8
tiles with one mma.sync instruction, in registers, and the scores never leave the registers.

    for each key tile:     S    = Q Kᵀ                 mma.sync, float32 accumulators   [BLOCK_M, BLOCK_N]
                           m'   = max(m, rowmax S · scale · log2 e)       quad shuffles
                           P    = exp2(S · scale · log2 e - m')           one FFMA + one EX2 per score
                           l    = l · alpha + rowsum P,   alpha = exp2(m - m')
                           acc  = acc · alpha + P V        P: the S fragment, rounded, as mma's A fragment
    at the end:            o    = acc / l,   lse = (m + log2 l) · ln 2

One block per (query tile, head, batch) with WARPS warps; warp w owns query rows
[w · WARP_M, (w + 1) · WARP_M) of the tile, WARP_M = BLOCK_M / WARPS, a multiple of 16 (MT = WARP_M / 16
MMA row tiles). The warps share the K and V tiles, which cp.async streams into shared memory, one tile
ahead of the one being used (double buffering). Shared memory is swizzled so that ldmatrix, the
instruction that reads the fragments, is free of bank conflicts.

The given helpers wrap the PTX instructions (mma_16816, ldmatrix_x4, ldmatrix_x4_trans, cp_async_16, ...)
and the tile loads; you write the two products on fragments and the online softmax on fragment rows.
The tile sizes are stated once, in CONFIG (below the kernel), per head dimension.
"""
import functools

KERNEL = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// Compiled in from CONFIG by the launch code (-DBLOCK_M=128 -DBLOCK_N=64 -DWARPS=8 -DQ_IN_REGS=1
// -DUSE_BF16=0):
//   BLOCK_M     query rows per block
//   BLOCK_N     keys per K/V tile
//   WARPS       warps per block; each owns BLOCK_M / WARPS query rows (a multiple of 16)
//   Q_IN_REGS   1: each warp reads its Q fragments into registers once; 0: from shared memory on every
//               tile (fewer registers, more shared-memory traffic)
//   USE_BF16    the element type of q, k, v and o: 0 float16, 1 bfloat16
#if !defined(BLOCK_M) || !defined(BLOCK_N) || !defined(WARPS) || !defined(Q_IN_REGS) || !defined(USE_BF16)
#error "BLOCK_M, BLOCK_N, WARPS, Q_IN_REGS and USE_BF16 come from the Python launch code, passed to rt.compile as -D options"
#endif
constexpr int NTHREADS = WARPS * 32;
constexpr int WARP_M = BLOCK_M / WARPS;     // query rows per warp
constexpr int MT = WARP_M / 16;             // 16-row MMA tiles per warp
constexpr int NT = BLOCK_N / 8;             // 8-key MMA tiles of S per warp (a warp's rows see every key)
static_assert(WARP_M % 16 == 0, "a warp owns whole 16-row MMA tiles: BLOCK_M / WARPS must be a multiple of 16");
static_assert(BLOCK_N % 16 == 0, "P V takes keys 16 at a time: BLOCK_N must be a multiple of 16");

#if USE_BF16
typedef __nv_bfloat16 elem_t;               // one element of q, k, v, o
typedef __nv_bfloat162 elem2_t;             // two of them: one 32-bit register of a fragment
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
#else
typedef __half elem_t;
typedef __half2 elem2_t;
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
#endif

// Two floats, rounded to the element type, in one 32-bit register (lo in the low 16 bits): the form
// in which mma.sync takes its A and B operands.
__device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    elem2_t x = to_elem2(lo, hi);
    return *reinterpret_cast<unsigned*>(&x);
}

// ---- The PTX instructions, one helper each --------------------------------------------------------
//
// Fragments (PTX ISA, "Matrix fragments for mma.m16n8k16"). Lane l of the warp is in group g = l / 4
// and is thread t = l % 4 of its group. Each register holds two neighbouring columns.
//   A, 16 × 16 (row-major):  a[0] = (row g,     cols 2t, 2t+1)    a[1] = (row g + 8, cols 2t, 2t+1)
//                            a[2] = (row g,     cols 2t+8, 2t+9)  a[3] = (row g + 8, cols 2t+8, 2t+9)
//   B, 16 × 8  ("col": stored as its transpose, 8 rows of 16): b0 = (k 2t, 2t+1; col g)
//                                                               b1 = (k 2t+8, 2t+9; col g)
//   C and D, 16 × 8 floats:  d[0], d[1] = (row g, cols 2t, 2t+1)   d[2], d[3] = (row g + 8, cols 2t, 2t+1)
// So a lane holds two rows of every tile, g and g + 8, and the 4 lanes of a group ("a quad") hold a row
// between them: a row's max or sum is a reduction over the lane's own values, then over its quad.

// d = A · B + d for one 16 × 8 × 16 product, float32 accumulators.
__device__ __forceinline__ void mma_16816(float d[4], const unsigned a[4], unsigned b0, unsigned b1)
{
#if USE_BF16
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
                   "f"(d[0]), "f"(d[1]), "f"(d[2]), "f"(d[3]));
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
                   "f"(d[0]), "f"(d[1]), "f"(d[2]), "f"(d[3]));
#endif
}

__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8 × 8 matrices of 16-bit elements from shared memory. Lanes 8i .. 8i+7 give the addresses of
// the 8 rows (16 bytes each) of matrix i; lane l receives, in r[i], row l / 4, columns 2 (l % 4) and
// 2 (l % 4) + 1 of matrix i: exactly the fragment layout above.
__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const elem_t* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// The same, each matrix transposed on the way: lane l receives column l / 4, rows 2 (l % 4) and
// 2 (l % 4) + 1. A row-major [key][feature] tile of V read this way gives B fragments of V.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const elem_t* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// Copy 16 bytes from global to shared memory without passing through registers; the thread does not
// wait for it. With valid = false nothing is read and the 16 bytes are filled with zeros.
__device__ __forceinline__ void cp_async_16(elem_t* dst, const elem_t* src, bool valid)
{
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}

// Close the group of this thread's cp.async issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }

// Wait until at most N of this thread's committed groups are still in flight (the newest ones).
// Other threads' copies need a __syncthreads() after it.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }

// ---- Shared memory: swizzled tiles ----------------------------------------------------------------
//
// A tile is [rows][D] elements, row-major, each row D / 8 chunks of 16 bytes (8 elements). ldmatrix
// reads 8 rows at one chunk position per matrix. Unswizzled, those 8 chunks are D · 2 bytes apart, a
// multiple of 128 bytes, so they sit in the same 4 banks: an 8-way conflict. Swizzled, chunk c of row
// r is stored at position c ^ (r % 8): 8 consecutive rows put a given chunk in 8 different positions
// of 16 bytes, which together cover all 32 banks. (D >= 64: a row has at least 8 chunks to permute.)
template <int D>
__device__ __forceinline__ int swz(int row, int col)   // element offset of (row, col); col % 8 == 0
{
    return row * D + (((col / 8) ^ (row % 8)) * 8);
}

// Rows [row0, row0 + ROWS) of a [n_rows][D] matrix in global memory -> a swizzled [ROWS][D] tile, one
// cp.async of 16 bytes per chunk. Thread tid copies chunk tid % CHUNKS of rows tid / CHUNKS + n · ROW_STEP:
// neighbouring threads read neighbouring chunks of a row (coalesced), and since ROW_STEP is a multiple of
// 8 the swizzle is the same in every pass (one address, then constant steps). Rows past n_rows are
// zero-filled and never read: the start of src stands in as the (unread) source address.
template <int ROWS, int D>
__device__ __forceinline__ void load_tile_async(elem_t* tile, const elem_t* src, int row0, int n_rows, int tid)
{
    constexpr int CHUNKS = D / 8;                // 16-byte chunks per row
    constexpr int ROW_STEP = NTHREADS / CHUNKS;  // rows that one pass of the block copies
    static_assert(NTHREADS % CHUNKS == 0 && ROW_STEP % 8 == 0 && ROWS % ROW_STEP == 0,
                  "the block copies whole rows, ROW_STEP (a multiple of 8) at a time");
    const int r = tid / CHUNKS, c = (tid % CHUNKS) * 8;
    elem_t* dst = tile + swz<D>(r, c);
    const elem_t* g = src + (size_t)(row0 + r) * D + c;
    #pragma unroll
    for (int n = 0; n < ROWS / ROW_STEP; ++n) {
        const bool valid = row0 + r + n * ROW_STEP < n_rows;
        cp_async_16(dst + n * ROW_STEP * D, valid ? g + n * ROW_STEP * D : src, valid);
    }
}

template <int D>
__global__ void __launch_bounds__(NTHREADS)
flash_tc(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
         elem_t* __restrict__ o, float* __restrict__ lse,
         int H, int H_kv, int n_q, int n_k, float scale, int causal)
{
    static_assert(D % 64 == 0, "the swizzle permutes 8 chunks of 16 bytes: D must be a multiple of 64");
    constexpr int KSTEPS = D / 16;           // 16-feature steps of S = Q Kᵀ
    constexpr int DT = D / 8;                // 8-feature MMA tiles of acc
    constexpr int TILE = BLOCK_N * D;        // elements of one K or V tile

    // Shared memory: two stages [K tile | V tile], then Q. With Q_IN_REGS, Q is read into registers
    // before stage 1 is first written, so it borrows stage 1's space (see shared_bytes() below).
    extern __shared__ uint4 smem_u4[];
    elem_t* smem = reinterpret_cast<elem_t*>(smem_u4);
    elem_t* q_s = smem + (Q_IN_REGS ? 2 : 4) * TILE;         // [BLOCK_M][D]
    // K tile of stage s: smem + 2 s TILE, its V tile right after.

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4;                  // this lane's rows in every fragment: g and g + 8
    const int t = lane % 4;                  // and its columns: 2t and 2t + 1 of every 8
    // Query tiles near the end see the most keys when causal: start those first (module 03).
    const int q_start = (gridDim.x - 1 - blockIdx.x) * BLOCK_M;
    const int h = blockIdx.y, b = blockIdx.z;
    const int h_kv = h / (H / H_kv);         // GQA: H / H_kv query heads share one kv head
    const elem_t* q_bh = q + (size_t)(b * H + h) * n_q * D;
    const elem_t* k_bh = k + (size_t)(b * H_kv + h_kv) * n_k * D;
    const elem_t* v_bh = v + (size_t)(b * H_kv + h_kv) * n_k * D;
    const int warp_row = warp * WARP_M;      // this warp's first row in the tile
    // Scores in log2 units, the scale folded into the exponent's FMA: p = exp2(s · scale_log2 - m).
    const float scale_log2 = scale * M_LOG2E_F;
    const int offset = n_k - n_q;            // bottom-right causal rule: query i sees keys j <= i + offset
    const int q_last = min(q_start + BLOCK_M, n_q) - 1;
    const int kv_end = causal ? min(n_k, q_last + offset + 1) : n_k;   // key tiles from kv_end on are skipped
    const int n_tiles = kv_end > 0 ? (kv_end + BLOCK_N - 1) / BLOCK_N : 0;

    // Prologue: Q, then K/V tile 0 into stage 0, as two groups of copies (the second one empty when
    // no key tile runs: a group may be empty, and the count of groups stays the same for everyone).
    load_tile_async<BLOCK_M, D>(q_s, q_bh, q_start, n_q, tid);
    cp_async_commit();
    if (n_tiles > 0) {
        load_tile_async<BLOCK_N, D>(smem, k_bh, 0, n_k, tid);
        load_tile_async<BLOCK_N, D>(smem + TILE, v_bh, 0, n_k, tid);
    }
    cp_async_commit();

    // Every ldmatrix_x4 below reads one 16 × 16 block of a tile, rows 16 r16 .., columns 16 c16 ..:
    // lanes 0-15 give its rows 0-15 at column 0, lanes 16-31 the same rows at column 8, so the four
    // 8 × 8 matrices are 0: rows 0-7 × cols 0-7, 1: rows 8-15 × cols 0-7, 2: rows 0-7 × cols 8-15,
    // 3: rows 8-15 × cols 8-15. One rule for Q, K and V: the lane's offsets are computed once, shared.
    auto block16 = [&](int r16, int c16) { return swz<D>(r16 * 16 + lane % 16, c16 * 16 + (lane / 16) * 8); };

    // Q's A fragments, rows warp_row + 16 mt .., features 16 kk ..: the four matrices are a[0] .. a[3].
#if Q_IN_REGS
    unsigned q_frag[MT][KSTEPS][4];
    cp_async_wait<1>();                      // Q has landed (tile 0 may still be in flight)
    __syncthreads();
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk)
            ldmatrix_x4(q_frag[mt][kk], q_s + block16(warp_row / 16 + mt, kk));
#endif
    auto q_fragment = [&](unsigned (&a)[4], int mt, int kk) {
#if Q_IN_REGS
        #pragma unroll
        for (int x = 0; x < 4; ++x) a[x] = q_frag[mt][kk][x];
#else
        ldmatrix_x4(a, q_s + block16(warp_row / 16 + mt, kk));
#endif
    };

    // The online-softmax state of this lane's rows: [mt][0] is row g, [mt][1] row g + 8 of MMA tile mt.
    // m is the running max in log2 units (the same in the 4 lanes of a quad), l this lane's part of the
    // running sum (the quad's 4 parts are added at the end), acc the unnormalised output fragment.
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
        const elem_t* k_t = smem + (it % 2) * 2 * TILE;      // this tile's stage
        const elem_t* v_t = k_t + TILE;

        // Pipeline: tile it was issued one iteration ago. Wait for this thread's copies, then for
        // everyone's; the barrier also says that every warp is done with tile it - 1, so its stage
        // can be refilled with tile it + 1, whose copies then run while this tile is computed.
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_tiles) {
            elem_t* next = smem + ((it + 1) % 2) * 2 * TILE;
            load_tile_async<BLOCK_N, D>(next, k_bh, kv_start + BLOCK_N, n_k, tid);
            load_tile_async<BLOCK_N, D>(next + TILE, v_bh, kv_start + BLOCK_N, n_k, tid);
            cp_async_commit();
        }

        // s[mt][nt]: the C fragment of S for rows warp_row + 16 mt .., keys kv_start + 8 nt .., unscaled.
        float s[MT][NT][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                #pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;

        // BEGIN SOLUTION TODO(1): S = Q Kᵀ: for each 16-feature step kk, take Q's A fragments (q_fragment), read the B fragments of 16 keys at a time from k_t with one ldmatrix_x4 and accumulate with mma_16816 into s
        #pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
            unsigned a[MT][4];
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) q_fragment(a[mt], mt, kk);
            #pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                // K is stored [key][feature], Kᵀ's columns as rows: the layout "col" B wants, no
                // transpose. Keys 16 np .., features 16 kk ..: kb[0] = keys 0-7 × features 0-7 (b0 of
                // key tile 2np), kb[2] = keys 0-7 × features 8-15 (its b1), kb[1], kb[3] = keys 8-15.
                unsigned kb[4];
                ldmatrix_x4(kb, k_t + block16(np, kk));
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_16816(s[mt][2 * np], a[mt], kb[0], kb[2]);
                    mma_16816(s[mt][2 * np + 1], a[mt], kb[1], kb[3]);
                }
            }
        }
        // END SOLUTION

        // Masks (module 03): keys past n_k, and with causal the keys above the diagonal, score -inf.
        // Element e of s[mt][nt] is row warp_row + 16 mt + g + 8 (e / 2), key kv_start + 8 nt + 2t + e % 2.
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

        // p[mt][kk]: P as the A fragment of P V for rows warp_row + 16 mt .., keys kv_start + 16 kk ..
        unsigned p[MT][NT / 2][4];
        // BEGIN SOLUTION TODO(2): the online softmax on fragment rows: per row (r = 0: g, r = 1: g + 8) the tile's max over the lane's values and its quad (__shfl_xor_sync, offsets 1 and 2), m_new in log2 units, m_use, alpha; rescale l and acc; P = exp2(s · scale_log2 - m_use) added to l; then pack P into p (S tiles 2kk and 2kk + 1 are the two halves of A fragment kk)
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                float mx = -INFINITY;                 // the row's max over this lane's 2 · NT scores
                #pragma unroll
                for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));   // ... and over its quad
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
                const float m_new = fmaxf(m[mt][r], mx * scale_log2);  // scale > 0 keeps the max the max
                const float m_use = m_new == -INFINITY ? 0.0f : m_new; // no visible key yet: no NaN
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
                        s[mt][nt][e] = exp2f(fmaf(s[mt][nt][e], scale_log2, -m_use));   // s now holds P
                        l[mt][r] += s[mt][nt][e];                                       // float32, unrounded
                    }
            }
            // The C fragment of S tiles 2kk, 2kk + 1 is, element for element, the A fragment of keys
            // 16 kk .. 16 kk + 15: P never leaves the registers, it is only rounded to the element type.
            #pragma unroll
            for (int kk = 0; kk < NT / 2; ++kk) {
                p[mt][kk][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);           // row g,     keys 2t, 2t+1
                p[mt][kk][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);           // row g + 8
                p[mt][kk][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);   // row g,     keys 2t+8, 2t+9
                p[mt][kk][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);   // row g + 8
            }
        }
        // END SOLUTION

        // BEGIN SOLUTION TODO(3): acc += P V: for each 16-key step kk, read the B fragments of 16 features at a time from v_t with one ldmatrix_x4_trans and accumulate p[mt][kk] times them with mma_16816 into acc
        #pragma unroll
        for (int kk = 0; kk < NT / 2; ++kk) {
            #pragma unroll
            for (int dp = 0; dp < DT / 2; ++dp) {
                // V is stored [key][feature]; B wants k (the keys) paired in its registers: each 8 × 8
                // matrix transposed. Keys 16 kk .., features 16 dp ..: vb[0] = keys 0-7 × features 0-7
                // (b0 of feature tile 2dp), vb[1] = keys 8-15 (its b1), vb[2], vb[3] = features 8-15.
                unsigned vb[4];
                ldmatrix_x4_trans(vb, v_t + block16(kk, dp));
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_16816(acc[mt][2 * dp], p[mt][kk], vb[0], vb[1]);
                    mma_16816(acc[mt][2 * dp + 1], p[mt][kk], vb[2], vb[3]);
                }
            }
        }
        // END SOLUTION
    }
    cp_async_wait<0>();                      // no copy outlives the block (Q, when no tile ran)

    // BEGIN SOLUTION TODO(4): per row, add the quad's 4 parts of l (shuffles, before any if), then for rows i < n_q write o = acc / l in the element type (a row with l = 0 writes 0) and, from one lane of the quad, lse = (m + log2 l) · ln 2 (-INFINITY when l = 0)
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l_row = l[mt][r];
            l_row += __shfl_xor_sync(0xffffffffu, l_row, 1);
            l_row += __shfl_xor_sync(0xffffffffu, l_row, 2);
            const int i = q_start + warp_row + mt * 16 + g + 8 * r;
            if (i < n_q) {
                const float inv_l = l_row > 0.0f ? 1.0f / l_row : 0.0f;   // l = 0: the row saw no key
                elem_t* o_i = o + ((size_t)(b * H + h) * n_q + i) * D;
                #pragma unroll
                for (int dt = 0; dt < DT; ++dt)
                    *reinterpret_cast<elem2_t*>(o_i + dt * 8 + 2 * t) =
                        to_elem2(acc[mt][dt][2 * r] * inv_l, acc[mt][dt][2 * r + 1] * inv_l);
                if (t == 0)
                    lse[(size_t)(b * H + h) * n_q + i] =
                        l_row > 0.0f ? (m[mt][r] + log2f(l_row)) * M_LN2_F : -INFINITY;
            }
        }
    // END SOLUTION
}
"""

# The tile sizes, per head dimension, stated once: each call compiles KERNEL with them as -D options.
# A variant is one assignment away: CONFIG = {**CONFIG, 128: dict(CONFIG[128], BLOCK_N=32)}.
#   d = 128: 8 warps of 16 rows, Q in registers: 240 registers, no spill (4 warps of 32 rows need
#            255 and spill, and run 8% slower without causal, 15% with).
#   d = 64:  4 warps of 32 rows (2 MMA row tiles share each K and V fragment read from shared memory),
#            Q in registers.
# Chosen by timing these and seven other settings per d on an H100 (2026-11-23, B=2, H=16, N=4096, float16).
CONFIG = {
    64: dict(BLOCK_M=128, BLOCK_N=64, WARPS=4, Q_IN_REGS=1),
    128: dict(BLOCK_M=128, BLOCK_N=64, WARPS=8, Q_IN_REGS=1),
}
HEAD_DIMS = (64, 128)
DTYPES = ("float16", "bfloat16")
ELEMENT_BYTES = 2


def cdiv(a, b):
    return (a + b - 1) // b


@functools.lru_cache(maxsize=None)
def _kernel(rt, d, elem, config):
    """One build per head dimension, element type and CONFIG (compiled and looked up once, not on
    every call: the host work would otherwise add a visible fraction of a millisecond per call).
    config is CONFIG[d]'s items as a tuple, so that the cache can key on it."""
    options = tuple(f"-D{key}={int(val)}" for key, val in config)   # the tile sizes: the kernel's macros
    options += (f"-DUSE_BF16={int(elem == 'bfloat16')}",
                # Flush float32 denormals to zero: exp2f is then one MUFU.EX2 instruction, without the
                # range fix-up around it (p < 2^-126 becomes 0; FlashAttention-2 builds with fast math).
                "-ftz=true")
    name = f"flash_tc<{d}>"
    kernel = rt.compile(KERNEL, options=options, name_expressions=[name]).get_function(name)
    smem = shared_bytes(d)
    if smem > 48 * 1024:                          # past 48 KB a kernel must opt in
        kernel.max_dynamic_shared_size_bytes = smem
    return kernel


def nthreads(d):
    """Threads per block, NTHREADS in the kernel."""
    return CONFIG[d]["WARPS"] * 32


def shared_bytes(d):
    """Two stages of a K and a V tile, and the Q tile (over stage 1 when Q goes to registers)."""
    cfg = CONFIG[d]
    tile = cfg["BLOCK_N"] * d * ELEMENT_BYTES
    q_tile = cfg["BLOCK_M"] * d * ELEMENT_BYTES
    return max(4 * tile, 2 * tile + q_tile) if cfg["Q_IN_REGS"] else 4 * tile + q_tile


def element_type(q, k, v, dtype=None):
    """'float16' or 'bfloat16': what q, k and v hold. dtype=None reads it from q.dtype; uint16 arrays
    (bfloat16 bits, as NumPy stores them) need dtype='bfloat16'."""
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if q.dtype.itemsize != ELEMENT_BYTES:
        raise TypeError(f"flash_tc takes float16 or bfloat16 arrays, got {q.dtype}")
    if dtype is None:
        name = q.dtype.name
        if name == "uint16":
            raise TypeError("q is uint16: if it holds bfloat16 bits, say so with dtype='bfloat16'")
    else:
        name = dtype if isinstance(dtype, str) else getattr(dtype, "name", getattr(dtype, "__name__", str(dtype)))
        if q.dtype.name not in (name, "uint16"):
            raise TypeError(f"dtype={name!r} but q is {q.dtype}")
    if name not in DTYPES:
        raise TypeError(f"flash_tc takes float16 or bfloat16 arrays, got {name}")
    return name


def flash_tc(rt, q, k, v, scale, causal=False, dtype=None):
    """q [B, H, Nq, d]; k, v [B, Hkv, Nk, d]; float16 or bfloat16, contiguous, on rt's device ->
    (o [B, H, Nq, d] of q's dtype, lse [B, H, Nq] float32). causal: the bottom-right mask of module 03."""
    B, H, n_q, d = q.shape
    H_kv, n_k = k.shape[1], k.shape[2]
    if k.shape != (B, H_kv, n_k, d) or v.shape != k.shape:
        raise ValueError(f"k and v must be [B, Hkv, Nk, d] with q's B and d, got {k.shape} and {v.shape}")
    if H % H_kv:
        raise ValueError(f"H = {H} must be a multiple of Hkv = {H_kv}")
    if n_q < 1 or n_k < 1:
        raise ValueError(f"Nq and Nk must be at least 1, got {n_q} and {n_k}")
    if d not in HEAD_DIMS:
        raise ValueError(f"head_dim {d} is not supported (choose one of {HEAD_DIMS})")
    if not all(x.flags.c_contiguous for x in (q, k, v)):
        raise ValueError("q, k and v must be contiguous (cp.async copies rows in 16-byte pieces)")
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}: the kernel takes the row max of the "
                         "unscaled scores and scales it after, which keeps it the max only for scale > 0")
    elem = element_type(q, k, v, dtype)

    kernel = _kernel(rt, d, elem, tuple(CONFIG[d].items()))
    o = rt.empty(q.shape, q.dtype)
    lse = rt.empty((B, H, n_q), "float32")
    grid = (cdiv(n_q, CONFIG[d]["BLOCK_M"]), H, B)
    kernel(grid, (nthreads(d),), (q, k, v, o, lse, rt.int32(H), rt.int32(H_kv), rt.int32(n_q), rt.int32(n_k),
                         rt.float32(scale), rt.int32(int(bool(causal)))), shared_mem=shared_bytes(d))
    return o, lse
