"""`grader autograder`: the Gradescope zip and the GitHub Classroom template, run end to end as the
platforms run them (offline, on the CPU emulator), and their results checked against the formats."""
import base64
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# The dev extra installs both; a machine without them (a GPU box with only the runtime) skips.
jsonschema = pytest.importorskip("jsonschema")
yaml = pytest.importorskip("yaml")

from grader import paths
from grader.autograder import make_plan, split_points
from grader.autograder.github import step_id
from grader.autograder.gradescope import module_tests
from grader.autograder.submission import Found, gather, locate
from grader.cli import main
from grader.release import left_out
from grader.wrong import build, find
from test_grade import student_facing_leaks
from test_release import holders, solution_only_lines

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((Path(__file__).with_name("gradescope_results.schema.json")).read_text())
EX = "00_naive_attention"
ENTRY = "def naive_attention(rt, q, k, v, scale):\n"
SEED = 7
HIDDEN = "huge_logits"
# The limits of a submission's check, set low so that each is hit within seconds (grader/limits.py).
LOW_LIMITS = {"GRADER_LIMIT_MEMORY": "2G", "GRADER_LIMIT_PROCESSES": "16", "GRADER_LIMIT_OUTPUT": "8M"}


def solution(ex_id=EX) -> str:
    return paths.committed_text(paths.solution_file(ex_id))


def stub(ex_id=EX) -> str:
    return paths.committed_text(paths.exercise_file(ex_id))


def with_first_lines(lines: str) -> str:
    src = solution()
    assert src.count(ENTRY) == 1
    return src.replace(ENTRY, ENTRY + lines)


def wrong() -> str:
    return build(find(EX, "gqa_wrong_head"), solution())


def valid(results: dict) -> dict:
    jsonschema.validate(results, SCHEMA)
    for t in results.get("tests", []):
        assert 0 <= t["score"] <= t["max_score"] + 1e-9, t
        assert t["score"] == (t["max_score"] if t["status"] == "passed" else 0), t
    return results


# ---- Gradescope, end to end ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def gradescope(tmp_path_factory):
    """The zip, unpacked as Gradescope lays it out (AUTOGRADER_ROOT for /autograder), setup.sh run
    without its network part. Returns (zip path, autograder root, environment)."""
    tmp = tmp_path_factory.mktemp("gradescope")
    out = tmp / "out" / "autograder.zip"
    assert main(["autograder", "gradescope", "00", "--out", str(out), "--seed", str(SEED), "--timeout", "5",
                 "--after-due-date", f"00:{HIDDEN}"]) == 0
    ag = tmp / "autograder"
    for d in ("source", "submission", "results"):
        (ag / d).mkdir(parents=True)
    with zipfile.ZipFile(out) as z:
        for info in z.infolist():              # as Gradescope does: files with their modes
            target = ag / "source" / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(info))
            target.chmod((info.external_attr >> 16) & 0o777 or 0o644)
    shutil.copy2(ag / "source" / "run_autograder", ag / "run_autograder")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADER_", "PYTHONPATH"))}
    env.update(AUTOGRADER_ROOT=str(ag), HOME=str(tmp / "home"), FLASH_AUTOGRADER_SKIP_INSTALL="1",
               FLASH_AUTOGRADER_PYTHON=sys.executable, **LOW_LIMITS)
    setup = subprocess.run(["bash", str(ag / "source" / "setup.sh")], cwd=ag / "source", env=env,
                           capture_output=True, text=True, timeout=600)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert "warm 00_naive_attention: the stub is not implemented" in setup.stdout
    return out, ag, env


def submit(gradescope, files: dict) -> dict:
    """Run run_autograder on a submission of `files` ({relative path: text or bytes}); results.json."""
    _, ag, env = gradescope
    for d in ("submission", "results"):
        shutil.rmtree(ag / d)
        (ag / d).mkdir()
    for rel, content in files.items():
        p = ag / "submission" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    r = subprocess.run([str(ag / "run_autograder")], cwd=ag, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return valid(json.loads((ag / "results" / "results.json").read_text()))


def test_the_zip_holds_the_scripts_and_the_release_but_no_solution(gradescope):
    out, ag, _ = gradescope
    with zipfile.ZipFile(out) as z:
        names = z.namelist()
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
    for name in ("setup.sh", "run_autograder"):
        assert name in names and modes[name] & stat.S_IXUSR, name
    assert {"autograder.json", "constraints.txt", "README.md", "course/.course-release",
            f"course/exercises/{EX}.py", "course/grader/autograder/gradescope.py"} <= set(names)
    assert not [n for n in names if n.startswith("course/solutions/") or
                (n.startswith("course/grader/tasks/") and n.endswith("/wrong.py"))]
    lines = solution_only_lines()
    assert holders(ROOT / "solutions", lines)              # the check has teeth ...
    leaked = holders(ag / "source", lines)                  # ... and the zip gives nothing away
    assert not leaked, "the autograder gives solutions away:\n" + "\n".join(leaked[:20])
    assert "grader autograder" not in (ag / "source" / "course" / "README.md").read_text()
    pins = (ag / "source" / "constraints.txt").read_text()
    for dist in ("numpy", "pytest", "matplotlib"):
        assert f"\n{dist}==" in pins, dist
    plan = json.loads((ag / "source" / "autograder.json").read_text())
    assert plan["seed"] == SEED and [m["id"] for m in plan["modules"]] == [EX]
    assert (ag / "source" / ".python").read_text().strip() == sys.executable
    assert list((ag / "kernel-cache" / "cpu").glob("emu-runtime-*.o"))      # setup.sh warmed it


def test_the_solution_scores_full(gradescope):
    r = submit(gradescope, {f"{EX}.py": solution()})
    assert r["score"] == 10 and all(t["status"] == "passed" for t in r["tests"])
    assert len(r["tests"]) == len(make_plan(["00"]).modules[0].cases)
    assert {t["visibility"] for t in r["tests"] if t["name"].endswith(HIDDEN)} == {"after_due_date"}
    shown = len(r["tests"]) - sum(t["name"].endswith(HIDDEN) for t in r["tests"])
    assert "00_naive_attention: " in r["output"] and f"all {shown} tests pass; 1 more test shown later" in r["output"]


def test_the_stub_scores_0_not_implemented(gradescope):
    r = submit(gradescope, {f"{EX}.py": stub()})
    assert r["score"] == 0
    assert all("not implemented yet" in t["output"] for t in r["tests"])
    assert "not implemented yet" in r["output"]


def test_a_wrong_version_scores_partly_with_its_cause(gradescope):
    r = submit(gradescope, {f"{EX}.py": wrong()})
    assert 0 < r["score"] < 10
    failed = [t for t in r["tests"] if t["status"] == "failed"]
    assert failed and all(t["score"] == 0 for t in failed)
    first = failed[0]["output"]
    assert "likely cause: query head h reads the wrong kv head" in first
    assert "Smallest failing shape found" in first
    # The file was handed in under its own name: the replay runs the student's exercises/ID.py.
    assert f"Replay it: grader check {EX} --backend cpu --seed {SEED} --shape " in first
    assert f"`grader check {EX} --backend cpu --seed {SEED}`" in r["output"]
    assert "tests failed, the first: " + failed[0]["name"].split(": ")[1] in r["output"]


def _zip(files: dict) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


@pytest.mark.parametrize("upload", ["zip", "renamed"])
def test_a_zip_or_another_name_is_found(gradescope, upload):
    files = ({"submission.zip": _zip({"my-course/exercises/00_naive_attention.py": solution(),
                                      "__MACOSX/my-course/exercises/._00_naive_attention.py": "junk",
                                      "my-course/notes.txt": "hi"})}
             if upload == "zip" else {"attempt (2).py": solution()})
    r = submit(gradescope, files)
    assert r["score"] == 10, r["output"]
    shown = "submission.zip: my-course/exercises/00_naive_attention.py" if upload == "zip" else "attempt (2).py"
    assert f"({shown})" in r["output"]
    replay = f"grader check {EX} --backend cpu" if upload == "zip" else f"grader check {EX} --file 'attempt (2).py'"
    assert replay in r["output"]


@pytest.mark.parametrize("what, files, words", [
    ("missing", {"README.txt": "I could not finish"}, "no file for 00_naive_attention in your submission"),
    ("crash", {f"{EX}.py": with_first_lines("    import os\n    os.abort()\n")}, "died (exit code -6)"),
    ("hang", {f"{EX}.py": with_first_lines("    while True:\n        pass\n")}, "did not finish within 5 s"),
    ("compile", {f"{EX}.py": solution().replace("int h_kv = h / (H / H_kv);", "int h_kv = h / (H / H_kv)", 1)},
     "did not compile"),
    ("import", {f"{EX}.py": with_first_lines("    return (\n")}, "does not import"),
    # The limits: each scores 0 with its reason, as in `grader grade`.
    ("memory", {f"{EX}.py": with_first_lines("    import numpy as np\n    x = np.empty(6 * 2**30, np.uint8)\n")},
     "the memory limit is 2 GiB per process"),
    ("fork", {f"{EX}.py": with_first_lines("    import os, time\n    for _ in range(200):\n"
                                            "        if os.fork() == 0:\n            time.sleep(60)\n"
                                            "            os._exit(0)\n")}, "past the limit of 16"),
    ("print", {f"{EX}.py": with_first_lines("    while True:\n        print('spam ' * 200)\n")},
     "the output limit is 8 MiB"),
])
def test_a_broken_submission_scores_0_and_says_why(gradescope, what, files, words):
    r = submit(gradescope, files)
    assert r["score"] == 0 and r["tests"], what
    assert words in r["tests"][0]["output"], r["tests"][0]["output"]
    assert all(t["status"] == "failed" for t in r["tests"])


def test_results_json_before_the_checks_and_when_the_time_runs_out():
    plan = make_plan(["00"], seed=1)
    m = plan.modules[0]
    found = Found(Path("/autograder/submission/bob.py"), "bob.py")
    tests, line, replay = module_tests(m, found=found, row=None, seed=1)     # the budget ran out before it
    assert all(t["score"] == 0 and "time ran out" in t["output"] for t in tests)
    assert "0/10 points" in line and replay == f"grader check {EX} --file bob.py --backend cpu --seed 1"
    tests, line, replay = module_tests(m, found=None, row=None, seed=1)
    assert "upload exercises/00_naive_attention.py" in tests[0]["output"] and replay is None
    # The seed: derived from the modules graded unless --seed gives it, the same on every build.
    assert make_plan(["00", "01"]).seed == make_plan(["01_online_softmax", "00"]).seed != make_plan(["00"]).seed


def test_the_schema_has_teeth():
    ok = {"score": 1, "tests": [{"name": "a", "score": 1, "max_score": 1, "visibility": "visible"}]}
    jsonschema.validate(ok, SCHEMA)
    for bad in ({"score": 1, "tests": [{"name": "a", "score": 1, "visibility": "soon"}]},
                {"score": 1, "execution_time": -1},
                {"score": 1, "tests": [], "max_points": 3},
                {"tests": [{"name": "a", "max_score": 1}]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, SCHEMA)


# ---- points, visibility, usage errors ------------------------------------------------------------

def test_points_split_exactly_and_a_points_file_overrides(tmp_path):
    assert split_points(10, 18) == [0.5] * 2 + [0.5625] * 16 and sum(split_points(10, 18)) == 10
    assert sum(split_points(20, 19)) == 20 and split_points(0.3, 2) == [0.15, 0.15]
    f = tmp_path / "points.json"
    f.write_text(json.dumps({"00": {"points": 12, "visibility": "after_published",
                                    "cases": {"tiny": 3, HIDDEN: {"visibility": "hidden"}}}, "01": 4}))
    plan = make_plan(["00", "01_online_softmax"], points_file=f)
    m00, m01 = plan.modules
    cases = {c.name: c for c in m00.cases}
    assert m00.points == 12 and cases["tiny"].points == 3
    assert abs(sum(c.points for c in m00.cases) - 12) < 1e-9 and abs(sum(c.points for c in m01.cases) - 4) < 1e-9
    assert cases[HIDDEN].visibility == "hidden" and cases["tiny"].visibility == "after_published"
    assert {c.visibility for c in m01.cases} == {"visible"}


@pytest.mark.parametrize("points, words", [
    ({"99": 10}, "unknown exercise"),
    ({"00": {"cases": {"nope": 1}}}, "has no case 'nope'"),
    ({"00": -1}, "0 or more"),
    ({"00": {"points": 2, "cases": {"tiny": 3}}}, "given 3 points, but the module has 2"),
    ({"00": {"visibility": "soon"}}, "must be one of"),
    ({"00": {"pionts": 3}}, "unknown keys pionts"),
    ("not json", "not valid JSON"),
])
def test_a_bad_points_file_is_a_usage_error(tmp_path, capsys, points, words):
    f = tmp_path / "points.json"
    f.write_text(points if isinstance(points, str) else json.dumps(points))
    assert main(["autograder", "gradescope", "00", "--points", str(f), "--out", str(tmp_path / "a.zip")]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "a.zip").exists()


def test_usage_errors_exit_2(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cases = [
        (["gradescope", "42", "--out", str(tmp_path / "a.zip")], "unknown exercise '42'"),
        (["gradescope", "00", "--out", str(tmp_path / "a.tar")], "give the zip file to write"),
        (["gradescope", "00", "--out", str(blocker / "a.zip")], "cannot write there"),
        (["gradescope", "00", "--out", str(ROOT / "ag.zip")], "inside the course"),
        (["gradescope", "00", "--out", str(tmp_path / "a.zip"), "--after-due-date", "00:nope"], "give ID:CASE"),
        (["gradescope", "00", "--out", str(tmp_path / "a.zip"), "--after-due-date", "01:one_element"],
         "not among the modules"),
        (["gradescope", "00", "--out", str(tmp_path / "a.zip"), "--timeout", "0"], "--timeout must be"),
        (["gradescope", "00", "--points", str(tmp_path / "none.json"), "--out", str(tmp_path / "a.zip")],
         "cannot read it"),
        (["github", "00", "--out", str(tmp_path / "repo"), "--after-due-date", "00:tiny"], "Gradescope only"),
        (["github", "00", "--out", str(blocker)], "not an empty folder"),
    ]
    for argv, words in cases:
        assert main(["autograder", *argv]) == 2, argv
        assert words in capsys.readouterr().err, argv
    assert main(["autograder", "gradescope", "00"]) == 2                  # --out is required
    assert not (ROOT / "ag.zip").exists() and not (tmp_path / "a.zip").exists()


def test_finding_a_modules_file(tmp_path):
    sub, work = tmp_path / "sub", tmp_path / "work"
    (sub / "old").mkdir(parents=True)
    (sub / "exercises").mkdir()
    (sub / "old" / f"{EX}.py").write_text("x = 1\n")
    (sub / "exercises" / f"{EX}.py").write_text(ENTRY)
    (sub / "try01.py").write_text("def online_softmax(rt, x):\n    pass\n")
    (sub / "other.py").write_text("def online_softmax(rt, x):\n    pass\n")
    (sub / ".hidden.py").write_text(ENTRY)
    (sub / "evil.zip").write_bytes(_zip({"../escaped.py": ENTRY, "ok/flash.py": "def flash_forward(rt):\n"}))
    files, notes = gather(sub, work)
    assert not (tmp_path / "escaped.py").exists() and not notes
    f = locate(EX, "naive_attention", files)
    assert f.shown == f"exercises/{EX}.py" and "several files could be 00_naive_attention" in f.note
    assert locate(EX, "naive_attention", files, stub=ENTRY).shown == f"old/{EX}.py"   # not the stub
    f = locate("01_online_softmax", "online_softmax", files)
    assert f.shown == "try01.py" and "other.py" in f.note                    # named after the module
    assert locate("02_flash_forward", "flash_forward", files).shown == "evil.zip: ok/flash.py"
    assert locate("03_flash_causal", "flash_causal", files) is None
    (sub / "broken.zip").write_bytes(b"not a zip")
    _, notes = gather(sub, tmp_path / "work2")
    assert notes and "broken.zip could not be unpacked" in notes[0]


# ---- GitHub Classroom, its commands run as the runner runs them --------------------------------------

@pytest.fixture(scope="module")
def github(tmp_path_factory):
    out = tmp_path_factory.mktemp("github") / "template"
    assert main(["autograder", "github", "00", "01", "--out", str(out), "--seed", str(SEED), "--timeout", "5"]) == 0
    flow = yaml.safe_load((out / ".github" / "workflows" / "classroom.yml").read_text())
    return out, flow


def _expand(text: str, contexts: dict) -> str:
    """A workflow expression `${{ a.b.c }}` as the runner expands it, from nested dicts."""
    import re

    def value(m):
        v = contexts
        for key in m.group(1).strip().split("."):
            v = v.get(key, "") if isinstance(v, dict) else ""
        return str(v)
    return re.sub(r"\$\{\{(.*?)\}\}", value, text)


def run_workflow(template: Path, flow: dict, tmp_path: Path) -> dict:
    """Run the workflow's steps after the install (done here already: this environment has the
    course's dependencies) as GitHub's runner would: each `run` in bash in the checkout, with the job's
    environment, RUNNER_TEMP and a GITHUB_OUTPUT file of its own; then read the grading reporter's
    variables as the reporter does (classroom-resources/autograding-grading-reporter: src/main.js
    decodes each runner's RUNNER_RESULTS from base64 JSON; src/notify-classroom.js sends GitHub
    Classroom the sum of the tests' `score` over the sum of the runners' `max_score`)."""
    job = flow["jobs"]["run-autograding-tests"]
    temp = tmp_path / "runner-temp"
    shutil.rmtree(temp, ignore_errors=True)
    temp.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRADER_", "PYTHONPATH"))}
    env.update(job.get("env", {}), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(template), GRADER_ROOT=str(template), HOME=str(tmp_path / "home"),
               RUNNER_TEMP=str(temp), TMPDIR=str(temp), **LOW_LIMITS)
    steps = {"steps": {}, "runner": {"temp": str(temp)}}
    logs, codes = {}, {}
    for step in job["steps"]:
        if "run" not in step or "id" not in step:
            continue
        assert step.get("continue-on-error") is True and 1 <= step["timeout-minutes"] <= 60, step
        output = tmp_path / f"{step['id']}.output"
        output.write_text("")
        r = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=template,
                           env=dict(env, GITHUB_OUTPUT=str(output)), capture_output=True, text=True,
                           timeout=60 * step["timeout-minutes"])
        logs[step["id"]], codes[step["id"]] = r.stdout + r.stderr, r.returncode
        outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
        steps["steps"][step["id"]] = {"outputs": outputs}
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    artifact = Path(_expand(upload["with"]["path"], steps))
    reporter = job["steps"][-1]
    assert reporter["uses"] == "classroom-resources/autograding-grading-reporter@v1"
    variables = {k: _expand(v, steps) for k, v in reporter["env"].items()}
    results = {}
    for runner in reporter["with"]["runners"].split(","):
        results[runner.strip()] = json.loads(base64.b64decode(variables[f"{runner.strip().upper()}_RESULTS"]))
    counted = [r for r in results.values() if r["max_score"]]
    return {"score": sum(t["score"] for r in counted for t in r["tests"]),
            "max": sum(r["max_score"] for r in counted), "logs": logs, "codes": codes, "results": results,
            "artifact": sorted(p.name for p in artifact.iterdir()) if artifact.is_dir() else []}


def test_the_template_is_the_release_with_a_classroom_workflow(github):
    out, flow = github
    assert not (out / "solutions").exists() and (out / ".course-release").is_file()
    job = flow["jobs"]["run-autograding-tests"]
    steps = job["steps"]
    graders = [s for s in steps if "run" in s and "id" in s]
    assert [s["name"] for s in graders] == [EX, "01_online_softmax"]
    assert [s["id"] for s in graders] == [step_id(EX), step_id("01_online_softmax")]
    for s in graders:
        assert s["run"].startswith(f"python -m grader.autograder.github run {s['name']} ")
    plan = json.loads((out / ".github" / "classroom" / "autograding.json").read_text())
    assert plan["seed"] == SEED and [m["points"] for m in plan["modules"]] == [10, 10]
    upload = next(s for s in steps if s.get("uses") == "actions/upload-artifact@v4")
    assert upload["if"] == "always()" and upload["with"]["name"] == "grader-reports"
    reporter = steps[-1]
    assert reporter["uses"] == "classroom-resources/autograding-grading-reporter@v1"
    assert reporter["with"]["runners"].split(",") == [s["id"] for s in graders]
    assert reporter["env"] == {f"{s['id'].upper()}_RESULTS": f"${{{{steps.{s['id']}.outputs.result}}}}"
                               for s in graders}
    install = next(s for s in steps if s.get("name") == "Install the course")["run"]
    assert "'.[nvrtc]'" in install and (out / ".github" / "classroom" / "constraints.txt").is_file()
    assert flow["on"] == ["push", "repository_dispatch"] and job["env"]["GRADER_BACKEND"] == "cpu"
    leaked = holders(out, solution_only_lines())
    assert not leaked, leaked[:5]
    # Only the graded modules: 02's stub (which starts from 01's answer) is not handed out.
    assert sorted(p.stem for p in (out / "exercises").glob("*.py")) == [EX, "01_online_softmax"]


def test_a_template_whose_later_stub_holds_a_graded_answer_is_refused(tmp_path, capsys):
    assert main(["autograder", "github", "02", "03", "--out", str(tmp_path / "repo")]) == 2
    err = capsys.readouterr().err
    assert "exercises/03_flash_causal.py holds" in err and "--allow-answer-in-stubs" in err
    assert not (tmp_path / "repo").exists()


def test_the_workflow_scores_each_case_as_gradescope_does(github, gradescope, tmp_path):
    out, flow = github
    ex = out / "exercises"
    kept = {p.name: p.read_text() for p in ex.glob("0[01]_*.py")}
    m00, m01 = step_id(EX), step_id("01_online_softmax")
    try:
        run = run_workflow(out, flow, tmp_path)                           # as the template comes: stubs
        assert (run["score"], run["max"]) == (0, 20) and run["codes"] == {m00: 1, m01: 1}
        assert "not implemented yet" in run["logs"][m00]
        assert [t["status"] for t in run["results"][m00]["tests"]] == ["fail"] * len(make_plan(["00"]).modules[0].cases)
        for i in (EX, "01_online_softmax"):
            (ex / f"{i}.py").write_text(solution(i))
        run = run_workflow(out, flow, tmp_path)
        assert (run["score"], run["max"]) == (20, 20) and run["codes"] == {m00: 0, m01: 0}
        assert {r["status"] for r in run["results"].values()} == {"pass"}
        (ex / f"{EX}.py").write_text(wrong())
        run = run_workflow(out, flow, tmp_path)
        got = sum(t["score"] for t in run["results"][m00]["tests"])
        assert 0 < got < 10 and run["max"] == 20 and abs(run["score"] - (got + 10)) < 1e-9
        failed = [t for t in run["results"][m00]["tests"] if t["status"] == "fail"]
        assert [t["name"] for t in failed] == [f"{EX}: gqa_4_to_1", f"{EX}: custom_scale"]
        assert "likely cause: query head h reads the wrong kv head" in failed[0]["message"]
        # The log reads as `grader check` does: every case, the first failure, its cause, the replay.
        log = run["logs"][m00]
        assert f"grader check {EX} · exercises/{EX}.py · backend cpu · seed {SEED}" in log
        assert "First failure: gqa_4_to_1" in log and "likely cause: query head h" in log
        assert f"Replay it: grader check {EX} --backend cpu --seed {SEED} --shape " in log
        assert f"{EX}: {got:g}/10 points" in log and '"cases"' not in log          # no JSON blob
        assert run["artifact"] == sorted(f"{i}.{kind}.json" for i in (EX, "01_online_softmax")
                                         for kind in ("check", "results"))
        # The same file scores the same on Gradescope (same seed, same cases, one scoring function).
        r = submit(gradescope, {f"{EX}.py": wrong()})
        assert abs(r["score"] - got) < 1e-9, (r["score"], got)
        # No student-facing message names the runner's folders or a literal ID.
        for text in [*run["logs"].values(), json.dumps(run["results"])]:
            assert not student_facing_leaks(text, out, tmp_path), student_facing_leaks(text, out, tmp_path)
    finally:
        for name, text in kept.items():
            (ex / name).write_text(text)


def test_no_student_facing_message_names_the_graders_paths(gradescope):
    """What a Gradescope student reads (results.json: the output, every test's output) names their own
    file and complete commands: never /autograder, a temporary folder, or a literal ID."""
    _, ag, _ = gradescope
    for files in ({f"{EX}.py": wrong()},
                  {f"{EX}.py": with_first_lines("    raise ValueError('boom')\n")},
                  {"bob.py": with_first_lines("    return (\n")},
                  {"bob.py": solution().replace("int h_kv = h / (H / H_kv);", "int h_kv = h / (H / H_kv)", 1)}):
        r = submit(gradescope, files)
        name = next(iter(files))
        texts = [r["output"], *(t["output"] for t in r["tests"])]
        for text in texts:
            assert not student_facing_leaks(text, ag), (name, student_facing_leaks(text, ag), text)
        assert any(name in t for t in texts), name                  # their own file, by its name


# ---- the class notebooks on a hub -----------------------------------------------------------------

def test_binder_opens_the_notebooks_on_cpu_machines():
    b = ROOT / "binder"
    assert "g++" in (b / "apt.txt").read_text().split()                 # the emulator's compiler
    post, start = b / "postBuild", b / "start"
    assert os.access(post, os.X_OK) and os.access(start, os.X_OK)
    assert '-e ".[nvrtc,notebooks]"' in post.read_text()
    assert "export GRADER_BACKEND=cpu" in start.read_text() and 'exec "$@"' in start.read_text()
    assert (b / "runtime.txt").read_text().startswith("python-3.")
    assert all(left_out(f"binder/{p.name}") is None for p in b.iterdir())      # students' copies keep it
    readme = (ROOT / "README.md").read_text()
    for words in ("/v2/gh/", "git-pull?repo=", "grader autograder gradescope", "grader autograder github"):
        assert words in readme, words
