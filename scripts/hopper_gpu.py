"""Module 10 in progress: check solutions/10_flash_hopper.py on an sm_90 GPU with module 06's cases
and tolerances (its kernel takes 06's inputs and gives 06's outputs), then time it next to module 06
and torch's FlashAttention-2 and cuDNN backends, same inputs, same run.

    python scripts/hopper_gpu.py            # check, then the bench table
    python scripts/hopper_gpu.py check
    python scripts/hopper_gpu.py bench [--json FILE]

Exit 1 when a check fails. Until the CPU emulator runs wgmma, TMA and mbarriers, this is the
module's test (docs/design.md, "Module 10").
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader import catalogue  # noqa: E402
from grader.bench import time_gpu  # noqa: E402
from grader.course import load  # noqa: E402
from grader.engine.check import run_check  # noqa: E402

SOLUTION = ROOT / "solutions" / "10_flash_hopper.py"
# The shapes: (B, H, N) at d = 128 and 64, float16 and bfloat16, full and causal.
SHAPES = [(2, 16, 4096), (1, 16, 16384)]


def check() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        shim = Path(tmp) / "10_as_06.py"
        shim.write_text(SOLUTION.read_text() + "\n\nflash_tc = flash_hopper\n")
        report = run_check(catalogue.resolve("06"), shim, "gpu", seed=7)
    failed = [c for c in report["cases"] if not c["passed"]]
    for c in report["cases"]:
        print(f"  {'ok ' if c['passed'] else 'BAD'} {c['name']:32} rel {c.get('rel_err', float('nan')):.1e}"
              + ("" if c["passed"] else f"  {c.get('message', '')[:300]}"), flush=True)
    print(f"module 06's checks on the Hopper kernel: {len(report['cases']) - len(failed)} passed, "
          f"{len(failed)} failed", flush=True)
    return 1 if failed or not report["cases"] else 0


def bench(json_path: str | None) -> int:
    import cupy
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from grader.runtimes.gpu import GpuRuntime
    rt = GpuRuntime()
    spec = importlib.util.spec_from_file_location("solution_flash_hopper", SOLUTION)
    hopper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hopper)
    sol06 = load("06")
    rows = []
    print(f"{rt.device_name}; TFLOP/s, median of 20 calls (4·B·H·N²·d FLOPs, halved when causal)", flush=True)
    for B, H, N in SHAPES:
        for d in (128, 64):
            for elem in ("float16", "bfloat16"):
                for causal in (False, True):
                    tdt = torch.float16 if elem == "float16" else torch.bfloat16
                    g = torch.Generator(device="cuda").manual_seed(0)
                    tq, tk, tv = (torch.randn(B, H, N, d, device="cuda", generator=g).to(tdt) for _ in range(3))
                    as_cp = (lambda t: cupy.from_dlpack(t)) if elem == "float16" else \
                        (lambda t: cupy.from_dlpack(t.view(torch.int16)).view(cupy.uint16))
                    q, k, v = as_cp(tq), as_cp(tk), as_cp(tv)
                    scale = 1 / math.sqrt(d)
                    flops = 4 * B * H * N * N * d / (2 if causal else 1)
                    fns = {"10 hopper": lambda: hopper.flash_hopper(rt, q, k, v, scale, causal, dtype=elem),
                           "06": lambda: sol06.flash_tc(rt, q, k, v, scale, causal, dtype=elem)}
                    for name, backend in (("torch FA2", SDPBackend.FLASH_ATTENTION), ("torch cuDNN", SDPBackend.CUDNN_ATTENTION)):
                        def run(backend=backend):
                            with sdpa_kernel(backend):
                                return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal, scale=scale)
                        fns[name] = run
                    res = {}
                    for name, fn in fns.items():
                        try:
                            times = time_gpu(fn, rt)
                            res[name] = flops / (sorted(times)[len(times) // 2] * 1e-3) / 1e12
                        except Exception as e:          # a backend that refuses the case
                            res[name] = float("nan")
                            print(f"    {name}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                    row = dict(B=B, H=H, N=N, d=d, dtype=elem, causal=causal, tflops=res)
                    rows.append(row)
                    print(f"B{B} H{H} N{N:5} d{d:3} {elem:8} {'causal' if causal else 'full  '}  " +
                          "  ".join(f"{n} {x:5.0f}" for n, x in res.items()) +
                          f"   10/cuDNN {res['10 hopper'] / res['torch cuDNN']:.2f}  10/06 {res['10 hopper'] / res['06']:.2f}",
                          flush=True)
    if json_path:
        Path(json_path).write_text(json.dumps(dict(device=rt.device_name, rows=rows), indent=1) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="*", choices=("check", "bench", []), default=[])
    ap.add_argument("--json", help="bench: also write the table here")
    args = ap.parse_args()
    what = args.what or ["check", "bench"]
    rc = check() if "check" in what else 0
    if "bench" in what and rc == 0:
        rc = bench(args.json)
    return rc


if __name__ == "__main__":
    sys.exit(main())
