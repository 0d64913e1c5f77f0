"""The mutation harness, sized for CI: a fixed sample of the mutants derived from every solution must
be rejected on the CPU and none may state another bug's cause (scripts/mutate.py runs all of them
and reports how many are named by their own replay)."""
import pytest

from grader import catalogue, paths
from grader.mutants import OPERATORS, mutants, run_mutant, summarise

EVERY = 18     # one mutant in eighteen, spread over all modules and operators


def all_mutants():
    return [m for ex in catalogue.EXERCISES for m in mutants(ex.id, paths.solution_file(ex.id).read_text())]


def test_every_module_gets_mutants_and_each_changes_one_line():
    ms = all_mutants()
    for ex in catalogue.EXERCISES:
        assert sum(m.exercise == ex.id for m in ms) >= 5, ex.id
    assert {m.op.name for m in ms} == {op.name for op in OPERATORS}, "an operator matches nothing"
    for m in ms:
        solution = paths.solution_file(m.exercise).read_text()
        a, b = solution.splitlines(), m.source(solution).splitlines()
        assert [i for i, (x, y) in enumerate(zip(a, b)) if x != y] == [m.line - 1]


@pytest.mark.slow
def test_a_sample_of_mutants_is_rejected(tmp_path):
    sample = all_mutants()[::EVERY]
    verdicts = [run_mutant(m, tmp_path) for m in sample]
    escaped = [v.mutant.id + ": " + v.mutant.after.strip() for v in verdicts if v.changes_output and not v.rejected]
    assert not escaped, "mutants that change the output but pass every case:\n" + "\n".join(escaped)
    wrong = [f"{v.mutant.id}: {v.mutant.after.strip()}\n{v.first_message}" for v in verdicts if v.score == "wrong"]
    assert not wrong, "mutants whose check states another bug's cause:\n" + "\n".join(wrong)
    contradicted = [f"{v.mutant.id}: {c}" for v in verdicts for c in v.contradictions]
    assert not contradicted, "explanations that contradict their own case:\n" + "\n".join(contradicted)
    table = summarise(verdicts)
    assert sum(r["mutants"] for r in table.values()) >= 10, "the sample must hold mutants that change the output"
