"""On a real GPU (skipped elsewhere): the emulator's tensor-core arithmetic against a tensor core's.

The same kernels run on the GPU (get_runtime("gpu")) and on the CPU emulator, on the same random
inputs (fixed seeds), one problem per block of one warp:
  - mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16} through inline PTX, the fragments loaded by
    hand in the kernel with the PTX ISA's register layout (so a layout the emulator got wrong
    shows up as large errors);
  - wmma::mma_sync at m16n16k16 ({__half, __nv_bfloat16} inputs, float accumulator).

How the emulator rounds (csrc/emu/mma.h, csrc/emu/wmma.h): each product of two 16-bit inputs is
exact in float32 (at most 11 + 11 significant bits), and d = c + a0 b0 + a1 b1 + ... + a15 b15 is
summed in float32, rounding to nearest after each addition, in k order. A tensor core also
multiplies exactly, but it adds several products at once with its own alignment and internal
precision (measurements on V100/A100 found the aligned significands truncated, not rounded),
so the last bits of a GPU result may differ from the emulator's.

Tolerance, per output element: |x - y| <= 2^-16 * S with S = |c| + sum_k |a_k b_k|. The emulator's
error against the exact value is at most 16 roundings of at most 2^-24 S each (2^-20 S); a tensor
core that truncates each of the 17 aligned addends loses under 2^-23 S for each (about 2^-18.9
S). Their sum, about 2^-18.4 S, is under a fifth of the tolerance, while the mistakes this test
is for are far above it: a wrong fragment layout gives errors of order S, a sum kept in 16 bits
about 2^-11 S (__half) or 2^-8 S (bf16), inputs rounded differently about 2^-12 S.

Seen on an H100 (CuPy 14, CUDA 13), both instructions and both input types, 4 x 64 problems each:
the GPU within 2^-22.3 S of the exact value, the emulator within 2^-21.3 S, the two at most
2^-21.1 S apart (36-42% of the elements bit for bit equal). The wmma cases skip where CuPy's CUDA
headers lack crt/mma.h (the nvidia-cuda-runtime wheel alone); they ran there with the toolkit's.
"""
from __future__ import annotations

import numpy as np
import pytest

from grader.runtimes.base import CompileError, register_origin

pytestmark = pytest.mark.gpu
register_origin(__file__)

BLOCKS = 64          # independent problems per launch
TOL = 2.0 ** -16     # times |c| + sum |a b|, see above

MMA_KERNEL = r"""
__device__ unsigned pack(unsigned short lo, unsigned short hi)
{
    return (unsigned)lo | ((unsigned)hi << 16);
}

// D (16 x 8) = A (16 x 16) B (16 x 8) + C, all row-major, block b's at A + 256 b, B + 128 b ...
// Lane l is thread t = l % 4 of group g = l / 4 (PTX ISA, "Matrix fragments for mma.m16n8k16").
extern "C" __global__ void mma_m16n8k16(const unsigned short* A, const unsigned short* B,
                                        const float* C, float* D, int bf16)
{
    const int l = threadIdx.x, g = l / 4, t = l % 4;
    A += 256 * blockIdx.x;
    B += 128 * blockIdx.x;
    C += 128 * blockIdx.x;
    D += 128 * blockIdx.x;
    unsigned a[4], b[2];
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i & 1), col = 2 * t + 8 * (i >> 1);
        a[i] = pack(A[row * 16 + col], A[row * 16 + col + 1]);
    }
    for (int i = 0; i < 2; ++i) {
        const int k = 2 * t + 8 * i;
        b[i] = pack(B[k * 8 + g], B[(k + 1) * 8 + g]);
    }
    for (int i = 0; i < 4; ++i) c[i] = C[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
    if (bf16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                       "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                       "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    }
    for (int i = 0; i < 4; ++i) D[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = d[i];
}
"""

WMMA_KERNELS = r"""
#include <mma.h>
using namespace nvcuda;

// D (16 x 16) = A B + C with WMMA, all row-major, block b's at A + 256 b ...
template <class T>
__device__ void wmma_16x16x16(const T* A, const T* B, const float* C, float* D)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    const int o = 256 * blockIdx.x;
    wmma::load_matrix_sync(a, A + o, 16);
    wmma::load_matrix_sync(b, B + o, 16);
    wmma::load_matrix_sync(c, C + o, 16, wmma::mem_row_major);
    wmma::mma_sync(c, a, b, c);
    wmma::store_matrix_sync(D + o, c, 16, wmma::mem_row_major);
}

extern "C" __global__ void wmma_f16(const __half* A, const __half* B, const float* C, float* D)
{ wmma_16x16x16(A, B, C, D); }
extern "C" __global__ void wmma_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                     const float* C, float* D)
{ wmma_16x16x16(A, B, C, D); }
"""


@pytest.fixture(scope="module")
def runtimes():
    from grader.runtimes import get_runtime
    from grader.runtimes.cpu import CpuRuntime
    return {"gpu": get_runtime("gpu"), "cpu": CpuRuntime(race_check="off")}


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (round to nearest even), as uint16."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def random_16bit(rng, shape, dtype):
    """(uint16 bits, float64 values): normal numbers scaled by 2^-6 .. 2^6, so that the products
    of a sum have different exponents and the adder has to align them."""
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-6, 7, shape))).astype(np.float32)
    if dtype == "float16":
        h = x.astype(np.float16)
        return h.view(np.uint16), h.astype(np.float64)
    b = bf16_bits(x)
    return b, (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


CASES = {   # name: (kernel, dtype, n (columns of B, C, D))
    "mma_f16": ("mma_m16n8k16", "float16", 8),
    "mma_bf16": ("mma_m16n8k16", "bfloat16", 8),
    "wmma_f16": ("wmma_f16", "float16", 16),
    "wmma_bf16": ("wmma_bf16", "bfloat16", 16),
}


def run_case(rt, case, A, B, C):
    kernel, dtype, n = CASES[case]
    source = MMA_KERNEL if kernel == "mma_m16n8k16" else WMMA_KERNELS
    try:
        kern = rt.compile(source).get_function(kernel)
    except CompileError as e:
        # CuPy compiles with the CUDA headers it finds; some installs (the nvidia-cuda-runtime
        # wheel alone) have mma.h without the crt/mma.h it includes.
        if rt.name == "gpu" and "cannot open source file" in str(e):
            why = (e.log.strip().splitlines() or ["?"])[0]
            pytest.skip(f"the GPU runtime's CUDA headers are incomplete here: {why}")
        raise
    if kernel == "wmma_f16":
        A, B = A.view(np.float16), B.view(np.float16)
    D = rt.asarray(np.full((BLOCKS, 16, n), np.nan, np.float32))
    args = (rt.asarray(A), rt.asarray(B), rt.asarray(C), D)
    if kernel == "mma_m16n8k16":
        args += (rt.int32(dtype == "bfloat16"),)
    kern((BLOCKS,), (32,), args)
    rt.synchronize()
    return rt.to_numpy(D)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_emulators_tensor_core_arithmetic_matches_the_gpus(runtimes, case):
    _, dtype, n = CASES[case]
    rng = np.random.default_rng(sorted(CASES).index(case) + 2024)
    A, Av = random_16bit(rng, (BLOCKS, 16, 16), dtype)
    B, Bv = random_16bit(rng, (BLOCKS, 16, n), dtype)
    C = (rng.standard_normal((BLOCKS, 16, n)) * np.exp2(rng.integers(-6, 7, (BLOCKS, 16, n)))
         ).astype(np.float32)
    exact = Av @ Bv + C                                  # float64: off by ~2^-49 S at most
    scale = np.abs(Av) @ np.abs(Bv) + np.abs(C)          # S = |c| + sum |a b|
    out = {name: run_case(rt, case, A, B, C) for name, rt in runtimes.items()}
    for name, D in out.items():
        err = np.abs(D - exact)
        worst = np.unravel_index(np.argmax(err / scale), err.shape)
        assert (err <= TOL * scale).all(), (
            f"{name}: {case} is {D[worst]!r} at {worst}, the exact value {exact[worst]!r} "
            f"(off by {err[worst] / scale[worst]:.3g} S; tolerance {TOL:.3g} S)")
    gap = np.abs(out["cpu"] - out["gpu"])
    worst = np.unravel_index(np.argmax(gap / scale), gap.shape)
    assert (gap <= TOL * scale).all(), (
        f"{case}: the emulator gives {out['cpu'][worst]!r} at {worst}, the GPU "
        f"{out['gpu'][worst]!r} (apart by {gap[worst] / scale[worst]:.3g} S, tolerance "
        f"{TOL:.3g} S)")
