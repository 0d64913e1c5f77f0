"""The H100 figures the lessons and the CPU notebooks show come from one file, and agree with it."""
import re

import pytest

from grader import catalogue, measured, paths


ONE_GPU = [e for e in catalogue.EXERCISES if e.id not in measured.MULTI_GPU]


@pytest.mark.parametrize("ex", ONE_GPU, ids=[e.id for e in ONE_GPU])
def test_lesson_roofline_table_is_the_measured_one(ex):
    text = paths.lesson_file(ex.id).read_text()
    assert measured.update_lesson(text, ex.id) == text, (
        f"modules/{ex.id}.md: its roofline table differs from grader/data/h100_bench.json; "
        "run `python scripts/record_bench.py --lessons-only`")


def test_every_module_has_measured_cases_with_a_roofline_share():
    m = measured.measured()
    assert {e.id for e in ONE_GPU} == set(m["modules"])
    for ex_id, cases in m["modules"].items():
        for c in cases:
            yours = c["results"]["yours"]
            assert 0 < yours["roofline_pct"] <= 100, (ex_id, c["case"])
            # the share is the roofline's time over the measured one
            assert yours["roofline_pct"] == pytest.approx(100 * c["roofline"]["ms"] / yours["median_ms"], rel=1e-6)


def test_the_table_quotes_the_solutions_share():
    block = measured.lesson_block("02")
    first = measured.cases("02")[0]
    assert f"{first['results']['yours']['roofline_pct']:.1f}% ({first['results']['yours']['median_ms']:.3f} ms)" in block
    assert re.search(r"on an NVIDIA H100.* on \d{4}-\d\d-\d\d", block)


def test_the_ring_lesson_quotes_the_recorded_multi_gpu_figures():
    text = paths.lesson_file("12_ring_attention").read_text()
    assert measured.update_ring_lesson(text) == text, (
        "modules/12_ring_attention.md: its measured block differs from grader/data/ring_bench.json; rewrite it "
        "with measured.update_ring_lesson")


def test_each_lesson_says_how_its_figures_were_timed():
    """Device time (bench.time_gpu records each contender's host time beside it) or one call from an
    idle GPU (figures recorded before, with no host time): the lesson's paragraph says which."""
    for ex in ONE_GPU:
        rows = measured.cases(ex.id)
        block = measured.lesson_block(ex.id)
        if measured.device_timed(rows):
            assert "Each time is the device's" in block, ex.id
        else:
            assert "one call from an idle GPU" in block, ex.id
    fake = [{"results": {"yours": {"median_ms": 1.0, "host_ms": 0.1}, "other": {"error": "x"}}}]
    assert measured.device_timed(fake) and not measured.device_timed([{"results": {"yours": {"median_ms": 1.0}}}])
