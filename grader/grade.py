"""`grader grade`: grade a whole class's submissions of one exercise, for instructors.

    grader grade SUBMISSIONS --exercise 02 [--backend B] [--jobs N] [--out DIR] [--timeout S] [--seed S]

A submission is a file per student (`SUBMISSIONS/alice.py`) or a course folder per student
(`SUBMISSIONS/bob/exercises/02_flash_forward.py`, or `SUBMISSIONS/bob/02_flash_forward.py`); the
student is the file's stem or the folder's name. Each one is checked by its own child process,
`python -m grader check ID --file NAME --json --backend B --seed S`, in a scratch folder of its own
(a copy of the file under its own name, the child's cwd and TMPDIR, removed afterwards) and under the
limits of grader/limits.py (memory, CPU time, processes, output), with one seed for the whole class
(every student gets the same inputs: --seed, else derived from the exercise id) and a wall-clock
limit per submission on top of check's own limit per case: a submission that hangs, crashes the
checker, does not import or runs into a limit costs its own row only. What a child says names the
student's file by its own name, never the scratch folder.

The reports go to OUT (default: `SUBMISSIONS-grade-ID` beside the submissions folder, never inside
it): report.csv (a row per student), report.json (per student: the verdict of every case, the first
failing case, its full first cause and its message, the file's sha256, the grader's version),
summary.md (the pass rate per case, the common causes, who failed with their first cause in full,
and the groups of identical submissions: the same program once whitespace and comments, Python's and
the kernels', are stripped) and two figures, pass_rate_per_case.png and common_causes.png.
OUT/results/ keeps each student's result keyed by the submitted file's sha256, the grader (its
version and a digest of the files that decide a verdict), the exercise, the backend, the seed, the
time limits and the limits: a re-run re-grades only what changed.

Runner, check_command, interpret and the limits are shared with the autograders (grader/autograder/).
Nothing is written into the submissions folder or the course; every scratch folder lives in one
private temporary folder, removed at the end.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path, PurePath, PurePosixPath

from .errors import GraderError
from .limits import WATCH_INTERVAL, Limits, hit_in, size_text

RESULTS = "results"             # OUT/results/STUDENT.json: what a re-run reuses
FORMAT = 2                      # bump when a stored result's layout changes: everything is re-graded
STARTUP_ALLOWANCE = 120.0       # per submission: starting the children, compiling, on a busy machine
PER_CASE_SLACK = 5.0            # per case, on top of its limit (check's SIGINT grace, the verdict)
FIGURES = ("pass_rate_per_case.png", "common_causes.png")
SHOWN = 15                      # causes listed in the summary (all of them in report.json)


# ---- finding the submissions -------------------------------------------------------------------

@dataclass
class Submission:
    student: str
    entry: str                  # the file or folder as found in SUBMISSIONS ("alice.py", "bob/")
    file: Path | None           # the file to check; None when there is none (skipped)
    problem: str = ""           # why it is skipped


def find_submissions(folder: Path, ex) -> tuple[list[Submission], list[str]]:
    """The submissions in `folder` (sorted by student), and the entries ignored (not .py, hidden)."""
    found, ignored = [], []
    for entry in sorted(folder.iterdir(), key=lambda p: (p.name.lower(), p.name)):
        if entry.name.startswith((".", "_")):
            continue                          # .DS_Store, .git, __pycache__
        if entry.is_dir():
            candidates = [entry / "exercises" / f"{ex.id}.py", entry / f"{ex.id}.py"]
            file = next((c for c in candidates if c.is_file()), None)
            problem = "" if file else (f"skipped: {entry.name}/ has no exercises/{ex.id}.py or "
                                       f"{ex.id}.py")
            found.append(Submission(entry.name, entry.name + "/", file, problem))
        elif entry.is_file() and entry.suffix == ".py":
            found.append(Submission(entry.stem, entry.name, entry))
        else:
            ignored.append(entry.name)
    names = [s.student for s in found]
    for s in found:                           # alice.py and alice/ both there: keep both, by entry
        if names.count(s.student) > 1:
            s.student = s.entry.rstrip("/")
    return found, ignored


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def grader_digest(ex) -> str:
    """A digest of the grader's files that decide a verdict of `ex` (the engine, the plugin, the
    runtimes, the attention kit, the task's checks): a checkout whose checks changed without a new
    version number still re-grades; an edit of a notebook or a benchmark does not."""
    root = Path(__file__).resolve().parent
    files = [root / "plugin.py", root / "spec.py", root / "errors.py", root / "tasks" / "__init__.py",
             root / "tasks" / ex.name / "checks.py"]
    for folder in ("engine", "runtimes", "attention"):
        files += (root / folder).rglob("*")
    h = hashlib.sha256()
    for p in sorted(set(files)):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".so", ".o"):
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# ---- running one child -------------------------------------------------------------------------

def assignment_seed(name: str) -> int:
    """The seed of an assignment when none is given: derived from its name (an exercise id, or the
    modules an autograder grades), so that every run of it, and a student's replay, gets the same
    inputs."""
    digest = hashlib.sha256(f"flash-attention-course:{name}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 2**31


def submission_limit(cases: int, case_timeout: float, shrink: bool = False) -> float:
    """Seconds one submission's whole check may take: the start-up allowance and, per case, its own
    limit and the slack around it; with `shrink`, the search for a smaller failing shape too."""
    from .engine.check import SHRINK_ALLOWANCE
    return (STARTUP_ALLOWANCE + cases * (case_timeout + PER_CASE_SLACK)
            + (SHRINK_ALLOWANCE + case_timeout + PER_CASE_SLACK if shrink else 0.0))


def check_command(ex_id: str, file: PurePath, backend: str, seed: int, case_timeout: float,
                  shrink: bool = False) -> list[str]:
    """The child that checks one submission: `grader check --json` on its file, with the class's seed."""
    cmd = [sys.executable, "-m", "grader", "check", ex_id, "--file", str(file), "--json",
           "--backend", backend, "--seed", str(seed), "--timeout", f"{case_timeout:g}"]
    return cmd if shrink else [*cmd, "--no-shrink"]


def child_env(tmp: Path) -> dict:
    """The children's environment: the course found wherever they run, and every file they write
    (temporary files, progress) inside the private folder `tmp`, none in the submissions or the course."""
    from . import paths
    return dict(os.environ, GRADER_ROOT=str(paths.course_root()), TMPDIR=str(tmp), TEMP=str(tmp),
                TMP=str(tmp), GRADER_STATE_DIR=str(tmp / "state"), PYTHONDONTWRITEBYTECODE="1",
                PYTHONUNBUFFERED="1")


def _table() -> list[tuple[int, int, int]]:
    """(pid, parent pid, process group) of every process: from /proc, else from `ps` (macOS)."""
    rows = []
    try:
        names = os.listdir("/proc")
    except OSError:
        names = []
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                rows.append((int(name), int(fields[1]), int(fields[2])))
            except (OSError, ValueError, IndexError):
                continue
    if rows:
        return rows
    try:
        out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,pgid="], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [(int(a), int(b), int(c)) for a, b, c in (line.split() for line in out.splitlines())
            if a.isdigit() and b.isdigit() and c.isdigit()]


def _below(pid: int, groups: set[int]) -> set[int]:
    """Every process below `pid`, and every process of the process groups in `groups` (a process
    whose parent died is no longer below, but keeps its group); `groups` gains the groups of the
    processes below."""
    table = _table()
    children: dict[int, list[int]] = {}
    for child, parent, _ in table:
        children.setdefault(parent, []).append(child)
    found, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in found:
                found.add(c)
                todo.append(c)
    groups.update(g for p, _, g in table if p in found)
    groups.difference_update({0, 1, os.getpgrp()})        # never the grading process's own group
    found.update(p for p, _, g in table if g in groups and p != pid)
    found.discard(os.getpid())
    return found


def kill_tree(proc: subprocess.Popen, groups: set[int] | None = None) -> None:
    """SIGKILL the child, its process group, and everything below it, including the check's own
    worker, which runs in a session of its own (it would outlive its parent otherwise), and whatever
    is left in the process groups seen below it. Again while a process forked in between remains."""
    groups = groups if groups is not None else set()
    groups.add(proc.pid)
    for _ in range(5):
        below = _below(proc.pid, groups)
        for g in groups:
            try:
                os.killpg(g, signal.SIGKILL)
            except OSError:
                pass
        for pid in [proc.pid, *below]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not below:
            return
        time.sleep(0.05)


@dataclass
class ChildResult:
    rc: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    stopped: tuple[str, str] | None = None   # (limit, what happened) when a limit stopped the check
    limits: Limits | None = None


class _Capped:
    """Reads a child's pipe in a thread, keeping at most `cap` bytes; `over` once it sent more."""

    def __init__(self, pipe, cap: int):
        self.pipe, self.cap = pipe, cap
        self.chunks: list[bytes] = []
        self.size = 0
        self.over = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                data = self.pipe.read1(65536) if hasattr(self.pipe, "read1") else self.pipe.read(65536)
                if not data:
                    return
                if self.size + len(data) > self.cap:
                    self.over = True
                    data = data[:max(self.cap - self.size, 0)]
                if data:
                    self.chunks.append(data)
                    self.size += len(data)
                # past the cap: keep reading (and dropping) so that the child never blocks on a full pipe
        except (OSError, ValueError):
            return

    def text(self, wait: float) -> str:
        self.thread.join(wait)
        return b"".join(self.chunks).decode(errors="replace")


def scrub(text: str, scratch: Path) -> str:
    """`text` with the scratch folder taken out of every path: the student's own file name stays."""
    for root in {str(scratch), str(scratch.resolve())}:
        text = text.replace(root + os.sep + "tmp" + os.sep, "").replace(root + os.sep, "").replace(root, ".")
    return text


def _scratch_name(name: str) -> PurePosixPath:
    """`name` (how the student knows the file: "alice.py", "exercises/02_flash_forward.py") as a
    path inside the scratch folder: relative, without '..'."""
    parts = [p for p in PurePosixPath(name.replace("\\", "/")).parts if p not in ("", ".", "..", "/")]
    return PurePosixPath(*parts) if parts else PurePosixPath("submission.py")


class Runner:
    """Checks submissions, as many at a time as the caller's threads ask; `stop()` kills every check
    still running. Each check runs in a scratch folder of its own under `root` (its cwd and TMPDIR,
    removed afterwards), on a copy of the submission named as the student knows it, under the limits
    of grader/limits.py, and every path of the scratch folder is taken out of what it says."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.lock = threading.Lock()
        self.running: set[subprocess.Popen] = set()
        self.stopped = False

    def check(self, ex_id: str, file: Path, name: str, backend: str, seed: int, case_timeout: float,
              limit: float, shrink: bool = False) -> ChildResult:
        """`grader check ex_id --json` of `file`, known to the student as `name`, within `limit` s."""
        limits = Limits.for_check(backend, limit)
        scratch = Path(tempfile.mkdtemp(prefix="check-", dir=self.root))
        try:
            rel = _scratch_name(name)
            try:
                (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(file, scratch / rel)
                (scratch / "tmp").mkdir()
            except OSError as e:              # read as the check's own error: a grader error, not a crash
                return ChildResult(2, "", f"grader: cannot read {name}: {e.strerror or e}\n", 0.0, False,
                                   limits=limits)
            cmd = limits.wrap(check_command(ex_id, rel, backend, seed, case_timeout, shrink))
            child = self.run(cmd, limit, scratch, child_env(scratch / "tmp"), limits)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        child.stdout, child.stderr = scrub(child.stdout, scratch), scrub(child.stderr, scratch)
        return child

    def run(self, cmd: list[str], limit: float, cwd: Path, env: dict, limits: Limits) -> ChildResult:
        start = time.monotonic()
        with self.lock:
            if self.stopped:
                return ChildResult(None, "", "stopped", 0.0, False, limits=limits)
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, cwd=cwd, env=env, start_new_session=True)
            self.running.add(proc)
        out, err = _Capped(proc.stdout, limits.output), _Capped(proc.stderr, limits.output)
        groups = {proc.pid}
        timed_out, stopped = False, None
        try:
            while proc.poll() is None:
                if time.monotonic() - start > limit:
                    timed_out = True
                    break
                if out.over or err.over:
                    stopped = ("output", f"it printed more than {size_text(limits.output)}, the limit on "
                                         "output, and was stopped")
                    break
                n = len(_below(proc.pid, groups))
                if n > limits.processes:
                    stopped = ("processes", f"it ran {n} processes at once, past the limit of "
                                            f"{limits.processes} (a fork in a loop?), and was stopped")
                    break
                try:
                    proc.wait(WATCH_INTERVAL)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            with self.lock:
                self.running.discard(proc)
            kill_tree(proc, groups)           # also what a check that ended left running
            proc.wait()
        return ChildResult(proc.returncode, out.text(30), err.text(30), time.monotonic() - start,
                           timed_out, stopped, limits)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            procs = list(self.running)
        for p in procs:
            kill_tree(p)


# ---- what a child's output means ---------------------------------------------------------------

_NUMBER = re.compile(r"(?<![A-Za-z_\d.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![A-Za-z_\d])")
_FILE = re.compile(r"(?:[\w.~-]*/)*[\w.-]+\.(?:py|cu|cuh|cpp|cc|h)(?::\d+)*")


def normalise(text: str, width: int = 110) -> str:
    """A message's first sentence with what differs between students taken out (file names, line
    numbers, values), so that the same mistake groups together."""
    text = _FILE.sub("FILE", text.strip())
    text = _NUMBER.sub("N", text)
    text = re.split(r"(?<=[.;!?])\s", text, maxsplit=1)[0].rstrip(" .;:")
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= width else text[:width - 1].rstrip() + "…"


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def _lines(message: str) -> list[str]:
    return [line.strip() for line in (message or "").splitlines() if line.strip()]


def _one_line(text: str, width: int | None = 240) -> str:
    """`text` on one line; cut at `width` with "…" (None: never cut)."""
    text = re.sub(r"\s+", " ", text or "").strip()
    return text if width is None or len(text) <= width else text[:width - 1].rstrip() + "…"


def explain_case(case: dict) -> tuple[str, str, str]:
    """(status, cause in one line, cause group) of a submission whose first failing case is `case`."""
    kind, lines = case.get("kind", "checked"), _lines(case.get("message", ""))
    first = lines[0] if lines else ""
    if kind == "import_error":
        if first.endswith("does not import:") and len(lines) > 1:
            cause = lines[-1]                  # the exception, e.g. "SyntaxError: '(' was never closed"
            m = re.match(r"([A-Za-z_][\w.]*)(?::|$)", cause)
            group = m.group(1) if m else normalise(cause)
        else:
            cause, group = first, normalise(first)
        return "does_not_import", cause, f"does not import: {group}"
    if kind == "compile_error":
        err = next((line for line in lines[1:] if re.search(r"\berror\b", line)), first)
        text = re.split(r"\berror\b\s*(?:#[\w-]+)?:?\s*", err, maxsplit=1)[-1]
        return "does_not_compile", err, f"does not compile: {normalise(text)}"
    if kind == "timeout":
        return "timed_out", first, "timed out"
    if kind == "crash":
        m = re.search(r"exit code (-\d+)", first)
        sig = f" ({_signal_name(-int(m.group(1)))})" if m else ""
        return "crashed", first, f"crashed{sig}"
    if kind == "not_implemented":
        return "failed", first, "not implemented"
    if kind == "grader_error":
        return "grader_error", first, "grader error"
    likely = next((line for line in lines if line.lower().startswith("likely cause:")), None)
    cause = likely.split(":", 1)[1].strip() if likely else first
    seen = next((line for line in lines if line.lower().startswith("observed")), None)
    if not likely and seen:                    # no cause stated: what the outputs show says most
        cause = f"{first.rstrip('.')}; {seen}"
    label = "wrong result" if kind == "checked" else "error"
    if case.get("cause"):
        # The stated cause's id (engine/verdict.py) groups the same mistake across students exactly.
        return "failed", cause, f"{label}: {case['cause']}"
    return "failed", cause, f"{label}: {normalise(cause)}"


def interpret(child: ChildResult, limit: float) -> dict:
    """The row of a submission from its child's outcome (without student, file and timing). `cause`
    is the first cause in full: what a replay reproduced, else the first thing found wrong."""
    row = _interpret(child, limit)
    limits = child.limits or Limits.for_check("cpu", limit)
    for case in (row.get("report") or {}).get("cases") or ():
        hint = None if case.get("passed") else hit_in(case.get("message"), limits)
        if hint:                               # each case that ran into a limit says which
            case["limit"] = hint
    hint = None if row["passed"] or row["status"] == "over_limit" else \
        hit_in(" ".join(str(row.get(k) or "") for k in ("cause", "message", "cause_group")), limits)
    if hint:                                   # a MemoryError, a write refused: say which limit
        row["cause"] = f"{(row['cause'] or '').rstrip('.')} ({hint})"
        row["limit"] = hint
    return row


def _interpret(child: ChildResult, limit: float) -> dict:
    row = {"passed": False, "cases_passed": 0, "cases": 0, "first_failing_case": None, "cause": None,
           "cause_group": None, "message": None, "case_verdicts": [], "report": None}
    if child.stopped:
        what, text = child.stopped
        return dict(row, status="over_limit", verdict=f"stopped: {text}", cause=text,
                    cause_group=f"over the limit on {what}")
    if child.timed_out:
        return dict(row, status="timed_out", verdict=f"timed out after {limit:g} s",
                    cause=f"the check did not finish within {limit:g} s and was stopped",
                    cause_group="timed out (the whole check)")
    report = None
    text = child.stdout.strip()
    if text:
        try:
            report = json.loads(text)
        except ValueError:
            start = text.rfind("\n{")
            try:
                report = json.loads(text[start + 1:]) if start >= 0 else None
            except ValueError:
                report = None
    if not isinstance(report, dict) or "cases" not in report:
        if child.rc is not None and -child.rc == getattr(signal, "SIGXCPU", None):
            text = (f"it ran past the CPU-time limit, {child.limits.cpu if child.limits else int(limit)} s "
                    "per process, and was stopped")
            return dict(row, status="over_limit", verdict=f"stopped: {text}", cause=text,
                        cause_group="over the limit on CPU time")
        if child.rc is not None and child.rc < 0:
            sig = _signal_name(-child.rc)
            return dict(row, status="crashed", verdict=f"crashed ({sig})",
                        cause=f"the checker process died of {sig}", cause_group=f"crashed ({sig})")
        tail = _lines(child.stderr) or _lines(child.stdout) or [f"exit code {child.rc}, no output"]
        said = next((line for line in tail if line.startswith("grader: ")), None)
        if child.rc == 2 and said:                # check's own usage or environment error
            msg = said[len("grader: "):]
            return dict(row, status="grader_error", verdict=f"grader error: {_one_line(msg, 160)}",
                        cause=_one_line(msg, None), cause_group="grader error")
        last = " | ".join(tail[-3:])
        return dict(row, status="crashed", verdict=f"crashed: {_one_line(last, 200)}",
                    cause=_one_line(last, None),
                    cause_group="crashed (no report)")
    cases = report["cases"]
    row.update(report=report, cases=len(cases), cases_passed=sum(bool(c["passed"]) for c in cases),
               case_verdicts=[{"name": c["name"], "passed": bool(c["passed"]), "kind": c["kind"],
                               "message": (_lines(c.get("message", "")) or [""])[0]} for c in cases])
    if report.get("error"):
        msg = (_lines(report["error"]) or ["?"])[0]
        return dict(row, status="grader_error", verdict=f"grader error: {_one_line(msg, 160)}",
                    cause=_one_line(msg, None), cause_group="grader error", message=report["error"])
    if report.get("passed"):
        return dict(row, passed=True, status="passed", verdict="passed")
    if cases and all(c["kind"] == "not_implemented" for c in cases):
        first = (_lines(cases[0]["message"]) or ["not implemented"])[0]
        return dict(row, status="not_implemented", verdict="not implemented",
                    cause=_one_line(first.split(":")[0]), cause_group="not implemented",
                    message=cases[0]["message"])
    first = next((c for c in cases if not c["passed"] and c["kind"] != "not_run"), None)
    if first is None:
        return dict(row, status="grader_error", verdict="grader error: no case ran",
                    cause="no case ran", cause_group="grader error")
    status, cause, group = explain_case(first)
    name = first["name"]
    n = f"{row['cases_passed']}/{row['cases']} cases pass"
    if status == "does_not_import":
        verdict = f"does not import: {cause}"
    elif status == "does_not_compile":
        verdict = f"does not compile: {cause}"
    elif status == "timed_out":
        m = re.search(r"within (\S+) s", cause)
        verdict = f"timed out after {m.group(1)} s (case {name})" if m else f"timed out (case {name})"
    elif status == "crashed":
        verdict = f"{group} in case {name}"
    elif status == "grader_error":
        verdict = f"grader error in case {name}"
    else:
        verdict = f"failed at case {name} ({n})"
    return dict(row, status=status, verdict=_one_line(verdict, 200), first_failing_case=name,
                cause=_one_line(cause, None), cause_group=group, message=first.get("message"))


# ---- the class summary -------------------------------------------------------------------------

def example_of(group: str, cause: str | None, width: int | None = None) -> str:
    """A group's label with one student's own words in place of the normalised ones (which read
    "ln(N)" for "ln(2)"): the group's prefix ("wrong result: ") and the cause's first sentence."""
    prefix = next((p for p in ("wrong result: ", "error: ") if group.startswith(p)), None)
    if prefix is None or not cause:
        return group
    text = re.split(r"(?<=[.;!?])\s", re.sub(r"\s+", " ", cause.strip()), maxsplit=1)[0].rstrip(" .;:")
    return _one_line(prefix + text, width)


_C_COMMENT = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/', re.S)


def _strip_c_comments(text: str) -> str:
    """C and C++ comments out of a kernel's source (string literals in it kept whole)."""
    return _C_COMMENT.sub(lambda m: m.group(0) if m.group(0).startswith('"') else " ", text)


def fingerprint(source: str) -> str:
    """What two submissions share when they are the same program: the source without Python comments,
    without C/C++ comments inside its strings (the kernels), and without any whitespace."""
    import tokenize
    parts = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                continue
            parts.append(_strip_c_comments(tok.string) if tok.type == tokenize.STRING else tok.string)
        text = " ".join(parts)
    except (tokenize.TokenError, SyntaxError, IndentationError):   # not Python: comments by line
        text = _strip_c_comments(re.sub(r"(?m)^\s*#.*$", "", source))
    return hashlib.sha256(re.sub(r"\s+", "", text).encode()).hexdigest()


def identical_groups(files: dict[str, Path]) -> list[list[str]]:
    """The students whose files are the same program (`fingerprint`), in groups of two or more."""
    by: dict[str, list[str]] = {}
    for student, path in files.items():
        try:
            by.setdefault(fingerprint(path.read_text(errors="replace")), []).append(student)
        except OSError:
            continue
    return sorted((sorted(g) for g in by.values() if len(g) > 1), key=lambda g: (-len(g), g))


def class_summary(rows: list[dict], case_names: list[str], identical: list[list[str]] = ()) -> dict:
    graded = [r for r in rows if r["status"] != "skipped"]
    per_case = {}
    for name in case_names:
        ok = sum(any(v["name"] == name and v["passed"] for v in r["case_verdicts"]) for r in graded)
        per_case[name] = {"passed": ok, "of": len(graded)}
    causes: dict[str, list[str]] = {}
    examples: dict[str, str] = {}         # a group's cause as its first student was told it
    for r in rows:
        if not r["passed"]:
            group = r["cause_group"] or r["status"]
            causes.setdefault(group, []).append(r["student"])
            examples.setdefault(group, example_of(group, r.get("cause")))
    common = sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    verdicts = {r["student"]: r["verdict"] for r in rows}
    return {
        "students": len(rows), "graded": len(graded), "skipped": len(rows) - len(graded),
        "passed": sum(r["passed"] for r in rows),
        "per_case": per_case,
        "common_causes": [{"cause": c, "example": examples[c], "count": len(who), "students": who}
                          for c, who in common],
        "failed": [{"student": r["student"], "verdict": r["verdict"], "cause": r.get("cause")}
                   for r in rows if not r["passed"]],
        "identical": [{"students": g, "verdicts": sorted({verdicts.get(x) or "" for x in g})}
                      for g in identical],
        "grader_errors": [r["student"] for r in rows if r["status"] == "grader_error"],
    }


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.0f}%" if b else "-"


def summary_text(meta: dict, s: dict, markdown: bool = False) -> str:
    out = io.StringIO()
    w = out.write
    head = (f"grader grade {meta['exercise']} · {s['students']} submissions in {meta['submissions']} · "
            f"backend {meta['backend']} · seed {meta['seed']} · grader {meta['grader_version']}")
    w(f"# {head}\n\n" if markdown else f"{head}\n\n")
    w(f"Passed: {s['passed']}/{s['students']} ({_pct(s['passed'], s['students'])})")
    if s["skipped"]:
        w(f"; {s['skipped']} skipped (no file for the exercise)")
    w("\n")
    if s["grader_errors"]:
        w(f"Grader errors (not the students' fault; re-run them): {', '.join(s['grader_errors'])}\n")
    width = max((len(n) for n in s["per_case"]), default=4)
    w(f"\n{'## ' if markdown else ''}Pass rate per case (of {s['graded']} graded)\n\n")
    if markdown:
        w("| case | passed | rate |\n|---|---:|---:|\n")
    for name, c in s["per_case"].items():
        if markdown:
            w(f"| `{name}` | {c['passed']}/{c['of']} | {_pct(c['passed'], c['of'])} |\n")
        else:
            bar = "#" * round(20 * c["passed"] / c["of"]) if c["of"] else ""
            w(f"  {name:<{width}}  {c['passed']:>3}/{c['of']:<3} {_pct(c['passed'], c['of']):>4}  {bar}\n")
    w(f"\n{'## ' if markdown else ''}Most common causes of failure\n\n")
    if not s["common_causes"]:
        w("  none: every submission passes\n")
    for c in s["common_causes"][:SHOWN]:
        if markdown:
            w(f"- **{c['count']}** × {c['example']} ({', '.join(c['students'])})\n")
        else:
            w(f"  {c['count']:>3} × {c['example']}  ({', '.join(c['students'])})\n")
    if len(s["common_causes"]) > SHOWN:
        w(f"  … and {len(s['common_causes']) - SHOWN} more (report.json)\n")
    w(f"\n{'## ' if markdown else ''}Who failed ({len(s['failed'])}), with the first cause\n\n")
    sw = max((len(f["student"]) for f in s["failed"]), default=0)
    for f in s["failed"]:
        said = f["verdict"]
        if f.get("cause") and f["cause"] not in said and said not in f["cause"]:
            said += f": {f['cause']}"
        elif f.get("cause") and said in f["cause"]:
            said = f["cause"]
        w(f"- **{f['student']}**: {said}\n" if markdown else f"  {f['student']:<{sw}}  {said}\n")
    if not s["failed"]:
        w("  nobody\n")
    if s.get("identical"):
        w(f"\n{'## ' if markdown else ''}Identical submissions (the same program once whitespace and "
          "comments, Python's and the kernels', are stripped)\n\n")
        for g in s["identical"]:
            who = ", ".join(f"**{x}**" if markdown else x for x in g["students"])
            w(f"{'-' if markdown else ' '} {who} ({'; '.join(g['verdicts'])})\n")
    return out.getvalue()


def _wrap(text: str, width: int = 50) -> str:
    import textwrap
    return "\n".join(textwrap.wrap(text, width)[:3])


def draw_figures(out: Path, meta: dict, s: dict) -> None:
    """pass_rate_per_case.png and common_causes.png (matplotlib's Agg canvas: no display needed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = list(s["per_case"])
    rates = [100 * c["passed"] / c["of"] if c["of"] else 0 for c in s["per_case"].values()]
    fig = Figure(figsize=(8, 1.2 + 0.32 * max(len(names), 1)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.barh(range(len(names)), rates, color="#4c72b0")
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"submissions passing the case, % (of {s['graded']} graded)")
    ax.set_title(f"{meta['exercise']}: pass rate per case ({s['passed']}/{s['students']} pass all)",
                 fontsize=10)
    for i, (r, c) in enumerate(zip(rates, s["per_case"].values())):
        ax.text(min(r + 1, 90), i, f"{c['passed']}/{c['of']}", va="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(out / FIGURES[0], dpi=110)

    causes = s["common_causes"][:SHOWN]
    fig = Figure(figsize=(9, 1.4 + 0.55 * max(len(causes), 1)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if causes:
        ax.barh(range(len(causes)), [c["count"] for c in causes], color="#c44e52")
        ax.set_yticks(range(len(causes)), [_wrap(c["example"]) for c in causes], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("submissions")
        ax.xaxis.get_major_locator().set_params(integer=True)
    else:
        ax.text(0.5, 0.5, "every submission passes", ha="center", va="center")
        ax.set_axis_off()
    ax.set_title(f"{meta['exercise']}: most common causes of failure", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / FIGURES[1], dpi=110, bbox_inches="tight")      # long labels stay in the picture


# ---- the command -------------------------------------------------------------------------------

CSV_COLUMNS = ("student", "passed", "cases_passed", "cases", "first_failing_case", "cause", "verdict",
               "seconds", "status", "cause_group", "sha256")
ROW_KEYS = ("student", "submission", "sha256", "status", "passed", "verdict", "cases_passed", "cases",
            "first_failing_case", "cause", "cause_group", "message", "case_verdicts", "seconds",
            "graded_at")


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(text)
    os.replace(tmp, path)


def _default_out(folder: Path, ex) -> Path:
    return folder.parent / f"{folder.name}-grade-{ex.id}"


def grade(args) -> int:
    from . import catalogue
    from .cli import version
    from .engine.check import DEFAULT_CASE_TIMEOUT
    from .engine.runner import select_cases
    from .runtimes import resolve_backend

    try:
        ex = catalogue.resolve(args.exercise)
    except KeyError as e:
        raise GraderError(e.args[0]) from None
    folder = Path(args.submissions).expanduser()
    if not folder.is_dir():
        raise GraderError(f"no such folder of submissions: {folder}")
    folder = folder.resolve()
    out = Path(args.out).expanduser().resolve() if args.out else _default_out(folder, ex)
    if out == folder or out.is_relative_to(folder):
        raise GraderError(f"--out {out} lies inside the submissions folder, where it would be taken "
                          "for a submission: choose a folder outside it.")
    if out.exists() and not out.is_dir():
        raise GraderError(f"--out {out} exists and is not a folder.")
    if args.jobs is not None and args.jobs < 1:
        raise GraderError("--jobs must be 1 or more.")
    for opt in ("timeout", "limit"):
        if getattr(args, opt) is not None and getattr(args, opt) <= 0:
            raise GraderError(f"--{opt} must be a positive number of seconds.")
    backend = resolve_backend(args.backend)
    jobs = args.jobs or max(1, min(2, os.cpu_count() or 1))
    case_names = [c.name for c in select_cases(ex)]
    case_timeout = args.timeout or DEFAULT_CASE_TIMEOUT.get(backend, 15.0)
    limit = args.limit or submission_limit(len(case_names), case_timeout)
    seed = args.seed if args.seed is not None else assignment_seed(ex.id)
    limits = Limits.for_check(backend, limit)
    meta = {"exercise": ex.id, "submissions": str(folder), "backend": backend, "seed": seed,
            "case_timeout": case_timeout, "submission_limit": limit, "limits": asdict(limits),
            "grader_version": version(), "grader_digest": grader_digest(ex), "format": FORMAT}
    key_base = {k: meta[k] for k in ("exercise", "backend", "seed", "case_timeout", "submission_limit",
                                     "limits", "grader_version", "grader_digest", "format")}

    subs, ignored = find_submissions(folder, ex)
    if not subs:
        raise GraderError(f"no submissions in {folder}: expected one file per student (alice.py) or one "
                          f"course folder per student (bob/exercises/{ex.id}.py)"
                          + (f"; ignored {', '.join(ignored)}" if ignored else "") + ".")
    out.mkdir(parents=True, exist_ok=True)
    results = out / RESULTS
    results.mkdir(exist_ok=True)
    print(f"grader grade {ex.id} · {len(subs)} submission{'s' if len(subs) != 1 else ''} in {folder} · "
          f"backend {backend} · seed {seed}{'' if args.seed is not None else ' (from the exercise id)'} · "
          f"{jobs} at a time · {case_timeout:g} s per case, {limit:g} s per submission", flush=True)
    print(f"  each submission runs in a scratch folder of its own, under these limits: {limits.describe()}",
          flush=True)
    for name in ignored:
        print(f"  ignored {name}: not a .py file or a folder", flush=True)

    rows: dict[str, dict] = {}
    todo: list[tuple[Submission, str, dict]] = []
    n, done = len(subs), 0
    width = max((len(s.student) for s in subs), default=0)

    def progress(student: str, text: str) -> None:
        nonlocal done
        done += 1
        print(f"[{done:>{len(str(n))}}/{n}] {student:<{width}}  {text}", flush=True)

    for s in subs:
        if s.file is None:
            rows[s.student] = {"student": s.student, "submission": s.entry, "sha256": None,
                               "status": "skipped", "passed": False, "verdict": s.problem,
                               "cases_passed": 0, "cases": 0, "first_failing_case": None,
                               "cause": s.problem, "cause_group": "no file for the exercise",
                               "message": None, "case_verdicts": [], "seconds": 0.0, "graded_at": None}
            progress(s.student, s.problem)
            continue
        digest = sha256_of(s.file)
        key = dict(key_base, sha256=digest)
        stored = results / f"{s.student}.json"
        try:
            old = json.loads(stored.read_text())
        except (OSError, ValueError):
            old = None
        if old and old.get("key") == key:
            row = dict(old["row"], student=s.student, submission=str(s.file.relative_to(folder)))
            rows[s.student] = row
            progress(s.student, f"unchanged, not re-graded: {row['verdict']}")
        else:
            todo.append((s, digest, key))

    tmp = Path(tempfile.mkdtemp(prefix="grader-grade-"))
    runner = Runner(tmp)

    def one(s: Submission) -> ChildResult:
        return runner.check(ex.id, s.file, s.file.name, backend, seed, case_timeout, limit)

    def on_term(signum, frame):               # `kill` as Ctrl-C: stop the children, clean up
        raise KeyboardInterrupt
    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, on_term)
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(one, s): (s, digest, key) for s, digest, key in todo}
            try:
                for fut in as_completed(futures):
                    s, digest, key = futures[fut]
                    child = fut.result()
                    row = interpret(child, limit)
                    report = row.pop("report")
                    row.update(student=s.student, submission=str(s.file.relative_to(folder)),
                               sha256=digest, seconds=round(child.seconds, 2),
                               graded_at=time.strftime("%Y-%m-%dT%H:%M:%S"))
                    row = {k: row.get(k) for k in ROW_KEYS}
                    rows[s.student] = row
                    _write(results / f"{s.student}.json",
                           json.dumps({"key": key, "row": row, "check": report,
                                       "stderr": child.stderr[-4000:]}, indent=1))
                    progress(s.student, f"{row['verdict']}  ({child.seconds:.1f} s)")
            except BaseException:
                runner.stop()
                for f in futures:
                    f.cancel()
                raise
    except KeyboardInterrupt:
        print(f"\ngrader grade: interrupted. The results so far are kept in {results}: a re-run "
              "grades only the rest.", file=sys.stderr, flush=True)
        raise
    finally:
        runner.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)

    present = {f"{s.student}.json" for s in subs}
    for p in results.glob("*.json"):          # students no longer in the folder leave the report
        if p.name not in present:
            p.unlink()

    ordered = [rows[s.student] for s in subs]
    summary = class_summary(ordered, case_names, identical_groups({s.student: s.file for s in subs if s.file}))
    meta["graded_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    report = dict(meta, students={r["student"]: {k: v for k, v in r.items() if k != "student"}
                                  for r in ordered}, summary=summary, ignored=ignored)
    _write(out / "report.json", json.dumps(report, indent=1))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in ordered:
        writer.writerow([("yes" if r["passed"] else "no") if k == "passed" else
                         ("" if r.get(k) is None else r[k]) for k in CSV_COLUMNS])
    _write(out / "report.csv", buf.getvalue())
    _write(out / "summary.md", summary_text(meta, summary, markdown=True))
    try:
        draw_figures(out, meta, summary)
        figures = ", ".join(FIGURES)
    except ImportError:
        figures = "no figures (matplotlib is missing: pip install matplotlib)"
    print()
    print(summary_text(meta, summary), end="")
    print(f"\nReports in {out}: report.csv, report.json, summary.md, {figures}")
    return 0
