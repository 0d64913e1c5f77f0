# BLIND: In TODO(2) each step's max is seeded from head 0 of the group, 'float m_new = m[0];' instead of 'm[g]', so head g's running max becomes max(head 0's, its own): identical without GQA and a valid shift otherwise, but when head 0's scores exceed head g's by more than ~100 (scaled, natural units) every p of head g underflows to 0 and its o is NaN, e.g. H=2, Hkv=1, d=64, page_size=16, one sequence of 16 keys with scale*q0.k = +60 and q1 = -q0.
"""05 · Paged decode. Read modules/05_paged_decode.md, then fill in each TODO.

Module 04's split-KV decode over a paged cache, as serving systems (vLLM, FlashInfer) store it:
    q [B, H, d]; k_pages, v_pages [num_pages, page_size, Hkv, d]; block_table [B, max_pages] int32;
    logical position j of sequence b lives in physical page block_table[b, j / page_size],
    at slot j % page_size. Pages are scattered and shuffled; the last page of a sequence is partial.
The partial and combine kernels are 04's; only where a key row lives changes (physical_pos), and
the page lookup is done one step ahead so that it never delays the loads of K and V.
A context of length 0 outputs o = 0 and lse = -inf.

The tuning constants are stated once, in CONFIG (below the kernels), and compiled in as -D options.
"""
import functools

KERNEL = r"""
// Tuning constants: CONFIG in the Python code below compiles them in (-DWARPS=4 -DKEYS_PER_STEP=8 ...).
//   WARPS           warps per partial block; each warp walks its own keys of the split
//   KEYS_PER_STEP   keys a warp loads before it uses them: more bytes in flight per warp
//   MIN_BLOCKS      blocks per SM the compiler must leave registers for
#if !defined(WARPS) || !defined(KEYS_PER_STEP) || !defined(MIN_BLOCKS)
#error "WARPS, KEYS_PER_STEP and MIN_BLOCKS come from CONFIG in the Python launch code, passed to rt.compile as -D options"
#endif
constexpr int MAX_D = 128;  // head dim: lane t owns features 4t .. 4t+3 (one float4); a limit, not a knob
#ifndef GROUP
#define GROUP 1            // query heads per kv head, H / H_kv: set by the launch code (-DGROUP=4),
#endif                     // so that the per-head arrays below have a fixed size and stay in registers

__device__ float warp_sum(float x)
{
    for (int offset = 16; offset > 0; offset /= 2)
        x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;                                          // every lane holds the sum
}

__device__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// Where logical position j of sequence b lives in the paged cache [num_pages, page_size, Hkv, d]:
// the physical position page · page_size + slot, where the block table turns the logical page
// j / page_size into a physical one.
__device__ int physical_pos(const int* __restrict__ block_table, int b, int j, int max_pages, int page_size)
{
    // BEGIN SOLUTION TODO(1): look up page = block_table[b][j / page_size] (each row of the table has max_pages entries), take slot = j % page_size, and return page · page_size + slot
    int page = block_table[(size_t)b * max_pages + j / page_size];
    int slot = j % page_size;
    return page * page_size + slot;
    // STUB: return 0;
    // END SOLUTION
}

// Where the row of kv head kv at physical position pos starts: a page is [page_size, Hkv, d].
__device__ size_t kv_offset(int pos, int kv, int H_kv, int d)
{
    return ((size_t)pos * H_kv + kv) * d;
}

extern "C" __global__ void __launch_bounds__(WARPS * 32, MIN_BLOCKS)
paged_partial(const float* __restrict__ q, const float* __restrict__ k_pages,
              const float* __restrict__ v_pages, const int* __restrict__ block_table,
              const int* __restrict__ context_lens, float* __restrict__ o_part,
              float* __restrict__ lse_part, int H, int H_kv, int max_pages,
              int page_size, int d, int chunk, float scale_log2)
{
    int split = blockIdx.x, kv = blockIdx.y, b = blockIdx.z, n_splits = gridDim.x;
    int start = split * chunk;
    int end = min(start + chunk, context_lens[b]);
    if (start >= end) return;                          // past the context: the combine skips it
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    bool active = 4 * lane < d;                        // lanes past d/4 hold zeros

    // Per query head of the group: q pre-multiplied by scale·log2(e), so that exp2f(s - m) is
    // e^(score - max); and the online-softmax state (m, l) with the unnormalised output acc.
    // The block serves query heads kv·GROUP .. kv·GROUP + GROUP-1, which all read kv head kv.
    float4 qv[GROUP], acc[GROUP];
    float m[GROUP], l[GROUP];
    #pragma unroll
    for (int g = 0; g < GROUP; ++g) {
        qv[g] = acc[g] = make_float4(0.f, 0.f, 0.f, 0.f);
        m[g] = -INFINITY;
        l[g] = 0.f;
        if (active) {
            float4 x = reinterpret_cast<const float4*>(q + ((size_t)b * H + kv * GROUP + g) * d)[lane];
            qv[g] = make_float4(x.x * scale_log2, x.y * scale_log2, x.z * scale_log2, x.w * scale_log2);
        }
    }

    // BEGIN SOLUTION TODO(2): stream the split's keys as in 04, with the page lookup one step ahead: lane u looks up key u of the warp's next step, and __shfl_sync hands each key's position to every lane
    // The page lookup is a load that the row's load must wait for. So lane u (< KEYS_PER_STEP) looks
    // up key u of the warp's *next* step while this step's rows are in flight, and shares it by shuffle.
    const int stride = WARPS * KEYS_PER_STEP, mine = lane % KEYS_PER_STEP;
    int j0 = start + warp * KEYS_PER_STEP;
    int pos_next = j0 + mine < end ? physical_pos(block_table, b, j0 + mine, max_pages, page_size) : 0;
    for (; j0 < end; j0 += stride) {
        // Issue all the loads first: KEYS_PER_STEP rows of K and V in flight at once. Each row is read
        // here once, for all GROUP query heads.
        int pos_here = pos_next;
        float4 kr[KEYS_PER_STEP], vr[KEYS_PER_STEP];
        #pragma unroll
        for (int u = 0; u < KEYS_PER_STEP; ++u) {
            int pos = __shfl_sync(0xffffffffu, pos_here, u);    // key j0 + u, looked up by lane u
            kr[u] = vr[u] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (j0 + u < end && active) {
                size_t off = kv_offset(pos, kv, H_kv, d);
                kr[u] = reinterpret_cast<const float4*>(k_pages + off)[lane];
                vr[u] = reinterpret_cast<const float4*>(v_pages + off)[lane];
            }
        }
        int j_next = j0 + stride + mine;              // never past the context: -1 entries stay unread
        pos_next = j_next < end ? physical_pos(block_table, b, j_next, max_pages, page_size) : 0;
        #pragma unroll
        for (int g = 0; g < GROUP; ++g) {
            // The step is a tile of KEYS_PER_STEP keys: scores (log2 units), the tile max, one rescale.
            float s[KEYS_PER_STEP];
            float m_new = m[0];
            #pragma unroll
            for (int u = 0; u < KEYS_PER_STEP; ++u) {
                s[u] = j0 + u < end ? warp_sum(dot4(qv[g], kr[u])) : -INFINITY;
                m_new = fmaxf(m_new, s[u]);
            }
            float alpha = exp2f(m[g] - m_new);         // 0 on the first step, where m = -inf
            l[g] *= alpha;
            acc[g].x *= alpha; acc[g].y *= alpha; acc[g].z *= alpha; acc[g].w *= alpha;
            #pragma unroll
            for (int u = 0; u < KEYS_PER_STEP; ++u) {
                float p = exp2f(s[u] - m_new);         // 0 for keys past the end (s = -inf)
                l[g] += p;
                acc[g].x += p * vr[u].x; acc[g].y += p * vr[u].y;
                acc[g].z += p * vr[u].z; acc[g].w += p * vr[u].w;
            }
            m[g] = m_new;
        }
    }
    // END SOLUTION

    // BEGIN SOLUTION TODO(3): merge the WARPS states through shared memory and write o_part and lse_part, as in 04
    __shared__ float m_s[WARPS][GROUP], l_s[WARPS][GROUP];
    __shared__ float4 acc_s[WARPS][GROUP][MAX_D / 4];
    #pragma unroll
    for (int g = 0; g < GROUP; ++g) {
        if (lane == 0) { m_s[warp][g] = m[g]; l_s[warp][g] = l[g]; }
        acc_s[warp][g][lane] = acc[g];
    }
    __syncthreads();
    // One thread per (head, float4 of features); a warp that saw no key has l = 0 and is skipped.
    for (int idx = threadIdx.x; idx < GROUP * (d / 4); idx += blockDim.x) {
        int g = idx / (d / 4), c4 = idx % (d / 4);
        float m_blk = -INFINITY;
        for (int w = 0; w < WARPS; ++w) m_blk = fmaxf(m_blk, m_s[w][g]);
        float l_blk = 0.f;
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int w = 0; w < WARPS; ++w) {
            if (l_s[w][g] == 0.f) continue;
            float wgt = exp2f(m_s[w][g] - m_blk);
            float4 a = acc_s[w][g][c4];
            l_blk += l_s[w][g] * wgt;
            o.x += a.x * wgt; o.y += a.y * wgt; o.z += a.z * wgt; o.w += a.w * wgt;
        }
        float inv_l = 1.f / l_blk;                     // l_blk > 0: the split holds at least one key
        size_t row = ((size_t)b * H + kv * GROUP + g) * n_splits + split;
        reinterpret_cast<float4*>(o_part + row * d)[c4] =
            make_float4(o.x * inv_l, o.y * inv_l, o.z * inv_l, o.w * inv_l);
        if (c4 == 0)
            lse_part[row] = (m_blk + log2f(l_blk)) * M_LN2_F;   // back from log2 to natural log
    }
    // END SOLUTION
}

// One warp per (head, sequence). The split lse values are merged like 01's online softmax, with
// lse_s as the element; then o = Σ_s exp(lse_s - lse) o_s.
extern "C" __global__ void paged_combine(const float* __restrict__ o_part,
                                           const float* __restrict__ lse_part,
                                           const int* __restrict__ context_lens,
                                           float* __restrict__ o, float* __restrict__ lse,
                                           int H, int d, int n_splits, int chunk)
{
    int h = blockIdx.x, b = blockIdx.y, lane = threadIdx.x;
    int used = (context_lens[b] + chunk - 1) / chunk;  // splits that held keys; the others wrote nothing
    size_t row = (size_t)b * H + h;
    const float* lse_s = lse_part + row * n_splits;
    const float4* o_s = reinterpret_cast<const float4*>(o_part + row * n_splits * d);

    // BEGIN SOLUTION TODO(4): combine the used splits into o and lse as in 04, with weights exp(lse_s - lse_max); an empty context writes o = 0 and lse = -inf
    float lse_max = -INFINITY;
    for (int s = lane; s < used; s += 32) lse_max = fmaxf(lse_max, lse_s[s]);
    for (int offset = 16; offset > 0; offset /= 2)
        lse_max = fmaxf(lse_max, __shfl_xor_sync(0xffffffffu, lse_max, offset));
    if (used == 0) {                                   // empty context: nothing to weigh
        if (4 * lane < d) reinterpret_cast<float4*>(o + row * d)[lane] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (lane == 0) lse[row] = -INFINITY;
        return;
    }
    float total = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    #pragma unroll 4
    for (int s = 0; s < used; ++s) {
        float w = expf(lse_s[s] - lse_max);            // <= 1: cannot overflow, however large the scores
        total += w;
        if (4 * lane < d) {
            float4 x = o_s[(size_t)s * (d / 4) + lane];
            acc.x += w * x.x; acc.y += w * x.y; acc.z += w * x.z; acc.w += w * x.w;
        }
    }
    float inv = 1.f / total;                           // total >= 1: the largest split has weight 1
    if (4 * lane < d)
        reinterpret_cast<float4*>(o + row * d)[lane] = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    if (lane == 0) lse[row] = lse_max + logf(total);
    // END SOLUTION
}
"""

# The tuning constants, stated once: each build compiles KERNEL with them as -D options. A variant is
# one assignment away: CONFIG = dict(CONFIG, WARPS=8) (the course's split sweeps set it this way).
CONFIG = dict(WARPS=4, KEYS_PER_STEP=8, MIN_BLOCKS=4)
MAX_D = 128                               # as in the kernel: 32 lanes × one float4
MAX_GROUP = 16                            # H / H_kv: registers and shared memory grow with it
MIN_CHUNK = 256                           # no split shorter than this many keys
BLOCKS_PER_SM = 4                         # aim for this many partial blocks per SM
LOG2E = 1.4426950408889634


def cdiv(a, b):
    return (a + b - 1) // b


@functools.lru_cache(maxsize=None)
def _kernels(rt, group, config):
    # One build per group size and CONFIG (compiled once, not on every call): GROUP fixes the register
    # arrays. config is CONFIG's items as a tuple, so that the cache can key on it.
    options = tuple(f"-D{key}={val}" for key, val in config) + (f"-DGROUP={group}",)
    mod = rt.compile(KERNEL, options=options)
    return mod.get_function("paged_partial"), mod.get_function("paged_combine")


def choose_num_splits(rt, B, H_kv, max_len):
    """How many splits of the cache: enough blocks to fill the GPU, none too short to pay off."""
    # BEGIN SOLUTION TODO(5): return the number of splits as in 04, with max_len = max_pages · page_size: about BLOCKS_PER_SM blocks per SM, and no split shorter than MIN_CHUNK keys
    blocks = B * H_kv                                  # one block per (sequence, kv head) if unsplit
    wanted = cdiv(BLOCKS_PER_SM * rt.multiprocessor_count, blocks)
    longest = cdiv(max_len, MIN_CHUNK)                 # more splits would be shorter than MIN_CHUNK
    return max(1, min(wanted, longest))
    # STUB: return 1
    # END SOLUTION


def paged_decode(rt, q, k_pages, v_pages, block_table, context_lens, scale, num_splits=None):
    """q [B, H, d]; k_pages, v_pages [num_pages, page_size, Hkv, d]; block_table [B, max_pages] int32;
    context_lens [B] int32 -> (o [B, H, d], lse [B, H])."""
    B, H, d = q.shape
    _, page_size, H_kv, _ = k_pages.shape
    max_pages = block_table.shape[1]
    max_len = max_pages * page_size                    # the longest context the table can address
    if H % H_kv or H // H_kv > MAX_GROUP:
        raise ValueError(f"H={H} must be a multiple of H_kv={H_kv} with H/H_kv <= {MAX_GROUP}")
    if d % 4 or d > MAX_D:
        raise ValueError(f"head dim d={d} must be a multiple of 4 and at most {MAX_D} (one float4 per lane)")
    partial, combine = _kernels(rt, H // H_kv, tuple(CONFIG.items()))
    threads = CONFIG["WARPS"] * 32                     # as the partial kernel was built
    n_splits = num_splits or choose_num_splits(rt, B, H_kv, max_len)
    chunk = max(1, cdiv(max_len, n_splits))            # keys per split
    n_splits = max(1, cdiv(max_len, chunk))            # rounding may leave fewer splits

    o_part = rt.empty((B, H, n_splits, d), "float32")  # workspace: each split's normalised output
    lse_part = rt.empty((B, H, n_splits), "float32")   # ... and its log-sum-exp
    o = rt.empty((B, H, d), "float32")
    lse = rt.empty((B, H), "float32")
    partial((n_splits, H_kv, B), (threads,),
            (q, k_pages, v_pages, block_table, context_lens, o_part, lse_part, rt.int32(H),
             rt.int32(H_kv), rt.int32(max_pages), rt.int32(page_size), rt.int32(d), rt.int32(chunk),
             rt.float32(scale * LOG2E)))
    combine((H, B), (32,),
            (o_part, lse_part, context_lens, o, lse, rt.int32(H), rt.int32(d), rt.int32(n_splits),
             rt.int32(chunk)))
    return o, lse
