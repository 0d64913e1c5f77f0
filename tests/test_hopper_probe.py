"""Module 10's instructions on the CPU emulator, against NumPy and (on an sm_90 GPU) against the GPU.

One warpgroup, one probe kernel: TMA copies two 64 × 64 float16 boxes (rows of 128 bytes, the 128-byte
swizzle) into shared memory, completing on an mbarrier; the kernel copies A's shared-memory bytes out
as they lie (the swizzled layout), then computes with wgmma.m64n64k16:
  - D1 = A Bᵀ, four k-steps of 16 features, A and B read K-major through descriptors (as S = Q Kᵀ);
  - D2 = P B, P in registers (a known function of the thread and register), B read MN-major (B's
    rows are the k dimension, as V in P V), four k-steps of 16 rows.
The CPU run is compared with NumPy (the swizzle formula and the products) and, where a sm_90 GPU is
present, with the GPU (tolerance as in test_gpu_mma.py: 2^-16 of the sum of |products| per element).
"""
from __future__ import annotations

import numpy as np
import pytest

from grader.runtimes.base import register_origin

register_origin(__file__)

PROBE = r"""
#include <cuda_fp16.h>
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned leading, unsigned stride)
{
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(leading >> 4) << 16)
         | ((unsigned long long)(stride >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_kk(float (&d)[8][4], unsigned long long da, unsigned long long db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, 1, 1, 1, 0, 0;"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(da), "l"(db));
}
__device__ __forceinline__ void wgmma_rs(float (&d)[8][4], const unsigned (&a)[4], unsigned long long db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, 1, 1, 1, 1;"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
                   "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
                   "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
                   "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
__device__ __forceinline__ void store(float* out, const float (&d)[8][4])
{
    const int w = threadIdx.x / 32, l = threadIdx.x % 32, g = l / 4, t = l % 4;
    for (int j = 0; j < 8; ++j)
        for (int e = 0; e < 4; ++e)
            out[(16 * w + g + 8 * (e / 2)) * 64 + 8 * j + 2 * t + e % 2] = d[j][e];
}

extern "C" __global__ void __launch_bounds__(128) probe(const __grid_constant__ TensorMap a_map,
        const __grid_constant__ TensorMap b_map, unsigned short* raw, float* d1, float* d2)
{
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = smem_addr(smem_raw);
    unsigned char* a_s = smem_raw + (((base + 1023) & ~1023u) - base);
    unsigned char* b_s = a_s + 8192;
    unsigned long long* bar_p = reinterpret_cast<unsigned long long*>(b_s + 8192);
    const unsigned bar = smem_addr(bar_p);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(1));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(16384) : "memory");
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                     :: "r"(smem_addr(a_s)), "l"(&a_map), "r"(0), "r"(0), "r"(0), "r"(bar) : "memory");
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                     :: "r"(smem_addr(b_s)), "l"(&b_map), "r"(0), "r"(0), "r"(0), "r"(bar) : "memory");
    }
    unsigned done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "r"(0) : "memory");
    for (int i = threadIdx.x; i < 4096; i += 128) raw[i] = reinterpret_cast<const unsigned short*>(a_s)[i];

    float d[8][4] = {};
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int kk = 0; kk < 4; ++kk)
        wgmma_kk(d, desc(smem_addr(a_s) + kk * 32, 16, 1024), desc(smem_addr(b_s) + kk * 32, 16, 1024));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    store(d1, d);

    float e[8][4] = {};
    const int t = threadIdx.x;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int kk = 0; kk < 4; ++kk) {
        unsigned a[4];
        for (int r = 0; r < 4; ++r) {        // P's registers: halves (t + 3 r + kk) % 7 - 3 and one more, / 4
            __half lo = __float2half(((t + 3 * r + kk) % 7 - 3) * 0.25f), hi = __float2half(((t + 3 * r + kk + 1) % 7 - 3) * 0.25f);
            a[r] = (unsigned)__half_as_ushort(lo) | ((unsigned)__half_as_ushort(hi) << 16);
        }
        wgmma_rs(e, a, desc(smem_addr(b_s) + kk * 16 * 128, 64 * 128, 1024));
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    store(d2, e);
}
"""


def p_matrix() -> np.ndarray:
    """The 64 × 64 P the kernel builds in registers (wgmma's A layout: mma.m16n8k16's, per warp)."""
    p = np.zeros((64, 64), np.float32)
    for t in range(128):
        w, g, q = t // 32, (t % 32) // 4, t % 4
        for kk in range(4):
            for r in range(4):
                row = 16 * w + g + 8 * (r & 1)
                col = 16 * kk + 2 * q + 8 * (r >> 1)
                p[row, col] = ((t + 3 * r + kk) % 7 - 3) * 0.25
                p[row, col + 1] = ((t + 3 * r + kk + 1) % 7 - 3) * 0.25
    return p


def run_probe(rt, a, b):
    mod = rt.compile(PROBE, options=("-arch=sm_90a",))
    kernel = mod.get_function("probe")
    kernel.max_dynamic_shared_size_bytes = 20 * 1024
    da, db = rt.asarray(a), rt.asarray(b)
    raw = rt.zeros((4096,), "uint16")
    d1, d2 = rt.zeros((64, 64)), rt.zeros((64, 64))
    kernel((1,), (128,), (rt.tensor_map(da, 64, "float16"), rt.tensor_map(db, 64, "float16"),
                          raw, d1, d2), shared_mem=20 * 1024)
    return rt.to_numpy(raw), rt.to_numpy(d1), rt.to_numpy(d2)


def inputs():
    rng = np.random.default_rng(5)
    return (rng.standard_normal((1, 64, 64)).astype(np.float16),
            rng.standard_normal((1, 64, 64)).astype(np.float16))


def close(x, y, scale):
    return np.abs(x - y) <= 2.0 ** -16 * scale


def test_probe_on_the_emulator_matches_numpy(rt):
    a, b = inputs()
    raw, d1, d2 = run_probe(rt, a, b)
    bits = a[0].view(np.uint16)
    want = np.empty(4096, np.uint16)
    for r in range(64):
        for c in range(8):                                   # 16-byte chunk c of row r lies at c ^ (r % 8)
            want[r * 64 + 8 * (c ^ (r % 8)): r * 64 + 8 * (c ^ (r % 8)) + 8] = bits[r, 8 * c: 8 * c + 8]
    assert np.array_equal(raw, want)
    A, B = a[0].astype(np.float64), b[0].astype(np.float64)
    assert close(d1, A @ B.T, np.abs(A) @ np.abs(B).T).all()
    P = p_matrix().astype(np.float64)
    assert close(d2, P @ B, np.abs(P) @ np.abs(B)).all()


@pytest.mark.gpu
def test_probe_on_the_gpu_matches_the_emulator(rt):
    from grader.runtimes import get_runtime
    from grader.errors import RuntimeUnavailable
    try:
        gpu = get_runtime("gpu")
        if gpu.compute_capability != "90":
            pytest.skip(f"needs an sm_90 GPU, this is sm_{gpu.compute_capability}")
    except RuntimeUnavailable as e:
        pytest.skip(str(e))
    a, b = inputs()
    raw_c, d1_c, d2_c = run_probe(rt, a, b)
    raw_g, d1_g, d2_g = run_probe(gpu, a, b)
    assert np.array_equal(raw_g, raw_c), "TMA's shared-memory layout differs from the emulator's"
    A, B, P = a[0].astype(np.float64), b[0].astype(np.float64), p_matrix().astype(np.float64)
    assert close(d1_g, d1_c, np.abs(A) @ np.abs(B).T).all(), "wgmma (both operands from shared memory)"
    assert close(d2_g, d2_c, np.abs(P) @ np.abs(B)).all(), "wgmma (A from registers, B transposed)"


def fault_of(rt, source):
    from grader.runtimes.base import KernelFault
    a, b = inputs()
    mod = rt.compile(source, options=("-arch=sm_90a",))
    kernel = mod.get_function("probe")
    kernel.max_dynamic_shared_size_bytes = 20 * 1024
    with pytest.raises(KernelFault) as e:
        kernel((1,), (128,), (rt.tensor_map(rt.asarray(a), 64, "float16"), rt.tensor_map(rt.asarray(b), 64, "float16"),
                              rt.zeros((4096,), "uint16"), rt.zeros((64, 64)), rt.zeros((64, 64))),
               shared_mem=20 * 1024)
    return str(e.value)


# B's tile rewritten by ordinary stores after TMA filled it (the same values, plus one), then read by wgmma.
STORES = ("    for (int i = threadIdx.x; i < 4096; i += 128) raw[i] = reinterpret_cast<const unsigned short*>(a_s)[i];\n",
          "    for (int i = threadIdx.x; i < 4096; i += 128) raw[i] = reinterpret_cast<const unsigned short*>(a_s)[i];\n"
          "    __syncthreads();\n"
          "    for (int i = threadIdx.x; i < 4096; i += 128) reinterpret_cast<__half*>(b_s)[i] = __float2half(1.0f);\n"
          "    @FENCE@__syncthreads();\n")


def test_wgmma_reading_ordinary_stores_needs_a_proxy_fence(rt):
    src = PROBE.replace(*STORES)
    msg = fault_of(rt, src.replace("@FENCE@", ""))
    assert "fence.proxy.async" in msg and "ordinary" in msg
    a, b = inputs()
    fenced = src.replace("@FENCE@", 'asm volatile("fence.proxy.async.shared::cta;" ::: "memory");\n    ')
    raw, d1, d2 = run_probe_source(rt, fenced, a, b)
    A = a[0].astype(np.float64)
    assert close(d1, A @ np.ones((64, 64)), np.abs(A) @ np.ones((64, 64))).all()


def run_probe_source(rt, source, a, b):
    kernel = rt.compile(source, options=("-arch=sm_90a",)).get_function("probe")
    kernel.max_dynamic_shared_size_bytes = 20 * 1024
    raw, d1, d2 = rt.zeros((4096,), "uint16"), rt.zeros((64, 64)), rt.zeros((64, 64))
    kernel((1,), (128,), (rt.tensor_map(rt.asarray(a), 64, "float16"), rt.tensor_map(rt.asarray(b), 64, "float16"),
                          raw, d1, d2), shared_mem=20 * 1024)
    return rt.to_numpy(raw), rt.to_numpy(d1), rt.to_numpy(d2)


def test_a_wait_on_the_wrong_parity_reads_a_tile_not_yet_landed(rt):
    src = PROBE.replace(': "r"(bar), "r"(0) : "memory");\n    for', ': "r"(bar), "r"(1) : "memory");\n    for')
    src = src.replace("    for (int i = threadIdx.x; i < 4096; i += 128) raw[i]", "    for (int i = threadIdx.x; i < 0; i += 128) raw[i]")
    msg = fault_of(rt, src)
    assert "has not written yet" in msg and "mbarrier phase had not completed" in msg


def test_a_warpgroup_instruction_reached_by_part_of_the_warpgroup_is_named(rt):
    src = PROBE.replace('    float d[8][4] = {};\n    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");',
                        '    float d[8][4] = {};\n    if (threadIdx.x >= 64) return;\n'
                        '    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");')
    msg = fault_of(rt, src)
    assert "threads 0-63 of warpgroup 0 wait in wgmma.fence" in msg and "64-127" in msg and "returned" in msg


def test_wgmma_reading_shared_memory_nothing_wrote_is_named(rt):
    # B's TMA copy left out (and its bytes from expect_tx): B's tile still holds what the block began with.
    src = PROBE.replace('"r"(bar), "r"(16384) : "memory");', '"r"(bar), "r"(8192) : "memory");')
    src = src.replace('''        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                     :: "r"(smem_addr(b_s)), "l"(&b_map), "r"(0), "r"(0), "r"(0), "r"(bar) : "memory");
''', "")
    assert src.count("cp.async.bulk.tensor") == 1
    msg = fault_of(rt, src)
    assert "reads B" in msg and "nothing has written since the block started" in msg


def test_a_registers_overwritten_before_the_wait_are_named(rt):
    # P's array outlives the loop: each step's wgmma reads the newest values (no fault), then one
    # register changes after the last wgmma and before the wait that covers it (a fault).
    src = PROBE.replace("    for (int kk = 0; kk < 4; ++kk) {\n        unsigned a[4];",
                        "    unsigned a[4];\n    for (int kk = 0; kk < 4; ++kk) {")
    a, b = inputs()
    B = b[0].astype(np.float64)
    raw, d1, d2 = run_probe_source(rt, src, a, b)
    assert close(d2, p_matrix() @ B, np.abs(p_matrix()) @ np.abs(B)).all()
    tail = '    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");\n' \
           '    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");\n    store(d2, e);'
    assert src.count(tail) == 1
    msg = fault_of(rt, src.replace(tail, "    a[0] ^= 1u;\n" + tail))
    assert "register 0 of A" in msg and "overwritten" in msg and "C7513" in msg


def test_accumulators_changed_while_their_chain_runs_are_named(rt):
    # A rescale of e between two wgmma of one chain, with no wait between: the second one's issue
    # finds e changed while the first still writes it (a wait too loose before a rescale).
    old = "        wgmma_rs(e, a, desc(smem_addr(b_s) + kk * 16 * 128, 64 * 128, 1024));\n"
    assert PROBE.count(old) == 1
    msg = fault_of(rt, PROBE.replace(old, "        if (kk == 2) e[0][0] *= 0.5f;\n" + old))
    assert "changed while the wgmma.mma_async at" in msg and "was still running" in msg
