"""The blind corpus: wrong kernels written from the lessons and stubs alone, by someone who had not
read the diagnosis code (tests/blind/ID/*.py; bugs.json gives each bug and its replay's cause id).

Every one must be rejected, and no cause may be stated but the bug's own; a kernel the grader is known
to let pass says so in bugs.json ("passes": why), and its test is an expected failure until the grader
catches it. CI runs every thirtieth kernel (the whole corpus takes minutes; a sample of every
fifteenth took CI past its time budget, and every twentieth, with the corpus past 1100, near it);
`python scripts/verdicts.py blind` runs them all and counts how many are named.
"""
import json
from pathlib import Path

import pytest

from grader import catalogue
from grader.corpus import blind_corpus, score, stated_causes
from grader.engine.check import run_check

ROOT = Path(__file__).resolve().parents[1]
CORPUS = blind_corpus(ROOT)


def test_the_corpus_covers_every_module_with_forty_kernels_or_more():
    assert len(CORPUS) >= 40
    assert {ex for ex, *_ in CORPUS} == set(catalogue.IDS)
    for ex, path, cause, bug in CORPUS:
        text = path.read_text()
        assert text.startswith("# BLIND:"), path
        assert bug and (cause is None or isinstance(cause, str)
                        or (isinstance(cause, list) and all(isinstance(c, str) for c in cause)))


@pytest.mark.slow
@pytest.mark.parametrize("item", CORPUS[::30], ids=[f"{ex[:2]}/{p.stem}" for ex, p, *_ in CORPUS[::30]])
def test_blind_kernel_is_rejected_and_never_named_wrong(item, monkeypatch):
    ex, path, expected, bug = item
    monkeypatch.setenv("GRADER_WORK", "1")      # a kernel that only does too much work is caught there
    report = run_check(catalogue.resolve(ex), path, "cpu", seed=7)
    verdict = score(report, expected)
    gap = json.loads((path.parent / "bugs.json").read_text())[path.name].get("passes")
    if gap and verdict == "passed":
        pytest.xfail(f"a known gap: {gap}")
    assert verdict != "passed", f"{path.name} passed, but it is wrong: {bug}"
    assert verdict != "wrong", f"{path.name}: stated {stated_causes(report)}, the bug is {expected}: {bug}"
    for c in report["cases"]:
        for message in (c["message"], (c.get("shrunk") or {}).get("message") or ""):
            assert "the grader failed while explaining" not in message, f"{path.name}, {c['name']}: {message}"
