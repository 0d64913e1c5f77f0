#!/usr/bin/env python3
"""Run the wrong versions (tests/wrong/versions.py) on a backend, as tests/test_wrong_versions.py does
on the CPU, and print whether each is rejected with the expected explanation. On the GPU, a bug the
GPU hides (a missing barrier) may pass: that is what the CPU emulator is for.

    PYTHONPATH=$PWD python scripts/check_wrong_versions.py [IDS...] [--backend gpu|cpu] [--all-cases]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "wrong"))


def main() -> int:
    from grader import catalogue
    from grader.engine.check import run_check
    from versions import WRONG, write
    ap = argparse.ArgumentParser()
    ap.add_argument("ids", nargs="*")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--all-cases", action="store_true")
    args = ap.parse_args()
    wanted = {catalogue.resolve(i).id for i in args.ids}
    rows, ok_all = [], True
    with tempfile.TemporaryDirectory() as tmp:
        for w in WRONG:
            if wanted and w.exercise not in wanted:
                continue
            cases = None if args.all_cases or not w.cases else list(w.cases)
            report = run_check(catalogue.resolve(w.exercise), write(w, tmp), args.backend, seed=7, cases=cases)
            failing = [c for c in report["cases"] if not c["passed"] and c["kind"] != "not_run"]
            msg = failing[0]["message"] if failing else ""
            missing = [p for p in w.expect if p.lower() not in msg.lower()]
            ok = bool(failing) and not report["passed"] and not missing
            ok_all &= ok
            rows.append((w.id, "ok" if ok else "WRONG", failing[0]["name"] if failing else "-", missing))
            print(f"--- {w.id}: {'ok' if ok else 'NOT AS EXPECTED'}\n{msg}\n", flush=True)
    print(f"{'wrong version':<46} {'verdict':<8} {'first failing case':<26} missing phrases")
    for r in rows:
        print(f"{r[0]:<46} {r[1]:<8} {r[2]:<26} {r[3] or ''}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
