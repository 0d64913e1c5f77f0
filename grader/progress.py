"""What the grader remembers between runs: each exercise's last verdict and the hints revealed.

Stored in .grader/ at the course root (ignored by git), as small JSON files.
"""
from __future__ import annotations

import json
import time

from .paths import state_dir


def _load(name: str) -> dict:
    p = state_dir() / name
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return {}


def _save(name: str, data: dict) -> None:
    p = state_dir() / name
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(p)


def record_check(report: dict) -> None:
    data = _load("progress.json")
    cases = report["cases"]
    data[report["id"]] = {
        "passed": report["passed"],
        "cases_passed": sum(c["passed"] for c in cases),
        "cases": len(cases),
        "not_implemented": bool(cases) and all(c["kind"] == "not_implemented" for c in cases),
        "backend": report["backend"],
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    _save("progress.json", data)


def progress() -> dict:
    return _load("progress.json")


def hints_revealed(ex_id: str) -> int:
    return int(_load("hints.json").get(ex_id, 0))


def set_hints_revealed(ex_id: str, n: int) -> None:
    data = _load("hints.json")
    data[ex_id] = n
    _save("hints.json", data)
