# BLIND: In copy_q (TODO 2) the row guard is 'i < n_q' without '0 <= i', so in the last query tile of a head (tiles end at n_q, so when Nq is not a multiple of BLOCK_M its rows below 0 are padding) the padding rows are read from before the head's q slab instead of being zeros; o and lse stay right (those rows are never stored), but for (b, h) = (0, 0) the read lies before the start of q, an out-of-bounds read, e.g. float16, d=128, B=H=1, Nq=100, Nk=64.
"""10 · FlashAttention-3 on Hopper. Read modules/10_flash_hopper.md, then fill in each TODO.

Module 06's algorithm on Hopper's own machinery (an sm_90a GPU, or the CPU emulator). A persistent
grid, about one block per SM: each block takes work tile after work tile (one query tile of one head)
from a tile scheduler, longest first. Three or four warpgroups (4 warps each) share a block:

    producer   (warpgroup 0): one thread takes the work tiles (an atomic counter) and hands each to
               the consumers through two slots; it issues TMA copies of every K and V tile into shared
               memory, STAGES tiles ahead, across work tiles; each copy completes an mbarrier ("full").
    consumers  (warpgroups 1 .. CONSUMERS): 64 query rows each, copied into shared memory by their
               own threads (ordinary stores, published to wgmma by fence.proxy.async) once per work tile,
               while the last tile's last product runs. Per key tile:
                   S   = Q Kᵀ          wgmma, both operands read from shared memory by the tensor cores
                   P   = exp2(S · scale · log2 e - m'),  m', l, alpha as in 06   (registers)
                   acc = acc · alpha + P V   wgmma, P from registers, V from shared memory
               and arrive on the tile's "empty" mbarrier once the tensor cores are done with it, so
               the producer may refill that stage.

Two overlaps hide the softmax: inside a warpgroup, S of tile j and P V of tile j - 1 are issued
together and the softmax of tile j runs while P V is still on the tensor cores; between warpgroups,
named barriers make the consumers take turns issuing their products ("ping-pong"), so one
warpgroup's softmax runs while the other's products do. setmaxnreg gives the producer 24 registers
and the consumers the rest.

Shared memory holds each tile as boxes of 64 features × rows, 128 bytes a row, in the 128-byte
swizzle that TMA writes and wgmma reads (chunk c of row r at chunk c ^ (r % 8) of its row).
q [B, H, Nq, d]; k, v [B, Hkv, Nk, d]; float16, or bfloat16 as uint16 bits with dtype='bfloat16';
o [B, H, Nq, d] in the input type, lse [B, H, Nq] float32.
"""
import functools

KERNEL = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// Compiled in from CONFIG by the launch code: D_HEAD, BLOCK_N, CONSUMERS, STAGES, USE_BF16.
#if !defined(D_HEAD) || !defined(BLOCK_N) || !defined(CONSUMERS) || !defined(STAGES) || !defined(USE_BF16)
#error "D_HEAD, BLOCK_N, CONSUMERS, STAGES and USE_BF16 come from the launch code"
#endif
constexpr int D = D_HEAD;
constexpr int BLOCK_M = 64 * CONSUMERS;       // query rows per block: 64 per consumer warpgroup
constexpr int NTHREADS = 128 * (CONSUMERS + 1);
constexpr int BOX = 64;                       // features per TMA box: one 128-byte swizzled row
constexpr int BOXES = D / BOX;
constexpr int S_TILES = BLOCK_N / 8;          // 8-key column tiles of a consumer's S fragment
constexpr int O_TILES = D / 8;                // 8-feature column tiles of acc
constexpr int P_STEPS = BLOCK_N / 16;         // 16-key steps of P V
// Registers per thread after setmaxnreg: the producer keeps 24, the consumers share the rest of the
// 64K-register file (multiples of 8).
constexpr int CONSUMER_REGS = CONSUMERS == 2 ? 240 : 160;
static_assert(D % BOX == 0, "D must be a multiple of 64");

#if USE_BF16
typedef __nv_bfloat16 elem_t;
typedef __nv_bfloat162 elem2_t;
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
#define AB_TYPE "bf16.bf16"
#else
typedef __half elem_t;
typedef __half2 elem2_t;
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
#define AB_TYPE "f16.f16"
#endif

__device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    elem2_t x = to_elem2(lo, hi);
    return *reinterpret_cast<unsigned*>(&x);
}

__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// ---- mbarriers: a phase completes when its arrivals (and, with expect_tx, its bytes) are in --------
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count));
}
// Arrive, and expect `bytes` more from TMA copies before the phase completes.
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
// Wait until the phase of this parity has completed. A fresh barrier is in phase 0, so waiting on
// parity 1 returns at once: that is how a producer's first pass over the stages goes through.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity)
{
    unsigned done;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// ---- TMA: one box of the tensor map (coordinates innermost first) into shared memory --------------
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap& map, int col, int row, int slab, unsigned bar)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                 :: "r"(dst), "l"(&map), "r"(col), "r"(row), "r"(slab), "r"(bar) : "memory");
}

// ---- wgmma -----------------------------------------------------------------------------------------
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Wait until at most N committed groups of this warpgroup are still running.
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }

// A shared-memory matrix descriptor with the 128-byte swizzle: the start address, the leading and
// stride byte offsets (each >> 4) and the swizzle mode (1 in bits 62-63).
//   K-major operand (Q as A, K as B: 16 consecutive features of a row per k-step): rows are 128
//   bytes apart inside a box, 8 rows (1024 bytes) per swizzle atom: stride = 1024, leading unused.
//   MN-major operand (V as B, transposed: features contiguous, keys the k dimension): leading = the
//   distance between 64-feature boxes, stride = 1024 between groups of 8 keys.
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned leading, unsigned stride)
{
    return (unsigned long long)((addr & 0x3FFFF) >> 4)
         | ((unsigned long long)(leading >> 4) << 16)
         | ((unsigned long long)(stride >> 4) << 32)
         | (1ull << 62);
}

// The products (written out by the launch code for this CONFIG's shapes, see wgmma_helpers below):
//   wgmma_s0(s, dq, dk)   s  = Q Kᵀ          m64 n BLOCK_N k16, A and B from shared memory
//   wgmma_s(s, dq, dk)    s += Q Kᵀ
//   wgmma_o(acc, p, dv)   acc += P V         m64 n D k16, A (P) from registers, B (V) transposed
// A thread's accumulator fragment: warp w of the warpgroup holds rows 16w .. 16w + 15; lane l holds
// rows g = l / 4 and g + 8, columns 2t and 2t + 1 (t = l % 4) of every 8-column tile j:
//   d[j][0], d[j][1] = (g, 8j + 2t), (g, 8j + 2t + 1);  d[j][2], d[j][3] = the same columns of row g + 8.
// P's A fragment for keys 16kk .. 16kk + 15 is S tiles 2kk and 2kk + 1 element for element (as in 06).
@WGMMA_HELPERS@

// ---- The schedule: which query tile of which head a block works on next ----------------------------
// Work tile `work` (0 .. n_work - 1) is one query tile of one head. Query tiles end at n_q: rank r
// holds rows n_q - (r + 1) BLOCK_M .. n_q - r BLOCK_M - 1, so rank 0 sees the most keys under the
// causal mask and a partial tile, if any, is the last rank (rows below 0 are left out), which sees
// the fewest. The heads go in groups of `group` (the launch code picks a group whose K and V fit in
// L2 together); a group's tiles are numbered rank by rank, longest first, and the groups one after
// another. Blocks take the numbers in order, so the longest tiles start first and the shortest end.
struct Work { int q_start, h, b; };

__device__ __forceinline__ Work work_tile(int work, int H, int n_bh, int m_tiles, int n_q, int group)
{
    const int first_bh = work / (group * m_tiles) * group;   // this group's first (batch, head)
    const int heads = min(group, n_bh - first_bh);           // the last group may be smaller
    const int x = work - first_bh * m_tiles;                  // its place inside the group
    const int rank = x / heads, bh = first_bh + x % heads;
    return {n_q - (rank + 1) * BLOCK_M, bh % H, bh / H};
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
flash_hopper(const elem_t* __restrict__ q, const __grid_constant__ TensorMap k_map,
             const __grid_constant__ TensorMap v_map, elem_t* __restrict__ o, float* __restrict__ lse,
             int* __restrict__ work_counter, int B, int H, int H_kv, int n_q, int n_k, float scale, int causal,
             int group)
{
    extern __shared__ unsigned char smem_raw[];
    // The swizzle pattern repeats every 1024 bytes: every tile starts on a 1024-byte boundary.
    const unsigned raw = smem_addr(smem_raw);
    unsigned char* q_s = smem_raw + (((raw + 1023) & ~1023u) - raw);
    constexpr int Q_BYTES = BLOCK_M * D * 2, KV_BYTES = BLOCK_N * D * 2;
    unsigned char* k_s = q_s + Q_BYTES;                       // STAGES K tiles
    unsigned char* v_s = k_s + STAGES * KV_BYTES;             // STAGES V tiles
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(v_s + STAGES * KV_BYTES);
    auto k_full = [&](int s) { return smem_addr(bars + s); };
    auto k_empty = [&](int s) { return smem_addr(bars + STAGES + s); };
    auto v_full = [&](int s) { return smem_addr(bars + 2 * STAGES + s); };
    auto v_empty = [&](int s) { return smem_addr(bars + 3 * STAGES + s); };
    // The work tiles, handed from the producer to the consumers through two slots, with their own
    // full/empty pair each (the K/V ring's protocol, 2 slots deep).
    volatile int* work_s = reinterpret_cast<volatile int*>(bars + 4 * STAGES + 4);
    auto work_full = [&](int x) { return smem_addr(bars + 4 * STAGES + x); };
    auto work_empty = [&](int x) { return smem_addr(bars + 4 * STAGES + 2 + x); };

    // A persistent grid: about one block per SM, each taking work tile after work tile.
    const int m_tiles = (n_q + BLOCK_M - 1) / BLOCK_M;       // query tiles per head
    const int n_work = B * H * m_tiles;
    const int offset = n_k - n_q;                 // query i sees keys j <= i + offset (bottom-right)
    // Key tiles a query tile needs: all of them, or under the mask up to its last row's last key.
    auto key_tiles = [&](int q_start) {
        const int q_last = min(q_start + BLOCK_M, n_q) - 1;
        const int kv_end = causal ? min(n_k, q_last + offset + 1) : n_k;
        return kv_end > 0 ? (kv_end + BLOCK_N - 1) / BLOCK_N : 0;
    };

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(k_full(s), 1);
            mbar_init(v_full(s), 1);
            mbar_init(k_empty(s), 4 * CONSUMERS);  // one arrival per consumer warp
            mbar_init(v_empty(s), 4 * CONSUMERS);
        }
        for (int x = 0; x < 2; ++x) {
            mbar_init(work_full(x), 1);
            mbar_init(work_empty(x), 4 * CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");   // visible to the TMA unit
    }
    __syncthreads();

    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        // ---- Producer --------------------------------------------------------------------------
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
        if (threadIdx.x == 0) {
            // The block's K/V tiles are numbered across its work tiles: tile `it` goes to stage
            // it % STAGES, so the next work tile's first tiles are copied while the consumers still
            // work on the last ones of this one.
            int first = 0;                        // the number of this work tile's key tile 0
            int work = blockIdx.x;                // the block's first work tile; then the scheduler's
            for (int taken = 0; ; ++taken) {
                mbar_wait(work_empty(taken % 2), ((taken / 2) & 1) ^ 1);   // the slot's last use was read
                work_s[taken % 2] = work;
                mbar_arrive(work_full(taken % 2));
                if (work >= n_work) break;        // the consumers stop there too
                const Work w = work_tile(work, H, B * H, m_tiles, n_q, group);
                const int b = w.b, h_kv = w.h / (H / H_kv), n_tiles = key_tiles(w.q_start);
                for (int it = first; it < first + n_tiles; ++it) {
                    // Tile it goes to stage s. Its previous use (tile it - STAGES) must be released.
                    const int s = it % STAGES;
                    const unsigned phase = (it / STAGES) & 1;
                    // BEGIN SOLUTION TODO(1): K tile it (key tile it - first of this work tile) into stage s: wait until the stage's previous use has been released, announce on its 'full' barrier the bytes the tile will bring, and copy the tile box by box with TMA; then the same for V tile it
                    mbar_wait(k_empty(s), phase ^ 1);
                    mbar_expect_tx(k_full(s), KV_BYTES);
                    for (int c = 0; c < BOXES; ++c)
                        tma_load(smem_addr(k_s + s * KV_BYTES) + c * BLOCK_N * 128, k_map, c * BOX,
                                 (it - first) * BLOCK_N, b * H_kv + h_kv, k_full(s));
                    mbar_wait(v_empty(s), phase ^ 1);
                    mbar_expect_tx(v_full(s), KV_BYTES);
                    for (int c = 0; c < BOXES; ++c)
                        tma_load(smem_addr(v_s + s * KV_BYTES) + c * BLOCK_N * 128, v_map, c * BOX,
                                 (it - first) * BLOCK_N, b * H_kv + h_kv, v_full(s));
                    // END SOLUTION
                }
                first += n_tiles;
                work = gridDim.x + atomicAdd(work_counter, 1);   // the next untaken work tile
            }
        }
        return;
    }

    // ---- Consumers --------------------------------------------------------------------------------
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(CONSUMER_REGS));
    const int cw = wg - 1;                                 // this consumer: query rows 64 cw ..
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const float scale_log2 = scale * 1.4426950408889634f;  // scores in log2 units: exp2 is one MUFU op
    const unsigned q_base = smem_addr(q_s) + cw * 64 * 128;

    // Ping-pong: the consumers take turns issuing their products. Consumer c waits on named barrier
    // 1 + c for its turn and, once its products are issued, lets the next consumer go (bar.arrive on
    // the next one's barrier); its softmax then runs while the other's products do. The turns go on
    // from one work tile to the next: every consumer takes as many in each.
    auto my_turn = [&]() { asm volatile("bar.sync %0, 256;" :: "r"(1 + cw) : "memory"); };
    auto next_turn = [&]() { asm volatile("bar.arrive %0, 256;" :: "r"(1 + (cw + 1) % CONSUMERS) : "memory"); };
    if (cw == CONSUMERS - 1) asm volatile("bar.arrive 1, 256;" ::: "memory");   // consumer 0 starts

    auto release = [&](unsigned bar) { __syncwarp(); if (lane == 0) mbar_arrive(bar); };

    // Q is read once per work tile: this consumer's threads copy its 64 rows themselves, with
    // ordinary stores, into the layout its descriptors describe (the one TMA gives K and V).
    auto copy_q = [&](int q_start, int h, int b) {
        // BEGIN SOLUTION TODO(2): copy this consumer's 64 query rows into q_s, laid out as a TMA copy would lay them (64-feature boxes, 128-byte swizzle, zeros for rows outside 0 .. n_q - 1), every load before any store; then make the stores visible to wgmma and wait until the warpgroup's 128 threads have all written theirs (lesson, section 7)
        constexpr int Q_CHUNKS = 64 * D / 8 / 128;             // 16-byte chunks per thread: 4 or 8
        const elem_t* q_bh = q + (size_t)(b * H + h) * n_q * D;
        uint4 chunk[Q_CHUNKS];
        #pragma unroll
        for (int u = 0; u < Q_CHUNKS; ++u) {                   // every load in flight before any store
            const int x = threadIdx.x % 128 + 128 * u, r = x / (D / 8), c = x % (D / 8);   // row r, chunk c
            const int i = q_start + cw * 64 + r;
            chunk[u] = i < n_q ? *reinterpret_cast<const uint4*>(q_bh + (size_t)i * D + 8 * c)
                                         : make_uint4(0, 0, 0, 0);
        }
        #pragma unroll
        for (int u = 0; u < Q_CHUNKS; ++u) {
            const int x = threadIdx.x % 128 + 128 * u, r = x / (D / 8), c = x % (D / 8);
            *reinterpret_cast<uint4*>(q_s + cw * 64 * 128 + (c / 8) * BLOCK_M * 128 + r * 128
                                      + ((c % 8) ^ (r % 8)) * 16) = chunk[u];
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // wgmma reads through the async proxy
        asm volatile("bar.sync %0, 128;" :: "r"(1 + CONSUMERS + cw) : "memory");   // all 64 rows are in
        // END SOLUTION
    };
    // The next work tile from the producer's slots (n_work or more: no more work), and its Q, copied
    // once every warp of this consumer is past the last product that read q_s.
    int taken = 0;
    auto take = [&]() {
        mbar_wait(work_full(taken % 2), (taken / 2) & 1);
        const int work = work_s[taken % 2];
        release(work_empty(taken % 2));
        ++taken;
        if (work < n_work) {
            const Work w = work_tile(work, H, B * H, m_tiles, n_q, group);
            asm volatile("bar.sync %0, 128;" :: "r"(1 + CONSUMERS + cw) : "memory");
            copy_q(w.q_start, w.h, w.b);
        }
        return work;
    };

    int first = 0;                        // the block's number of this work tile's key tile 0
    for (int work = take(); work < n_work; ) {
        const Work w = work_tile(work, H, B * H, m_tiles, n_q, group);
        const int q_start = w.q_start, h = w.h, b = w.b, n_tiles = key_tiles(q_start);
        const int row0 = q_start + cw * 64 + warp * 16 + g;    // this lane's rows: row0 and row0 + 8

        // The online-softmax state of this lane's two rows (r = 0: row0, r = 1: row0 + 8), as in 06.
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
        float acc[O_TILES][4];
        #pragma unroll
        for (int j = 0; j < O_TILES; ++j)
            #pragma unroll
            for (int e = 0; e < 4; ++e) acc[j][e] = 0.0f;

        // S = Q K_itᵀ, issued and committed (not waited for). it numbers the block's K/V tiles.
        auto issue_s = [&](float (&s)[S_TILES][4], int it) {
            const int st = it % STAGES;
            // BEGIN SOLUTION TODO(3): issue S = Q K_itᵀ once K tile it has landed: one wgmma per 16 features, Q and K read from shared memory through descriptors, the first step overwriting s; commit them as one group, and do not wait for it
            mbar_wait(k_full(st), (it / STAGES) & 1);
            const unsigned k_base = smem_addr(k_s + st * KV_BYTES);
            wgmma_fence();
            #pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) {
                // Features 16 kk .. 16 kk + 15: box kk / 4, 32 bytes into its rows per step.
                const unsigned long long dq = desc(q_base + (kk / 4) * BLOCK_M * 128 + (kk % 4) * 32, 16, 1024);
                const unsigned long long dk = desc(k_base + (kk / 4) * BLOCK_N * 128 + (kk % 4) * 32, 16, 1024);
                if (kk == 0) wgmma_s0(s, dq, dk); else wgmma_s(s, dq, dk);
            }
            wgmma_commit();
            // END SOLUTION
        };
        // acc += P V_it, issued and committed.
        auto issue_o = [&](const unsigned (&p)[P_STEPS][4], int it) {
            const int st = it % STAGES;
            // BEGIN SOLUTION TODO(4): issue acc += P V_it once V tile it has landed: one wgmma per 16 keys, P from registers and V from shared memory read transposed; commit them as one group, and do not wait for it
            mbar_wait(v_full(st), (it / STAGES) & 1);
            const unsigned v_base = smem_addr(v_s + st * KV_BYTES);
            wgmma_fence();
            #pragma unroll
            for (int kk = 0; kk < P_STEPS; ++kk)         // keys 16 kk ..: 16 rows of 128 bytes further
                wgmma_o(acc, p[kk], desc(v_base + kk * 16 * 128, BLOCK_N * 128, 1024));
            wgmma_commit();
            // END SOLUTION
        };
        // The softmax of tile it (key tile it - first) on S (in place: S becomes P, unrounded), and
        // the row factors alpha.
        auto softmax = [&](float (&s)[S_TILES][4], float (&alpha)[2], int it) {
            const int kv_start = (it - first) * BLOCK_N;
            if ((causal && kv_start + BLOCK_N - 1 > q_start + offset) || kv_start + BLOCK_N > n_k) {
                #pragma unroll
                for (int j = 0; j < S_TILES; ++j)
                    #pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int i = row0 + 8 * (e / 2), key = kv_start + 8 * j + 2 * t + e % 2;
                        if (key >= n_k || (causal && key > i + offset)) s[j][e] = -INFINITY;
                    }
            }
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                float mx = -INFINITY;
                #pragma unroll
                for (int j = 0; j < S_TILES; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));   // the quad holds the row
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_new = fmaxf(m[r], mx * scale_log2);
                const float m_use = m_new == -INFINITY ? 0.0f : m_new;
                alpha[r] = exp2f(m[r] - m_use);
                m[r] = m_new;
                l[r] *= alpha[r];
                #pragma unroll
                for (int j = 0; j < S_TILES; ++j)
                    #pragma unroll
                    for (int e = 2 * r; e < 2 * r + 2; ++e) {
                        s[j][e] = exp2f(fmaf(s[j][e], scale_log2, -m_use));
                        l[r] += s[j][e];
                    }
            }
        };
        auto to_p = [&](const float (&s)[S_TILES][4], unsigned (&p)[P_STEPS][4]) {
            #pragma unroll
            for (int kk = 0; kk < P_STEPS; ++kk) {
                p[kk][0] = pack2(s[2 * kk][0], s[2 * kk][1]);           // row g,     keys 2t, 2t+1
                p[kk][1] = pack2(s[2 * kk][2], s[2 * kk][3]);           // row g + 8
                p[kk][2] = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);   // row g,     keys 2t+8, 2t+9
                p[kk][3] = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);   // row g + 8
            }
        };
        auto rescale = [&](const float (&alpha)[2]) {
            #pragma unroll
            for (int j = 0; j < O_TILES; ++j)
                #pragma unroll
                for (int e = 0; e < 4; ++e) acc[j][e] *= alpha[e / 2];
        };

        int next;                         // the next work tile, taken while this one's last P V runs
        if (n_tiles > 0) {
            // The block's K/V tiles first .. first + n_tiles - 1 hold this work tile's key tiles.
            float s[S_TILES][4];
            unsigned p[P_STEPS][4];
            float alpha[2];
            my_turn();
            issue_s(s, first);
            next_turn();
            wgmma_wait<0>();
            release(k_empty(first % STAGES));
            softmax(s, alpha, first);
            to_p(s, p);
            for (int it = first + 1; it < first + n_tiles; ++it) {
                // S of tile it and P V of tile it - 1 go to the tensor cores together; acc takes the
                // last tile's alpha first (no product is writing it now). The softmax of tile it needs
                // only S; P is overwritten only once P V has read it.
                // BEGIN SOLUTION TODO(5): one tile of the overlapped loop (lesson, section 8): S of tile it and P V of tile it - 1 issued in one turn, acc rescaled between the two; the softmax of tile it while P V still runs; every stage released only after the wait that covers the product reading it; P made from S last
                my_turn();
                issue_s(s, it);
                rescale(alpha);
                issue_o(p, it - 1);
                next_turn();
                wgmma_wait<1>();                          // S done (P V may still run)
                release(k_empty(it % STAGES));
                softmax(s, alpha, it);
                wgmma_wait<0>();                          // P V done
                release(v_empty((it - 1) % STAGES));
                to_p(s, p);
                // END SOLUTION
            }
            rescale(alpha);
            my_turn();
            issue_o(p, first + n_tiles - 1);
            next_turn();
            next = take();                    // no product reads q_s now: the next Q under this P V
            wgmma_wait<0>();
            release(v_empty((first + n_tiles - 1) % STAGES));
        } else {
            next = take();
        }

        // o = acc / l, lse = (m + log2 l) · ln 2 for the rows 0 .. n_q - 1; a row with no key: 0 and -inf.
        // BEGIN SOLUTION TODO(6): o and lse of this lane's two rows (row0 and row0 + 8): each row's l summed over its quad by every lane, before any if; then for rows from 0 to n_q - 1, o = acc / l in the element type and, from one lane of the quad, lse = (m + log2 l) · ln 2; a row with l = 0 gets o = 0 and lse = -INFINITY
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l_row = l[r];
            l_row += __shfl_xor_sync(0xffffffffu, l_row, 1);
            l_row += __shfl_xor_sync(0xffffffffu, l_row, 2);
            const int i = row0 + 8 * r;
            if (0 <= i && i < n_q) {
                const float inv_l = l_row > 0.0f ? 1.0f / l_row : 0.0f;
                elem_t* o_i = o + ((size_t)(b * H + h) * n_q + i) * D;
                #pragma unroll
                for (int j = 0; j < O_TILES; ++j)
                    *reinterpret_cast<elem2_t*>(o_i + 8 * j + 2 * t) = to_elem2(acc[j][2 * r] * inv_l, acc[j][2 * r + 1] * inv_l);
                if (t == 0)
                    lse[(size_t)(b * H + h) * n_q + i] = l_row > 0.0f ? (m[r] + log2f(l_row)) * 0.6931471805599453f : -INFINITY;
            }
        }
        // END SOLUTION
        first += n_tiles;
        work = next;
    }
}
"""

# The tile sizes, per head dimension. Chosen by timing on an H200 (2026-11-26, B=2, H=16, N=4096 and
# B=1, H=16, N=16384, float16, against BLOCK_N = 160, 176, 192, three stages and no ping-pong):
#   d = 128: two consumer warpgroups (128 query rows), key tiles of 128, two stages (160 KB).
#   d = 64:  three consumer warpgroups (192 query rows), key tiles of 128, three stages.
CONFIG = {
    64: dict(BLOCK_N=128, CONSUMERS=3, STAGES=3),
    128: dict(BLOCK_N=128, CONSUMERS=2, STAGES=2),
}
HEAD_DIMS = (64, 128)
DTYPES = ("float16", "bfloat16")


def wgmma_helpers(n_s: int, n_o: int) -> str:
    """The three wgmma wrappers for S tiles of n_s keys and acc tiles of n_o features. Each lists its
    accumulators one by one (n / 2 floats per thread): the asm needs one operand per register."""
    def regs(n, mode):
        return ", ".join(f'"{mode}f"(d[{i // 4}][{i % 4}])' for i in range(n // 2))

    def names(n):
        return ", ".join(f"%{i}" for i in range(n // 2))
    a, b = n_s // 2, n_o // 2
    return f"""
__device__ __forceinline__ void wgmma_s0(float (&d)[{n_s // 8}][4], unsigned long long da, unsigned long long db)
{{
    asm volatile("wgmma.mma_async.sync.aligned.m64n{n_s}k16.f32." AB_TYPE " {{{names(n_s)}}}, %{a}, %{a + 1}, 0, 1, 1, 0, 0;"
                 : {regs(n_s, "=")} : "l"(da), "l"(db));
}}
__device__ __forceinline__ void wgmma_s(float (&d)[{n_s // 8}][4], unsigned long long da, unsigned long long db)
{{
    asm volatile("wgmma.mma_async.sync.aligned.m64n{n_s}k16.f32." AB_TYPE " {{{names(n_s)}}}, %{a}, %{a + 1}, 1, 1, 1, 0, 0;"
                 : {regs(n_s, "+")} : "l"(da), "l"(db));
}}
__device__ __forceinline__ void wgmma_o(float (&d)[{n_o // 8}][4], const unsigned (&p)[4], unsigned long long dv)
{{
    asm volatile("wgmma.mma_async.sync.aligned.m64n{n_o}k16.f32." AB_TYPE " {{{names(n_o)}}}, "
                 "{{%{b}, %{b + 1}, %{b + 2}, %{b + 3}}}, %{b + 4}, 1, 1, 1, 1;"
                 : {regs(n_o, "+")} : "r"(p[0]), "r"(p[1]), "r"(p[2]), "r"(p[3]), "l"(dv));
}}
"""


def source(d: int) -> str:
    return KERNEL.replace("@WGMMA_HELPERS@", wgmma_helpers(CONFIG[d]["BLOCK_N"], d))


def block_m(d: int) -> int:
    return 64 * CONFIG[d]["CONSUMERS"]


def shared_bytes(d: int) -> int:
    """The Q tile, STAGES K and V tiles, the mbarriers (4 per stage, 4 for the work slots), the two
    work slots, and 1024 bytes to align the start."""
    cfg = CONFIG[d]
    return (1024 + block_m(d) * d * 2 + cfg["STAGES"] * 2 * cfg["BLOCK_N"] * d * 2
            + 8 * (4 * cfg["STAGES"] + 4) + 4 * 2)


# The schedule's head groups: as many heads as have their K and V (n_k · d · 2 bytes each) in this
# many bytes together, a small part of the L2 (50 MB on an H100). Chosen by timing on an H200
# (2026-11-28): 8 MB against one head per group and 32 MB (at N = 1024, 32 MB was 5% slower at d = 128
# without a mask than one head, and 8 MB as fast as one head and faster under the mask).
L2_BYTES = 8 << 20


@functools.lru_cache(maxsize=None)
def _kernel(rt, d, elem, config):
    options = tuple(f"-D{key}={int(val)}" for key, val in config) + (
        f"-DD_HEAD={d}", f"-DUSE_BF16={int(elem == 'bfloat16')}", "-ftz=true",
        "-arch=sm_90a")                         # wgmma and setmaxnreg exist only on sm_90a
    kernel = rt.compile(source(d), options=options).get_function("flash_hopper")
    kernel.max_dynamic_shared_size_bytes = shared_bytes(d)
    return kernel


def flash_hopper(rt, q, k, v, scale, causal=False, dtype=None):
    """q [B, H, Nq, d]; k, v [B, Hkv, Nk, d]; float16 or bfloat16 (bfloat16 as uint16 bits with
    dtype='bfloat16'), contiguous, on an sm_90 GPU -> (o [B, H, Nq, d], lse [B, H, Nq] float32)."""
    B, H, n_q, d = q.shape
    H_kv, n_k = k.shape[1], k.shape[2]
    if k.shape != (B, H_kv, n_k, d) or v.shape != k.shape:
        raise ValueError(f"k and v must be [B, Hkv, Nk, d] with q's B and d, got {k.shape} and {v.shape}")
    if H % H_kv or n_q < 1 or n_k < 1 or d not in HEAD_DIMS:
        raise ValueError(f"need H a multiple of Hkv, Nq, Nk >= 1 and d in {HEAD_DIMS}; got H = {H}, "
                         f"Hkv = {H_kv}, Nq = {n_q}, Nk = {n_k}, d = {d}")
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    elem = dtype or q.dtype.name
    if elem not in DTYPES or q.dtype.itemsize != 2 or not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one 16-bit type, float16 or bfloat16 (say dtype='bfloat16' "
                        f"for uint16 bits); got {q.dtype}, {k.dtype}, {v.dtype} with dtype={dtype!r}")
    cfg = CONFIG[d]
    kernel = _kernel(rt, d, elem, tuple(sorted(cfg.items())))
    maps = (rt.tensor_map(k, cfg["BLOCK_N"], elem), rt.tensor_map(v, cfg["BLOCK_N"], elem))
    o = rt.empty(q.shape, q.dtype)
    lse = rt.empty((B, H, n_q), "float32")
    # A persistent grid: one block per SM (one fits), or fewer when there are fewer work tiles. Each
    # block starts with work tile blockIdx.x; work_counter counts the tiles taken after those.
    n_work = B * H * ((n_q + block_m(d) - 1) // block_m(d))
    grid = (min(n_work, rt.multiprocessor_count),)
    work_counter = rt.zeros((1,), "int32")
    group = max(1, L2_BYTES // (n_k * d * 2 * 2))
    kernel(grid, (128 * (cfg["CONSUMERS"] + 1),),
           (q, *maps, o, lse, work_counter, rt.int32(B), rt.int32(H), rt.int32(H_kv), rt.int32(n_q), rt.int32(n_k),
            rt.float32(scale), rt.int32(int(bool(causal))), rt.int32(group)), shared_mem=shared_bytes(d))
    return o, lse
