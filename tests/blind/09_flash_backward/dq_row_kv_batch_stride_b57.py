# BLIND: In TODO(5) the dQ atomics address row i as 'dq[((size_t)(b * H_kv + h) * n_q + i) * D + ...]' (the kv-head count as the batch stride, as for this block's K and V) instead of '(bh + i) * D' with bh = (b*H + h)*n_q: identical when B = 1 or H == Hkv, but with GQA and B > 1 (e.g. B=2, H=2, Hkv=1, Nq=Nk=16, d=64) batch 1's dQ is added into the wrong (batch, head) rows and its own rows keep 0.
"""09 · The FlashAttention backward pass. Read modules/09_flash_backward.md, then fill in each TODO.

Given the forward pass's inputs q, k, v, its outputs o and lse, and dO = dL/dO, compute dQ, dK, dV
without ever storing the N × N matrices, in two kernels:

    backward_preprocess   D_i = sum_c dO[i, c] · O[i, c], one warp per row; and dQ = 0
    flash_backward        one block per key tile (and kv head): for every query tile that sees it,
                          recompute P = exp(scale · Q K^T - lse), then
                              dV += P^T dO            dP = dO V^T
                              dS  = P ∘ (dP - D)      dK += dS^T Q      dQ += scale · dS K (atomicAdd)

dK and dV stay in registers for the whole block; dQ gets a share from every key tile, so blocks add
into it atomically. q, dQ [B, H, Nq, d]; k, v, dK, dV [B, Hkv, Nk, d]; lse [B, H, Nq]; float32.
"""

KERNEL = r"""
// Tile sizes: CONFIG in the Python code below compiles them in (-DBLOCK_M=64 -DBLOCK_N=64 -DNTHREADS=256).
//   BLOCK_N   keys per block: the rows of dK and dV this block owns
//   BLOCK_M   query rows per step of the block's loop
// The block works in two halves of NTHREADS / 2 threads, and each product of a tile goes to one half:
//   half 0   S = Q K^T, then P          dV += P^T dO
//   half 1   dP = dO V^T, then dS       dK += dS^T Q
//   both     dQ += scale · dS K
// One product per thread, not two, leaves registers for a larger micro-tile of it (4 × 8 entries
// of S, 4 keys × D / 8 features of dV): each value read from shared memory then feeds 4 to 8 FMAs.
// Shared memory rows are padded to LD = D + 4 floats: they stay float4-aligned, and row j starts 4j
// banks further on, so 8 threads that read one float4 each from 8 neighbouring rows hit all 32 banks once.
#if !defined(BLOCK_M) || !defined(BLOCK_N) || !defined(NTHREADS)
#error "BLOCK_M, BLOCK_N and NTHREADS come from CONFIG in the Python launch code, passed to rt.compile as -D options"
#endif
constexpr int HALF = NTHREADS / 2;                     // threads per half of the block
constexpr int ROW_THREADS = 8;                         // threads per query row (S, dP, dS and dQ)
constexpr int KEY_THREADS = 8;                         // threads per key row (dK and dV)
constexpr int ROW_GROUPS = HALF / ROW_THREADS;         // a thread's query rows: qi, qi + ROW_GROUPS, ...
constexpr int ROWS_PER_THREAD = BLOCK_M / ROW_GROUPS;
constexpr int KEYS_PER_THREAD = BLOCK_N / ROW_THREADS; // its keys in S and dP: qx, qx + ROW_THREADS, ...
constexpr int KEYS_K = BLOCK_N * KEY_THREADS / HALF;   // its keys in dK and dV: kj · KEYS_K + n
constexpr int LDP = BLOCK_N + 4;                       // a row of P or dS in shared memory
static_assert(HALF % 32 == 0, "each half is whole warps, so a branch on the half never splits a warp");
static_assert(BLOCK_M % ROW_GROUPS == 0 && ROWS_PER_THREAD % 2 == 0 && BLOCK_N % ROW_THREADS == 0,
              "each half covers the whole tile, and its rows split evenly between the halves for dQ");
static_assert(KEYS_K % 4 == 0 && KEY_THREADS == ROW_THREADS, "a thread's keys of dK and dV are whole float4s");

// A thread's D features come in float4 slices interleaved across the 8 threads of a row (as in module 03):
// feature e of its slice is column (e / 4) · 32 + x · 4 + e % 4, so 8 neighbouring threads read 32
// consecutive floats, one conflict-free 128-byte access.
__device__ __forceinline__ int slice_col(int e, int x) { return (e / 4) * (ROW_THREADS * 4) + x * 4 + e % 4; }

__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// x[r][n] = sum over c of a_s[row qi + ROW_GROUPS · r][c] · b_s[key qx + ROW_THREADS · n][c]: S = Q K^T with
// (q_s, k_s), dP = dO V^T with (do_s, v_s). Both are read along c, 4 features per float4.
template <int D>
__device__ __forceinline__ void tile_product(const float* a_s, const float* b_s, int qi, int qx,
                                             float (&x)[ROWS_PER_THREAD][KEYS_PER_THREAD])
{
    constexpr int LD = D + 4;
    #pragma unroll
    for (int r = 0; r < ROWS_PER_THREAD; ++r)
        #pragma unroll
        for (int n = 0; n < KEYS_PER_THREAD; ++n) x[r][n] = 0.0f;
    #pragma unroll 4
    for (int c = 0; c < D; c += 4) {
        float4 a[ROWS_PER_THREAD];
        #pragma unroll
        for (int r = 0; r < ROWS_PER_THREAD; ++r) a[r] = load4(&a_s[(qi + r * ROW_GROUPS) * LD + c]);
        #pragma unroll
        for (int n = 0; n < KEYS_PER_THREAD; ++n) {
            const float4 b = load4(&b_s[(qx + n * ROW_THREADS) * LD + c]);
            #pragma unroll
            for (int r = 0; r < ROWS_PER_THREAD; ++r) x[r][n] += dot4(a[r], b);
        }
    }
}

// D_i = rowsum(dO ∘ O): one warp per row (b, h, i) of the flattened [B·H·Nq, d] arrays.
extern "C" __global__ void backward_preprocess(const float* __restrict__ o, const float* __restrict__ dout,
                                               float* __restrict__ delta, float* __restrict__ dq,
                                               int rows, int d)
{
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;                      // a whole warp leaves together
    const float* o_i = o + (size_t)row * d;
    const float* do_i = dout + (size_t)row * d;
    float* dq_i = dq + (size_t)row * d;
    // BEGIN SOLUTION TODO(1): compute delta[row] = sum over c of dO[row, c] · O[row, c] (lanes take every 32nd c, then a butterfly), and set the row of dq to 0 for the atomics to add into
    float acc = 0.0f;
    for (int c = lane; c < d; c += 32) {
        acc += do_i[c] * o_i[c];
        dq_i[c] = 0.0f;                           // flash_backward adds every key tile's share to it
    }
    for (int stride = 16; stride > 0; stride /= 2)
        acc += __shfl_xor_sync(0xffffffffu, acc, stride);
    if (lane == 0) delta[row] = acc;
    // END SOLUTION
}

template <int D>
__global__ void __launch_bounds__(NTHREADS, 1)
flash_backward(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
               const float* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
               float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dv,
               int H, int H_kv, int n_q, int n_k, float scale, int causal)
{
    constexpr int LD = D + 4;
    constexpr int FEATS_Q = D / ROW_THREADS;      // dQ features per thread
    constexpr int FEATS_K = D / KEY_THREADS;      // dK or dV features per thread
    static_assert(D % (4 * ROW_THREADS) == 0, "feature slices are whole float4s");

    extern __shared__ float4 smem4[];
    float* k_s = reinterpret_cast<float*>(smem4); // [BLOCK_N][LD]   this block's keys
    float* v_s = k_s + BLOCK_N * LD;              // [BLOCK_N][LD]   and values
    float* q_s = v_s + BLOCK_N * LD;              // [BLOCK_M][LD]   the current query tile
    float* do_s = q_s + BLOCK_M * LD;             // [BLOCK_M][LD]   its rows of dO
    float* p_s = do_s + BLOCK_M * LD;             // [BLOCK_M][LDP]  P of the tile
    float* ds_s = p_s + BLOCK_M * LDP;            // [BLOCK_M][LDP]  dS of the tile
    float* lse_s = ds_s + BLOCK_M * LDP;          // [BLOCK_M]       lse of the tile's rows, log2 units
    float* delta_s = lse_s + BLOCK_M;             // [BLOCK_M]       D of the tile's rows

    const int tid = threadIdx.x;
    const int k_start = blockIdx.x * BLOCK_N;
    const int h_kv = blockIdx.y, b = blockIdx.z;
    const int group = H / H_kv;                   // GQA: query heads h_kv·group .. h_kv·group + group - 1
    const float* k_b = k + ((size_t)(b * H_kv + h_kv) * n_k + k_start) * D;
    const float* v_b = v + ((size_t)(b * H_kv + h_kv) * n_k + k_start) * D;
    const float scale_log2 = scale * M_LOG2E_F;   // P = exp2(s · scale · log2 e - lse · log2 e)
    const int offset = n_k - n_q;                 // causal, bottom-right: query i sees keys j <= i + offset
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

    for (int idx = tid; idx < BLOCK_N * D / 4; idx += NTHREADS) {   // zeros past n_k: never NaN · 0
        const int j = idx / (D / 4), c = (idx % (D / 4)) * 4;        // neighbouring threads: one row
        const bool in = k_start + j < n_k;
        *reinterpret_cast<float4*>(&k_s[j * LD + c]) = in ? load4(&k_b[(size_t)j * D + c]) : zero4;
        *reinterpret_cast<float4*>(&v_s[j * LD + c]) = in ? load4(&v_b[(size_t)j * D + c]) : zero4;
    }

    const int half = tid / HALF;                  // 0: S, P and dV;   1: dP, dS and dK
    const int t = tid % HALF;                     // the thread's place in its half
    // Its entries of S (or dP, dS): query rows qi + ROW_GROUPS · r, keys qx + ROW_THREADS · n.
    const int qi = t / ROW_THREADS, qx = t % ROW_THREADS;
    // Its rows of dV (half 0) or dK (half 1): keys kj · KEYS_K + n, features slice_col(e, kx).
    const int kj = t / KEY_THREADS, kx = t % KEY_THREADS;
    float acc[KEYS_K][FEATS_K];                   // dV (half 0) or dK / scale (half 1), summed over all queries
    #pragma unroll
    for (int n = 0; n < KEYS_K; ++n)
        #pragma unroll
        for (int e = 0; e < FEATS_K; ++e) acc[n][e] = 0.0f;

    // Under causal, query rows before k_start - offset see none of this block's keys.
    const int m_begin = causal ? max(0, (k_start - offset) / BLOCK_M * BLOCK_M) : 0;
    for (int h = h_kv * group; h < (h_kv + 1) * group; ++h) {
        const size_t bh = (size_t)(b * H + h) * n_q;
        for (int m_start = m_begin; m_start < n_q; m_start += BLOCK_M) {
            __syncthreads();                      // the previous tile's q_s, do_s, p_s, ds_s are read
            for (int idx = tid; idx < BLOCK_M * D / 4; idx += NTHREADS) {
                const int r = idx / (D / 4), c = (idx % (D / 4)) * 4;
                const bool in = m_start + r < n_q;
                *reinterpret_cast<float4*>(&q_s[r * LD + c]) = in ? load4(&q[(bh + m_start + r) * D + c]) : zero4;
                *reinterpret_cast<float4*>(&do_s[r * LD + c]) = in ? load4(&dout[(bh + m_start + r) * D + c]) : zero4;
            }
            if (tid < BLOCK_M) {
                const bool in = m_start + tid < n_q;
                lse_s[tid] = in ? lse[bh + m_start + tid] * M_LOG2E_F : INFINITY;   // +inf: P = 0
                delta_s[tid] = in ? delta[bh + m_start + tid] : 0.0f;
            }
            __syncthreads();

            // Half 0: S = Q K^T, then P -> p_s. Half 1: dP = dO V^T, kept in registers until P is there.
            float dp[ROWS_PER_THREAD][KEYS_PER_THREAD];
            if (half == 0) {
                float s[ROWS_PER_THREAD][KEYS_PER_THREAD];
                tile_product<D>(q_s, k_s, qi, qx, s);
                #pragma unroll
                for (int r = 0; r < ROWS_PER_THREAD; ++r) {
                    const int qr = qi + r * ROW_GROUPS, i = m_start + qr;   // row of the tile, row of Q
                    #pragma unroll
                    for (int n = 0; n < KEYS_PER_THREAD; ++n) {
                        const int j = qx + n * ROW_THREADS;
                        const bool visible = k_start + j < n_k && (!causal || k_start + j <= i + offset);
                        // BEGIN SOLUTION TODO(2): recompute p = P[i, j] from the forward pass's lse (lse_s is in log2 units; +inf for rows past n_q, -inf for rows that saw no key), 0 where the key is not visible
                        const float p = visible && lse_s[qr] != -INFINITY ? exp2f(s[r][n] * scale_log2 - lse_s[qr]) : 0.0f;
                        // STUB: const float p = 0.0f;
                        // END SOLUTION
                        p_s[qr * LDP + j] = p;
                    }
                }
            } else {
                tile_product<D>(do_s, v_s, qi, qx, dp);
            }
            __syncthreads();                      // P is in p_s
            if (half == 1) {
                #pragma unroll
                for (int r = 0; r < ROWS_PER_THREAD; ++r) {
                    const int qr = qi + r * ROW_GROUPS;
                    #pragma unroll
                    for (int n = 0; n < KEYS_PER_THREAD; ++n) {
                        const int j = qx + n * ROW_THREADS;
                        const float p = p_s[qr * LDP + j];
                        // BEGIN SOLUTION TODO(3): dS[i, j] = P[i, j] · (dP[i, j] - D_i)
                        const float ds = p * (dp[r][n] - delta_s[qr]);
                        // STUB: const float ds = 0.0f;
                        // END SOLUTION
                        ds_s[qr * LDP + j] = ds;
                    }
                }
            }
            __syncthreads();                      // dS is in ds_s

            // BEGIN SOLUTION TODO(4): add this tile's P^T dO (half 0) or dS^T Q (half 1) to acc: for every row r of the tile, w = row r of p_s (or ds_s) at keys kj · KEYS_K + n, x = row r of do_s (or q_s) at features slice_col(e, kx); acc[n][e] += w[n] · x[e]
            const float* w_s = half == 0 ? p_s : ds_s;
            const float* x_s = half == 0 ? do_s : q_s;
            #pragma unroll 2
            for (int r = 0; r < BLOCK_M; ++r) {
                float w[KEYS_K], x[FEATS_K];
                #pragma unroll
                for (int n = 0; n < KEYS_K; n += 4) {
                    const float4 w4 = load4(&w_s[r * LDP + kj * KEYS_K + n]);
                    w[n] = w4.x; w[n + 1] = w4.y; w[n + 2] = w4.z; w[n + 3] = w4.w;
                }
                #pragma unroll
                for (int e = 0; e < FEATS_K; e += 4) {
                    const float4 x4 = load4(&x_s[r * LD + slice_col(e, kx)]);
                    x[e] = x4.x; x[e + 1] = x4.y; x[e + 2] = x4.z; x[e + 3] = x4.w;
                }
                #pragma unroll
                for (int n = 0; n < KEYS_K; ++n)
                    #pragma unroll
                    for (int e = 0; e < FEATS_K; ++e) acc[n][e] += w[n] * x[e];
            }
            // END SOLUTION

            // BEGIN SOLUTION TODO(5): add scale · (dS K)[i, c] of this tile to dq for the thread's rows i (the halves take every other of the rows qi + ROW_GROUPS · r) and features slice_col(e, qx), with atomicAdd (every key tile's block adds to the same rows)
            float acc_q[ROWS_PER_THREAD / 2][FEATS_Q];
            #pragma unroll
            for (int r = 0; r < ROWS_PER_THREAD / 2; ++r)
                #pragma unroll
                for (int e = 0; e < FEATS_Q; ++e) acc_q[r][e] = 0.0f;
            for (int j = 0; j < BLOCK_N; j += 4) {   // 4 keys at a time: one float4 of each row of dS
                float4 ds[ROWS_PER_THREAD / 2];
                #pragma unroll
                for (int r = 0; r < ROWS_PER_THREAD / 2; ++r)
                    ds[r] = load4(&ds_s[(qi + (2 * r + half) * ROW_GROUPS) * LDP + j]);
                #pragma unroll
                for (int e = 0; e < FEATS_Q; e += 4) {
                    const float4 k0 = load4(&k_s[(j + 0) * LD + slice_col(e, qx)]);
                    const float4 k1 = load4(&k_s[(j + 1) * LD + slice_col(e, qx)]);
                    const float4 k2 = load4(&k_s[(j + 2) * LD + slice_col(e, qx)]);
                    const float4 k3 = load4(&k_s[(j + 3) * LD + slice_col(e, qx)]);
                    #pragma unroll
                    for (int r = 0; r < ROWS_PER_THREAD / 2; ++r) {
                        acc_q[r][e + 0] += ds[r].x * k0.x + ds[r].y * k1.x + ds[r].z * k2.x + ds[r].w * k3.x;
                        acc_q[r][e + 1] += ds[r].x * k0.y + ds[r].y * k1.y + ds[r].z * k2.y + ds[r].w * k3.y;
                        acc_q[r][e + 2] += ds[r].x * k0.z + ds[r].y * k1.z + ds[r].z * k2.z + ds[r].w * k3.z;
                        acc_q[r][e + 3] += ds[r].x * k0.w + ds[r].y * k1.w + ds[r].z * k2.w + ds[r].w * k3.w;
                    }
                }
            }
            #pragma unroll
            for (int r = 0; r < ROWS_PER_THREAD / 2; ++r) {
                const int i = m_start + qi + (2 * r + half) * ROW_GROUPS;
                if (i < n_q) {
                    #pragma unroll
                    for (int e = 0; e < FEATS_Q; ++e)
                        atomicAdd(&dq[((size_t)(b * H_kv + h) * n_q + i) * D + slice_col(e, qx)], scale * acc_q[r][e]);
                }
            }
            // END SOLUTION
        }
    }

    // BEGIN SOLUTION TODO(4): store this thread's rows of dV (half 0) or dK (half 1; dK = scale · dS^T Q: the scale of S = scale · Q K^T, applied once here)
    const float out_scale = half == 0 ? 1.0f : scale;
    float* out = half == 0 ? dv : dk;
    #pragma unroll
    for (int n = 0; n < KEYS_K; ++n) {
        const int j = k_start + kj * KEYS_K + n;
        if (j < n_k) {
            float* row = out + ((size_t)(b * H_kv + h_kv) * n_k + j) * D;
            #pragma unroll
            for (int e = 0; e < FEATS_K; e += 4)
                *reinterpret_cast<float4*>(&row[slice_col(e, kx)]) =
                    make_float4(out_scale * acc[n][e], out_scale * acc[n][e + 1], out_scale * acc[n][e + 2],
                                out_scale * acc[n][e + 3]);
        }
    }
    // END SOLUTION
}
"""

# The tile sizes, stated once: each call compiles KERNEL with them as -D options.
CONFIG = dict(BLOCK_M=64, BLOCK_N=64, NTHREADS=256)
HEAD_DIMS = (32, 64, 96, 128)
PREPROCESS_WARPS = 8                              # rows per block of backward_preprocess


def cdiv(a, b):
    return (a + b - 1) // b


def shared_bytes(d):
    """k_s, v_s, q_s, do_s (rows of d + 4 floats), p_s and ds_s (rows of BLOCK_N + 4), lse_s, delta_s."""
    m, n = CONFIG["BLOCK_M"], CONFIG["BLOCK_N"]
    return 4 * (2 * n * (d + 4) + 2 * m * (d + 4) + 2 * m * (n + 4) + 2 * m)


def flash_backward(rt, q, k, v, o, lse, do, scale, causal=False):
    """Gradients of attention. q, o, do [B, H, Nq, d]; k, v [B, Hkv, Nk, d]; lse [B, H, Nq] from the
    forward pass; float32 on rt's device -> (dq [B, H, Nq, d], dk, dv [B, Hkv, Nk, d])."""
    B, H, n_q, d = q.shape
    H_kv, n_k = k.shape[1], k.shape[2]
    if d not in HEAD_DIMS:
        raise ValueError(f"head_dim {d} is not supported (choose one of {HEAD_DIMS})")
    options = tuple(f"-D{key}={val}" for key, val in CONFIG.items())   # the tile sizes: the kernel's macros
    module = rt.compile(KERNEL, options=options, name_expressions=[f"flash_backward<{x}>" for x in HEAD_DIMS])
    dq = rt.empty((B, H, n_q, d), "float32")
    dk = rt.empty((B, H_kv, n_k, d), "float32")
    dv = rt.empty((B, H_kv, n_k, d), "float32")
    delta = rt.empty((B, H, n_q), "float32")

    rows = B * H * n_q
    if rows:
        module.get_function("backward_preprocess")(
            (cdiv(rows, PREPROCESS_WARPS),), (32 * PREPROCESS_WARPS,), (o, do, delta, dq, rt.int32(rows), rt.int32(d)))
    if n_k == 0:
        return dq, dk, dv
    kernel = module.get_function(f"flash_backward<{d}>")
    smem = shared_bytes(d)
    if smem > 48 * 1024:                          # past 48 KB a kernel must opt in
        kernel.max_dynamic_shared_size_bytes = smem
    grid = (cdiv(n_k, CONFIG["BLOCK_N"]), H_kv, B)   # one block per key tile and kv head
    kernel(grid, (CONFIG["NTHREADS"],), (q, k, v, do, lse, delta, dq, dk, dv, rt.int32(H), rt.int32(H_kv),
                                         rt.int32(n_q), rt.int32(n_k), rt.float32(scale), rt.int32(1 if causal else 0)),
           shared_mem=smem)
    return dq, dk, dv
