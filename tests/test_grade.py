"""`grader grade`: a class of 20 submissions of 02, graded in child processes, reports and re-runs; a
class of 00 with submissions that run into the limits; the seed, the full causes, identical files."""
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
CASES = 24                      # 02's cases (checked below against the catalogue)


def _solution(ex=EX) -> str:
    return paths.committed_text(paths.solution_file(ex.id))


def _with_body(first_lines: str, ex=EX) -> str:
    """The solution of `ex` with these lines run first when the entry function is called."""
    src, entry = _solution(ex), f"def {ex.entry}(rt, q, k, v, scale):\n"
    assert src.count(entry) == 1
    return src.replace(entry, entry + first_lines)


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
    assert _alive("stopper.py") == []

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
    (tmp_path / "subs" / "a.py").write_text("x = 1\n")
    for var, value in (("GRADER_LIMIT_MEMORY", "lots"), ("GRADER_LIMIT_PROCESSES", "0")):
        r = subprocess.run([sys.executable, "-m", "grader", "grade", str(tmp_path / "subs"), "-e", "02"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=120,
                           env=dict(os.environ, **{var: value}))
        assert r.returncode == 2 and f"${var}" in r.stderr, r.stderr
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


# ---- limits, causes, identical submissions, the seed (module 00: fast checks) --------------------

EX00 = catalogue.resolve("00")
MEMORY_LIMIT = 2 * 2**30        # set low for the test (GRADER_LIMIT_MEMORY); 00's check uses < 1 GB
PROCESS_LIMIT = 16              # GRADER_LIMIT_PROCESSES


def _grade00(folder: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), GRADER_STATE_DIR=str(tmp_path / "state"),
               GRADER_LIMIT_MEMORY=str(MEMORY_LIMIT), GRADER_LIMIT_PROCESSES=str(PROCESS_LIMIT))
    return subprocess.run([sys.executable, "-m", "grader", "grade", str(folder), "--exercise", "00",
                           "--backend", "cpu", "--jobs", "2", "--timeout", "5", *extra],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)


def student_facing_leaks(text: str, *places: Path) -> list[str]:
    """What a student-facing message must never hold: the grading machine's paths (its temporary
    folders, the autograder's root, /autograder) or a literal ID where an exercise id is due."""
    import re
    import tempfile
    roots = {str(p) for p in places} | {tempfile.gettempdir() + "/", "/autograder", "/tmp/"}
    found = [r for r in roots if r in text]
    found += [m.group(0) for m in re.finditer(r"\bcheck-\w{8}|\bgrader-grade-\w+|\bautograder-\w{8}", text)]
    found += [m.group(0) for m in re.finditer(r"(?<![\w-])ID(?![\w-])", text)]
    return found


@pytest.mark.slow
def test_a_class_where_two_submissions_run_into_the_limits(tmp_path):
    """Five submissions of 00: one allocates three times the memory limit, one forks 200 children
    that sleep (bounded here, so that a broken limit cannot take the machine down); both score 0 with
    their reasons, and the other three (the solution, the same program with other comments and
    spacing, a wrong version) are graded as usual. Nothing is left on disk or running."""
    subs = tmp_path / "class"
    subs.mkdir()
    sol = _solution(EX00)
    (subs / "ada.py").write_text(sol)
    ben = _with_body("    # ben was here\n", EX00).replace("__global__", "/* mine */  __global__")
    assert ben != sol
    (subs / "ben.py").write_text(ben)
    (subs / "wrong.py").write_text(build(next(w for w in for_exercise(EX00) if w.name == "gqa_wrong_head"), sol))
    (subs / "hog.py").write_text(_with_body(
        f"    import numpy as np\n    x = np.empty({3 * MEMORY_LIMIT}, dtype=np.uint8)\n", EX00))
    (subs / "forky.py").write_text(_with_body(
        "    import os, time\n    for _ in range(200):\n        if os.fork() == 0:\n"
        "            time.sleep(60)\n            os._exit(0)\n", EX00))
    (tmp_path / "tmp").mkdir()

    run = _grade00(subs, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    out = tmp_path / f"class-grade-{EX00.id}"
    report = json.loads((out / "report.json").read_text())
    rows = report["students"]
    assert {s: rows[s]["status"] for s in rows} == {"ada": "passed", "ben": "passed", "wrong": "failed",
                                                    "hog": "failed", "forky": "over_limit"}
    assert rows["wrong"]["cases_passed"] == 20 and rows["wrong"]["first_failing_case"] == "gqa_4_to_1"
    assert rows["hog"]["cases_passed"] == 0
    assert "MemoryError" in rows["hog"]["cause"] and "the memory limit is 2 GiB per process" in rows["hog"]["cause"]
    assert rows["forky"]["cases_passed"] == 0
    assert f"past the limit of {PROCESS_LIMIT}" in rows["forky"]["cause"]
    assert "limits: 2 GiB of memory per process" in run.stdout

    # summary.md: every failing student's full first cause (never cut), and ada and ben as one program.
    summary = (out / "summary.md").read_text()
    who = summary.split("## Who failed", 1)[1].split("##", 1)[0]
    full = ("query head h reads the wrong kv head of k and v: h % Hkv (the output matches it). With "
            "grouped-query attention, H / Hkv consecutive query heads share one kv head: h_kv = h / (H / Hkv).")
    assert f"- **wrong**: failed at case gqa_4_to_1 (20/22 cases pass): {full}" in who
    assert "…" not in who and "MemoryError" in who and "past the limit of 16" in who
    identical = summary.split("## Identical submissions", 1)[1]
    assert "- **ada**, **ben** (passed)" in identical and "wrong" not in identical
    assert report["summary"]["identical"] == [{"students": ["ada", "ben"], "verdicts": ["passed"]}]

    # What a student reads names their own file, never the grader's folders.
    for student, row in rows.items():
        for key in ("verdict", "cause", "message"):
            assert not student_facing_leaks(row[key] or "", tmp_path), (student, key, row[key])
    assert "hog.py" in rows["hog"]["message"]

    # The seed: derived from the exercise id, the same without --seed on every run.
    from grader.grade import assignment_seed
    assert report["seed"] == assignment_seed(EX00.id)

    # Nothing left: no scratch folder, no process of the fork loop.
    assert list((tmp_path / "tmp").iterdir()) == []
    assert _alive("forky.py") == []
    assert list(subs.iterdir()) and not (subs / "__pycache__").exists()


def test_fingerprints_ignore_comments_and_whitespace_only(tmp_path):
    from grader.grade import fingerprint, identical_groups
    src = ('KERNEL = r"""\n// the scores\n__global__ void f(float* x) { /* one */ x[0] = 1.0f; // done\n'
           '  const char* s = "// kept";\n}\n"""\n\ndef f(rt, x):  # launch\n    return x\n')
    same = src.replace("// the scores\n", "").replace("  # launch", "").replace("x[0] = 1.0f;", "x[0]=1.0f;")
    assert fingerprint(src) == fingerprint(same)
    assert fingerprint(src) != fingerprint(src.replace("// kept", "// other"))       # a string's text
    assert fingerprint(src) != fingerprint(src.replace("1.0f", "2.0f"))
    assert fingerprint("def f(:\n  # broken\n") == fingerprint("def f(:\n")             # not Python: still
    files = {}
    for name, text in (("c", src), ("a", same), ("b", src.replace("1.0f", "2.0f")), ("d", src)):
        files[name] = tmp_path / f"{name}.py"
        files[name].write_text(text)
    assert identical_groups(files) == [["a", "c", "d"]]


def test_the_limits_in_words_and_from_the_environment(monkeypatch):
    from grader.limits import MEMORY_BYTES, Limits, parse_size, user_threads
    assert parse_size("1.5G") == 3 * 2**29 and parse_size("64M") == 2**26 and parse_size("4096") == 4096
    monkeypatch.setenv("GRADER_LIMIT_OUTPUT", "8M")
    limits = Limits.for_check("gpu", 99.5)
    assert (limits.memory, limits.cpu, limits.output) == (MEMORY_BYTES, 100, 8 * 2**20)
    assert limits.describe().startswith("4 GiB of memory per process (data), 100 s of CPU time")
    assert user_threads() >= 1                       # what RLIMIT_NPROC counts, for users other than root


def test_a_check_stopped_by_a_limit_reads_as_one():
    import signal
    from grader.grade import ChildResult, interpret
    from grader.limits import Limits
    limits = Limits(2**30, 60, 16, 2**20, "cpu")
    row = interpret(ChildResult(None, "", "", 1.0, False, ("processes", "it ran 40 processes at once, past "
                                "the limit of 16 (a fork in a loop?), and was stopped"), limits), 60)
    assert row["status"] == "over_limit" and row["cause_group"] == "over the limit on processes"
    row = interpret(ChildResult(-signal.SIGXCPU, "", "", 1.0, False, None, limits), 60)
    assert row["status"] == "over_limit" and "CPU-time limit, 60 s" in row["cause"]
    report = {"passed": False, "cases": [{"name": "tiny", "passed": False, "kind": "error",
                                          "message": "your code raised OSError: [Errno 27] File too large"}]}
    row = interpret(ChildResult(1, json.dumps(report), "", 1.0, False, None, limits), 60)
    assert row["status"] == "failed" and "the output limit is 1 MiB" in row["cause"]
