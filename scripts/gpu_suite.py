#!/usr/bin/env python3
"""Everything the GPU must show, in one run (one device call): for every exercise, the solution
passes `grader check`, the stub fails with "not implemented yet", the wrong versions are rejected
with their explanations; the GPU-marked tests pass; the benchmarks run; optionally the notebooks
execute. Prints a short table last.

    PYTHONPATH=$PWD python scripts/gpu_suite.py [IDS...] [--no-bench] [--no-tests] [--no-wrong] [--notebooks]
Writes full logs under $OUT (or ./out) when set. All ten modules with their benchmarks took 525 s on an
H100 (2026-11-23), close to a 10-minute command limit: split the ids over two calls where one applies.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(os.environ.get("OUT") or ROOT / "out")


def run(cmd, log_name, timeout=600):
    t0 = time.monotonic()
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = f"{e.stdout or ''}{e.stderr or ''}\nTIMEOUT after {timeout}s", 124
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / log_name, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n{out}\n[rc={rc}, {time.monotonic() - t0:.1f}s]\n\n")
    return rc, out, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("ids", nargs="*")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--no-tests", action="store_true")
    ap.add_argument("--no-wrong", action="store_true")
    ap.add_argument("--notebooks", action="store_true")
    ap.add_argument("--backend", default="gpu")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from grader import catalogue, paths
    exes = [catalogue.resolve(i) for i in args.ids] if args.ids else [
        ex for ex in catalogue.EXERCISES if paths.solution_file(ex.id).is_file()]
    grader = [sys.executable, "-m", "grader"]
    table = []
    ok_all = True
    for ex in exes:
        rc, out, dt = run(grader + ["check", ex.id, "--solution", "--backend", args.backend, "--seed", "1"],
                          "checks.log")
        print(out, flush=True)
        table.append((ex.id, "solution", "PASS (exit 0)" if rc == 0 else f"FAIL (exit {rc})", dt))
        ok_all &= rc == 0
        rc, out, dt = run(grader + ["check", ex.id, "--backend", args.backend, "--seed", "1"], "checks.log")
        print(out, flush=True)
        stub_ok = rc == 1 and "not implemented yet" in out
        table.append((ex.id, "stub", f"{'fails as it should' if stub_ok else 'UNEXPECTED'} (exit {rc})", dt))
        ok_all &= stub_ok
    if not args.no_wrong:
        rc, out, dt = run([sys.executable, "scripts/check_wrong_versions.py", "--backend", args.backend,
                           *[ex.id for ex in exes]], "wrong_versions.log", timeout=900)
        tail = out[out.rfind("wrong version "):] if "wrong version " in out else out[-3000:]
        print(tail, flush=True)
        table.append(("wrong versions", "", "as expected" if rc == 0 else f"NOT AS EXPECTED (exit {rc})", dt))
        ok_all &= rc == 0
    if not args.no_tests:
        rc, out, dt = run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests", "-p", "no:cacheprovider"],
                          "pytest_gpu.log", timeout=900)
        print(out[-4000:], flush=True)
        table.append(("pytest -m gpu", "", out.strip().splitlines()[-1] if out.strip() else f"rc={rc}", dt))
        ok_all &= rc in (0, 5)
    if args.notebooks:
        for ex in exes:
            nb = paths.notebook_file(ex.id)
            if nb.is_file():
                rc, out, dt = run([sys.executable, "scripts/run_notebook.py", str(nb)], "notebooks.log")
                table.append((ex.id, "notebook", "ran" if rc == 0 else f"FAILED (exit {rc})", dt))
                ok_all &= rc == 0
                if rc:
                    print(out[-3000:])
    if not args.no_bench:
        for ex in exes:
            rc, out, dt = run(grader + ["bench", ex.id, "--solution"], "bench.log")
            print(out, flush=True)
            table.append((ex.id, "bench", "ran" if rc == 0 else f"FAILED (exit {rc})", dt))
    print("\n=== GPU suite summary ===")
    for row in table:
        print(f"{row[0]:<22} {row[1]:<9} {row[2]:<40} {row[3]:6.1f}s")
    print("ALL OK" if ok_all else "SOMETHING FAILED")
    return 0 if ok_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
