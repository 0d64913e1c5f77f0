"""Wrong versions the checker must reject, each with the right explanation.

They are kept in each task folder's wrong.py as edits of the solutions (one planted bug each), so
they follow the solutions as those change.
"""
import pytest

from grader import catalogue
from grader.engine.check import run_check
from grader.engine.consistency import file_config, report_contradictions
from grader.tasks import load_task
from grader.wrong import all_wrong, build, write

WRONG = all_wrong()


def test_every_module_has_at_least_three_wrong_versions():
    for ex in catalogue.EXERCISES:
        assert sum(w.exercise == ex.id for w in WRONG) >= 3, ex.id


@pytest.mark.parametrize("w", WRONG, ids=[w.id for w in WRONG])
def test_each_bug_still_applies_to_its_solution(w):
    text = build(w)                   # raises when an edit no longer matches exactly once
    assert all(new in text for _, new in w.edits)
    assert text.startswith(f'"""WRONG VERSION of {w.exercise} ({w.name})')


@pytest.mark.slow
@pytest.mark.parametrize("w", WRONG, ids=[w.id for w in WRONG])
def test_wrong_version_is_rejected_with_the_right_explanation(w, tmp_path):
    ex = catalogue.resolve(w.exercise)
    path = write(w, tmp_path)
    # A full check runs the module's cases in order, so its first message is often the first case's:
    # that case (the smallest) always runs, before the ones the bug is known to show on.
    first = load_task(ex).CASES[0].name
    cases = [first] + [c for c in w.cases if c != first] if w.cases else None
    report = run_check(ex, path, "cpu", seed=7, cases=cases)
    assert not report["passed"], f"{w.id} passed the check, but it is wrong"
    # No explanation, of any failing case or its shrunk shape, contradicts its own case.
    assert not report_contradictions(ex, report, 7, file_config(ex, path))
    failing = [c for c in report["cases"] if not c["passed"] and c["kind"] != "not_run"]
    assert failing, report
    # A stated cause is a reproduced cause: the bug's own replay, on every case that states one.
    stated = {c["cause"] for c in failing if c.get("cause")} | \
        {(c.get("shrunk") or {}).get("cause") for c in failing if (c.get("shrunk") or {}).get("cause")}
    assert stated <= ({w.cause} if w.cause else set()), f"{w.id}: stated {stated}, the bug is {w.cause}"
    checked = [c for c in failing if c["kind"] == "checked"]
    if w.cause:
        assert checked and checked[0]["cause"] == w.cause, checked[0]["message"] if checked else failing
    message = failing[0]["message"].lower()
    for phrase in w.expect:
        assert phrase.lower() in message, f"{phrase!r} not in the message:\n{failing[0]['message']}"
