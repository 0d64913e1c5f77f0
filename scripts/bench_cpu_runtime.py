"""Time the CPU emulator: compile (cold and cached) and a FlashAttention-style forward kernel.

    python scripts/bench_cpu_runtime.py [--cases 20] [--race sample|full|off]

The kernel is the shape the course's exercises take: one block of BR threads per (query tile,
head, batch), each thread owning a query row; K and V tiles of BC rows staged through dynamic
shared memory; online softmax per tile. The cases mimic a grader run (N up to ~300, d up to 128,
GQA). Each result is checked against a float64 NumPy reference so the figures are for a correct
run.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from grader.runtimes.base import register_origin  # noqa: E402
from grader.runtimes.cpu import CpuRuntime, nvrtc_status  # noqa: E402
from grader.runtimes.cpu import build as cpu_build  # noqa: E402

register_origin(__file__)

FLASH = r"""
template <int D, int BR, int BC>
__global__ void flash_fwd(const float* __restrict__ q, const float* __restrict__ k,
                          const float* __restrict__ v, float* __restrict__ o,
                          float* __restrict__ lse, int n_q, int n_k, int heads, int kv_heads,
                          float scale)
{
    extern __shared__ float smem[];
    float* ks = smem;              // [BC][D]
    float* vs = smem + BC * D;     // [BC][D]
    const int head = blockIdx.y, b = blockIdx.z;
    const int kvh = head / (heads / kv_heads);
    const int row = blockIdx.x * BR + threadIdx.x;
    const bool valid = row < n_q;
    const float* qp = q + ((size_t)(b * heads + head) * n_q + row) * D;
    const float* kp = k + (size_t)(b * kv_heads + kvh) * n_k * D;
    const float* vp = v + (size_t)(b * kv_heads + kvh) * n_k * D;

    float qr[D], acc[D];
    for (int c = 0; c < D; ++c) { qr[c] = valid ? qp[c] * scale : 0.f; acc[c] = 0.f; }
    float m = -INFINITY, l = 0.f;

    for (int j0 = 0; j0 < n_k; j0 += BC) {
        for (int i = threadIdx.x; i < BC * D; i += BR) {
            const int r = i / D;
            const bool in = j0 + r < n_k;
            ks[i] = in ? kp[(size_t)j0 * D + i] : 0.f;
            vs[i] = in ? vp[(size_t)j0 * D + i] : 0.f;
        }
        __syncthreads();
        const int jn = min(BC, n_k - j0);
        float s[BC];
        float tile_max = -INFINITY;
        for (int j = 0; j < jn; ++j) {
            float dot = 0.f;
            for (int c = 0; c < D; ++c) dot += qr[c] * ks[j * D + c];
            s[j] = dot;
            tile_max = fmaxf(tile_max, dot);
        }
        const float m_new = fmaxf(m, tile_max);
        const float corr = expf(m - m_new);
        l *= corr;
        for (int c = 0; c < D; ++c) acc[c] *= corr;
        for (int j = 0; j < jn; ++j) {
            const float p = expf(s[j] - m_new);
            l += p;
            for (int c = 0; c < D; ++c) acc[c] += p * vs[j * D + c];
        }
        m = m_new;
        __syncthreads();
    }
    if (valid) {
        float* op = o + ((size_t)(b * heads + head) * n_q + row) * D;
        for (int c = 0; c < D; ++c) op[c] = acc[c] / l;
        lse[(size_t)(b * heads + head) * n_q + row] = m + logf(l);
    }
}
"""

BR, BC = 64, 64


def flash(rt, kernels, q, k, v, scale):
    B, H, N, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    kern = kernels[D]
    o, lse = rt.full(q.shape, np.nan), rt.full(q.shape[:3], np.nan)
    smem = 2 * BC * D * 4
    kern.max_dynamic_shared_size_bytes = smem
    kern(((N + BR - 1) // BR, H, B), (BR,), (q, k, v, o, lse, rt.int32(N), rt.int32(Nk),
                                             rt.int32(H), rt.int32(Hkv), rt.float32(scale)),
         shared_mem=smem)
    return o, lse


def reference(q, k, v, scale):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    lse = (np.log(p.sum(-1)) + m[..., 0])
    return np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v), lse


CASES = [  # (B, H, Hkv, Nq, Nk, d)
    (1, 1, 1, 1, 1, 64), (1, 2, 2, 17, 17, 64), (1, 2, 1, 63, 63, 64), (1, 2, 2, 64, 64, 64),
    (1, 2, 2, 65, 65, 64), (2, 2, 2, 127, 127, 32), (1, 4, 2, 128, 128, 64),
    (1, 4, 4, 129, 129, 128), (2, 4, 1, 97, 211, 64), (1, 2, 2, 191, 191, 128),
    (2, 4, 2, 256, 256, 64), (1, 4, 4, 257, 257, 128), (2, 2, 2, 300, 300, 64),
    (1, 8, 2, 300, 300, 128), (2, 4, 4, 300, 300, 128), (1, 2, 2, 1, 300, 128),
    (1, 4, 4, 199, 300, 32), (2, 2, 1, 293, 293, 64), (1, 2, 2, 300, 17, 128),
    (2, 4, 4, 211, 211, 128),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=len(CASES))
    ap.add_argument("--race", default="sample", choices=["sample", "full", "off"])
    args = ap.parse_args()
    print(f"NVRTC: {nvrtc_status()}")
    print(f"host compiler: {cpu_build.compiler_status()}")
    exprs = tuple(f"flash_fwd<{d}, {BR}, {BC}>" for d in (32, 64, 128))

    # Cold: an empty cache (NVRTC, the runtime object and the kernel library all built).
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GRADER_CACHE"] = tmp
        cpu_build._runtime_object.cache_clear()
        t = time.perf_counter()
        CpuRuntime().compile(FLASH, name_expressions=exprs)
        cold = time.perf_counter() - t
    del os.environ["GRADER_CACHE"]
    cpu_build._runtime_object.cache_clear()
    rt = CpuRuntime(race_check=args.race)
    rt.compile(FLASH, name_expressions=exprs)  # fill the real cache
    t = time.perf_counter()
    mod = rt.compile(FLASH, name_expressions=exprs)
    cached = time.perf_counter() - t
    print(f"compile, cold cache (NVRTC + host, 3 instantiations): {cold:6.2f} s")
    print(f"compile, cached:                                      {cached:6.3f} s")

    kernels = {d: mod.get_function(e) for d, e in zip((32, 64, 128), exprs)}
    rng = np.random.default_rng(0)
    total, worst = 0.0, 0.0
    for (B, H, Hkv, Nq, Nk, d) in CASES[:args.cases]:
        q = rng.standard_normal((B, H, Nq, d), dtype=np.float32)
        k = rng.standard_normal((B, Hkv, Nk, d), dtype=np.float32)
        v = rng.standard_normal((B, Hkv, Nk, d), dtype=np.float32)
        scale = 1 / np.sqrt(d)
        t = time.perf_counter()
        o, lse = flash(rt, kernels, q, k, v, scale)
        dt = time.perf_counter() - t
        ro, rl = reference(q, k, v, scale)
        err = np.linalg.norm(o - ro) / np.linalg.norm(ro)
        assert err < 1e-5 and np.abs(lse - rl).max() < 1e-4, (B, H, Nq, Nk, d, err)
        total += dt
        worst = max(worst, dt)
        print(f"  B={B} H={H} Hkv={Hkv} Nq={Nq:3d} Nk={Nk:3d} d={d:3d}: {dt * 1e3:7.1f} ms "
              f"(rel err {err:.1e})")
    print(f"{min(args.cases, len(CASES))} launches (race check: {args.race}): {total:.2f} s, "
          f"slowest {worst:.2f} s")
    print(f"estimated grading time with a cached compile: {total + cached:.2f} s; "
          f"with a cold one: {total + cold:.2f} s")


if __name__ == "__main__":
    main()
