"""The CPU runtime: correct kernels give correct results, planted bugs are reported with their line.

Every kernel lives in this file, so messages name `test_cpu_runtime.py:<line>`; a marker comment
(`// @name`) on the line a message must point at lets the tests find that line.
"""
from __future__ import annotations

import platform
import re
from pathlib import Path

import markers
import numpy as np
import pytest

from grader.runtimes.base import CompileError, KernelFault, LaunchError, register_origin
from grader.runtimes.cpu import CpuRuntime, nvrtc_status
from grader.runtimes.cpu import abi as cpu_abi
from grader.runtimes.cpu import nvrtc as cpu_nvrtc

register_origin(__file__)
HERE = Path(__file__).name
needs_nvrtc = pytest.mark.skipif(not cpu_nvrtc.available(), reason="NVRTC is not installed")


def line_of(marker: str) -> int:
    return markers.line_of(__file__, marker)


def at(marker: str) -> str:
    return markers.at(__file__, marker)


@pytest.fixture(scope="module")
def rt_plain():
    """Without NVRTC, to reach the emulator's own checks with code NVRTC cannot see headers for."""
    return CpuRuntime(use_nvrtc=False)


# ---------------------------------------------------------------------------------------------
# Correct kernels.

REDUCE = r"""
__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
    return v;
}

extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ out, int n)
{
    __shared__ float partial[32];
    float v = 0.f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        v += x[i];
    v = warp_sum(v);
    const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (blockDim.x + 31) / 32 ? partial[lane] : 0.f;
        v = warp_sum(v);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

extern "C" __global__ void xor_max(const float* __restrict__ x, float* __restrict__ out)
{
    float v = x[blockIdx.x * 32 + threadIdx.x];
    for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, m));
    out[blockIdx.x * 32 + threadIdx.x] = v;                // every lane has the max
}

extern "C" __global__ void votes(const int* __restrict__ x, unsigned* __restrict__ out)
{
    const int t = threadIdx.x;
    const unsigned b = __ballot_sync(0xffffffff, x[t] > 0);
    const int any = __any_sync(0xffffffff, x[t] > 5), all = __all_sync(0xffffffff, x[t] >= 0);
    const int cnt = __syncthreads_count(x[t] > 0);
    const float up = __shfl_up_sync(0xffffffff, (float)t, 1, 8);
    const int idx = __shfl_sync(0xffffffff, t * 10, 3, 16);
    if (t < 64) {
        out[t * 6 + 0] = b;
        out[t * 6 + 1] = any;
        out[t * 6 + 2] = all;
        out[t * 6 + 3] = cnt;
        out[t * 6 + 4] = (unsigned)up;
        out[t * 6 + 5] = idx;
    }
}
"""


def test_shuffle_reductions_and_votes(rt):
    mod = rt.compile(REDUCE)
    x = np.random.default_rng(1).standard_normal(10_000).astype(np.float32)
    out = np.full(8, np.nan, np.float32)
    mod.get_function("block_sum")((8,), (256,), (x, out, rt.int32(x.size)))
    assert abs(out.sum() - x.astype(np.float64).sum()) < 1e-3
    assert np.all(np.isfinite(out))

    y = np.random.default_rng(2).standard_normal(96).astype(np.float32)
    m = np.zeros_like(y)
    mod.get_function("xor_max")((3,), (32,), (y, m))
    np.testing.assert_array_equal(m, np.repeat(y.reshape(3, 32).max(1), 32))

    xi = np.arange(64, dtype=np.int32) - 10
    got = np.zeros((64, 6), np.uint32)
    mod.get_function("votes")((1,), (64,), (xi, got))
    lanes = np.arange(64)
    b0 = sum(1 << i for i in range(32) if xi[i] > 0)
    b1 = sum(1 << i for i in range(32) if xi[32 + i] > 0)
    np.testing.assert_array_equal(got[:, 0], np.where(lanes < 32, b0, b1))
    np.testing.assert_array_equal(got[:, 1], np.where(lanes < 32, 1, 1))   # lane 16.. > 5
    np.testing.assert_array_equal(got[:, 2], np.where(lanes < 32, 0, 1))   # first warp has < 0
    np.testing.assert_array_equal(got[:, 3], np.full(64, (xi > 0).sum()))
    up = np.where(lanes % 8 == 0, lanes, lanes - 1)
    np.testing.assert_array_equal(got[:, 4], up)
    np.testing.assert_array_equal(got[:, 5], ((lanes // 16) * 16 + 3) * 10)


MATMUL = r"""
#define TILE 16
extern "C" __global__ void matmul(const float* __restrict__ a, const float* __restrict__ b,
                                  float* __restrict__ c, int m, int n, int k)
{
    __shared__ float as[TILE][TILE];
    __shared__ float bs[TILE][TILE + 1];
    const int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < k; t += TILE) {
        as[threadIdx.y][threadIdx.x] = (row < m && t + threadIdx.x < k) ? a[row * k + t + threadIdx.x] : 0.f;
        bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < k) ? b[(t + threadIdx.y) * n + col] : 0.f;
        __syncthreads();
        #pragma unroll
        for (int i = 0; i < TILE; ++i) acc += as[threadIdx.y][i] * bs[i][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = acc;
}
"""


def test_tiled_matmul_with_shared_memory_and_barriers(rt):
    kern = rt.compile(MATMUL).get_function("matmul")
    rng = np.random.default_rng(3)
    m, n, k = 37, 29, 45
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.full((m, n), np.nan, np.float32)
    kern(((n + 15) // 16, (m + 15) // 16), (16, 16), (a, b, c, rt.int32(m), rt.int32(n), rt.int32(k)))
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert kern.attributes["shared_size_bytes"] == 16 * 16 * 4 + 16 * 17 * 4


ATOMICS = r"""
extern "C" __global__ void histogram(const int* __restrict__ x, int n, unsigned* __restrict__ hist,
                                     float* __restrict__ total, int* __restrict__ hi)
{
    __shared__ unsigned local[16];
    if (threadIdx.x < 16) local[threadIdx.x] = 0;
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&local[x[i] & 15], 1u);
        atomicAdd(total, (float)x[i]);
        atomicMax(hi, x[i]);
    }
    __syncthreads();
    if (threadIdx.x < 16) atomicAdd(&hist[threadIdx.x], local[threadIdx.x]);
}

extern "C" __global__ void spin_lock(int* __restrict__ lock, int* __restrict__ counter)
{
    // A block-wide critical section: a failed atomicCAS lets the other threads run.
    while (atomicCAS(lock, 0, 1) != 0) { }
    *counter += 1;
    atomicExch(lock, 0);
}
"""


def test_atomics_and_a_spin_lock(rt):
    mod = rt.compile(ATOMICS)
    x = np.random.default_rng(4).integers(0, 1000, 1000).astype(np.int32)
    hist, total, hi = np.zeros(16, np.uint32), np.zeros(1, np.float32), np.zeros(1, np.int32)
    mod.get_function("histogram")((8,), (128,), (x, rt.int32(x.size), hist, total, hi))
    np.testing.assert_array_equal(hist, np.bincount(x & 15, minlength=16))
    assert total[0] == x.sum() and hi[0] == x.max()

    lock, counter = np.zeros(1, np.int32), np.zeros(1, np.int32)
    mod.get_function("spin_lock")((3,), (64,), (lock, counter))
    assert counter[0] == 3 * 64 and lock[0] == 0


TEMPLATES = r"""
template <int BLOCK, typename T>
__global__ void scale_add(const T* __restrict__ x, T* __restrict__ y, T alpha, int n)
{
    const int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = alpha * x[i] + y[i];
}

extern "C" __global__ void copy4(const float* __restrict__ x, float* __restrict__ y, int n4)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        v = make_float4(v.w, v.z, v.y, v.x);
        reinterpret_cast<float4*>(y)[i] = v;
    }
}
"""


def test_templates_with_name_expressions_and_float4(rt):
    names = ("scale_add<128, float>", "scale_add<64, double>")
    mod = rt.compile(TEMPLATES, name_expressions=names)
    x = np.arange(300, dtype=np.float32)
    y = np.ones(300, np.float32)
    mod.get_function("scale_add<128, float>")((3,), (128,), (x, y, rt.float32(2), rt.int32(300)))
    np.testing.assert_array_equal(y, 2 * np.arange(300) + 1)
    xd, yd = np.arange(100, dtype=np.float64), np.zeros(100)
    mod.get_function("scale_add<64, double>")((2,), (64,), (xd, yd, rt.float64(0.5), rt.int32(100)))
    np.testing.assert_array_equal(yd, 0.5 * np.arange(100))
    # The compiled signature stands in for the parsed one, so template launches are checked too.
    with pytest.raises(LaunchError, match=r"argument 4 \(int n\) got a Python int"):
        mod.get_function("scale_add<128, float>")((3,), (128,), (x, y, rt.float32(2), 300))
    with pytest.raises(LaunchError, match="float64 array"):
        mod.get_function("scale_add<128, float>")((3,), (128,), (xd, y, rt.float32(2), rt.int32(3)))
    with pytest.raises(CompileError, match="name_expressions"):
        mod.get_function("scale_add<32, float>")

    a = np.arange(64, dtype=np.float32)
    b = np.zeros_like(a)
    mod.get_function("copy4")((1,), (16,), (a, b, rt.int32(16)))
    np.testing.assert_array_equal(b, a.reshape(16, 4)[:, ::-1].ravel())


DYNAMIC = r"""
extern "C" __global__ void reverse_rows(const float* __restrict__ x, float* __restrict__ y,
                                        int rows, int cols)
{
    extern __shared__ float tile[];                  // rows * cols floats
    for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) tile[i] = x[i];
    __syncthreads();
    for (int i = threadIdx.x; i < rows * cols; i += blockDim.x)
        y[i] = tile[(rows - 1 - i / cols) * cols + i % cols];
}
"""


def test_dynamic_shared_memory_above_48k_needs_opt_in(rt):
    kern = rt.compile(DYNAMIC).get_function("reverse_rows")
    rows, cols = 200, 100                      # 80,000 bytes of shared memory
    x = np.random.default_rng(5).standard_normal((rows, cols)).astype(np.float32)
    y = np.zeros_like(x)
    args = (x, y, rt.int32(rows), rt.int32(cols))
    with pytest.raises(LaunchError, match=r"over the 48 KB default.*max_dynamic_shared_size_bytes = 80000"):
        kern((1,), (256,), args, shared_mem=x.nbytes)
    with pytest.raises(LaunchError, match="227"):
        kern.max_dynamic_shared_size_bytes = 300 * 1024
    kern.max_dynamic_shared_size_bytes = x.nbytes
    kern((1,), (256,), args, shared_mem=x.nbytes)
    np.testing.assert_array_equal(y, x[::-1])
    assert kern.attributes["max_dynamic_shared_size_bytes"] == x.nbytes


HALF_AND_MATH = r"""
#include <cuda_fp16.h>
extern "C" __global__ void mathy(const float* __restrict__ x, float* __restrict__ y, __half* h)
{
    const int i = threadIdx.x;
    const float v = x[i];
    y[i * 6 + 0] = __expf(v) + exp2f(v) - expf(v);
    y[i * 6 + 1] = rsqrtf(fabsf(v) + 1.f) * sqrtf(fabsf(v) + 1.f);
    y[i * 6 + 2] = __fdividef(v, 2.f) + __frcp_rn(4.f) + __fmul_rn(v, 0.f);
    y[i * 6 + 3] = fmaxf(-INFINITY, v) + max(1, 2) + min(3.f, 4.f);
    y[i * 6 + 4] = __int_as_float(__float_as_int(v)) + __uint_as_float(0x3f800000u);
    h[i] = __float2half(v);
    y[i * 6 + 5] = __half2float(h[i]) + (float)(__float2half(1.f) * __float2half(2.f));
}
"""


def test_math_functions_and_half(rt):
    kern = rt.compile(HALF_AND_MATH).get_function("mathy")
    x = np.linspace(-3, 3, 32, dtype=np.float32)
    y = np.zeros((32, 6), np.float32)
    h = np.zeros(32, np.float16)
    kern((1,), (32,), (x, y, h))
    np.testing.assert_allclose(y[:, 0], np.exp2(x), rtol=1e-5)
    np.testing.assert_allclose(y[:, 1], 1, rtol=1e-6)
    np.testing.assert_allclose(y[:, 2], x / 2 + 0.25, rtol=1e-6)
    np.testing.assert_allclose(y[:, 3], x + 5, rtol=1e-6)
    np.testing.assert_allclose(y[:, 4], x + 1, rtol=1e-6)
    np.testing.assert_array_equal(h, x.astype(np.float16))
    np.testing.assert_allclose(y[:, 5], x.astype(np.float16).astype(np.float32) + 2, rtol=1e-6)


FLASH = r"""
template <int D, int BR, int BC>
__global__ void flash(const float* __restrict__ q, const float* __restrict__ k,
                      const float* __restrict__ v, float* __restrict__ o, int n_q, int n_k,
                      float scale)
{
    extern __shared__ float smem[];
    float* ks = smem;
    float* vs = smem + BC * D;
    const int row = blockIdx.x * BR + threadIdx.x, bh = blockIdx.y;
    const bool valid = row < n_q;
    float qr[D], acc[D];
    for (int c = 0; c < D; ++c) { qr[c] = valid ? q[((size_t)bh * n_q + row) * D + c] * scale : 0.f; acc[c] = 0.f; }
    float m = -INFINITY, l = 0.f;
    for (int j0 = 0; j0 < n_k; j0 += BC) {
        for (int i = threadIdx.x; i < BC * D; i += BR) {
            const bool in = j0 + i / D < n_k;
            ks[i] = in ? k[((size_t)bh * n_k + j0) * D + i] : 0.f;
            vs[i] = in ? v[((size_t)bh * n_k + j0) * D + i] : 0.f;
        }
        __syncthreads();
        for (int j = 0; j < min(BC, n_k - j0); ++j) {
            float s = 0.f;
            for (int c = 0; c < D; ++c) s += qr[c] * ks[j * D + c];
            const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
            l = l * corr + p;
            for (int c = 0; c < D; ++c) acc[c] = acc[c] * corr + p * vs[j * D + c];
            m = m_new;
        }
        __syncthreads();
    }
    if (valid) for (int c = 0; c < D; ++c) o[((size_t)bh * n_q + row) * D + c] = acc[c] / l;
}
"""


def test_flash_attention_forward(rt):
    kern = rt.compile(FLASH, name_expressions=("flash<64, 32, 32>",)).get_function("flash<64, 32, 32>")
    rng = np.random.default_rng(6)
    bh, nq, nk, d = 3, 45, 77, 64
    q, k, v = (rng.standard_normal((bh, n, d), dtype=np.float32) for n in (nq, nk, nk))
    o = np.full_like(q, np.nan)
    kern(((nq + 31) // 32, bh), (32,), (q, k, v, o, rt.int32(nq), rt.int32(nk), rt.float32(d ** -0.5)),
         shared_mem=2 * 32 * 64 * 4)
    s = np.einsum("bqd,bkd->bqk", q.astype(np.float64), k) * d ** -0.5
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("bqk,bkd->bqd", p / p.sum(-1, keepdims=True), v)
    np.testing.assert_allclose(o, ref, rtol=1e-4, atol=1e-5)


def test_runtime_attributes_and_status(rt):
    assert rt.xp is np and rt.multiprocessor_count == 132
    assert rt.max_shared_memory_per_block == 48 * 1024
    assert rt.max_shared_memory_per_block_optin == 227 * 1024
    assert rt.device_name.startswith("CPU emulator (")
    status = nvrtc_status()
    assert status.startswith("NVRTC ") if cpu_nvrtc.available() else "pip install" in status


# ---------------------------------------------------------------------------------------------
# Planted bugs.

MISSING_BARRIER = r"""
extern "C" __global__ void tile_sum(const float* __restrict__ x, float* __restrict__ y, int tiles)
{
    __shared__ float tile[64];
    float acc = 0.f;
    for (int t = 0; t < tiles; ++t) {
        tile[threadIdx.x] = x[t * 64 + threadIdx.x];
        __syncthreads();
        for (int i = 0; i < 64; ++i) acc += tile[i] * (i + 1);
        // BUG: no __syncthreads() here, so the next load overwrites a tile still being read
    }
    y[threadIdx.x] = acc;
}
"""


def test_missing_barrier_before_reusing_a_shared_tile_is_a_race(rt):
    kern = rt.compile(MISSING_BARRIER).get_function("tile_sum")
    x = np.random.default_rng(7).standard_normal(4 * 64).astype(np.float32)
    y = np.zeros(64, np.float32)
    with pytest.raises(KernelFault) as e:
        kern((1,), (64,), (x, y, rt.int32(4)))
    msg = str(e.value)
    assert "data race" in msg and "__syncthreads()" in msg and "argument 2 (float* y)" in msg
    # Without the race check the same launch runs (and gives a wrong answer).
    CpuRuntime(race_check="off").compile(MISSING_BARRIER).get_function("tile_sum")(
        (1,), (64,), (x, y, rt.int32(4)))
    ref = (x.reshape(4, 64) * np.arange(1, 65)).sum()
    assert not np.allclose(y, ref, rtol=1e-4)


PLANTED_RACE = r"""
extern "C" __global__ void shift_sum(const float* __restrict__ x, float* __restrict__ y)
{
    extern __shared__ float smem[];
    float* vals = smem + 32;
    vals[threadIdx.x] = 2.f * x[threadIdx.x];                                 // @race_write
    // BUG: the barrier between the two lines is missing
    y[threadIdx.x] = vals[threadIdx.x] + vals[(threadIdx.x + 33) % 64];       // @race_read
}
"""


def test_a_race_is_named_like_racecheck(rt):
    """The order dependence is explained by the race behind it: both lines with their text, both
    threads, the write and the read, the shared array and its element, and no barrier between."""
    kern = rt.compile(PLANTED_RACE).get_function("shift_sum")
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    with pytest.raises(KernelFault) as e:
        kern((1,), (64,), (x, y), shared_mem=96 * 4)
    msg = str(e.value)
    # The finder names a pair of two warps first (no __syncwarp could order it): thread 32 reads the
    # element thread 1 writes ((32 + 33) % 64 = 1).
    assert msg.startswith(f"{at('race_write')}: shift_sum: data race in block (0, 0, 0) on vals[1], byte 132 of "
                          "the dynamic shared memory (`extern __shared__ float smem[]`: smem[33])"), msg
    assert (f"thread (1, 0, 0) writes it at {at('race_write')} (`vals[threadIdx.x] = 2.f * x[threadIdx.x];`)"
            in msg), msg
    assert f"thread (32, 0, 0) reads it at {at('race_read')} (`y[threadIdx.x] = vals[threadIdx.x]" in msg, msg
    assert "no __syncthreads() separates the two accesses" in msg
    assert f"between the write (line {line_of('race_write')}) and the read (line {line_of('race_read')})" in msg
    # What the thread-order check saw stays, as the observation.
    assert "What was observed: the result depends on the order" in msg and "argument 2 (float* y)" in msg


BARRIERS = r"""
extern "C" __global__ void barrier_in_if(float* __restrict__ y)
{
    __shared__ float s[64];
    s[threadIdx.x] = threadIdx.x;
    if (threadIdx.x < 32) {
        __syncthreads();                                  // @barrier_in_if
        y[threadIdx.x] = s[63 - threadIdx.x];
    } else {
        __syncthreads();                                  // @other_barrier
        y[threadIdx.x] = s[63 - threadIdx.x];
    }
}

extern "C" __global__ void early_return(const float* __restrict__ x, float* __restrict__ y, int n)
{
    __shared__ float s[64];
    const int i = threadIdx.x;
    if (i >= n) return;
    s[i] = x[i];
    __syncthreads();                                      // @waits
    y[i] = s[n - 1 - i];
}

extern "C" __global__ void shfl_after_exit(const float* __restrict__ x, float* __restrict__ y)
{
    if (threadIdx.x >= 20) return;
    float v = __shfl_down_sync(0xffffffff, x[threadIdx.x], 1);   // @shfl
    y[threadIdx.x] = v;
}

extern "C" __global__ void shfl_vs_barrier(float* __restrict__ y)
{
    float v = threadIdx.x;
    if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffff, v, 1);  // @shfl2
    __syncthreads();                                               // @bar2
    y[threadIdx.x] = v;
}
"""


def test_barrier_inside_an_if(rt):
    kern = rt.compile(BARRIERS).get_function("barrier_in_if")
    with pytest.raises(KernelFault) as e:
        kern((1,), (64,), (np.zeros(64, np.float32),))
    msg = str(e.value)
    assert "different barriers" in msg
    assert at("barrier_in_if") in msg and at("other_barrier") in msg


def test_thread_returning_before_a_barrier(rt):
    kern = rt.compile(BARRIERS).get_function("early_return")
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    with pytest.raises(KernelFault) as e:
        kern((1,), (64,), (x, y, rt.int32(50)))
    msg = str(e.value)
    assert "returned from the kernel while 50 others wait at __syncthreads" in msg
    assert at("waits") in msg
    kern((1,), (64,), (x, y, rt.int32(64)))             # fine when nobody leaves early
    np.testing.assert_array_equal(y, x[::-1])


def test_warp_collectives_with_missing_lanes(rt):
    mod = rt.compile(BARRIERS)
    with pytest.raises(KernelFault) as e:
        mod.get_function("shfl_after_exit")((1,), (32,), (np.zeros(32, np.float32),
                                                          np.zeros(32, np.float32)))
    msg = str(e.value)
    assert "lanes 20-31" in msg and "already returned" in msg and at("shfl") in msg
    with pytest.raises(KernelFault) as e:
        mod.get_function("shfl_vs_barrier")((1,), (32,), (np.zeros(32, np.float32),))
    msg = str(e.value)
    assert "wait in __shfl_xor_sync" in msg and at("shfl2") in msg and at("bar2") in msg


OUT_OF_BOUNDS = r"""
extern "C" __global__ void row_sums(const float* __restrict__ x, float* __restrict__ y,
                                    int rows, int cols)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.f;
    for (int c = 0; c <= cols; ++c)          // BUG: <= reads one past the end of the row
        s += x[r * cols + c];                // @oob_read
    y[r] = s;
}

extern "C" __global__ void write_past(float* __restrict__ y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = 1.f;                              // @oob_write
}
"""


def test_read_past_the_end_of_a_row_that_leaves_the_buffer(rt):
    mod = rt.compile(OUT_OF_BOUNDS)
    x = np.ones((10, 8), np.float32)
    y = np.full(10, np.nan, np.float32)
    with pytest.raises(KernelFault) as e:
        mod.get_function("row_sums")((1,), (32,), (x, y, rt.int32(10), rt.int32(8)))
    msg = str(e.value)
    assert at("oob_read") in msg
    assert "out-of-bounds read of argument 1 (float* x): element 80" in msg
    assert "holds 80 float32 elements" in msg and "1 element(s) past the last one" in msg
    assert "block (0,0,0), thread (9,0,0)" in msg
    assert np.isnan(y).all()                 # a faulting launch leaves the arrays untouched

    with pytest.raises(KernelFault) as e:
        mod.get_function("write_past")((2,), (64,), (np.zeros(100, np.float32), rt.int32(100)))
    msg = str(e.value)
    assert "out-of-bounds write of argument 1 (float* y): element 100" in msg and at("oob_write") in msg


def test_python_int_for_an_int_parameter(rt):
    kern = rt.compile(OUT_OF_BOUNDS).get_function("row_sums")
    x, y = np.ones((10, 8), np.float32), np.zeros(10, np.float32)
    with pytest.raises(LaunchError, match=r"argument 3 \(int rows\) got a Python int.*rt\.int32\(rows\)"):
        kern((1,), (32,), (x, y, 10, rt.int32(8)))
    with pytest.raises(LaunchError, match=r"argument 4 \(int cols\) expects int32, but the launch passed int64"):
        kern((1,), (32,), (x, y, rt.int32(10), np.int64(8)))
    with pytest.raises(LaunchError, match="takes 4 arguments"):
        kern((1,), (32,), (x, y, rt.int32(10)))
    with pytest.raises(LaunchError, match="not C-contiguous"):
        kern((1,), (32,), (np.ones((8, 10), np.float32).T, y, rt.int32(10), rt.int32(8)))


def test_block_too_large_is_refused(rt):
    kern = rt.compile(OUT_OF_BOUNDS).get_function("write_past")
    with pytest.raises(LaunchError, match="1056 threads; a block holds at most 1024"):
        kern((1,), (33, 32), (np.zeros(2000, np.float32), rt.int32(2000)))


SMEM_OVERRUN = r"""
extern "C" __global__ void stage(const float* __restrict__ x, float* __restrict__ y, int n)
{
    extern __shared__ float buf[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = x[i];   // @smem
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = buf[n - 1 - i];
}
"""


def test_dynamic_shared_memory_overrun(rt):
    kern = rt.compile(SMEM_OVERRUN).get_function("stage")
    x = np.arange(1000, dtype=np.float32)
    y = np.zeros_like(x)
    kern((1,), (128,), (x, y, rt.int32(1000)), shared_mem=4000)
    np.testing.assert_array_equal(y, x[::-1])
    with pytest.raises(KernelFault) as e:       # the launch asks for 256 floats too few
        kern((1,), (128,), (x, y, rt.int32(1000)), shared_mem=3000)
    msg = str(e.value)
    byte = int(re.search(r"dynamic shared memory at byte (\d+)", msg).group(1))
    assert 3000 <= byte < 4000 and "shared_mem=3000" in msg
    assert at("smem") in msg


UNINITIALISED = r"""
extern "C" __global__ void partial_tile(const float* __restrict__ v, const float* __restrict__ w,
                                        float* __restrict__ out, int n)
{
    __shared__ float vs[64];
    if (threadIdx.x < n) vs[threadIdx.x] = v[threadIdx.x];   // BUG: rows >= n never written
    __syncthreads();
    float acc = 0.f;
    for (int j = 0; j < 64; ++j) acc += w[j] * vs[j];        // @poison_use (0 * NaN past n)
    out[threadIdx.x] = acc;
}
"""


def test_reading_shared_memory_nothing_wrote(rt):
    kern = rt.compile(UNINITIALISED).get_function("partial_tile")
    v = np.ones(64, np.float32)
    w = np.where(np.arange(64) < 40, 1.0, 0.0).astype(np.float32)
    out = np.zeros(64, np.float32)
    with pytest.raises(KernelFault) as e:
        kern((1,), (64,), (v, w, out, rt.int32(40)))
    msg = str(e.value)
    assert "argument 3 (float* out) received 64 value(s)" in msg and "no thread" in msg
    if platform.machine() in ("x86_64", "AMD64"):   # the FP trap that finds the line
        assert f"The first arithmetic on such a value is at {at('poison_use')}" in msg
    assert np.isnan(out).all()                    # and the poisoned values are visible
    kern((1,), (64,), (v, w, out, rt.int32(64)))  # a full tile is fine
    np.testing.assert_array_equal(out, np.full(64, 40, np.float32))


TEMPLATE_SHARED = r"""
template <int N>
__global__ void reverse_tile(const float* __restrict__ x, float* __restrict__ y, int n)
{
    __shared__ float tile[N], spare[2];
    __shared__ __align__(16) int index[N];
    const int t = threadIdx.x;
    // A cp.async into a template's __shared__ array: its address is in the shared window.
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, 4;"
                 :: "r"((unsigned)__cvta_generic_to_shared(&tile[t])), "l"(x + t));
    asm volatile("cp.async.wait_all;");
    index[t] = N - 1 - t;
    if (t < 2) spare[t] = 0.f;
    __syncthreads();
    if (t < n) y[t] = tile[index[t]] + spare[t % 2];
}

template <int N>
__global__ void reverse_racy(const float* __restrict__ x, float* __restrict__ y)
{
    __shared__ float tile[N];
    tile[threadIdx.x] = x[threadIdx.x];                       // @template_race_write
    // BUG: no __syncthreads()
    y[threadIdx.x] = tile[N - 1 - threadIdx.x];               // @template_race_read
}

template <int N>
__global__ void reverse_unwritten(const float* __restrict__ x, float* __restrict__ y)
{
    __shared__ float tile[N];
    if (threadIdx.x < N / 2) tile[threadIdx.x] = x[threadIdx.x];   // BUG: half the tile
    __syncthreads();
    y[threadIdx.x] = 2.f * tile[N - 1 - threadIdx.x];
}
"""


def test_template_shared_arrays_are_shared_memory(rt):
    """GCC drops the section of a static local in a template instantiation: the emulator places a
    template's __shared__ arrays itself, so they are in the shared window (cp.async, cvta), poisoned at
    every block, counted as static shared memory, and watched for races like any other."""
    mod = rt.compile(TEMPLATE_SHARED, name_expressions=["reverse_tile<64>", "reverse_racy<64>",
                                                        "reverse_unwritten<64>"])
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    kern = mod.get_function("reverse_tile<64>")
    for _ in range(2):                         # the slots stay where the first launch put them
        kern((2,), (64,), (x, y, rt.int32(64)))
        np.testing.assert_array_equal(y, x[::-1])
    assert kern.attributes["shared_size_bytes"] >= 64 * 4 + 2 * 4 + 64 * 4
    with pytest.raises(KernelFault) as e:
        mod.get_function("reverse_racy<64>")((1,), (64,), (x, y))
    msg = str(e.value)
    assert "data race in block (0, 0, 0) on tile[" in msg and "(`__shared__ float tile[N]`)" in msg, msg
    assert f"between the write (line {line_of('template_race_write')}) and the read" in msg, msg
    with pytest.raises(KernelFault) as e:
        mod.get_function("reverse_unwritten<64>")((1,), (64,), (x, y))
    assert "no thread" in str(e.value) and "had written" in str(e.value), str(e.value)


def test_a_cp_async_source_outside_every_array_is_named(rt):
    """A cp.async whose source lies far from every array argument faults at its line, saying so (on a
    GPU it reads garbage or faults later); one just past an array is an out-of-bounds read of it."""
    src = r"""
extern "C" __global__ void copy_far(const float* __restrict__ x, float* __restrict__ y, long far)
{
    __shared__ float tile[32];
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, 4;"            // @far_copy
                 :: "r"((unsigned)__cvta_generic_to_shared(&tile[threadIdx.x])), "l"(x + threadIdx.x + far));
    asm volatile("cp.async.wait_all;");
    __syncthreads();
    y[threadIdx.x] = tile[threadIdx.x];
}
"""
    kern = rt.compile(src).get_function("copy_far")
    x, y = np.ones(32, np.float32), np.zeros(32, np.float32)
    kern((1,), (32,), (x, y, np.int64(0)))
    np.testing.assert_array_equal(y, x)
    with pytest.raises(KernelFault) as e:
        kern((1,), (32,), (x, y, np.int64(1 << 30)))
    assert "lies in none of the launch's arrays" in str(e.value), str(e.value)
    assert "0x" not in str(e.value), "a host address differs from run to run: the message must not show it"
    with pytest.raises(KernelFault) as e:
        kern((1,), (32,), (x, y, np.int64(8)))
    assert "out-of-bounds read of argument 1 (float* x)" in str(e.value), str(e.value)   # the guard pages


NEVER_WRITTEN = r"""
extern "C" __global__ void never_written(unsigned* __restrict__ out)
{
    __shared__ unsigned s[32];
    out[threadIdx.x] = s[threadIdx.x];                       // what a block finds at its start
}
"""


def test_fault_kinds_and_poison_come_from_the_abi_header(rt):
    csrc = Path(cpu_abi.__file__).with_name("csrc")
    header = (csrc / "cudaemu_abi.h").read_text()
    kinds = {k: int(v) for k, v in re.findall(r"X\((\w+), (\d+)\)", header.split("POISON")[0])}
    assert kinds and cpu_abi.FAULT_KINDS == kinds
    assert all(getattr(cpu_abi, f"F_{k}") == v for k, v in kinds.items())
    used = set(re.findall(r"\bF_([A-Z]+)\b", (csrc / "emu_runtime.cpp").read_text())) - {"NONE"}
    assert used and used <= set(kinds)
    poison = int(re.search(r"#define CUDAEMU_POISON32 (0x[0-9A-Fa-f]+)", header).group(1), 16)
    assert cpu_abi.POISON32 == poison
    out = np.zeros(32, np.uint32)
    rt.compile(NEVER_WRITTEN).get_function("never_written")((2,), (32,), (out,))
    assert (out == poison).all()


UNSUPPORTED = {
    "asm": 'extern "C" __global__ void f(float* x) {\n  asm volatile("membar.gl;");\n}\n',
    "async": 'extern "C" __global__ void f(float* x) {\n  __shared__ float s[4];\n'
             '  __pipeline_memcpy_async(s, x, 16);\n}\n',
    "cluster": 'extern "C" __global__ void __cluster_dims__(2, 1, 1) f(float* x) {\n  x[0] = 1;\n}\n',
    "grid": 'extern "C" __global__ void f(float* x) {\n  auto g = cooperative_groups::this_grid();\n'
            '  g.sync();\n}\n',
    "texture": 'extern "C" __global__ void f(cudaTextureObject_t t, float* x) {\n'
               '  x[0] = tex1Dfetch<float>(t, 0);\n}\n',
    "launch": '__global__ void g(float* x) {}\nextern "C" __global__ void f(float* x) {\n'
              '  g<<<1, 1>>>(x);\n}\n',
}
WHAT = {"asm": "inline PTX", "async": "asynchronous copies", "cluster": "thread-block clusters",
        "grid": "grid-wide synchronisation", "texture": "textures and surfaces",
        "launch": "dynamic parallelism"}
LINE = {"asm": 2, "async": 3, "cluster": 1, "grid": 2, "texture": 1, "launch": 3}


@pytest.mark.parametrize("feature", sorted(UNSUPPORTED))
def test_unsupported_features_are_refused_with_their_line(rt, feature):
    with pytest.raises(CompileError) as e:
        rt.compile(UNSUPPORTED[feature])
    msg = str(e.value)
    assert f"kernel.cu:{LINE[feature]}: {WHAT[feature]}" in msg and "not supported" in msg


def test_unsupported_feature_named_in_a_comment_is_fine(rt):
    rt.compile('extern "C" __global__ void f(float* x) {\n  // no asm("...") or <<< here\n  x[0] = 1;\n}\n')


MORE_FAULTS = r"""
extern "C" __global__ void checked(const int* __restrict__ x, int* __restrict__ y)
{
    assert(x[threadIdx.x] >= 0);                                 // @assert
    y[threadIdx.x] = 100 / x[threadIdx.x];                       // @divide
}

extern "C" __global__ void spin_forever(int* __restrict__ flag)
{
    if (threadIdx.x == 0) while (atomicCAS(flag, 1, 2) != 1) { }  // @spin
}
"""


def test_assert_division_by_zero_and_livelock(rt):
    mod = rt.compile(MORE_FAULTS)
    y = np.zeros(4, np.int32)
    with pytest.raises(KernelFault) as e:
        mod.get_function("checked")((1,), (4,), (np.array([1, 2, -1, 4], np.int32), y))
    assert "assertion failed" in str(e.value) and at("assert") in str(e.value)
    with pytest.raises(KernelFault) as e:
        mod.get_function("checked")((1,), (4,), (np.array([1, 2, 0, 4], np.int32), y))
    assert "integer division by zero" in str(e.value) and at("divide") in str(e.value)
    assert "thread (2,0,0)" in str(e.value)
    with pytest.raises(KernelFault) as e:
        mod.get_function("spin_forever")((1,), (32,), (np.zeros(1, np.int32),))
    assert "spin" in str(e.value) and at("spin") in str(e.value)


@needs_nvrtc
def test_nvrtc_reports_the_real_compiler_error_at_the_students_line(rt):
    src = ('extern "C" __global__ void f(float* x) {\n'
           '  x[0] = undeclared_thing;\n'
           '}\n')
    with pytest.raises(CompileError) as e:
        rt.compile(src)
    msg = str(e.value)
    assert "NVRTC" in msg and "kernel.cu(2)" in msg and "undeclared_thing" in msg


def test_host_compiler_error_without_nvrtc(rt_plain):
    with pytest.raises(CompileError) as e:
        rt_plain.compile('extern "C" __global__ void f(float* x) {\n  x[0] = nope;\n}\n')
    assert "kernel.cu:2" in str(e.value) and "nope" in str(e.value)


def test_compiled_library_is_cached(rt, tmp_path, monkeypatch):
    from grader.runtimes.cpu import build
    monkeypatch.setenv("GRADER_CACHE", str(tmp_path))
    build._runtime_object.cache_clear()
    try:
        src = 'extern "C" __global__ void f(float* x) { x[threadIdx.x] = 3; }\n'
        rt.compile(src)
        libs = sorted((tmp_path / "cpu").glob("kernel-*.so"))
        assert len(libs) == 1
        stamp = libs[0].stat().st_mtime_ns
        x = np.zeros(8, np.float32)
        rt.compile(src).get_function("f")((1,), (8,), (x,))
        assert sorted((tmp_path / "cpu").glob("kernel-*.so")) == libs
        assert libs[0].stat().st_mtime_ns == stamp and (x == 3).all()
    finally:
        build._runtime_object.cache_clear()


EXTRAS = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern __shared__ __align__(16) unsigned char raw[];      // file scope, as CUDA allows

extern "C" __global__ void groups(const float* __restrict__ x, float* __restrict__ y)
{
    __shared__ alignas(16) float partial[2];
    cg::thread_block block = cg::this_thread_block();
    auto warp = cg::tiled_partition<32>(block);
    float v = x[block.thread_rank()];
    for (int off = 16; off > 0; off /= 2) v += warp.shfl_down(v, off);
    if (warp.thread_rank() == 0) partial[warp.meta_group_rank()] = v;
    block.sync();
    float* f = reinterpret_cast<float*>(raw);
    f[block.thread_rank()] = partial[0] + 10.f * partial[1];
    __syncwarp();
    __syncthreads();
    y[block.thread_rank()] = f[63 - block.thread_rank()] + 100.f * threadIdx.y;
}

extern "C" __global__ void chatty(float* __restrict__ y)
{
    if (threadIdx.x == 1) printf("block %d says %.1f\n", blockIdx.x, 2.5f);
    y[blockIdx.x * blockDim.x + threadIdx.x] = 1.f;
}

extern "C" __global__ void huge_locals(float* __restrict__ y)
{                                                              // @stack (the frame is made here)
    float scratch[100000];                                     // 400 KB per thread
    for (int i = 0; i < 100000; ++i) scratch[i] = y[0] + i;
    y[threadIdx.x] = scratch[threadIdx.x * 999];
}
"""


def test_cooperative_groups_and_file_scope_dynamic_shared_memory(rt):
    x = np.concatenate([np.ones(32), 2 * np.ones(32)]).astype(np.float32)
    y = np.zeros(64, np.float32)
    rt.compile(EXTRAS).get_function("groups")((1,), (32, 2), (x, y), shared_mem=256)
    np.testing.assert_array_equal(y, 32 + 10 * 64 + 100 * (np.arange(64) >= 32))


def test_printf_reaches_python_once_per_thread(rt, capsys):
    y = np.zeros(6, np.float32)
    rt.compile(EXTRAS).get_function("chatty")((2,), (3,), (y,))   # race check reruns both blocks
    assert capsys.readouterr().out == "block 0 says 2.5\nblock 1 says 2.5\n"
    assert (y == 1).all()


def test_stack_overflow_is_reported(rt):
    with pytest.raises(KernelFault, match="overflowed its stack") as e:
        rt.compile(EXTRAS).get_function("huge_locals")((1,), (2,), (np.ones(4, np.float32),))
    assert at("stack") in str(e.value)


ENDLESS = '''
import numpy as np
from grader.runtimes.cpu import CpuRuntime
SRC = r"""
extern "C" __global__ void endless(volatile int* flag) {
    while (flag[0] == 0) { }
}
"""
k = CpuRuntime().compile(SRC).get_function("endless")
print("ready", flush=True)
try:
    k((1,), (4,), (np.zeros(1, np.int32),))
except KeyboardInterrupt as e:
    print("interrupted:", e, flush=True)
'''


def test_ctrl_c_stops_an_endless_kernel_with_its_line(tmp_path):
    import signal
    import subprocess
    import sys
    import time
    script = tmp_path / "endless.py"
    script.write_text(ENDLESS)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "interrupted: endless interrupted at kernel.cu:3" in out


REGISTER_OVERRUN = r"""
extern "C" __global__ void tile_max(const float* x, float* y)
{
    float r[4];
    for (int n = 0; n < 4; ++n) r[n] = x[threadIdx.x * 4 + n];
    float m = r[0];
    for (int n = 1; n <= 4; ++n) m = fmaxf(m, r[n]);   // @register_overrun: one past the end
    y[threadIdx.x] = m;
}
"""


def test_a_per_thread_array_indexed_past_its_end_is_reported_with_its_line(rt):
    # On a GPU this reads whatever sits next to r[] and often passes; the emulator traps at the line.
    kern = rt.compile(REGISTER_OVERRUN).get_function("tile_max")
    x, y = np.arange(128, dtype=np.float32), np.zeros(32, np.float32)
    with pytest.raises(KernelFault) as e:
        kern((1,), (32,), (x, y))
    msg = str(e.value)
    assert "index out of bounds of a fixed-size array" in msg and at("register_overrun") in msg, msg


BLOCK_OWNERSHIP = r"""
// Each block fills its own `per` elements; `spill` more elements past them is the bug under test.
extern "C" __global__ void fill_rows(float* __restrict__ out, int per, int spill, int n)
{
    for (int e = threadIdx.x; e < per + spill; e += blockDim.x) {
        const int i = blockIdx.x * per + e;
        if (i < n) out[i] = (float)blockIdx.x + 1.0f;
    }
}
"""


def test_blocks_that_write_over_each_other_are_reported_when_asked():
    rt = CpuRuntime(use_nvrtc=False)
    fill = rt.compile(BLOCK_OWNERSHIP).get_function("fill_rows")
    out = np.zeros(40, np.float32)
    fill((4,), (32,), (out, rt.int32(10), rt.int32(0), rt.int32(40)))   # off by default, and no overlap
    np.testing.assert_array_equal(out, np.repeat(np.arange(1, 5), 10))
    rt.block_order_check = True
    fill((4,), (32,), (out, rt.int32(10), rt.int32(0), rt.int32(40)))   # each block its own rows: fine
    with pytest.raises(KernelFault, match=r"order in which the blocks run.*argument 1 \(float\* out\) at "
                                          r"index \(10,\): 2 became 1 \(9 element"):
        fill((4,), (32,), (out, rt.int32(10), rt.int32(3), rt.int32(40)))
    rt.block_order_check = False                                         # the spill goes unseen again
    fill((4,), (32,), (out, rt.int32(10), rt.int32(3), rt.int32(40)))


def test_a_parameter_list_with_preprocessor_lines_is_not_checked():
    """Its parameters depend on the -D options: counting them from the text would refuse a right launch."""
    from grader.runtimes.base import parse_signatures
    src = ('extern "C" __global__ void f(const float* x,\n#if WIDE\n float* y, float* z,\n#else\n float* y,\n'
           '#endif\n int n) {}\nextern "C" __global__ void g(float* x, int n) {}\n')
    sigs = parse_signatures(src)
    assert sigs["f"] is None and [p.name for p in sigs["g"]] == ["x", "n"]


def test_a_kernel_with_preprocessor_lines_in_its_parameters_runs(rt):
    src = ('extern "C" __global__ void f(float* y,\n#if WIDE\n float* z,\n#endif\n int n)\n'
           '{ if (threadIdx.x < n) y[threadIdx.x] = 2.0f; }\n')
    y = np.zeros(4, np.float32)
    rt.compile(src, options=("-DWIDE=0",)).get_function("f")((1,), (4,), (y, rt.int32(4)))
    assert (y == 2.0).all()


ONE_PAST_THE_END = r"""
extern "C" __global__ void fill(float* __restrict__ y, int n)
{
    const int i = threadIdx.x;
    if (i > n) return;
    y[i] = 1.0f;                  // @store_past_end
}
"""


def test_a_store_into_the_guard_bytes_is_traced_to_its_line(rt):
    """One float past the end lands in the guard bytes that keep a small buffer aligned (no page
    faults): the damage is seen after the launch, and a traced rerun names the store."""
    y = np.zeros(1, np.float32)
    with pytest.raises(KernelFault) as e:
        rt.compile(ONE_PAST_THE_END).get_function("fill")((1,), (32,), (y, rt.int32(1)))
    msg = str(e.value)
    assert msg.startswith(f"{at('store_past_end')}: fill: out-of-bounds write of argument 1 (float* y)"), msg
    assert f"thread 1 of block (0, 0, 0) stores there at line {line_of('store_past_end')}" in msg
