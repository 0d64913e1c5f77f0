#!/usr/bin/env python3
"""Run the wrong versions (each task folder's wrong.py) on a backend, as tests/test_wrong_versions.py
does on the CPU, and print whether each is rejected with the expected explanation: its phrases in
the first message, and no stated cause but its own replay (the first checked case states it when the
wrong version has one). A wrong version
whose explanation comes from the CPU emulator's own detectors (Wrong.backends = ("cpu",)) is held to
the GPU too: a GPU pass is confirmed on the emulator, which names what the GPU hides (a missing
barrier). On the GPU each wrong version is also checked on the CPU with the same seed, and the two
verdicts must agree: the same first failing case and the same stated cause (one verdict everywhere).

    PYTHONPATH=$PWD python scripts/check_wrong_versions.py [IDS...] [--backend gpu|cpu] [--all-cases]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from grader import catalogue
    from grader.corpus import stated_causes
    from grader.engine.check import run_check
    from grader.tasks import load_task
    from grader.wrong import all_wrong, write
    ap = argparse.ArgumentParser()
    ap.add_argument("ids", nargs="*")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--all-cases", action="store_true")
    args = ap.parse_args()
    wanted = {catalogue.resolve(i).id for i in args.ids}
    rows, ok_all = [], True
    with tempfile.TemporaryDirectory() as tmp:
        for w in all_wrong():
            if wanted and w.exercise not in wanted:
                continue
            ex = catalogue.resolve(w.exercise)
            first = load_task(ex).CASES[0].name      # the first case always runs, as in a full check
            cases = None if args.all_cases or not w.cases else [first] + [c for c in w.cases if c != first]
            report = run_check(ex, write(w, tmp), args.backend, seed=7, cases=cases)
            failing = [c for c in report["cases"] if not c["passed"] and c["kind"] != "not_run"]
            msg = failing[0]["message"] if failing else ""
            held = True
            missing = [p for p in w.expect if p.lower() not in msg.lower()]
            stated = stated_causes(report)
            checked = [c for c in failing if c["kind"] == "checked"]
            if stated - ({w.cause} if w.cause else set()):
                missing.append(f"stated {sorted(stated)}, the bug is {w.cause}")
            elif w.cause and not (checked and checked[0].get("cause") == w.cause):
                missing.append(f"cause {w.cause} not stated")
            if args.backend != "cpu":
                cpu = run_check(ex, write(w, tmp), "cpu", seed=7, cases=cases)
                cpu_failing = [c for c in cpu["cases"] if not c["passed"] and c["kind"] != "not_run"]
                here = (failing[0]["name"], failing[0].get("cause")) if failing else None
                there = (cpu_failing[0]["name"], cpu_failing[0].get("cause")) if cpu_failing else None
                if here != there:
                    missing.append(f"{args.backend} says {here}, the CPU says {there}")
            ok = bool(failing) and not report["passed"] and not missing
            verdict = ("ok" if ok else "WRONG") if held else ("rejected" if failing else "passes") + " (cpu-only)"
            ok_all &= ok or not held
            rows.append((w.id, verdict, failing[0]["name"] if failing else "-", missing if held else ""))
            print(f"--- {w.id}: {verdict}\n{msg}\n", flush=True)
    print(f"{'wrong version':<46} {'verdict':<20} {'first failing case':<26} missing phrases")
    for r in rows:
        print(f"{r[0]:<46} {r[1]:<20} {r[2]:<26} {r[3] or ''}")
    print("ALL AS EXPECTED" if ok_all else "SOME NOT AS EXPECTED")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
