#!/usr/bin/env python3
"""The emulator's roofline estimate next to a GPU measurement, on each module's counter case.

    PYTHONPATH=$PWD python scripts/counters_vs_gpu.py --estimate 02 04 05     # on any machine (emulator)
    PYTHONPATH=$PWD python scripts/counters_vs_gpu.py --measure 02 04 05      # on a GPU (CUDA events)

Both print one line per module; the ratio estimate / measured is what the lesson's model is judged by.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    from grader import catalogue
    from grader.counting import counter_case, summary
    from grader.course import load
    ap = argparse.ArgumentParser()
    ap.add_argument("ids", nargs="+")
    ap.add_argument("--estimate", action="store_true")
    ap.add_argument("--measure", action="store_true")
    args = ap.parse_args()
    out = {}
    for i in args.ids:
        ex = catalogue.resolve(i)
        sol = load(ex.id)
        fn = getattr(sol, ex.entry)
        case = counter_case(ex)
        row = {"case": case.name}
        if args.estimate:
            s = summary(ex, fn, getattr(sol, "CONFIG", {}))
            row.update(estimate_ms=s["estimate"]["seconds"] * 1e3, bound=s["estimate"]["bound"],
                       global_mb=s["global_bytes"] / 1e6)
        if args.measure:
            from grader.bench import time_gpu
            from grader.engine.runner import case_rng
            from grader.runtimes import get_runtime
            from grader.tasks import load_task
            rt = get_runtime("gpu")
            task = load_task(ex)
            inputs = task.make_inputs(case.params, case_rng(0, case.name))
            dev = {k: rt.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
            row["measured_ms"] = float(np.median(time_gpu(lambda: task.call(fn, rt, dev, case.params), rt, 5, 50)))
            row["device"] = rt.device_name
        out[ex.id] = row
        print(ex.id, json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
