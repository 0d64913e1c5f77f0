"""The grader's command line: the contract in docs/design.md."""
import json
import subprocess
import sys

import pytest

from grader import catalogue
from grader.cli import main


@pytest.fixture(autouse=True)
def private_state(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADER_STATE_DIR", str(tmp_path / "state"))


@pytest.mark.parametrize("name", ["02_flash_forward", "02", "2", "flash_forward"])
def test_ids_resolve_in_every_spelling(name):
    assert catalogue.resolve(name).id == "02_flash_forward"


def test_list_shows_the_course_in_order(capsys):
    assert main(["list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ids = [r["id"] for r in data["exercises"]]
    assert ids[:5] == ["00_naive_attention", "01_online_softmax", "02_flash_forward",
                       "03_flash_causal", "04_splitkv_decode"]
    assert data["next"] == "00_naive_attention"
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    assert text.index("00_naive_attention") < text.index("04_splitkv_decode")
    assert "→ 00_naive_attention" in text


def test_hints_come_one_at_a_time_and_are_remembered(capsys):
    ex = catalogue.resolve("01")
    for n in range(1, len(ex.hints) + 1):
        assert main(["hint", "01"]) == 0
        assert f"Hint {n}/{len(ex.hints)}" in capsys.readouterr().out
    assert main(["hint", "01"]) == 0
    assert "All" in capsys.readouterr().out
    assert main(["hint", "01", "2"]) == 0
    assert ex.hints[1] in capsys.readouterr().out
    assert main(["hint", "01", "99"]) == 2


def test_usage_errors_exit_2_with_a_message(capsys, tmp_path):
    assert main(["check", "99_nothing"]) == 2
    assert "unknown exercise" in capsys.readouterr().err
    assert main(["check", "00", "--file", str(tmp_path / "missing.py")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["check", "00", "--backend", "tpu"]) == 2
    assert main(["frobnicate"]) == 2


@pytest.mark.parametrize("body, error, line", [
    ("def naive_attention(rt, q, k, v, scale)\n    pass\n", "SyntaxError", 2),
    ("SCALE = undefined_name\n", "NameError", 2),
])
def test_a_file_that_does_not_import_is_a_failed_check_not_a_usage_error(tmp_path, capsys, body,
                                                                          error, line):
    path = tmp_path / "attempt.py"
    path.write_text("import numpy as np\n" + body)
    rc = main(["check", "00", "--file", str(path), "--backend", "cpu", "--seed", "1"])
    out = capsys.readouterr().out
    assert rc == 1, out                               # the submission's failure, not exit 2
    assert "✗ attempt.py does not import" in out and error in out
    assert f'File "{path}", line {line}' in out
    # Only the student's frames: none of the grader's, importlib's or pytest's.
    assert "importlib" not in out and "frozen" not in out and "_pytest" not in out
    assert "grader/" not in out and "[not run]" not in out


def test_a_file_without_the_entry_function_is_a_failed_check(tmp_path, capsys):
    path = tmp_path / "attempt.py"
    path.write_text("def something_else(rt):\n    pass\n")
    rc = main(["check", "00", "--file", str(path), "--backend", "cpu", "--seed", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and report["error"] is None and not report["passed"]
    assert report["cases"][0]["kind"] == "import_error"
    assert "must define a function naive_attention" in report["cases"][0]["message"]


def test_the_stubs_report_is_one_line(tmp_path, capsys):
    from grader import paths
    stub = tmp_path / "00_naive_attention.py"
    stub.write_text(paths.committed_text(paths.exercise_file("00_naive_attention")))
    rc = main(["check", "00", "--file", str(stub), "--backend", "cpu", "--seed", "1"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert rc == 1
    assert len(lines) == 2 and lines[0].startswith("grader check 00_naive_attention")
    assert lines[1].startswith("✗ not implemented yet")


def test_console_entry_point_runs():
    out = subprocess.run([sys.executable, "-m", "grader", "list"], capture_output=True, text=True)
    assert out.returncode == 0 and "01_online_softmax" in out.stdout


def test_stubs_check_reports_up_to_date(capsys):
    assert main(["stubs", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_doctor_names_the_runtime(capsys):
    rc = main(["doctor"])
    out = capsys.readouterr().out
    assert "The grader will use the" in out and "Python" in out
    assert rc in (0, 2)


@pytest.mark.slow
def test_watch_rechecks_when_the_file_is_saved(tmp_path):
    """Edit a file under a running `grader watch`: the stub's verdict, then the solution's."""
    import os
    import queue
    import threading
    import time

    from grader import paths
    attempt = tmp_path / "attempt.py"
    attempt.write_text(paths.committed_text(paths.exercise_file("01_online_softmax")))
    env = dict(os.environ, GRADER_STATE_DIR=str(tmp_path / "state"), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "grader", "watch", "01", "--file", str(attempt),
                             "--backend", "cpu", "--interval", "0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout], daemon=True).start()

    def wait_for(text, timeout=180):
        seen = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            seen.append(line)
            if text in line:
                return
        raise AssertionError(f"{text!r} never appeared:\n{''.join(seen)[-3000:]}")
    try:
        wait_for("not implemented yet")
        wait_for("watching attempt.py")
        attempt.write_text(paths.committed_text(paths.solution_file("01_online_softmax")))
        wait_for("passed, 0 failed")
        wait_for("watching attempt.py")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_version_and_clean(tmp_path, monkeypatch, capsys):
    from grader.cli import main
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("grader ")
    import tempfile
    monkeypatch.setenv("GRADER_CACHE", str(tmp_path))
    (tmp_path / "tmp" / "grader-plot-old").mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))     # not the machine's own temp folder
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "kernel.so").write_bytes(b"x" * 2048)
    (tmp_path / "keep.txt").write_text("not the grader's")
    assert main(["clean", "--dry-run"]) == 0
    assert "would remove" in capsys.readouterr().out and (tmp_path / "cpu").exists()
    assert main(["clean"]) == 0
    assert "removed" in capsys.readouterr().out
    assert not (tmp_path / "cpu").exists() and (tmp_path / "keep.txt").exists()
    assert not (tmp_path / "tmp" / "grader-plot-old").exists()
    assert main(["clean"]) == 0
    assert "nothing to remove" in capsys.readouterr().out
