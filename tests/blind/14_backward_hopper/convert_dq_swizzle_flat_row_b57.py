# BLIND: In convert_dq (TODO 8) the chunk swizzle is undone with the flat row index, '(((c % 64) / 8) ^ (row % 8)) * 8' (row = bh*n_q + i, the variable just above) instead of '^ (r % 8)' (r = i % 64, the row inside the part): the same for (batch, head) 0 or when Nq is a multiple of 8, but for bh >= 1 with Nq % 8 != 0 (e.g. B=1, H=2, Nq=Nk=100, d=64) dq reads its features from the wrong 8-float chunks.
"""14 · The backward pass on Hopper. Read modules/14_backward_hopper.md, then fill in each TODO.

Module 11's algorithm (one block per key tile, P recomputed from lse, dS = P ∘ (dP - D), dQ added by
every key tile) on module 10's machinery: wgmma, TMA, mbarriers and a producer warpgroup. Three
warpgroups share a block of BLOCK_N = 128 keys:

    producer   (warpgroup 0): one thread copies the block's K and V tiles once, then, STAGES steps
               ahead, every step's Q and dO tiles (TMA) and its lse and D rows (a bulk copy), each
               completing a 'full' mbarrier of the step's stage.
    consumers  (warpgroups 1 and 2): 64 keys each. Per step (a tile of BLOCK_M queries):
                   Sᵀ  = K Qᵀ            wgmma, K and Q from shared memory
                   dPᵀ = V dOᵀ           wgmma, V and dO from shared memory
                   Pᵀ  = exp2(Sᵀ · scale · log2 e - lse · log2 e)        (registers)
                   dV += Pᵀ dO           wgmma, Pᵀ from registers, dO read transposed
                   dSᵀ = Pᵀ ∘ (dPᵀ - D)                                  (registers)
                   dK += dSᵀ Q           wgmma, dSᵀ from registers, Q read transposed
                   dSᵀ -> shared memory; both consumers' keys in, each computes half of
                   dQ  = dS K            wgmma, dS and K both read transposed from shared memory
               and writes it to shared memory for the producer warpgroup's second warp, which
               adds it into the float32 dq_acc with one bulk reduction (every key tile adds to
               the same rows), while the consumers go on to the next step.

Three kernels, as in 11: backward_prep (D = rowsum(dO ∘ O) and lse · log2 e into rows padded to
BLOCK_M, dq_acc = 0), flash_backward_hopper, and convert_dq (dq = scale · dq_acc, rounded). dq_acc
is kept in the order the bulk reduction adds it: one contiguous 64 × 64 part per consumer and query
tile, its rows swizzled as in shared memory; convert_dq reads it back in that order.
Shared memory holds each tile as boxes of 64 features (dSᵀ: 64 queries) × rows, 128 bytes a row, in the 128-byte
swizzle that TMA writes and wgmma reads (module 10, section 4).
q, o, do [B, H, Nq, d]; k, v [B, Hkv, Nk, d]; float16, or bfloat16 as uint16 bits with
dtype='bfloat16'; lse [B, H, Nq] float32 (natural log) from the forward.
"""
import functools

KERNEL = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// Compiled in from CONFIG by the launch code: D_HEAD, BLOCK_M, STAGES, USE_BF16.
#if !defined(D_HEAD) || !defined(BLOCK_M) || !defined(STAGES) || !defined(USE_BF16)
#error "D_HEAD, BLOCK_M, STAGES and USE_BF16 come from the launch code"
#endif
constexpr int D = D_HEAD;
constexpr int BLOCK_N = 128;                  // keys per block: 64 per consumer warpgroup
constexpr int CONSUMERS = 2;
constexpr int NTHREADS = 128 * (CONSUMERS + 1);
constexpr int BOX = 64;                       // features (or queries) per 128-byte swizzled row
constexpr int T_TILES = BLOCK_M / 8;          // 8-query column tiles of Sᵀ and dPᵀ
constexpr int M_STEPS = BLOCK_M / 16;         // 16-query steps of dV += Pᵀ dO and dK += dSᵀ Q
constexpr int D_TILES = D / 8;                // 8-feature column tiles of dV and dK
constexpr int DQ_TILES = 64 / 8;              // a consumer's part of dQ: 64 queries × 64 features
constexpr int PART = 64 * 64;                 // floats in such a part
constexpr int Q_BOXES = BLOCK_M / BOX;        // dQ's parts: query boxes × feature boxes, one each
constexpr float LOG2E = 1.4426950408889634f;
static_assert(D % BOX == 0 && BLOCK_M % BOX == 0, "D and BLOCK_M are multiples of 64");
static_assert(Q_BOXES * (D / BOX) == CONSUMERS, "dQ splits into one 64 × 64 part per consumer");

#if USE_BF16
typedef __nv_bfloat16 elem_t;
typedef __nv_bfloat162 elem2_t;
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
__device__ __forceinline__ float2 from_elem2(elem2_t x) { return __bfloat1622float2(x); }
#define AB_TYPE "bf16.bf16"
#else
typedef __half elem_t;
typedef __half2 elem2_t;
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
__device__ __forceinline__ float2 from_elem2(elem2_t x) { return __half22float2(x); }
#define AB_TYPE "f16.f16"
#endif

__device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    elem2_t x = to_elem2(lo, hi);
    return *reinterpret_cast<unsigned*>(&x);
}

__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// ---- mbarriers and TMA (module 10) ----------------------------------------------------------------
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity)
{
    unsigned done;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

struct alignas(64) TensorMap { unsigned long long opaque[16]; };

// One box (64 features × the map's rows) of slab `slab` (b · heads + h), from row `row`.
__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap& map, int col, int row, int slab, unsigned bar)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                 :: "r"(dst), "l"(&map), "r"(col), "r"(row), "r"(slab), "r"(bar) : "memory");
}
// `bytes` contiguous bytes (a multiple of 16, both addresses 16-byte aligned), no tensor map.
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// `bytes` of shared memory added, float by float, into global memory (16-byte aligned, a multiple of
// 16 bytes); committed as a bulk group, whose reading of shared memory wait_group.read waits for.
__device__ __forceinline__ void bulk_reduce_add(float* dst, unsigned src, unsigned bytes)
{
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                 :: "l"(dst), "r"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory"); }
template <int N> __device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory"); }

// ---- wgmma (module 10) -----------------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }

// A shared-memory matrix descriptor, 128-byte swizzle (module 10): start address, leading and stride
// byte offsets. K-major (16 consecutive k of a row per step): stride 1024, leading unused. MN-major
// (read transposed: the m or n index runs along the 128-byte rows, k down them): leading = the
// distance between 64-wide boxes, stride = 1024 between groups of 8 rows of k.
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned leading, unsigned stride)
{
    return (unsigned long long)((addr & 0x3FFFF) >> 4)
         | ((unsigned long long)(leading >> 4) << 16)
         | ((unsigned long long)(stride >> 4) << 32)
         | (1ull << 62);
}

// The products, written out by the launch code for this CONFIG (wgmma_helpers below):
//   wgmma_t0 / wgmma_t (x, da, db)   x (=|+=) A Bᵀ   m64 n BLOCK_M k16, both K-major: Sᵀ, dPᵀ
//   wgmma_acc (acc, a, db)           acc += A B      m64 n D k16, A from registers, B MN-major: dV, dK
//   wgmma_dq0 / wgmma_dq (x, da, db) x (=|+=) A B    m64 n64 k16, A and B MN-major: dQ
// Accumulator fragments as in module 10: warp w of the warpgroup holds rows 16w .. 16w + 15; lane l
// rows g = l / 4 and g + 8, columns 8j + 2t and + 1 (t = l % 4) of every 8-column tile j.
@WGMMA_HELPERS@

// Where dq_acc keeps query i's part holding feature c (of head row bh): the query tile's BLOCK_M · D
// floats are CONSUMERS parts of 64 queries × 64 features, part mq + Q_BOXES · fq for query box mq
// and feature box fq (the consumer that computes it). In a part, row r's 64 floats are swizzled by
// 8-float chunks as in shared memory: chunk c at c ^ (r % 8).
__device__ __forceinline__ size_t dq_part(int bh, int i, int c, int n_pad)
{
    const size_t tile = ((size_t)bh * (n_pad / BLOCK_M) + i / BLOCK_M) * BLOCK_M * D;
    return tile + (size_t)((i % BLOCK_M) / 64 + Q_BOXES * (c / 64)) * PART;
}

// D_i = rowsum(dO ∘ O) and lse_i · log2 e, in rows padded to a multiple of BLOCK_M (a step's rows are
// one 16-byte aligned bulk copy); padded rows get D = 0 and lse · log2 e = +inf, so that their P is 0.
// dq_acc's rows are set to 0 for the bulk reductions. One warp per padded row.
extern "C" __global__ void backward_prep(const elem_t* __restrict__ o, const elem_t* __restrict__ dout,
                                         const float* __restrict__ lse, float* __restrict__ delta_pad,
                                         float* __restrict__ lse_log2_pad, float* __restrict__ dq_acc,
                                         int n_q, int n_pad, int bh_rows)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;   // of bh_rows · n_pad
    if (row >= bh_rows * n_pad) return;
    const int bh = row / n_pad, i = row % n_pad;
    float acc = 0.0f;
    if (i < n_q) {
        const size_t src = ((size_t)bh * n_q + i) * D;
        for (int c = lane; c < D / 2; c += 32) {
            const float2 x = from_elem2(reinterpret_cast<const elem2_t*>(o + src)[c]);
            const float2 y = from_elem2(reinterpret_cast<const elem2_t*>(dout + src)[c]);
            acc += x.x * y.x + x.y * y.y;
        }
    }
    // This row's D floats of dq_acc: row i % 64 of the parts of its query tile (dq_part below).
    for (int c = 2 * lane; c < D; c += 64)
        *reinterpret_cast<float2*>(dq_acc + dq_part(bh, i, c, n_pad) + (i % 64) * 64 + c % 64) = make_float2(0.0f, 0.0f);
    for (int stride = 16; stride > 0; stride /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, stride);
    if (lane == 0) {
        delta_pad[row] = acc;
        lse_log2_pad[row] = i < n_q ? lse[(size_t)bh * n_q + i] * LOG2E : INFINITY;
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
flash_backward_hopper(const __grid_constant__ TensorMap q_map, const __grid_constant__ TensorMap k_map,
                      const __grid_constant__ TensorMap v_map, const __grid_constant__ TensorMap do_map,
                      const float* __restrict__ lse_log2_pad, const float* __restrict__ delta_pad,
                      float* __restrict__ dq_acc, elem_t* __restrict__ dk, elem_t* __restrict__ dv,
                      int H, int H_kv, int n_q, int n_k, int n_pad, float scale, int causal)
{
    extern __shared__ unsigned char smem_raw[];
    const unsigned raw = smem_addr(smem_raw);
    unsigned char* k_s = smem_raw + (((raw + 1023) & ~1023u) - raw);   // swizzle atoms: 1024-aligned
    constexpr int KV_BYTES = BLOCK_N * D * 2, Q_BYTES = BLOCK_M * D * 2, DS_BYTES = BLOCK_N * BLOCK_M * 2;
    unsigned char* v_s = k_s + KV_BYTES;
    unsigned char* q_s = v_s + KV_BYTES;                      // STAGES Q tiles
    unsigned char* do_s = q_s + STAGES * Q_BYTES;             // STAGES dO tiles
    unsigned char* ds_s = do_s + STAGES * Q_BYTES;            // two dSᵀ tiles [key][query], by step parity
    float* dq_s = reinterpret_cast<float*>(ds_s + 2 * DS_BYTES);    // each consumer's part of dQ
    float* lse_s = dq_s + CONSUMERS * PART;                          // STAGES rows of lse · log2 e
    float* delta_s = lse_s + STAGES * BLOCK_M;                       // STAGES rows of D
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(delta_s + STAGES * BLOCK_M);
    const unsigned kv_full = smem_addr(bars);
    auto q_full = [&](int s) { return smem_addr(bars + 1 + s); };              // Q and lse in
    auto do_full = [&](int s) { return smem_addr(bars + 1 + STAGES + s); };    // dO and D in
    auto empty = [&](int s) { return smem_addr(bars + 1 + 2 * STAGES + s); };  // the stage is free
    auto dq_full = [&](int c) { return smem_addr(bars + 1 + 3 * STAGES + c); };          // part c written
    auto dq_empty = [&](int c) { return smem_addr(bars + 1 + 3 * STAGES + CONSUMERS + c); };  // and added

    const int k_start = blockIdx.x * BLOCK_N, h_kv = blockIdx.y, b = blockIdx.z;
    const int group = H / H_kv;
    const int offset = n_k - n_q;                 // query i sees keys j <= i + offset (bottom-right)
    // Under the causal mask, the query tiles before the first that sees key k_start are skipped.
    const int m_begin = causal ? max(0, (k_start - offset) / BLOCK_M * BLOCK_M) : 0;
    const int m_tiles = m_begin < n_q ? (n_q - m_begin + BLOCK_M - 1) / BLOCK_M : 0;
    const int n_steps = group * m_tiles;          // every head of the kv group, every query tile
    // Step it is query head h_of(it) and query tile m_of(it). Each key block starts its walk over the
    // query tiles at a tile of its own (blockIdx.x on), so that the blocks running together add their
    // dQ parts into different rows of dq_acc. Timed side by side on an H200, starting all at the first
    // tile was 2 to 8% slower at N = 4096 and under the mask, and level at N = 65536 without it
    // (section 10).
    auto h_of = [&](int it) { return h_kv * group + it / m_tiles; };
    auto m_of = [&](int it) { return m_begin + (it + (int)blockIdx.x) % m_tiles * BLOCK_M; };

    if (threadIdx.x == 0) {
        mbar_init(kv_full, 1);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(q_full(s), 1);
            mbar_init(do_full(s), 1);
            mbar_init(empty(s), 4 * CONSUMERS);   // one arrival per consumer warp
        }
        for (int c = 0; c < CONSUMERS; ++c) {
            mbar_init(dq_full(c), 4);               // the consumer's four warps
            mbar_init(dq_empty(c), 1);              // the thread that adds it
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        // ---- Producer ------------------------------------------------------------------------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        if (threadIdx.x == 0 && n_steps > 0) {
            mbar_expect_tx(kv_full, 2 * KV_BYTES);
            for (int c = 0; c < D / BOX; ++c) {
                tma_load(smem_addr(k_s) + c * BLOCK_N * 128, k_map, c * BOX, k_start, b * H_kv + h_kv, kv_full);
                tma_load(smem_addr(v_s) + c * BLOCK_N * 128, v_map, c * BOX, k_start, b * H_kv + h_kv, kv_full);
            }
            for (int it = 0; it < n_steps; ++it) {
                const int s = it % STAGES;
                const int h = h_of(it), m_start = m_of(it);
                const size_t row = (size_t)(b * H + h) * n_pad + m_start;   // of the padded rows
                // BEGIN SOLUTION TODO(1): step it's stage s: wait until its previous use is released; then announce on q_full the bytes of the Q tile and its lse row, copy the Q tile box by box with TMA and the lse row with one bulk copy; then the same for dO and D on do_full
                mbar_wait(empty(s), ((it / STAGES) & 1) ^ 1);
                mbar_expect_tx(q_full(s), Q_BYTES + BLOCK_M * 4);
                for (int c = 0; c < D / BOX; ++c)
                    tma_load(smem_addr(q_s + s * Q_BYTES) + c * BLOCK_M * 128, q_map, c * BOX, m_start, b * H + h, q_full(s));
                bulk_load(smem_addr(lse_s + s * BLOCK_M), lse_log2_pad + row, BLOCK_M * 4, q_full(s));
                mbar_expect_tx(do_full(s), Q_BYTES + BLOCK_M * 4);
                for (int c = 0; c < D / BOX; ++c)
                    tma_load(smem_addr(do_s + s * Q_BYTES) + c * BLOCK_M * 128, do_map, c * BOX, m_start, b * H + h, do_full(s));
                bulk_load(smem_addr(delta_s + s * BLOCK_M), delta_pad + row, BLOCK_M * 4, do_full(s));
                // END SOLUTION
            }
        } else if (threadIdx.x == 32 && n_steps > 0) {
            // The second warp's first thread adds every step's dQ parts into dq_acc, so that the
            // consumers never wait for the adds.
            for (int it = 0; it < n_steps; ++it) {
                const int h = h_of(it), m_start = m_of(it);
                for (int c = 0; c < CONSUMERS; ++c) {
                    // BEGIN SOLUTION TODO(7): once consumer c's part of step it is in dq_s (its 'dq_full' barrier), add it into its place in dq_acc with one bulk reduction, and commit it; once the reduction has read shared memory, release the part (its 'dq_empty' barrier)
                    mbar_wait(dq_full(c), it & 1);
                    bulk_reduce_add(dq_acc + dq_part(b * H + h, m_start + (c % Q_BOXES) * 64, (c / Q_BOXES) * 64, n_pad),
                                    smem_addr(dq_s + c * PART), PART * 4);
                    bulk_commit();
                    bulk_wait_read<0>();
                    mbar_arrive(dq_empty(c));
                    // END SOLUTION
                }
            }
            bulk_wait<0>();                         // every add is done before the block ends
        }
        return;
    }

    // ---- Consumers ----------------------------------------------------------------------------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
    const int cw = wg - 1;                                // this consumer: keys 64 cw .. 64 cw + 63
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int key0 = cw * 64 + warp * 16 + g;             // this lane's keys in the tile: key0, key0 + 8
    const float scale_log2 = scale * LOG2E;
    const unsigned k_base = smem_addr(k_s), v_base = smem_addr(v_s);
    // This consumer's part of dQ: query box mq, feature box fq.
    const int mq = cw % Q_BOXES, fq = cw / Q_BOXES;

    // dV and dK / scale of this lane's two keys, summed over every step.
    float dv_acc[D_TILES][4], dk_acc[D_TILES][4];
    #pragma unroll
    for (int j = 0; j < D_TILES; ++j)
        #pragma unroll
        for (int e = 0; e < 4; ++e) { dv_acc[j][e] = 0.0f; dk_acc[j][e] = 0.0f; }

    // The C fragment of an m64 × n BLOCK_M product as A fragments of 16 queries each (module 10's P):
    // C tiles 2kk and 2kk + 1 are the left and right halves of A fragment kk, element for element.
    auto to_a = [&](const float (&x)[T_TILES][4], unsigned (&a)[M_STEPS][4]) {
        #pragma unroll
        for (int kk = 0; kk < M_STEPS; ++kk) {
            a[kk][0] = pack2(x[2 * kk][0], x[2 * kk][1]);
            a[kk][1] = pack2(x[2 * kk][2], x[2 * kk][3]);
            a[kk][2] = pack2(x[2 * kk + 1][0], x[2 * kk + 1][1]);
            a[kk][3] = pack2(x[2 * kk + 1][2], x[2 * kk + 1][3]);
        }
    };

    if (n_steps > 0) mbar_wait(kv_full, 0);
    for (int it = 0; it < n_steps; ++it) {
        const int s = it % STAGES;
        const unsigned parity = (it / STAGES) & 1;
        const int h = h_of(it), m_start = m_of(it);
        const unsigned q_base = smem_addr(q_s + s * Q_BYTES), do_base = smem_addr(do_s + s * Q_BYTES);
        const unsigned ds_base = smem_addr(ds_s + (it % 2) * DS_BYTES);
        const float* lse_t = lse_s + s * BLOCK_M;
        const float* delta_t = delta_s + s * BLOCK_M;

        // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ for this consumer's 64 keys, issued as two groups.
        float pT[T_TILES][4], dsT[T_TILES][4];
        // BEGIN SOLUTION TODO(2): fence; issue Sᵀ = K Qᵀ into pT once Q has landed (one wgmma per 16 features, this consumer's 64 rows of K as A, Q as B, both K-major; the first overwrites), commit; then dPᵀ = V dOᵀ into dsT the same way once dO has landed, commit; wait for Sᵀ only
        mbar_wait(q_full(s), parity);
        wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {             // features 16 kk ..: box kk / 4, 32 bytes a step
            const unsigned long long dk_ = desc(k_base + (kk / 4) * BLOCK_N * 128 + cw * 64 * 128 + (kk % 4) * 32, 16, 1024);
            const unsigned long long dq_ = desc(q_base + (kk / 4) * BLOCK_M * 128 + (kk % 4) * 32, 16, 1024);
            if (kk == 0) wgmma_t0(pT, dk_, dq_); else wgmma_t(pT, dk_, dq_);
        }
        wgmma_commit();
        mbar_wait(do_full(s), parity);
        wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const unsigned long long dv_ = desc(v_base + (kk / 4) * BLOCK_N * 128 + cw * 64 * 128 + (kk % 4) * 32, 16, 1024);
            const unsigned long long ddo = desc(do_base + (kk / 4) * BLOCK_M * 128 + (kk % 4) * 32, 16, 1024);
            if (kk == 0) wgmma_t0(dsT, dv_, ddo); else wgmma_t(dsT, dv_, ddo);
        }
        wgmma_commit();
        wgmma_wait<1>();                                  // Sᵀ is in (dPᵀ may still run)
        // END SOLUTION

        // Pᵀ in place: element e of pT[j] is key k_start + key0 + 8 (e / 2), query m_start + 8j + 2t + e % 2.
        const bool masked = (causal && k_start + BLOCK_N - 1 > m_start + offset) || k_start + BLOCK_N > n_k;
        // BEGIN SOLUTION TODO(3): turn pT from Sᵀ into Pᵀ: P = exp2(s · scale_log2 - lse_t[query]) (lse_t is already lse · log2 e, +inf past n_q), 0 where the key is past n_k or hidden by the causal mask
        #pragma unroll
        for (int j = 0; j < T_TILES; ++j) {
            const float2 lse2 = *reinterpret_cast<const float2*>(&lse_t[8 * j + 2 * t]);
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = k_start + key0 + 8 * (e / 2), i = m_start + 8 * j + 2 * t + e % 2;
                const bool visible = !masked || (key < n_k && (!causal || key <= i + offset));
                pT[j][e] = visible ? exp2f(fmaf(pT[j][e], scale_log2, -(e % 2 ? lse2.y : lse2.x))) : 0.0f;
            }
        }
        // END SOLUTION

        // dV += Pᵀ dO, Pᵀ straight from the registers; then dSᵀ, packed into ds_a.
        unsigned p_a[M_STEPS][4], ds_a[M_STEPS][4];
        to_a(pT, p_a);
        // BEGIN SOLUTION TODO(4): fence; issue dV += Pᵀ dO (one wgmma per 16 queries, A = p_a[kk], B = dO read transposed), commit, and wait for dPᵀ; turn dsT into dSᵀ = Pᵀ ∘ (dPᵀ - D) with D from delta_t; then pack it into ds_a
        wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < M_STEPS; ++kk)              // queries 16 kk ..: 16 rows of 128 bytes further
            wgmma_acc(dv_acc, p_a[kk], desc(do_base + kk * 16 * 128, BLOCK_M * 128, 1024));
        wgmma_commit();
        wgmma_wait<1>();                                  // dPᵀ is in (dV may still run)
        #pragma unroll
        for (int j = 0; j < T_TILES; ++j) {
            const float2 d2 = *reinterpret_cast<const float2*>(&delta_t[8 * j + 2 * t]);
            #pragma unroll
            for (int e = 0; e < 4; ++e) dsT[j][e] = pT[j][e] * (dsT[j][e] - (e % 2 ? d2.y : d2.x));
        }
        to_a(dsT, ds_a);
        // END SOLUTION

        // dSᵀ into shared memory, [key][query] in boxes of 64 queries, swizzled: register x of ds_a[kk]
        // holds key key0 + 8 (x % 2), queries 16 kk + 8 (x / 2) + 2t and + 1 (one 4-byte store). Then
        // dK += dSᵀ Q, A = ds_a: stored first, since once dK is issued its A registers are not to be read.
        // BEGIN SOLUTION TODO(5): store every register of ds_a into this step's ds_s tile (chunk c of row r at c ^ (r % 8)) and make the stores visible to wgmma; then a fence and dK += dSᵀ Q the same way as dV (A = ds_a[kk], B = Q read transposed), committed; then wait until both consumers' keys are in (named barrier 1, 256 threads)
        #pragma unroll
        for (int kk = 0; kk < M_STEPS; ++kk)
            #pragma unroll
            for (int x = 0; x < 4; ++x) {
                const int r = key0 + 8 * (x % 2), i = 16 * kk + 8 * (x / 2) + 2 * t;
                *reinterpret_cast<unsigned*>(ds_s + (it % 2) * DS_BYTES + (i / BOX) * BLOCK_N * 128 + r * 128
                                             + (((i % BOX) / 8) ^ (r % 8)) * 16 + (i % 8) * 2) = ds_a[kk][x];
            }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // wgmma reads through the async proxy
        wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < M_STEPS; ++kk)
            wgmma_acc(dk_acc, ds_a[kk], desc(q_base + kk * 16 * 128, BLOCK_M * 128, 1024));
        wgmma_commit();                                   // dK runs while this consumer waits for the other
        asm volatile("bar.sync 1, 256;" ::: "memory");
        // END SOLUTION

        // dQ's part (queries 64 mq .., features 64 fq ..) = dS K over the block's 128 keys.
        float dq[DQ_TILES][4];
        // BEGIN SOLUTION TODO(6): fence; issue this part of dQ = dS K (one wgmma per 16 keys; A = dS and B = K, both read transposed from shared memory), commit, and wait for everything; release the stage (one arrival per warp); then, once the adding thread has released dq_s's part (its 'dq_empty' barrier), write dq into it, make the stores visible to the bulk reduction, and signal 'dq_full' (one arrival per warp)
        wgmma_fence();
        #pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {       // keys 16 kk ..: 16 rows of 128 bytes further
            const unsigned long long da = desc(ds_base + mq * BLOCK_N * 128 + kk * 16 * 128, BLOCK_N * 128, 1024);
            const unsigned long long db = desc(k_base + fq * BLOCK_N * 128 + kk * 16 * 128, BLOCK_N * 128, 1024);
            if (kk == 0) wgmma_dq0(dq, da, db); else wgmma_dq(dq, da, db);
        }
        wgmma_commit();
        wgmma_wait<0>();
        __syncwarp();
        if (lane == 0) mbar_arrive(empty(s));
        mbar_wait(dq_empty(cw), (it & 1) ^ 1);
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
        // END SOLUTION
    }

    // dV and dK = scale · dk_acc of this lane's keys, in the element type.
    // BEGIN SOLUTION TODO(8): store this lane's rows of dV and of dK = scale · dk_acc (keys k_start + key0 + 8 r below n_k, features 8j + 2t and + 1) in the element type, two at a time with to_elem2
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int key = k_start + key0 + 8 * r;
        if (key < n_k) {
            const size_t row = ((size_t)(b * H_kv + h_kv) * n_k + key) * D;
            #pragma unroll
            for (int j = 0; j < D_TILES; ++j) {
                *reinterpret_cast<elem2_t*>(dv + row + 8 * j + 2 * t) = to_elem2(dv_acc[j][2 * r], dv_acc[j][2 * r + 1]);
                *reinterpret_cast<elem2_t*>(dk + row + 8 * j + 2 * t) =
                    to_elem2(scale * dk_acc[j][2 * r], scale * dk_acc[j][2 * r + 1]);
            }
        }
    }
    // END SOLUTION
}

// dq = scale · dq_acc, rounded to the element type: the scale of S = scale · Q Kᵀ, applied once.
// dq's pair idx (features c, c + 1 of query i) is read from its place in dq_acc (dq_part).
extern "C" __global__ void convert_dq(const float* __restrict__ dq_acc, elem_t* __restrict__ dq, float scale,
                                      int n_q, int n_pad, long long n_pairs)
{
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < n_pairs;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long row = idx / (D / 2);               // of B · H · n_q
        const int bh = (int)(row / n_q), i = (int)(row % n_q), c = (int)(idx % (D / 2)) * 2, r = i % 64;
        // BEGIN SOLUTION TODO(8): dq's pair idx = scale · the pair (query i, features c, c + 1) of dq_acc, read from its part (dq_part) at row r, its 8-float chunk swizzled as the consumers wrote it; rounded with to_elem2
        const float2 x = *reinterpret_cast<const float2*>(
            dq_acc + dq_part(bh, i, c, n_pad) + r * 64 + (((c % 64) / 8) ^ (row % 8)) * 8 + c % 8);
        reinterpret_cast<elem2_t*>(dq)[idx] = to_elem2(scale * x.x, scale * x.y);
        // END SOLUTION
    }
}
"""

# The query tile per head dimension. Each consumer's part of dQ is one 64 × 64 box: d = 128 splits
# dQ's features between the two consumers (64 queries a step), d = 64 its queries (128 a step).
CONFIG = {
    64: dict(BLOCK_M=128, STAGES=2),
    128: dict(BLOCK_M=64, STAGES=2),
}
BLOCK_N = 128
CONSUMERS = 2
HEAD_DIMS = (64, 128)
DTYPES = ("float16", "bfloat16")
PREP_WARPS = 8                        # rows per block of backward_prep
CONVERT_THREADS = 256


def cdiv(a, b):
    return (a + b - 1) // b


def wgmma_helpers(n_t: int, d: int) -> str:
    """The wgmma wrappers for Sᵀ/dPᵀ tiles of n_t queries, dV/dK rows of d features and dQ parts of 64
    features. Each lists its accumulators one by one (n / 2 floats per thread): one asm operand each."""
    def regs(n, mode):
        return ", ".join(f'"{mode}f"(x[{i // 4}][{i % 4}])' for i in range(n // 2))

    def names(n):
        return ", ".join(f"%{i}" for i in range(n // 2))

    def ss(name, n, first, trans):
        a = n // 2
        return f"""
__device__ __forceinline__ void {name}(float (&x)[{n // 8}][4], unsigned long long da, unsigned long long db)
{{
    asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32." AB_TYPE " {{{names(n)}}}, %{a}, %{a + 1}, {0 if first else 1}, 1, 1, {trans}, {trans};"
                 : {regs(n, "=" if first else "+")} : "l"(da), "l"(db));
}}"""
    b = d // 2
    return (ss("wgmma_t0", n_t, True, 0) + ss("wgmma_t", n_t, False, 0) + ss("wgmma_dq0", 64, True, 1)
            + ss("wgmma_dq", 64, False, 1) + f"""
__device__ __forceinline__ void wgmma_acc(float (&x)[{d // 8}][4], const unsigned (&a)[4], unsigned long long db)
{{
    asm volatile("wgmma.mma_async.sync.aligned.m64n{d}k16.f32." AB_TYPE " {{{names(d)}}}, "
                 "{{%{b}, %{b + 1}, %{b + 2}, %{b + 3}}}, %{b + 4}, 1, 1, 1, 1;"
                 : {regs(d, "+")} : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}}
""")


def source(d: int) -> str:
    return KERNEL.replace("@WGMMA_HELPERS@", wgmma_helpers(CONFIG[d]["BLOCK_M"], d))


def shared_bytes(d: int) -> int:
    """K and V, STAGES Q and dO tiles with their lse and D rows, two dSᵀ tiles, the consumers' dQ
    parts (float32), the mbarriers, and 1024 bytes to align the start."""
    m, stages = CONFIG[d]["BLOCK_M"], CONFIG[d]["STAGES"]
    return (1024 + 2 * BLOCK_N * d * 2 + stages * (2 * m * d * 2 + 2 * m * 4) + 2 * BLOCK_N * m * 2
            + CONSUMERS * 64 * 64 * 4 + 8 * (1 + 3 * stages + 2 * CONSUMERS))


@functools.lru_cache(maxsize=None)
def _module(rt, d, elem, config):
    options = tuple(f"-D{key}={int(val)}" for key, val in config) + (
        f"-DD_HEAD={d}", f"-DUSE_BF16={int(elem == 'bfloat16')}", "-ftz=true",
        "-arch=sm_90a")                         # wgmma and setmaxnreg exist only on sm_90a
    module = rt.compile(source(d), options=options)
    module.get_function("flash_backward_hopper").max_dynamic_shared_size_bytes = shared_bytes(d)
    return module


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
        raise TypeError(f"flash_backward_hopper takes float16 or bfloat16 arrays, got {name}")
    return name


def flash_backward_hopper(rt, q, k, v, o, lse, do, scale, causal=False, dtype=None):
    """Gradients of attention on Hopper. q, o, do [B, H, Nq, d]; k, v [B, Hkv, Nk, d]; float16 or
    bfloat16 (bfloat16 as uint16 bits with dtype='bfloat16'); lse [B, H, Nq] float32 from the forward
    -> (dq [B, H, Nq, d], dk, dv [B, Hkv, Nk, d]) in q's dtype."""
    B, H, n_q, d = q.shape
    H_kv, n_k = k.shape[1], k.shape[2]
    if k.shape != (B, H_kv, n_k, d) or v.shape != k.shape or o.shape != q.shape or do.shape != q.shape:
        raise ValueError("q, o, do must be [B, H, Nq, d] and k, v [B, Hkv, Nk, d]")
    if H % H_kv or n_q < 1 or n_k < 1 or d not in HEAD_DIMS:
        raise ValueError(f"need H a multiple of Hkv, Nq, Nk >= 1 and d in {HEAD_DIMS}; got H = {H}, "
                         f"Hkv = {H_kv}, Nq = {n_q}, Nk = {n_k}, d = {d}")
    if not all(x.flags.c_contiguous for x in (q, k, v, o, do)):
        raise ValueError("q, k, v, o and do must be contiguous (TMA reads rows of 128-byte boxes)")
    elem = element_type((q, k, v, o, do), dtype)
    cfg = CONFIG[d]
    m = cfg["BLOCK_M"]
    module = _module(rt, d, elem, tuple(sorted(cfg.items())))

    n_pad = cdiv(n_q, m) * m
    dq_acc = rt.empty((B * H * n_pad * d,), "float32")   # dQ / scale, summed over the key tiles, in parts
    delta_pad = rt.empty((B * H, n_pad), "float32")
    lse_log2_pad = rt.empty((B * H, n_pad), "float32")
    module.get_function("backward_prep")(
        (cdiv(B * H * n_pad, PREP_WARPS),), (32 * PREP_WARPS,),
        (o, do, lse, delta_pad, lse_log2_pad, dq_acc, rt.int32(n_q), rt.int32(n_pad), rt.int32(B * H)))

    dk = rt.empty(k.shape, q.dtype)
    dv = rt.empty(k.shape, q.dtype)
    maps = (rt.tensor_map(q, m, elem), rt.tensor_map(k, BLOCK_N, elem), rt.tensor_map(v, BLOCK_N, elem),
            rt.tensor_map(do, m, elem))
    module.get_function("flash_backward_hopper")(
        (cdiv(n_k, BLOCK_N), H_kv, B), (128 * (CONSUMERS + 1),),
        (*maps, lse_log2_pad, delta_pad, dq_acc, dk, dv, rt.int32(H), rt.int32(H_kv), rt.int32(n_q),
         rt.int32(n_k), rt.int32(n_pad), rt.float32(scale), rt.int32(int(bool(causal)))),
        shared_mem=shared_bytes(d))

    dq = rt.empty(q.shape, q.dtype)
    pairs = B * H * n_q * d // 2
    module.get_function("convert_dq")((min(cdiv(pairs, CONVERT_THREADS), 4096),), (CONVERT_THREADS,),
                                      (dq_acc, dq, rt.float32(scale), rt.int32(n_q), rt.int32(n_pad), rt.int64(pairs)))
    return dq, dk, dv
