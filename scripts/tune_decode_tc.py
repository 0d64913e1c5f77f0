#!/usr/bin/env python3
"""Tune module 13's decode on the GPU: CONFIG (WARPS, TILE_KEYS, STAGES) and BLOCKS_PER_SM.

    PYTHONPATH=$PWD python scripts/tune_decode_tc.py [--configs W,TK,S,BPS[,SPLITS] ...] [--shapes B,ctx,T ...]

Times the solution's launch (CUDA events, median of 20 after 3) for each variant on each shape
(bfloat16, H = 64, Hkv = 8, d = 128, page size 16: the bench's), next to a device copy of the same
bytes and torch's cuDNN backend on the dense cache, all in the same run, and prints a table: time, and
the share of the copy's bandwidth. A variant is the solution with CONFIG and BLOCKS_PER_SM set (and,
with a fifth number, the split count forced).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.attention.baselines import copy_bandwidth, kv_bytes, torch_sdpa_dense  # noqa: E402
from grader.bench import time_gpu  # noqa: E402
from grader.course import load  # noqa: E402
from grader.engine.runner import case_rng  # noqa: E402
from grader.runtimes import get_runtime  # noqa: E402
from grader.spec import BenchContext  # noqa: E402
from grader.tasks.decode_tensor_cores import checks  # noqa: E402


def ms(fn, rt):
    return float(np.median(time_gpu(fn, rt, warmup=3, reps=20)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", nargs="*", default=["4,16,4,2", "4,16,2,3", "4,16,3,2", "4,32,2,2", "8,16,2,2"])
    ap.add_argument("--files", nargs="*", default=[], help="other versions of the solution to time too")
    ap.add_argument("--in-order", action="store_true",
                    help="pages in the pool's order (block table 0, 1, 2, ...) instead of shuffled")
    ap.add_argument("--shapes", nargs="*", default=["1,131072,1", "64,8192,1", "64,2048,1", "1,32768,1", "64,2048,4"])
    args = ap.parse_args()
    rt = get_runtime("gpu")
    import importlib.util
    sols = [("", load("13_decode_tensor_cores"))]
    for f in args.files:
        spec = importlib.util.spec_from_file_location(Path(f).stem, f)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        sols.append((Path(f).stem + " ", m))
    cudnn = torch_sdpa_dense("CUDNN_ATTENTION")
    print(f"{'shape':<18} {'variant':<34} {'ms':>8} {'of copy':>8}")
    for shape in args.shapes:
        B, ctx, T = (int(x) for x in shape.split(","))
        p = dict(B=B, T=T, H=64, Hkv=8, d=128, ctx=ctx, page_size=16, dtype="bfloat16", tiled=True, shuffle=not args.in_order)
        x = checks.make_inputs(p, case_rng(0, shape))
        dev = {k: rt.asarray(v) if isinstance(v, np.ndarray) else v for k, v in x.items()}
        b = BenchContext(rt, dev, p, None)
        t_copy = ms(lambda: copy_bandwidth(b), rt)
        print(f"{shape:<18} {'copy, ' + format(kv_bytes(p) / 1e6, '.0f') + ' MB':<34} {t_copy:8.3f} {100:7.1f}%")
        try:
            t = ms(lambda: cudnn(b), rt)
            print(f"{shape:<18} {'torch cuDNN':<34} {t:8.3f} {100 * t_copy / t:7.1f}%")
        except Exception as e:          # noqa: BLE001
            print(f"{shape:<18} torch cuDNN failed: {e}")
        for c, (tag, sol) in ((c, s_) for s_ in sols for c in args.configs):
            w, tk, s, bps, *splits = (int(v) for v in c.split(","))
            sol.CONFIG = dict(sol.CONFIG, WARPS=w, TILE_KEYS=tk, STAGES=s)
            sol.BLOCKS_PER_SM = bps
            try:
                pv = dict(p, num_splits=splits[0]) if splits else p
                t = ms(lambda: checks.call(sol.decode_tc, rt, dev, pv), rt)
                name = tag + f"W{w} TK{tk} S{s} BPS{bps}" + (f" splits={splits[0]}" if splits else "")
                print(f"{shape:<18} {name:<34} {t:8.3f} {100 * t_copy / t:7.1f}%", flush=True)
            except Exception as e:      # noqa: BLE001
                print(f"{shape:<18} {tag}W{w} TK{tk} S{s} BPS{bps} failed: {type(e).__name__}: {str(e)[:200]}")
        del dev, x
        rt.xp.get_default_memory_pool().free_all_blocks()
    return 0


if __name__ == "__main__":
    sys.exit(main())
