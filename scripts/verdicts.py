"""How well the grader names bugs it was not fitted to: run a corpus of wrong kernels on the CPU and
count, per module, the kernels it lets pass, names right, rejects without naming, and names wrong.

    python scripts/verdicts.py blind          # tests/blind: written from the lessons and stubs alone
    python scripts/verdicts.py wrong          # every module's wrong versions (grader/tasks/*/wrong.py)
    python scripts/verdicts.py blind --only 03 --verbose
    python scripts/verdicts.py blind --batch 2  # the second batch, written after the replays of the first

"named" means the stated cause id is the bug's own replay (grader/corpus.py). Exit 1 when any
kernel passes or any cause is named wrong.
"""
from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRADER_FAILED = "the grader failed while explaining"
sys.path.insert(0, str(ROOT))

from grader import catalogue  # noqa: E402
from grader.corpus import blind_corpus, score, stated_causes  # noqa: E402
from grader.engine.check import run_check  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", choices=("blind", "wrong"))
    ap.add_argument("--only", help="modules whose id starts with this")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--batch", type=int, help="blind corpus: only this batch (bugs.json's \"batch\", 1 where absent)")
    ap.add_argument("--verbose", action="store_true", help="print each kernel's verdict")
    args = ap.parse_args()
    if args.corpus == "blind":
        items = [(ex, path, cause, bug) for ex, path, cause, bug in blind_corpus(ROOT, args.batch)]
    else:
        from grader.wrong import all_wrong, write
        tmp = Path(tempfile.mkdtemp(prefix="verdicts-"))
        items = [(w.exercise, write(w, tmp), w.cause, w.what)
                 for w in all_wrong()]
    counts: dict = collections.defaultdict(collections.Counter)
    crashed: list[str] = []
    for ex_id, path, expected, bug in items:
        if args.only and not ex_id.startswith(args.only):
            continue
        report = run_check(catalogue.resolve(ex_id), path, "cpu", args.seed)
        verdict = score(report, expected)
        counts[ex_id][verdict] += 1
        failed = [c["name"] for c in report["cases"] if GRADER_FAILED in c.get("message", "")
                  or GRADER_FAILED in ((c.get("shrunk") or {}).get("message") or "")]
        if failed:
            crashed.append(f"{ex_id[:2]} {path.name}: {failed[0]}")
            print(f"GRADER FAILED while explaining {ex_id[:2]} {path.name}, case {failed[0]}", flush=True)
        if args.verbose or verdict in ("passed", "wrong"):
            print(f"{verdict:7} {ex_id[:2]} {path.name}: expected {expected}, stated {sorted(stated_causes(report))}"
                  f"  ({bug[:80]})", flush=True)
    total = collections.Counter()
    print(f"\n{'module':24} {'kernels':>7} {'passed':>7} {'named':>6} {'silent':>7} {'wrong':>6}")
    for ex_id in sorted(counts):
        c = counts[ex_id]
        total.update(c)
        print(f"{ex_id:24} {sum(c.values()):7} {c['passed']:7} {c['named']:6} {c['silent']:7} {c['wrong']:6}")
    n = sum(total.values())
    print(f"{'all':24} {n:7} {total['passed']:7} {total['named']:6} {total['silent']:7} {total['wrong']:6}")
    if n:
        print(f"rejected {n - total['passed']}/{n}, named right {total['named']}/{n} ({100 * total['named'] / n:.0f}%), "
              f"named wrong {total['wrong']}")
    if crashed:
        print(f"the grader failed while explaining {len(crashed)} kernel(s): {'; '.join(crashed[:5])}")
    return 1 if total["passed"] or total["wrong"] or crashed else 0


if __name__ == "__main__":
    sys.exit(main())
