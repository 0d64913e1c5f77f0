"""`grader bench ID --backend cpu` and `grader check ID --counters`: what the kernel would move on a GPU,
counted by the emulator on one representative case, and a roofline estimate of its time.

A task's bench.py may declare `COUNTER_CASE` (a BenchCase: the shape, its FLOPs or bytes) and
`tiles(params, config, inputs) -> (needed, all)`, the key tiles a schedule needs (causal, block-sparse)
out of all of them. Without COUNTER_CASE, the largest check case is counted and no estimate made.
"""
from __future__ import annotations

import json

import numpy as np


def counter_case(ex):
    from .spec import BenchCase
    from .tasks import load_piece, load_task
    case = getattr(load_piece(ex, "bench"), "COUNTER_CASE", None)
    if case is not None:
        return case
    last = load_task(ex).CASES[-1]
    return BenchCase(last.name, dict(last.params))


def count(ex, fn, config: dict | None = None, params: dict | None = None):
    """Run `fn` (the checked file's entry) on the counter case (or on `params`) on a counting
    emulator -> (case, inputs, outputs, Report)."""
    from .engine.runner import case_rng
    from .runtimes.cpu import CpuRuntime
    from .runtimes.cpu.counters import Report
    from .tasks import load_task
    task = load_task(ex)
    case = counter_case(ex)
    if params is not None:
        from .spec import BenchCase
        case = BenchCase("custom", dict(params))
    rt = CpuRuntime(race_check="off")
    rt.counting = True
    inputs = task.make_inputs(case.params, case_rng(0, case.name))
    dev = {k: rt.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    outputs = task.call(fn, rt, dev, case.params)
    return case, inputs, outputs, Report(rt.counter_log)


def summary(ex, fn, config: dict | None, params: dict | None = None) -> dict:
    """The counts and the estimate as data (what `--json` prints, and what tests assert on)."""
    from .roofline import H100_SXM, Bound, minimum_bytes, uses_tensor_cores
    from .tasks import load_piece
    case, inputs, outputs, report = count(ex, fn, config, params)
    total_bytes = report.global_bytes()
    minimum = minimum_bytes(inputs, outputs, case.baseline_only)
    out = {"id": ex.id, "case": case.name, "params": case.params, "global_bytes": total_bytes,
           "compulsory_bytes": minimum, "kernels": {}, "args_read": {}, "args_written": {}}
    for c in report.launches:
        k = out["kernels"].setdefault(c.kernel, {"launches": 0, "blocks": 0, "barriers": 0, "global_bytes": 0,
                                                 "sectors": 0, "requests": 0, "shared_requests": 0,
                                                 "wavefronts": 0, "ideal_wavefronts": 0, "races": []})
        t = c.total()
        k["launches"] += 1
        k["blocks"] += c.blocks
        k["barriers"] += c.barriers
        k["global_bytes"] += t.global_bytes
        k["sectors"] += t.g_sectors
        k["requests"] += t.g_requests
        k["shared_requests"] += t.s_requests
        k["wavefronts"] += t.s_wavefronts
        k["ideal_wavefronts"] += t.s_ideal
        if c.race:
            k["races"].append(c.race)
        for name, b in c.arg_read.items():
            out["args_read"][name] = out["args_read"].get(name, 0) + b
        for name, b in c.arg_write.items():
            out["args_written"][name] = out["args_written"].get(name, 0) + b
    tiles = getattr(load_piece(ex, "bench"), "tiles", None)
    cfg = config or {}
    if tiles is not None and "k" in out["args_read"] and cfg.get("BLOCK_N"):
        p = case.params
        needed, every = tiles(p, cfg, inputs)
        tile_bytes = cfg["BLOCK_N"] * p["d"] * np.dtype(np.asarray(inputs["k"]).dtype).itemsize
        out["tiles"] = {"computed": out["args_read"]["k"] / tile_bytes, "needed": needed, "all": every}
    if case.flops or case.bytes:
        est = Bound(H100_SXM, case.flops, total_bytes, uses_tensor_cores(case.params))
        out["estimate"] = {"device": est.peaks.name, "source": est.peaks.source, "seconds": est.seconds,
                           "bound": "memory" if est.limit == "memory" else "compute",
                           "compute_s": est.compute_s, "memory_s": est.memory_s, "flops": case.flops}
    out["report"] = report
    return out


def print_counts(ex, fn, config, as_json=False) -> int:
    from .runtimes.cpu.counters import table
    s = summary(ex, fn, config)
    report = s.pop("report")
    if as_json:
        print(json.dumps(s, indent=1, default=float))
        return 0
    shape = ", ".join(f"{k}={v}" for k, v in s["params"].items() if len(str(v)) < 40)
    print(f"counters for {ex.id} on the CPU emulator, case {s['case']} ({shape}): what a GPU would move,")
    print("counted from the kernel's own loads and stores.")
    print(table(report))
    comp = s["compulsory_bytes"]
    print(f"\n  global memory: {s['global_bytes'] / 1e6:.3f} MB moved, against {comp / 1e6:.3f} MB for reading "
          f"every input and writing every output once ({s['global_bytes'] / max(comp, 1):.2f}×)")
    reads = ", ".join(f"{k} {v / 1e6:.3f} MB" for k, v in s["args_read"].items() if v)
    writes = ", ".join(f"{k} {v / 1e6:.3f} MB" for k, v in s["args_written"].items() if v)
    print(f"  read: {reads or 'nothing'};  written: {writes or 'nothing'}")
    if "tiles" in s:
        t = s["tiles"]
        print(f"  key tiles: {t['computed']:.0f} loaded; the schedule needs {t['needed']} of {t['all']} "
              f"({t['computed'] / max(t['needed'], 1):.2f}× what it needs)")
    if "estimate" in s:
        e = s["estimate"]
        print(f"  estimate on an {e['device']}: {e['seconds'] * 1e3:.3f} ms, {e['bound']}-bound (roofline: "
              f"{e['compute_s'] * 1e3:.3f} ms of FLOPs at peak, {e['memory_s'] * 1e3:.3f} ms for the counted bytes at "
              f"DRAM bandwidth; peaks from the {e['source']}). An estimate: it ignores L2 reuse, latency and "
              "occupancy (lesson 02, 'What the counters say').")
    else:
        print("  no estimate: this module declares no FLOP or byte count for its counter case.")
    return 0


def bytes_chart(s: dict):
    """A figure of a summary's bytes per array, read and written, as the emulator counted them."""
    import matplotlib.pyplot as plt
    names = [n for n in s["args_read"] if s["args_read"][n] or s["args_written"].get(n)]
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(x - 0.2, [s["args_read"][n] / 1e6 for n in names], 0.4, label="read (counted)")
    ax.bar(x + 0.2, [s["args_written"].get(n, 0) / 1e6 for n in names], 0.4, label="written (counted)")
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_ylabel("MB")
    ax.set_title(f"bytes per array: {s['global_bytes'] / 1e6:.2f} MB moved, "
                 f"{s['compulsory_bytes'] / 1e6:.2f} MB minimum")
    ax.legend()
    fig.tight_layout()
    return fig


def kernel_lines(s: dict) -> str:
    """One line per kernel of a summary: blocks, sectors per request, shared wavefronts."""
    return "\n".join(f"{name}: {k['blocks']} blocks, {k['sectors'] / max(k['requests'], 1):.1f} sectors per warp "
                     f"request, {k['wavefronts']} shared wavefronts for {k['ideal_wavefronts']} without conflicts"
                     for name, k in s["kernels"].items())
