# BLIND: In TODO(2) the diagonal flag is 'kv_start + BLOCK_N - 1 > q_start + offset + 1' instead of '> q_start + offset', so a full key tile whose last key is exactly q_start + offset + 1 is taken as fully visible and the query tile's first row sees one key above the diagonal; this only happens when (Nk - Nq) mod 64 == 62, e.g. causal B=H=1, d=64 with Nq=64, Nk=126 (row 0 sees key 63) or Nq=66, Nk=64 (row 64 sees key 63).
"""03 · Causal FlashAttention. Read modules/03_flash_causal.md, then fill in each TODO.

The kernel of module 02 (given below; paste your own if you prefer it) plus a causal mask aligned
bottom-right: query i sees key j iff j <= i + (Nk - Nq), with offset = Nk - Nq. With Nq <= Nk this
is chunked prefill (the queries are the last Nq positions); with Nq > Nk the first Nq - Nk rows see
no key at all and write o = 0, lse = -inf.

Key tiles fall in three classes for a query tile [q_start, q_start + BLOCK_M):

    fully visible   every key <= q_start + offset          no per-element test
    diagonal        straddles the diagonal                 test j <= i + offset per element
    skipped         every key > last row + offset          never loaded: about half of all tiles
"""

KERNEL = r"""
// Tile sizes: CONFIG in the Python code below compiles them in (-DBLOCK_M=64 -DBLOCK_N=64 -DTM=4 -DCOLS=8).
//   BLOCK_M   query rows per block
//   BLOCK_N   keys per tile
//   TM        query rows per thread (one float4 of a column of Q)
//   COLS      threads that share a row: its keys and features are split 8 ways
// Shared memory per block is 4·(D·BLOCK_M + 2·D·BLOCK_N + BLOCK_N·BLOCK_M) bytes: 112 KB for D = 128
// at 64 × 64, so two blocks fit on one H100 SM (228 KB).
#if !defined(BLOCK_M) || !defined(BLOCK_N) || !defined(TM) || !defined(COLS)
#error "BLOCK_M, BLOCK_N, TM and COLS come from CONFIG in the Python launch code, passed to rt.compile as -D options"
#endif
constexpr int TN = BLOCK_N / COLS;           // keys per thread in a tile of S
constexpr int NTHREADS = (BLOCK_M / TM) * COLS;
static_assert(TM == 4, "a thread's TM rows are one float4 of a column of Q");
static_assert(32 % COLS == 0 && NTHREADS % 32 == 0, "a row group is COLS neighbouring lanes of one warp");

// Thread tx owns keys and features in float4 chunks interleaved across the 8 threads: element n of its
// slice is column (n / 4) · 32 + tx · 4 + n % 4. Eight neighbouring lanes then read 32 consecutive
// floats of shared memory: one conflict-free 128-byte access.
__device__ __forceinline__ int slice_col(int n, int tx) { return (n / 4) * (COLS * 4) + tx * 4 + n % 4; }

// p_s holds P transposed, one row of BLOCK_M floats per key, and p_col(j, ty) is where rows ty·4 .. ty·4+3
// of key j start in row j: float4 chunk ty, XORed with (j / 4) % 8 (a swizzle). Unswizzled (chunk ty),
// the store of P would be an 8-way bank conflict: a 16-byte store is served 8 lanes at a time, and those
// 8 lanes share ty and write keys slice_col(n, 0..7), whole rows (multiples of 32 banks) apart, so all 8
// hit banks ty·4 .. ty·4+3. For those keys (j / 4) % 8 = tx (COLS = 8), so with the XOR the 8 lanes write
// chunks ty ^ 0 .. ty ^ 7: 8 different groups of 4 banks. The P V loop reads one key j across the warp,
// and ty ^ ((j / 4) % 8) is still a different chunk for each ty: conflict-free both ways.
static_assert((BLOCK_M / TM) % 8 == 0, "p_col: ty ^ (0..7) must stay below BLOCK_M / TM chunks per row");
__device__ __forceinline__ int p_col(int j, int ty) { return (ty ^ ((j >> 2) & 7)) * TM; }

template <int D>
__global__ void __launch_bounds__(NTHREADS)
flash_causal(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
              float* __restrict__ o, float* __restrict__ lse,
              int H, int H_kv, int n_q, int n_k, float scale)
{
    constexpr int TD = D / COLS;             // output features per thread
    static_assert(D % (4 * COLS) == 0 && TN % 4 == 0, "slices are whole float4s");

    // Shared memory: Q and K are stored transposed (column c of the tile is contiguous) so that a
    // thread reads its 4 rows, or 4 of its keys, as one float4.
    extern __shared__ float4 smem4[];
    float* q_s = reinterpret_cast<float*>(smem4);  // [D][BLOCK_M]   Q tile, transposed
    float* k_s = q_s + D * BLOCK_M;                // [D][BLOCK_N]   K tile, transposed
    float* v_s = k_s + D * BLOCK_N;                // [BLOCK_N][D]   V tile
    float* p_s = v_s + BLOCK_N * D;                // [BLOCK_N][BLOCK_M]  P tile, transposed, swizzled (p_col)

    const int tid = threadIdx.x;
    const int tx = tid % COLS;               // which slice of the keys (and of the features)
    const int ty = tid / COLS;               // which group of TM rows
    // Query tiles near the end see the most keys: start those first, so the short ones fill the tail.
    const int q_start = (gridDim.x - 1 - blockIdx.x) * BLOCK_M;
    const int h = blockIdx.y, b = blockIdx.z;
    const int h_kv = h / (H / H_kv);         // GQA: H / H_kv query heads share one kv head
    const float* q_bh = q + (size_t)(b * H + h) * n_q * D;
    const float* k_bh = k + (size_t)(b * H_kv + h_kv) * n_k * D;
    const float* v_bh = v + (size_t)(b * H_kv + h_kv) * n_k * D;
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    // Scores in log2 units: exp2f is one instruction, expf is exp2f(x · log2 e) plus range handling.
    const float scale_log2 = scale * M_LOG2E_F;
    const int offset = n_k - n_q;            // bottom-right alignment: query i sees keys j <= i + offset

    // BEGIN SOLUTION TODO(1): set kv_end to one past the last key that any row of this query tile sees (0 or less when no row sees a key)
    const int q_last = min(q_start + BLOCK_M, n_q) - 1;     // the tile's last row sees the most keys
    const int kv_end = min(n_k, q_last + offset + 1);
    // STUB: const int kv_end = n_k;
    // END SOLUTION

    for (int idx = tid; idx < BLOCK_M * D / 4; idx += NTHREADS) {
        const int r = idx % BLOCK_M, c = (idx / BLOCK_M) * 4;   // neighbouring lanes: neighbouring rows
        float4 x = zero4;
        if (q_start + r < n_q) x = *reinterpret_cast<const float4*>(q_bh + (size_t)(q_start + r) * D + c);
        q_s[(c + 0) * BLOCK_M + r] = x.x;
        q_s[(c + 1) * BLOCK_M + r] = x.y;
        q_s[(c + 2) * BLOCK_M + r] = x.z;
        q_s[(c + 3) * BLOCK_M + r] = x.w;
    }

    // The online-softmax state of this thread's TM rows. m is the running max (log2 units), l the
    // running sum of exp2(s - m) over this thread's keys only (the 8 partial sums are added at the end:
    // all 8 threads use the same m, so their sums share one scale), acc the unnormalised output.
    float m[TM], l[TM], acc[TM][TD];
    #pragma unroll
    for (int r = 0; r < TM; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        #pragma unroll
        for (int e = 0; e < TD; ++e) acc[r][e] = 0.0f;
    }

    for (int kv_start = 0; kv_start < kv_end; kv_start += BLOCK_N) {   // tiles past kv_end are skipped
        for (int idx = tid; idx < BLOCK_N * D / 4; idx += NTHREADS) {
            const int j = idx % BLOCK_N, c = (idx / BLOCK_N) * 4;
            float4 x = zero4;
            if (kv_start + j < n_k) x = *reinterpret_cast<const float4*>(k_bh + (size_t)(kv_start + j) * D + c);
            k_s[(c + 0) * BLOCK_N + j] = x.x;
            k_s[(c + 1) * BLOCK_N + j] = x.y;
            k_s[(c + 2) * BLOCK_N + j] = x.z;
            k_s[(c + 3) * BLOCK_N + j] = x.w;
        }
        for (int idx = tid; idx < BLOCK_N * D / 4; idx += NTHREADS) {
            const int j = idx / (D / 4), c = (idx % (D / 4)) * 4;  // neighbouring lanes: one row of V
            // Zeros, not garbage, past n_k: P is 0 there, but 0 · NaN would still be NaN.
            float4 x = zero4;
            if (kv_start + j < n_k) x = *reinterpret_cast<const float4*>(v_bh + (size_t)(kv_start + j) * D + c);
            *reinterpret_cast<float4*>(&v_s[j * D + c]) = x;
        }
        __syncthreads();                     // the whole tile is in shared memory before anyone reads it

        float s[TM][TN];
        #pragma unroll
        for (int r = 0; r < TM; ++r)
            #pragma unroll
            for (int n = 0; n < TN; ++n) s[r][n] = 0.0f;
        #pragma unroll 4
        for (int c = 0; c < D; ++c) {
            // A rank-1 update of the micro-tile: TM + TN loads from shared memory for TM · TN FMAs.
            const float4 qc = *reinterpret_cast<const float4*>(&q_s[c * BLOCK_M + ty * TM]);
            const float qr[TM] = {qc.x, qc.y, qc.z, qc.w};
            float kn[TN];
            #pragma unroll
            for (int n = 0; n < TN; n += 4) {
                const float4 kc = *reinterpret_cast<const float4*>(&k_s[c * BLOCK_N + slice_col(n, tx)]);
                kn[n] = kc.x; kn[n + 1] = kc.y; kn[n + 2] = kc.z; kn[n + 3] = kc.w;
            }
            #pragma unroll
            for (int r = 0; r < TM; ++r)
                #pragma unroll
                for (int n = 0; n < TN; ++n) s[r][n] += qr[r] * kn[n];
        }
        #pragma unroll
        for (int r = 0; r < TM; ++r)
            #pragma unroll
            for (int n = 0; n < TN; ++n) s[r][n] *= scale_log2;
        // BEGIN SOLUTION TODO(2): set diagonal when some key of this tile lies past the last key that the tile's first row sees
        const bool diagonal = kv_start + BLOCK_N - 1 > q_start + offset + 1;
        // STUB: const bool diagonal = false;
        // END SOLUTION
        if (diagonal || kv_start + BLOCK_N > n_k) {   // fully visible tiles skip the per-element test
            #pragma unroll
            for (int n = 0; n < TN; ++n) {
                const int j = kv_start + slice_col(n, tx);
                #pragma unroll
                for (int r = 0; r < TM; ++r) {
                    const int i = q_start + ty * TM + r;
                    // BEGIN SOLUTION TODO(2): give keys past n_k and keys above the diagonal (j > i + offset) the score -INFINITY
                    if (j >= n_k || j > i + offset) s[r][n] = -INFINITY;
                    // STUB: if (j >= n_k) s[r][n] = -INFINITY;
                    // END SOLUTION
                }
            }
        }

        #pragma unroll
        for (int r = 0; r < TM; ++r) {
            float m_tile = s[r][0];
            #pragma unroll
            for (int n = 1; n < TN; ++n) m_tile = fmaxf(m_tile, s[r][n]);
            // The row's keys are spread over the COLS neighbouring lanes: butterfly over them.
            #pragma unroll
            for (int stride = COLS / 2; stride > 0; stride /= 2)
                m_tile = fmaxf(m_tile, __shfl_xor_sync(0xffffffffu, m_tile, stride));
            const float m_new = fmaxf(m[r], m_tile);
            // BEGIN SOLUTION TODO(3): set m_use to 0 while m_new is -INFINITY (the row has seen no visible key yet), and to m_new otherwise
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;   // exp2(-inf - -inf) would be NaN
            // STUB: const float m_use = m_new;
            // END SOLUTION
            const float alpha = exp2f(m[r] - m_use);   // < 1 when the max grew; exp2(-inf) = 0 at the start
            m[r] = m_new;
            l[r] *= alpha;
            #pragma unroll
            for (int e = 0; e < TD; ++e) acc[r][e] *= alpha;
            #pragma unroll
            for (int n = 0; n < TN; ++n) {
                s[r][n] = exp2f(s[r][n] - m_use);      // s now holds P; masked keys give exactly 0
                l[r] += s[r][n];
            }
        }
        // Publish P (transposed) so that each thread can read the probabilities of its rows for every key;
        // p_col swizzles the chunks so that neither this store nor the read below has bank conflicts.
        #pragma unroll
        for (int n = 0; n < TN; ++n) {
            const int j = slice_col(n, tx);
            *reinterpret_cast<float4*>(&p_s[j * BLOCK_M + p_col(j, ty)]) =
                make_float4(s[0][n], s[1][n], s[2][n], s[3][n]);
        }
        __syncthreads();                     // all of P is written before anyone reads it

        // Four keys per step: p_col(j, ty) is the same for keys j0 .. j0+3, so they share one column
        // (in a flat loop over j the compiler keeps 4 addresses live: flash_forward<64> spilled registers).
        #pragma unroll 1
        for (int j0 = 0; j0 < BLOCK_N; j0 += 4) {
            const int pc = p_col(j0, ty);
            #pragma unroll
            for (int j = j0; j < j0 + 4; ++j) {
                const float4 pj = *reinterpret_cast<const float4*>(&p_s[j * BLOCK_M + pc]);
                const float pr[TM] = {pj.x, pj.y, pj.z, pj.w};
                float vj[TD];
                #pragma unroll
                for (int e = 0; e < TD; e += 4) {
                    const float4 vc = *reinterpret_cast<const float4*>(&v_s[j * D + slice_col(e, tx)]);
                    vj[e] = vc.x; vj[e + 1] = vc.y; vj[e + 2] = vc.z; vj[e + 3] = vc.w;
                }
                #pragma unroll
                for (int r = 0; r < TM; ++r)
                    #pragma unroll
                    for (int e = 0; e < TD; ++e) acc[r][e] += pr[r] * vj[e];
            }
        }
        __syncthreads();                     // everyone is done with k_s, v_s, p_s before the next tile overwrites them
    }

    // BEGIN SOLUTION TODO(3): add up the row's 8 partial sums l, then write o = acc / l and lse; a row with no visible key (l = 0) writes o = 0 and lse = -INFINITY
    #pragma unroll
    for (int r = 0; r < TM; ++r) {
        float l_row = l[r];
        #pragma unroll
        for (int stride = COLS / 2; stride > 0; stride /= 2)
            l_row += __shfl_xor_sync(0xffffffffu, l_row, stride);
        const int i = q_start + ty * TM + r;
        if (i < n_q) {
            const float inv_l = l_row > 0.0f ? 1.0f / l_row : 0.0f;   // l = 0: the row saw no key
            float* o_i = o + ((size_t)(b * H + h) * n_q + i) * D;
            #pragma unroll
            for (int e = 0; e < TD; e += 4)
                *reinterpret_cast<float4*>(&o_i[slice_col(e, tx)]) =
                    make_float4(acc[r][e] * inv_l, acc[r][e + 1] * inv_l, acc[r][e + 2] * inv_l,
                                acc[r][e + 3] * inv_l);
            if (tx == 0)
                lse[(size_t)(b * H + h) * n_q + i] = l_row > 0.0f ? (m[r] + log2f(l_row)) * M_LN2_F : -INFINITY;
        }
    }
    // END SOLUTION
}
"""

# The tile sizes, stated once: each call compiles KERNEL with them as -D options. A variant is one
# assignment away: CONFIG = dict(CONFIG, BLOCK_N=32) (the course's tile sweeps set it this way).
CONFIG = dict(BLOCK_M=64, BLOCK_N=64, TM=4, COLS=8)
HEAD_DIMS = (32, 64, 96, 128)


def cdiv(a, b):
    return (a + b - 1) // b


def nthreads():
    """Threads per block, NTHREADS in the kernel: BLOCK_M / TM row groups of COLS threads each."""
    return CONFIG["BLOCK_M"] // CONFIG["TM"] * CONFIG["COLS"]


def shared_bytes(d):
    """q_s, k_s, v_s and p_s, in bytes, for the tile sizes in CONFIG."""
    m, n = CONFIG["BLOCK_M"], CONFIG["BLOCK_N"]
    return 4 * (d * m + d * n + n * d + n * m)


def flash_causal(rt, q, k, v, scale):
    """Causal attention, mask aligned bottom-right. q [B, H, Nq, d]; k, v [B, Hkv, Nk, d]; float32 on
    rt's device -> (o [B, H, Nq, d], lse [B, H, Nq])."""
    B, H, n_q, d = q.shape
    H_kv, n_k = k.shape[1], k.shape[2]
    if d not in HEAD_DIMS:
        raise ValueError(f"head_dim {d} is not supported (choose one of {HEAD_DIMS})")
    name = f"flash_causal<{d}>"                   # one compiled kernel per head_dim
    options = tuple(f"-D{key}={val}" for key, val in CONFIG.items())   # the tile sizes: the kernel's macros
    kernel = rt.compile(KERNEL, options=options,
                        name_expressions=[f"flash_causal<{x}>" for x in HEAD_DIMS]).get_function(name)
    BLOCK_M, NTHREADS = CONFIG["BLOCK_M"], nthreads()                  # as the kernel sees them
    o = rt.empty((B, H, n_q, d), "float32")
    lse = rt.empty((B, H, n_q), "float32")

    grid = (cdiv(n_q, BLOCK_M), H, B)
    block = (NTHREADS,)
    smem = shared_bytes(d)
    if smem > 48 * 1024:                          # past 48 KB a kernel must opt in
        kernel.max_dynamic_shared_size_bytes = smem
    kernel(grid, block, (q, k, v, o, lse, rt.int32(H), rt.int32(H_kv), rt.int32(n_q), rt.int32(n_k),
                         rt.float32(scale)), shared_mem=smem)
    return o, lse
