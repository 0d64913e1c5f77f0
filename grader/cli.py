"""The `grader` command: list, check, watch, hint, bench, ladder, doctor, clean (and `stubs`, `notebooks`,
`release`, `grade`, `autograder` for instructors).

Exit codes: 0 success, 1 a check failed, 2 a usage or environment error.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import catalogue, paths, progress
from .runtimes.base import GraderError

USAGE_ERROR = 2


def _err(msg: str) -> int:
    print(f"grader: {msg}", file=sys.stderr)
    return USAGE_ERROR


def _exercise(name: str) -> catalogue.Exercise:
    try:
        return catalogue.resolve(name)
    except KeyError as e:
        raise GraderError(e.args[0]) from None


def _target_file(ex, args) -> Path:
    if args.file:
        p = Path(args.file)
        if not p.is_file():
            raise GraderError(f"no such file: {p}")
        return p.resolve()
    if args.solution:
        from .release import solution_path
        return solution_path(ex.id, f"`grader {args.command} --solution`")
    p = paths.exercise_file(ex.id)
    if not p.is_file():
        raise GraderError(f"{p} does not exist yet. This exercise's files are not in your copy of the "
                          "course: `git pull` to get them.")
    return p


# ---- list --------------------------------------------------------------------------------------

def cmd_list(args) -> int:
    state = progress.progress()
    rows, next_id = [], None
    for ex in catalogue.EXERCISES:
        available = paths.exercise_file(ex.id).is_file()
        st = state.get(ex.id)
        if not available:
            status = "coming soon"
        elif st is None:
            status = "not started"
        elif st["passed"]:
            status = "done"
        elif st.get("not_implemented"):
            status = "not implemented yet"
        else:
            status = f"in progress ({st['cases_passed']}/{st['cases']} cases pass)"
        if next_id is None and available and status != "done":
            next_id = ex.id
        rows.append({"id": ex.id, "title": ex.title, "status": status, "available": available,
                     "last_check": st})
    if args.json:
        print(json.dumps({"exercises": rows, "next": next_id}, indent=1))
        return 0
    print("FlashAttention from scratch: the course\n")
    width = max(len(r["title"]) for r in rows)
    for r in rows:
        mark = "→" if r["id"] == next_id else ("✓" if r["status"] == "done" else " ")
        print(f" {mark} {r['id']:<20} {r['title']:<{width}}  {r['status']}")
    if next_id:
        print(f"\nNext: read modules/{next_id}.md, edit exercises/{next_id}.py, then "
              f"`grader check {next_id}`.")
    else:
        print("\nEvery available exercise passes. Well done.")
    return 0


# ---- check -------------------------------------------------------------------------------------

def _fmt_err(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{x:.1e}"


# Verdicts that are not a line of the table: the cases that never ran are counted in one line, and a
# file that does not import or a kernel that does not compile is one block in the summary.
_NO_LINE = ("not_run", "compile_error", "import_error")


class CheckPrinter:
    """The report of `grader check`: the header, one line per case as its verdict arrives, then the
    summary (the first failure, the smallest failing shape, the totals).

    While every verdict so far is "not implemented yet", the lines are held back: a stub's report is
    one line.
    """

    def __init__(self, ex, rel_file: str, backend: str, seed: int, names: list[str], replay: str):
        self.ex, self.rel_file, self.backend, self.seed, self.replay = ex, rel_file, backend, seed, replay
        self.width = max((len(n) for n in names), default=0)
        self.printed: set[str] = set()
        self.held: list[dict] | None = []     # None once a verdict other than not-implemented came

    def header(self) -> None:
        print(f"grader check {self.ex.id} · {self.rel_file} · backend {self.backend} · seed {self.seed}",
              flush=True)

    def verdict(self, c: dict) -> None:
        """One case's verdict, as soon as it is known."""
        if c["kind"] in _NO_LINE or c["name"] in self.printed:
            return
        if self.held is not None:
            if c["kind"] == "not_implemented":
                self.held.append(c)
                return
            held, self.held = self.held, None
            for h in held:
                self._line(h)
        self._line(c)

    def _line(self, c: dict) -> None:
        self.printed.add(c["name"])
        ok = "✓" if c["passed"] else "✗"
        extra = "" if c["kind"] == "checked" else f"  [{c['kind'].replace('_', ' ')}]"
        print(f"  {ok} {c['name']:<{self.width}}  rel {_fmt_err(c['rel_err']):>8}  "
              f"max {_fmt_err(c['max_abs_err']):>8}{extra}", flush=True)

    def finish(self, report: dict) -> None:
        cases = report["cases"]
        if report.get("error"):
            print(f"\n{report['error']}")
            return
        if cases and all(c["kind"] == "not_implemented" for c in cases):
            print(f"\n✗ {cases[0]['message']}")
            return
        if self.held:
            held, self.held = self.held, None
            for h in held:
                self._line(h)
        self.held = None
        for c in cases:                       # verdicts that did not stream (a direct call)
            self.verdict(c)
        not_run = [c for c in cases if c["kind"] == "not_run"]
        n_pass = sum(c["passed"] for c in cases)
        n_fail = len(cases) - n_pass - len(not_run)
        totals = f"\n{n_pass} passed, {n_fail} failed" + (f", {len(not_run)} not run" if not_run else "")
        blocker = next((c for c in cases if c["kind"] in ("compile_error", "import_error")), None)
        if blocker:
            self._blocker(blocker, cases, not_run)
            print(totals)
            return
        if not_run:
            print(f"  · {len(not_run)} case{'s' if len(not_run) > 1 else ''} {not_run[0]['message']}")
        print_resources(report.get("resources") or {})
        first_fail = next((c for c in cases if not c["passed"] and c["kind"] != "not_run"), None)
        if first_fail:
            shape = ", ".join(f"{k}={v}" for k, v in first_fail["params"].items())
            print(f"\nFirst failure: {first_fail['name']} ({shape})")
            print("\n".join(failure_lines(first_fail, self.replay)))
            if first_fail.get("plot"):
                print(f"Picture of the error: {first_fail['plot']}")
        print(totals)
        if report.get("note"):
            print(f"Note: {report['note']}")

    def _blocker(self, c: dict, cases: list[dict], not_run: list[dict]) -> None:
        """A file that does not import or a kernel that does not compile: what failed, where, and the
        error, as one block (the cases it kept from running are only counted)."""
        lines = c["message"].splitlines() or [""]
        if self.printed:
            shape = ", ".join(f"{k}={v}" for k, v in c["params"].items())
            when = f" (case {c['name']}: {shape})"
        else:
            when = ""
        print(f"\n✗ {lines[0].rstrip(':')}{when}:" if len(lines) > 1 else f"\n✗ {lines[0]}{when}")
        for line in lines[1:]:
            print(f"  {line}")
        if not_run:
            print(f"\n{'No case' if not self.printed else 'No further case'} was run: fix this and "
                  "check again.")


def failure_lines(case: dict, replay: str) -> list[str]:
    """A failing case's report after its heading: the grader's message, the smallest failing shape
    found (with its own message) and the command that replays it (`replay`: `grader check ...`
    with the seed, without --case or --shape)."""
    lines = [f"  {line}" for line in case["message"].splitlines()]
    shrunk = case.get("shrunk")
    if shrunk:
        small = ", ".join(f"{k}={v}" for k, v in shrunk["params"].items())
        lines += ["", f"Smallest failing shape found: {small}"]
        lines += [f"  {line}" for line in shrunk["message"].splitlines()]
        lines.append(f"  Replay it: {replay} --shape {shrunk['shape']}")
    else:
        only = case["name"] != "custom" and case["kind"] != "work"   # the work check runs after every case
        lines += ["", f"Replay exactly: {replay}" + (f" --case {case['name']}" if only else "")]
    return lines


def print_report(report: dict, ex, rel_file: str, replay: str) -> None:
    """The whole report at once (what `grader check` streams case by case)."""
    printer = CheckPrinter(ex, rel_file, report["backend"], report["seed"],
                           [c["name"] for c in report["cases"]], replay)
    printer.header()
    printer.finish(report)


def print_resources(resources: dict) -> None:
    """One line per kernel: registers, spills, shared memory; a warning where it costs speed."""
    if not resources:
        return
    print("\nResources per kernel:")
    for name, a in resources.items():
        parts = []
        if a.get("num_regs") is not None:
            parts.append(f"{a['num_regs']} registers/thread")
        if a.get("local_size_bytes") is not None:
            parts.append(f"{a['local_size_bytes']} B local (spills)")
        if a.get("shared_size_bytes") is not None:
            parts.append(f"{a['shared_size_bytes']} B static shared")
        if a.get("max_threads_per_block") is not None:
            parts.append(f"max {a['max_threads_per_block']} threads/block")
        print(f"  {name}: " + ", ".join(parts))
        if a.get("local_size_bytes"):
            print(f"    warning: {name} keeps {a['local_size_bytes']} bytes per thread in local memory "
                  "(spilled registers or a per-thread array indexed at run time): local memory is DRAM, "
                  "cached in L1 and L2, and its loads wait far longer than registers. Use smaller "
                  "per-thread arrays or constant indices, and time both ways with `grader bench`: at the "
                  "register limit (255) a few spilled bytes can cost less than giving up what they pay for.")


def cmd_check(args) -> int:
    from .engine.check import new_seed, run_check
    from .runtimes import resolve_backend
    ex = _exercise(args.id)
    path = _target_file(ex, args)
    backend = resolve_backend(args.backend)
    seed = args.seed if args.seed is not None else new_seed()
    from .engine.runner import format_shape, parse_shape, select_cases
    shape = parse_shape(args.shape) if args.shape else None
    plot_tmp = None
    if args.plot:
        import tempfile
        plot_tmp = tempfile.mkdtemp(prefix="grader-plot-")
    try:
        rel_file = str(path.relative_to(paths.course_root()))
    except (ValueError, GraderError):
        rel_file = str(path)
    which = "--solution " if args.solution else (f"--file {args.file} " if args.file else "")
    replay = f"grader check {ex.id} {which}--backend {backend} --seed {seed}"
    if shape:
        replay += f" --shape {format_shape(shape)}"
    printer = None
    if not args.json:                  # the verdicts stream as the cases finish; JSON comes at the end
        names = [c.name for c in select_cases(ex, args.case or None, shape)]
        printer = CheckPrinter(ex, rel_file, backend, seed, names, replay)
        printer.header()
    try:
        report = run_check(ex, path, backend, seed, case_timeout=args.timeout, cases=args.case or None,
                           shape=shape, shrink=not args.no_shrink, plot_dir=plot_tmp,
                           on_result=printer.verdict if printer else None,
                           confirm=not getattr(args, "no_confirm", False))
        if plot_tmp:
            _render_plots(report, ex)          # the PNGs go to .grader/plots; the arrays were temporary
    finally:                                   # also on Ctrl-C: nothing is left in the temp folder
        if plot_tmp:
            import shutil
            shutil.rmtree(plot_tmp, ignore_errors=True)
    if not args.solution and not args.file and not shape and not args.case:
        progress.record_check(report)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        printer.finish(report)
    if getattr(args, "counters", False) and not args.json:
        print()
        _counters(ex, path)
    if args.sanitize and not report.get("error"):
        _sanitize(ex, path, report, backend, seed)
    if report.get("error"):
        return USAGE_ERROR
    if any(c["kind"] == "grader_error" for c in report["cases"]):
        return USAGE_ERROR                # the grader's failure, not the submission's (exit 2)
    return 0 if report["passed"] else 1


def _sanitize(ex, path, report, backend, seed) -> None:
    from .sanitize import run_sanitizers
    if backend != "gpu":
        print("\n--sanitize needs the GPU runtime (compute-sanitizer watches a real GPU). On the CPU, the "
              "emulator already reports out-of-bounds accesses, divergent barriers, races and reads of "
              "unwritten shared memory as part of every check.")
        return
    cases = report["cases"]
    target = next((c for c in cases if not c["passed"] and c["kind"] != "not_run"), None) or cases[0]
    params = (target.get("shrunk") or {}).get("params") or target["params"]
    shape = ", ".join(f"{k}={v}" for k, v in params.items())
    print(f"\ncompute-sanitizer on {target['name']} ({shape}):", flush=True)
    for tool, r in run_sanitizers(ex, path, params, seed).items():
        if r["findings"]:
            print(f"  {tool}: found")
            for f in r["findings"]:
                print(f"    - {f}")
        else:
            print(f"  {tool}: {'clean' if r['clean'] else 'no finding it could read'}")
            if not r["clean"] and os.environ.get("GRADER_DEBUG"):
                print(r["raw"])


def _render_plots(report: dict, ex) -> None:
    from .plot import save_error_plot
    for case in report["cases"]:
        if case.get("plot"):
            try:
                png = paths.state_dir() / "plots" / f"{ex.id}-{case['name']}.png"
                case["plot"] = str(save_error_plot(case["plot"], png, f"{ex.id} · {case['name']}"))
            except ImportError:
                case["plot"] = "not drawn: matplotlib is missing (pip install matplotlib)"


def cmd_watch(args) -> int:
    """Re-check on every save of the file (poll its modification time; no extra dependency)."""
    import time
    ex = _exercise(args.id)
    path = _target_file(ex, args)
    args.solution = False
    args.seed = args.shape = args.case = None
    args.json = args.plot = args.no_shrink = args.sanitize = False
    args.timeout = None
    runs = 0

    def stamp():
        try:
            st = path.stat()
            return (st.st_mtime_ns, st.st_size)
        except OSError:
            return None
    try:
        while True:
            seen = stamp()
            print(f"\n{'=' * 30} {time.strftime('%H:%M:%S')} {'=' * 30}", flush=True)
            try:
                cmd_check(args)
            except GraderError as e:
                print(f"grader: {e}", flush=True)
            runs += 1
            if args.max_runs and runs >= args.max_runs:
                return 0
            print(f"\nwatching {path.name} — save it to re-check, Ctrl-C to stop", flush=True)
            while stamp() == seen:
                time.sleep(args.interval)
            time.sleep(0.2)   # let the editor finish writing
    except KeyboardInterrupt:
        return 0


# ---- hint --------------------------------------------------------------------------------------

def cmd_hint(args) -> int:
    ex = _exercise(args.id)
    total = len(ex.hints)
    if args.n is not None:
        if not 1 <= args.n <= total:
            return _err(f"{ex.id} has hints 1 to {total}.")
        n = args.n
        progress.set_hints_revealed(ex.id, max(n, progress.hints_revealed(ex.id)))
    else:
        n = progress.hints_revealed(ex.id) + 1
        if n > total:
            print(f"All {total} hints of {ex.id} are out. Re-read one with `grader hint {ex.id} N`, "
                  f"or read the pitfalls in modules/{ex.id}.md.")
            return 0
        progress.set_hints_revealed(ex.id, n)
    print(f"Hint {n}/{total} for {ex.id}: {ex.hints[n - 1]}")
    if n < total:
        print(f"(`grader hint {ex.id}` for the next one)")
    return 0


# ---- doctor, bench, stubs ----------------------------------------------------------------------

def cmd_doctor(args) -> int:
    from .doctor import doctor
    return doctor()


def cmd_bench(args) -> int:
    ex = _exercise(args.id)
    if args.backend == "cpu":        # no GPU to time: count what the kernel would move instead
        return _counters(ex, _target_file(ex, args), args.json)
    from .bench import bench
    return bench(ex, _target_file(ex, args), as_json=args.json, quick=args.quick)


def cmd_ladder(args) -> int:
    from .ladder import ladder, variants
    ex = _exercise(args.id)
    if args.variants is not None:         # `--variants 27 32` or `27 32 --variants`: those variants
        return variants(ex, args.variants + args.steps, args.backend, args.out, nvcc=args.nvcc, build=args.build,
                        cubins=args.cubins, cases=args.cases, rounds=args.rounds, check=not args.no_check,
                        write=args.write, listing=args.list)
    for flag in ("build", "cubins", "cases", "rounds", "no_check", "write"):
        if getattr(args, flag) not in (None, False):
            raise GraderError(f"--{flag.replace('_', '-')} is for module 11's variants: add --variants")
    return ladder(ex, args.steps, args.backend, args.out, nvcc=args.nvcc, listing=args.list)


def _counters(ex, path, as_json=False) -> int:
    from .counting import print_counts
    from .engine.runner import load_exercise_function
    fn = load_exercise_function(ex, path)
    config = getattr(fn, "__globals__", {}).get("CONFIG")
    return print_counts(ex, fn, config if isinstance(config, dict) else {}, as_json)


def cmd_stubs(args) -> int:
    from .release import is_release
    from .stubs import StubError, derive_stub
    exes = [_exercise(i) for i in args.ids] if args.ids else list(catalogue.EXERCISES)
    if is_release():
        raise GraderError("`grader stubs` derives exercises/ from solutions/, which a student release "
                          "leaves out (this copy has no solutions/). It works in the course's own repository.")
    stale = 0
    for ex in exes:
        sol = paths.solution_file(ex.id)
        if not sol.is_file():
            continue
        try:
            stub = derive_stub(sol.read_text(), sol.name)
        except StubError as e:
            raise GraderError(str(e)) from None
        dst = paths.exercise_file(ex.id)
        current = dst.read_text() if dst.is_file() else None
        if current == stub:
            continue
        stale += 1
        if args.check:
            print(f"{dst.relative_to(paths.course_root())} differs from its derivation from {sol.name}")
        else:
            dst.write_text(stub)
            print(f"wrote {dst.relative_to(paths.course_root())}")
    if args.check:
        print("stubs are up to date" if not stale else f"{stale} stub(s) out of date: run `grader stubs`")
        return 1 if stale else 0
    return 0


def cmd_notebooks(args) -> int:
    from .notebooks import COURSE_NOTEBOOKS, render
    exes = [_exercise(i) for i in args.ids] if args.ids else [*catalogue.EXERCISES, *COURSE_NOTEBOOKS]
    stale = 0
    for ex in exes:
        stem = ex if isinstance(ex, str) else ex.id
        dst = paths.notebook_file(stem)
        text = render(ex)
        if dst.is_file() and dst.read_text() == text:
            continue
        stale += 1
        rel = dst.relative_to(paths.course_root())
        if args.check:
            origin = COURSE_NOTEBOOKS[ex].replace(".", "/") + ".py" if stem == ex else f"grader/tasks/{ex.name}/notebook.py"
            print(f"{rel} differs from its generation from {origin}")
        else:
            dst.write_text(text)
            print(f"wrote {rel}")
    if args.check:
        print("notebooks are up to date" if not stale else
              f"{stale} notebook(s) out of date: run `grader notebooks`")
        return 1 if stale else 0
    return 0


def cmd_grade(args) -> int:
    from .grade import grade
    return grade(args)


def cmd_release(args) -> int:
    from .release import main_release
    return main_release(args.out_dir, args.modules, args.allow_answer_in_stubs)


def cmd_autograder(args) -> int:
    from .autograder import cmd_autograder as build
    return build(args)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed
    try:
        return installed("flash-attention-course")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def cmd_clean(args) -> int:
    """Remove what the grader keeps outside the course: the compiled-kernel cache and stale plot folders."""
    import shutil
    import tempfile
    from pathlib import Path

    from .runtimes.cpu.build import cache_dir
    targets = [cache_dir()]          # only the grader's own folder, never what $GRADER_CACHE names
    targets += sorted(Path(tempfile.gettempdir()).glob("grader-plot-*"))
    removed = 0
    for path in targets:
        if not path.exists():
            continue
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size
        removed += size
        print(f"{'would remove' if args.dry_run else 'removed'} {path} ({size / 2**20:.1f} MB)")
        if not args.dry_run:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink()
    if not removed:
        print(f"nothing to remove (the kernel cache lives in {cache_dir()})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="grader", description="FlashAttention from scratch: check, hint, "
                                "bench. Exercise ids may be given as 02_flash_forward, 02, 2 or flash_forward.")
    p.add_argument("--version", action="version", version=f"grader {version()}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("list", help="the course in order, with your progress")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_list)

    def target(s):
        s.add_argument("id", help="exercise id, e.g. 02_flash_forward or 02")
        g = s.add_mutually_exclusive_group()
        g.add_argument("--solution", action="store_true", help="use solutions/ID.py")
        g.add_argument("--file", help="use this file instead of exercises/ID.py")
        s.add_argument("--json", action="store_true", help="print one JSON object")

    s = sub.add_parser("check", help="run an exercise against the float64 reference")
    target(s)
    s.add_argument("--backend", choices=("auto", "gpu", "cpu"), default=None,
                   help="where the kernel runs (default: $GRADER_BACKEND or auto)")
    s.add_argument("--seed", type=int, help="replay the inputs of an earlier run")
    s.add_argument("--case", action="append", help="run only this case (repeatable)")
    s.add_argument("--shape", help="run one case of this shape, e.g. B=1,H=2,Hkv=1,Nq=5,Nk=9,d=32")
    from .engine.check import DEFAULT_CASE_TIMEOUT as limits    # one place for the defaults
    s.add_argument("--timeout", type=float,
                   help=f"seconds allowed per case, compiling not included (default: {limits['cpu']:g} "
                        f"on the CPU, {limits['gpu']:g} on a GPU)")
    s.add_argument("--no-shrink", action="store_true", help="do not look for a smaller failing shape")
    s.add_argument("--no-confirm", action="store_true",
                   help="GPU: do not confirm a pass on the CPU emulator (its race and bounds checks)")
    s.add_argument("--plot", action="store_true", help="save a PNG of the first failing case's error")
    s.add_argument("--counters", action="store_true",
                   help="then count, on the emulator, what the kernel would move on a GPU (one case)")
    s.add_argument("--sanitize", action="store_true",
                   help="GPU: run the failing case under compute-sanitizer and explain its findings")
    s.set_defaults(func=cmd_check)

    s = sub.add_parser("watch", help="re-check an exercise every time you save it")
    s.add_argument("id")
    s.add_argument("--file", help="watch this file instead of exercises/ID.py")
    s.add_argument("--backend", choices=("auto", "gpu", "cpu"), default=None)
    s.add_argument("--interval", type=float, default=0.5, help=argparse.SUPPRESS)
    s.add_argument("--max-runs", type=int, default=0, help=argparse.SUPPRESS)
    s.set_defaults(func=cmd_watch, solution=False)

    s = sub.add_parser("hint", help="the next hint, one at a time")
    s.add_argument("id")
    s.add_argument("n", nargs="?", type=int, help="show hint N, again or ahead: 1 to the count that every hint "
                   "prints after its number (Hint N/COUNT)")
    s.set_defaults(func=cmd_hint)

    s = sub.add_parser("bench", help="time the kernel on the GPU against baselines (--backend cpu: count "
                                     "what it would move, and estimate its time)")
    target(s)
    s.add_argument("--quick", action="store_true", help="fewer repetitions")
    s.add_argument("--backend", choices=("gpu", "cpu"), default="gpu",
                   help="cpu: the emulator's counters and a roofline estimate instead of GPU timings")
    s.set_defaults(func=cmd_bench)

    from .ladder import ladder_ids
    s = sub.add_parser("ladder", help=f"a module's speed ladder ({', '.join(i[:2] for i in ladder_ids())}): "
                                      "its kernel one idea at a time, "
                                      "each step checked, then timed on a GPU (on the CPU: checked only)")
    s.add_argument("id", help="exercise id, e.g. 06")
    s.add_argument("steps", nargs="*", type=int, metavar="STEP",
                   help="run these steps only (numbered from 1, as --list shows them); default: every step")
    s.add_argument("--backend", choices=("auto", "gpu", "cpu"), default=None,
                   help="where the steps run (default: $GRADER_BACKEND or auto); cpu: checked on the emulator, "
                        "not timed")
    s.add_argument("--list", action="store_true", help="list the steps and exit")
    s.add_argument("--out", metavar="FILE", help="GPU: also write the figures to this JSON file")
    s.add_argument("--nvcc", action="store_true",
                   help="compile every step with the local nvcc instead (ptxas's registers, spills and warnings)")
    v = s.add_argument_group("module 11's variants (what its lesson compares, section 12)")
    v.add_argument("--variants", nargs="*", type=int, metavar="N",
                   help="the variants in place of the steps: every one, or those numbered N (as --list shows them)")
    v.add_argument("--build", metavar="DIR", help="with --nvcc: keep the cubins in DIR, for --cubins")
    v.add_argument("--cubins", metavar="DIR", help="GPU: load the modules that --nvcc --build made in DIR")
    v.add_argument("--cases", choices=("all", "full", "fp16-full"), help="GPU: the shapes timed (default: all)")
    v.add_argument("--rounds", type=int, help="GPU: time every contender this many times, round after round, "
                                              "and report the medians (default: 1)")
    v.add_argument("--no-check", action="store_true", help="GPU: time without checking first")
    v.add_argument("--write", type=int, metavar="N",
                   help="apply variant N's text edits to solutions/11_backward_tensor_cores.py")
    s.set_defaults(func=cmd_ladder)

    s = sub.add_parser("doctor", help="what this machine can do, and what to install")
    s.set_defaults(func=cmd_doctor)

    s = sub.add_parser("clean", help="remove the compiled-kernel cache (rebuilt when needed) and stale plot folders")
    s.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    s.set_defaults(func=cmd_clean)

    s = sub.add_parser("stubs", help="(instructors) derive exercises/ from solutions/")
    s.add_argument("ids", nargs="*")
    s.add_argument("--check", action="store_true", help="only report stubs that differ; exit 1 if any")
    s.set_defaults(func=cmd_stubs)

    s = sub.add_parser("notebooks", help="(instructors) generate notebooks/ from grader/tasks/*/notebook.py")
    s.add_argument("ids", nargs="*")
    s.add_argument("--check", action="store_true", help="only report notebooks that differ; exit 1 if any")
    s.set_defaults(func=cmd_notebooks)

    s = sub.add_parser("grade", help="(instructors) grade a folder of submissions: a report per student, "
                                     "a class summary and figures")
    s.add_argument("submissions", metavar="SUBMISSIONS_DIR",
                   help="one file per student (alice.py) or one course folder per student (bob/)")
    s.add_argument("--exercise", "-e", required=True, help="exercise id, e.g. 02_flash_forward or 02")
    s.add_argument("--backend", choices=("auto", "gpu", "cpu"), default=None,
                   help="where the kernels run (default: $GRADER_BACKEND or auto)")
    s.add_argument("--jobs", "-j", type=int, help="submissions checked at a time (default: 2, or 1 "
                                                  "on a single core)")
    s.add_argument("--out", help="where the reports go (default: SUBMISSIONS_DIR-grade-ID beside it)")
    s.add_argument("--timeout", type=float, help="seconds allowed per case, as in check")
    s.add_argument("--limit", type=float, help="seconds allowed per submission, all cases (default: "
                                               "120 + the number of cases x (timeout + 5))")
    s.add_argument("--seed", type=int, help="the class's inputs (default: derived from the exercise id, "
                                            "the same on every run)")
    s.set_defaults(func=cmd_grade)

    s = sub.add_parser("release", help="(instructors) write the course without its solutions to OUT_DIR, "
                                       "for students")
    s.add_argument("out_dir", metavar="OUT_DIR", help="a new or empty folder outside the course")
    s.add_argument("--modules", nargs="+", metavar="ID",
                   help="only these modules' lessons, stubs, notebooks and grader data (an assignment)")
    s.add_argument("--allow-answer-in-stubs", action="store_true",
                   help="with --modules: allow a later module whose stub holds an earlier one's answer")
    s.set_defaults(func=cmd_release)

    s = sub.add_parser("autograder", help="(instructors) grade on Gradescope (an autograder zip) or GitHub "
                                          "Classroom (a student repository with its autograding workflow), "
                                          "no GPU needed")
    s.add_argument("platform", choices=("gradescope", "github"))
    s.add_argument("ids", nargs="+", metavar="ID", help="the modules graded, e.g. 00 01")
    s.add_argument("--modules", nargs="+", metavar="ID",
                   help="github: the modules of the students' repository (default: the graded ones)")
    s.add_argument("--allow-answer-in-stubs", action="store_true",
                   help="github: allow a module whose stub holds an earlier module's answer (see release)")
    s.add_argument("--out", required=True,
                   help="gradescope: the zip to write (FILE.zip); github: a new or empty folder for the "
                        "template repository (both outside the course)")
    s.add_argument("--points", metavar="FILE",
                   help="JSON: points per module, and per case with a visibility (default: 10 to 30 a "
                        "module, shared by its cases)")
    s.add_argument("--after-due-date", action="append", metavar="ID:CASE",
                   help="gradescope: show this case's test only after the due date (repeatable)")
    s.add_argument("--timeout", type=float, help="seconds allowed per case, as in check (default: 15)")
    s.add_argument("--seed", type=int, help="the inputs every submission is checked on (default: derived "
                                            "from the modules' ids, the same on every build)")
    s.add_argument("--budget", type=float,
                   help="gradescope: seconds for one whole submission, under the assignment's own "
                        "autograder timeout (default: 540, for Gradescope's 10 minutes)")
    s.set_defaults(func=cmd_autograder)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return USAGE_ERROR if e.code else 0
    try:
        return args.func(args)
    except GraderError as e:
        return _err(str(e))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:          # `grader list | head`: the reader left early, nothing is wrong
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
