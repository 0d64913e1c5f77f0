#!/usr/bin/env python3
"""Tile-size sweep for the 02/03 solutions on the GPU, in one run: each variant is checked against the
float64 reference on small shapes, then timed at the bench shape next to naive cuBLAS attention.

    PYTHONPATH=$PWD python scripts/tune_flash.py [--variants 64x64,64x32,...] [--reps 10]

A variant is the solution module with BLOCK_M and BLOCK_N set in its CONFIG: the launch code compiles the
kernel with CONFIG's values as -D options, and computes its threads and shared memory from them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def variant(mod_name, bm, bn):
    """The solution, freshly loaded, with BLOCK_M = bm and BLOCK_N = bn in its CONFIG."""
    from grader.course import load
    m = load(mod_name)
    m.CONFIG = dict(m.CONFIG, BLOCK_M=bm, BLOCK_N=bn)
    return m


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="64x64,64x32,128x32,32x64,128x64")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--N", type=int, default=4096)
    args = ap.parse_args()
    from grader.attention import baselines as BL
    from grader.attention import references as R
    from grader.attention.inputs import attention_inputs
    from grader.bench import time_gpu
    from grader.course import load
    from grader.runtimes import get_runtime
    from grader.spec import BenchContext
    rt = get_runtime("gpu")
    cp = rt.xp
    print(f"device: {rt.device_name}, SMs {rt.multiprocessor_count}, smem opt-in {rt.max_shared_memory_per_block_optin}")
    rng = np.random.default_rng(0)

    def inputs(B, H, Hkv, n_q, n_k, d):
        x = attention_inputs(dict(B=B, H=H, Hkv=Hkv, Nq=n_q, Nk=n_k, d=d), rng)
        return x, {k: rt.asarray(v) if isinstance(v, np.ndarray) else v for k, v in x.items()}

    small = [(1, 2, 1, 130, 200, 32), (1, 2, 2, 77, 300, 64), (1, 2, 1, 150, 60, 96), (1, 1, 1, 200, 200, 128),
             (1, 2, 1, 40, 170, 128)]
    refs = {}
    for shp in small:
        x, dx = inputs(*shp)
        refs[shp] = (x, dx, R.attention(x["q"], x["k"], x["v"], x["scale"]),
                     R.attention(x["q"], x["k"], x["v"], x["scale"], causal=True))
    p = dict(B=2, H=16, Hkv=16, Nq=args.N, Nk=args.N, d=128)
    _, big = inputs(2, 16, 16, args.N, args.N, 128)
    flops = BL.attention_flops(p)

    def t(fn):
        return float(np.median(time_gpu(fn, rt, warmup=2, reps=args.reps)))

    rows = []
    ms_naive = t(lambda: BL.naive_cublas(BenchContext(rt, big, p, load)))
    rows.append(("naive (cuBLAS)", "", ms_naive, flops / ms_naive / 1e9, ""))
    ms_naive_c = t(lambda: BL.naive_cublas(BenchContext(rt, big, p, load), causal=True))
    rows.append(("naive causal (cuBLAS)", "", ms_naive_c, flops / 2 / ms_naive_c / 1e9, ""))
    cp.get_default_memory_pool().free_all_blocks()
    for v in args.variants.split(","):
        bm, bn = (int(s) for s in v.split("x"))
        for mod_name, entry, causal in (("02_flash_forward", "flash_forward", False),
                                        ("03_flash_causal", "flash_causal", True)):
            try:
                m = variant(mod_name, bm, bn)
                if m.shared_bytes(128) > rt.max_shared_memory_per_block_optin:
                    rows.append((entry, v, float("nan"), 0, "smem too large"))
                    continue
                fn = getattr(m, entry)
                worst = 0.0
                for shp, (x, dx, ref, ref_c) in refs.items():
                    o, lse = fn(rt, dx["q"], dx["k"], dx["v"], dx["scale"])
                    want_o, want_lse = ref_c if causal else ref
                    e = np.linalg.norm(cp.asnumpy(o) - want_o) / np.linalg.norm(want_o)
                    lg, lw = cp.asnumpy(lse), want_lse
                    fin = np.isfinite(lw)
                    e2 = np.linalg.norm(np.where(fin, lg - lw, 0)) / np.linalg.norm(np.where(fin, lw, 0))
                    if (np.isfinite(lg) != fin).any():
                        e2 = float("inf")
                    worst = max(worst, e, e2)
                ms = t(lambda: fn(rt, big["q"], big["k"], big["v"], big["scale"]))
                f = flops / 2 if causal else flops
                rows.append((entry, v, ms, f / ms / 1e9, f"{m.nthreads()} threads, {m.shared_bytes(128) // 1024} KB, "
                             f"max rel err {worst:.1e}" + ("" if worst < 2e-5 else " FAIL")))
            except Exception as ex:  # a variant that does not compile or launch
                rows.append((entry, v, float("nan"), 0, f"{type(ex).__name__}: {str(ex)[:80]}"))
            print(rows[-1], flush=True)
    print(f"\nB=2 H=16 N={args.N} d=128 float32, median of {args.reps} (CUDA events), {rt.device_name}")
    print(f"{'kernel':<24}{'tile':<8}{'ms':>9}{'TFLOP/s':>9}  note")
    for name, v, ms, tf, note in rows:
        print(f"{name:<24}{v:<8}{ms:9.3f}{tf:9.1f}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
