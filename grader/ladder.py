"""`grader ladder ID [STEP]`: a module's speed ladder, its kernel built one idea of the lesson at a time.

A module with a ladder (06, 10, 11 and 14) keeps it in grader/tasks/NAME/ladder.py: its steps, each a
complete kernel built from the solution's own code (the last step is the solution itself), the cases
that check them and how they are timed. This command checks every step (or step STEP alone) on the
module's own cases with the grader's machinery (engine/runner.run_case: the float64 reference, the
tolerance rule, and on the emulator its faults, races and poison), and compares its outputs with the
solution's on the same inputs. Then:

- on a GPU it times the steps that passed, next to the ladder's baselines: WARMUP calls, then REPS
  calls queued back to back between two CUDA events, ms per call; a figure is the median of the
  ladder's `repeats` such timings;
- on the CPU emulator it does not time (the emulator says nothing about a GPU's speed): it reports the
  registers and spills ptxas gives each step's kernel (through NVRTC, where it is installed).

`--nvcc` compiles every step with the local nvcc instead (no GPU needed) and prints ptxas's registers,
spills and warnings. `grader ladder 11 --variants` runs module 11's other variants
(grader/tasks/backward_tensor_cores/variants.py) the same way, timed by their own method (below).
"""
from __future__ import annotations

import datetime
import functools
import hashlib
import json
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from .errors import GraderError
from .spec import BenchContext, LadderContext

SEED = 0                     # the checks' inputs: the same in every run
WARMUP, REPS = 5, 20         # one timing: WARMUP calls, then REPS calls back to back between two events
COMMAND = "`grader ladder`"


def ladder_ids() -> list[str]:
    """The modules with a speed ladder."""
    from . import catalogue
    from .tasks import has_piece
    return [ex.id for ex in catalogue.EXERCISES if has_piece(ex, "ladder")]


def load_ladder(ex):
    """Exercise `ex`'s ladder module, or a GraderError that names the modules that have one."""
    from .tasks import has_piece, load_piece
    if not has_piece(ex, "ladder"):
        raise GraderError(f"{ex.id} has no speed ladder; the modules with one: "
                          f"{', '.join(i[:2] for i in ladder_ids())}")
    return load_piece(ex, "ladder")


def context() -> LadderContext:
    """The solutions a ladder builds on (a student release has none: SolutionMissing, exit 2)."""
    from .course import load
    from .release import solution_path

    def fresh(ex_id: str):
        solution_path(ex_id, COMMAND)
        return load(ex_id)
    return LadderContext(solution=functools.lru_cache(maxsize=None)(fresh), fresh=fresh)


def choose(ex, numbered: list, numbers: list, what: str = "step") -> list:
    """The steps (or variants) `numbers` names, numbered from 1 in `numbered`'s order."""
    bad = [n for n in numbers if not 1 <= n <= len(numbered)]
    if bad:
        raise GraderError(f"{ex.id}'s ladder has {what}s 1 to {len(numbered)}, not {bad[0]} (`grader ladder "
                          f"{ex.id[:2]}{' --variants' if what == 'variant' else ''} --list` lists them)")
    return [numbered[n - 1] for n in numbers]


def print_list(ex, numbered: list, what: str = "step") -> int:
    print(f"grader ladder {ex.id}: its {what}s")
    for i, s in enumerate(numbered, 1):
        print(f"  {i:2}  {s.label}")
    return 0


# ---- Checks -----------------------------------------------------------------------------------------

def differences(out: dict, base: dict) -> dict:
    """Per output: 0.0 where bit for bit the same as base (NaN for NaN), else the largest |difference|."""
    res = {}
    for name in base:
        a, b = (np.asarray(x, dtype=np.float64) for x in (out[name], base[name]))
        res[name] = (0.0 if np.array_equal(a, b, equal_nan=True)
                     else float(np.nan_to_num(np.abs(a - b), nan=np.inf).max()))
    return res


def describe(diff: dict) -> str:
    if all(v == 0.0 for v in diff.values()):
        return "= solution, bit for bit"
    return "vs solution max |Δ| " + " ".join(f"{k} {v:.1e}" for k, v in diff.items())


class Checker:
    """Runs steps on a module's cases and keeps what they cost: registers, local and shared bytes."""

    def __init__(self, ex, rt, origin: Path):
        from .engine.runner import run_case
        from .tasks import load_task
        self.ex, self.rt, self.origin, self.run_case = ex, rt, origin, run_case
        self.cases = {c.name: c for c in load_task(ex).CASES}
        self.resources: dict = {}           # (label, d, dtype) -> registers, local bytes, shared bytes
        self._solution: dict = {}           # case name -> the solution's outputs there

    def run(self, fn, name: str):
        """One case: (its result, its outputs or None, seconds)."""
        keep, t0 = {}, time.time()
        with np.errstate(invalid="ignore"):      # the comparison's -inf - -inf, where both lse are -inf
            res = self.run_case(self.ex, self.cases[name], fn, self.rt, SEED, self.origin, keep)
        return res, keep.get("out"), time.time() - t0

    def solution(self, fn, name: str):
        if name not in self._solution:
            self._solution[name] = self.run(fn, name)[1]
        return self._solution[name]

    def check(self, steps: list, names: tuple, solution_fn, same: tuple = ()) -> set:
        """Every step on the named cases (those of its head dimensions; a diagnostic, checked=False,
        is never checked; one the emulator cannot run is skipped there), each compared with the
        solution on the same inputs: an untimed variant must equal it bit for bit in `same`.
        -> the labels of the steps that failed."""
        failed, w = set(), max(len(s.label) for s in steps)
        for step in steps:
            if not step.checked:
                print(f"  skip {step.label:{w}} (a diagnostic, wrong on purpose: timed, never checked)", flush=True)
                continue
            if not step.emulated and self.rt.name == "cpu":
                print(f"  skip {step.label:{w}} (PTX the CPU emulator does not run: checked on a GPU only)",
                      flush=True)
                continue
            for name in names:
                p = self.cases[name].params
                if step.dims and p["d"] not in step.dims:
                    continue
                # The solution first: its build must not come between the step's and record()'s.
                base = self.solution(solution_fn, name) if step.fn is not solution_fn else None
                res, out, dt = self.run(step.fn, name)
                ok, vs = res.passed, ""
                if out is not None and base is not None:
                    diff = differences(out, base)
                    vs = describe(diff)
                    if not step.timed and any(diff[o] != 0.0 for o in same):
                        ok = False
                        vs += f"  (must equal the solution's {', '.join(same)} bit for bit)"
                self.record(step, p)
                if not ok:
                    failed.add(step.label)
                err = f"rel err {res.rel_err:.2e}" if res.rel_err is not None else ""
                print(f"  {'ok  ' if ok else 'FAIL'} {step.label:{w}} {name:30} {p['dtype']:8} d={p['d']:<3} "
                      f"{'causal' if p['causal'] else '      '} {err:18} {vs}  ({dt:.1f} s)", flush=True)
                if not res.passed:
                    print("       " + res.message.replace("\n", "\n       "), flush=True)
        return failed

    def record(self, step, p: dict) -> None:
        """The registers of the step's kernel at this case's d and type: on a GPU the driver's
        attributes; on the emulator ptxas's report from the NVRTC pass of that very build (the step's
        compile, recorded, is looked up in NVRTC's cache of reports)."""
        key = (step.label, p["d"], p["dtype"])
        if step.kernel is None or key in self.resources:
            return
        try:
            if self.rt.name == "gpu":
                kernel, name, smem = step.kernel(self.rt, p["d"], p["dtype"])
                info = kernel.attributes
            else:
                from .runtimes.base import full_source
                from .runtimes.cpu import build, nvrtc
                rec = Recorder()
                _, name, smem = step.kernel(rec, p["d"], p["dtype"])
                info = {}
                for source, options, names in rec.builds.values():
                    report = nvrtc.check(full_source(source), options, list(names), cache=build.cache_dir())
                    info = (report or {}).get(name) or info
        except Exception:                   # a kernel that does not compile: its case said so
            return
        self.resources[key] = dict(num_regs=info.get("num_regs", "?"),
                                   local_size_bytes=info.get("local_size_bytes", "?"), shared_bytes=smem)

    def print_resources(self) -> None:
        where = "the driver's attributes" if self.rt.name == "gpu" else "ptxas through NVRTC"
        print(f"\n## Registers ({where})")
        if not self.resources:
            print("  none known (on the CPU, ptxas's report needs NVRTC: `grader doctor` says how to get it)")
        w = max((len(label) for label, _, _ in self.resources), default=0)
        for (label, d, dtype), r in self.resources.items():
            print(f"  {label:{w}} d={d:<3} {dtype:8} {r['num_regs']} registers, {r['local_size_bytes']} B local "
                  f"(stack, spills), {r['shared_bytes'] / 1024:.1f} KB shared")


# ---- Timing (GPU) -----------------------------------------------------------------------------------

class Clock:
    """CUDA events of CuPy, or of PyTorch (for a baseline that runs on torch's stream), and the
    synchronize that waits for them."""

    def __init__(self, synchronize, cupy=None, torch=None):
        self.synchronize, self.cupy, self.torch = synchronize, cupy, torch

    def event(self):
        return self.cupy.cuda.Event() if self.cupy is not None else self.torch.cuda.Event(enable_timing=True)

    def elapsed(self, start, end) -> float:
        return self.cupy.cuda.get_elapsed_time(start, end) if self.cupy is not None else start.elapsed_time(end)


def time_calls(fn, clock: Clock) -> float:
    """ms per call: WARMUP calls, then REPS calls queued back to back between two events."""
    for _ in range(WARMUP):
        fn()
    start, end = clock.event(), clock.event()
    start.record()
    for _ in range(REPS):
        fn()
    end.record()
    clock.synchronize()
    return clock.elapsed(start, end) / REPS


def torch_clock():
    try:
        import torch
        if torch.cuda.is_available():
            print(f"# torch {torch.__version__}")
            return Clock(torch.cuda.synchronize, torch=torch)
        print("torch sees no GPU: no torch baseline")
    except Exception as e:
        print(f"torch is not usable ({type(e).__name__}: {e}): no torch baseline")
    return None


def on_host(rt, task, out: dict, params: dict) -> dict:
    """A call's outputs as float32 NumPy arrays, 2-byte types widened as the checks widen them."""
    host = {k: rt.to_numpy(x) for k, x in out.items()}
    widen = getattr(task, "widen", None)
    return {k: np.asarray(x, dtype=np.float32) for k, x in (widen(host, params) if widen else host).items()}


def time_ladder(ex, rt, ctx, timing, steps: list, solution_fn, write) -> list[dict]:
    """Every timed step (and the baselines) at each of the ladder's shapes -> the table's rows."""
    from .tasks import load_task
    task = load_task(ex)
    cupy, torch = Clock(rt.synchronize, cupy=rt.xp), torch_clock()
    rows: list[dict] = []
    for params in timing.shapes:
        inputs = timing.inputs(rt, params, ctx.solution)
        bench = BenchContext(rt, inputs, params, ctx.solution)
        base = on_host(rt, task, task.call(solution_fn, rt, inputs, params), params)
        contenders = ([(s.label, functools.partial(task.call, s.fn, rt, inputs, params), False, True) for s in steps]
                      + [(label, functools.partial(fn, bench), on_torch, False)
                         for label, fn, on_torch in timing.baselines])
        for label, fn, on_torch, is_step in contenders:
            if on_torch and torch is None:
                continue
            try:
                out = fn()
                ms = statistics.median(time_calls(fn, torch if on_torch else cupy) for _ in range(timing.repeats))
            except Exception as e:             # a baseline may be missing (a backend refusing)
                print(f"  {label} at d={params['d']}: not timed ({type(e).__name__}: {str(e).splitlines()[0]})")
                continue
            diff = differences(on_host(rt, task, out, params), base) if is_step else None
            rows.append(dict(step=label, d=params["d"], ms=ms, tflops=timing.flops(params) / (ms * 1e-3) / 1e12,
                             diff_vs_solution=diff))
            print(f"  timed d={params['d']:<3} {label:30} {ms:8.3f} ms", flush=True)
            write()
    return rows


def print_table(rows: list[dict], step_labels: list[str], ratios: tuple) -> None:
    """The ladder's table: each row's ms and TFLOP/s, its speed relative to the step before and to the
    `ratios` baselines, and how far its outputs lie from the solution's."""
    ms_of = {(r["step"], r["d"]): r["ms"] for r in rows}
    print("| step | d | ms | TFLOP/s | × previous | " + "".join(f"× {b} | " for b in ratios)
          + "max abs Δ vs solution |")
    print("|---" * (6 + len(ratios)) + "|")
    for r in rows:
        prev = None
        if r["step"] in step_labels and step_labels.index(r["step"]) > 0:
            prev = ms_of.get((step_labels[step_labels.index(r["step"]) - 1], r["d"]))
        r["x_previous"] = prev / r["ms"] if prev else None
        r["x"] = {b: ms_of[b, r["d"]] / r["ms"] if (b, r["d"]) in ms_of else None for b in ratios}
        cells = [f"{x:.2f}×" if x is not None else "—" for x in (r["x_previous"], *r["x"].values())]
        diff = "" if r["diff_vs_solution"] is None else " ".join(
            f"{k} {'0' if v == 0.0 else f'{v:.1e}'}" for k, v in r["diff_vs_solution"].items())
        print(f"| {r['step']} | {r['d']} | {r['ms']:.3f} | {r['tflops']:.0f} | " + " | ".join(cells) + f" | {diff} |")


# ---- nvcc: what a GPU would compile, compiled here ---------------------------------------------------

class Recorder:
    """Stands in for a runtime: records what would be compiled, and hands back stand-ins."""

    class _Stub:
        max_dynamic_shared_size_bytes = 0
        attributes: dict = {}

        def get_function(self, name):
            return Recorder._Stub()

    name = "nvcc"

    def __init__(self):
        self.builds: dict = {}

    def compile(self, source, options=(), name_expressions=None):
        self.builds[module_key(source, options, name_expressions)] = (source, tuple(options),
                                                                       tuple(name_expressions or ()))
        return Recorder._Stub()


def module_key(source: str, options, names) -> str:
    return hashlib.sha1("\0".join((source, *options, "", *(names or ()))).encode()).hexdigest()[:20]


def nvcc_build(source: str, options, names, cubin: Path) -> tuple[dict, list, dict]:
    """One module built by nvcc as NVRTC would build it (sm_90 unless the options name an -arch), with
    ptxas -v -> (its report per entry function, ptxas's warnings and advisories, {name expression:
    symbol}). The advisories ("(C7511) Potential Performance Loss: wgmma.mma_async instructions are
    serialized ...") come first."""
    from .runtimes.base import full_source
    arch = next((o for o in options if o.startswith("-arch=")), "-arch=sm_90")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.cu"
        inst = "".join(f"\nstatic void* const instantiate_{i} = (void*){n};" for i, n in enumerate(names))
        src.write_text(full_source(source) + inst + "\n")
        cmd = ["nvcc", arch, "-cubin", "-std=c++17", "-Xptxas", "-v,-warn-spills,-warn-lmem-usage",
               *(o for o in options if o != arch), "-o", str(cubin), str(src)]
        p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise GraderError(f"nvcc failed:\n{p.stderr[-2000:]}")
    report, current = {}, None                   # entry (as a name expression) -> registers, spills
    for line in p.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            t = re.match(r"_Z(\d+)(\w+)", m.group(1))
            current = t.group(2)[:int(t.group(1))] if t else m.group(1)
            d = re.search(r"ILi(\d+)E", m.group(1))
            current += f"<{d.group(1)}>" if d else ""
        elif current and (m := re.search(r"(\d+) bytes spill stores", line)):
            report.setdefault(current, {})["spill_stores"] = int(m.group(1))
        elif current and (m := re.search(r"Used (\d+) registers", line)):
            report.setdefault(current, {})["registers"] = int(m.group(1))
    warnings = sorted((line.strip() for line in p.stderr.splitlines()
                       if "warning" in line.lower() or re.search(r"\(C75\d\d\)", line)),
                      key=lambda line: "performance loss" not in line.lower())
    symbols = subprocess.run(["nm", str(cubin)], capture_output=True, text=True).stdout.split()
    table = {}
    for n in names:
        m = re.fullmatch(r"(\w+)<(\d+)>", n)
        prefix = f"_Z{len(m.group(1))}{m.group(1)}ILi{m.group(2)}E" if m else n
        table[n] = next((s for s in symbols if s == n or s.startswith(prefix)), n)
    return report, warnings, table


def nvcc_steps(steps: list, dims: tuple, dtypes: tuple, out_dir: str | None = None) -> int:
    """Every step's modules at each head dimension and type, built by nvcc (in parallel, two at a time);
    ptxas's registers and spills of each step's kernels, and its warnings. With `out_dir`, the cubins
    and their manifest.json stay there (for `--cubins` on a GPU). -> the number of failed builds."""
    from concurrent.futures import ThreadPoolExecutor
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="grader-nvcc-"))
    out.mkdir(parents=True, exist_ok=True)
    jobs, uses = {}, []                            # module key -> build; (step, d, dtype, its keys)
    for step in steps:
        for d in (x for x in dims if not step.dims or x in step.dims):
            for dtype in dtypes:
                rec = Recorder()
                step.kernel(rec, d, dtype)
                jobs.update(rec.builds)
                uses.append((step.label, d, dtype, list(rec.builds)))

    def one(item):
        key, (source, options, names) = item
        try:
            report, warnings, table = nvcc_build(source, options, names, out / f"{key}.cubin")
            return key, dict(cubin=f"{key}.cubin", names=table), report, warnings, None
        except Exception as e:
            return key, None, {}, [], str(e)

    manifest, results = {}, {}
    with ThreadPoolExecutor(2) as pool:
        for key, entry, report, warnings, err in pool.map(one, jobs.items()):
            results[key] = (report, warnings, err)
            if entry:
                manifest[key] = entry
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    failed, w = 0, max(len(label) for label, *_ in uses)
    for label, d, dtype, keys in uses:
        errors = [results[k][2] for k in keys if results[k][2]]
        failed += bool(errors)
        if errors:
            print(f"  FAIL {label:{w}} d={d:<3} {dtype:8}\n{errors[0][-1500:]}", flush=True)
            continue
        # The kernels the step names (all of a module that names none), not the helpers beside them.
        named = {n for k in keys for n in jobs[k][2]}
        regs = ", ".join(f"{entry}: {r.get('registers', '?')} registers, {r.get('spill_stores', '?')} B spilled"
                         for k in keys for entry, r in results[k][0].items()
                         if (entry in named if named else True) and (f"<{d}>" in entry or "<" not in entry))
        warnings = [line for k in keys for line in results[k][1]]
        print(f"  ok   {label:{w}} d={d:<3} {dtype:8} {regs}"
              + (f"\n       {len(warnings)} warning(s) or ptxas advisories, first: {warnings[0]}" if warnings else ""),
              flush=True)
    if out_dir:
        print(f"cubins and manifest.json written to {out}")
    return failed


class _CubinModule:
    def __init__(self, path, names):
        import cupy
        self._raw, self._names = cupy.RawModule(path=str(path)), names

    def get_function(self, name):
        return self._raw.get_function(self._names.get(name, name))


class CubinRuntime:
    """The GPU runtime, but compile() loads the module `--nvcc --build DIR` made for the same source and
    options (NVRTC for one it did not make)."""

    def __init__(self, rt, directory):
        self._rt, self._dir = rt, Path(directory)
        self._manifest = json.loads((self._dir / "manifest.json").read_text())
        self._cache: dict = {}

    def __getattr__(self, name):
        return getattr(self._rt, name)

    def compile(self, source, options=(), name_expressions=None):
        from .runtimes.base import parse_signatures
        from .runtimes.gpu import GpuModule
        key = module_key(source, options, name_expressions)
        entry = self._manifest.get(key)
        if entry is None:
            print(f"  (no cubin for module {key}: NVRTC)", flush=True)
            return self._rt.compile(source, options, name_expressions)
        if key not in self._cache:
            self._cache[key] = GpuModule(self._rt, _CubinModule(self._dir / entry["cubin"], entry["names"]),
                                         parse_signatures(source))
        return self._cache[key]


# ---- The command --------------------------------------------------------------------------------------

def ladder(ex, numbers: list | None = None, backend: str | None = None, out: str | None = None,
           nvcc: bool = False, listing: bool = False) -> int:
    """`grader ladder ID [STEP ...]`: 0 when every step checked passes, 1 when one fails (on a GPU it is
    then not timed, the others are), 2 for a usage error (raised as GraderError)."""
    from .release import solution_path
    from .runtimes import get_runtime
    from .runtimes.base import register_origin
    solution_path(ex.id, COMMAND)               # a student release has none: it says so (exit 2)
    piece = load_ladder(ex)
    ctx = context()
    solution_fn = getattr(ctx.solution(ex.id), ex.entry)
    every = piece.steps(ctx)
    numbered = [s for s in every if s.timed]
    if listing:
        return print_list(ex, numbered)
    steps = choose(ex, numbered, numbers) if numbers else every
    which = (f"step{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))}" if numbers
             else "every step")
    if nvcc:
        solution = ctx.solution(ex.id)
        print(f"# grader ladder {ex.id}: {which} compiled by nvcc with ptxas -v")
        return 1 if nvcc_steps(steps, solution.HEAD_DIMS, solution.DTYPES) else 0
    rt = get_runtime(backend)
    register_origin(piece.__file__)
    t_start = time.time()
    print(f"# grader ladder {ex.id} on {rt.device_name}: {which}, checked on module {ex.id[:2]}'s cases"
          + (", then timed" if rt.name == "gpu" else " (the emulator times nothing)"))
    checker = Checker(ex, rt, Path(piece.__file__))
    failed = checker.check(steps, piece.CHECK_CASES[rt.name], solution_fn, piece.SAME_AS_SOLUTION.get(rt.name, ()))
    checker.print_resources()
    if rt.name != "gpu":
        print(f"\n{'FAILED: ' + ', '.join(sorted(failed)) if failed else 'every step checked is right'} "
              f"({time.time() - t_start:.0f} s)")
        return 1 if failed else 0

    timing = piece.TIMING
    result = dict(gpu=rt.device_name, date=datetime.date.today().isoformat(), command=f"grader ladder {ex.id}",
                  shapes=timing.shapes, method=f"{WARMUP} warm-up, {REPS} calls back to back between two CUDA "
                  f"events, ms per call, the median of {timing.repeats} such timing(s)",
                  failed_checks=sorted(failed), rows=[])

    def write():
        result["resources"] = [dict(step=s, d=d, dtype=e, **r) for (s, d, e), r in checker.resources.items()]
        if out:
            Path(out).write_text(json.dumps(result, indent=1) + "\n")

    if failed:
        print(f"\ncheck(s) FAILED: {sorted(failed)}: not timed")
    print("\n## Timing")
    timed = [s for s in steps if s.timed and s.label not in failed]
    result["rows"] = rows = time_ladder(ex, rt, ctx, timing, timed, solution_fn, write)
    shape = timing.shapes[0]
    print(f"\n## Speed ladder: B={shape['B']}, H={shape['H']}, N={shape['Nq']}, {shape['dtype']}, "
          f"{'causal' if shape['causal'] else 'non-causal'}, ms per call (the median of {timing.repeats} "
          f"timing(s) of {REPS} calls back to back after {WARMUP} warm-up), {rt.device_name}, {result['date']}\n")
    print_table(rows, [s.label for s in every if s.timed], timing.ratios)
    print(f"\n(× previous: the step before's time / this time; × a baseline: its time / this time; "
          f"{time.time() - t_start:.0f} s in all)")
    write()
    if out:
        print(f"figures written to {out}")
    return 1 if failed else 0


# ---- Module 11's variants -----------------------------------------------------------------------------

def time_variants(ex, rt, vrt, ctx, piece, steps: list, shapes: list, rounds: int) -> list[dict]:
    """Every variant and torch's two backward baselines at each shape, `rounds` times, round after
    round, each round in another order (rotated: a drift of the clocks falls on every contender alike).
    A round's figure: the median of 20 calls after 3, each between two CUDA events (grader bench's
    time_gpu); a contender's ms: the median over the rounds."""
    from .attention.baselines import backward_flops, torch_sdpa_backward
    from .bench import time_gpu
    from .tasks import load_task
    task = load_task(ex)
    rows: list[dict] = []
    print(f"\n## Timing (median of 20 runs after 3, CUDA events; {rounds} round(s), the median of the rounds)")
    for p in shapes:
        inputs = piece.timing_inputs(rt, p, ctx.solution)
        bench = BenchContext(rt, inputs, p, ctx.solution)
        contenders = [(s.label, functools.partial(task.call, s.fn, vrt, inputs, p))
                      for s in steps if not s.dims or p["d"] in s.dims]
        contenders += [(f"torch {name}", functools.partial(torch_sdpa_backward(backend), bench))
                       for name, backend in (("FA2", "FLASH_ATTENTION"), ("cuDNN", "CUDNN_ATTENTION"))]
        per_round: dict = {label: [] for label, _ in contenders}
        for r in range(rounds):
            for label, fn in contenders[r % len(contenders):] + contenders[:r % len(contenders)]:
                if per_round[label] is None:
                    continue
                try:
                    per_round[label].append(float(np.median(time_gpu(fn, rt, warmup=3, reps=20))))
                except Exception as e:
                    print(f"  {label}: not timed ({type(e).__name__}: {str(e).splitlines()[0]})")
                    per_round[label] = None
        fa2_rounds = per_round.get("torch FA2")
        for label, times in per_round.items():
            if not times:
                continue
            ms = float(np.median(times))
            rows.append(dict(variant=label, d=p["d"], dtype=p["dtype"], causal=p["causal"], ms=ms, rounds=times,
                             tflops=backward_flops(p) / (ms * 1e-3) / 1e12))
            spread = ""
            if rounds > 1 and fa2_rounds:
                ratio = np.array(fa2_rounds) / np.array(times)   # × FA2, round by round
                rows[-1]["x_fa2_rounds"] = ratio.tolist()
                spread = f"  × FA2 per round: median {np.median(ratio):.3f}, {ratio.min():.3f} to {ratio.max():.3f}"
            print(f"  {p['dtype']:8} d={p['d']:<3} {'causal' if p['causal'] else 'full  '} {label:44} {ms:8.3f} ms "
                  f"{rows[-1]['tflops']:6.1f} TFLOP/s{spread}", flush=True)
    fa2 = {(r["d"], r["dtype"], r["causal"]): r["ms"] for r in rows if r["variant"] == "torch FA2"}
    print("\n| variant | dtype | d | mask | ms | TFLOP/s | × FA2 |\n|---|---|---|---|---|---|---|")
    for r in rows:
        key = (r["d"], r["dtype"], r["causal"])
        x = f"{fa2[key] / r['ms']:.2f}×" if key in fa2 else "—"
        print(f"| {r['variant']} | {r['dtype']} | {r['d']} | {'causal' if r['causal'] else 'full'} | "
              f"{r['ms']:.3f} | {r['tflops']:.0f} | {x} |")
    return rows


def variants(ex, numbers: list | None = None, backend: str | None = None, out: str | None = None,
             nvcc: bool = False, build: str | None = None, cubins: str | None = None, cases: str | None = None,
             rounds: int | None = None, check: bool = True, write: int | None = None, listing: bool = False) -> int:
    """`grader ladder 11 --variants [N ...]`: the variants module 11's lesson compares (variants.py),
    checked on the module's cases, then on a GPU timed (exit codes as `ladder`'s)."""
    from .release import solution_path
    from .runtimes import get_runtime
    from .runtimes.base import register_origin
    from .tasks import has_piece, load_piece
    solution_path(ex.id, COMMAND)
    if not has_piece(ex, "variants"):
        raise GraderError(f"{ex.id} has no variants; module 11 has (`grader ladder 11 --variants`)")
    if build and not nvcc:
        raise GraderError("--build DIR keeps what --nvcc builds: add --nvcc")
    piece = load_piece(ex, "variants")
    ctx = context()
    solution = ctx.solution(ex.id)
    every = piece.steps(ctx)
    if listing:
        return print_list(ex, every, "variant")
    chosen = choose(ex, every, numbers, "variant") if numbers else every
    if write is not None:
        choose(ex, every, [write], "variant")
        path = solution_path(ex.id, COMMAND)
        path.write_text(piece.written(write, path.read_text()))
        print(f"wrote {path.relative_to(path.parent.parent)}: variant {write}, {every[write - 1].label}")
        return 0
    if nvcc:
        dtypes = solution.DTYPES if build else ("float16",)
        print(f"# grader ladder {ex.id} --variants: compiled by nvcc with ptxas -v ({', '.join(dtypes)})")
        return 1 if nvcc_steps(chosen, solution.HEAD_DIMS, dtypes, build) else 0
    rt = get_runtime(backend)
    if cubins and rt.name != "gpu":
        raise GraderError("--cubins loads the modules on a GPU: this runs on the CPU emulator")
    vrt = CubinRuntime(rt, cubins) if cubins else rt
    register_origin(piece.__file__)
    t_start = time.time()
    print(f"# grader ladder {ex.id} --variants on {rt.device_name}; built by "
          f"{'nvcc (--cubins ' + cubins + ')' if cubins else 'NVRTC'}\n\n## Correctness: module {ex.id[:2]}'s cases")
    checker = Checker(ex, vrt, Path(piece.__file__))
    failed = (checker.check(chosen, piece.CHECK_CASES[rt.name], getattr(solution, ex.entry))
              if check or rt.name != "gpu" else set())
    if rt.name != "gpu":
        print(f"\n{'FAILED: ' + ', '.join(sorted(failed)) if failed else 'every variant checked is right'} "
              f"({time.time() - t_start:.0f} s)")
        return 1 if failed else 0
    rows = time_variants(ex, rt, vrt, ctx, piece, [s for s in chosen if s.label not in failed],
                         piece.shapes(cases or "all"), rounds or 1)
    if failed:
        print(f"\nFAILED checks (not timed): {sorted(failed)}")
    if out:
        Path(out).write_text(json.dumps(dict(gpu=rt.device_name, date=datetime.date.today().isoformat(),
                                             command=f"grader ladder {ex.id} --variants",
                                             built="nvcc (--cubins)" if cubins else "NVRTC",
                                             failed=sorted(failed), rows=rows), indent=1) + "\n")
        print(f"figures written to {out}")
    return 1 if failed else 0
