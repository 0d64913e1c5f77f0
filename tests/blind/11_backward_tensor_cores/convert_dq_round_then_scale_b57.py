# BLIND: In convert_dq (TODO 6) the pair is rounded to the element type before the scale is applied, '__hmul2(to_elem2(x.x, x.y), to_elem2(scale, scale))' instead of 'to_elem2(scale * x.x, scale * x.y)': only a double rounding for ordinary values and harmless in bfloat16, but in float16 an unscaled dq_acc above 65504 becomes inf although dQ itself fits, e.g. float16, B=H=1, Nq=1, Nk=2, d=128, q=0, k1=90.5*e0, k2=0, v1=100*e0, v2=0, dO=100*e0: dQ[0] should be 2.0e4, the kernel gives inf.
"""11 · The backward pass on tensor cores. Read modules/11_backward_tensor_cores.md, then fill in each TODO.

Module 09's algorithm (one block per key tile, P recomputed from lse, dS = P ∘ (dP - D), dQ added
by every key tile) in float16 or bfloat16 on module 06's mma.sync fragments. Each warp owns 16 keys
of the block's tile and computes the transposed products, so that P and dS come out of one product
in exactly the layout the next one takes as its A operand:

    Sᵀ   = K Qᵀ                  A: K (ldmatrix)          B: Q (ldmatrix)          [keys × queries]
    Pᵀ   = exp2(Sᵀ · scale · log2 e - lse · log2 e)       float32, in the Sᵀ fragment
    dV  += Pᵀ dO                 A: Pᵀ (registers)        B: dO (ldmatrix.trans)    [keys × features]
    dPᵀ  = V dOᵀ                 A: V (ldmatrix)          B: dO (ldmatrix)          [keys × queries]
    dSᵀ  = Pᵀ ∘ (dPᵀ - D)        float32, D of each query (column)
    dK  += dSᵀ Q                 A: dSᵀ (registers)       B: Q (ldmatrix.trans)     [keys × features]
    dQ  += dS K                  A: dS (shared, .trans)   B: K (ldmatrix.trans)     [queries × features]
                                 float32 atomicAdd into dq_acc: every key tile adds to the same rows

Three kernels: backward_preprocess (D = rowsum(dO ∘ O) in float32, dq_acc = 0), flash_backward_tc
(the block per key tile and kv head), convert_dq (dq = scale · dq_acc, rounded to the input type).
The PTX helpers, the tile loads, the pipeline and the launch code are given (as in module 06).
"""
import functools

KERNEL = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// Compiled in from CONFIG by the launch code (-DBLOCK_M=64 -DBLOCK_N=128 -DUSE_BF16=0):
//   BLOCK_M    query rows per step of the block's loop
//   BLOCK_N    keys per block: the rows of dK and dV it owns; one warp per 16 keys
//   USE_BF16   the element type of q, k, v, o, dO and of dq, dk, dv: 0 float16, 1 bfloat16
#if !defined(BLOCK_M) || !defined(BLOCK_N) || !defined(USE_BF16)
#error "BLOCK_M, BLOCK_N and USE_BF16 come from the Python launch code, passed to rt.compile as -D options"
#endif
constexpr int WARPS = BLOCK_N / 16;         // warp w owns keys 16 w .. 16 w + 15 of the block
constexpr int NTHREADS = WARPS * 32;
constexpr int NT = BLOCK_M / 8;             // 8-query MMA tiles of Sᵀ and dPᵀ (a warp's keys see every query)
constexpr int QSTEPS = BLOCK_M / 16;        // 16-query steps of dV += Pᵀ dO and dK += dSᵀ Q
constexpr int ROW_TILES = BLOCK_M / 16;     // 16-row tiles of dQ = dS K ...
constexpr int DQ_SPLIT = WARPS / ROW_TILES; // ... each shared by DQ_SPLIT warps, D / DQ_SPLIT features apiece
static_assert(BLOCK_N % 16 == 0 && BLOCK_M % 16 == 0, "whole 16 × 16 MMA blocks");
static_assert(WARPS % ROW_TILES == 0, "the warps split dQ's row tiles evenly");

#if USE_BF16
typedef __nv_bfloat16 elem_t;
typedef __nv_bfloat162 elem2_t;
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
__device__ __forceinline__ float2 from_elem2(elem2_t x) { return __bfloat1622float2(x); }
#else
typedef __half elem_t;
typedef __half2 elem2_t;
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
__device__ __forceinline__ float2 from_elem2(elem2_t x) { return __half22float2(x); }
#endif

// Two floats, rounded to the element type, in one 32-bit register (lo in the low 16 bits).
__device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    elem2_t x = to_elem2(lo, hi);
    return *reinterpret_cast<unsigned*>(&x);
}

// ---- The PTX instructions (module 06) --------------------------------------------------------------
// Lane l: group g = l / 4, thread t = l % 4.
//   A, 16 × 16 row-major: a[0] = (row g, cols 2t, 2t+1)  a[1] = (row g + 8, same)
//                         a[2] = (row g, cols 2t+8, 2t+9) a[3] = (row g + 8, same)
//   B, 16 × 8 "col":      b0 = (k 2t, 2t+1; col g)      b1 = (k 2t+8, 2t+9; col g)
//   C, 16 × 8 float32:    c[0], c[1] = (row g, cols 2t, 2t+1)   c[2], c[3] = (row g + 8, same)
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

// Four 8 × 8 matrices of 16-bit elements; lanes 8i .. 8i+7 give the row addresses of matrix i, and
// lane l receives in r[i] row l / 4, columns 2 (l % 4), 2 (l % 4) + 1 of matrix i.
__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const elem_t* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// The same, each matrix transposed on the way: lane l receives column l / 4, rows 2 (l % 4), 2 (l % 4) + 1.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const elem_t* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// 16 (or 4) bytes from global to shared memory, asynchronously; valid = false fills them with zeros.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }

// ---- Shared memory: swizzled tiles (module 06, section 9) ------------------------------------------
// Element (row, col) of a [rows][W] tile of 16-bit elements. ldmatrix reads 8 rows at one chunk
// position (16 bytes) per matrix; unswizzled, those 8 chunks would share 4 banks. Chunk col / 8 of row
// r is stored at chunk position (col / 8) ^ f(r): with W >= 64 (8 chunks or more a row), f(r) = r % 8
// (module 06); with W = 32 (4 chunks: two rows per 128 bytes), f(r) = (r / 2) % 4. Either way, the 8
// chunks an ldmatrix matrix reads lie in 8 different 16-byte positions of 128 bytes: all 32 banks.
template <int W>
__device__ __forceinline__ int swz(int row, int col)
{
    static_assert(W == 32 || W % 64 == 0, "a swizzled row is 32 elements or a multiple of 64");
    const int f = W >= 64 ? row % 8 : (row / 2) % 4;
    return row * W + ((((col / 8) ^ f) * 8) | (col % 8));
}

// Rows [row0, row0 + ROWS) of a [n_rows][D] matrix -> a swizzled [ROWS][D] tile, 16 bytes per
// cp.async; rows past n_rows are zero-filled (src itself stands in as the unread address).
template <int ROWS, int D>
__device__ __forceinline__ void load_tile_async(elem_t* tile, const elem_t* src, int row0, int n_rows, int tid)
{
    constexpr int CHUNKS = D / 8;
    constexpr int ROW_STEP = NTHREADS / CHUNKS;
    static_assert(NTHREADS % CHUNKS == 0 && ROW_STEP % 8 == 0 && ROWS % ROW_STEP == 0,
                  "the block copies whole rows, ROW_STEP (a multiple of 8) at a time");
    const int r = tid / CHUNKS, c = (tid % CHUNKS) * 8;
    #pragma unroll
    for (int n = 0; n < ROWS / ROW_STEP; ++n) {
        const int row = r + n * ROW_STEP;
        const bool valid = row0 + row < n_rows;
        cp_async_16(tile + swz<D>(row, c), valid ? src + (size_t)(row0 + row) * D + c : src, valid);
    }
}

// The offset lane `lane` gives ldmatrix for the 16 × 16 block (rows 16 r16 .., cols 16 c16 ..) of a
// swizzled [rows][W] tile: lanes 0-15 its rows at column 0, lanes 16-31 the same rows at column 8. The
// four matrices: 0 = rows 0-7 × cols 0-7, 1 = rows 8-15 × cols 0-7, 2 = rows 0-7 × cols 8-15, 3 = rows 8-15 × cols 8-15.
template <int W>
__device__ __forceinline__ int block16(int r16, int c16, int lane)
{
    // swz<W>(r16 * 16 + lane % 16, c16 * 16 + (lane / 16) * 8), written so that the lane's part is
    // computed once: in a wide tile (W >= 64) the swizzle's XOR changes only the low 3 bits of a chunk
    // index, so swz<W>(lane's row, lane's column) is the same for c16 and c16 + 4, and what the loops
    // add, r16 · 16 · W + (c16 / 4) · 64, is a constant (lesson, section 12: fewer address instructions).
    if (W >= 64) return r16 * 16 * W + (c16 / 4) * 64 + swz<W>(lane % 16, (c16 % 4) * 16 + (lane / 16) * 8);
    return swz<W>(r16 * 16 + lane % 16, c16 * 16 + (lane / 16) * 8);
}

// The same block with its matrices across first: lanes 0-7 give rows 0-7 at column 0, lanes 8-15 the
// same rows at column 8, lanes 16-31 rows 8-15 likewise. Matrices: 0 = rows 0-7 × cols 0-7, 1 = rows
// 0-7 × cols 8-15, 2 = rows 8-15 × cols 0-7, 3 = rows 8-15 × cols 8-15. dQ reads dSᵀ this way: with
// .trans, these are A's a[0] .. a[3] in order, four registers side by side as mma takes them, where
// block16's order would need them reordered, and the compiler to move registers (lesson, section 3).
template <int W>
__device__ __forceinline__ int block16_across(int r16, int c16, int lane)
{
    return swz<W>(r16 * 16 + (lane / 16) * 8 + lane % 8, c16 * 16 + ((lane / 8) % 2) * 8);
}

// dst[0] += lo, dst[1] += hi in global memory, atomically, the result unused (a reduction, RED): one
// 8-byte reduction on sm_90 (float2 atomicAdd, Hopper and later), two 4-byte ones before it. dst is
// 8-byte aligned.
__device__ __forceinline__ void atomic_add2(float* dst, float lo, float hi)
{
#if __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2*>(dst), make_float2(lo, hi));
#else
    atomicAdd(dst, lo);
    atomicAdd(dst + 1, hi);
#endif
}

// D_i = sum_c dO[i, c] · O[i, c] in float32, one warp per row of the flattened [rows, d] arrays; the
// row of the float32 dQ accumulator set to 0 for flash_backward_tc's atomics.
extern "C" __global__ void backward_preprocess(const elem_t* __restrict__ o, const elem_t* __restrict__ dout,
                                               float* __restrict__ delta, float* __restrict__ dq_acc,
                                               int rows, int d)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;                      // a whole warp leaves together
    const elem2_t* o_i = reinterpret_cast<const elem2_t*>(o + (size_t)row * d);
    const elem2_t* do_i = reinterpret_cast<const elem2_t*>(dout + (size_t)row * d);
    float acc = 0.0f;
    for (int c = lane; c < d / 2; c += 32) {      // two features per lane and step
        const float2 x = from_elem2(o_i[c]), y = from_elem2(do_i[c]);
        acc += x.x * y.x + x.y * y.y;
        reinterpret_cast<float2*>(dq_acc + (size_t)row * d)[c] = make_float2(0.0f, 0.0f);
    }
    for (int stride = 16; stride > 0; stride /= 2)
        acc += __shfl_xor_sync(0xffffffffu, acc, stride);
    if (lane == 0) delta[row] = acc;
}

// ---- The products of one step, per warp -----------------------------------------------------------
// One 16-feature step kk of x += (the warp's 16 rows of a_s) · (the 16 · QSTEPS rows of b_t)ᵀ: Sᵀ = K Qᵀ
// with (k_s, Q tile), dPᵀ = V dOᵀ with (v_s, dO tile). x[nt] is the C fragment of rows 16 · warp + g (+ 8)
// of a_s, columns (rows of b_t) 8 nt + 2t (+ 1). Both tiles are [row][feature] with D features.
template <int D>
__device__ __forceinline__ void product_t_step(float (&x)[NT][4], const elem_t* a_s, const elem_t* b_t, int kk,
                                               int warp, int lane)
{
    // BEGIN SOLUTION TODO(1): the A fragment of the warp's 16 rows of a_s at features 16 kk .. (one ldmatrix_x4), then for every 16 rows of b_t one ldmatrix_x4 (no .trans) giving the B fragments of two 8-column tiles of x, and two mma_16816
    // a_s is stored [key][feature], row-major like A: matrices 0 .. 3 are a[0] .. a[3].
    unsigned a[4];
    ldmatrix_x4(a, a_s + block16<D>(warp, kk, lane));
    #pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
        // B = b_tᵀ (k = feature, n = query): stored [query][feature], it is Bᵀ stored row-major, the
        // "col" layout, as K was in module 06. Queries 16 np ..: (b[0], b[2]) is column tile 2np,
        // (b[1], b[3]) column tile 2np + 1. (block16_across would make them neighbours and spare the
        // compiler its register moves; measured, it is slower here: lesson, section 12.)
        unsigned b[4];
        ldmatrix_x4(b, b_t + block16<D>(np, kk, lane));
        mma_16816(x[2 * np], a, b[0], b[2]);
        mma_16816(x[2 * np + 1], a, b[1], b[3]);
    }
    // END SOLUTION
}

// x = a_s · b_tᵀ and y = c_s · d_tᵀ (the warp's 16 rows of a_s and c_s), summed over the D features: Sᵀ
// and dPᵀ. The two products share nothing, so they share the loop: each feature step issues both, twice
// the independent loads and mma for the warp to overlap. Fully unrolled (D / 16 steps), like every
// loop of the step, dQ's included: with the whole step in view, the compiler issues loads well ahead of
// the mma that use them (lesson, section 12).
template <int D>
__device__ __forceinline__ void products_t(float (&x)[NT][4], const elem_t* a_s, const elem_t* b_t,
                                           float (&y)[NT][4], const elem_t* c_s, const elem_t* d_t, int warp, int lane)
{
    #pragma unroll
    for (int nt = 0; nt < NT; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) { x[nt][e] = 0.0f; y[nt][e] = 0.0f; }
    #pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        product_t_step<D>(x, a_s, b_t, kk, warp, lane);
        product_t_step<D>(y, c_s, d_t, kk, warp, lane);
    }
}

// The C fragments of x (16 rows × BLOCK_M columns, float32) as A fragments of 16 × 16 (a[kk]: columns
// 16 kk .. 16 kk + 15), rounded to the element type. A C fragment's registers sit where A's do: C tiles
// 2kk and 2kk + 1 are the left and right halves of A fragment kk (module 06, section 6).
__device__ __forceinline__ void to_a_fragments(unsigned (&a)[QSTEPS][4], const float (&x)[NT][4])
{
    #pragma unroll
    for (int kk = 0; kk < QSTEPS; ++kk) {
        a[kk][0] = pack2(x[2 * kk][0], x[2 * kk][1]);            // row g,     columns 2t, 2t+1
        a[kk][1] = pack2(x[2 * kk][2], x[2 * kk][3]);            // row g + 8
        a[kk][2] = pack2(x[2 * kk + 1][0], x[2 * kk + 1][1]);    // row g,     columns 2t+8, 2t+9
        a[kk][3] = pack2(x[2 * kk + 1][2], x[2 * kk + 1][3]);    // row g + 8
    }
}

// acc += A · b_t, summed over the tile's BLOCK_M queries: dV += Pᵀ dO with (Pᵀ, dO tile), dK += dSᵀ Q
// with (dSᵀ, Q tile). a[kk] holds the warp's 16 keys × queries 16 kk ..; acc[dt] the C fragment of its
// keys × features 8 dt ...
template <int D>
__device__ __forceinline__ void add_product(float (&acc)[D / 8][4], const unsigned (&a)[QSTEPS][4], const elem_t* b_t, int lane)
{
    // BEGIN SOLUTION TODO(3): per 16-query step kk and 16 features dp: one ldmatrix_x4_trans of b_t's block (kk, dp) gives the B fragments (k = query, n = feature) of feature tiles 2dp and 2dp + 1; two mma_16816 with a[kk]
    #pragma unroll
    for (int kk = 0; kk < QSTEPS; ++kk) {
        #pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
            // B wants two neighbouring queries of one feature in a register, and b_t is stored
            // [query][feature]: each 8 × 8 matrix transposed on the way, as V in module 06. (b[0], b[1])
            // is feature tile 2dp (queries 0-7, then 8-15), (b[2], b[3]) feature tile 2dp + 1.
            unsigned b[4];
            ldmatrix_x4_trans(b, b_t + block16<D>(kk, dp, lane));
            mma_16816(acc[2 * dp], a[kk], b[0], b[1]);
            mma_16816(acc[2 * dp + 1], a[kk], b[2], b[3]);
        }
    }
    // END SOLUTION
}

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

    // Shared memory: K and V of the block's keys; dSᵀ of the step, [key][query]; two stages of
    // [Q tile | dO tile | lse | D], the next step's copies in flight while this one is used.
    extern __shared__ uint4 smem_u4[];
    elem_t* k_s = reinterpret_cast<elem_t*>(smem_u4);    // [BLOCK_N][D]
    elem_t* v_s = k_s + BLOCK_N * D;                     // [BLOCK_N][D]
    elem_t* ds_s = v_s + BLOCK_N * D;                    // [BLOCK_N][BLOCK_M]
    elem_t* stages = ds_s + BLOCK_N * BLOCK_M;           // stage s: stages + s · STAGE

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const int k_start = blockIdx.x * BLOCK_N;
    const int h_kv = blockIdx.y, b = blockIdx.z;
    const int group = H / H_kv;              // GQA: query heads h_kv · group .. h_kv · group + group - 1
    const int warp_key = warp * 16;          // this warp's first key in the block
    const float scale_log2 = scale * M_LOG2E_F;
    const int offset = n_k - n_q;            // causal, bottom-right: query i sees keys j <= i + offset
    const elem_t* k_b = k + (size_t)(b * H_kv + h_kv) * n_k * D;
    const elem_t* v_b = v + (size_t)(b * H_kv + h_kv) * n_k * D;

    // The block's steps: every (query head of the group, query tile), the tiles before m_begin
    // skipped under causal (their rows see none of the block's keys).
    const int m_begin = causal ? max(0, (k_start - offset) / BLOCK_M * BLOCK_M) : 0;
    const int m_tiles = m_begin < n_q ? (n_q - m_begin + BLOCK_M - 1) / BLOCK_M : 0;
    const int n_steps = group * m_tiles;

    // Stage it % 2 of step it: the query tile's rows of Q and dO (zeros past n_q), and its lse and D
    // (zeros past n_q, masked below).
    auto load_step = [&](int it) {
        elem_t* st = stages + (it % 2) * STAGE;
        const int h = h_kv * group + it / m_tiles, m_start = m_begin + (it % m_tiles) * BLOCK_M;
        const size_t bh = (size_t)(b * H + h) * n_q;
        load_tile_async<BLOCK_M, D>(st, q + bh * D, m_start, n_q, tid);
        load_tile_async<BLOCK_M, D>(st + BLOCK_M * D, dout + bh * D, m_start, n_q, tid);
        float* rows_s = reinterpret_cast<float*>(st + 2 * BLOCK_M * D);   // lse, then D: float32
        if (tid < 2 * BLOCK_M) {
            const int r = tid % BLOCK_M;
            const bool valid = m_start + r < n_q;
            cp_async_4(rows_s + tid, (tid < BLOCK_M ? lse : delta) + bh + (valid ? m_start + r : 0), valid);
        }
    };

    // Prologue: K and V (one group of copies), the first step's stage (another).
    load_tile_async<BLOCK_N, D>(k_s, k_b, k_start, n_k, tid);
    load_tile_async<BLOCK_N, D>(v_s, v_b, k_start, n_k, tid);
    cp_async_commit();
    if (n_steps > 0) load_step(0);
    cp_async_commit();

    // dV and dK / scale of the warp's 16 keys, summed over every query of every head of the group:
    // C fragments, rows (keys) warp_key + g (+ 8), features 8 dt + 2t (+ 1).
    float dv_acc[DT][4], dk_acc[DT][4];
    #pragma unroll
    for (int dt = 0; dt < DT; ++dt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) { dv_acc[dt][e] = 0.0f; dk_acc[dt][e] = 0.0f; }

    for (int it = 0; it < n_steps; ++it) {
        const int h = h_kv * group + it / m_tiles, m_start = m_begin + (it % m_tiles) * BLOCK_M;
        const size_t bh = (size_t)(b * H + h) * n_q;
        const elem_t* q_t = stages + (it % 2) * STAGE;   // this step's Q tile [BLOCK_M][D]
        const elem_t* do_t = q_t + BLOCK_M * D;          // and dO tile
        const float* lse_t = reinterpret_cast<const float*>(do_t + BLOCK_M * D);   // [BLOCK_M], natural log
        const float* delta_t = lse_t + BLOCK_M;                                    // [BLOCK_M]

        // This step's stage has landed (and K, V at the first step); the barrier also says that every
        // warp is done with the previous step (its stage and ds_s), so the next step's copies may go.
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_steps) load_step(it + 1);
        cp_async_commit();

        // Element e of a C fragment x[nt] of this step is key k_start + warp_key + g + 8 (e / 2) and
        // query m_start + 8 nt + 2t + e % 2. The per-element test is needed only where the tile is
        // partial or the causal diagonal cuts it.
        const bool masked = (causal && k_start + BLOCK_N - 1 > m_start + offset)
                            || k_start + BLOCK_N > n_k || m_start + BLOCK_M > n_q;

        // Sᵀ = K Qᵀ (unscaled) and dPᵀ = V dOᵀ; Pᵀ, then dV += Pᵀ dO with Pᵀ straight from the registers.
        float pT[NT][4], dsT[NT][4];
        products_t<D>(pT, k_s, q_t, dsT, v_s, do_t, warp, lane);
        // BEGIN SOLUTION TODO(2): turn pT from Sᵀ into Pᵀ in place: P = exp2(s · scale_log2 - lse · log2 e) with the query's lse from lse_t (natural log), and 0 where the key is past n_k, the query past n_q, or the key hidden by the causal mask
        #pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            // The lane's two queries of tile nt are neighbours: one 8-byte read of their lse.
            const float2 lse2 = *reinterpret_cast<const float2*>(&lse_t[nt * 8 + 2 * t]);
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int j = k_start + warp_key + g + 8 * (e / 2), i = m_start + nt * 8 + 2 * t + e % 2;
                // A row with lse = -inf (it saw no key) has every key hidden: the causal test covers it.
                const bool visible = !masked || (j < n_k && i < n_q && (!causal || j <= i + offset));
                const float lse_log2 = (e % 2 ? lse2.y : lse2.x) * M_LOG2E_F;
                pT[nt][e] = visible ? exp2f(fmaf(pT[nt][e], scale_log2, -lse_log2)) : 0.0f;
            }
        }
        // END SOLUTION
        unsigned a[QSTEPS][4];                           // A fragments: Pᵀ, then dSᵀ
        to_a_fragments(a, pT);
        add_product<D>(dv_acc, a, do_t, lane);

        // dSᵀ, then dK += dSᵀ Q, and dSᵀ into shared memory for dQ.
        // BEGIN SOLUTION TODO(4): turn dsT from dPᵀ into dSᵀ in place, dS = P · (dP - D) with P from pT and the query's D from delta_t; then its A fragments (to_a_fragments), dK += dSᵀ Q (add_product), and every register of the A fragments stored to ds_s[key][query] (swz<BLOCK_M>), where dQ reads them
        #pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const float2 d2 = *reinterpret_cast<const float2*>(&delta_t[nt * 8 + 2 * t]);
            #pragma unroll
            for (int e = 0; e < 4; ++e) dsT[nt][e] = pT[nt][e] * (dsT[nt][e] - (e % 2 ? d2.y : d2.x));
        }
        to_a_fragments(a, dsT);
        add_product<D>(dk_acc, a, q_t, lane);
        // Register x of a[kk] holds key warp_key + g + 8 (x % 2), queries 16 kk + 8 (x / 2) + 2t, + 1:
        // two neighbours of a row of dSᵀ, one 4-byte store.
        #pragma unroll
        for (int kk = 0; kk < QSTEPS; ++kk)
            #pragma unroll
            for (int x = 0; x < 4; ++x)
                *reinterpret_cast<unsigned*>(&ds_s[swz<BLOCK_M>(warp_key + g + 8 * (x % 2), kk * 16 + 8 * (x / 2) + 2 * t)]) = a[kk][x];
        // END SOLUTION
        __syncthreads();                     // every warp's keys of dSᵀ are in ds_s

        // dQ of this step: warp w takes row tile mq = w % ROW_TILES of the query tile and the features
        // of its part fq = w / ROW_TILES; C fragments, rows 16 mq + g (+ 8), features 8 (fq · DQ_DT + dt) + 2t (+ 1).
        const int mq = warp % ROW_TILES, fq = warp / ROW_TILES;
        // Two sets of accumulators: the even key steps add into dq_frag, the odd ones into dq_odd, two
        // independent chains of mma per feature tile where one would make each wait for the last.
        float dq_frag[DQ_DT][4], dq_odd[DQ_DT][4];
        #pragma unroll
        for (int dt = 0; dt < DQ_DT; ++dt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) { dq_frag[dt][e] = 0.0f; dq_odd[dt][e] = 0.0f; }
        // BEGIN SOLUTION TODO(5): dQ += dS K over the block's keys, 16 at a time (kk): A = dS (queries 16 mq .. × keys 16 kk ..) from ds_s with ldmatrix_x4_trans of block16_across (lesson, section 3), B = K (k = key, n = feature) with ldmatrix_x4_trans of k_s; even steps kk into dq_frag, odd ones into dq_odd; then dq_frag += dq_odd, and atomic_add2 every pair of dq_frag into dq_acc (rows i < n_q)
        // Fully unrolled (BLOCK_N / 16 = 8 steps): kk % 2 picks the set at compile time.
        #pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
            // ds_s holds dSᵀ: its rows are keys. Read across first and transposed on the way, matrix 0
            // (keys 0-7 × queries 0-7) gives the lane (query g, keys 2t, 2t+1): a[0]; matrix 1 (queries
            // 8-15) a[1], matrix 2 (keys 8-15) a[2], matrix 3 a[3]: A's order.
            unsigned ds_a[4];
            ldmatrix_x4_trans(ds_a, ds_s + block16_across<BLOCK_M>(kk, mq, lane));
            #pragma unroll
            for (int dp = 0; dp < DQ_DT / 2; ++dp) {
                unsigned kb[4];                  // K as V was in module 06: the keys are the k index
                ldmatrix_x4_trans(kb, k_s + block16<D>(kk, fq * DQ_DT / 2 + dp, lane));
                mma_16816(kk % 2 ? dq_odd[2 * dp] : dq_frag[2 * dp], ds_a, kb[0], kb[1]);
                mma_16816(kk % 2 ? dq_odd[2 * dp + 1] : dq_frag[2 * dp + 1], ds_a, kb[2], kb[3]);
            }
        }
        #pragma unroll
        for (int dt = 0; dt < DQ_DT; ++dt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) dq_frag[dt][e] += dq_odd[dt][e];
        // Every key tile adds its share to the same rows: atomically, in float32 (the scale comes in
        // convert_dq). The lane's two neighbouring features of a row go in one 8-byte reduction.
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int i = m_start + mq * 16 + g + 8 * r;
            if (i < n_q) {
                float* row = dq_acc + (bh + i) * D + fq * DQ_DT * 8 + 2 * t;
                #pragma unroll
                for (int dt = 0; dt < DQ_DT; ++dt) atomic_add2(row + dt * 8, dq_frag[dt][2 * r], dq_frag[dt][2 * r + 1]);
            }
        }
        // END SOLUTION
    }
    cp_async_wait<0>();                      // no copy outlives the block

    // BEGIN SOLUTION TODO(6): store the warp's rows of dV and of dK = scale · dk_acc (keys k_start + warp_key + g + 8 r below n_k, features 8 dt + 2t, + 1) in the element type, two at a time with to_elem2
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int j = k_start + warp_key + g + 8 * r;
        if (j < n_k) {
            const size_t row = ((size_t)(b * H_kv + h_kv) * n_k + j) * D;
            #pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                *reinterpret_cast<elem2_t*>(dv + row + dt * 8 + 2 * t) = to_elem2(dv_acc[dt][2 * r], dv_acc[dt][2 * r + 1]);
                *reinterpret_cast<elem2_t*>(dk + row + dt * 8 + 2 * t) =
                    to_elem2(scale * dk_acc[dt][2 * r], scale * dk_acc[dt][2 * r + 1]);
            }
        }
    }
    // END SOLUTION
}

// dq = scale · dq_acc, rounded to the element type: the scale of S = scale · Q Kᵀ, applied once.
extern "C" __global__ void convert_dq(const float* __restrict__ dq_acc, elem_t* __restrict__ dq, float scale,
                                      long long n_pairs)
{
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < n_pairs;
         idx += (long long)gridDim.x * blockDim.x) {
        // BEGIN SOLUTION TODO(6): dq's pair idx (elements 2 idx, 2 idx + 1) = scale · dq_acc's, rounded with to_elem2
        const float2 x = reinterpret_cast<const float2*>(dq_acc)[idx];
        reinterpret_cast<elem2_t*>(dq)[idx] = __hmul2(to_elem2(x.x, x.y), to_elem2(scale, scale));
        // END SOLUTION
    }
}
"""

# The tile sizes, per head dimension, stated once: each call compiles KERNEL with them as -D options.
# BLOCK_N / 16 warps per block (8: 256 threads); dQ's 16-row tiles split between them.
CONFIG = {
    64: dict(BLOCK_M=64, BLOCK_N=128),
    128: dict(BLOCK_M=32, BLOCK_N=128),
}
HEAD_DIMS = (64, 128)
DTYPES = ("float16", "bfloat16")
ELEMENT_BYTES = 2
PREPROCESS_WARPS = 8                     # rows per block of backward_preprocess
CONVERT_THREADS = 256


def cdiv(a, b):
    return (a + b - 1) // b


@functools.lru_cache(maxsize=None)
def _module(rt, elem, config):
    """One build per element type and CONFIG[d] (compiled and looked up once, not on every call)."""
    options = tuple(f"-D{key}={int(val)}" for key, val in config)
    options += (f"-DUSE_BF16={int(elem == 'bfloat16')}", "-ftz=true")
    return rt.compile(KERNEL, options=options, name_expressions=[f"flash_backward_tc<{d}>" for d in HEAD_DIMS])


def nthreads(d):
    return CONFIG[d]["BLOCK_N"] // 16 * 32


def shared_bytes(d):
    """K and V tiles, dSᵀ, and two stages of a Q tile, a dO tile and BLOCK_M floats of lse and of D."""
    m, n = CONFIG[d]["BLOCK_M"], CONFIG[d]["BLOCK_N"]
    return ELEMENT_BYTES * (2 * n * d + n * m) + 2 * (ELEMENT_BYTES * 2 * m * d + 4 * 2 * m)


def element_type(arrays, dtype=None):
    """'float16' or 'bfloat16': what the 16-bit arrays hold (uint16 arrays: bfloat16 bits, dtype='bfloat16')."""
    if len({x.dtype for x in arrays}) != 1:
        raise TypeError(f"q, k, v, o and do must have one dtype, got {[str(x.dtype) for x in arrays]}")
    name = arrays[0].dtype.name
    if dtype is not None:
        want = dtype if isinstance(dtype, str) else getattr(dtype, "name", getattr(dtype, "__name__", str(dtype)))
        if name not in (want, "uint16"):
            raise TypeError(f"dtype={want!r} but q is {name}")
        name = want
    elif name == "uint16":
        raise TypeError("q is uint16: if it holds bfloat16 bits, say so with dtype='bfloat16'")
    if name not in DTYPES:
        raise TypeError(f"flash_backward_tc takes float16 or bfloat16 arrays, got {name}")
    return name


def flash_backward_tc(rt, q, k, v, o, lse, do, scale, causal=False, dtype=None):
    """Gradients of attention on tensor cores. q, o, do [B, H, Nq, d]; k, v [B, Hkv, Nk, d]; float16 or
    bfloat16 (bfloat16 as uint16 bits with dtype='bfloat16'); lse [B, H, Nq] float32 from the forward
    -> (dq [B, H, Nq, d], dk, dv [B, Hkv, Nk, d]) in q's dtype."""
    B, H, n_q, d = q.shape
    H_kv, n_k = k.shape[1], k.shape[2]
    if k.shape != (B, H_kv, n_k, d) or v.shape != k.shape or o.shape != q.shape or do.shape != q.shape:
        raise ValueError("q, o, do must be [B, H, Nq, d] and k, v [B, Hkv, Nk, d]")
    if H % H_kv:
        raise ValueError(f"H = {H} must be a multiple of Hkv = {H_kv}")
    if d not in HEAD_DIMS:
        raise ValueError(f"head_dim {d} is not supported (choose one of {HEAD_DIMS})")
    if not all(x.flags.c_contiguous for x in (q, k, v, o, do)):
        raise ValueError("q, k, v, o and do must be contiguous (cp.async copies rows in 16-byte pieces)")
    elem = element_type((q, k, v, o, do), dtype)
    module = _module(rt, elem, tuple(CONFIG[d].items()))

    dq = rt.empty(q.shape, q.dtype)
    dk = rt.empty(k.shape, q.dtype)
    dv = rt.empty(k.shape, q.dtype)
    dq_acc = rt.empty(q.shape, "float32")          # dQ / scale, summed over the key tiles
    delta = rt.empty((B, H, n_q), "float32")
    rows = B * H * n_q
    if rows == 0 or n_k == 0:
        raise ValueError(f"Nq and Nk must be at least 1, got {n_q} and {n_k}")
    module.get_function("backward_preprocess")(
        (cdiv(rows, PREPROCESS_WARPS),), (32 * PREPROCESS_WARPS,), (o, do, delta, dq_acc, rt.int32(rows), rt.int32(d)))
    kernel = module.get_function(f"flash_backward_tc<{d}>")
    smem = shared_bytes(d)
    if smem > 48 * 1024:                            # past 48 KB a kernel must opt in
        kernel.max_dynamic_shared_size_bytes = smem
    grid = (cdiv(n_k, CONFIG[d]["BLOCK_N"]), H_kv, B)   # one block per key tile and kv head
    kernel(grid, (nthreads(d),), (q, k, v, do, lse, delta, dq_acc, dk, dv, rt.int32(H), rt.int32(H_kv),
                                  rt.int32(n_q), rt.int32(n_k), rt.float32(scale), rt.int32(int(bool(causal)))),
           shared_mem=smem)
    pairs = rows * d // 2
    module.get_function("convert_dq")((min(cdiv(pairs, CONVERT_THREADS), 4096),), (CONVERT_THREADS,),
                                      (dq_acc, dq, rt.float32(scale), rt.int64(pairs)))
    return dq, dk, dv
