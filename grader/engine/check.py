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
from .runner import CaseResult, select_cases

DEFAULT_CASE_TIMEOUT = {"gpu": 60.0, "cpu": 120.0}
STARTUP_TIMEOUT = 120.0   # importing CuPy and compiling the first kernel can be slow


def new_seed() -> int:
    return secrets.randbelow(2**31)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def plugin_args(ex: Exercise, path: Path, backend: str, seed: int, cases: list[str] | None = None,
                shape: dict | None = None, shrink: bool = True, plot_dir: str | None = None) -> list[str]:
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
    return args


def child_command(plugin: list[str], tmp: Path) -> list[str]:
    """`python -m pytest` with the plugin, isolated from any pytest configuration around it (an empty
    ini file in a private folder is the config and the root), writing no cache anywhere."""
    ini = tmp / "pytest.ini"
    ini.write_text("[pytest]\n")
    return [sys.executable, "-m", "pytest", *plugin, "-q", "--no-header", "-p", "no:cacheprovider",
            "-c", str(ini), "--rootdir", str(tmp), "-W", "ignore::pytest.PytestAssertRewriteWarning"]


def child_env() -> dict:
    """The child finds the course even when it runs from elsewhere."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        from ..paths import course_root
        env.setdefault("GRADER_ROOT", str(course_root()))
    except GraderError:
        pass
    return env


def run_check(ex: Exercise, path: Path, backend: str, seed: int, case_timeout: float | None = None,
              cases: list[str] | None = None, shape: dict | None = None, shrink: bool = True,
              plot_dir: str | None = None) -> dict:
    """Run every case of `ex` on the file at `path`; returns the JSON report of `grader check --json`."""
    all_cases = select_cases(ex, cases, shape)       # a bad --case is a usage error, before any child
    case_timeout = case_timeout or DEFAULT_CASE_TIMEOUT.get(backend, 120.0)
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        events = Path(tmp) / "events.jsonl"
        events.touch()
        plugin = plugin_args(ex, path, backend, seed, cases, shape, shrink, plot_dir)
        log = open(Path(tmp) / "worker.log", "w+")
        proc = subprocess.Popen(child_command(plugin + ["--events", str(events)], Path(tmp)),
                                stdout=log, stderr=subprocess.STDOUT, env=child_env(),
                                start_new_session=True)
        results: dict[str, CaseResult] = {}
        fatal = None
        resources: dict = {}
        running, started_at = None, time.monotonic()
        seen = 0
        while True:
            lines = events.read_text().splitlines()
            for line in lines[seen:]:
                ev = json.loads(line)
                if ev["event"] == "start":
                    running, started_at = ev["case"], time.monotonic()
                elif ev["event"] == "result":
                    r = ev["result"]
                    results[r["name"]] = CaseResult(**r)
                    running, started_at = None, time.monotonic()
                elif ev["event"] == "resources":
                    resources.update(ev["resources"])
                elif ev["event"] == "fatal":
                    fatal = ev["message"]
            seen = len(lines)
            if proc.poll() is not None:
                break
            limit = case_timeout if running else STARTUP_TIMEOUT
            if time.monotonic() - started_at > limit:
                _kill(proc)
                if running:
                    results[running] = CaseResult(
                        running, False, kind="timeout",
                        message=(f"the case did not finish within {limit:.0f} s and was stopped. "
                                 "Look for a loop that never ends (a bound that never grows, a "
                                 "while on a value no thread updates) or a __syncthreads() that "
                                 "some threads never reach."))
                else:
                    fatal = f"the grader's worker did not start within {limit:.0f} s."
                break
            time.sleep(0.02)
        log.seek(0)
        worker_log = log.read()
        log.close()
    if running and running not in results and fatal is None:
        results[running] = CaseResult(
            running, False, kind="crash",
            message=(f"the process running this case died (exit code {proc.returncode}): the kernel "
                     "crashed it, for instance with an out-of-bounds access. The cases after it were "
                     "not run.\n" + worker_log.strip()[-1500:]))
    if fatal is None and not results and proc.returncode not in (0, 1):
        fatal = f"the grader's worker failed (exit code {proc.returncode}):\n{worker_log.strip()[-3000:]}"
    ordered = []
    for c in all_cases:
        r = results.get(c.name) or CaseResult(c.name, False, params=dict(c.params), kind="not_run",
                                              message="not run")
        if not r.params:
            r.params = dict(c.params)
        ordered.append(r)
    return {
        "id": ex.id, "file": str(path), "backend": backend, "seed": seed,
        "passed": fatal is None and all(r.passed for r in ordered),
        "error": fatal,
        "cases": [r.to_json() for r in ordered],
        "resources": resources,
    }
