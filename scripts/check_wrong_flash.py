#!/usr/bin/env python3
"""Run the wrong versions of 02/03 on a backend (as tests/test_wrong_versions.py does on the CPU) and
print whether each is rejected with the expected explanation.

    PYTHONPATH=$PWD python scripts/check_wrong_flash.py [--backend gpu|cpu] [--all-cases]
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def declared(path, name):
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def main() -> int:
    from grader import catalogue
    from grader.engine.check import run_check
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--all-cases", action="store_true")
    args = ap.parse_args()
    rows, ok_all = [], True
    for path in sorted((ROOT / "tests" / "wrong").glob("0[23]_*/*.py")):
        ex = catalogue.resolve(path.parent.name)
        expect = declared(path, "EXPECT") or []
        cases = None if args.all_cases else declared(path, "CASES")
        report = run_check(ex, path, args.backend, seed=7, cases=cases)
        failing = [c for c in report["cases"] if not c["passed"] and c["kind"] != "not_run"]
        msg = failing[0]["message"] if failing else ""
        missing = [p for p in expect if p.lower() not in msg.lower()]
        ok = bool(failing) and not report["passed"] and not missing
        ok_all &= ok
        rows.append((f"{path.parent.name[:2]}/{path.stem}", "ok" if ok else "WRONG",
                     failing[0]["name"] if failing else "-", missing))
        print(f"--- {path.parent.name}/{path.name}: {'ok' if ok else 'NOT AS EXPECTED'}\n{msg}\n", flush=True)
    print(f"{'wrong version':<28} {'verdict':<8} {'first failing case':<26} missing phrases")
    for r in rows:
        print(f"{r[0]:<28} {r[1]:<8} {r[2]:<26} {r[3] or ''}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
