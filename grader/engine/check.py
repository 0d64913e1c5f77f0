"""The parent side of a check: start the worker, watch it with a time limit, collect the verdicts.

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
from .runner import CaseResult

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


def run_check(ex: Exercise, path: Path, backend: str, seed: int, case_timeout: float | None = None,
              cases: list[str] | None = None, shape: dict | None = None, shrink: bool = True,
              plot_dir: str | None = None) -> dict:
    """Run every case of `ex` on the file at `path`; returns DESIGN.md's JSON report (plus extras)."""
    from ..tasks import load_task
    from ..tasks.common import Case
    task = load_task(ex)
    if shape:
        base = task.CASES[0].params if task.CASES else {}
        all_cases = [Case("custom", dict(base, **shape))]
    else:
        all_cases = [c for c in task.CASES if not cases or c.name in cases]
        unknown = set(cases or ()) - {c.name for c in all_cases}
        if unknown:
            from ..runtimes.base import GraderError
            raise GraderError(f"{ex.id} has no case named {', '.join(sorted(unknown))}. Its cases: "
                              + ", ".join(c.name for c in task.CASES))
    case_timeout = case_timeout or DEFAULT_CASE_TIMEOUT.get(backend, 120.0)
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        events = Path(tmp) / "events.jsonl"
        events.touch()
        cfg = Path(tmp) / "config.json"
        cfg.write_text(json.dumps({"exercise": ex.id, "file": str(path), "backend": backend,
                                   "seed": seed, "events": str(events), "cases": cases,
                                   "shape": shape, "shrink": shrink, "plot_dir": plot_dir}))
        log = open(Path(tmp) / "worker.log", "w+")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen([sys.executable, "-m", "grader.engine.worker", str(cfg)],
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
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
