"""The work check (grader/engine/work.py): a kernel whose every case passes but that does far more than
the finished version on the task's WORK_CASE, counted on the emulator, fails on a case of its own, with
the counts and the line; the finished version passes it."""
from pathlib import Path

import pytest

from grader import catalogue
from grader.engine import work
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
    assert "read 0.131 MB of k" in work["message"] and "(1.60×)" in work["message"]
    assert "line 110 `if (kv_start + j < n_k)" in work["message"]
    assert "reads k[0, 0," in work["message"]        # the first divergence: which block reads more


def test_block_sparse_kernel_that_reads_empty_tiles_fails():
    path = ROOT / "tests" / "blind" / "08_block_sparse" / "empty_tiles_not_skipped_b24.py"
    report = run_check(catalogue.resolve("08"), path, "cpu", seed=7)
    work = _work_case(report)
    assert not report["passed"] and work is not None
    assert "of k, where the finished version's read 8.2 KB (16.00×)" in work["message"], work["message"]


def test_the_finished_version_passes_the_work_check():
    report = run_check(catalogue.resolve("08"), ROOT / "solutions" / "08_block_sparse.py", "cpu", seed=7)
    assert report["passed"] and _work_case(report) is None


def test_a_selection_of_cases_runs_no_work_check(tmp_path):
    path = ROOT / "tests" / "blind" / "08_block_sparse" / "empty_tiles_not_skipped_b24.py"
    report = run_check(catalogue.resolve("08"), path, "cpu", seed=7, cases=["tiny"])
    assert report["passed"] and _work_case(report) is None


def test_the_recorded_counts_are_the_finished_versions():
    """grader/data/work_counts.json stands in for the finished version where a copy of the course has
    none (a release, an autograder): it must be what the finished version counts now."""
    import json
    stored = json.loads(work.COUNTS_FILE.read_text())
    fresh = {i: work.finished_counts(catalogue.resolve(i)) for i in catalogue.IDS
             if work.work_case(catalogue.resolve(i))}
    assert stored == fresh, ("stale: run python -c 'from grader.engine import work; work.write_counts()'")


def test_without_the_finished_version_the_recorded_counts_give_the_same_verdict(monkeypatch):
    from grader import release
    from grader.errors import GraderError

    def missing(ex_id, feature):
        raise GraderError("no solutions here")
    monkeypatch.setattr(release, "solution_path", missing)
    path = ROOT / "tests" / "blind" / "08_block_sparse" / "empty_tiles_not_skipped_b24.py"
    from grader.runtimes.cpu import CpuRuntime  # noqa: F401  (the emulator, as the child uses it)
    from grader.engine.runner import load_exercise_function
    text = work.compare(catalogue.resolve("08"), load_exercise_function(catalogue.resolve("08"), path))
    assert text and "(16.00×)" in text and "observed:" not in text


def test_a_split_count_that_leaves_the_gpu_idle_fails():
    """Module 13's split count inverted (blind batch 21, once a known gap): one split at batch 1, right
    outputs, 2 blocks where the finished version launches 16."""
    path = ROOT / "tests" / "blind" / "13_decode_tensor_cores" / "split_count_ratio_inverted_b21.py"
    report = run_check(catalogue.resolve("13"), path, "cpu", seed=7)
    work = _work_case(report)
    assert not report["passed"] and work is not None
    assert "runs 2 blocks, where the finished version's runs 16 (8× more)" in work["message"], work["message"]


def test_a_stub_placeholder_left_in_is_named(tmp_path):
    """03's stub leaves kv_end = n_k after TODO(1): right outputs, every key tile. A file with the other
    TODOs done and that one as the stub has it fails the work check, and the note names TODO(1)."""
    src = (ROOT / "solutions" / "03_flash_causal.py").read_text()
    start = src.index("    // BEGIN SOLUTION TODO(1):")
    end = src.index("    // END SOLUTION\n", start) + len("    // END SOLUTION\n")
    block = src[start:end]
    todo = block.splitlines()[0].replace("// BEGIN SOLUTION TODO(1):", "// TODO(1):")
    path = tmp_path / "todo1_left.py"
    path.write_text(src[:start] + todo + "\n    const int kv_end = n_k;\n" + src[end:])
    report = run_check(catalogue.resolve("03"), path, "cpu", seed=7)
    work = _work_case(report)
    assert work is not None and "note: your file still has TODO(1) as the stub has it" in work["message"], work


def test_a_kernel_whose_shared_stores_conflict_fails_with_its_line(tmp_path):
    """02's K tile stored with each warp's lanes along a row of k (blind batch 26's kernel): every store
    of the transposed tile hits one bank 8 ways. Right outputs; the shared-memory wavefronts say it."""
    src = (ROOT / "solutions" / "02_flash_forward.py").read_text()
    line = "            const int j = idx % BLOCK_N, c = (idx / BLOCK_N) * 4;\n"
    assert line in src
    path = tmp_path / "k_lanes.py"
    path.write_text(src.replace(line, "            const int j = idx / (D / 4), c = (idx % (D / 4)) * 4;\n"))
    store = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "k_s[(c + 0) * BLOCK_N + j]" in t)
    report = run_check(catalogue.resolve("02"), path, "cpu", seed=7)
    work = _work_case(report)
    assert not report["passed"] and work is not None
    assert all(c["passed"] for c in report["cases"] if c["kind"] != "work")
    assert any(f"Most are lost at line {n} (8.0-way bank conflicts" in work["message"]
               for n in range(store, store + 4)), work["message"]     # the four stores of the tile


def test_a_grid_of_mostly_idle_blocks_fails_below_the_block_factor():
    """01's grid sized in rows where a block takes four (blind batch 29): 3.9 times the blocks, three
    quarters of them idle."""
    path = ROOT / "tests" / "blind" / "01_online_softmax" / "grid_one_block_per_row_b29.py"
    report = run_check(catalogue.resolve("01"), path, "cpu", seed=7)
    work = _work_case(report)
    assert work is not None and not work["passed"]
    assert "runs 130 blocks, where the finished version's runs 33" in work["message"]
    assert "97 of them read and write no element" in work["message"]


def test_one_key_tile_too_many_shows_in_02s_work_case(tmp_path):
    """02's key-tile loop run while kv_start <= n_k (blind batch 31): one tile past the keys, which reads
    nothing (its loads are guarded) but is stored, multiplied and rescaled. The work case has two key
    tiles, so that tile is half as much shared-memory work again."""
    src = (ROOT / "solutions" / "02_flash_forward.py").read_text()
    loop = "for (int kv_start = 0; kv_start < n_k; kv_start += BLOCK_N) {"
    assert loop in src
    path = tmp_path / "one_more_tile.py"
    path.write_text(src.replace(loop, loop.replace("kv_start < n_k", "kv_start <= n_k")))
    report = run_check(catalogue.resolve("02"), path, "cpu", seed=7)
    work = _work_case(report)
    assert work is not None and not work["passed"]
    assert "(1.50×); the most at line" in work["message"], work["message"]


@pytest.mark.slow
@pytest.mark.parametrize("mid, old, new", [
    ("10_flash_hopper", "const int q_last = min(q_start + BLOCK_M, n_q) - 1;", "const int q_last = n_q - 1;"),
    ("14_backward_hopper", "const int m_begin = causal ? max(0, (k_start - offset) / BLOCK_M * BLOCK_M) : 0;",
     "const int m_begin = 0;"),
])
def test_tiles_a_causal_mask_skips_but_tma_loads_show_in_the_work(tmp_path, mid, old, new):
    """The Hopper modules load their tiles with TMA: its reads through the tensor maps are traced, so
    tiles past the diagonal loaded anyway (blind batch 32's 10) are counted, and placed at the copy."""
    src = (ROOT / "solutions" / f"{mid}.py").read_text()
    assert old in src
    path = tmp_path / "all_tiles.py"
    path.write_text(src.replace(old, new))
    report = run_check(catalogue.resolve(mid[:2]), path, "cpu", seed=7)
    work = _work_case(report)
    assert work is not None and not work["passed"], report
    assert "_map, where the finished version's read" in work["message"], work["message"]
    assert "cp.async.bulk.tensor" in work["message"], work["message"]


def test_a_block_per_16_rows_of_13s_two_tile_group_reads_every_page_twice(tmp_path):
    """13's row blocks counted in 16-row tiles where a block takes two (blind batch 33): the work case
    has 32 rows (4 tokens of a group of 8), so every page is read twice."""
    src = (ROOT / "solutions" / "13_decode_tensor_cores.py").read_text()
    old = "row_blocks = cdiv(rows, 16 * row_tiles)"
    assert old in src
    path = tmp_path / "row_blocks.py"
    path.write_text(src.replace(old, "row_blocks = cdiv(rows, 16)"))
    report = run_check(catalogue.resolve("13"), path, "cpu", seed=7)
    work = _work_case(report)
    assert work is not None and not work["passed"], report
    assert "of k_pages, where the finished version's read" in work["message"] and "(2.00×)" in work["message"]
