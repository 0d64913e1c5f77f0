# BLIND: In decode_partial (TODO 4) the final merge loop skips rows with 'if (lr >= n_rows) continue;' (the block-local row) instead of 'row >= n_rows' (row = row0 + lr): the same while one row block holds all G*T rows (up to 32), but when a group needs several row blocks and G*T is not a multiple of 32 the last block also stores its padding rows, whose out index is the next sequence's tokens (past the end of o for the last one), e.g. B=2, H=8, Hkv=1 (G=8), T=5 new tokens, d=64.
"""13 · Decode on tensor cores. Read modules/13_decode_tensor_cores.md, then fill in each TODO.

Module 05's paged split-KV decode, as serving engines run it: the cache in bfloat16 or float16, the
query heads of a GQA group and the new tokens of a sequence (1 to 8, speculative decoding) packed
as the rows of one mma.sync, so that each page of K and V is read once per group, and the pages
streamed into shared memory by cp.async through a ring of STAGES stages.

    q [B, T, H, d]; k_pages, v_pages [num_pages, page_size, Hkv, d]; block_table [B, max_pages] int32;
    context_lens [B] int32, the new tokens' keys included: new token t of sequence b sees the keys
    j <= context_lens[b] - T + t (the causal mask aligned bottom-right) -> o [B, T, H, d] of q's
    type, lse [B, T, H] float32. A row that sees no key writes o = 0 and lse = -inf.

One block per (split, kv head, sequence) computes the rows r = t · G + g (G = H / Hkv, head
kv · G + g, token t) of its group over the keys of its split; its WARPS warps take turns over the
split's keys, TILE_KEYS each per stage, each streaming its own keys through its own cp.async
pipeline, and merge their states at the end. Then module 04's combine
merges the splits, unless there is only one. The PTX helpers and the swizzle are module 06's.
The tuning constants are stated once, in CONFIG (below the kernels), and compiled in as -D options.
"""
import functools

KERNEL = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// Compiled in from CONFIG by the launch code (-DWARPS=4 -DTILE_KEYS=16 -DSTAGES=3 -DCOMBINE_WARPS=8 -DUSE_BF16=1):
//   WARPS          warps per block; each takes TILE_KEYS keys of every stage
//   TILE_KEYS      keys per warp and stage (a multiple of 16: P V takes keys 16 at a time)
//   STAGES         stages of the cp.async ring: STAGES - 1 are in flight while one is computed on
//   COMBINE_WARPS  warps of a combine block, each summing a share of the splits
//   USE_BF16       the element type of q, the pages and o: 0 float16, 1 bfloat16
#if !defined(WARPS) || !defined(TILE_KEYS) || !defined(STAGES) || !defined(COMBINE_WARPS) || !defined(USE_BF16)
#error "WARPS, TILE_KEYS, STAGES, COMBINE_WARPS and USE_BF16 come from the Python launch code, passed to rt.compile as -D options"
#endif
constexpr int NTHREADS = WARPS * 32;
constexpr int STAGE_KEYS = WARPS * TILE_KEYS;    // keys of one stage, warp w's are TILE_KEYS · w ..
constexpr int NT = TILE_KEYS / 8;                // 8-key MMA tiles of S per warp and stage
static_assert(TILE_KEYS % 16 == 0 && TILE_KEYS <= 32 && STAGES >= 2,
              "TILE_KEYS a multiple of 16, one lane per key of a warp's tile, at least two stages");

#if USE_BF16
typedef __nv_bfloat16 elem_t;
typedef __nv_bfloat162 elem2_t;
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
#else
typedef __half elem_t;
typedef __half2 elem2_t;
__device__ __forceinline__ elem2_t to_elem2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
#endif

// ---- Module 06's PTX helpers (fragment layouts: module 06, section 3) ------------------------------

__device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    elem2_t x = to_elem2(lo, hi);
    return *reinterpret_cast<unsigned*>(&x);
}

// d = A · B + d for one 16 × 8 × 16 product, float32 accumulators. Lane l holds rows g = l / 4 and
// g + 8 of every fragment, columns 2t and 2t + 1 (t = l % 4) of every 8.
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

// 16 bytes from global to shared memory, without waiting; valid = false reads nothing, writes zeros.
__device__ __forceinline__ void cp_async_16(elem_t* dst, const elem_t* src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }

// Wait until at most N of this thread's committed groups are still in flight (the newest ones).
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }

// Tiles are [rows][D], chunk c (8 elements) of row r stored at position c ^ (r % 8): ldmatrix's 8 rows
// then hit 8 different groups of banks (module 06, section 9).
template <int D>
__device__ __forceinline__ int swz(int row, int col) { return row * D + (((col / 8) ^ (row % 8)) * 8); }

// ---- The paged cache ------------------------------------------------------------------------------

// Where the row of kv head kv at physical position pos starts: a page is [page_size, Hkv, d].
__device__ __forceinline__ size_t kv_offset(int pos, int kv, int H_kv, int d)
{
    return ((size_t)pos * H_kv + kv) * d;
}

// The page that holds key j of a sequence (table_b is its row of the block table), or -1 for a key at
// or past end, whose page may not exist (the table holds -1 past a sequence's last page). A global
// load: the warp waits for it where its value is first used, not here.
__device__ __forceinline__ int page_of(const int* __restrict__ table_b, int j, int end, int page_size)
{
    return j < end ? table_b[j / page_size] : -1;
}

// Where key j lives in the paged cache, given its page: the physical position page · page_size + slot,
// or -1 for a key with no page.
__device__ __forceinline__ int physical_pos(int page, int j, int page_size)
{
    // BEGIN SOLUTION TODO(1): -1 when page < 0; else slot = j % page_size, and the position page · page_size + slot
    return page < 0 ? -1 : page * page_size + j % page_size;
    // STUB: return -1;
    // END SOLUTION
}

// One warp's TILE_KEYS keys of a stage into its rows of the slot: rows row0 .. row0 + TILE_KEYS - 1 of
// slot (K), and the same rows of slot + STAGE_KEYS · D (V), one 16-byte cp.async per chunk. Lane i <
// TILE_KEYS holds key i's physical position pos (-1: nothing read from global memory; the rows are
// zero-filled, and attend_tile masks the key). Lane l copies chunk
// l % CHUNKS of rows l / CHUNKS + n · ROW_STEP, each row's position shuffled from its lane:
// neighbouring lanes read neighbouring chunks of one row. Position p's row starts p · H_kv · D
// elements after position 0's, so a row costs a shuffle, a multiply-add and its two copies. Worked out
// per row from scratch (a signed remainder, a 64-bit product), the copies' addresses took 37% of the
// kernel's instructions (ncu, H200, batch 256 at 1k): decode has few instructions to hide them among.
template <int D>
__device__ __forceinline__ void load_tile_async(elem_t* slot, int row0, int pos, const elem_t* __restrict__ k_pages,
                                                const elem_t* __restrict__ v_pages, int kv, int H_kv)
{
    constexpr int CHUNKS = D / 8, ROW_STEP = 32 / CHUNKS;
    static_assert(TILE_KEYS % ROW_STEP == 0, "a warp copies ROW_STEP rows per instruction");
    const int lane = threadIdx.x % 32, c = (lane % CHUNKS) * 8;
    const elem_t* k_src = k_pages + kv_offset(0, kv, H_kv, D) + c;      // position p: p · H_kv · D further
    const elem_t* v_src = v_pages + kv_offset(0, kv, H_kv, D) + c;
    const unsigned row_stride = H_kv * D;
    #pragma unroll
    for (int n = 0; n < TILE_KEYS / ROW_STEP; ++n) {
        const int r = lane / CHUNKS + n * ROW_STEP;
        const int p = __shfl_sync(0xffffffffu, pos, r);
        const size_t at = (size_t)(unsigned)max(p, 0) * row_stride;      // p = -1 reads nothing
        elem_t* k_dst = slot + swz<D>(row0 + r, c);
        cp_async_16(k_dst, k_src + at, p >= 0);
        cp_async_16(k_dst + STAGE_KEYS * D, v_src + at, p >= 0);
    }
}

// ---- One warp's keys of a stage --------------------------------------------------------------------

// Attend the block's ROWS = 16 · MT packed rows (row0 + r = token · G + g) to keys key0 .. key0 +
// TILE_KEYS - 1, whose K and V rows are k_t and v_t in shared memory, and fold them into the online-
// softmax state of this lane's rows: [mt][0] is row g, [mt][1] row g + 8 of MMA tile mt; m in log2
// units (the same in a quad), l this lane's part of the row sum, acc the unnormalised output fragment.
template <int D, int MT>
__device__ __forceinline__ void attend_tile(const elem_t* q_s, const elem_t* k_t, const elem_t* v_t,
                                            int key0, int end, int ctx, int T, int G, int row0, float scale_log2,
                                            float (&m)[MT][2], float (&l)[MT][2], float (&acc)[MT][D / 8][4])
{
    constexpr int KSTEPS = D / 16, DT = D / 8;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    // ldmatrix of the 16 × 16 block (rows 16 r16 .., columns 16 c16 ..) of a tile: module 06's block16.
    auto block16 = [&](int r16, int c16) { return swz<D>(r16 * 16 + lane % 16, c16 * 16 + (lane / 16) * 8); };

    // BEGIN SOLUTION TODO(3): S = Q Kᵀ on the packed rows (ldmatrix_x4 of q_s and k_t, mma_16816); where the tile reaches past the keys every row sees, the scores of keys j >= end or j > token + offset (offset = ctx - T) set to -INFINITY; then module 06's online softmax on fragment rows and acc += P V (ldmatrix_x4_trans of v_t)
    float s[MT][NT][4] = {};
    #pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
        unsigned a[MT][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(a[mt], q_s + block16(mt, kk));
        #pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            unsigned kb[4];
            ldmatrix_x4(kb, k_t + block16(np, kk));
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma_16816(s[mt][2 * np], a[mt], kb[0], kb[2]);
                mma_16816(s[mt][2 * np + 1], a[mt], kb[1], kb[3]);
            }
        }
    }
    // Element e of s[mt][nt]: row row0 + 16 mt + g + 8 (e / 2), of token row / G; key key0 + 8 nt + 2t + e % 2.
    // Token t sees the keys j <= t + offset: the T new tokens are the context's last T keys (bottom-right).
    const int offset = ctx - T;
    if (key0 + TILE_KEYS > min(end, offset + 1)) {            // some key here is hidden from some row
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int token = (row0 + mt * 16 + g + 8 * (e / 2)) / G;
                    const int j = key0 + nt * 8 + 2 * t + e % 2;
                    if (j >= end || j > token + offset) s[mt][nt][e] = -INFINITY;
                }
    }
    unsigned p[MT][NT / 2][4];
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = -INFINITY;
            #pragma unroll
            for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));     // the row's max over its quad
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m[mt][r], mx * scale_log2);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;   // no visible key yet: no NaN
            const float alpha = exp2f(m[mt][r] - m_use);
            m[mt][r] = m_new;
            l[mt][r] *= alpha;
            #pragma unroll
            for (int dt = 0; dt < DT; ++dt) { acc[mt][dt][2 * r] *= alpha; acc[mt][dt][2 * r + 1] *= alpha; }
            #pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                #pragma unroll
                for (int e = 2 * r; e < 2 * r + 2; ++e) {
                    s[mt][nt][e] = exp2f(fmaf(s[mt][nt][e], scale_log2, -m_use));
                    l[mt][r] += s[mt][nt][e];
                }
        }
        #pragma unroll
        for (int kk = 0; kk < NT / 2; ++kk) {     // S's C fragments are P V's A fragments, rounded
            p[mt][kk][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            p[mt][kk][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            p[mt][kk][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            p[mt][kk][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
    }
    #pragma unroll
    for (int kk = 0; kk < NT / 2; ++kk)
        #pragma unroll
        for (int dp = 0; dp < DT / 2; ++dp) {
            unsigned vb[4];
            ldmatrix_x4_trans(vb, v_t + block16(kk, dp));
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma_16816(acc[mt][2 * dp], p[mt][kk], vb[0], vb[1]);
                mma_16816(acc[mt][2 * dp + 1], p[mt][kk], vb[2], vb[3]);
            }
        }
    // END SOLUTION
}

// ---- The partial kernel ---------------------------------------------------------------------------

// Block (split, kv · row_blocks + rb, b): rows r = rb · ROWS .. of the group's T · G rows (r = t · G + g)
// over the keys [split · chunk, min(split · chunk + chunk, context_lens[b])) of sequence b.
// MT 16-row MMA tiles per block: ROWS = 16 · MT.
template <int D, int MT>
__global__ void __launch_bounds__(NTHREADS)
decode_partial(const elem_t* __restrict__ q, const elem_t* __restrict__ k_pages,
               const elem_t* __restrict__ v_pages, const int* __restrict__ block_table,
               const int* __restrict__ context_lens, elem_t* __restrict__ o, float* __restrict__ lse,
               float* __restrict__ o_part, float* __restrict__ lse_part,
               int T, int H, int H_kv, int max_pages, int page_size, int chunk, float scale_log2)
{
    constexpr int ROWS = 16 * MT, DT = D / 8;
    constexpr int STAGE = 2 * STAGE_KEYS * D;     // elements of one stage: K, then V
    // acc_s's rows: each starts 8 banks further, so the 4 rows of a half-warp's float2 store cover the 32
    // banks once (rows of D floats would all start in bank 0: a 4-way conflict)
    constexpr int ACC_STRIDE = D + 8;
    extern __shared__ uint4 smem_u4[];
    elem_t* ring = reinterpret_cast<elem_t*>(smem_u4);                // STAGES stages
    elem_t* q_s = ring + STAGES * STAGE;                                // [ROWS][D]

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int split = blockIdx.x, n_splits = gridDim.x, b = blockIdx.z;
    const int row_blocks = gridDim.y / H_kv, kv = blockIdx.y / row_blocks;
    const int G = H / H_kv, n_rows = G * T, row0 = (blockIdx.y % row_blocks) * ROWS;
    const int ctx = context_lens[b];
    const int start = split * chunk, end = min(start + chunk, ctx);
    const int n_stages = end > start ? (end - start + STAGE_KEYS - 1) / STAGE_KEYS : 0;
    const int* table_b = block_table + (size_t)b * max_pages;

    // The group's rows of q: row r is token r / G of head kv · G + r % G; rows past n_rows are zeros.
    {
        constexpr int CHUNKS = D / 8, ROW_STEP = NTHREADS / CHUNKS;
        const int c = (tid % CHUNKS) * 8;
        for (int r = tid / CHUNKS; r < ROWS; r += ROW_STEP) {
            const int row = row0 + r;
            const bool valid = row < n_rows;
            const size_t at = valid ? (((size_t)b * T + row / G) * H + kv * G + row % G) * D : 0;
            cp_async_16(q_s + swz<D>(r, c), q + at + c, valid);
        }
        cp_async_commit();
    }

    // The online-softmax state of this lane's rows (attend_tile says which).
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
    // BEGIN SOLUTION TODO(2): this warp's own pipeline: its rows of every slot are my_row0 = warp · TILE_KEYS .., and lane i < TILE_KEYS takes key start + s · STAGE_KEYS + my_row0 + i of stage s. Issue stages 0 .. STAGES - 2 with load_tile_async (lane i's position: physical_pos of page_of its key; lanes i >= TILE_KEYS: -1), one commit each even when empty, and load the page of stage STAGES - 1. Then per stage it: cp_async_wait<STAGES - 2>; __syncthreads when it == 0 (q_s came from every warp), else __syncwarp; if next = it + STAGES - 1 < n_stages, issue it into slot next % STAGES (the one stage it - 1 used) at the positions of the page loaded in the previous iteration (the prologue's, the first time); commit either way; load the page of stage next + 1; attend_tile to this warp's rows of slot it % STAGES
    const int my_row0 = warp * TILE_KEYS;             // this warp's rows of every slot, and keys of every stage
    auto my_key = [&](int s) { return start + s * STAGE_KEYS + my_row0 + lane; };   // lane's key of stage s
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_stages) {
            const int page = lane < TILE_KEYS ? page_of(table_b, my_key(s), end, page_size) : -1;
            load_tile_async<D>(ring + s * STAGE, my_row0, physical_pos(page, my_key(s), page_size),
                               k_pages, v_pages, kv, H_kv);
        }
        cp_async_commit();                  // one group per stage, empty or not: the count stays uniform
    }
    // The page of the next stage to issue, loaded one iteration before its use: the table's load is in
    // flight during a tile's work. Used at once, it held every stage up by a load's latency.
    int page = lane < TILE_KEYS ? page_of(table_b, my_key(STAGES - 1), end, page_size) : -1;
    for (int it = 0; it < n_stages; ++it) {
        cp_async_wait<STAGES - 2>();        // this lane's copies of stage it (and of q) have landed
        if (it == 0) __syncthreads();       // ... every thread's copies of q_s: each warp copied some rows
        else __syncwarp();                  // ... this warp's other lanes' copies; and they are done with stage it - 1
        const int next = it + STAGES - 1;   // refill the slot stage it - 1 used, while this one computes
        if (next < n_stages)
            load_tile_async<D>(ring + (next % STAGES) * STAGE, my_row0, physical_pos(page, my_key(next), page_size),
                               k_pages, v_pages, kv, H_kv);
        cp_async_commit();
        page = lane < TILE_KEYS ? page_of(table_b, my_key(next + 1), end, page_size) : -1;
        const elem_t* k_t = ring + (it % STAGES) * STAGE + my_row0 * D;   // this warp's rows of slot it
        attend_tile<D, MT>(q_s, k_t, k_t + STAGE_KEYS * D, start + it * STAGE_KEYS + my_row0,
                           end, ctx, T, G, row0, scale_log2, m, l, acc);
    }
    // END SOLUTION
    cp_async_wait<0>();
    __syncthreads();                        // the ring is free: it holds the warps' states now

    __shared__ float m_s[WARPS][ROWS], l_s[WARPS][ROWS];                // per warp and local row lr
    float* acc_s = reinterpret_cast<float*>(smem_u4);                   // [WARPS][ROWS][ACC_STRIDE]
    // BEGIN SOLUTION TODO(4): merge the WARPS states of each row through shared memory in three steps: every warp's m into m_s, __syncthreads; each warp rescales its own l and acc to the block's max m_blk and stores them into l_s and acc_s, __syncthreads; then one thread per (local row, 4 features) adds the warps' parts and writes the row's o and lse: the final ones in q's type when n_splits == 1, else o_part and lse_part of this split (a row that saw no key: o = 0, lse = -inf)
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int r = 0; r < 2; ++r)
            if (t == 0) m_s[warp][mt * 16 + g + 8 * r] = m[mt][r];     // local row lr = 16 mt + g + 8 r
    __syncthreads();
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int lr = mt * 16 + g + 8 * r;
            float m_blk = -INFINITY;
            #pragma unroll
            for (int w = 0; w < WARPS; ++w) m_blk = fmaxf(m_blk, m_s[w][lr]);
            // This warp's share at the block's scale. A warp that saw no key of the row weighs 0; tested,
            // since where no warp saw one m_blk is -inf too, and exp2f(-inf - -inf) is NaN.
            const float wgt = m[mt][r] == -INFINITY ? 0.0f : exp2f(m[mt][r] - m_blk);
            float l_row = l[mt][r];                                     // the quad's 4 parts
            l_row += __shfl_xor_sync(0xffffffffu, l_row, 1);
            l_row += __shfl_xor_sync(0xffffffffu, l_row, 2);
            if (t == 0) l_s[warp][lr] = l_row * wgt;
            float* a = acc_s + ((size_t)warp * ROWS + lr) * ACC_STRIDE + 2 * t;
            #pragma unroll
            for (int dt = 0; dt < DT; ++dt)
                *reinterpret_cast<float2*>(a + dt * 8) = make_float2(acc[mt][dt][2 * r] * wgt, acc[mt][dt][2 * r + 1] * wgt);
        }
    __syncthreads();
    for (int idx = tid; idx < ROWS * D / 4; idx += NTHREADS) {        // one thread per (lr, 4 features)
        const int lr = idx / (D / 4), c = 4 * (idx % (D / 4)), row = row0 + lr;
        if (lr >= n_rows) continue;
        float m_blk = -INFINITY, l_blk = 0.0f;
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        #pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            m_blk = fmaxf(m_blk, m_s[w][lr]);
            l_blk += l_s[w][lr];
            const float4 x = *reinterpret_cast<const float4*>(acc_s + ((size_t)w * ROWS + lr) * ACC_STRIDE + c);
            sum.x += x.x; sum.y += x.y; sum.z += x.z; sum.w += x.w;
        }
        const float inv_l = l_blk > 0.0f ? 1.0f / l_blk : 0.0f;
        const float lse_r = l_blk > 0.0f ? (m_blk + log2f(l_blk)) * M_LN2_F : -INFINITY;
        const size_t out = ((size_t)b * T + row / G) * H + kv * G + row % G;   // (b, token, head)
        if (n_splits == 1) {                                            // one split: no combine
            *reinterpret_cast<uint2*>(o + out * D + c) = make_uint2(pack2(sum.x * inv_l, sum.y * inv_l),
                                                                    pack2(sum.z * inv_l, sum.w * inv_l));
            if (c == 0) lse[out] = lse_r;
        } else {
            const size_t part = out * n_splits + split;
            *reinterpret_cast<float4*>(o_part + part * D + c) =
                make_float4(sum.x * inv_l, sum.y * inv_l, sum.z * inv_l, sum.w * inv_l);
            if (c == 0) lse_part[part] = lse_r;
        }
    }
    // END SOLUTION
}

// Module 04's combine: a block of COMBINE_WARPS warps per row (b, token, head). Every split wrote the
// row (an empty one o = 0 and lse = -inf: weight 0). Warp w sums the splits w, w + COMBINE_WARPS, ..,
// each lane 4 features, and warp 0 adds the warps' sums: o = Σ_s exp(lse_s - lse) o_s, lse = log Σ_s
// exp(lse_s), o in q's type. With 33 splits, one warp going through them one after another waited on
// 33 loads in turn; eight warps have an eighth of the waits each.
extern "C" __global__ void decode_combine(const float* __restrict__ o_part, const float* __restrict__ lse_part,
                                          elem_t* __restrict__ o, float* __restrict__ lse, int d, int n_splits)
{
    const size_t row = (size_t)blockIdx.y * gridDim.x + blockIdx.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float* lse_s = lse_part + row * n_splits;
    const float4* o_s = reinterpret_cast<const float4*>(o_part + row * n_splits * d);
    elem2_t* o_row = reinterpret_cast<elem2_t*>(o + row * d);
    const bool active = 4 * lane < d;                  // lane owns features 4 lane .. 4 lane + 3
    __shared__ float4 acc_s[COMBINE_WARPS][32];
    __shared__ float total_s[COMBINE_WARPS];

    // BEGIN SOLUTION TODO(5): lse_max over all splits in every warp (lanes stride over them, then a butterfly); a row no split saw writes o = 0, lse = -inf; else each warp sums the weights exp(lse_s - lse_max) and the weighted o_s over its share of the splits, the warps' sums meet in acc_s and total_s, and warp 0 writes o = Σ w o_s / Σ w in q's type and lse = lse_max + log Σ w
    float lse_max = -INFINITY;
    for (int s = lane; s < n_splits; s += 32) lse_max = fmaxf(lse_max, lse_s[s]);
    for (int offset = 16; offset > 0; offset /= 2)
        lse_max = fmaxf(lse_max, __shfl_xor_sync(0xffffffffu, lse_max, offset));
    if (lse_max == -INFINITY) {                        // no key in any split (context 0, or masked)
        if (warp == 0 && active) { o_row[2 * lane] = to_elem2(0.f, 0.f); o_row[2 * lane + 1] = to_elem2(0.f, 0.f); }
        if (threadIdx.x == 0) lse[row] = -INFINITY;
        return;
    }
    float total = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    #pragma unroll 4
    for (int s = warp; s < n_splits; s += COMBINE_WARPS) {
        const float w = expf(lse_s[s] - lse_max);      // 0 for an empty split; <= 1, cannot overflow
        total += w;
        if (active) {
            const float4 x = o_s[(size_t)s * (d / 4) + lane];
            acc.x += w * x.x; acc.y += w * x.y; acc.z += w * x.z; acc.w += w * x.w;
        }
    }
    acc_s[warp][lane] = acc;
    if (lane == 0) total_s[warp] = total;
    __syncthreads();
    if (warp != 0) return;
    for (int w = 1; w < COMBINE_WARPS; ++w) {
        const float4 x = acc_s[w][lane];
        acc.x += x.x; acc.y += x.y; acc.z += x.z; acc.w += x.w;
        total += total_s[w];
    }
    const float inv = 1.f / total;                     // total >= 1: the largest split weighs 1
    if (active) {
        o_row[2 * lane] = to_elem2(acc.x * inv, acc.y * inv);
        o_row[2 * lane + 1] = to_elem2(acc.z * inv, acc.w * inv);
    }
    if (lane == 0) lse[row] = lse_max + logf(total);
    // END SOLUTION
}
"""

# The tuning constants, stated once: each build compiles KERNEL with them as -D options. Three stages of
# 4 warps × 16 keys: 96 KB of ring, so two blocks share an SM, 4 stages in flight per SM; on an H200
# (scripts/tune_decode_tc.py, 2026-11-28) it beat 2 and 4 stages (3 and 1 blocks per SM), 2 or 3 warps,
# 8 warps and 32 keys per warp, at batch 1 (128k) and batch 64 (8k), all with the block's stages then
# shared by its warps. With each warp running its own pipeline (H200, 2026-11-29, one run), it still beat
# 2 warps × 4 stages (3 blocks per SM), 3 warps × 4 stages, 2 warps × 6 stages and 2 warps × 32 keys on
# all five shapes timed (by 0.2% to 48% of its time); and BLOCKS_PER_SM 1, 3 or 4 at batch 1.
# Combine warps: four instead of one took batch 1, 32k from 52 to 47 µs of device
# time (H200, 2026-11-28); eight instead of four, 47 to 46 µs there and 141 to 139 µs at 128k (H200,
# 2026-11-29, one run).
CONFIG = dict(WARPS=4, TILE_KEYS=16, STAGES=3, COMBINE_WARPS=8)
MAX_ROW_TILES = 2               # 16-row MMA tiles per block: a group of more than 32 rows takes more blocks
HEAD_DIMS = (64, 128)
DTYPES = ("float16", "bfloat16")
MAX_TOKENS = 8                  # new tokens per sequence
MAX_GROUP = 16                  # H / Hkv
BLOCKS_PER_SM = 2               # partial blocks per SM: as many as the ring lets share one
MIN_CHUNK = 512                 # no split shorter than this many keys
ELEMENT_BYTES = 2
LOG2E = 1.4426950408889634


def cdiv(a, b):
    return (a + b - 1) // b


@functools.lru_cache(maxsize=None)
def _kernels(rt, d, row_tiles, elem, config):
    """One build per head dim, row tiles, element type and CONFIG (config: CONFIG's items as a tuple)."""
    options = tuple(f"-D{key}={int(val)}" for key, val in config)
    options += (f"-DUSE_BF16={int(elem == 'bfloat16')}", "-ftz=true")
    name = f"decode_partial<{d}, {row_tiles}>"
    mod = rt.compile(KERNEL, options=options, name_expressions=[name])
    partial = mod.get_function(name)
    smem = shared_bytes(d, row_tiles)
    if smem > 48 * 1024:                          # past 48 KB a kernel must opt in
        partial.max_dynamic_shared_size_bytes = smem
    return partial, mod.get_function("decode_combine")


def shared_bytes(d, row_tiles):
    """The ring of STAGES stages of K and V, then q's rows; the warps' merge reuses the ring."""
    c = CONFIG
    ring = c["STAGES"] * 2 * c["WARPS"] * c["TILE_KEYS"] * d * ELEMENT_BYTES
    merge = c["WARPS"] * 16 * row_tiles * (d + 8) * 4      # acc_s: rows of d + 8 floats
    return max(ring, merge) + 16 * row_tiles * d * ELEMENT_BYTES


def choose_num_splits(rt, blocks, max_len):
    """How many splits of the cache, for `blocks` blocks per split: enough to fill the GPU, none shorter
    than MIN_CHUNK keys."""
    # BEGIN SOLUTION TODO(6): about BLOCKS_PER_SM blocks per SM (rt.multiprocessor_count) over the B · Hkv · row_blocks blocks of one split, and no split shorter than MIN_CHUNK keys of max_len
    wanted = cdiv(BLOCKS_PER_SM * rt.multiprocessor_count, blocks)
    longest = cdiv(max_len, MIN_CHUNK)
    return max(1, min(wanted, longest))
    # STUB: return 1
    # END SOLUTION


def element_type(*arrays, dtype=None):
    """'float16' or 'bfloat16': what the arrays hold. dtype=None reads it from their dtype; uint16
    arrays (bfloat16 bits, as NumPy stores them) need dtype='bfloat16'."""
    kinds = {x.dtype.name for x in arrays}
    if len(kinds) != 1:
        raise TypeError(f"q, k_pages and v_pages must have one dtype, got {sorted(kinds)}")
    name = kinds.pop()
    if dtype is not None:
        want = dtype if isinstance(dtype, str) else getattr(dtype, "name", getattr(dtype, "__name__", str(dtype)))
        if name not in (want, "uint16"):
            raise TypeError(f"dtype={want!r} but q is {name}")
        name = want
    elif name == "uint16":
        raise TypeError("q is uint16: if it holds bfloat16 bits, say so with dtype='bfloat16'")
    if name not in DTYPES:
        raise TypeError(f"decode_tc takes float16 or bfloat16 arrays, got {name}")
    return name


def decode_tc(rt, q, k_pages, v_pages, block_table, context_lens, scale, dtype=None, num_splits=None):
    """q [B, T, H, d]; k_pages, v_pages [num_pages, page_size, Hkv, d], float16 or bfloat16;
    block_table [B, max_pages] int32; context_lens [B] int32 (the T new tokens' keys included)
    -> (o [B, T, H, d] of q's dtype, lse [B, T, H] float32)."""
    B, T, H, d = q.shape
    _, page_size, H_kv, _ = k_pages.shape
    max_pages = block_table.shape[1]
    if v_pages.shape != k_pages.shape or k_pages.shape[3] != d:
        raise ValueError(f"k_pages and v_pages must be [num_pages, page_size, Hkv, {d}], got {k_pages.shape} and {v_pages.shape}")
    if H % H_kv or H // H_kv > MAX_GROUP or not 1 <= T <= MAX_TOKENS:
        raise ValueError(f"H = {H} must be a multiple of Hkv = {H_kv} with H / Hkv <= {MAX_GROUP}, and "
                         f"1 <= T = {T} <= {MAX_TOKENS}")
    if d not in HEAD_DIMS:
        raise ValueError(f"head_dim {d} is not supported (choose one of {HEAD_DIMS})")
    if not all(x.flags.c_contiguous for x in (q, k_pages, v_pages)):
        raise ValueError("q, k_pages and v_pages must be contiguous (cp.async copies rows in 16-byte pieces)")
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}: the row max is taken before scaling")
    elem = element_type(q, k_pages, v_pages, dtype=dtype)

    rows = (H // H_kv) * T                             # the group's rows: T tokens × G query heads
    row_tiles = min(cdiv(rows, 16), MAX_ROW_TILES)
    row_blocks = cdiv(rows, 16 * row_tiles)
    max_len = max_pages * page_size                    # the longest context the table can address
    n_splits = num_splits or choose_num_splits(rt, B * H_kv * row_blocks, max_len)
    chunk = max(1, cdiv(max_len, n_splits))            # keys per split
    n_splits = max(1, cdiv(max_len, chunk))            # rounding may leave fewer splits

    partial, combine = _kernels(rt, d, row_tiles, elem, tuple(CONFIG.items()))
    o = rt.empty(q.shape, q.dtype)
    lse = rt.empty((B, T, H), "float32")
    o_part = rt.empty((B, T, H, n_splits, d), "float32")   # workspace: each split's normalised output
    lse_part = rt.empty((B, T, H, n_splits), "float32")    # ... and its log-sum-exp
    partial((n_splits, H_kv * row_blocks, B), (CONFIG["WARPS"] * 32,),
            (q, k_pages, v_pages, block_table, context_lens, o, lse, o_part, lse_part, rt.int32(T),
             rt.int32(H), rt.int32(H_kv), rt.int32(max_pages), rt.int32(page_size), rt.int32(chunk),
             rt.float32(scale * LOG2E)), shared_mem=shared_bytes(d, row_tiles))
    if n_splits > 1:
        combine((H, B * T), (CONFIG["COMBINE_WARPS"] * 32,), (o_part, lse_part, o, lse, rt.int32(d), rt.int32(n_splits)))
    return o, lse
