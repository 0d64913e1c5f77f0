"""The CPU emulator's WMMA API (<mma.h>, nvcuda::wmma): m16n16k16 products in __half and bf16 with
every layout, a 64x64 product through shared memory, fill_fragment and elementwise access, the
faults a warp can make with it, and the shapes and types it refuses.

The emulator's arithmetic is a model: each product exact, the sums in float32 in k order starting
from the accumulator (csrc/emu/wmma.h). `model_product` computes the same in NumPy, so results are
compared bit for bit; tests/test_gpu_mma.py compares the model with a tensor core. Every kernel
lives in this file, so messages name `test_emulator_wmma.py:<line>`; a marker comment
(`// @name`) lets a test find its line.
"""
from __future__ import annotations

import markers
import numpy as np
import pytest

from grader.attention.lowp import bf16_bits, bf16_value
from grader.runtimes.base import CompileError, KernelFault, register_origin

register_origin(__file__)


def at(marker: str) -> str:
    return markers.at(__file__, marker)


def inputs(rng, shape, dtype):
    """(array for the kernel, its values as float32) of random 16-bit numbers."""
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "float16":
        h = x.astype(np.float16)
        return h, h.astype(np.float32)
    b = bf16_bits(x)
    return b, bf16_value(b)


def model_product(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
    """C + A @ B as the emulator computes it: exact products, float32 sums in k order."""
    acc = C.astype(np.float32).copy()
    for k in range(A.shape[1]):
        acc = acc + np.outer(A[:, k], B[k, :]).astype(np.float32)   # products of halves: exact
    return acc


# ---------------------------------------------------------------------------------------------
# One 16x16x16 product: D = A B + C for each input type and layout. A, B, C and D sit in arrays
# with padded rows (ldm 24 for 16-bit values, 20 for float), in the memory order of the layout.

ONE = r"""
#include <mma.h>
using namespace nvcuda;

template <class T, class LA, class LB>
__device__ void product(const T* A, const T* B, const float* C, float* D, int c_col, int d_col)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::load_matrix_sync(a, A, 24);
    wmma::load_matrix_sync(b, B, 24);
    wmma::load_matrix_sync(c, C, 20, c_col ? wmma::mem_col_major : wmma::mem_row_major);
    wmma::mma_sync(c, a, b, c);
    wmma::store_matrix_sync(D, c, 20, d_col ? wmma::mem_col_major : wmma::mem_row_major);
}

// One kernel per type and layout (the launch finds kernels by their extern "C" signature).
#define PRODUCT(T, LA, LB) product<T, wmma::LA, wmma::LB>(A, B, C, D, c_col, d_col)
extern "C" __global__ void h_rr(const __half* A, const __half* B, const float* C,
    float* D, int c_col, int d_col) { PRODUCT(__half, row_major, row_major); }
extern "C" __global__ void h_rc(const __half* A, const __half* B, const float* C,
    float* D, int c_col, int d_col) { PRODUCT(__half, row_major, col_major); }
extern "C" __global__ void h_cr(const __half* A, const __half* B, const float* C,
    float* D, int c_col, int d_col) { PRODUCT(__half, col_major, row_major); }
extern "C" __global__ void h_cc(const __half* A, const __half* B, const float* C,
    float* D, int c_col, int d_col) { PRODUCT(__half, col_major, col_major); }
extern "C" __global__ void b_rr(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C,
    float* D, int c_col, int d_col) { PRODUCT(__nv_bfloat16, row_major, row_major); }
extern "C" __global__ void b_rc(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C,
    float* D, int c_col, int d_col) { PRODUCT(__nv_bfloat16, row_major, col_major); }
extern "C" __global__ void b_cr(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C,
    float* D, int c_col, int d_col) { PRODUCT(__nv_bfloat16, col_major, row_major); }
extern "C" __global__ void b_cc(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C,
    float* D, int c_col, int d_col) { PRODUCT(__nv_bfloat16, col_major, col_major); }
"""


def padded(M: np.ndarray, col_major: bool, ld: int) -> np.ndarray:
    """M (16 x 16) in an array of 16 rows of `ld` elements (the rest: garbage that must not count)."""
    out = np.full((16, ld), 7, M.dtype) if M.dtype != np.float32 else np.full((16, ld), 1e30,
                                                                             np.float32)
    out[:, :16] = M.T if col_major else M
    return out


@pytest.mark.parametrize("layout", ["rr", "rc", "cr", "cc"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_16x16x16_product_in_every_layout_is_the_model_bit_for_bit(rt, dtype, layout):
    mod = rt.compile(ONE)
    kern = mod.get_function(("h_" if dtype == "float16" else "b_") + layout)
    rng = np.random.default_rng(["rr", "rc", "cr", "cc"].index(layout))
    A, Av = inputs(rng, (16, 16), dtype)
    B, Bv = inputs(rng, (16, 16), dtype)
    C = rng.standard_normal((16, 16)).astype(np.float32)
    a_col, b_col = layout[0] == "c", layout[1] == "c"
    for c_col, d_col in ((0, 0), (1, 0), (0, 1)):
        D = np.full((16, 20), np.nan, np.float32)
        kern((1,), (32,), (padded(A, a_col, 24), padded(B, b_col, 24), padded(C, c_col, 20), D,
                           rt.int32(c_col), rt.int32(d_col)))
        got = D[:, :16].T if d_col else D[:, :16]
        want = model_product(Av, Bv, C)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got, Av.astype(np.float64) @ Bv + C, rtol=1e-5, atol=1e-5)
        assert np.isnan(D[:, 16:]).all()          # the padding is not written


# ---------------------------------------------------------------------------------------------
# 64x64 = (64x64)(64x64) by 4 warps, k in steps of 16 through shared memory tiles with padded rows
# (A tile 64 x 16 with ldm 24, B tile 16 x 64 with ldm 72); each warp owns a 16-row strip, four
# accumulators, and stores them straight to global memory.

CHAIN = r"""
#include <mma.h>
using namespace nvcuda;

template <class T>
__device__ void matmul64(const T* A, const T* B, float* C)
{
    __shared__ __align__(32) T As[64 * 24];
    __shared__ __align__(32) T Bs[16 * 72];
    const int tid = threadIdx.x, warp = tid / 32;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4];
    for (int n = 0; n < 4; ++n) wmma::fill_fragment(acc[n], 0.0f);
    for (int k0 = 0; k0 < 64; k0 += 16) {
        for (int i = tid; i < 64 * 16; i += 128) {
            As[(i / 16) * 24 + i % 16] = A[(i / 16) * 64 + k0 + i % 16];
            Bs[(i / 64) * 72 + i % 64] = B[(k0 + i / 64) * 64 + i % 64];
        }
        __syncthreads();
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::load_matrix_sync(a, As + 16 * warp * 24, 24);
        for (int n = 0; n < 4; ++n) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
            wmma::load_matrix_sync(b, Bs + 16 * n, 72);
            wmma::mma_sync(acc[n], a, b, acc[n]);
        }
        __syncthreads();
    }
    for (int n = 0; n < 4; ++n)
        wmma::store_matrix_sync(C + 16 * warp * 64 + 16 * n, acc[n], 64, wmma::mem_row_major);
}

extern "C" __global__ void matmul64_h(const __half* A, const __half* B, float* C)
{ matmul64(A, B, C); }
extern "C" __global__ void matmul64_b(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C)
{ matmul64(A, B, C); }
"""


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_64x64_product_over_k_steps_through_shared_memory(rt, dtype):
    kern = rt.compile(CHAIN).get_function("matmul64_h" if dtype == "float16" else "matmul64_b")
    rng = np.random.default_rng(4)
    A, Av = inputs(rng, (64, 64), dtype)
    B, Bv = inputs(rng, (64, 64), dtype)
    C = np.full((64, 64), np.nan, np.float32)
    kern((1,), (128,), (A, B, C))
    # The accumulators carry over the k-steps: one float32 sum in k order from 0 to 63.
    np.testing.assert_array_equal(C, model_product(Av, Bv, np.zeros((64, 64), np.float32)))
    np.testing.assert_allclose(C, Av.astype(np.float64) @ Bv, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# fill_fragment, num_elements and x[]: an accumulator filled with 1.5, A doubled elementwise, the
# product scaled elementwise by alpha; and the element-to-position mapping, probed.

ELEMENTWISE = r"""
#include <mma.h>
using namespace nvcuda;

template <class T>
__device__ void scaled(const T* A, const T* B, float* D, float alpha, int* counts)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(c, 1.5f);
    wmma::load_matrix_sync(a, A, 16);
    wmma::load_matrix_sync(b, B, 16);
    for (int i = 0; i < a.num_elements; ++i) a.x[i] = __hmul(a.x[i], T(2.0f));   // exact
    wmma::mma_sync(c, a, b, c);
    for (int i = 0; i < c.num_elements; ++i) c.x[i] *= alpha;
    wmma::store_matrix_sync(D, c, 16, wmma::mem_row_major);
    if (threadIdx.x == 0) {
        counts[0] = a.num_elements;
        counts[1] = b.num_elements;
        counts[2] = c.num_elements;
    }
}

extern "C" __global__ void scaled_h(const __half* A, const __half* B, float* D, float alpha,
                                    int* counts)
{ scaled(A, B, D, alpha, counts); }
extern "C" __global__ void scaled_b(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D,
                                    float alpha, int* counts)
{ scaled(A, B, D, alpha, counts); }

// Which lane and element hold which position: x[e] = 8 lane + e, stored.
extern "C" __global__ void probe(float* D)
{
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    for (int e = 0; e < c.num_elements; ++e) c.x[e] = (float)(8 * threadIdx.x + e);
    wmma::store_matrix_sync(D, c, 16, wmma::mem_row_major);
}
"""


@pytest.mark.parametrize("dtype, n_ab", [("float16", 16), ("bfloat16", 8)])
def test_fill_fragment_and_elementwise_scaling(rt, dtype, n_ab):
    mod = rt.compile(ELEMENTWISE)
    kern = mod.get_function("scaled_h" if dtype == "float16" else "scaled_b")
    rng = np.random.default_rng(7)
    A, Av = inputs(rng, (16, 16), dtype)
    B, Bv = inputs(rng, (16, 16), dtype)
    D = np.full((16, 16), np.nan, np.float32)
    counts = np.zeros(3, np.int32)
    alpha = np.float32(0.3)
    kern((1,), (32,), (A, np.ascontiguousarray(B.T), D, alpha, counts))
    assert counts.tolist() == [n_ab, n_ab, 8]     # as CUDA's <mma.h> declares them
    want = model_product(2 * Av, Bv, np.full((16, 16), 1.5, np.float32)) * alpha
    np.testing.assert_array_equal(D, want)


def test_the_accumulator_mapping_is_the_documented_one(rt):
    D = np.full((16, 16), np.nan, np.float32)
    rt.compile(ELEMENTWISE).get_function("probe")((1,), (32,), (D,))
    assert sorted(D.ravel().astype(int).tolist()) == list(range(256))   # each position once
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for e in range(8):
            row, col = g + 8 * ((e >> 1) & 1), 2 * t + (e & 1) + 8 * (e >> 2)
            assert D[row, col] == 8 * lane + e


# ---------------------------------------------------------------------------------------------
# Faults: lanes that do not all arrive, a bad ldm, a tile outside the array, lanes that disagree.

FAULTS = r"""
#include <mma.h>
using namespace nvcuda;

extern "C" __global__ void missing_lane(const __half* A, float* D)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(a, 1.0f);
    wmma::fill_fragment(b, 1.0f);
    wmma::fill_fragment(c, 0.0f);
    if (threadIdx.x == 31) return;                // BUG: lane 31 leaves
    wmma::mma_sync(c, a, b, c);                   // @missing
    wmma::store_matrix_sync(D, c, 16, wmma::mem_row_major);
}

extern "C" __global__ void diverged(const __half* A, float* D)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    if (threadIdx.x < 16)
        wmma::load_matrix_sync(a, A, 16);         // @low_half
    else
        wmma::load_matrix_sync(a, A + 256, 16);   // @high_half
    D[threadIdx.x] = __half2float(a.x[0]);
}

extern "C" __global__ void bad_ldm(const __half* A, float* D, int which)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(c, 0.0f);
    if (which == 0) wmma::load_matrix_sync(a, A, 12);                        // @ldm_half
    if (which == 1) wmma::store_matrix_sync(D, c, 18, wmma::mem_row_major);  // @ldm_float
}

extern "C" __global__ void before_the_wait(const float* X, float* D)
{
    __shared__ __align__(32) float s[16 * 16];
    for (int i = threadIdx.x; i < 64; i += 32)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"                // @copy
                     :: "r"((unsigned)__cvta_generic_to_shared(&s[4 * i])), "l"(X + 4 * i));
    asm volatile("cp.async.commit_group;\n" ::);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::load_matrix_sync(c, s, 16, wmma::mem_row_major);                        // @early_load
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    wmma::store_matrix_sync(D, c, 16, wmma::mem_row_major);
}

extern "C" __global__ void past_the_end(const __half* A, float* D, int row0, int per_lane)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    const __half* p = A + row0 * 16 + (per_lane ? 16 * (threadIdx.x % 2) : 0);
    wmma::load_matrix_sync(a, p, 16);                                        // @tile_load
    D[threadIdx.x] = __half2float(a.x[0]);
}
"""


def test_a_lane_that_returned_before_mma_sync_is_a_fault_at_its_line(rt):
    mod = rt.compile(FAULTS)
    A, D = np.zeros(512, np.float16), np.zeros(256, np.float32)
    with pytest.raises(KernelFault) as e:
        mod.get_function("missing_lane")((1,), (32,), (A, D))
    msg = str(e.value)
    assert msg.startswith(at("missing")), msg
    assert "wmma::mma_sync" in msg and "lanes 31" in msg and "already returned" in msg
    with pytest.raises(KernelFault) as e:
        mod.get_function("diverged")((1,), (32,), (A, D))
    msg = str(e.value)
    assert "different wmma::load_matrix_sync instructions" in msg
    assert at("low_half") in msg and at("high_half") in msg
    with pytest.raises(KernelFault) as e:                           # a warp of 16 threads
        mod.get_function("missing_lane")((1,), (16,), (A, D))
    msg = str(e.value)
    assert msg.startswith(at("missing")) and "warp-wide" in msg and "only 16" in msg


def test_an_ldm_that_is_not_16_bytes_is_refused_with_its_line(rt):
    kern = rt.compile(FAULTS).get_function("bad_ldm")
    A, D = np.zeros(512, np.float16), np.zeros(512, np.float32)
    with pytest.raises(KernelFault) as e:
        kern((1,), (32,), (A, D, rt.int32(0)))
    msg = str(e.value)
    assert msg.startswith(at("ldm_half")) and "ldm = 12 is not a multiple of 8" in msg
    with pytest.raises(KernelFault) as e:
        kern((1,), (32,), (A, D, rt.int32(1)))
    msg = str(e.value)
    assert msg.startswith(at("ldm_float")) and "ldm = 18 is not a multiple of 4" in msg


def test_a_tile_past_the_array_or_pointers_that_differ_are_faults_at_the_line(rt):
    kern = rt.compile(FAULTS).get_function("past_the_end")
    A, D = np.zeros((20, 16), np.float16), np.zeros(32, np.float32)
    kern((1,), (32,), (A, D, rt.int32(4), rt.int32(0)))       # rows 4-19: inside
    with pytest.raises(KernelFault) as e:
        kern((1,), (32,), (A, D, rt.int32(5), rt.int32(0)))   # rows 5-20: one row too far
    msg = str(e.value)
    assert msg.startswith(at("tile_load")) and "starts at element 80 of argument 1" in msg
    assert "(__half* A: 320 float16 elements, 640 bytes)" in msg and "16 element(s) past" in msg
    with pytest.raises(KernelFault) as e:
        kern((1,), (32,), (A, D, rt.int32(0), rt.int32(1)))
    msg = str(e.value)
    assert msg.startswith(at("tile_load")) and "same pointer, ldm and layout" in msg


def test_a_load_of_a_tile_that_cp_async_has_not_delivered_names_both_lines(rt):
    kern = rt.compile(FAULTS).get_function("before_the_wait")
    with pytest.raises(KernelFault) as e:
        kern((1,), (32,), (np.arange(256, dtype=np.float32), np.zeros(256, np.float32)))
    msg = str(e.value)
    assert msg.startswith(at("early_load")) and at("copy") in msg and "has not written yet" in msg


# ---------------------------------------------------------------------------------------------
# What the emulator refuses (valid CUDA that needs a GPU): at the line of the fragment.

REFUSED = {
    "m32n8k16": (r"""
#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void f(float* x)
{
    wmma::fragment<wmma::matrix_a, 32, 8, 16, __half, wmma::row_major> a;   // @m32n8k16
    wmma::fill_fragment(a, 0.0f);
}
""", "shape m16n16k16"),
    "tf32": (r"""
#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void f(float* x)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;   // @tf32
}
""", "shape m16n16k16"),
    "int8": (r"""
#include <mma.h>
using namespace nvcuda;
template <int M> __device__ void g()
{
    wmma::fragment<wmma::matrix_a, M, 16, 16, signed char, wmma::row_major> a;   // @int8
}
extern "C" __global__ void f(float* x)
{
    g<16>();
}
""", "signed/unsigned char"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_other_shapes_and_types_are_refused_with_their_line(rt, case):
    src, words = REFUSED[case]
    with pytest.raises(CompileError) as e:
        rt.compile(src)
    msg = str(e.value)
    assert msg.startswith(at(case) + ": CPU emulator: "), msg
    assert words in msg and "--backend gpu" in msg

