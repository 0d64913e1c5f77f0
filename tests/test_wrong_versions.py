"""Wrong versions the checker must reject, each with the right explanation.

tests/wrong/<exercise id>/<bug>.py is a complete exercise file with one planted bug. It declares
    EXPECT = ["phrase", ...]   every phrase must appear in the first failing case's message
    CASES = [...]              optional: only these cases (keeps CI fast)
"""
import ast
from pathlib import Path

import pytest

from grader import catalogue
from grader.engine.check import run_check

WRONG = sorted(Path(__file__).with_name("wrong").glob("*/*.py"))


def _declared(path: Path, name: str, default=None):
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    return default


@pytest.mark.parametrize("path", WRONG, ids=[f"{p.parent.name}/{p.stem}" for p in WRONG])
def test_wrong_version_is_rejected_with_the_right_explanation(path):
    ex = catalogue.resolve(path.parent.name)
    expect = _declared(path, "EXPECT")
    assert expect, f"{path} must declare EXPECT = [...]"
    report = run_check(ex, path, "cpu", seed=7, cases=_declared(path, "CASES"))
    assert not report["passed"], f"{path.name} passed the check, but it is wrong"
    failing = [c for c in report["cases"] if not c["passed"] and c["kind"] != "not_run"]
    assert failing, report
    message = failing[0]["message"].lower()
    for phrase in expect:
        assert phrase.lower() in message, f"{phrase!r} not in the message:\n{failing[0]['message']}"
