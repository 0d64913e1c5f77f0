"""Every solution passes its check; every committed stub fails it with "not implemented yet"; every
committed stub is exactly what the instructor command derives from its solution."""
import json

import pytest

from grader import catalogue, paths
from grader.engine.check import run_check
from grader.stubs import derive_stub

AVAILABLE = [ex for ex in catalogue.EXERCISES if paths.solution_file(ex.id).is_file()]
IDS = [ex.id for ex in AVAILABLE]
BACKEND = "cpu"


def test_the_core_course_is_in_order():
    ids = [ex.id for ex in catalogue.EXERCISES]
    assert ids[:5] == ["00_naive_attention", "01_online_softmax", "02_flash_forward",
                       "03_flash_causal", "04_splitkv_decode"]
    assert ids == sorted(ids)


@pytest.mark.parametrize("ex", AVAILABLE, ids=IDS)
def test_committed_stub_is_derived_from_solution(ex):
    solution = paths.committed_text(paths.solution_file(ex.id))
    stub = paths.committed_text(paths.exercise_file(ex.id))
    assert stub == derive_stub(solution), (
        f"exercises/{ex.id}.py is not the derivation of solutions/{ex.id}.py: run `grader stubs {ex.id}`")


@pytest.mark.slow
@pytest.mark.parametrize("ex", AVAILABLE, ids=IDS)
def test_solution_passes(ex):
    report = run_check(ex, paths.solution_file(ex.id), BACKEND, seed=1234)
    failed = [c for c in report["cases"] if not c["passed"]]
    assert report["passed"] and not failed, json.dumps(failed[:2], indent=1) + str(report["error"])


@pytest.mark.slow
@pytest.mark.parametrize("ex", AVAILABLE, ids=IDS)
def test_stub_fails_with_not_implemented(ex, tmp_path):
    stub = tmp_path / f"{ex.id}.py"
    stub.write_text(paths.committed_text(paths.exercise_file(ex.id)))
    report = run_check(ex, stub, BACKEND, seed=99)
    assert not report["passed"]
    assert report["cases"], report
    for case in report["cases"]:
        if case["passed"] and "bad" in case.get("params", {}):
            continue      # the launcher's refusal of broken inputs: given code in the stub (module 07)
        assert case["kind"] == "not_implemented", case
        assert "not implemented yet" in case["message"]


@pytest.mark.parametrize("ex", catalogue.EXERCISES, ids=[ex.id for ex in catalogue.EXERCISES])
def test_batched_modules_check_a_second_sequence_and_a_gqa_group(ex):
    """A module whose inputs have a batch (B) checks some case with B > 1, where every batch offset is
    used with b > 0, and where it has kv heads (Hkv) some case with H > Hkv. Module 14 had only B = 1,
    and a dK/dV store at (b · H + h_kv) instead of (b · Hkv + h_kv) passed (blind batch 39)."""
    from grader.engine.runner import select_cases
    params = [c.params for c in select_cases(ex)]
    if any("B" in p for p in params):
        assert any(p.get("B", 1) > 1 for p in params), f"{ex.id}: no case with B > 1"
    if any("Hkv" in p for p in params):
        assert any(p["H"] > p["Hkv"] for p in params if "Hkv" in p), f"{ex.id}: no case with H > Hkv"
        assert any(p.get("B", 1) > 1 and p["H"] > p["Hkv"] for p in params if "Hkv" in p), \
            f"{ex.id}: no case with B > 1 and H > Hkv together"


@pytest.mark.parametrize("ex", catalogue.EXERCISES, ids=[ex.id for ex in catalogue.EXERCISES])
def test_gqa_modules_check_a_group_size_that_is_not_a_power_of_two(ex):
    """A module with kv heads checks some case whose group H / Hkv is not a power of two: a kv head
    found by a shift or a mask (h >> log2(G), h & ...) is right for every power of two and wrong for 3
    (blind batch 51: 00's shift by the group's lowest set bit passed groups of 1, 2, 4 and 8)."""
    from grader.engine.runner import select_cases
    groups = {p["H"] // p["Hkv"] for p in (c.params for c in select_cases(ex)) if "Hkv" in p}
    if groups:
        assert any(g & (g - 1) for g in groups), f"{ex.id}: every group size is a power of two: {sorted(groups)}"
