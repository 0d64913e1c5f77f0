"""The work check (grader/engine/work.py): a kernel whose every case passes but that does far more than
the finished version on the task's WORK_CASE, counted on the emulator, fails on a case of its own, with
the counts and the line; the finished version passes it."""
from pathlib import Path

import pytest

from grader import catalogue
from grader.engine.check import run_check

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def work_on(monkeypatch):
    monkeypatch.setenv("GRADER_WORK", "1")


def _work_case(report):
    return next((c for c in report["cases"] if c["kind"] == "work"), None)


def test_causal_kernel_that_loads_every_key_tile_fails_with_its_line(tmp_path):
    """kv_end = n_k (the stub's placeholder for TODO(1)): right outputs, every key tile loaded."""
    src = (ROOT / "solutions" / "03_flash_causal.py").read_text()
    line = "    const int kv_end = min(n_k, q_last + offset + 1);\n"
    assert line in src
    path = tmp_path / "no_skip.py"
    path.write_text(src.replace(line, "    const int kv_end = n_k;\n"))
    report = run_check(catalogue.resolve("03"), path, "cpu", seed=7)
    assert not report["passed"]
    assert all(c["passed"] for c in report["cases"] if c["kind"] != "work")
    work = _work_case(report)
    assert work is not None and not work["passed"]
    assert "read 0.295 MB of k" in work["message"] and "(1.71×)" in work["message"]
    assert "line 110 `if (kv_start + j < n_k)" in work["message"]
    assert "reads k[0, 0," in work["message"]        # the first divergence: which block reads more


def test_block_sparse_kernel_that_reads_empty_tiles_fails():
    path = ROOT / "tests" / "blind" / "08_block_sparse" / "empty_tiles_not_skipped_b24.py"
    report = run_check(catalogue.resolve("08"), path, "cpu", seed=7)
    work = _work_case(report)
    assert not report["passed"] and work is not None
    assert "(4.00×)" in work["message"]


def test_the_finished_version_passes_the_work_check():
    report = run_check(catalogue.resolve("08"), ROOT / "solutions" / "08_block_sparse.py", "cpu", seed=7)
    assert report["passed"] and _work_case(report) is None


def test_a_selection_of_cases_runs_no_work_check(tmp_path):
    path = ROOT / "tests" / "blind" / "08_block_sparse" / "empty_tiles_not_skipped_b24.py"
    report = run_check(catalogue.resolve("08"), path, "cpu", seed=7, cases=["tiny"])
    assert report["passed"] and _work_case(report) is None
