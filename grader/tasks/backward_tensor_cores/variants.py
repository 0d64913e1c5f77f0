"""Module 11's backward in the variants its lesson compares (section 12): `grader ladder 11 --variants`.

The solution, the solution with one of its choices undone (an ablation), and the alternatives tried (dQ
by a separate pass, other tiles, one barrier per step, K and V in registers, wider reductions,
FlashAttention-2's warp tiling). Every variant is the solution's own text with an edit, so it follows
the solution. `grader ladder 11 --variants` checks them on module 11's cases and, on a GPU, times them
next to PyTorch's FlashAttention-2 and cuDNN backward (B=2, H=16, N=4096):

    grader ladder 11 --variants --list              the variants, numbered
    grader ladder 11 --variants --backend cpu       module 11's cases on the CPU emulator
    grader ladder 11 --variants --nvcc              ptxas's registers and spills (nvcc, sm_90, float16)
    grader ladder 11 --variants --nvcc --build DIR  every variant's modules as cubins (both types)
    grader ladder 11 --variants [N ...] [--cubins DIR] [--cases fp16-full] [--rounds R] [--out F]
                                                    on a GPU: check, then time (variants N ... only)

On a GPU each variant is compiled by NVRTC, as the grader does, unless --cubins names a folder that
--build filled (nvcc on a machine without a GPU, where compiling costs no device time); a module not
found there falls back to NVRTC. At 255 registers a thread the two builds of one source can differ by
10 % (lesson, section 12): compare variants built the same way. --cases fp16-full times float16 without
the causal mask only (d = 128 and 64), --cases full both types without it; --rounds R times every
contender R times, round after round in a rotated order, and gives the median and each round's ratio to
FlashAttention-2 (two runs of one kernel differ by 3 to 8 %: a change of a few percent shows only this
way); --no-check times without checking first; --write N applies variant N's text edits to the solution
file (how the solution's last choices were made: the fastest of the candidates, timed on the H100).
A variant's time is the median of 20 calls after 3, each between two CUDA events (grader bench's).

The variants: the solution; the previous solution (PREVIOUS: the solution with its last change
undone) and the kernels it was chosen among; then, marked "ref:", one change each to a reference kernel
(dQ's key loop fully unrolled, B of Sᵀ and dPᵀ read across first), the kernel the lesson's second table
starts from; the first version's choices; then the changes tried after the previous solution (the
lesson's third table): fewer address instructions, two sets of dQ accumulators, three stages, dQ by bulk
asynchronous reductions, and FlashAttention-2's 2D warp tiling (a kernel of its own, TILED_2D_KERNEL,
around the solution's helpers); last, combinations of the first two with dQ's loop fully unrolled (all
three together are the solution's last change). Every variant but the solution is an edit of PREVIOUS,
so that the lesson's tables can be measured again as they were.

The separate dQ pass: the solution's kernel with its dQ step cut out (the text between two of its
comments, not a copy), and a second kernel, one block per query tile, that owns its rows of dQ and
writes them once. It recomputes S, P, dP and dS per (query tile, key tile) and needs no atomic: 7
products instead of 5. It is built from the solution's own helpers with the roles of the tiles
swapped: compiled with BLOCK_N = its query rows (16 per warp) and BLOCK_M = the keys of a step,
products_t gives S = Q Kᵀ and dP = dO Vᵀ for a warp's 16 query rows, and add_product dQ += dS K.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import numpy as np

from ...attention.ladders import replace
from ...errors import GraderError
from ...spec import LadderStep
from .ladder import CASES, kernel_of

ID = "11_backward_tensor_cores"
CHECK_CASES = {"cpu": CASES, "gpu": CASES}
DQ_TILES = dict(DQ_ROWS=128, DQ_KEYS=64)      # the dQ kernel: query rows per block, keys per step

# ---- edits of the solution's text ----------------------------------------------------------------------

PRODUCTS_LOOP = """    #pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        product_t_step<D>(x, a_s, b_t, kk, warp, lane);
        product_t_step<D>(y, c_s, d_t, kk, warp, lane);
    }"""
DQ_LOOP = re.compile(r"#pragma unroll( \d+)?\n(        for \(int kk = 0; kk < BLOCK_N / 16; \+\+kk\) \{)")
ATOMIC = "for (int dt = 0; dt < DQ_DT; ++dt) atomic_add2(row + dt * 8, dq_frag[dt][2 * r], dq_frag[dt][2 * r + 1]);"
ATOMIC_BLOCK = """        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int i = m_start + mq * 16 + g + 8 * r;
            if (i < n_q) {
                float* row = dq_acc + (bh + i) * D + fq * DQ_DT * 8 + 2 * t;
                #pragma unroll
                """ + ATOMIC + """
            }
        }"""

# Sᵀ and dPᵀ one after the other, each in its own loop over the features.
SPLIT_PRODUCTS = replace(PRODUCTS_LOOP, """    #pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) product_t_step<D>(x, a_s, b_t, kk, warp, lane);
    #pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) product_t_step<D>(y, c_s, d_t, kk, warp, lane);""")
FEATURE_LOOP = "    #pragma unroll\n    for (int kk = 0; kk < D / 16; ++kk)"


def rolled_features(text: str) -> str:
    """The products' loop(s) over the features kept rolled."""
    if text.count(FEATURE_LOOP) not in (1, 2):
        raise GraderError(f"solutions/{ID}.py: {text.count(FEATURE_LOOP)} of products_t's feature loops, not 1 or 2")
    return text.replace(FEATURE_LOOP, FEATURE_LOOP.replace("#pragma unroll", "#pragma unroll 1"))


def features_unroll(n: int):
    """The products' feature loop unrolled n times."""
    return replace(PRODUCTS_LOOP, PRODUCTS_LOOP.replace("#pragma unroll", f"#pragma unroll {n}"))


def dq_unroll(n: int | None):
    """dQ's key loop unrolled n times (1: rolled; None: fully)."""
    def edit(text: str) -> str:
        if len(DQ_LOOP.findall(text)) != 1:
            raise GraderError(f"solutions/{ID}.py: {len(DQ_LOOP.findall(text))} of dQ's key loop, not one")
        return DQ_LOOP.sub(lambda m: "#pragma unroll" + (f" {n}" if n else "") + "\n" + m.group(2), text)
    return edit


# The feature loop of the products and the key loop of dQ kept rolled, as the 2026-11-26 solution had them.
ROLLED = (rolled_features, dq_unroll(1))
# B of Sᵀ and dPᵀ read across first (block16_across): (b[0], b[1]) and (b[2], b[3]) are the two column
# tiles, neighbouring registers, so the compiler needs no register moves before the mma.
B_ACROSS = replace("""        ldmatrix_x4(b, b_t + block16<D>(np, kk, lane));
        mma_16816(x[2 * np], a, b[0], b[2]);
        mma_16816(x[2 * np + 1], a, b[1], b[3]);""", """        ldmatrix_x4(b, b_t + block16_across<D>(np, kk, lane));
        mma_16816(x[2 * np], a, b[0], b[1]);
        mma_16816(x[2 * np + 1], a, b[2], b[3]);""")
# dS as A of dQ read with block16 (down first), its registers reordered {r[0], r[2], r[1], r[3]}.
DS_ORDER = replace("""            unsigned ds_a[4];
            ldmatrix_x4_trans(ds_a, ds_s + block16_across<BLOCK_M>(kk, mq, lane));""", """            unsigned r[4];
            ldmatrix_x4_trans(r, ds_s + block16<BLOCK_M>(kk, mq, lane));
            const unsigned ds_a[4] = {r[0], r[2], r[1], r[3]};""")
# The kernel that the nvcc run of 2026-11-26 (section 12's second table) took as its reference: dQ's loop
# fully unrolled and B read across first.
REF = (dq_unroll(None), B_ACROSS)
# dQ added 4 bytes at a time (two reductions per pair of features).
SCALAR_ATOMICS = replace(ATOMIC, "for (int dt = 0; dt < DQ_DT; ++dt) { atomicAdd(row + dt * 8, dq_frag[dt][2 * r]); "
                                 "atomicAdd(row + dt * 8 + 1, dq_frag[dt][2 * r + 1]); }")
# dQ added 16 bytes at a time: lanes t and t ^ 1 swap half their pairs, so that each holds four
# neighbouring features of one row (float4 atomicAdd, sm_90).
FLOAT4_ATOMICS = replace(ATOMIC_BLOCK, """        const bool odd = t % 2;             // even t: row g, features 2t .. 2t + 3; odd t: row g + 8, 2t - 2 ..
        const int i = m_start + mq * 16 + g + 8 * odd;
        float* row = dq_acc + (bh + i) * D + fq * DQ_DT * 8 + 2 * (t - odd);
        #pragma unroll
        for (int dt = 0; dt < DQ_DT; ++dt) {
            const float give0 = odd ? dq_frag[dt][0] : dq_frag[dt][2], give1 = odd ? dq_frag[dt][1] : dq_frag[dt][3];
            const float got0 = __shfl_xor_sync(0xffffffffu, give0, 1), got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
            const float4 x4 = odd ? make_float4(got0, got1, dq_frag[dt][2], dq_frag[dt][3])
                                  : make_float4(dq_frag[dt][0], dq_frag[dt][1], got0, got1);
            if (i < n_q) atomicAdd(reinterpret_cast<float4*>(row + dt * 8), x4);
        }""")
# A diagnostic, wrong on purpose: dQ computed but never added (the time of the reductions).
NO_ATOMICS = replace(ATOMIC, "for (int dt = 0; dt < DQ_DT; ++dt) if (dq_frag[dt][2 * r] == 1234.5f) "
                             "row[dt * 8] = dq_frag[dt][2 * r + 1];   // never: no reduction")

DQ_START = "        // dQ of this step: warp w takes row tile"
DQ_END = "        // END SOLUTION\n    }\n    cp_async_wait<0>();                      // no copy outlives the block"


def one_barrier(text: str) -> str:
    """One barrier per step: step it's dQ runs at step it + 1, after that step's barrier (which says every
    warp stored its dSᵀ), from ds_s's other half (ds_s doubled); the last step's dQ after the loop."""
    a, b = text.index(DQ_START), text.index(DQ_END)
    dq = text[a:b].replace("ds_s + block16", "ds_b + block16")
    text = (text[:a] + "    }\n    __syncthreads();\n    if (n_steps > 0) add_dq(n_steps - 1);\n"
            "    cp_async_wait<0>();                      // no copy outlives the block" + text[b + len(DQ_END):])
    step_dq = ("    auto add_dq = [&](int it) {      // dQ of step it, from its half of ds_s\n"
               "        const int h = h_kv * group + it / m_tiles, m_start = m_begin + (it % m_tiles) * BLOCK_M;\n"
               "        const size_t bh = (size_t)(b * H + h) * n_q;\n"
               "        const elem_t* ds_b = ds_s + (it % 2) * BLOCK_N * BLOCK_M;\n" + dq + "    };\n\n")
    for edit in (replace("    for (int it = 0; it < n_steps; ++it) {\n", step_dq + "    for (int it = 0; it < n_steps; ++it) {\n"),
                 replace("        __syncthreads();                     // every warp's keys of dSᵀ are in ds_s\n\n", ""),
                 replace("        cp_async_commit();\n\n        // Element e",
                         "        cp_async_commit();\n        if (it > 0) add_dq(it - 1);\n"
                         "        elem_t* ds_cur = ds_s + (it % 2) * BLOCK_N * BLOCK_M;\n\n        // Element e"),
                 replace("*reinterpret_cast<unsigned*>(&ds_s[swz", "*reinterpret_cast<unsigned*>(&ds_cur[swz"),
                 replace("elem_t* stages = ds_s + BLOCK_N * BLOCK_M;", "elem_t* stages = ds_s + 2 * BLOCK_N * BLOCK_M;")):
        text = edit(text)
    return text


PRODUCTS_FROM_REGISTERS = r"""
// products_t with the warp's A fragments (K's and V's rows, every feature step) already in registers.
template <int D>
__device__ __forceinline__ void products_t_reg(float (&x)[NT][4], const unsigned (&a)[D / 16][4], const elem_t* b_t,
                                               float (&y)[NT][4], const unsigned (&c)[D / 16][4], const elem_t* d_t, int lane)
{
    #pragma unroll
    for (int nt = 0; nt < NT; ++nt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) { x[nt][e] = 0.0f; y[nt][e] = 0.0f; }
    #pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        #pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            unsigned b[4], d[4];
            ldmatrix_x4(b, b_t + block16_across<D>(np, kk, lane));
            ldmatrix_x4(d, d_t + block16_across<D>(np, kk, lane));
            mma_16816(x[2 * np], a[kk], b[0], b[1]);
            mma_16816(x[2 * np + 1], a[kk], b[2], b[3]);
            mma_16816(y[2 * np], c[kk], d[0], d[1]);
            mma_16816(y[2 * np + 1], c[kk], d[2], d[3]);
        }
}

"""
# K's and V's A fragments of the warp's keys loaded once for the block's life (D / 4 registers each).
KV_IN_REGISTERS = (
    replace("// The C fragments of x (16 rows", PRODUCTS_FROM_REGISTERS + "// The C fragments of x (16 rows"),
    replace("    // dV and dK / scale of the warp's 16 keys, summed",
            "    // K and V of the warp's keys as A fragments, loaded once.\n"
            "    cp_async_wait<1>();\n    __syncthreads();\n"
            "    unsigned k_frag[D / 16][4], v_frag[D / 16][4];\n"
            "    #pragma unroll\n    for (int kk = 0; kk < D / 16; ++kk) {\n"
            "        ldmatrix_x4(k_frag[kk], k_s + block16<D>(warp, kk, lane));\n"
            "        ldmatrix_x4(v_frag[kk], v_s + block16<D>(warp, kk, lane));\n    }\n\n"
            "    // dV and dK / scale of the warp's 16 keys, summed"),
    replace("products_t<D>(pT, k_s, q_t, dsT, v_s, do_t, warp, lane);",
            "products_t_reg<D>(pT, k_frag, q_t, dsT, v_frag, do_t, lane);"),
)

# ---- the separate dQ pass ---------------------------------------------------------------------------

DQ_KERNEL = r"""
// One block per (query tile of BLOCK_N rows, query head, batch): dQ of its rows, written once. Compiled
// with BLOCK_N = the query rows (warp w: rows 16 w ..) and BLOCK_M = the keys of a step.
template <int D>
__global__ void __launch_bounds__(NTHREADS)
flash_backward_dq(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
                  const elem_t* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
                  elem_t* __restrict__ dq, int H, int H_kv, int n_q, int n_k, float scale, int causal)
{
    constexpr int DT = D / 8;
    constexpr int STAGE = 2 * BLOCK_M * D;                // a K tile and a V tile
    extern __shared__ uint4 smem_u4[];
    elem_t* q_s = reinterpret_cast<elem_t*>(smem_u4);    // [BLOCK_N][D]
    elem_t* do_s = q_s + BLOCK_N * D;                    // [BLOCK_N][D]
    elem_t* stages = do_s + BLOCK_N * D;                 // two stages of [K tile | V tile]
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int q_start = (gridDim.x - 1 - blockIdx.x) * BLOCK_N;      // the longest rows first
    const int h = blockIdx.y, b = blockIdx.z, h_kv = h / (H / H_kv);
    const size_t bh = (size_t)(b * H + h) * n_q;
    const elem_t* k_b = k + (size_t)(b * H_kv + h_kv) * n_k * D;
    const elem_t* v_b = v + (size_t)(b * H_kv + h_kv) * n_k * D;
    const float scale_log2 = scale * M_LOG2E_F;
    const int offset = n_k - n_q;
    const int q_last = min(q_start + BLOCK_N, n_q) - 1;
    const int kv_end = causal ? min(n_k, q_last + offset + 1) : n_k;
    const int n_tiles = kv_end > 0 ? (kv_end + BLOCK_M - 1) / BLOCK_M : 0;

    load_tile_async<BLOCK_N, D>(q_s, q + bh * D, q_start, n_q, tid);
    load_tile_async<BLOCK_N, D>(do_s, dout + bh * D, q_start, n_q, tid);
    cp_async_commit();
    if (n_tiles > 0) {
        load_tile_async<BLOCK_M, D>(stages, k_b, 0, n_k, tid);
        load_tile_async<BLOCK_M, D>(stages + BLOCK_M * D, v_b, 0, n_k, tid);
    }
    cp_async_commit();
    float lse_r[2], d_r[2];                              // the lane's rows g and g + 8
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = q_start + warp * 16 + g + 8 * r;
        lse_r[r] = i < n_q ? lse[bh + i] * M_LOG2E_F : 0.0f;
        d_r[r] = i < n_q ? delta[bh + i] : 0.0f;
    }
    float acc[DT][4];
    #pragma unroll
    for (int dt = 0; dt < DT; ++dt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) acc[dt][e] = 0.0f;

    for (int it = 0; it < n_tiles; ++it) {
        const int kv_start = it * BLOCK_M;
        const elem_t* k_t = stages + (it % 2) * STAGE;
        const elem_t* v_t = k_t + BLOCK_M * D;
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_tiles) {
            elem_t* next = stages + ((it + 1) % 2) * STAGE;
            load_tile_async<BLOCK_M, D>(next, k_b, kv_start + BLOCK_M, n_k, tid);
            load_tile_async<BLOCK_M, D>(next + BLOCK_M * D, v_b, kv_start + BLOCK_M, n_k, tid);
        }
        cp_async_commit();
        const bool masked = (causal && kv_start + BLOCK_M - 1 > q_start + offset)
                            || kv_start + BLOCK_M > n_k || q_start + BLOCK_N > n_q;
        float p[NT][4], ds[NT][4];
        products_t<D>(p, q_s, k_t, ds, do_s, v_t, warp, lane);   // S = Q Kᵀ, dP = dO Vᵀ: rows are queries here
        #pragma unroll
        for (int nt = 0; nt < NT; ++nt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = q_start + warp * 16 + g + 8 * (e / 2), j = kv_start + nt * 8 + 2 * t + e % 2;
                const bool visible = !masked || (j < n_k && i < n_q && (!causal || j <= i + offset));
                const float pe = visible ? exp2f(fmaf(p[nt][e], scale_log2, -lse_r[e / 2])) : 0.0f;
                ds[nt][e] = pe * (ds[nt][e] - d_r[e / 2]);
            }
        unsigned a[QSTEPS][4];
        to_a_fragments(a, ds);
        add_product<D>(acc, a, k_t, lane);               // dQ += dS K
    }
    cp_async_wait<0>();
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = q_start + warp * 16 + g + 8 * r;
        if (i < n_q) {
            #pragma unroll
            for (int dt = 0; dt < DT; ++dt)
                *reinterpret_cast<elem2_t*>(dq + (bh + i) * D + dt * 8 + 2 * t) =
                    to_elem2(scale * acc[dt][2 * r], scale * acc[dt][2 * r + 1]);
        }
    }
}
"""


def cut(text: str, start: str, end: str) -> str:
    """text without [start, end): both must occur once (the solution's comments)."""
    if text.count(start) != 1 or text.count(end) != 1:
        raise GraderError(f"solutions/{ID}.py: {text.count(start)} of {start[:60]!r} and {text.count(end)} of "
                          f"{end[:60]!r}, not one of each")
    a, b = text.index(start), text.index(end)
    return text[:a] + text[b:]


@functools.lru_cache(maxsize=None)
def dq_pass_source(solution, edits=()) -> str:
    """The solution's kernel (with `edits`) without its dQ step (nor dSᵀ's stores to ds_s), then the dQ kernel."""
    text = solution.KERNEL
    for edit in edits:
        text = edit(text)
    text = cut(text, "        // Register x of a[kk] holds key warp_key", "        // END SOLUTION\n        __syncthreads();")
    text = cut(text, "        __syncthreads();                     // every warp's keys of dSᵀ are in ds_s",
               "    }\n    cp_async_wait<0>();                      // no copy outlives the block")
    return text + DQ_KERNEL


def _options(config, elem):
    return tuple(f"-D{key}={int(val)}" for key, val in config) + (f"-DUSE_BF16={int(elem == 'bfloat16')}", "-ftz=true")


@functools.lru_cache(maxsize=None)
def _dq_modules(rt, solution, elem, config, d, edits=()):
    source = dq_pass_source(solution, edits)
    main = rt.compile(source, options=_options(config, elem), name_expressions=[f"flash_backward_tc<{d}>"])
    swapped = (("BLOCK_M", DQ_TILES["DQ_KEYS"]), ("BLOCK_N", DQ_TILES["DQ_ROWS"]))
    dq = rt.compile(source, options=_options(swapped, elem), name_expressions=[f"flash_backward_dq<{d}>"])
    return main, dq


def dq_pass_shared_bytes(solution, d):
    return solution.ELEMENT_BYTES * d * (2 * DQ_TILES["DQ_ROWS"] + 4 * DQ_TILES["DQ_KEYS"])


def dq_pass_backward(solution, rt, q, k, v, o, lse, do, scale, causal=False, dtype=None, edits=()):
    """The solution's interface; dK and dV from its kernel less the dQ step, dQ from flash_backward_dq."""
    B, H, n_q, d = q.shape
    H_kv, n_k = k.shape[1], k.shape[2]
    elem = solution.element_type((q, k, v, o, do), dtype)
    cfg = solution.CONFIG[d]
    main, dq_mod = _dq_modules(rt, solution, elem, tuple(cfg.items()), d, tuple(edits))
    dq, dk, dv = rt.empty(q.shape, q.dtype), rt.empty(k.shape, q.dtype), rt.empty(k.shape, q.dtype)
    scratch, delta = rt.empty(q.shape, "float32"), rt.empty((B, H, n_q), "float32")
    rows = B * H * n_q
    args = (rt.int32(H), rt.int32(H_kv), rt.int32(n_q), rt.int32(n_k), rt.float32(scale), rt.int32(int(bool(causal))))
    main.get_function("backward_preprocess")((solution.cdiv(rows, solution.PREPROCESS_WARPS),),
                                             (32 * solution.PREPROCESS_WARPS,),
                                             (o, do, delta, scratch, rt.int32(rows), rt.int32(d)))
    kernel = main.get_function(f"flash_backward_tc<{d}>")
    smem = solution.shared_bytes(d)
    if smem > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = smem
    kernel((solution.cdiv(n_k, cfg["BLOCK_N"]), H_kv, B), (solution.nthreads(d),),
           (q, k, v, do, lse, delta, scratch, dk, dv) + args, shared_mem=smem)
    kernel = dq_mod.get_function(f"flash_backward_dq<{d}>")
    smem = dq_pass_shared_bytes(solution, d)
    if smem > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = smem
    kernel((solution.cdiv(n_q, DQ_TILES["DQ_ROWS"]), H, B), (DQ_TILES["DQ_ROWS"] // 16 * 32,),
           (q, k, v, do, lse, delta, dq) + args, shared_mem=smem)
    return dq, dk, dv


def three_stages(text: str) -> str:
    """Three stages: the copies of step it + 2 issued at step it, and each step waits for all but the
    newest group (Nsight Compute's samples put 6 % of the solution's warp time at the wait for the next
    stage's copies)."""
    if text.count("(it % 2) * STAGE") != 2:
        raise GraderError(f"solutions/{ID}.py: {text.count('(it % 2) * STAGE')} of '(it % 2) * STAGE', not two")
    text = text.replace("(it % 2) * STAGE", "(it % 3) * STAGE")
    for edit in (replace("""    if (n_steps > 0) load_step(0);
    cp_async_commit();
""", """    if (n_steps > 0) load_step(0);
    cp_async_commit();
    if (n_steps > 1) load_step(1);
    cp_async_commit();
"""), replace("""        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_steps) load_step(it + 1);""", """        cp_async_wait<1>();
        __syncthreads();
        if (it + 2 < n_steps) load_step(it + 2);""")):
        text = edit(text)
    return text


# dQ's rows of a warp staged in shared memory (dq_s, rows padded by 8 floats) and added to dq_acc by one
# bulk asynchronous reduction per row (cp.reduce.async.bulk .add.f32, sm_90): the TMA unit does the
# adds, the warp goes on. A row of a warp's part is 128 contiguous bytes of dq_acc; dq_s's rows are
# 8 floats longer than D, so that the float2 stores of a fragment's 8 rows fall in different banks.
BULK_DQ = replace(ATOMIC_BLOCK, """        {
            constexpr int DQ_LD = D + 8;
            float* dq_s = reinterpret_cast<float*>(stages + 2 * STAGE);
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            __syncwarp();
            #pragma unroll
            for (int r = 0; r < 2; ++r)
                #pragma unroll
                for (int dt = 0; dt < DQ_DT; ++dt)
                    *reinterpret_cast<float2*>(&dq_s[(mq * 16 + g + 8 * r) * DQ_LD + fq * DQ_DT * 8 + dt * 8 + 2 * t]) =
                        make_float2(dq_frag[dt][2 * r], dq_frag[dt][2 * r + 1]);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            __syncwarp();
            const int i = m_start + mq * 16 + lane;
            if (lane < 16 && i < n_q)
                asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                             :: "l"(dq_acc + (bh + i) * D + fq * DQ_DT * 8),
                                "r"(smem_addr(&dq_s[(mq * 16 + lane) * DQ_LD + fq * DQ_DT * 8])),
                                "n"(DQ_DT * 8 * 4) : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }""")


def bulk_end(text: str) -> str:
    """No bulk reduction outlives the block."""
    return replace("    cp_async_wait<0>();                      // no copy outlives the block\n",
                   "    cp_async_wait<0>();                      // no copy outlives the block\n"
                   "    asm volatile(\"cp.async.bulk.wait_group 0;\" ::: \"memory\");\n")(text)


# The previous solution (2026-11-26), before its last change (lesson, section 12): block16 in one
# expression, dQ in one set of accumulators with its key loop unrolled 4 times. Every variant but the
# solution itself is this kernel with its edits (on_previous), as the lesson's tables measured them.
PREVIOUS = (
    replace("even steps kk into dq_frag, odd ones into dq_odd; then dq_frag += dq_odd, and atomic_add2",
            "then atomic_add2"),
    replace("""    // swz<W>(r16 * 16 + lane % 16, c16 * 16 + (lane / 16) * 8), written so that the lane's part is
    // computed once: in a wide tile (W >= 64) the swizzle's XOR changes only the low 3 bits of a chunk
    // index, so swz<W>(lane's row, lane's column) is the same for c16 and c16 + 4, and what the loops
    // add, r16 · 16 · W + (c16 / 4) · 64, is a constant (lesson, section 12: fewer address instructions).
    if (W >= 64) return r16 * 16 * W + (c16 / 4) * 64 + swz<W>(lane % 16, (c16 % 4) * 16 + (lane / 16) * 8);
""", ""),
    replace("""        // Two sets of accumulators: the even key steps add into dq_frag, the odd ones into dq_odd, two
        // independent chains of mma per feature tile where one would make each wait for the last.
        float dq_frag[DQ_DT][4], dq_odd[DQ_DT][4];
        #pragma unroll
        for (int dt = 0; dt < DQ_DT; ++dt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) { dq_frag[dt][e] = 0.0f; dq_odd[dt][e] = 0.0f; }
""", """        float dq_frag[DQ_DT][4];
        #pragma unroll
        for (int dt = 0; dt < DQ_DT; ++dt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) dq_frag[dt][e] = 0.0f;
"""),
    replace("""        // Fully unrolled (BLOCK_N / 16 = 8 steps): kk % 2 picks the set at compile time.
        #pragma unroll
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {""", """        // Unrolled 4 times (of BLOCK_N / 16 = 8): measured faster than fully unrolled or rolled (section 12).
        #pragma unroll 4
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {"""),
    replace("""                mma_16816(kk % 2 ? dq_odd[2 * dp] : dq_frag[2 * dp], ds_a, kb[0], kb[1]);
                mma_16816(kk % 2 ? dq_odd[2 * dp + 1] : dq_frag[2 * dp + 1], ds_a, kb[2], kb[3]);
            }
        }
        #pragma unroll
        for (int dt = 0; dt < DQ_DT; ++dt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) dq_frag[dt][e] += dq_odd[dt][e];
""", """                mma_16816(dq_frag[2 * dp], ds_a, kb[0], kb[1]);
                mma_16816(dq_frag[2 * dp + 1], ds_a, kb[2], kb[3]);
            }
        }
"""),
)


# block16 written as (what the loops add: r16 · 16 · W + (c16 / 4) · 64) + (the lane's part, one
# expression per c16 % 4): the swizzle's XOR touches only a chunk's low 3 bits (W >= 64), so the lane's
# part is the same for c16 and c16 + 4 and the compiler computes it once. nvcc 13.0 (sm_90, float16,
# d = 128): 979 instructions per step against the solution's 1074.
LANE_PART = replace("""    return swz<W>(r16 * 16 + lane % 16, c16 * 16 + (lane / 16) * 8);
}""", """    if (W >= 64) return r16 * 16 * W + (c16 / 4) * 64 + swz<W>(lane % 16, (c16 % 4) * 16 + (lane / 16) * 8);
    return swz<W>(r16 * 16 + lane % 16, c16 * 16 + (lane / 16) * 8);
}""")

# dQ in two sets of accumulators (even and odd key steps), summed before the reductions: twice the
# independent mma chains in dQ's loop.
DQ_TWO_SETS = (
    replace("""            for (int e = 0; e < 4; ++e) dq_frag[dt][e] = 0.0f;
""", """            for (int e = 0; e < 4; ++e) dq_frag[dt][e] = 0.0f;
        float dq_odd[DQ_DT][4];
        #pragma unroll
        for (int dt = 0; dt < DQ_DT; ++dt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) dq_odd[dt][e] = 0.0f;
"""),
    replace("""                mma_16816(dq_frag[2 * dp], ds_a, kb[0], kb[1]);
                mma_16816(dq_frag[2 * dp + 1], ds_a, kb[2], kb[3]);
            }
        }
""", """                mma_16816(kk % 2 ? dq_odd[2 * dp] : dq_frag[2 * dp], ds_a, kb[0], kb[1]);
                mma_16816(kk % 2 ? dq_odd[2 * dp + 1] : dq_frag[2 * dp + 1], ds_a, kb[2], kb[3]);
            }
        }
        #pragma unroll
        for (int dt = 0; dt < DQ_DT; ++dt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) dq_frag[dt][e] += dq_odd[dt][e];
"""))

# FlashAttention-2's warp tiling: the kernel and its product helpers replaced (the header, the PTX
# wrappers, the tile loads, backward_preprocess and convert_dq stay the solution's). BLOCK_M = 64 at both
# head dimensions. The 8 warps tile Sᵀ and dPᵀ (128 keys × 64 queries) 4 × 2, each 32 × 32; Pᵀ and dSᵀ,
# rounded, go to shared memory (pt_s, ds_s) and come back by ldmatrix as A of dV and dK, which the warps
# tile 4 × 2 (32 keys × D/2 features each); dQ is tiled 2 × 4 (32 queries × D/4 features). Fewer bytes
# of shared memory read per mma than the solution's one-warp-per-16-keys (each warp's tiles are
# squarer), at the price of the Pᵀ and dSᵀ round trip.
TILED_2D_KERNEL = r"""
// ---- 2D warp tiling: Pᵀ and dSᵀ through shared memory ------------------------------------------------
// Warp w: for Sᵀ, dPᵀ, dV and dK keys 32 (w % 4) ..; for Sᵀ and dPᵀ queries 32 (w / 4) ..; for dV and dK
// features (w / 4) D/2 ..; for dQ queries 32 (w / 4) .. and features (w % 4) D/4 ...
constexpr int WK = 4;                        // warps along the keys
constexpr int WQ = WARPS / WK;               // warps along the queries (2)
constexpr int KM = BLOCK_N / WK / 16;        // 16-key m tiles per warp (2)
constexpr int QN = BLOCK_M / WQ / 8;         // 8-query n tiles of Sᵀ per warp (4)
static_assert(BLOCK_N % (16 * WK) == 0 && BLOCK_M % (16 * WQ) == 0 && QN % 2 == 0, "2D tiling");

// x[mi][nt] = (the warp's keys of a_s) · (its queries of b_t)ᵀ over all D features.
template <int D>
__device__ __forceinline__ void product_2d(float (&x)[KM][QN][4], const elem_t* a_s, const elem_t* b_t,
                                           int wk, int wq, int lane)
{
    #pragma unroll
    for (int mi = 0; mi < KM; ++mi)
        #pragma unroll
        for (int nt = 0; nt < QN; ++nt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) x[mi][nt][e] = 0.0f;
    #pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        unsigned a[KM][4];
        #pragma unroll
        for (int mi = 0; mi < KM; ++mi) ldmatrix_x4(a[mi], a_s + block16<D>(wk * KM + mi, kk, lane));
        #pragma unroll
        for (int np = 0; np < QN / 2; ++np) {
            unsigned b[4];
            ldmatrix_x4(b, b_t + block16<D>(wq * (QN / 2) + np, kk, lane));
            #pragma unroll
            for (int mi = 0; mi < KM; ++mi) {
                mma_16816(x[mi][2 * np], a[mi], b[0], b[2]);
                mma_16816(x[mi][2 * np + 1], a[mi], b[1], b[3]);
            }
        }
    }
}

// acc[mi][dt] += (the warp's keys of at_s: [key][query]) · b_t (its features), over the BLOCK_M queries.
template <int D>
__device__ __forceinline__ void add_product_2d(float (&acc)[KM][D / 16][4], const elem_t* at_s, const elem_t* b_t,
                                               int wk, int wf, int lane)
{
    #pragma unroll
    for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
        unsigned a[KM][4];
        #pragma unroll
        for (int mi = 0; mi < KM; ++mi) ldmatrix_x4(a[mi], at_s + block16<BLOCK_M>(wk * KM + mi, kk, lane));
        #pragma unroll
        for (int dp = 0; dp < D / 32; ++dp) {
            unsigned b[4];
            ldmatrix_x4_trans(b, b_t + block16<D>(kk, wf * (D / 32) + dp, lane));
            #pragma unroll
            for (int mi = 0; mi < KM; ++mi) {
                mma_16816(acc[mi][2 * dp], a[mi], b[0], b[1]);
                mma_16816(acc[mi][2 * dp + 1], a[mi], b[2], b[3]);
            }
        }
    }
}

template <int D>
__global__ void __launch_bounds__(NTHREADS)
flash_backward_tc(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
                  const elem_t* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
                  float* __restrict__ dq_acc, elem_t* __restrict__ dk, elem_t* __restrict__ dv,
                  int H, int H_kv, int n_q, int n_k, float scale, int causal)
{
    static_assert(D % 64 == 0, "the swizzle permutes 8 chunks of 16 bytes: D must be a multiple of 64");
    constexpr int FT = D / 16;               // 8-feature tiles of dK and dV per warp (half the features)
    constexpr int QM = BLOCK_M / WQ / 16;    // 16-query m tiles of dQ per warp
    constexpr int DQ_DT = D / WK / 8;        // 8-feature tiles of dQ per warp
    static_assert(DQ_DT % 2 == 0, "dQ's B fragments come 16 features at a time");
    constexpr int STAGE = 2 * BLOCK_M * D + 4 * BLOCK_M;

    extern __shared__ uint4 smem_u4[];
    elem_t* k_s = reinterpret_cast<elem_t*>(smem_u4);    // [BLOCK_N][D]
    elem_t* v_s = k_s + BLOCK_N * D;                     // [BLOCK_N][D]
    elem_t* pt_s = v_s + BLOCK_N * D;                    // Pᵀ  [BLOCK_N][BLOCK_M]
    elem_t* ds_s = pt_s + BLOCK_N * BLOCK_M;             // dSᵀ [BLOCK_N][BLOCK_M]
    elem_t* stages = ds_s + BLOCK_N * BLOCK_M;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    const int wk = warp % WK, wq = warp / WK;
    const int k_start = blockIdx.x * BLOCK_N;
    const int h_kv = blockIdx.y, b = blockIdx.z;
    const int group = H / H_kv;
    const float scale_log2 = scale * M_LOG2E_F;
    const int offset = n_k - n_q;
    const elem_t* k_b = k + (size_t)(b * H_kv + h_kv) * n_k * D;
    const elem_t* v_b = v + (size_t)(b * H_kv + h_kv) * n_k * D;

    const int m_begin = causal ? max(0, (k_start - offset) / BLOCK_M * BLOCK_M) : 0;
    const int m_tiles = m_begin < n_q ? (n_q - m_begin + BLOCK_M - 1) / BLOCK_M : 0;
    const int n_steps = group * m_tiles;

    auto load_step = [&](int it) {
        elem_t* st = stages + (it % 2) * STAGE;
        const int h = h_kv * group + it / m_tiles, m_start = m_begin + (it % m_tiles) * BLOCK_M;
        const size_t bh = (size_t)(b * H + h) * n_q;
        load_tile_async<BLOCK_M, D>(st, q + bh * D, m_start, n_q, tid);
        load_tile_async<BLOCK_M, D>(st + BLOCK_M * D, dout + bh * D, m_start, n_q, tid);
        float* rows_s = reinterpret_cast<float*>(st + 2 * BLOCK_M * D);
        if (tid < 2 * BLOCK_M) {
            const int r = tid % BLOCK_M;
            const bool valid = m_start + r < n_q;
            cp_async_4(rows_s + tid, (tid < BLOCK_M ? lse : delta) + bh + (valid ? m_start + r : 0), valid);
        }
    };

    load_tile_async<BLOCK_N, D>(k_s, k_b, k_start, n_k, tid);
    load_tile_async<BLOCK_N, D>(v_s, v_b, k_start, n_k, tid);
    cp_async_commit();
    if (n_steps > 0) load_step(0);
    cp_async_commit();

    float dv_acc[KM][FT][4], dk_acc[KM][FT][4];
    #pragma unroll
    for (int mi = 0; mi < KM; ++mi)
        #pragma unroll
        for (int dt = 0; dt < FT; ++dt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) { dv_acc[mi][dt][e] = 0.0f; dk_acc[mi][dt][e] = 0.0f; }

    for (int it = 0; it < n_steps; ++it) {
        const int h = h_kv * group + it / m_tiles, m_start = m_begin + (it % m_tiles) * BLOCK_M;
        const size_t bh = (size_t)(b * H + h) * n_q;
        const elem_t* q_t = stages + (it % 2) * STAGE;
        const elem_t* do_t = q_t + BLOCK_M * D;
        const float* lse_t = reinterpret_cast<const float*>(do_t + BLOCK_M * D);
        const float* delta_t = lse_t + BLOCK_M;

        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_steps) load_step(it + 1);
        cp_async_commit();

        const bool masked = (causal && k_start + BLOCK_N - 1 > m_start + offset)
                            || k_start + BLOCK_N > n_k || m_start + BLOCK_M > n_q;

        float pT[KM][QN][4], dsT[KM][QN][4];
        product_2d<D>(pT, k_s, q_t, wk, wq, lane);
        #pragma unroll
        for (int mi = 0; mi < KM; ++mi)
            #pragma unroll
            for (int nt = 0; nt < QN; ++nt) {
                const int ql = wq * (BLOCK_M / WQ) + nt * 8 + 2 * t;
                const float2 lse2 = *reinterpret_cast<const float2*>(&lse_t[ql]);
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int kl = wk * KM * 16 + mi * 16 + g + 8 * (e / 2);
                    const int j = k_start + kl, i = m_start + ql + e % 2;
                    const bool visible = !masked || (j < n_k && i < n_q && (!causal || j <= i + offset));
                    const float lse_log2 = (e % 2 ? lse2.y : lse2.x) * M_LOG2E_F;
                    pT[mi][nt][e] = visible ? exp2f(fmaf(pT[mi][nt][e], scale_log2, -lse_log2)) : 0.0f;
                }
                #pragma unroll
                for (int r = 0; r < 2; ++r)
                    *reinterpret_cast<unsigned*>(&pt_s[swz<BLOCK_M>(wk * KM * 16 + mi * 16 + g + 8 * r, ql)]) =
                        pack2(pT[mi][nt][2 * r], pT[mi][nt][2 * r + 1]);
            }
        product_2d<D>(dsT, v_s, do_t, wk, wq, lane);
        #pragma unroll
        for (int mi = 0; mi < KM; ++mi)
            #pragma unroll
            for (int nt = 0; nt < QN; ++nt) {
                const int ql = wq * (BLOCK_M / WQ) + nt * 8 + 2 * t;     // the lane's first query in the tile
                const float2 d2 = *reinterpret_cast<const float2*>(&delta_t[ql]);
                #pragma unroll
                for (int e = 0; e < 4; ++e) dsT[mi][nt][e] = pT[mi][nt][e] * (dsT[mi][nt][e] - (e % 2 ? d2.y : d2.x));
                #pragma unroll
                for (int r = 0; r < 2; ++r)
                    *reinterpret_cast<unsigned*>(&ds_s[swz<BLOCK_M>(wk * KM * 16 + mi * 16 + g + 8 * r, ql)]) =
                        pack2(dsT[mi][nt][2 * r], dsT[mi][nt][2 * r + 1]);
            }
        __syncthreads();                     // Pᵀ and dSᵀ of the whole tile are in shared memory

        add_product_2d<D>(dv_acc, pt_s, do_t, wk, wq, lane);
        add_product_2d<D>(dk_acc, ds_s, q_t, wk, wq, lane);

        // dQ: warp takes queries 32 wq .. and features wk · D/4 ..
        float dq_frag[QM][DQ_DT][4];
        #pragma unroll
        for (int mi = 0; mi < QM; ++mi)
            #pragma unroll
            for (int dt = 0; dt < DQ_DT; ++dt)
                #pragma unroll
                for (int e = 0; e < 4; ++e) dq_frag[mi][dt][e] = 0.0f;
        #pragma unroll 4
        for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
            unsigned ds_a[QM][4];
            #pragma unroll
            for (int mi = 0; mi < QM; ++mi)
                ldmatrix_x4_trans(ds_a[mi], ds_s + block16_across<BLOCK_M>(kk, wq * QM + mi, lane));
            #pragma unroll
            for (int dp = 0; dp < DQ_DT / 2; ++dp) {
                unsigned kb[4];
                ldmatrix_x4_trans(kb, k_s + block16<D>(kk, wk * DQ_DT / 2 + dp, lane));
                #pragma unroll
                for (int mi = 0; mi < QM; ++mi) {
                    mma_16816(dq_frag[mi][2 * dp], ds_a[mi], kb[0], kb[1]);
                    mma_16816(dq_frag[mi][2 * dp + 1], ds_a[mi], kb[2], kb[3]);
                }
            }
        }
        #pragma unroll
        for (int mi = 0; mi < QM; ++mi)
            #pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int i = m_start + wq * QM * 16 + mi * 16 + g + 8 * r;
                if (i < n_q) {
                    float* row = dq_acc + (bh + i) * D + wk * DQ_DT * 8 + 2 * t;
                    #pragma unroll
                    for (int dt = 0; dt < DQ_DT; ++dt) atomic_add2(row + dt * 8, dq_frag[mi][dt][2 * r], dq_frag[mi][dt][2 * r + 1]);
                }
            }
    }
    cp_async_wait<0>();

    #pragma unroll
    for (int mi = 0; mi < KM; ++mi)
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int j = k_start + wk * KM * 16 + mi * 16 + g + 8 * r;
            if (j < n_k) {
                const size_t row = ((size_t)(b * H_kv + h_kv) * n_k + j) * D + wq * (D / 2);
                #pragma unroll
                for (int dt = 0; dt < FT; ++dt) {
                    *reinterpret_cast<elem2_t*>(dv + row + dt * 8 + 2 * t) = to_elem2(dv_acc[mi][dt][2 * r], dv_acc[mi][dt][2 * r + 1]);
                    *reinterpret_cast<elem2_t*>(dk + row + dt * 8 + 2 * t) =
                        to_elem2(scale * dk_acc[mi][dt][2 * r], scale * dk_acc[mi][dt][2 * r + 1]);
                }
            }
        }
}

"""


def tiled_2d(text: str) -> str:
    a, b = text.index("// ---- The products of one step, per warp"), text.index("// dq = scale · dq_acc")
    return text[:a] + TILED_2D_KERNEL + text[b:]


# ---- the variants -------------------------------------------------------------------------------------


@dataclass
class Variant:
    label: str
    edits: tuple = ()          # text edits of the solution's KERNEL, in order
    config: dict = field(default_factory=dict)   # d -> tile changes (BLOCK_M, BLOCK_N) against CONFIG[d]
    dims: tuple = (128, 64)
    ds_halves: int = 1         # 2: ds_s doubled (one barrier per step; the 2D tiling's pt_s)
    check: bool = True         # False: a diagnostic that computes a wrong dQ on purpose
    separate_dq: bool = False
    stages: int = 2            # stages of Q, dO, lse and D
    emulated: bool = True      # False: uses PTX the CPU emulator does not run (checked on a GPU only)
    dq_staged: bool = False    # dq_s [BLOCK_M][D + 8] floats after the stages
    on_previous: bool = True   # edits of the previous solution (PREVIOUS); False: of the solution

    def text(self, kernel: str) -> str:
        for edit in self.edits:
            kernel = edit(kernel)
        return kernel

    def shared_bytes(self, module, base, d: int) -> int:
        """The solution's shared memory, base(d), and what the variant adds to it."""
        m, n, e = module.CONFIG[d]["BLOCK_M"], module.CONFIG[d]["BLOCK_N"], module.ELEMENT_BYTES
        return (base(d) + (self.ds_halves - 1) * e * m * n + (self.stages - 2) * (e * 2 * m * d + 8 * m)
                + (4 * m * (d + 8) if self.dq_staged else 0))

    def module(self, ctx):
        """A copy of the solution's module with this variant's KERNEL, CONFIG and shared_bytes (its own
        compile cache)."""
        module = ctx.fresh(ID)
        module.KERNEL = self.text(module.KERNEL)
        module.CONFIG = {d: dict(module.CONFIG[d], **self.config.get(d, {})) for d in module.CONFIG}
        module.shared_bytes = functools.partial(self.shared_bytes, module, module.shared_bytes)
        return module

    def step(self, ctx) -> LadderStep:
        """The variant as `grader ladder` runs it: its backward with the solution's signature, and its
        main kernel (for the separate dQ pass: once both of its modules are built)."""
        common = dict(dims=self.dims, checked=self.check, emulated=self.emulated)
        if not self.separate_dq:
            module = self.module(ctx)
            return LadderStep(self.label, module.flash_backward_tc, kernel_of(module), **common)
        solution = ctx.solution(ID)

        def kernel(rt, d, dtype):
            main, _ = _dq_modules(rt, solution, dtype, tuple(solution.CONFIG[d].items()), d, tuple(self.edits))
            name = f"flash_backward_tc<{d}>"
            return main.get_function(name), name, solution.shared_bytes(d)
        return LadderStep(self.label, functools.partial(dq_pass_backward, solution, edits=self.edits), kernel,
                          **common)


BN64 = {128: dict(BLOCK_M=32, BLOCK_N=64), 64: dict(BLOCK_M=64, BLOCK_N=64)}
VARIANTS = [
    # The solution, and the kernels it was chosen among (built by NVRTC, as the grader builds them).
    Variant("the solution", on_previous=False),
    Variant("the previous solution"),
    Variant("B read across first", (B_ACROSS,)),
    Variant("B across, dQ fully unrolled", REF),
    Variant("B across, dQ unrolled 2 times", (dq_unroll(2), B_ACROSS)),
    Variant("dQ fully unrolled, dS reordered", (dq_unroll(None), DS_ORDER)),
    Variant("B across, dS reordered", (B_ACROSS, DS_ORDER)),
    Variant("dS reordered", (DS_ORDER,)),
    Variant("B across, Sᵀ and dPᵀ in two loops", (B_ACROSS, SPLIT_PRODUCTS)),
    Variant("B across, feature loop unrolled 4 times", (B_ACROSS, features_unroll(4))),
    Variant("B across, one barrier per step", (B_ACROSS, one_barrier), ds_halves=2),
    Variant("one barrier per step", (one_barrier,), ds_halves=2),
    # On the reference REF (dQ fully unrolled, B across): one change each.
    Variant("ref: Sᵀ and dPᵀ in two loops", REF + (SPLIT_PRODUCTS,)),
    Variant("ref: loops rolled (#pragma unroll 1)", REF + ROLLED),
    Variant("ref: dQ's key loop rolled", (dq_unroll(1), B_ACROSS)),
    Variant("ref: dQ in 4-byte reductions", REF + (SCALAR_ATOMICS,)),
    Variant("ref: dQ in 16-byte reductions (shuffles)", REF + (FLOAT4_ATOMICS,)),
    Variant("ref: no dQ reductions (diagnostic, dQ wrong)", REF + (NO_ATOMICS,), check=False),
    Variant("ref: separate dQ pass", REF, separate_dq=True),
    Variant("ref: BLOCK_M = 64 at d = 128", REF, config={128: dict(BLOCK_M=64)}, dims=(128,)),
    Variant("ref: BLOCK_M = 32 at d = 64", REF, config={64: dict(BLOCK_M=32)}, dims=(64,)),
    Variant("ref: BLOCK_N = 64, 4 warps, 2 blocks per SM", REF, config=BN64),
    Variant("ref: one barrier per step", REF + (one_barrier,), ds_halves=2),
    Variant("ref: K and V fragments in registers", REF + KV_IN_REGISTERS, dims=(64,)),
    Variant("ref: K and V in registers, BLOCK_M = 32", REF + KV_IN_REGISTERS, config={64: dict(BLOCK_M=32)}, dims=(64,)),
    # The 2026-11-26 solution's choices: two loops, both rolled, dS reordered, 4-byte reductions.
    Variant("the 2026-11-26 kernel's choices", (SPLIT_PRODUCTS,) + ROLLED + (DS_ORDER, SCALAR_ATOMICS)),
    # Tried after the solution (2026-11-26): the lesson's "ways on" (section 12), one change each.
    Variant("fewer address instructions (lane part once)", (LANE_PART,)),
    Variant("dQ in two accumulator sets", DQ_TWO_SETS),
    Variant("three stages", (three_stages,), stages=3),
    Variant("dQ by bulk asynchronous reductions", (BULK_DQ, bulk_end), dq_staged=True, emulated=False),
    Variant("FlashAttention-2's 2D warp tiling", (tiled_2d,), config={128: dict(BLOCK_M=64)}, ds_halves=2),
    # Their combinations, timed round after round against the previous solution (--rounds): all three
    # of lane part once, two dQ sets and dQ's loop fully unrolled became the solution's last change.
    Variant("dQ fully unrolled", (dq_unroll(None),)),
    Variant("lane part once, two dQ sets", (LANE_PART,) + DQ_TWO_SETS),
    Variant("lane part once, dQ fully unrolled", (LANE_PART, dq_unroll(None))),
    Variant("two dQ sets, dQ fully unrolled", DQ_TWO_SETS + (dq_unroll(None),)),
]
for _v in VARIANTS:
    if _v.on_previous:
        _v.edits = PREVIOUS + tuple(_v.edits)

def steps(ctx) -> list[LadderStep]:
    return [v.step(ctx) for v in VARIANTS]


def written(number: int, text: str) -> str:
    """The solution file's `text` with variant `number`'s text edits (numbered from 1, as listed); a
    variant that changes more than the kernel's text (tiles, shared memory, a second kernel) is refused."""
    v = VARIANTS[number - 1]
    if v.config or v.separate_dq or v.ds_halves != 1 or v.stages != 2 or v.dq_staged:
        raise GraderError(f"variant {number} ({v.label}) changes more than the kernel's text: not written")
    return v.text(text)


# ---- timing on a GPU ----------------------------------------------------------------------------------

def shapes(cases: str = "all") -> list[dict]:
    """The shapes timed: d = 128 and 64, float16 and bfloat16, full and causal; `full` without the causal
    mask, `fp16-full` float16 without it."""
    out = [dict(B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=d, dtype=dtype, causal=causal)
           for d in (128, 64) for dtype in ("float16", "bfloat16") for causal in (False, True)]
    if cases == "fp16-full":
        return [p for p in out if p["dtype"] == "float16" and not p["causal"]]
    return [p for p in out if not p["causal"]] if cases == "full" else out


def timing_inputs(rt, params, solution) -> dict:
    """q, k, v and dO from a standard normal (seeded by d), in the case's type (bfloat16 as its bits);
    o and lse from module 06's forward."""
    from ...attention.lowp import bf16_bits
    d, dtype = params["d"], params["dtype"]
    rng = np.random.default_rng(d)
    shape = (params["B"], params["H"], params["Nq"], d)
    x = {n: rng.standard_normal(shape).astype(np.float32) for n in ("q", "k", "v", "do")}
    dev = {n: rt.asarray(a.astype(np.float16) if dtype == "float16" else bf16_bits(a)) for n, a in x.items()}
    dev["scale"], dev["causal"] = d ** -0.5, params["causal"]
    dev["o"], dev["lse"] = solution("06_flash_tensor_cores").flash_tc(
        rt, dev["q"], dev["k"], dev["v"], dev["scale"], causal=params["causal"],
        dtype=dtype if dtype == "bfloat16" else None)
    return dev
