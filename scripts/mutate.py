#!/usr/bin/env python3
"""The mutation harness: derive wrong kernels from each solution (grader/mutants.py), check each on
the CPU, and report per module the share rejected, the share whose stated cause is the operator's own
replay id, and the count whose stated cause is another bug's (wrong).
Mutants that change no output are listed, not counted.

    PYTHONPATH=$PWD python scripts/mutate.py [IDS...] [--every N] [--json FILE] [--show-silent]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from grader import catalogue, paths
    from grader.mutants import mutants, run_mutant, summarise
    ap = argparse.ArgumentParser()
    ap.add_argument("ids", nargs="*")
    ap.add_argument("--every", type=int, default=1, help="run every Nth mutant (a sample)")
    ap.add_argument("--json", help="write every verdict to this file")
    ap.add_argument("--show-silent", action="store_true", help="print the first message of each rejected "
                    "mutant whose check states no cause or another bug's")
    args = ap.parse_args()
    exes = [catalogue.resolve(i) for i in args.ids] if args.ids else list(catalogue.EXERCISES)
    verdicts, t0 = [], time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        for ex in exes:
            ms = mutants(ex.id, paths.solution_file(ex.id).read_text())[::args.every]
            for m in ms:
                v = run_mutant(m, tmp)
                verdicts.append(v)
                state = ("no change" if not v.changes_output else "ESCAPED" if not v.rejected
                         else "WRONG" if v.score == "wrong" else v.score)
                print(f"{m.id:<46} {state:<9} {v.first_case:<24} {m.after.strip()[:70]}", flush=True)
                if args.show_silent and state in ("silent", "WRONG"):
                    print("    " + v.first_message.replace("\n", "\n    ")[:1200])
    table = summarise(verdicts)
    print(f"\n{'module':<20} {'mutants':>8} {'rejected':>9} {'named':>7} {'wrong':>6}"
          "   (named, wrong: shares of the rejected; changing no output: listed below)")
    tot = [0, 0, 0, 0]
    for ex_id, r in table.items():
        n, rej, named, wrong = r["mutants"], r["rejected"], r["named"], len(r["wrong"])
        tot = [tot[0] + n, tot[1] + rej, tot[2] + named, tot[3] + wrong]
        print(f"{ex_id:<20} {n:>8} {rej / max(n, 1):>8.0%} {named / max(rej, 1):>7.0%} {wrong:>6}")
    print(f"{'all':<20} {tot[0]:>8} {tot[1] / max(tot[0], 1):>8.0%} {tot[2] / max(tot[1], 1):>7.0%} {tot[3]:>6}"
          f"   ({time.monotonic() - t0:.0f} s)")
    contradicted = [f"{v.mutant.id}: {c}" for v in verdicts for c in v.contradictions]
    print(f"explanations that contradict their own case: {len(contradicted)}")
    for line in contradicted:
        print("  " + line)
    for ex_id, r in table.items():
        for key in ("escaped", "wrong", "equivalent"):
            if r[key]:
                print(f"{ex_id} {key}: {', '.join(r[key])}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            [{"id": v.mutant.id, "after": v.mutant.after, "rejected": v.rejected, "score": v.score,
              "changes_output": v.changes_output, "first_case": v.first_case, "message": v.first_message}
             for v in verdicts], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
