"""The grader is a pytest plugin: `python -m pytest -p grader.plugin --exercise ID` runs the same cases
as `grader check`, one test per case, with the grader's own messages as the failures."""
import subprocess
import sys
from pathlib import Path

import pytest

from grader import paths
from grader.wrong import find, write

ROOT = Path(__file__).resolve().parent.parent


def plugin(*args, cwd=ROOT):
    cmd = [sys.executable, "-m", "pytest", "-p", "grader.plugin", "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_solution_passes_one_test_per_case():
    from grader import catalogue
    from grader.tasks import load_task
    n = len(load_task(catalogue.resolve("02")).CASES)
    out = plugin("--exercise", "02", "--backend", "cpu", "--solution", "--seed", "1")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert f"{n} passed" in out.stdout


def test_the_stub_fails_with_the_graders_message(tmp_path):
    stub = tmp_path / "02_flash_forward.py"
    stub.write_text(paths.committed_text(paths.exercise_file("02_flash_forward")))
    out = plugin("--exercise", "02", "--backend", "cpu", "--file", str(stub), "--case", "tiny", "--case", "primes")
    assert out.returncode == 1, out.stdout[-3000:]
    assert "2 failed" in out.stdout
    assert "not implemented yet: no output element was written" in out.stdout
    assert "02_flash_forward.py::tiny" in out.stdout


def test_a_wrong_version_fails_with_its_diagnosis(tmp_path):
    path = write(find("02", "no_final_division"), tmp_path)
    out = plugin("--exercise", "02", "--backend", "cpu", "--file", str(path), "--case", "tiny", "--no-shrink")
    assert out.returncode == 1
    assert "final division by l" in out.stdout


def test_bad_input_is_a_usage_error(tmp_path):
    out = plugin("--exercise", "99", cwd=tmp_path)
    assert out.returncode == 4 and "unknown exercise" in out.stderr
    out = plugin("--exercise", "02", "--case", "nope", cwd=tmp_path)
    assert out.returncode == 4 and "has no case named nope" in out.stderr


def test_without_exercise_the_plugin_stays_out_of_the_way(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_x():\n    assert True\n")
    out = plugin(str(tmp_path), cwd=tmp_path)
    assert out.returncode == 0 and "1 passed" in out.stdout


def test_a_gpu_crash_says_what_its_error_means_and_no_more():
    """An illegal address is an index out of an array; an unspecified launch failure (blind batch 24's
    over-arriving mbarrier on an H200) names nothing, and the message does not say it does."""
    from types import SimpleNamespace
    from grader.plugin import CheckRun
    from grader.spec import Case
    case = Case("tiny", {"B": 1})
    run = SimpleNamespace(stop_reason=None)
    bad = CheckRun._crashed(run, case, "CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access")
    assert "An illegal or misaligned address means an index ran outside an array" in bad.message
    vague = CheckRun._crashed(run, case, "CUDARuntimeError: cudaErrorLaunchFailure: unspecified launch failure")
    assert "illegal" not in vague.message.split("\n", 1)[1] and "names no place or cause" in vague.message
    assert vague.kind == "crash" and run.stop_reason.startswith("not run")
    # An illegal instruction (blind batch 27's named barrier of another count, on an H200) is no address.
    instr = CheckRun._crashed(run, case, "CUDARuntimeError: cudaErrorIllegalInstruction: an illegal instruction was encountered")
    assert "address" not in instr.message and "names no place or cause" in instr.message
