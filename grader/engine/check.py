"""The parent side of a check: start the pytest plugin in a child process, watch it with a time
limit, collect the verdicts.

A kernel that crashes, hangs, or poisons the GPU context takes only the child process down; the
grader reports it as a failed case and carries on.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..catalogue import Exercise
from ..errors import GraderError
from .runner import NOT_RUN_HERE, CaseResult, select_cases
from .verdict import settle

# Seconds of CPU time a case may use, compiling excluded (the child reports when it compiles). Time is
# the child's own CPU time, never the wall clock: a kernel gets the same verdict alone and on a
# machine running two checks per core (a class's `grader grade`, an autograder, a laptop with a
# browser open). The slowest case of any solution takes about 1 s on the CPU emulator (with its
# race-check reruns) and milliseconds on a GPU; the limits leave room for a correct kernel many times
# slower than the solution, and still report a hang within seconds. `grader check --timeout S` raises
# them.
DEFAULT_CASE_TIMEOUT = {"gpu": 10.0, "cpu": 15.0}
STARTUP_TIMEOUT = 120.0   # importing CuPy and creating the runtime can be slow (wall clock)
COMPILE_TIMEOUT = 300.0   # one compile (NVRTC, then the host compiler on the CPU; wall clock)
SHRINK_ALLOWANCE = 30.0   # explaining a failure, or looking for a smaller failing shape (runner.shrink's budget)
# A child that uses no CPU (blocked, or a GPU kernel waited on without spinning) is still stopped once
# the wall clock passes this many times its CPU limit: far beyond what a loaded machine slows a case.
WALL_FACTOR = 8.0
# After the limit, the child is sent SIGINT: the emulator stops the threads and names their line (and
# a hang in Python code raises KeyboardInterrupt there). This long is allowed for that report, then
# the child is killed.
INTERRUPT_GRACE = {"gpu": 2.0, "cpu": 5.0}

TIMEOUT_ADVICE = ("Look for a loop that never ends (a bound that never grows, a while on a value no "
                  "thread updates) or a __syncthreads() that some threads never reach. If the kernel "
                  "is only slow, allow it more time: --timeout SECONDS.")


def timeout_message(limit: float, where: str = "", cpu: bool = True, idle: bool = False) -> str:
    """The verdict of a case stopped by its time limit; `where` is the child's report of the line
    that was running, if it gave one; `cpu`: the limit was counted in CPU time; `idle`: the wall
    clock stopped it, WALL_FACTOR times the limit, while it used less CPU time than that."""
    within = (f"within {limit:g} s of CPU time (compiling excluded), many times what a correct kernel "
              "needs" if cpu else f"within {limit:g} s (compiling excluded)")
    if idle:
        within = (f"within {WALL_FACTOR * limit:g} s, in which it used less than {limit:g} s of CPU time: it "
                  "was waiting, not computing")
    if where:
        where = where.rstrip(".")
        head = f"the case did not finish {within}. {where[:1].upper()}{where[1:]}."
    else:
        head = f"the case did not finish {within}, and was stopped."
    return f"{head}\n{TIMEOUT_ADVICE}"


def cpu_clock(pid: int):
    """A clock reading the CPU time (user + system, seconds) process `pid` has used, or None where
    /proc does not tell it (then the limits fall back to the wall clock)."""
    path = f"/proc/{pid}/stat"
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    last = [0.0]

    def clock() -> float:
        try:
            with open(path) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            last[0] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass                     # the child exited: its last reading stands
        return last[0]
    try:
        open(path).close()
    except OSError:
        return None
    return clock


def new_seed() -> int:
    return secrets.randbelow(2**31)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def plugin_args(ex: Exercise, path: Path, backend: str, seed: int, cases: list[str] | None = None,
                shape: dict | None = None, shrink: bool = True, plot_dir: str | None = None,
                provenance: bool = True) -> list[str]:
    """The command line of the pytest plugin that runs these cases (see grader/plugin.py)."""
    from .runner import format_shape
    args = ["-p", "grader.plugin", "--exercise", ex.id, "--file", str(path), "--backend", backend,
            "--seed", str(seed)]
    for c in cases or ():
        args += ["--case", c]
    if shape:
        args += ["--shape", format_shape(shape)]
    if not shrink:
        args.append("--no-shrink")
    if plot_dir:
        args += ["--plot-dir", plot_dir]
    if not provenance:
        args.append("--no-provenance")
    return args


def child_command(plugin: list[str], tmp: Path) -> list[str]:
    """`python -m pytest` with the plugin, isolated from any pytest configuration around it (an empty
    ini file in a private folder is the config and the root, and no conftest.py is read: pytest would
    otherwise load those of the working directory's test* folders, such as this repository's
    tests/conftest.py, which turns the first divergence off), writing no cache anywhere."""
    ini = tmp / "pytest.ini"
    ini.write_text("[pytest]\n")
    return [sys.executable, "-m", "pytest", *plugin, "-q", "--no-header", "-p", "no:cacheprovider",
            "--noconftest", "-c", str(ini), "--rootdir", str(tmp),
            "-W", "ignore::pytest.PytestAssertRewriteWarning"]


# The child computes on one thread: its CPU time, which the limits and the diagnosis budgets count,
# is then the same on a 2-core laptop and a 64-core server (NumPy's BLAS would otherwise spread the
# replays over every core and spend a budget many times faster there).
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                               "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")}


def child_env() -> dict:
    """The child finds the course even when it runs from elsewhere, and computes on one thread."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **ONE_THREAD)
    try:
        from ..paths import course_root
        env.setdefault("GRADER_ROOT", str(course_root()))
    except GraderError:
        pass
    return env


class _EventReader:
    """The JSON lines the child appends to the events file, as they arrive (whole lines only)."""

    def __init__(self, path: Path):
        self._f = open(path)
        self._buf = ""

    def new(self) -> list[dict]:
        self._buf += self._f.read()
        *lines, self._buf = self._buf.split("\n")
        return [json.loads(line) for line in lines if line.strip()]

    def close(self) -> None:
        self._f.close()


class _Watch:
    """The parent's view of a running check: which case runs, until when, and the verdicts so far.

    A case's limit is counted in the child's CPU time when `cpu` reads it (cpu_clock), with the wall
    clock as a backstop WALL_FACTOR times longer; otherwise in wall-clock time. Startup and compiling
    are limited by the wall clock."""

    def __init__(self, case_timeout: float, params: dict, on_result, clock=time.monotonic, cpu=None):
        self.clock, self.cpu = clock, cpu
        self.case_timeout = case_timeout
        self.params = params                     # case name -> its parameters, for the verdicts
        self.on_result = on_result
        self.results: dict[str, CaseResult] = {}
        self.resources: dict = {}
        self.fatal: str | None = None
        self.running: str | None = None
        self.compiling = False
        self.deadline = clock() + STARTUP_TIMEOUT  # wall clock
        self.cpu_deadline: float | None = None     # the running case's, in the child's CPU time
        self._left = 0.0                          # the case's time left when a compile began
        self.interrupted = False                  # SIGINT sent: a timeout verdict gets its message here
        self.divergence: dict | None = None       # the child's trace of the first failing case
        self.idle = False                         # stopped by the wall clock while using little CPU
        self.stalled = False                      # stopped after the last case, in the grader's own work
        self.explaining = False                   # the running case failed; the grader explains it
        self.work: dict | None = None             # every case passed, and the work check found more work

    def _limit(self, now: float, seconds: float) -> None:
        if self.cpu is None:
            self.deadline, self.cpu_deadline = now + seconds, None
        else:
            self.deadline, self.cpu_deadline = now + WALL_FACTOR * seconds, self.cpu() + seconds

    def expired(self) -> bool:
        if self.clock() > self.deadline:
            self.idle = self.cpu_deadline is not None      # the wall-clock backstop, not the CPU limit
            return True
        return self.cpu_deadline is not None and self.cpu() > self.cpu_deadline

    def handle(self, ev: dict) -> None:
        now = self.clock()
        kind = ev["event"]
        if kind == "start":
            self.running, self.compiling, self.explaining = ev["case"], False, False
            self._limit(now, self.case_timeout)
        elif kind == "compiling" and not self.compiling:
            left = self.deadline - now if self.cpu_deadline is None else self.cpu_deadline - self.cpu()
            self.compiling, self._left = True, max(left, 0.0)
            self.deadline, self.cpu_deadline = now + COMPILE_TIMEOUT, None
        elif kind == "compiled" and self.compiling:
            self.compiling = False
            self._limit(now, self._left)           # compiling does not count against the case
        elif kind == "explore":      # the kernel is done: the grader explains, shrinks or traces
            self._limit(now, SHRINK_ALLOWANCE + self.case_timeout)
            self.explaining = True
        elif kind == "result":
            r = CaseResult(**ev["result"])
            if self.interrupted and r.kind == "timeout":
                r.message = timeout_message(self.case_timeout, r.message, self.cpu is not None, self.idle)
            self.record(r)
            self.running, self.compiling = None, False
            self.deadline, self.cpu_deadline = now + STARTUP_TIMEOUT, None
        elif kind == "refuted":
            if ev["case"] in self.results:
                self.results[ev["case"]].refuted = ev["ids"]
        elif kind == "divergence":
            self.divergence = ev
        elif kind == "work":
            self.work = ev
        elif kind == "resources":
            self.resources.update(ev["resources"])
        elif kind == "fatal":
            self.fatal = ev["message"]

    def record(self, r: CaseResult) -> None:
        if not r.params:
            r.params = dict(self.params.get(r.name, {}))
        self.results[r.name] = r
        if self.on_result is not None:
            self.on_result(r.to_json())


def _interrupt(proc: subprocess.Popen, reader: _EventReader, watch: _Watch, grace: float) -> None:
    """SIGINT to the child, then wait up to `grace` s for the running case's verdict (which names the
    line the threads were on), and stop there."""
    case = watch.running
    watch.interrupted = True
    try:
        os.kill(proc.pid, signal.SIGINT)
    except (ProcessLookupError, PermissionError):
        return
    end = time.monotonic() + grace
    while time.monotonic() < end:
        exited = proc.poll() is not None
        for ev in reader.new():
            watch.handle(ev)
        if case in watch.results or exited:
            return
        time.sleep(0.02)


def _run_child(plugin: list[str], backend: str, case_timeout: float, params: dict, on_result):
    """Run the plugin's cases in a child process under the time limits; returns the parent's watch
    (verdicts, events), what a case left unrun is told, and whether the child ran to its end (False:
    stopped at a time limit, or it died)."""
    not_run = "not run"
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        events = Path(tmp) / "events.jsonl"
        events.touch()
        log = open(Path(tmp) / "worker.log", "w+")
        reader = _EventReader(events)
        proc = subprocess.Popen(child_command(plugin + ["--events", str(events)], Path(tmp)),
                                stdout=log, stderr=subprocess.STDOUT, env=child_env(),
                                start_new_session=True)
        watch = _Watch(case_timeout, params, on_result,
                       cpu=cpu_clock(proc.pid) if backend == "cpu" else None)
        try:
            while True:
                exited = proc.poll() is not None
                for ev in reader.new():
                    watch.handle(ev)
                if exited:
                    break
                if watch.expired():
                    running = watch.running
                    if running and watch.compiling:
                        _kill(proc)
                        watch.record(CaseResult(
                            running, False, kind="timeout",
                            message=f"compiling the kernel took over {COMPILE_TIMEOUT:.0f} s and was "
                                    "stopped. Look for very long loops the compiler unrolls."))
                    elif running and watch.explaining:   # the grader's own time ran out, not the kernel's
                        _kill(proc)
                        watch.record(CaseResult(
                            running, False, kind="checked",
                            message="the kernel finished and its output is wrong; the grader's explanation of "
                                    "it (replays, shrinking) ran past its own time allowance and was stopped, "
                                    "so nothing more is said here. Run this case alone (--case) to see more."))
                        not_run = "not run: the grader's explanation of an earlier case was stopped"
                    elif running:
                        _interrupt(proc, reader, watch, INTERRUPT_GRACE.get(backend, 2.0))
                        _kill(proc)
                        if running not in watch.results:
                            watch.record(CaseResult(running, False, kind="timeout",
                                                    message=timeout_message(case_timeout, cpu=watch.cpu is not None,
                                                                            idle=watch.idle)))
                        not_run = "not run: an earlier case did not finish in time"
                    elif watch.results:           # past the last case: the grader's own trace or probes
                        _kill(proc)
                        watch.stalled = True
                    else:
                        _kill(proc)
                        watch.fatal = f"the grader's worker did not start within {STARTUP_TIMEOUT:.0f} s."
                    break
                time.sleep(0.02)
        finally:
            if proc.poll() is None:       # Ctrl-C in the parent, or an error: never leave the child
                _kill(proc)
            reader.close()
            log.seek(0)
            worker_log = log.read()
            log.close()
    running = watch.running
    if running and running not in watch.results and watch.fatal is None:
        watch.record(CaseResult(
            running, False, kind="crash",
            message=(f"the process running this case died (exit code {proc.returncode}): the kernel "
                     "crashed it, for instance with an out-of-bounds access. The cases after it were "
                     "not run.\n" + worker_log.strip()[-1500:])))
        not_run = "not run: an earlier case crashed the process"
    if watch.fatal is None and not watch.results and proc.returncode not in (0, 1):
        watch.fatal = f"the grader's worker failed (exit code {proc.returncode}):\n{worker_log.strip()[-3000:]}"
    return watch, not_run, proc.returncode in (0, 1)


def run_check(ex: Exercise, path: Path, backend: str, seed: int, case_timeout: float | None = None,
              cases: list[str] | None = None, shape: dict | None = None, shrink: bool = True,
              plot_dir: str | None = None, on_result=None, confirm: bool = True, provenance: bool = True) -> dict:
    """Run every case of `ex` on the file at `path`; returns the JSON report of `grader check --json`.

    On a GPU, a check that passes is confirmed on the emulator (`confirm_on_emulator`) unless
    `confirm` is False. `provenance=False` lets outputs come from the launcher's own code (the
    grader's tests of its comparisons use such launchers; runtimes/provenance.py).

    `on_result(case)` is called with each case's JSON verdict as soon as it is known (for a report
    that streams); the cases that never ran are only in the returned report.
    """
    all_cases = select_cases(ex, cases, shape)       # a bad --case is a usage error, before any child
    case_timeout = case_timeout or DEFAULT_CASE_TIMEOUT.get(backend, 15.0)
    params = {c.name: dict(c.params) for c in all_cases}
    plugin = plugin_args(ex, path, backend, seed, cases, shape, shrink, plot_dir, provenance)
    watch, not_run, finished = _run_child(plugin, backend, case_timeout, params, on_result)
    fatal = watch.fatal
    ordered = []
    for c in all_cases:
        r = watch.results.get(c.name) or CaseResult(c.name, False, params=dict(c.params), kind="not_run",
                                                    message=not_run)
        if not r.params:
            r.params = dict(c.params)
        ordered.append(r)
    settle(ordered)          # the cause a check states: reproduced on every failing case (verdict.py)
    divergence = watch.divergence
    first = next((r for r in ordered if not r.passed and r.kind != "not_run"), None)
    if watch.stalled and first is not None:
        first.message = first.message.rstrip("\n") + (
            "\n(after the last case, the grader's own work on this report (asking the passing cases "
            "which replays they refute, then tracing this failure's first divergence) ran past its time "
            "allowance and was stopped: the verdicts above stand, and no place was traced)")
    elif not finished and divergence is None and first is not None and first.kind in ("checked", "error"):
        # A later case hung or crashed, and the child was stopped before its last step, the trace of
        # the first failure: that case alone, in a new child, gives it (its verdict is the one above).
        plugin = plugin_args(ex, path, backend, seed, cases if shape else [first.name], shape, shrink, None, provenance)
        divergence = _run_child(plugin, backend, case_timeout, {first.name: first.params}, None)[0].divergence
    add_divergence(ordered, divergence)
    crashed = next((r for r in ordered if r.kind in ("crash", "timeout")), None)
    if crashed is not None and backend == "gpu":
        # A crash names no line on a GPU, and a time limit there proves no hang: the emulator decides,
        # counting CPU time and naming a deadlock with its line.
        crashed.message += cpu_replay(ex, path, seed, crashed, shape)
    # A case this machine cannot run (module 12: more ranks than GPUs) is reported as not run, and does
    # not fail the check; one left unrun by an earlier crash comes with that crash, which does.
    def all_passed():
        return fatal is None and any(r.passed for r in ordered) and all(r.passed or r.kind == "not_run" for r in ordered)
    passed = all_passed()
    note = None
    if backend == "gpu" and fatal is None:
        if confirm:
            note = confirm_on_emulator(ex, path, seed, ordered, cases, shape)
            passed = all_passed()
        elif passed:
            note = ("not confirmed on the emulator (--no-confirm): a GPU runs a data race or an out-of-bounds "
                    "read inside mapped memory without complaint, so this pass does not rule them out.")
    if watch.work is not None and passed:
        # The outputs are right, and the emulator counted work far from the finished version's
        # (engine/work.py): a case of its own fails the check.
        ordered.append(CaseResult("work", False, message=watch.work["text"], kind="work",
                                  params=dict(watch.work.get("params") or {})))
        passed = False
    return {
        "id": ex.id, "file": str(path), "backend": backend, "seed": seed, "note": note,
        "passed": passed,
        "error": fatal,
        "cases": [r.to_json() for r in ordered],
        "resources": watch.resources,
    }


def confirm_on_emulator(ex: Exercise, path: Path, seed: int, ordered: list[CaseResult],
                        cases: list[str] | None, shape: dict | None) -> str | None:
    """A GPU verdict, confirmed on the emulator (same seed), whose thread-order and bounds checks see a
    race or an out-of-bounds access that a GPU runs silently or turns into wrong numbers with no
    cause. Every case the GPU ran runs there, and every case this machine could not run, so that the
    GPU and the CPU give one verdict: a pass there is the CPU's pass, and a cause the emulator adds is
    one the CPU's check states. A case the GPU could not run takes the emulator's verdict in place, and
    a GPU failure's cause is settled again with it; a case the GPU passed and the emulator fails, and a
    fault in any case, fail here (in place) with the emulator's report; on a GPU failure no replay
    explains, the emulator's cause or divergence is otherwise added (`_named_on_emulator`). Returns the
    check's note (None: nothing to say)."""
    from ..runtimes.cpu.build import find_compiler
    failing = next((i for i, r in enumerate(ordered) if not r.passed and r.kind != "not_run"), None)
    # The cases this machine could not run (module 12's, of more ranks than it has GPUs): the emulator
    # plays every rank, and its verdict on them is the check's (a race between a rank's streams, that
    # one GPU never showed, passed otherwise).
    unrun = [r for r in ordered if r.kind == "not_run" and r.message.startswith(NOT_RUN_HERE)]

    def stands() -> bool:                 # a reproduced cause, or a GPU fault: the GPU's verdict stands
        return failing is not None and bool(ordered[failing].cause or ordered[failing].kind != "checked")
    if stands() and not unrun:
        return None
    unchecked = ("a GPU runs a data race or an out-of-bounds read inside mapped memory without complaint, "
                 "and this verdict was not confirmed on the emulator")
    if find_compiler() is None:
        return (f"{unchecked}: it needs a C++ compiler, which this machine lacks. `grader check {ex.id} "
                "--backend cpu` on a machine with one, or `--sanitize` (compute-sanitizer) here, checks that.")
    # Every case the GPU ran and those it could not: a bug the emulator sees in any of them fails the
    # check as it does on the CPU, and a cause is settled on all the failing ones, as the CPU's check
    # does (never one that fewer cases leave unrefuted). On a GPU failure too, the cases it could not
    # run take the emulator's verdict, so that the first failing case is the CPU's (blind batch 44's 12
    # first failed a three-rank case on the CPU, which two GPUs cannot run).
    names = [r.name for r in ordered if r.kind != "not_run"] + [r.name for r in unrun]
    names = None if shape else names
    try:
        # A failure is shrunk there too: its first divergence is traced on the smallest failing shape
        # (a GPU's, or one of the cases this machine could not run: 12's multi-rank ones).
        report = run_check(ex, path, "cpu", seed, cases=names, shape=shape, shrink=True, confirm=False)
    except GraderError as e:
        return f"{unchecked}: the emulator could not run it ({e})."
    if report.get("error"):
        return f"{unchecked}: the emulator could not run it ({report['error'].splitlines()[0]})."
    emulated = _emulated_here(unrun, report)
    if emulated and failing is None:
        return emulated
    if failing is not None and unrun:
        # The cause is settled again over every failing case, those only the emulator ran included, as
        # the CPU's check settles it (blind batch 45's 12: two GPUs' two-rank cases all reproduced a
        # cause that two four-rank cases, failing on the CPU, did not).
        settle(ordered)
        if stands():
            return emulated
    unrun_names = {r.name for r in unrun}
    # Any case the GPU passed and the emulator fails (wrong numbers too: a race that a GPU's lockstep
    # warp hid on a small case, blind batch 42's 00), so that the first failing case is the CPU's; on a
    # GPU failure, a fault in a later case too (the failure itself is the GPU's). What the emulator
    # could not run says nothing of the kernel.
    gpu_passed = {r.name for r in ordered if r.passed}
    fault = next((c for c in report["cases"] if not c["passed"] and c["name"] not in unrun_names
                  and (c["kind"] in ("error", "crash", "timeout") or c["name"] in gpu_passed)), None)
    if fault is None and failing is not None:
        return _named_on_emulator(ordered[failing], report, seed) or emulated
    if fault is None:
        shown = len([c for c in report["cases"] if c["passed"] and c["name"] not in unrun_names])
        also = f", with the {len(unrun)} this machine has too few GPUs for" if unrun else ""
        return (f"confirmed on the CPU emulator on every case the GPU ran ({shown}{also}; seed {seed}): no "
                "data race between a block's threads and no out-of-bounds access was found there.")
    if failing is not None and ordered[failing].name != fault["name"]:
        # The GPU's first failure is shown first: what the emulator says of it too (01's loop one past
        # the row: a cause on the CPU, where the read past the end gives the guard's bytes, not the
        # GPU's garbage), beside the fault it found in a later case.
        _named_on_emulator(ordered[failing], report, seed)
    # The case takes the emulator's report of it: its verdict, and what it observed there.
    r = next(r for r in ordered if r.name == fault["name"])
    was = "passes on the GPU" if r.passed else "gives wrong numbers on the GPU"
    r.passed, r.kind, r.cause = False, fault["kind"], None
    lines = "\n".join("  " + line for line in fault["message"].splitlines())
    if fault["kind"] == "checked":
        # Wrong numbers, in a case the GPU passed, from the same inputs: what differs is observed, not guessed.
        r.cause, r.divergence, r.shrunk = fault.get("cause"), fault.get("divergence"), fault.get("shrunk")
        r.observations = fault.get("observations") or []
        r.message = (f"passes on the GPU, and fails on the CPU emulator with the same inputs (seed {seed}), which "
                     f"runs the threads and blocks in other orders and checks every access:\n{lines}")
        return (f"case {r.name} passed on the GPU and fails on the CPU emulator with the same inputs: the "
                f"verdict is the emulator's, as `grader check {ex.id} --backend cpu` gives it.")
    r.message = (f"{was}, and the same case on the CPU emulator (seed {seed}), which checks every access and "
                 f"reruns the threads and blocks in other orders, names what is wrong:\n{lines}")
    # Where the GPU failed an earlier case, that one is shown first: the note says where the fault is.
    first_line = fault["message"].splitlines()[0] if fault["message"] else ""
    shown = next(c for c in ordered if not c.passed and c.kind != "not_run")
    named = f" It is in case {r.name}: {first_line}" if first_line and shown.name != r.name else ""
    return ("the CPU emulator found a fault the GPU ran without complaint: a GPU can give right (or wrong) "
            f"numbers with a data race or an out-of-bounds access. Fix what the emulator names.{named}")


def _emulated_here(unrun: list[CaseResult], report: dict) -> str | None:
    """The emulator's verdicts on the cases this machine could not run, put in their place (passed or
    not, with its message). Returns the check's note where one of them fails, else None."""
    verdicts = {c["name"]: c for c in report["cases"]}
    failed = []
    for r in unrun:
        c = verdicts.get(r.name)
        if c is None or c["kind"] == "not_run":
            continue
        r.passed, r.kind, r.cause = c["passed"], c["kind"], c.get("cause")
        r.rel_err, r.max_abs_err = c.get("rel_err"), c.get("max_abs_err")
        # What a cause is settled on, as in the emulator's own report.
        r.candidates, r.plain, r.searched = c.get("candidates") or [], c.get("plain") or [], c.get("searched", True)
        r.refuted, r.shrunk = c.get("refuted"), c.get("shrunk")
        r.divergence, r.observations = c.get("divergence"), c.get("observations") or []
        r.message = (f"run on the CPU emulator, which plays every rank (this machine has too few GPUs for "
                     f"them): {c['message']}" if c["message"] else "")
        if not r.passed:
            failed.append(r.name)
    if failed:
        return (f"{len(failed)} case(s) this machine has too few GPUs for ran on the CPU emulator, and failed "
                f"there ({', '.join(failed)}): the GPU's cases alone did not show it.")
    return None


def _named_on_emulator(r: CaseResult, report: dict, seed: int) -> str | None:
    """A GPU failure no replay explained, where the emulator's run of the same case (same seed) found no
    fault. What that run observed replaces the GPU's advice to run the emulator: whether the case
    fails there too, and a cause its replays reproduced there or a first divergence. The emulator sees
    what a GPU hides: the NaN the grader fills memory with keeps its payload through arithmetic there
    (a GPU returns its one canonical NaN), so "computed from memory nothing wrote" tells a replay which
    elements no kernel reached. Its words are added; the GPU's numbers stay."""
    emu = next((c for c in report["cases"] if c["name"] == r.name), None)
    if emu is None or emu["kind"] == "not_run":
        return None
    clean = "where no data race between a block's threads and no out-of-bounds access was found"
    kept = [line for line in r.message.splitlines() if not line.startswith("no replayed bug reproduces")]
    if emu["passed"]:
        r.message = "\n".join(kept) + (f"\nthe same case passes on the CPU emulator (seed {seed}), {clean}; "
                                       "`--sanitize` (compute-sanitizer) checks the GPU's own run.")
        return None
    said = [line for line in emu["message"].splitlines()
            if line.startswith(("likely cause:", "observed", "first divergence"))]
    if not said and emu.get("divergence"):
        said = [f"observed: {emu['divergence']}"]
    said = [line for line in said if line.split(": ", 1)[-1][:120] not in r.message]   # only what is new
    if emu.get("cause") or emu.get("divergence"):
        r.cause = emu.get("cause")
        r.divergence = emu.get("divergence")
    head = f"\nthe same case fails on the CPU emulator too (seed {seed}), {clean}"
    if said:
        head += ("; there the NaN the grader fills memory with keeps its payload and every access is "
                 "traced, and it says:\n" + "\n".join("  " + line for line in said))
    else:
        head += "." + (" The first divergence above says where the numbers part." if "first divergence" in r.message else "")
    r.message = "\n".join(kept) + head
    return None


def add_divergence(ordered: list[CaseResult], ev: dict | None) -> None:
    """The child's first divergence (engine/diverge.py), an observation of the first failing case: the
    place, with its line, whether or not a replay states the cause (a cause in words says what the
    code computes, not where)."""
    first = next((r for r in ordered if not r.passed and r.kind != "not_run"), None)
    if ev is None or first is None or first.name != ev["case"]:
        return
    where = f" (on the smallest failing shape, {ev['shape']})" if ev.get("shape") else ""
    text = ev["text"]
    first.observations = list(first.observations or []) + [text]
    first.divergence = text
    first.message = first.message.rstrip("\n") + f"\nobserved{where}: {text}"


def cpu_replay(ex: Exercise, path: Path, seed: int, crashed: CaseResult, shape: dict | None) -> str:
    """A case that crashed the GPU or ran past its limit there (ranks gone silent included), run again at
    once on the CPU emulator with the same inputs: a fault's report names the line, the array, the index
    and the thread, a hang's the waiting threads or ranks. Without a host C++ compiler, says how to."""
    from ..runtimes.cpu.build import find_compiler
    if find_compiler() is None:
        return ("\nNo C++ compiler here, so the emulator cannot replay it; on a machine with one, "
                f"`grader check {ex.id} --backend cpu --seed {seed}` runs the same case and names what it finds there, "
                "with its line (a fault's array and index, a hang's waiting threads or ranks).")
    try:
        # Shrunk and traced as the CPU's check does (blind batch 44's 05: a crash on the GPU, wrong numbers
        # there, whose first divergence names the line only when traced).
        report = run_check(ex, path, "cpu", seed, cases=None if shape else [crashed.name], shape=shape,
                           shrink=True, confirm=False)
    except GraderError as e:
        return f"\n(The CPU emulator could not replay it: {e})"
    replay = next((c for c in report["cases"] if c["name"] == crashed.name), None)
    if replay is None or replay["kind"] == "not_run":
        return ""
    if replay["passed"] and crashed.kind == "timeout":
        return (f"\nThe same case finishes and passes on the CPU emulator (seed {seed}), which names a deadlock "
                "with its line: the kernel may only be slow on the GPU (--timeout raises the limit), or wait on "
                "something only the GPU's timing decides.")
    if replay["passed"]:
        return ("\nThe same case passes on the CPU emulator (seed " + str(seed) + "), which checks every access: "
                "the fault may depend on timing (a race), or on memory only the GPU has.")
    lines = "\n".join("  " + line for line in replay["message"].splitlines())
    return f"\nThe same case on the CPU emulator (seed {seed}):\n{lines}"
