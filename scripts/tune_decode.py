#!/usr/bin/env python3
"""Tune modules 04/05's decode kernels on the GPU: warps per block, keys per step, number of splits.

    PYTHONPATH=$PWD python scripts/tune_decode.py [--quick]

Times the solution's launch (both kernels, CUDA events, median of 20) on the two bench shapes for each
variant and split count, next to a device-to-device copy of the same byte count, and prints a table.
A variant is the solution module with WARPS, KEYS_PER_STEP and MIN_BLOCKS set in its CONFIG, which the
launch code compiles into the kernels as -D options.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.bench import time_gpu  # noqa: E402
from grader.course import load  # noqa: E402
from grader.runtimes import get_runtime  # noqa: E402

SHAPES = {"B1_ctx65536": dict(B=1, H=32, H_kv=8, d=128, context=65536),
          "B64_ctx2048": dict(B=64, H=32, H_kv=8, d=128, context=2048)}


def variant(mod_name: str, warps: int, keys: int, min_blocks: int):
    """The solution, freshly loaded, with these tuning constants in its CONFIG (compiled in as -D options)."""
    m = load(mod_name)
    m.CONFIG = dict(m.CONFIG, WARPS=warps, KEYS_PER_STEP=keys, MIN_BLOCKS=min_blocks)
    return m


def ms(fn, rt):
    return float(np.median(time_gpu(fn, rt, warmup=3, reps=20)))


def run_shape(rt, shape_name, p, variants):
    """Rows of the table for one shape: the copy, every variant and split count, 05 and the host overhead."""
    cp = rt.xp
    B, H, H_kv, d, n = p["B"], p["H"], p["H_kv"], p["d"], p["context"]
    nbytes = 2.0 * B * H_kv * n * d * 4
    gbs = lambda t: nbytes / (t * 1e-3) / 1e9  # noqa: E731
    cp.random.seed(0)
    q = cp.random.standard_normal((B, H, d), dtype=cp.float32)
    k = cp.random.standard_normal((B, H_kv, n, d), dtype=cp.float32)
    v = cp.random.standard_normal((B, H_kv, n, d), dtype=cp.float32)
    lens = cp.full((B,), n, dtype=cp.int32)
    scale = 1.0 / np.sqrt(d)
    src, dst = cp.ones(int(nbytes) // 8, cp.float32), cp.empty(int(nbytes) // 8, cp.float32)

    def copy():
        dst[...] = src
    rows = []
    t_copy = ms(copy, rt)
    rows.append((shape_name, "copy (read+write = K+V bytes)", "", t_copy, gbs(t_copy), 100.0))
    # the paged layout of the same data (pages in a shuffled order)
    ps = 16
    n_pages = B * (n // ps)
    perm = cp.random.permutation(n_pages).astype(cp.int32)
    table = perm.reshape(B, n // ps)
    kp = cp.empty((n_pages, ps, H_kv, d), cp.float32)
    vp = cp.empty_like(kp)
    kp[table.reshape(-1)] = k.reshape(B, H_kv, n // ps, ps, d).transpose(0, 2, 3, 1, 4).reshape(-1, ps, H_kv, d)
    vp[table.reshape(-1)] = v.reshape(B, H_kv, n // ps, ps, d).transpose(0, 2, 3, 1, 4).reshape(-1, ps, H_kv, d)

    ref = None
    for warps, keys, minb in variants:
        getattr(rt, "resources", {}).clear()       # the runtime caches kernel attributes by name
        m4 = variant("04_splitkv_decode", warps, keys, minb)
        auto = m4.choose_num_splits(rt, B, H_kv, n)
        splits = {8, 16, 32, 64, 128, 256, auto} if B == 1 else {1, 2, 3, 4, auto}
        if (warps, keys, minb) == variants[0]:
            splits |= {1, 2, 4, 512}
        for s in sorted(splits):
            f = lambda s=s: m4.splitkv_decode(rt, q, k, v, lens, scale, num_splits=s)  # noqa: E731
            o, lse = f()
            if ref is None:
                ref = (o.copy(), lse.copy())
            err = float(cp.abs(o - ref[0]).max())
            t = ms(f, rt)
            tag = "auto" if s == auto else ""
            regs = m4._kernels(rt, H // H_kv, tuple(m4.CONFIG.items()))[0].attributes.get("num_regs")
            rows.append((shape_name, f"04 w={warps} k={keys} minb={minb} r={regs} splits={s} {tag}", f"{err:.1e}",
                         t, gbs(t), 100 * gbs(t) / gbs(t_copy)))
        if (warps, keys, minb) == variants[0]:
            getattr(rt, "resources", {}).clear()
            m5 = variant("05_paged_decode", warps, keys, minb)
            for s in sorted({1, auto}):
                f = lambda s=s: m5.paged_decode(rt, q, kp, vp, table, lens, scale, num_splits=s)  # noqa: E731
                o, lse = f()
                err = float(cp.abs(o - ref[0]).max())
                t = ms(f, rt)
                rows.append((shape_name, f"05 w={warps} k={keys} minb={minb} splits={s} ps=16", f"{err:.1e}",
                             t, gbs(t), 100 * gbs(t) / gbs(t_copy)))
            # the two kernels alone, and the host overhead of a call
            t_call = ms(lambda: m4.splitkv_decode(rt, q, k, v, lens, scale), rt)
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            for _ in range(50):
                m4.splitkv_decode(rt, q, k, v, lens, scale)
            stop.record()
            stop.synchronize()
            t_stream = cp.cuda.get_elapsed_time(start, stop) / 50
            rows.append((shape_name, "04 auto: per call / back-to-back (host overhead)",
                         f"{t_call:.3f}", t_stream, gbs(t_stream), 100 * gbs(t_stream) / gbs(t_copy)))
    return rows                                    # the arrays of this shape are freed on return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rt = get_runtime("gpu")
    print(f"device: {rt.device_name}, SMs: {rt.multiprocessor_count}")
    variants = [(4, 8, 4)] if args.quick else [
        (4, 8, 4), (4, 4, 4), (4, 4, 5), (4, 8, 3), (8, 4, 2), (8, 4, 3), (2, 4, 8), (4, 2, 6), (8, 8, 2)]
    rows = []
    for shape_name, p in SHAPES.items():
        rows += run_shape(rt, shape_name, p, variants)
        rt.xp.get_default_memory_pool().free_all_blocks()
    print(f"\n{'shape':<12} {'variant':<48} {'maxerr':>8} {'ms':>8} {'GB/s':>7} {'%copy':>6}")
    for r in rows:
        print(f"{r[0]:<12} {r[1]:<48} {r[2]:>8} {r[3]:8.3f} {r[4]:7.0f} {r[5]:6.1f}")


if __name__ == "__main__":
    main()
