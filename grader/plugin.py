"""The grader as a pytest plugin: one test per case of an exercise, with the grader's own messages.

    python -m pytest -p grader.plugin --exercise 02 [--backend cpu] [--seed S]
                     [--solution | --file PATH] [--case NAME ...] [--shape B=1,H=2,...] [--no-shrink]

Without --exercise the plugin does nothing, so it can sit beside other tests. With it, the checked
file is collected, one item per case, and nothing else. `grader check` runs exactly this in a child process
(adding --events, a file of JSON lines it watches: each case's start and verdict, when a compile
starts and ends, when the first failure is being shrunk; so it streams the verdicts and knows which
case was running if the kernel crashes or hangs). Under --events, SIGINT is the parent's time limit:
the running case becomes a "timeout" verdict naming the line the code was on, and the rest are not
run. `grader check --sanitize` runs it under compute-sanitizer with one --shape.
"""
from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from .engine.runner import CaseResult, SubmissionError, run_case, select_cases
from .errors import GraderError

# CUDA errors that leave the context unusable: every later launch in this process would fail too.
_STICKY = ("IllegalAddress", "ILLEGAL_ADDRESS", "LaunchFailure", "LAUNCH_FAILED", "MisalignedAddress",
           "MISALIGNED_ADDRESS", "IllegalInstruction", "ILLEGAL_INSTRUCTION", "HardwareStackError",
           "cudaErrorAssert", "unspecified launch failure", "illegal memory access")


def pytest_addoption(parser):
    g = parser.getgroup("grader", "FlashAttention course: check an exercise")
    g.addoption("--exercise", help="run this exercise's cases (02_flash_forward, 02, 2 or flash_forward)")
    g.addoption("--backend", dest="grader_backend", choices=("auto", "gpu", "cpu"), default=None,
                help="where the kernel runs (default: $GRADER_BACKEND or auto)")
    g.addoption("--seed", dest="grader_seed", type=int, default=None, help="replay the inputs of a run")
    g.addoption("--solution", dest="grader_solution", action="store_true", help="check solutions/ID.py")
    g.addoption("--file", dest="grader_file", help="check this file instead of exercises/ID.py")
    g.addoption("--case", dest="grader_cases", action="append", help="run only this case (repeatable)")
    g.addoption("--shape", dest="grader_shape", help="one case of this shape, e.g. B=1,H=2,Nq=5,Nk=9")
    g.addoption("--no-shrink", dest="grader_no_shrink", action="store_true",
                help="do not look for a smaller failing shape")
    g.addoption("--plot-dir", dest="grader_plot_dir", help="save the first failure's arrays here")
    g.addoption("--events", dest="grader_events", help="append one JSON line per event to this file")
    g.addoption("--no-provenance", dest="grader_no_provenance", action="store_true",
                help="for the grader's own tests: accept outputs the launcher computes without a kernel")
    g.addoption("--no-confirm", dest="grader_no_confirm", action="store_true",
                help="on a GPU, do not confirm the verdict on the CPU emulator")


_RUN = pytest.StashKey["CheckRun"]()


class CheckRun:
    """The state of one check: the exercise, its cases, the runtime and the student's function."""

    def __init__(self, config):
        from . import catalogue, paths
        from .engine.check import new_seed
        from .engine.runner import parse_shape
        from .runtimes import resolve_backend
        opt = config.getoption
        try:
            self.ex = catalogue.resolve(opt("exercise"))
        except KeyError as e:
            raise pytest.UsageError(e.args[0]) from None
        if opt("grader_file"):
            self.path = Path(opt("grader_file")).resolve()
        elif opt("grader_solution"):
            from .errors import GraderError
            from .release import solution_path
            try:
                self.path = solution_path(self.ex.id, "--solution")
            except GraderError as e:
                raise pytest.UsageError(str(e)) from None
        else:
            self.path = paths.exercise_file(self.ex.id)
        self.backend = resolve_backend(opt("grader_backend"))
        self.seed = opt("grader_seed") if opt("grader_seed") is not None else new_seed()
        shape = parse_shape(opt("grader_shape")) if opt("grader_shape") else None
        self.cases = select_cases(self.ex, opt("grader_cases"), shape)
        self.shrink = not opt("grader_no_shrink")
        # The first divergence (on the emulator, on either backend); GRADER_TRACE=0 turns it off.
        self.trace = self.shrink and os.environ.get("GRADER_TRACE", "1") != "0"
        self.plot_dir = opt("grader_plot_dir")
        self.events = open(opt("grader_events"), "a", buffering=1) if opt("grader_events") else None
        self.failures_seen = 0
        self.shape = shape
        self.selected = bool(opt("grader_cases")) or shape is not None   # not every case: no work check
        self.provenance = not opt("grader_no_provenance")
        # Run as plain pytest on a GPU, a last item confirms the verdict on the emulator, as
        # `grader check` does in its parent (which passes --events, so the child never does it).
        self.confirm = self.backend == "gpu" and self.events is None and not opt("grader_no_confirm")
        self.results: list[CaseResult] = []
        self.compile_seconds = 0.0       # time spent compiling, which no budget counts
        self.stop_reason: str | None = None
        self._fn = self._rt = None

    def emit(self, sync: bool = True, **event) -> None:
        if self.events is None:
            return
        self.events.write(json.dumps(event) + "\n")
        self.events.flush()
        if sync:
            os.fsync(self.events.fileno())

    def runtime(self):
        """Build the runtime once, on first use. Under `grader check` (--events), its compile
        reports when it starts and ends, so that compiling does not count against a case's time."""
        if self._rt is None:
            from .runtimes import get_runtime
            import time
            rt = get_runtime(self.backend)
            compile_ = rt.compile

            def compile(*args, **kw):
                self.emit(sync=False, event="compiling")
                t0 = time.process_time()
                try:
                    return compile_(*args, **kw)
                finally:
                    self.compile_seconds += time.process_time() - t0
                    self.emit(sync=False, event="compiled")
            rt.compile = compile
            rt.provenance_check = self.provenance      # read before the submission is imported
            self._rt = rt
        return self._rt

    def function(self):
        """Import the student's file once, on first use (SubmissionError if it does not)."""
        if self._fn is None:
            from .engine.runner import load_exercise_function
            self._fn = load_exercise_function(self.ex, self.path)
        return self._fn

    def setup(self):
        return self.function(), self.runtime()

    def run(self, case) -> CaseResult:
        if self.stop_reason:
            result = CaseResult(case.name, False, message=self.stop_reason, params=dict(case.params),
                                kind="not_run")
            self.emit(event="result", result=result.to_json())
            return result
        try:
            rt = self.runtime()
        except GraderError as e:
            self._fatal(str(e))
        except Exception as e:  # a broken installation, not the student's kernel
            self._fatal(f"the {self.backend} runtime could not start: {type(e).__name__}: {e}")
        self.emit(event="start", case=case.name)
        result = None
        try:
            try:
                fn = self.function()
            except SubmissionError as e:
                # The submission's failure, not the grader's: the check fails (exit 1).
                result = CaseResult(case.name, False, message=str(e), params=dict(case.params),
                                    kind="import_error")
                self.stop_reason = "not run: " + str(e).splitlines()[0].rstrip(":")
            else:
                result = self._run_case(case, fn, rt)
        except Exception as e:        # the grader's own code failed: say so, never as "not run"
            import traceback
            if self.backend == "gpu" and _cuda_fault(e, self._rt):
                # A CUDA error after the submission's kernel launched (an illegal address surfacing
                # in a copy or the next allocation) is that kernel's fault, not the grader's.
                result = self._crashed(case, f"{type(e).__name__}: {e}")
                self.emit(event="result", result=result.to_json())
                self.results.append(result)
                return result
            result = CaseResult(case.name, False, params=dict(case.params), kind="grader_error",
                                message="the grader itself failed on this case (a bug in the grader; please "
                                        "report it with this message):\n"
                                        + "".join(traceback.format_exception(e, limit=-4)).rstrip())
        except KeyboardInterrupt as e:
            # Under `grader check`, SIGINT is the parent's time limit: report where the code was.
            if self.events is None:
                raise
            where = where_stopped(e, self.path)
            result = result or getattr(e, "result", None)
            if result is None:
                result = CaseResult(case.name, False, message=where, params=dict(case.params),
                                    kind="timeout")
            else:
                result.message += ("\n(The search for a smaller failing shape was stopped: a smaller "
                                   "shape did not finish in time" + (f"; {where})" if where else ")"))
            self.stop_reason = "not run: an earlier case did not finish in time"
        self.results.append(result)
        if self.events is None:
            # Run as plain pytest, each failure is shown as it comes: its cause is settled against
            # the failing cases so far. Under `grader check`, the parent settles over all of them.
            from .engine.verdict import settle
            settle(self.results)
        self.emit(event="result", result=result.to_json())
        if self.events is not None and len(self.results) == len(self.cases):
            # The last case: the passing ones say which replays they refute; the parent settles.
            from .engine.verdict import refute
            try:
                for r in refute(self.results):
                    self.emit(event="refuted", case=r.name, ids=r.refuted)
                self._trace_divergence(rt)
                self._check_work()
            except Exception as e:    # the cases' verdicts are sent; what follows them failed: loudly
                import traceback
                self._fatal("the grader itself failed after the last case (a bug in the grader; please report "
                            "it with this message):\n" + "".join(traceback.format_exception(e, limit=-4)).rstrip())
        resources = getattr(rt, "resources", None)
        if resources:
            self.emit(event="resources", resources={k: dict(v) for k, v in resources.items()})
        return result

    def _trace_divergence(self, rt) -> None:
        """Trace the first failing case (shrunk, where a smaller shape was found) and the finished
        version on the emulator, and send where they first part (engine/diverge.py) to the parent,
        which adds it to the case's message: the place, with its line, beside the cause a replay
        states, or alone where none does."""
        import copy
        from .engine.verdict import settle
        trial = copy.deepcopy(self.results)      # the verdict the parent will settle on: which case
        settle(trial)                            # it reports first, and with which cause
        first = next((r for r in trial if not r.passed and r.kind != "not_run"), None)
        if first is None or not self.trace:
            return
        blocks = first.kind == "error" and "depends on the order in which the blocks run" in first.message
        if first.kind != "checked" and not blocks and not (first.kind == "error" and "out-of-bounds" in first.message):
            return
        from .runtimes.cpu.build import find_compiler
        if find_compiler() is None:
            return
        from .engine.diverge import NO_SOLUTION, blocks_overlap, first_divergence
        from .spec import Case
        shrunk = first.shrunk if isinstance(first.shrunk, dict) and first.shrunk.get("kind") == first.kind else None
        case = Case("custom", shrunk["params"]) if shrunk else Case(first.name, first.params)
        self.emit(event="explore", case=first.name)      # its compiles and runs have their own budget
        try:
            trace = blocks_overlap if blocks else first_divergence
            text = trace(self.ex, self.function(), case, self.seed)
        except KeyboardInterrupt:
            return
        except Exception as e:        # the verdict stands; the trace failed, loudly
            import traceback
            text = ("(the grader failed while tracing the first divergence — a bug in the grader, please "
                    f"report it: {''.join(traceback.format_exception_only(e)).strip()})")
        if text == NO_SOLUTION and first.cause:
            return                                # the cause stands alone; "not traced" adds nothing
        if text:
            self.emit(event="divergence", case=first.name, text=text,
                      shape=shrunk.get("shape") if shrunk else None)

    def _check_work(self) -> None:
        """Every case passed (all of them, not a --case or --shape selection): count the work on the
        emulator against the finished version's (engine/work.py), and send a finding to the parent,
        which fails the check on a case of its own."""
        if self.selected or not all(r.passed for r in self.results):
            return
        from .engine import work
        from .runtimes.cpu.build import find_compiler
        case = work.work_case(self.ex)
        if not work.enabled() or case is None or find_compiler() is None:
            return
        self.emit(event="explore", case="work")       # its runs have their own budget
        try:
            text = work.compare(self.ex, self.function())
        except KeyboardInterrupt:
            return
        if text:
            from .engine.runner import todos_left
            self.emit(event="work", text=text + todos_left(self.ex, self.path, work=True), params=case.params)

    def _run_case(self, case, fn, rt) -> CaseResult:
        keep: dict = {}
        result = run_case(self.ex, case, fn, rt, self.seed, self.path, keep=keep,
                          on_explain=lambda: self.emit(event="explore", case=case.name))
        if result.kind == "error" and (any(tag in result.message for tag in _STICKY) or not rt.healthy()):
            return self._crashed(case, result.message.splitlines()[0])
        elif result.kind == "compile_error":
            self.stop_reason = "not run: the kernel does not compile"
        elif not result.passed and result.kind in ("checked", "error"):
            self.failures_seen += 1
            if self.failures_seen == 1:
                self.emit(event="explore", case=case.name)   # shrinking has its own time budget
                try:
                    self._explore_first_failure(case, result, keep, fn, rt)
                except KeyboardInterrupt as e:
                    e.result = result        # the verdict stands; only the search was stopped
                    raise
        return result

    def _crashed(self, case, error: str) -> CaseResult:
        """The submission's kernel left a CUDA error: a failed case (exit 1), and no more cases run
        (the context is lost). The parent re-runs this case on the CPU emulator for its line."""
        self.stop_reason = "not run: an earlier case crashed the GPU context"
        # What the error's own name tells; an unspecified launch failure (a trap, an mbarrier misused)
        # names nothing, and the emulator's run of the case, appended by the parent, says what it saw.
        low = error.lower()
        if "illegal address" in low or "illegal memory access" in low or "misaligned" in low:
            meaning = ("An illegal or misaligned address means an index ran outside an array (or a pointer "
                       "cast to a wider type than its alignment). ")
        else:
            meaning = "The GPU names no place or cause for this error. "
        return CaseResult(case.name, False, params=dict(case.params), kind="crash",
                          message=(f"the kernel crashed on the GPU in case {case.name}: {error.removeprefix('your code raised ')}\n"
                                   f"{meaning}The CUDA context is lost, so the remaining cases were not run."))

    def _fatal(self, message: str):
        self.emit(event="fatal", message=message)
        pytest.exit(message, returncode=3)

    def _explore_first_failure(self, case, result, keep, fn, rt) -> None:
        """For the first failing case only: save its arrays for --plot, and shrink it."""
        if self.plot_dir and keep.get("ref"):
            import numpy as np
            path = os.path.join(self.plot_dir, f"{self.ex.id}-{case.name}.npz")
            np.savez(path, **{f"ref_{k}": v for k, v in keep["ref"].items()},
                     **{f"out_{k}": np.asarray(v) for k, v in keep["out"].items()})
            result.plot = path
        if self.shrink and case.name != "custom":
            import time
            from .engine.runner import format_shape, one_change, shrink
            found = shrink(self.ex, case.params, fn, rt, self.seed, self.path,
                           clock=lambda: time.process_time() - self.compile_seconds)
            if found:
                params, r, passing = found
                message = r.message
                if passing:         # what the failure needs: run, and seen to pass
                    message = message.rstrip("\n") + (
                        "\nobserved: this shape passes with any one of these changes (same seed): "
                        + ", ".join(one_change(params, c) for c in passing) + ".")
                result.shrunk = {"params": params, "message": message, "shape": format_shape(params),
                                 "kind": r.kind, "candidates": r.candidates, "plain": r.plain, "searched": r.searched,
                                 "observations": r.observations, "cause": None}


def _cuda_fault(e: BaseException, rt) -> bool:
    """Is this exception a CUDA error the kernel left behind (a sticky error, or a context that no
    longer works)?"""
    text = f"{type(e).__name__}: {e}"
    if any(tag in text for tag in _STICKY) or "CUDA_ERROR" in text or "cudaError" in text:
        return True
    try:
        return rt is not None and not rt.healthy()
    except Exception:
        return True


def where_stopped(e: KeyboardInterrupt, path: Path) -> str:
    """Where the code was when SIGINT stopped it: the emulator's kernel line (its KeyboardInterrupt
    says "KERNEL interrupted at FILE:LINE, in block (..), thread (..)"), else the student's Python
    line, else nothing."""
    m = re.match(r"(?P<kernel>\S+) interrupted at (?P<place>.+?), in (?P<who>.+)", str(e), re.S)
    if m:
        who = " ".join(m["who"].split())
        if m["place"] == "an unknown line":
            return f"{m['kernel']} was running ({who}) at a line the emulator could not find"
        return f"when it was stopped, {m['kernel']} was at {m['place']} ({who})"
    from .engine.runner import student_frames
    frames = student_frames(e, path)
    if frames:
        f = frames[-1]
        return (f"when it was stopped, your Python code was at {Path(f.filename).name}:{f.lineno} "
                f"(in {f.name}: {(f.line or '').strip()})")
    return ""


class CaseFailed(Exception):
    """A case's verdict: the grader's message is the failure pytest shows."""

    def __init__(self, result: CaseResult):
        super().__init__(result.message)
        self.result = result


class CaseItem(pytest.Item):
    def __init__(self, *, case, **kw):
        super().__init__(**kw)
        self.case = case

    def runtest(self):
        result = self.config.stash[_RUN].run(self.case)
        if result.kind == "not_run":
            pytest.skip(result.message)
        if not result.passed:
            raise CaseFailed(result)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, CaseFailed):
            r = excinfo.value.result
            text = r.message
            if r.shrunk:
                text += f"\nSmallest failing shape found: {r.shrunk['shape']}\n{r.shrunk['message']}"
            return text
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.config.stash[_RUN].ex.id}: {self.case.name}"


class ConfirmItem(pytest.Item):
    """After the cases, on a GPU: engine/check.py's confirmation on the emulator, whose race and bounds
    checks see what a GPU runs silently. A fault found there fails this item with the emulator's report."""

    def runtest(self):
        from .engine.check import confirm_on_emulator
        run = self.config.stash[_RUN]
        if run.stop_reason or len(run.results) != len(run.cases):
            pytest.skip("not confirmed on the emulator: not every case ran")
        before = {r.name: (r.passed, r.kind) for r in run.results}
        note = confirm_on_emulator(run.ex, run.path, run.seed, run.results,
                                   [c.name for c in run.cases], run.shape)
        flipped = next((r for r in run.results if before[r.name] != (r.passed, r.kind)), None)
        if flipped is not None:
            raise CaseFailed(flipped)
        if note and "not confirmed" in note:
            pytest.skip(note)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, CaseFailed):
            r = excinfo.value.result
            return f"{r.name}: {r.message}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.config.stash[_RUN].ex.id}: confirmed on the emulator"


class ExerciseFile(pytest.File):
    """The checked file as pytest sees it: one CaseItem per case (and, on a GPU, a ConfirmItem)."""

    def collect(self):
        run = self.config.stash[_RUN]
        for case in run.cases:
            yield CaseItem.from_parent(self, name=case.name, case=case)
        if run.confirm:
            yield ConfirmItem.from_parent(self, name="confirmed_on_emulator")


def pytest_configure(config):
    if not config.getoption("exercise", None):
        return
    try:
        run = config.stash[_RUN] = CheckRun(config)
    except GraderError as e:
        raise pytest.UsageError(str(e)) from None
    config.args[:] = [str(run.path)]     # collect the checked file, and nothing else
    if run.events is not None:
        # The parent stops a case that runs past its time limit with SIGINT, even when this process
        # was started with SIGINT ignored (a background job): make it raise KeyboardInterrupt.
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_pycollect_makemodule(module_path, parent):
    # pytest's own collector would import the checked .py file as a test module, before any case
    # runs, and turn a file that does not import into a collection error (exit 2). The grader imports
    # it itself, in the first case, where a failure is the submission's (exit 1).
    run = parent.config.stash.get(_RUN, None)
    if run is not None and module_path == run.path:
        return ExerciseFile.from_parent(parent, path=module_path)


def pytest_collect_file(file_path, parent):
    run = parent.config.stash.get(_RUN, None)
    if run is not None and file_path == run.path and file_path.suffix != ".py":
        return ExerciseFile.from_parent(parent, path=file_path)


def pytest_report_header(config):
    if config.getoption("exercise", None):
        run = config.stash[_RUN]
        return f"grader: {run.ex.id} · {run.path} · backend {run.backend} · seed {run.seed}"
