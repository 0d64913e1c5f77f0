"""Corpora of wrong kernels and how the grader's verdict on each is scored.

A verdict on a wrong kernel is one of:
- `passed`: the check let it through (a missing case);
- `named`: the stated cause is the bug's own replay id, or, for a bug the emulator's own report
  names (a race, an out-of-bounds access, a divergent barrier, a bad launch), the first failure is
  that report and no cause is stated;
- `silent`: rejected, no cause stated (only observations);
- `wrong`: a cause was stated that is not the bug's. The worst outcome: never allowed.

The blind corpus (tests/blind/ID/*.py, each with its bug and its replay id in bugs.json) was written
from the lessons and stubs alone, by someone who had not read the diagnosis code.
"""
from __future__ import annotations

import json
from pathlib import Path

EMULATOR = "emulator"     # the bug is named by the emulator's own fault report, not by a replay


def blind_corpus(root: Path, batch: int | None = None) -> list[tuple[str, Path, str | None, str]]:
    """(exercise id, file, expected cause, the bug in words) for every kernel of tests/blind, or for
    one batch of it (bugs.json's "batch", 1 where absent: each batch was written at a different
    time, and a later one measures replays the earlier ones may have shaped)."""
    out = []
    for folder in sorted(p for p in (root / "tests" / "blind").iterdir() if p.is_dir()):
        bugs = json.loads((folder / "bugs.json").read_text())
        for name in sorted(bugs):
            if batch is None or bugs[name].get("batch", 1) == batch:
                out.append((folder.name, folder / name, bugs[name]["cause"], bugs[name]["bug"]))
    return out


def stated_causes(report: dict) -> set[str]:
    """Every cause the check stated, on any case or its shrunk shape."""
    said = set()
    for c in report["cases"]:
        if c.get("cause"):
            said.add(c["cause"])
        if (c.get("shrunk") or {}).get("cause"):
            said.add(c["shrunk"]["cause"])
    return said


def _is(cid: str | None, expected: tuple[str, ...]) -> bool:
    """Is this cause id one of the expected ones (an entry ending in ':' is a whole family)?"""
    return bool(cid) and any(cid == e or (e.endswith(":") and cid.startswith(e))
                             for e in expected if e != EMULATOR)


def score(report: dict, expected: str | tuple[str, ...] | None) -> str:
    """passed | named | silent | wrong (see the module's docstring). `expected`: the bug's replay
    id, or several ids and families (a mutation operator's), EMULATOR among them where the emulator's
    own fault report names the bug."""
    if report["passed"]:
        return "passed"
    expected = (expected,) if isinstance(expected, str) else tuple(expected or ())
    if any(not _is(cid, expected) for cid in stated_causes(report)):
        return "wrong"
    failing = [c for c in report["cases"] if not c["passed"] and c["kind"] != "not_run"]
    checked = [c for c in failing if c["kind"] == "checked"]
    if EMULATOR in expected and failing and failing[0]["kind"] in ("error", "crash"):
        return "named"
    if checked and _is(checked[0].get("cause"), expected):
        return "named"
    return "silent"


def first_failure_kind(report: dict) -> str | None:
    failing = [c for c in report["cases"] if not c["passed"] and c["kind"] != "not_run"]
    return failing[0]["kind"] if failing else None
