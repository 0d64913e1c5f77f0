"""The child process of a check: runs the cases through pytest and reports each as a JSON line.

Started by engine/check.py as `python -m grader.engine.worker CONFIG.json`. Events go to the file
named in the config, one JSON object a line, flushed at once, so the parent knows which case was
running if this process crashes or hangs.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

_session = None


class Session:
    def __init__(self, cfg: dict):
        from ..catalogue import resolve
        from ..tasks import load_task
        self.cfg = cfg
        self.ex = resolve(cfg["exercise"])
        self.path = Path(cfg["file"])
        self.seed = int(cfg["seed"])
        from ..tasks.common import Case
        task = load_task(self.ex)
        if cfg.get("shape"):
            base = task.CASES[0].params if task.CASES else {}
            self.cases = [Case("custom", dict(base, **cfg["shape"]))]
        else:
            wanted = cfg.get("cases")
            self.cases = [c for c in task.CASES if not wanted or c.name in wanted]
        self.shrink = cfg.get("shrink", True)
        self.plot_dir = cfg.get("plot_dir")
        self.failures_seen = 0
        self.events = open(cfg["events"], "a", buffering=1)
        self._fn = self._rt = None
        self.stop_reason = None

    def emit(self, **event):
        self.events.write(json.dumps(event) + "\n")
        self.events.flush()
        os.fsync(self.events.fileno())

    def setup(self):
        """Build the runtime and import the student's file once, on first use."""
        if self._fn is None:
            from ..runtimes import get_runtime
            from .runner import load_exercise_function
            self._rt = get_runtime(self.cfg["backend"])
            self._fn = load_exercise_function(self.ex, self.path)
        return self._fn, self._rt


def session() -> Session:
    return _session


def main(argv=None) -> int:
    global _session
    argv = sys.argv[1:] if argv is None else argv
    cfg = json.loads(Path(argv[0]).read_text())
    _session = Session(cfg)
    test_file = Path(__file__).with_name("cases_test.py")
    args = [str(test_file), "-q", "--no-header", "-p", "no:cacheprovider", "-o", "addopts=",
            "--rootdir", str(test_file.parent), "-W", "ignore::pytest.PytestAssertRewriteWarning"]
    return int(pytest.main(args))


if __name__ == "__main__":
    # Run main() of the imported module, not of __main__: cases_test.py reads the session from
    # grader.engine.worker, which would otherwise be a second copy of this file.
    from grader.engine import worker
    raise SystemExit(worker.main())
