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
// Tile sizes: CONFIG in the Python code below compiles them in (-DBLOCK_M=16 -DBLOCK_N=64 -DNTHREADS=256).
//   BLOCK_N   keys per block: the rows of dK and dV this block owns
//   BLOCK_M   query rows per step of the block's loop
// Shared memory rows are padded by one float (LD = D + 1): threads that read column c of
// neighbouring rows then hit neighbouring banks instead of one bank.
#if !defined(BLOCK_M) || !defined(BLOCK_N) || !defined(NTHREADS)
#error "BLOCK_M, BLOCK_N and NTHREADS come from CONFIG in the Python launch code, passed to rt.compile as -D options"
#endif
constexpr int ROW_THREADS = NTHREADS / BLOCK_M;   // threads per query row (S, dP, dS and dQ)
constexpr int KEY_THREADS = NTHREADS / BLOCK_N;   // threads per key row (dK and dV)
constexpr int KEYS_PER_THREAD = BLOCK_N / ROW_THREADS;
constexpr int LDP = BLOCK_N + 1;                  // a row of P or dS in shared memory
static_assert(NTHREADS % BLOCK_M == 0 && NTHREADS % BLOCK_N == 0 && BLOCK_N % ROW_THREADS == 0,
              "the block's threads split evenly over query rows and over key rows");

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
    // TODO(1): compute delta[row] = sum over c of dO[row, c] · O[row, c] (lanes take every 32nd c, then a butterfly), and set the row of dq to 0 for the atomics to add into
}

template <int D>
__global__ void __launch_bounds__(NTHREADS)
flash_backward(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
               const float* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
               float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dv,
               int H, int H_kv, int n_q, int n_k, float scale, int causal)
{
    constexpr int LD = D + 1;
    constexpr int FEATS_Q = D / ROW_THREADS;      // dQ features per thread
    constexpr int FEATS_K = D / KEY_THREADS;      // dK and dV features per thread
    static_assert(D % ROW_THREADS == 0 && D % KEY_THREADS == 0, "features split evenly over threads");

    extern __shared__ float smem[];
    float* k_s = smem;                            // [BLOCK_N][LD]   this block's keys
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

    for (int idx = tid; idx < BLOCK_N * D; idx += NTHREADS) {   // zeros past n_k: never NaN · 0
        const int j = idx / D, c = idx % D;
        const bool in = k_start + j < n_k;
        k_s[j * LD + c] = in ? k_b[(size_t)j * D + c] : 0.0f;
        v_s[j * LD + c] = in ? v_b[(size_t)j * D + c] : 0.0f;
    }

    // This thread's rows of dK and dV: key row kj, features kx, kx + KEY_THREADS, ...
    const int kj = tid / KEY_THREADS, kx = tid % KEY_THREADS;
    float acc_dk[FEATS_K], acc_dv[FEATS_K];
    #pragma unroll
    for (int e = 0; e < FEATS_K; ++e) acc_dk[e] = acc_dv[e] = 0.0f;

    // Its entries of S, dP and dS: query row qi, keys qx, qx + ROW_THREADS, ...; and dQ features qx + ...
    const int qi = tid / ROW_THREADS, qx = tid % ROW_THREADS;

    // Under causal, query rows before k_start - offset see none of this block's keys.
    const int m_begin = causal ? max(0, (k_start - offset) / BLOCK_M * BLOCK_M) : 0;
    for (int h = h_kv * group; h < (h_kv + 1) * group; ++h) {
        const size_t bh = (size_t)(b * H + h) * n_q;
        for (int m_start = m_begin; m_start < n_q; m_start += BLOCK_M) {
            __syncthreads();                      // the previous tile's q_s, do_s, p_s, ds_s are read
            for (int idx = tid; idx < BLOCK_M * D; idx += NTHREADS) {
                const int r = idx / D, c = idx % D;
                const bool in = m_start + r < n_q;
                q_s[r * LD + c] = in ? q[(bh + m_start + r) * D + c] : 0.0f;
                do_s[r * LD + c] = in ? dout[(bh + m_start + r) * D + c] : 0.0f;
            }
            if (tid < BLOCK_M) {
                const bool in = m_start + tid < n_q;
                lse_s[tid] = in ? lse[bh + m_start + tid] * M_LOG2E_F : INFINITY;   // +inf: P = 0
                delta_s[tid] = in ? delta[bh + m_start + tid] : 0.0f;
            }
            __syncthreads();

            // S = Q K^T and dP = dO V^T for this thread's entries of the tile.
            float s[KEYS_PER_THREAD], dp[KEYS_PER_THREAD];
            #pragma unroll
            for (int n = 0; n < KEYS_PER_THREAD; ++n) s[n] = dp[n] = 0.0f;
            for (int c = 0; c < D; ++c) {
                const float qc = q_s[qi * LD + c], doc = do_s[qi * LD + c];
                #pragma unroll
                for (int n = 0; n < KEYS_PER_THREAD; ++n) {
                    const int j = qx + n * ROW_THREADS;
                    s[n] += qc * k_s[j * LD + c];
                    dp[n] += doc * v_s[j * LD + c];
                }
            }
            const int i = m_start + qi;
            #pragma unroll
            for (int n = 0; n < KEYS_PER_THREAD; ++n) {
                const int j = qx + n * ROW_THREADS;
                const bool visible = k_start + j < n_k && (!causal || k_start + j <= i + offset);
                // TODO(2): recompute p = P[i, j] from the forward pass's lse (lse_s is in log2 units; +inf for rows past n_q, -inf for rows that saw no key), 0 where the key is not visible
                const float p = 0.0f;
                // TODO(3): dS[i, j] = P[i, j] · (dP[i, j] - D_i)
                const float ds = 0.0f;
                p_s[qi * LDP + j] = p;
                ds_s[qi * LDP + j] = ds;
            }
            __syncthreads();

            // TODO(4): add this tile's P^T dO to acc_dv and dS^T Q to acc_dk for this thread's key row kj and features kx + e · KEY_THREADS

            // TODO(5): add scale · (dS K)[i, c] of this tile to dq for row i and features qx + e · ROW_THREADS, with atomicAdd (every key tile's block adds to the same rows)
        }
    }

    // TODO(4): store this thread's rows of dV and dK (dK = scale · dS^T Q: the scale of S = scale · Q K^T, applied once here)
}
"""

# The tile sizes, stated once: each call compiles KERNEL with them as -D options.
CONFIG = dict(BLOCK_M=16, BLOCK_N=64, NTHREADS=256)
HEAD_DIMS = (32, 64, 96, 128)
PREPROCESS_WARPS = 8                              # rows per block of backward_preprocess


def cdiv(a, b):
    return (a + b - 1) // b


def shared_bytes(d):
    """k_s, v_s, q_s, do_s (rows of d + 1 floats), p_s and ds_s (rows of BLOCK_N + 1), lse_s, delta_s."""
    m, n = CONFIG["BLOCK_M"], CONFIG["BLOCK_N"]
    return 4 * (2 * n * (d + 1) + 2 * m * (d + 1) + 2 * m * (n + 1) + 2 * m)


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
