#!/usr/bin/env python3
"""Variants of the 09 backward kernel on the GPU, in one run: each is compared with the float64 reference
on small shapes, then timed at the bench shape (B=2, H=16, N=4096, d=128), full and causal.

    PYTHONPATH=$PWD python scripts/tune_backward.py [--reps 10] [--only name,name]

A variant is the solution's source with CONFIG set and, optionally, text edits applied to it (a probe
such as "no atomics" is not a correct kernel: it only says what a part costs).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SOL = ROOT / "solutions" / "09_flash_backward.py"

# Key tile slowest in the grid: the blocks of the first key tiles (the longest under causal) start first.
LONG_FIRST = (
    ("const int k_start = blockIdx.x * BLOCK_N;", "const int k_start = blockIdx.z * BLOCK_N;"),
    ("const int h_kv = blockIdx.y, b = blockIdx.z;", "const int h_kv = blockIdx.x, b = blockIdx.y;"),
    ('grid = (cdiv(n_k, CONFIG["BLOCK_N"]), H_kv, B)', 'grid = (H_kv, B, cdiv(n_k, CONFIG["BLOCK_N"]))'),
)
NO_ATOMICS = (
    ("atomicAdd(&dq[(bh + i) * D + slice_col(e, qx)], scale * acc_q[r][e]);",
     "if (acc_q[r][e] == 1234.5f) dq[(bh + i) * D + slice_col(e, qx)] = 0.0f;"),
)

TP_UNROLL4 = (("#pragma unroll 2\n    for (int c = 0; c < D; c += 4)", "#pragma unroll 4\n    for (int c = 0; c < D; c += 4)"),)
DKV_UNROLL4 = (("#pragma unroll 2\n            for (int r = 0; r < BLOCK_M; ++r)", "#pragma unroll 4\n            for (int r = 0; r < BLOCK_M; ++r)"),)
DQ_UNROLL2 = (("            for (int j = 0; j < BLOCK_N; j += 4) {", "            #pragma unroll 2\n            for (int j = 0; j < BLOCK_N; j += 4) {"),)

VARIANTS = {
    "64x64": (dict(BLOCK_M=64, BLOCK_N=64, NTHREADS=256), ()),
    "32x64": (dict(BLOCK_M=32, BLOCK_N=64, NTHREADS=256), ()),
    "64x64_long_first": (dict(BLOCK_M=64, BLOCK_N=64, NTHREADS=256), LONG_FIRST),
    "64x64_tp_unroll4": (dict(BLOCK_M=64, BLOCK_N=64, NTHREADS=256), TP_UNROLL4),
    "64x64_dkv_unroll4": (dict(BLOCK_M=64, BLOCK_N=64, NTHREADS=256), DKV_UNROLL4),
    "64x64_dq_unroll2": (dict(BLOCK_M=64, BLOCK_N=64, NTHREADS=256), DQ_UNROLL2),
    "64x64_no_atomics(probe)": (dict(BLOCK_M=64, BLOCK_N=64, NTHREADS=256), NO_ATOMICS),
}


def load_variant(source, config, edits):
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    ns = {"__name__": "variant"}
    exec(compile(source, str(SOL), "exec"), ns)
    ns["CONFIG"] = dict(config)
    return ns


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--only", default="")
    ap.add_argument("--backend", default="gpu", help="cpu: check the variants on the emulator, no timing")
    ap.add_argument("--old", default="", help="also time this file (e.g. the committed solution, from git show)")
    args = ap.parse_args()
    from grader.attention import backward as BW
    from grader.bench import time_gpu
    from grader.runtimes import get_runtime
    rt = get_runtime(args.backend)
    cp = rt.xp
    if args.backend == "gpu":
        print(f"device: {rt.device_name}, SMs {rt.multiprocessor_count}", flush=True)
    rng = np.random.default_rng(0)

    variants = dict(VARIANTS)
    if args.only:
        variants = {k: v for k, v in variants.items() if k in args.only.split(",")}
    sources = {name: SOL.read_text() for name in variants}
    if args.old:
        variants["old: " + Path(args.old).name] = (None, ())
        sources["old: " + Path(args.old).name] = Path(args.old).read_text()

    small = [dict(B=1, H=2, Hkv=1, Nq=130, Nk=200, d=32), dict(B=1, H=2, Hkv=2, Nq=77, Nk=300, d=64, causal=True),
             dict(B=1, H=2, Hkv=1, Nq=150, Nk=60, d=96, causal=True), dict(B=1, H=4, Hkv=2, Nq=200, Nk=260, d=128)]
    cases = []
    for p in small:
        x = BW.backward_inputs(p, rng)
        dx = {k: rt.asarray(v) if isinstance(v, np.ndarray) else v for k, v in x.items()}
        cases.append((p, dx, BW.reference(x)))

    B, H, N, d = 2, 16, 4096, 128
    xp = cp if args.backend == "gpu" else np
    big = {n: xp.asarray(rng.standard_normal((B, H, N, d) if args.backend == "gpu" else (1, 1, 1, d), dtype=np.float32)) for n in ("q", "k", "v", "o", "do")}
    big["lse"] = xp.full(big["q"].shape[:3], 12.0, dtype=np.float32)
    scale = d ** -0.5
    flops = 2.5 * 4 * B * H * N * N * d

    for name, (config, edits) in variants.items():
        ns = load_variant(sources[name], config or {}, edits) if config else None
        if ns is None:                            # the committed solution as it is
            ns = {"__name__": "old"}
            exec(compile(sources[name], "old", "exec"), ns)
        fn = ns["flash_backward"]
        errs = []
        for p, dx, ref in cases:
            out = fn(rt, dx["q"], dx["k"], dx["v"], dx["o"], dx["lse"], dx["do"], dx["scale"], causal=dx["causal"])
            errs.append(max(float(np.max(np.abs((cp.asnumpy(o) if args.backend == "gpu" else np.asarray(o)) - r)) / (np.max(np.abs(r)) + 1e-30))
                            for o, r in zip(out, (ref["dq"], ref["dk"], ref["dv"]))))
        line = [f"{name:28s} max rel err {max(errs):.1e}"]
        for causal in ((False, True) if args.backend == "gpu" else ()):
            ms = float(np.median(time_gpu(lambda: fn(rt, big["q"], big["k"], big["v"], big["o"], big["lse"],
                                                     big["do"], scale, causal=causal), rt, warmup=2, reps=args.reps)))
            f = flops / 2 if causal else flops
            line.append(f"{'causal' if causal else 'full'} {ms:7.2f} ms {f / ms / 1e9:5.1f} TFLOP/s")
        print("  ".join(line), flush=True)
        if args.backend == "gpu":
            cp.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
