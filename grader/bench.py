"""`grader bench`: median GPU time of a kernel next to CuPy baselines, with TFLOP/s or GB/s.

The time is the device's: each call is queued behind a kernel that keeps the GPU busy while the host
queues it (time_gpu), so Python's and the launches' cost on the host is left out, for every contender
alike; that cost is reported beside it (host).

A task's bench.py holds BENCH, a list of spec.BenchCase. Each names its inputs' shape, the figure
that matters (FLOPs for compute-bound kernels, bytes for memory-bound ones) and baselines: callables
(BenchContext) -> outputs, timed exactly like the student's function. Baselines that need the course's
own solution of a module get it from BenchContext.solution: this command loads it, not the task.

Each time is also shown as a share of the device's roofline (grader/roofline.py): the case's FLOPs at
the peak of the units it uses, or its bytes at the DRAM bandwidth, whichever takes longer. The bytes
are the case's own count when it gives one (decode: the K/V it must read), else the minimum any
kernel moves: every input read once and every output written once.
"""
from __future__ import annotations

import functools
import json
import time

import numpy as np

from .errors import GraderError
from .roofline import Bound, device_peaks, minimum_bytes, uses_tensor_cores
from .spec import BenchCase, BenchContext


# A kernel that keeps the GPU busy for `ns` nanoseconds (one thread reading the global timer).
_SPIN = r"""
extern "C" __global__ void spin(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"""
SPIN_FLOOR_S = 200e-6           # the GPU is kept busy ahead of a timed call for at least this long,
SPIN_CEILING_S = 0.05           # ... and at most this long


@functools.lru_cache(maxsize=None)
def _spin_kernel(cupy):
    return cupy.RawKernel(_SPIN, "spin")


def time_gpu(fn, rt, warmup=3, reps=20, host=None) -> list[float]:
    """Milliseconds of device time of each of `reps` calls, timed with CUDA events after `warmup` calls.

    Each call is queued behind a kernel that keeps the GPU busy for longer than the call's host side
    takes (Python, CuPy's launches, torch's dispatcher), so the events time the device's work alone:
    what a model sees when its host runs ahead of the GPU, or when it replays a CUDA graph, as serving
    engines do for decode. A call whose host side outlasts the busy kernel is timed again behind a
    longer one. `host`, a list, receives each timed call's host time in milliseconds."""
    cupy = rt.xp
    spin = _spin_kernel(cupy)
    for _ in range(warmup):
        fn()
    rt.synchronize()
    t0 = time.perf_counter()
    fn()                            # once more, for the host time a call takes, compiled and warm
    ahead = min(SPIN_CEILING_S, max(SPIN_FLOOR_S, 2 * (time.perf_counter() - t0)))
    rt.synchronize()
    times = []
    for _ in range(reps):
        for _attempt in range(3):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            spin((1,), (1,), (np.uint64(ahead * 1e9),))
            start.record()
            t0 = time.perf_counter()
            fn()
            spent = time.perf_counter() - t0
            stop.record()
            stop.synchronize()
            if spent < ahead or ahead >= SPIN_CEILING_S:
                break               # (a call that waits for the GPU itself is timed as it is)
            ahead = min(SPIN_CEILING_S, 2 * spent)      # the GPU ran dry while the host queued: again
        times.append(cupy.cuda.get_elapsed_time(start, stop))
        if host is not None:
            host.append(1e3 * spent)
    return times


def peak_bytes(fn, rt) -> int:
    """The device memory one call takes beyond what was allocated before it (its outputs included):
    CuPy's pool grows to the call's peak when it starts empty, and torch counts its own peak."""
    import sys
    pool = rt.xp.get_default_memory_pool()
    rt.synchronize()
    pool.free_all_blocks()
    before = pool.total_bytes()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        torch_before = torch.cuda.memory_allocated()
    out = fn()
    rt.synchronize()
    extra = pool.total_bytes() - before
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize()
        extra += torch.cuda.max_memory_allocated() - torch_before
    del out
    return int(extra)


def rate(case: BenchCase, ms: float) -> str:
    if case.flops:
        return f"{case.flops / (ms * 1e-3) / 1e12:7.1f} TFLOP/s"
    if case.bytes:
        return f"{case.bytes / (ms * 1e-3) / 1e9:7.0f} GB/s"
    return ""


def _solution(ex_id: str):
    """A module's solution, for the baselines that time it (SolutionMissing in a student release)."""
    from .course import load
    from .release import solution_path
    solution_path(ex_id, "this baseline")
    return load(ex_id)


def bench(ex, path, as_json=False, quick=False) -> int:
    from .release import SolutionMissing
    from .engine.runner import case_rng, load_exercise_function
    from .runtimes import get_runtime
    from .tasks import load_piece, load_task
    rt = get_runtime("gpu")  # raises RuntimeUnavailable with advice when there is no GPU
    custom = getattr(load_piece(ex, "bench"), "run", None)
    if custom is not None:   # a benchmark of its own (12: one process per GPU)
        return custom(ex, path, as_json=as_json, quick=quick)
    task = load_task(ex)
    cases = getattr(load_piece(ex, "bench"), "BENCH", None)
    if not cases:
        raise GraderError(f"{ex.id} has no benchmark yet.")
    fn = load_exercise_function(ex, path)
    solution = functools.lru_cache(maxsize=None)(_solution)      # each module's solution imported once
    reps, warmup = (5, 1) if quick else (20, 3)
    peaks = device_peaks(rt)
    rows = []
    # A bench may make its inputs on the device (module 14: a float64 forward on the host for o and lse
    # would take minutes at N = 16384): inputs(rt, params, solution) -> what the task's call() reads.
    device_inputs = getattr(load_piece(ex, "bench"), "inputs", None)
    for case in cases:
        if device_inputs is not None:
            dev = device_inputs(rt, case.params, solution)
        else:
            inputs = task.make_inputs(case.params, case_rng(0, case.name))
            dev = {k: rt.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
        contenders = {"yours": lambda: task.call(fn, rt, dev, case.params)}
        ctx = BenchContext(rt, dev, case.params, solution)
        for name, base in case.baselines.items():
            contenders[name] = (lambda b=base: b(ctx))
        row = {"case": case.name, "params": case.params, "results": {}}
        roof = None
        for name, f in contenders.items():
            try:
                host = []
                ms = float(np.median(time_gpu(f, rt, warmup, reps, host)))
                row["results"][name] = r = {"median_ms": ms, "host_ms": float(np.median(host)),
                                            "rate": rate(case, ms).strip(),
                                            "peak_mb": peak_bytes(f, rt) / 2**20}
                if peaks is not None:
                    if roof is None:        # the first contender is the student's kernel
                        moved = case.bytes or minimum_bytes(dev, f(), case.baseline_only)
                        roof = Bound(peaks, case.flops, moved, uses_tensor_cores(case.params))
                        row["roofline"] = {"limit": roof.limit, "ms": roof.seconds * 1e3,
                                           "flops": case.flops, "bytes": moved}
                    r["roofline_pct"] = 100 * roof.share(ms)
            except SolutionMissing as e:      # a student release: no solution to time
                row["results"][name] = {"skipped": f"needs solutions/{e.ex_id}.py, which a student "
                                                   "release leaves out"}
            except Exception as e:  # a baseline that does not fit in memory, say
                row["results"][name] = {"error": f"{type(e).__name__}: {e}"}
        rows.append(row)
        rt.xp.get_default_memory_pool().free_all_blocks()
    out = {"id": ex.id, "file": str(path), "device": rt.device_name, "cases": rows,
           "peaks": None if peaks is None else {"dram_bytes_per_s": peaks.dram_bytes_per_s,
                                                "fp32_flops": peaks.fp32_flops,
                                                "tensor_flops": peaks.tensor_flops, "source": peaks.source}}
    if as_json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"grader bench {ex.id} on {rt.device_name}: the median of {reps} calls' device time (CUDA events, each "
          f"call queued behind a busy GPU, so its host side is not counted; host: that side's own time, Python "
          f"and launches); peak: device memory one call allocates beyond its inputs, outputs included")
    if peaks is None:
        print(f"roofline: no per-SM rates known for compute capability {rt.compute_capability}: no percentages")
    else:
        print(f"roofline: {peaks.dram_bytes_per_s / 1e12:.2f} TB/s, {peaks.fp32_flops / 1e12:.1f} TFLOP/s FP32, "
              f"{peaks.tensor_flops / 1e12:.0f} TFLOP/s dense FP16 tensor ({peaks.source})")
    for row in rows:
        shape = ", ".join(f"{k}={v}" for k, v in row["params"].items())
        print(f"\n  {row['case']} ({shape})")
        if "roofline" in row:
            rf = row["roofline"]
            print(f"    roofline: {rf['ms']:.3f} ms, {rf['limit']}-bound ({rf['flops'] / 1e9:.1f} GFLOP, "
                  f"{rf['bytes'] / 1e6:.1f} MB that must move); % = that time / the measured time")
        yours = row["results"]["yours"].get("median_ms")
        for name, r in row["results"].items():
            if "skipped" in r:
                print(f"    {name:<22} skipped: {r['skipped']}")
                continue
            if "error" in r:
                print(f"    {name:<22} failed: {r['error'][:100]}")
                continue
            ratio = ""
            if yours and name != "yours":
                x = r["median_ms"] / yours
                ratio = f"  (yours is {x:.2f}× faster)" if x >= 1 else f"  (yours is {1 / x:.2f}× slower)"
            roof = f"  {r['roofline_pct']:5.1f}% of roofline" if "roofline_pct" in r else ""
            print(f"    {name:<22} {r['median_ms']:9.3f} ms  {r['rate']:>16}{roof}  host {r['host_ms']:7.3f} ms  "
                  f"{r['peak_mb']:9.0f} MiB peak{ratio}")
    return 0
