#!/usr/bin/env python3
"""On a GPU machine: run `grader bench ID --solution --json` for every module and write
grader/data/h100_bench.json, the figures CPU notebooks show (grader/measured.py); then rewrite each
lesson's roofline table from it (modules/ID.md, between the roofline markers).

    PYTHONPATH=$PWD python scripts/record_bench.py [--out FILE] [--modules ID ...]
    python scripts/record_bench.py --lessons-only          # only the lessons, from the file as it is
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "grader" / "data" / "h100_bench.json"))
    ap.add_argument("--lessons-only", action="store_true")
    ap.add_argument("--modules", nargs="*", help="only these modules, merged into the file as it is; "
                    "measured on another GPU than the file's, each gets its own entry under `devices`")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.lessons_only:
        return update_lessons()
    import cupy

    from grader import catalogue, measured
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout.splitlines()[0]
    gpu, driver = (x.strip() for x in smi.split(","))
    rtv = cupy.cuda.runtime.runtimeGetVersion()
    versions = {"cupy": cupy.__version__, "cuda_runtime": f"{rtv // 1000}.{rtv % 1000 // 10}"}
    try:
        import torch
        versions["torch"] = torch.__version__
    except ImportError:
        pass
    if args.modules:
        return record_modules(args.modules, gpu, driver, Path(args.out))
    out = {"gpu": gpu, "driver": driver, "date": datetime.date.today().isoformat(), "versions": versions,
           "command": "grader bench ID --solution --json (median of 20 runs' device time, CUDA events)",
           "peaks": None, "modules": {}}
    for ex in catalogue.EXERCISES:
        if ex.id in measured.MULTI_GPU:        # one process per GPU: `grader bench 12 --solution --json` on a machine
            continue                           # with several GPUs writes its own file (measured.MULTI_GPU)
        res = bench_json(ex.id)
        if res is None:
            return 1
        out["peaks"] = res["peaks"]
        out["modules"][ex.id] = res["cases"]
        print(f"{ex.id}: {len(res['cases'])} cases", flush=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return update_lessons() if Path(args.out).resolve() == Path(measured_file()).resolve() else 0


def bench_json(ex_id: str) -> dict | None:
    """`grader bench ID --solution --json` of one module, or None (said on stderr) when it failed."""
    p = subprocess.run([sys.executable, "-m", "grader", "bench", ex_id, "--solution", "--json"],
                       cwd=ROOT, capture_output=True, text=True)
    if p.returncode:
        print(f"{ex_id}: grader bench failed:\n{p.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(p.stdout)


def record_modules(ids, gpu, driver, path) -> int:
    """`grader bench ID --solution --json` of some modules, merged into the file: their cases and date,
    and, on another GPU than the file's, that GPU, its driver and its peaks under `devices`."""
    from grader import catalogue
    out = json.loads(path.read_text())
    for ex_id in ids:
        ex = catalogue.resolve(ex_id)
        res = bench_json(ex.id)
        if res is None:
            return 1
        out["modules"][ex.id] = res["cases"]
        out.setdefault("dates", {})[ex.id] = datetime.date.today().isoformat()
        if gpu != out["gpu"]:
            out.setdefault("devices", {})[ex.id] = {"gpu": gpu, "driver": driver, "peaks": res["peaks"]}
        else:
            out.get("devices", {}).pop(ex.id, None)
        print(f"{ex.id}: {len(res['cases'])} cases", flush=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


def measured_file():
    from grader import measured
    return measured.FILE


def update_lessons() -> int:
    from grader import catalogue, measured, paths
    measured.measured.cache_clear()
    for ex in catalogue.EXERCISES:
        if ex.id in measured.MULTI_GPU:
            continue
        path = paths.lesson_file(ex.id)
        text = path.read_text()
        new = measured.update_lesson(text, ex.id)
        if new != text:
            path.write_text(new)
            print(f"updated {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
