"""`grader grade`: a class of 20 submissions of 02, graded in child processes, reports and re-runs."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader import catalogue, paths
from grader.wrong import build, for_exercise

EX = catalogue.resolve("02")
ENTRY = f"def {EX.entry}(rt, q, k, v, scale):\n"
CASES = 19                      # 02's cases (checked below against the catalogue)


def _solution() -> str:
    return paths.committed_text(paths.solution_file(EX.id))


def _with_body(first_lines: str) -> str:
    """The solution with these lines run first when the entry function is called."""
    src = _solution()
    assert src.count(ENTRY) == 1
    return src.replace(ENTRY, ENTRY + first_lines)


def make_class(folder: Path) -> dict:
    """20 submissions of 02 in `folder`; returns student -> what its verdict must be."""
    folder.mkdir(parents=True)
    expect = {}
    sol = _solution()
    for name in ("ada", "ben"):                                 # one file per student
        (folder / f"{name}.py").write_text(sol)
        expect[name] = "passed"
    for name in ("dana", "eli"):                                # a course folder per student
        (folder / name / "exercises").mkdir(parents=True)
        (folder / name / "exercises" / f"{EX.id}.py").write_text(sol)
        (folder / name / "README.md").write_text("my copy of the course\n")
        expect[name] = "passed"
    (folder / "fay").mkdir()                                    # the exercise file directly inside
    (folder / "fay" / f"{EX.id}.py").write_text(sol)
    expect["fay"] = "passed"
    (folder / "gus").mkdir()                                    # a folder without the exercise
    (folder / "gus" / "notes.txt").write_text("forgot to hand in\n")
    expect["gus"] = "skipped"
    (folder / "hal.py").write_text(paths.committed_text(paths.exercise_file(EX.id)))
    expect["hal"] = "not_implemented"
    for w in for_exercise(EX):                                  # one planted bug each
        (folder / f"wrong_{w.name}.py").write_text(build(w, sol))
        expect[f"wrong_{w.name}"] = "failed"
    (folder / "hang.py").write_text(_with_body("    while True:\n        pass\n"))
    expect["hang"] = "timed_out"
    (folder / "abort.py").write_text(_with_body("    import os\n    os.abort()\n"))
    expect["abort"] = "crashed"
    (folder / "segv.py").write_text(_with_body("    import ctypes\n    ctypes.string_at(0)\n"))
    expect["segv"] = "crashed"
    (folder / "syntax.py").write_text(_with_body("    return (\n"))
    expect["syntax"] = "does_not_import"
    kernel_line = "    const int h_kv = h / (H / H_kv);"
    assert sol.count(kernel_line) == 1
    (folder / "cy.py").write_text(sol.replace(kernel_line, kernel_line.rstrip(";")))
    expect["cy"] = "does_not_compile"
    # Stops the checker itself (its worker's parent), then waits forever: only the per-submission
    # limit of `grade` ends it, and it must take the checker's worker down with it.
    (folder / "stopper.py").write_text(_with_body(
        "    import os, signal, time\n    os.kill(os.getppid(), signal.SIGSTOP)\n"
        "    while True:\n        time.sleep(0.1)\n"))
    expect["stopper"] = "timed_out"
    assert len(expect) == 20, len(expect)
    return expect


def _grade(folder: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), GRADER_STATE_DIR=str(tmp_path / "state"))
    return subprocess.run([sys.executable, "-m", "grader", "grade", str(folder), "--exercise", "02",
                           "--backend", "cpu", "--jobs", "2", "--timeout", "3", "--limit", "25", *extra],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def _digest(out: Path) -> str:
    return json.loads((out / "report.json").read_text())["grader_digest"]


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
            for p in sorted(folder.rglob("*"))}


def _alive(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            found.append(int(pid))
    return found


@pytest.mark.slow
def test_grade_a_class(tmp_path):
    from grader.engine.runner import select_cases
    assert len(select_cases(EX)) == CASES
    subs = tmp_path / "class"
    expect = make_class(subs)
    (tmp_path / "tmp").mkdir()
    before = _snapshot(subs)

    run = _grade(subs, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    out = tmp_path / f"class-grade-{EX.id}"                     # beside the submissions, not inside
    report = json.loads((out / "report.json").read_text())
    rows = report["students"]
    assert set(rows) == set(expect)
    wrong = {f"wrong_{w.name}" for w in for_exercise(EX)}
    for student, status in expect.items():
        row = rows[student]
        assert row["status"] == status, (student, row)
        assert row["passed"] == (status == "passed"), student
        if status == "failed":
            assert row["first_failing_case"] in row["verdict"] and row["cause"], (student, row)
            assert row["cause_group"] and row["message"]
    assert {rows[s]["status"] for s in wrong} == {"failed"}
    assert rows["ada"]["cases_passed"] == rows["ada"]["cases"] == CASES
    assert rows["ada"]["sha256"] == rows["dana"]["sha256"] and len(rows["ada"]["sha256"]) == 64
    assert rows["hal"]["verdict"] == "not implemented"
    assert rows["hang"]["verdict"] == "timed out after 3 s (case one_query_one_key)"
    assert rows["stopper"]["verdict"] == "timed out after 25 s"
    assert rows["abort"]["verdict"].startswith("crashed (SIGABRT)")
    assert rows["segv"]["verdict"].startswith("crashed (SIGSEGV)")
    assert rows["syntax"]["verdict"].startswith("does not import: SyntaxError")
    assert rows["cy"]["verdict"].startswith("does not compile: cy.py:") and "error" in rows["cy"]["verdict"]
    assert "no exercises/02_flash_forward.py" in rows["gus"]["verdict"]
    assert report["seed"] and report["grader_version"]

    with open(out / "report.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 20
    assert {r["student"]: r["passed"] for r in table}["ada"] == "yes"
    assert {r["student"]: r["first_failing_case"] for r in table}["wrong_no_rescale"]
    for name in ("pass_rate_per_case.png", "common_causes.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
    summary = (out / "summary.md").read_text()
    assert "Passed: 5/20" in summary and "not implemented" in summary
    assert "Passed: 5/20" in run.stdout and "Who failed" in run.stdout

    # Nothing written into the submissions, the temporary folder or the course's state; nothing left
    # running (the stopped checker's worker included).
    assert _snapshot(subs) == before
    assert list((tmp_path / "tmp").iterdir()) == []
    assert not (tmp_path / "state").exists()
    assert _alive(str(subs / "stopper.py")) == []

    # Again: every row is reused, with the same seed.
    again = _grade(subs, tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    if _digest(out) != report["grader_digest"]:     # the grader's checks were edited meanwhile (a
        again = _grade(subs, tmp_path)              # checkout shared with others): all re-graded once
    assert again.stdout.count("unchanged, not re-graded") == 19      # all but the skipped folder
    assert json.loads((out / "report.json").read_text())["seed"] == report["seed"]

    # One student fixes their file, another leaves: only the first is re-graded, the second is gone.
    (subs / "hal.py").write_text(_solution())
    (subs / "ben.py").unlink()
    digest = _digest(out)
    third = _grade(subs, tmp_path)
    assert third.returncode == 0, third.stdout + third.stderr
    if _digest(out) != digest:
        pytest.skip("the grader's checks were edited while this test ran")
    assert third.stdout.count("unchanged, not re-graded") == 17
    regraded = [line for line in third.stdout.splitlines()
                if line.startswith("[") and "unchanged" not in line and "skipped" not in line]
    assert len(regraded) == 1 and " hal " in regraded[0] and "passed" in regraded[0], third.stdout
    rows = json.loads((out / "report.json").read_text())["students"]
    assert "ben" not in rows and rows["hal"]["status"] == "passed"
    assert not (out / "results" / "ben.json").exists()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_usage_errors(tmp_path):
    def grade(*args):
        return subprocess.run([sys.executable, "-m", "grader", "grade", *args], capture_output=True,
                              text=True, cwd=tmp_path, timeout=120)
    (tmp_path / "subs").mkdir()
    r = grade(str(tmp_path / "subs"), "--exercise", "99_nothing")
    assert r.returncode == 2 and "unknown exercise" in r.stderr
    r = grade(str(tmp_path / "missing"), "--exercise", "02")
    assert r.returncode == 2 and "no such folder" in r.stderr
    r = grade(str(tmp_path / "subs"), "--exercise", "02", "--out", str(tmp_path / "subs" / "out"))
    assert r.returncode == 2 and "inside the submissions folder" in r.stderr
    r = grade(str(tmp_path / "subs"), "--exercise", "02")
    assert r.returncode == 2 and "no submissions" in r.stderr
    r = grade(str(tmp_path / "subs"))
    assert r.returncode == 2
    assert not (tmp_path / "subs-grade-02_flash_forward").exists()


def test_verdicts_of_a_checker_that_dies_or_prints_nothing_useful():
    from grader.grade import ChildResult, interpret, normalise
    row = interpret(ChildResult(-11, "", "", 1.0, False), 60)
    assert row["status"] == "crashed" and row["verdict"] == "crashed (SIGSEGV)"
    row = interpret(ChildResult(1, "Traceback...\n", "line 1\nline 2\nMemoryError: boom\n", 1.0, False), 60)
    assert row["status"] == "crashed" and row["verdict"].startswith("crashed: ") and "MemoryError" in row["verdict"]
    row = interpret(ChildResult(None, "", "", 60.0, True), 60)
    assert row["verdict"] == "timed out after 60 s"
    row = interpret(ChildResult(2, "", "grader: the gpu runtime could not start\n", 1.0, False), 60)
    assert row["status"] == "grader_error"
    # The same mistake by two students groups together: files, lines and values are taken out.
    a = normalise("alice.py:12: the value 0.5 at o[0, 3] is wrong. More text")
    b = normalise("/x/bob.py:40: the value -2e-05 at o[1, 7] is wrong. Other text")
    assert a == b == "FILE: the value N at o[N, N] is wrong"
