"""The CPU emulator's inline PTX: mma.sync, ldmatrix, cp.async and the shared-address conversions,
with the register layouts of the PTX ISA, and the faults a tensor-core kernel can make.

The fragments are built here in NumPy from the ISA's formulas (lane l is thread t = l % 4 of group
g = l // 4), independently of the emulator's C++. Every kernel lives in this file, so messages name
`test_emulator_ptx.py:<line>`; a marker comment (`// @name`) on a line lets a test find it.
"""
from __future__ import annotations

from pathlib import Path

import markers
import numpy as np
import pytest

from grader.attention.lowp import bf16_bits, bf16_value
from grader.runtimes.base import CompileError, KernelFault, LaunchError, register_origin
from grader.runtimes.cpu import ptx as cpu_ptx

register_origin(__file__)
HERE = Path(__file__).name
ASYNC_POISON = 0x7FA57FA5


def line_of(marker: str) -> int:
    return markers.line_of(__file__, marker)


def at(marker: str) -> str:
    return markers.at(__file__, marker)


# ---------------------------------------------------------------------------------------------
# mma.sync on one warp, fragments in and out through global memory.

MMA = r"""
extern "C" __global__ void mma_one(const unsigned* A, const unsigned* B, const float* C, float* D,
                                   int variant)
{
    const int l = threadIdx.x;
    unsigned a[4], b[2];
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) a[i] = A[l * 4 + i];
    for (int i = 0; i < 2; ++i) b[i] = B[l * 2 + i];
    for (int i = 0; i < 4; ++i) c[i] = C[l * 4 + i];
    if (variant == 0) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                       "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    } else if (variant == 1) {
        for (int i = 0; i < 4; ++i) d[i] = c[i];
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
            "  {%0, %1, %2, %3},"
            "  {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    }
    for (int i = 0; i < 4; ++i) D[l * 4 + i] = d[i];
}
"""


def a_fragments(A: np.ndarray) -> np.ndarray:
    """[32 lanes, 4 registers, 2 halves] of a 16 x K matrix (K = 16; K = 8 fills registers 0, 1)."""
    K = A.shape[1]
    out = np.zeros((32, 4, 2), A.dtype)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(K // 4):
            row = g + (8 if i & 1 else 0)
            col = 2 * t + (8 if i & 2 else 0)
            out[lane, i] = A[row, col:col + 2]
    return out


def b_fragments(B: np.ndarray) -> np.ndarray:
    """[32, 2, 2] of a K x 8 matrix: register i holds rows 2t + 8i, 2t + 8i + 1 of column g."""
    out = np.zeros((32, 2, 2), B.dtype)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(B.shape[0] // 8):
            out[lane, i] = B[2 * t + 8 * i:2 * t + 8 * i + 2, g]
    return out


def c_fragments(C: np.ndarray) -> np.ndarray:
    out = np.zeros((32, 4), np.float32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(4):
            out[lane, i] = C[g + (8 if i >= 2 else 0), 2 * t + (i & 1)]
    return out


def c_matrix(frag: np.ndarray) -> np.ndarray:
    out = np.zeros((16, 8), np.float32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(4):
            out[g + (8 if i >= 2 else 0), 2 * t + (i & 1)] = frag[lane, i]
    return out


@pytest.mark.parametrize("variant, dtype, K", [(0, "float16", 16), (1, "bfloat16", 16),
                                               (2, "float16", 8)])
def test_mma_sync_matches_numpy_with_the_isa_fragment_layout(rt, variant, dtype, K):
    kern = rt.compile(MMA).get_function("mma_one")
    rng = np.random.default_rng(variant)
    A = rng.standard_normal((16, K)).astype(np.float32)
    B = rng.standard_normal((K, 8)).astype(np.float32)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    if dtype == "float16":
        A16, B16 = A.astype(np.float16), B.astype(np.float16)
        Av, Bv = A16.astype(np.float32), B16.astype(np.float32)
        a_bits, b_bits = a_fragments(A16).view(np.uint32), b_fragments(B16).view(np.uint32)
    else:
        A16, B16 = bf16_bits(A), bf16_bits(B)
        Av, Bv = bf16_value(A16), bf16_value(B16)
        a_bits, b_bits = a_fragments(A16).view(np.uint32), b_fragments(B16).view(np.uint32)
    D = np.full((32, 4), np.nan, np.float32)
    kern((1,), (32,), (np.ascontiguousarray(a_bits).ravel(), np.ascontiguousarray(b_bits).ravel(),
                       c_fragments(C).ravel(), D.ravel(), rt.int32(variant)))
    ref = Av.astype(np.float64) @ Bv.astype(np.float64) + C
    np.testing.assert_allclose(c_matrix(D), ref, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# ldmatrix: each lane gives the address of a row chosen by `perm`, so the test sees which lane's
# address became which row of which matrix.

LDMATRIX = r"""
extern "C" __global__ void ldm(const int* perm, unsigned* out, int num, int trans)
{
    __shared__ __align__(16) unsigned short tile[32][8];
    const int l = threadIdx.x;
    for (int i = l; i < 256; i += 32) tile[i / 8][i % 8] = (unsigned short)(1000 + i);
    __syncwarp();
    unsigned addr = (unsigned)__cvta_generic_to_shared(&tile[perm[l]][0]);
    if (l >= 8 * num) addr = 0xFFFFFFF0u;   // not used by .x1 / .x2: must not matter
    unsigned r[4] = {0u, 0u, 0u, 0u};
    if (num == 1 && !trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr));
    if (num == 2 && !trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared::cta.b16 {%0, %1}, [%2];"
                     : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
    if (num == 4 && !trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
    if (num == 1 && trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(addr));
    if (num == 2 && trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                     : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
    if (num == 4 && trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
    for (int i = 0; i < 4; ++i) out[l * 4 + i] = r[i];
}

// The generic-address form (no .shared) reads the same.
extern "C" __global__ void ldm_generic(const int* perm, unsigned* out)
{
    __shared__ __align__(16) unsigned short tile[32][8];
    const int l = threadIdx.x;
    for (int i = l; i < 256; i += 32) tile[i / 8][i % 8] = (unsigned short)(1000 + i);
    __syncwarp();
    unsigned r[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(&tile[perm[l]][0]));
    for (int i = 0; i < 4; ++i) out[l * 4 + i] = r[i];
}
"""


def ldmatrix_expected(perm: np.ndarray, num: int, trans: bool) -> np.ndarray:
    tile = (1000 + np.arange(256)).reshape(32, 8)
    out = np.zeros((32, 4), np.uint32)
    for i in range(num):
        M = tile[perm[8 * i:8 * i + 8]]          # lane 8i + j gives row j of matrix i
        if trans:
            M = M.T
        for lane in range(32):
            row, col = lane // 4, 2 * (lane % 4)
            out[lane, i] = int(M[row, col]) | (int(M[row, col + 1]) << 16)
    return out


def test_ldmatrix_x1_x2_x4_and_trans_follow_the_isa_layout(rt):
    mod = rt.compile(LDMATRIX)
    kern = mod.get_function("ldm")
    perm = np.random.default_rng(3).permutation(32).astype(np.int32)
    for num in (1, 2, 4):
        for trans in (0, 1):
            out = np.zeros((32, 4), np.uint32)
            kern((1,), (32,), (perm, out.ravel(), rt.int32(num), rt.int32(trans)))
            np.testing.assert_array_equal(out, ldmatrix_expected(perm, num, bool(trans)),
                                          err_msg=f"x{num} trans={trans}")
    out = np.zeros((32, 4), np.uint32)
    mod.get_function("ldm_generic")((1,), (32,), (perm, out.ravel()))
    np.testing.assert_array_equal(out, ldmatrix_expected(perm, 4, False))


# ---------------------------------------------------------------------------------------------
# A 64 x 64 x 64 product: cp.async into shared memory, ldmatrix, a chain of m16n8k16.

CHAIN = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#if BF16
typedef __nv_bfloat16 elem;
#define MMA_TYPES "bf16.bf16"
#else
typedef __half elem;
#define MMA_TYPES "f16.f16"
#endif

__device__ __forceinline__ unsigned smem_u32(const void* p)
{
    unsigned a;
    asm("{ .reg .u64 u64addr; cvta.to.shared.u64 u64addr, %1; cvt.u32.u64 %0, u64addr; }\n"
        : "=r"(a) : "l"(p));
    return a;
}

// C[64][64] = A[64][64] B[64][64], all row-major; 4 warps, warp w computes rows 16w .. 16w + 15.
extern "C" __global__ void matmul64(const elem* A, const elem* B, float* C)
{
    __shared__ __align__(128) elem sA[64 * 64];
    __shared__ __align__(128) elem sB[64 * 64];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    for (int c = tid; c < 64 * 64 / 8; c += blockDim.x) {    // 16-byte chunks
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                     :: "r"(smem_u32(sA + 8 * c)), "l"(A + 8 * c));
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n"
                     :: "r"((unsigned)__cvta_generic_to_shared(sB + 8 * c)), "l"(B + 8 * c));
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
    float acc[8][4];
    for (int n = 0; n < 8; ++n)
        for (int e = 0; e < 4; ++e) acc[n][e] = 0.f;
    for (int k0 = 0; k0 < 64; k0 += 16) {
        unsigned a[4];
        const elem* pa = sA + (16 * warp + lane % 16) * 64 + k0 + (lane / 16) * 8;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3]) : "r"(smem_u32(pa)));
        for (int n0 = 0; n0 < 64; n0 += 16) {
            // Rows k0 .. k0 + 15 of B at columns n0 .. n0 + 7 (lanes 0-15), n0 + 8 .. (16-31),
            // transposed: b fragments of two 8-column tiles.
            unsigned b[4];
            const elem* pb = sB + (k0 + lane % 16) * 64 + n0 + (lane / 16) * 8;
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                         : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3]) : "r"(smem_u32(pb)));
            for (int h = 0; h < 2; ++h) {
                float* d = acc[n0 / 8 + h];
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_TYPES ".f32 "
                             "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]),
                               "r"(b[2 * h]), "r"(b[2 * h + 1]));
            }
        }
    }
    const int g = lane / 4, t = lane % 4;
    for (int n = 0; n < 8; ++n)
        for (int e = 0; e < 4; ++e)
            C[(16 * warp + g + 8 * (e / 2)) * 64 + 8 * n + 2 * t + e % 2] = acc[n][e];
}
"""


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_chain_of_mma_reads_a_64x64_product_from_shared_memory(rt, dtype):
    bf = dtype == "bfloat16"
    kern = rt.compile(CHAIN, options=(f"-DBF16={int(bf)}",)).get_function("matmul64")
    rng = np.random.default_rng(4)
    A = rng.standard_normal((64, 64)).astype(np.float32)
    B = rng.standard_normal((64, 64)).astype(np.float32)
    if bf:
        Ab, Bb = bf16_bits(A), bf16_bits(B)
        Av, Bv = bf16_value(Ab), bf16_value(Bb)
    else:
        Ab, Bb = A.astype(np.float16), B.astype(np.float16)
        Av, Bv = Ab.astype(np.float32), Bb.astype(np.float32)
    C = np.full((64, 64), np.nan, np.float32)
    kern((1,), (128,), (Ab, Bb, C))
    np.testing.assert_allclose(C, Av.astype(np.float64) @ Bv, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# cp.async: double buffering, zero fill, and what a read before the wait sees.

ASYNC = r"""
// out[i] = 2 x[i] through shared memory, 256 floats a tile, the next tile copied while this one
// is used. Thread t copies 16 bytes at 4t of each tile and reads element 255 - t and 127 - t (copied
// by other threads). The tail of the last tile is zero-filled (src-size); sums[tile] checks it.
extern "C" __global__ void double_buffer(const float* x, float* out, float* sums, int n)
{
    __shared__ __align__(16) float buf[2][256];
    const int t = threadIdx.x;   // 64 threads
    const int tiles = (n + 255) / 256;
    auto issue = [&](int tile) {
        const int i = tile * 256 + 4 * t;
        const int bytes = i + 4 <= n ? 16 : (i < n ? 4 * (n - i) : 0);
        const float* src = bytes ? x + i : x;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                     :: "r"((unsigned)__cvta_generic_to_shared(&buf[tile % 2][4 * t])), "l"(src),
                        "r"(bytes));
        asm volatile("cp.async.commit_group;\n" ::);
    };
    issue(0);
    for (int tile = 0; tile < tiles; ++tile) {
        if (tile + 1 < tiles) {
            issue(tile + 1);
            asm volatile("cp.async.wait_group 1;\n" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group %0;\n" :: "n"(0) : "memory");
        }
        __syncthreads();
        const float* b = buf[tile % 2];
        const int js[4] = {255 - t, 127 - t, 191 - t, 63 - t};
        for (int k = 0; k < 4; ++k) {
            const int j = js[k], i = tile * 256 + j;
            if (i < n) out[i] = 2.f * b[j];
        }
        if (t == 0) {
            float s = 0.f;
            for (int j = 0; j < 256; ++j) s += b[j];
            sums[tile] = s;
        }
        __syncthreads();
    }
}

// 4- and 8-byte copies (.ca), and what a thread's own destinations hold before and after each
// wait (x: 128 words; early [32], mid [32][3], late [32][4]).
extern "C" __global__ void before_wait(const unsigned* x, unsigned* early, unsigned* mid,
                                       unsigned* late)
{
    __shared__ __align__(16) unsigned s0[32], s1[64], s2[32];
    const int t = threadIdx.x;   // 32 threads
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n"
                 :: "r"((unsigned)__cvta_generic_to_shared(&s0[t])), "l"(x + t));
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n"
                 :: "r"((unsigned)__cvta_generic_to_shared(&s1[2 * t])), "l"(x + 32 + 2 * t));
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n"          // never committed
                 :: "r"((unsigned)__cvta_generic_to_shared(&s2[t])), "l"(x + 96 + t));
    early[t] = s0[t];                                      // before any wait: the poison
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    mid[3 * t] = s0[t];                                    // group 0 done, group 1 not yet
    mid[3 * t + 1] = s1[2 * t];
    mid[3 * t + 2] = s1[2 * t + 1];
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    late[4 * t] = s0[t];
    late[4 * t + 1] = s1[2 * t];
    late[4 * t + 2] = s1[2 * t + 1];
    late[4 * t + 3] = s2[t];
}

// A tile read with ldmatrix before the copies into it are waited for.
extern "C" __global__ void ldmatrix_too_early(const unsigned short* x, unsigned* out)
{
    __shared__ __align__(16) unsigned short tile[8][8];
    const int l = threadIdx.x;
    if (l < 8)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"    // @issue
                     :: "r"((unsigned)__cvta_generic_to_shared(&tile[l][0])), "l"(x + 8 * l));
    asm volatile("cp.async.commit_group;\n" ::);
    unsigned r;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"   // @early_ldmatrix
                 : "=r"(r) : "r"((unsigned)__cvta_generic_to_shared(&tile[l % 8][0])));
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    out[l] = r;
}

// Rows copied by the lanes of warp `copier` and read with ldmatrix by warp 0 after every wait;
// sync 0: no barrier between, 1: __syncwarp(), 2: __syncthreads().
extern "C" __global__ void ldmatrix_after_wait(const unsigned short* x, unsigned* out, int copier, int sync)
{
    __shared__ __align__(16) unsigned short tile[8][8];
    const int l = threadIdx.x % 32;
    if (threadIdx.x / 32 == copier && l < 8)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"    // @copy
                     :: "r"((unsigned)__cvta_generic_to_shared(&tile[l][0])), "l"(x + 8 * l));
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    if (sync == 1) __syncwarp();
    if (sync == 2) __syncthreads();
    if (threadIdx.x / 32 == 0) {
        unsigned r;
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"   // @late_ldmatrix
                     : "=r"(r) : "r"((unsigned)__cvta_generic_to_shared(&tile[l % 8][0])));
        out[l] = r;
    }
}
"""


def test_cp_async_double_buffering_with_zero_fill(rt):
    kern = rt.compile(ASYNC).get_function("double_buffer")
    n = 998                                           # 4 tiles, the last partial
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    sums = np.full(4, np.nan, np.float32)
    kern((1,), (64,), (x, out, sums, rt.int32(n)))
    np.testing.assert_array_equal(out, 2 * x)
    padded = np.zeros(1024, np.float32)
    padded[:n] = x
    np.testing.assert_allclose(sums, padded.reshape(4, 256).sum(1), rtol=1e-5, atol=1e-5)


def test_a_read_before_the_wait_sees_the_poison(rt):
    kern = rt.compile(ASYNC).get_function("before_wait")
    x = np.arange(1, 129, dtype=np.uint32)
    early, mid, late = (np.zeros(n, np.uint32) for n in (32, 96, 128))
    kern((1,), (32,), (x, early, mid, late))
    assert (early == ASYNC_POISON).all()
    mid, late = mid.reshape(32, 3), late.reshape(32, 4)
    np.testing.assert_array_equal(mid[:, 0], x[:32])
    # Group 1 is still in flight after wait_group 1: its destination holds the poison.
    assert (mid[:, 1:] == ASYNC_POISON).all()
    np.testing.assert_array_equal(late[:, 0], x[:32])
    np.testing.assert_array_equal(late[:, 1:3].ravel(), x[32:96])
    np.testing.assert_array_equal(late[:, 3], x[96:])            # wait_all: uncommitted too
    # The poison is a NaN whether the bytes are read as float, half or bfloat16.
    p = np.array([ASYNC_POISON], np.uint32)
    assert np.isnan(p.view(np.float32)).all() and np.isnan(p.view(np.float16)).all()
    assert np.isnan(bf16_value(p.view(np.uint16))).all()


def test_ldmatrix_before_the_wait_is_reported_with_both_lines(rt):
    kern = rt.compile(ASYNC).get_function("ldmatrix_too_early")
    with pytest.raises(KernelFault) as e:
        kern((1,), (32,), (np.arange(64, dtype=np.uint16), np.zeros(32, np.uint32)))
    msg = str(e.value)
    assert msg.startswith(at("early_ldmatrix")) and at("issue") in msg
    assert "has not written yet" in msg and "has not yet passed a cp.async.wait_group" in msg


@pytest.mark.parametrize("copier,sync,ok", [(0, 0, False), (0, 1, True), (1, 1, False), (1, 2, True)])
def test_a_copy_is_other_threads_to_read_only_after_a_barrier_that_follows_its_wait(rt, copier, sync, ok):
    # A wait makes a cp.async visible to the thread that issued it; the warp's other lanes need a
    # __syncwarp() after it, another warp a __syncthreads().
    kern = rt.compile(ASYNC).get_function("ldmatrix_after_wait")
    x = np.arange(64, dtype=np.uint16)
    out = np.zeros(32, np.uint32)
    args = (x, out, rt.int32(copier), rt.int32(sync))
    if ok:
        kern((1,), (64,), args)
        l = np.arange(32)
        lo, hi = x.reshape(8, 8)[l // 4, 2 * (l % 4)], x.reshape(8, 8)[l // 4, 2 * (l % 4) + 1]
        np.testing.assert_array_equal(out, lo.astype(np.uint32) | (hi.astype(np.uint32) << 16))
        return
    with pytest.raises(KernelFault) as e:
        kern((1,), (64,), args)
    msg = str(e.value)
    assert msg.startswith(at("late_ldmatrix")) and at("copy") in msg
    assert ("passed no __syncwarp() or block barrier" if copier == 0 else "passed no block barrier (__syncthreads())") in msg


# ---------------------------------------------------------------------------------------------
# Faults: a warp that does not execute mma.sync together, addresses outside shared memory.

FAULTS = r"""
#define MMA_ZERO(d)                                                                         \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "                       \
                 "{%0,%1,%2,%3}, {%4,%4,%4,%4}, {%4,%4}, {%0,%1,%2,%3};"                    \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(0u))

extern "C" __global__ void mma_after_return(float* out)
{
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    if (threadIdx.x >= 20) return;             // BUG: lanes 20-31 leave
    MMA_ZERO(d);                               // @mma_missing
    out[threadIdx.x] = d[0];
}

extern "C" __global__ void mma_diverged(float* out)
{
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    if (threadIdx.x < 16) {
        MMA_ZERO(d);                           // @mma_low
    } else {
        MMA_ZERO(d);                           // @mma_high
    }
    out[threadIdx.x] = d[0];
}

extern "C" __global__ void ldmatrix_outside(unsigned* out, int how)
{
    __shared__ __align__(16) unsigned short tile[16][8];
    const int l = threadIdx.x;
    tile[l % 16][l / 16] = 1;
    unsigned a = (unsigned)__cvta_generic_to_shared(&tile[l % 16][0]);
    if (how == 0 && l == 5) a += 64 * 1024;    // far past the end of shared memory
    if (how == 1 && l == 9) a += 2;            // not 16-byte aligned
    unsigned r[2];
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"   // @ldm_outside
                 : "=r"(r[0]), "=r"(r[1]) : "r"(a));
    out[l] = r[0] + r[1];
}

__device__ __forceinline__ unsigned load_row(const unsigned short* row)
{
    unsigned r;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"       // @ldm_helper
                 : "=r"(r) : "r"((unsigned)__cvta_generic_to_shared(row)));
    return r;
}

extern "C" __global__ void ldmatrix_in_a_helper(unsigned* out)
{
    __shared__ __align__(16) unsigned short rows[8][8];
    const int l = threadIdx.x;
    rows[l % 8][l / 4] = 0;
    __syncwarp();
    out[l] = load_row(&rows[l % 8][0] + (l == 3 ? 1 : 0));                    // @ldm_call
}

extern "C" __global__ void not_shared(const float* x, float* out)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(x);   // @cvta_global
    out[threadIdx.x] = (float)a;
}

extern "C" __global__ void cp_async_past_the_end(const float* x, float* out, int n)
{
    __shared__ __align__(16) float s[128];
    const int t = threadIdx.x;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"                // @cp_oob
                 :: "r"((unsigned)__cvta_generic_to_shared(&s[4 * t])), "l"(x + 4 * t));
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    if (4 * t < n) out[t] = s[4 * t];
}
"""


def test_mma_with_lanes_that_returned_is_a_fault_at_its_line(rt):
    mod = rt.compile(FAULTS)
    with pytest.raises(KernelFault) as e:
        mod.get_function("mma_after_return")((1,), (32,), (np.zeros(32, np.float32),))
    msg = str(e.value)
    assert msg.startswith(at("mma_missing"))
    assert "wait in mma.sync" in msg and "lanes 20-31" in msg and "already returned" in msg
    with pytest.raises(KernelFault) as e:
        mod.get_function("mma_diverged")((1,), (32,), (np.zeros(32, np.float32),))
    msg = str(e.value)
    assert "different mma.sync instructions" in msg
    assert at("mma_low") in msg and at("mma_high") in msg


def test_mma_needs_a_whole_warp(rt):
    mod = rt.compile(FAULTS)
    with pytest.raises(KernelFault) as e:
        mod.get_function("mma_after_return")((1,), (16,), (np.zeros(32, np.float32),))
    msg = str(e.value)
    assert msg.startswith(at("mma_missing")) and "warp-wide" in msg and "only 16" in msg


def test_ldmatrix_outside_shared_memory_or_misaligned_faults_at_its_line(rt):
    kern = rt.compile(FAULTS).get_function("ldmatrix_outside")
    out = np.zeros(32, np.uint32)
    with pytest.raises(KernelFault) as e:
        kern((1,), (32,), (out, rt.int32(0)))
    msg = str(e.value)
    assert msg.startswith(at("ldm_outside")) and "lane 5" in msg
    assert "outside the block's shared memory" in msg
    with pytest.raises(KernelFault) as e:
        kern((1,), (32,), (out, rt.int32(1)))
    msg = str(e.value)
    assert msg.startswith(at("ldm_outside")) and "lane 9" in msg and "multiple of 16" in msg
    kern((1,), (32,), (out, rt.int32(2)))                       # all addresses good
    # In a helper function: the message names the helper's line and the kernel's call.
    with pytest.raises(KernelFault) as e:
        rt.compile(FAULTS).get_function("ldmatrix_in_a_helper")((1,), (32,), (out,))
    msg = str(e.value)
    assert msg.startswith(at("ldm_helper")) and "lane 3" in msg
    assert f"in a function called from {at('ldm_call')}" in msg


def test_cvta_of_a_global_pointer_and_cp_async_past_an_array(rt):
    mod = rt.compile(FAULTS)
    with pytest.raises(KernelFault) as e:
        mod.get_function("not_shared")((1,), (32,), (np.zeros(4, np.float32),
                                                      np.zeros(32, np.float32)))
    msg = str(e.value)
    assert msg.startswith(at("cvta_global")) and "does not point into" in msg
    x = np.zeros(100, np.float32)
    with pytest.raises(KernelFault) as e:
        mod.get_function("cp_async_past_the_end")((1,), (32,), (x, np.zeros(32, np.float32),
                                                                rt.int32(100)))
    msg = str(e.value)
    assert at("cp_oob") in msg and "out-of-bounds read of argument 1" in msg


# ---------------------------------------------------------------------------------------------
# What is refused at compile time, with the instruction and the line.

REFUSED = {
    "membar": ('extern "C" __global__ void f(float* x) {\n  asm volatile("membar.gl;");\n}\n',
               "membar.gl", 2),
    "tcgen05": ('extern "C" __global__ void f(float* x) {\n  float d = 0.f;\n'
                '  asm volatile("{\\n"\n'
                '               "tcgen05.fence::before_thread_sync;\\n"\n'
                '               "}\\n" :: "f"(d));\n}\n',
                "tcgen05.fence::before_thread_sync", 4),
    "f16acc": ('extern "C" __global__ void f(unsigned* x) {\n  unsigned d[2], a = 0;\n'
               '  asm("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%2,%2,%2}, '
               '{%2,%2}, {%2,%2};" : "=r"(d[0]), "=r"(d[1]) : "r"(a));\n}\n',
               "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16", 3),
}
# WMMA is supported now; its refused shapes and types are tested in tests/test_emulator_wmma.py.


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_unsupported_inline_ptx_is_refused_with_the_instruction_and_its_line(rt, case):
    src, instr, line = REFUSED[case]
    with pytest.raises(CompileError) as e:
        rt.compile(src)
    msg = str(e.value)
    assert f"kernel.cu:{line}:" in msg and "not supported" in msg
    assert f"inline PTX `{instr}" in msg and "mma.sync" in msg


def test_rewrite_keeps_every_line_and_reads_the_operand_forms():
    src = ('#define W() asm volatile("cp.async.wait_all;" \\\n'
           '                      ::: "memory")\n'
           'void f(float* d, const unsigned* a) {\n'
           '  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "   // m16n8k8\n'
           '               "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"\n'
           '               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]),\n'
           '                 "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]));\n'
           '  W();\n'
           '  asm("" ::: "memory");\n'
           '}\n')
    out = cpu_ptx.rewrite(src, lambda pos: f"k.cu:{src.count(chr(10), 0, pos) + 1}")
    assert out.count("\n") == src.count("\n")
    lines = out.splitlines()
    assert lines[0].endswith("\\") and "cp_async_wait_all" in lines[0]
    assert "__cudaemu_ptx::mma(2," in lines[3] and "store<4>(&(d[3])" in lines[3]
    assert lines[8].strip().startswith('__asm__ __volatile__("" ::: "memory")')
    with pytest.raises(ValueError) as e:
        cpu_ptx.rewrite('void f() {\n  asm("cp.async.commit_group;\\n"\n      "bar.red.popc.u32 0;");\n}\n',
                        lambda pos: f"k.cu:{pos}")
    assert "inline PTX `bar.red.popc.u32 0`" in str(e.value)


# ---------------------------------------------------------------------------------------------
# Registers: packing, conversions, %laneid, predicates; the fp16 / bf16 helpers of cuda_fp16.h.

REGS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" __global__ void regs(const float* x, unsigned* out)
{
    __shared__ __align__(16) float s[32];
    const int t = threadIdx.x;
    const float lo = x[2 * t], hi = x[2 * t + 1];
    unsigned p, q, b, lane, addr;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(p) : "f"(hi), "f"(lo));    // the first goes high
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(b) : "f"(hi), "f"(lo));
    __half2 h2 = __floats2half2_rn(lo, hi);
    unsigned h2_bits;
    memcpy(&h2_bits, &h2, 4);
    __nv_bfloat162 b2 = __floats2bfloat162_rn(lo, hi);
    const unsigned short l16 = __half_as_ushort(__low2half(h2)), h16 = __half_as_ushort(__high2half(h2));
    asm("mov.b32 %0, {%1, %2};" : "=r"(q) : "h"(l16), "h"(h16));
    unsigned short u0, u1;
    asm("mov.b32 {%0, %1}, %2;" : "=h"(u0), "=h"(u1) : "r"(q));
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    asm("{\n\t.reg .u64 a64;\n\tcvta.to.shared.u64 a64, %1;\n\tcvt.u32.u64 %0, a64;\n\t}"
        : "=r"(addr) : "l"(&s[t]));
    s[t] = -1.f;
    // A predicated copy: only odd lanes copy (from a global address made by cvta.to.global).
    asm volatile("{\n .reg .pred p;\n .reg .u64 g;\n setp.ne.b32 p, %0, 0;\n"
                 " cvta.to.global.u64 g, %2;\n"
                 " @p cp.async.ca.shared.global [%1], [g], 4;\n}\n"
                 :: "r"(t & 1), "r"(addr), "l"(__cvta_generic_to_global(x + t)));
    asm volatile("cp.async.wait_all;" ::: "memory");
    unsigned* o = out + 12 * t;
    o[0] = p;
    o[1] = h2_bits;
    o[2] = b;
    o[3] = *reinterpret_cast<unsigned*>(&b2);
    o[4] = q;
    o[5] = u0 | ((unsigned)u1 << 16);
    o[6] = lane;
    o[7] = addr == (unsigned)__cvta_generic_to_shared(&s[t]);
    o[8] = __float_as_uint(s[t]);
    o[9] = __float_as_uint(__low2float(h2) + __high2float(__float22half2_rn(make_float2(lo, hi))));
    o[10] = __float_as_uint(__bfloat162float(__float2bfloat16(lo)) + __low2float(b2) +
                            __high2float(__halves2bfloat162(b2.x, __float2bfloat16_rn(hi))));
    o[11] = __float_as_uint(__half2float(__float2half_rn(hi)) +
                            __half2float(__halves2half2(__float2half(lo), h2.y).y));
}

// uint4 loads of 8 halves and of 8 bfloat16, into registers and back.
extern "C" __global__ void copy8(const __half* h, const __nv_bfloat16* b, __half* ho,
                                 __nv_bfloat16* bo, float* sum)
{
    const int t = threadIdx.x;
    const uint4 vh = *reinterpret_cast<const uint4*>(h + 8 * t);
    const uint4 vb = *reinterpret_cast<const uint4*>(b + 8 * t);
    *reinterpret_cast<uint4*>(ho + 8 * t) = vh;
    *reinterpret_cast<uint4*>(bo + 8 * t) = vb;
    const __half2* h2 = reinterpret_cast<const __half2*>(&vh);
    const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&vb);
    float s = 0.f;
    for (int i = 0; i < 4; ++i) s += __low2float(h2[i]) + __high2float(h2[i]) +
                                     __low2float(b2[i]) + __high2float(b2[i]);
    sum[t] = s;
}
"""


def test_register_packing_conversions_and_fp16_helpers(rt):
    kern = rt.compile(REGS).get_function("regs")
    x = np.random.default_rng(7).standard_normal(64).astype(np.float32)
    out = np.zeros((32, 12), np.uint32)
    kern((1,), (32,), (x, out.ravel()))
    lo, hi = x[0::2], x[1::2]
    lo16, hi16 = lo.astype(np.float16).view(np.uint16), hi.astype(np.float16).view(np.uint16)
    f16x2 = lo16.astype(np.uint32) | (hi16.astype(np.uint32) << 16)
    bf16x2 = bf16_bits(lo).astype(np.uint32) | (bf16_bits(hi).astype(np.uint32) << 16)
    np.testing.assert_array_equal(out[:, 0], f16x2)                  # cvt.rn.f16x2.f32
    np.testing.assert_array_equal(out[:, 1], f16x2)                  # __floats2half2_rn
    np.testing.assert_array_equal(out[:, 2], bf16x2)                 # cvt.rn.bf16x2.f32
    np.testing.assert_array_equal(out[:, 3], bf16x2)                 # __floats2bfloat162_rn
    np.testing.assert_array_equal(out[:, 4], f16x2)                  # mov.b32 {lo, hi}
    np.testing.assert_array_equal(out[:, 5], f16x2)                  # mov.b32 {a, b}, r
    np.testing.assert_array_equal(out[:, 6], np.arange(32))          # %laneid
    assert (out[:, 7] == 1).all()                                    # cvta idiom == intrinsic
    t = np.arange(32)
    expect = np.where(t % 2 == 1, x[:32], np.float32(-1)).astype(np.float32).view(np.uint32)
    np.testing.assert_array_equal(out[:, 8], expect)                 # @p cp.async
    h = lambda v: v.astype(np.float16).astype(np.float32)            # noqa: E731
    np.testing.assert_array_equal(out[:, 9].view(np.float32), h(lo) + h(hi))
    b = lambda v: bf16_value(bf16_bits(v))                           # noqa: E731
    np.testing.assert_array_equal(out[:, 10].view(np.float32), (b(lo) + b(lo)) + b(hi))
    np.testing.assert_array_equal(out[:, 11].view(np.float32), h(hi) + h(hi))


def test_half_and_bfloat16_arrays_are_accepted_and_wrong_dtypes_refused(rt):
    kern = rt.compile(REGS).get_function("copy8")
    rng = np.random.default_rng(8)
    h = rng.standard_normal(256).astype(np.float16)
    b = bf16_bits(rng.standard_normal(256).astype(np.float32))
    ho, bo, s = np.zeros_like(h), np.zeros_like(b), np.zeros(32, np.float32)
    kern((1,), (32,), (h, b, ho, bo, s))
    np.testing.assert_array_equal(ho, h)
    np.testing.assert_array_equal(bo, b)
    ref = (h.astype(np.float32) + bf16_value(b)).reshape(32, 8)
    np.testing.assert_allclose(s, ref.sum(1), rtol=1e-5, atol=1e-5)
    with pytest.raises(LaunchError) as e:
        kern((1,), (32,), (h.astype(np.float32), b, ho, bo, s))
    assert "points to __half" in str(e.value) and "float16" in str(e.value)
    with pytest.raises(LaunchError) as e:
        kern((1,), (32,), (h, bf16_value(b), ho, bo, s))
    msg = str(e.value)
    assert "points to __nv_bfloat16" in msg and "uint16" in msg


def test_ml_dtypes_bfloat16_arrays_are_accepted(rt):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    kern = rt.compile(REGS).get_function("copy8")
    h = np.zeros(256, np.float16)
    b = np.linspace(-4, 4, 256).astype(ml_dtypes.bfloat16)
    ho, bo, s = np.zeros_like(h), np.zeros_like(b), np.zeros(32, np.float32)
    kern((1,), (32,), (h, b, ho, bo, s))
    np.testing.assert_array_equal(bo.view(np.uint16), b.view(np.uint16))
