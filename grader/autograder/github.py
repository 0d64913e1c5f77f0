"""GitHub Classroom: a student-repository template whose autograding workflow checks the course, one
test per case with its own points.

`grader autograder github ID... --out DIR` writes DIR as the template of the assignment's repository:
the student release (`grader release`: no solutions), plus

    .github/workflows/classroom.yml     the autograding workflow GitHub Classroom runs on every push
    .github/classroom/autograding.json  the plan: modules, each case's points, the seed, the limits
    .github/classroom/constraints.txt   the versions tested (pip -c)

The workflow installs the course with the nvrtc extra (CPU only: the emulator runs the kernels),
then runs one step per module, `python -m grader.autograder.github run ID`, which checks
exercises/ID.py as `grader grade` checks a submission (grade.py's runner: a scratch folder of its
own, the limits of grader/limits.py, the plan's seed and time limits, with shrinking) and

- prints the readable verdict, what `grader check` prints (every case, the first failure with its
  likely cause or what the outputs show, the command that replays it), then the module's points;
- writes the check's JSON report and the module's results to $RUNNER_TEMP/grader-reports/, which the
  workflow keeps as an artifact (actions/upload-artifact);
- sets the step's output `result`: the base64 of the JSON that GitHub Classroom's grading reporter
  (classroom-resources/autograding-grading-reporter) reads from the variable ID_RESULTS (its runner
  ids upper-cased): {"version": 1, "status": "pass" | "fail" | "error", "max_score": the module's
  points, "tests": [{"name", "status": "pass" | "fail", "score", "message", ...}]}, one test per case,
  scored by `score_module` as on Gradescope. The reporter prints each failed test's message and
  sends GitHub Classroom the sum of the tests' scores over the sum of the max_scores.

A module that fails exits 1 (its step is marked failed; `continue-on-error` lets the next modules and
the reporter run); the grader's own failure exits 2 and still sets a result, with status "error" and
the module's points lost, which the log says is not the student's fault.
"""
from __future__ import annotations

import argparse
import base64
import json
import math
import os
import re
import sys
import tempfile
import traceback
from pathlib import Path

from ..errors import GraderError
from . import ModuleScore, Plan, constraints_text, score_module, tested_python

WORKFLOW = Path(".github/workflows/classroom.yml")
PLAN = Path(".github/classroom/autograding.json")
CONSTRAINTS = Path(".github/classroom/constraints.txt")
INSTALL = f"python -m pip install -c {CONSTRAINTS.as_posix()} -e '.[nvrtc]'"
REPORTS = "grader-reports"              # under $RUNNER_TEMP: the artifact's folder
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
MESSAGE_CHARS = 6000                    # a test's message, at most (a step's outputs are bounded)


def step_id(ex_id: str) -> str:
    """A step id (a letter first; letters, digits, _) whose upper case names the reporter's variable."""
    return "m" + re.sub(r"\W", "_", ex_id)


def _q(text) -> str:
    """A YAML scalar: JSON's double-quoted strings are YAML's too."""
    return json.dumps(text) if isinstance(text, str) else str(text)


def run_command(ex_id: str) -> str:
    return f'python -m grader.autograder.github run {ex_id} --out "$RUNNER_TEMP/{REPORTS}"'


def workflow(plan: Plan) -> str:
    from ..cli import version
    ids = " ".join(m.id for m in plan.modules)
    lines = [
        f"# GitHub Classroom's autograding for FlashAttention from scratch: {ids}.",
        f"# Written by `grader autograder github {ids}` (grader {version()}). Each module is one step:",
        "# `grader check` on the CPU emulator (no GPU), one test per case with its own points, read by",
        "# GitHub Classroom's grading reporter. The checks' JSON reports are kept as the artifact",
        f"# {REPORTS}.",
        "name: Autograding Tests",
        "'on':",
        "- push",
        "- repository_dispatch",
        "permissions:",
        "  checks: write",
        "  actions: read",
        "  contents: read",
        "jobs:",
        "  run-autograding-tests:",
        "    runs-on: ubuntu-latest",
        "    if: github.actor != 'github-classroom[bot]'",
        "    env:",
        "      GRADER_BACKEND: cpu",
        "    steps:",
        "    - name: Checkout code",
        "      uses: actions/checkout@v4",
        "    - name: Set up Python",
        "      uses: actions/setup-python@v5",
        "      with:",
        f"        python-version: {_q(tested_python())}",
        "    - name: Install the course",
        f"      run: {_q(INSTALL)}",
    ]
    for m in plan.modules:
        lines += [
            f"    - name: {_q(m.id)}",
            f"      id: {step_id(m.id)}",
            f"      run: {_q(run_command(m.id))}",
            f"      timeout-minutes: {max(1, math.ceil(m.limit / 60) + 1)}",
            "      continue-on-error: true",
        ]
    lines += ["    - name: Keep the checks' reports",
              "      if: always()",
              "      uses: actions/upload-artifact@v4",
              "      with:",
              f"        name: {REPORTS}",
              f"        path: ${{{{ runner.temp }}}}/{REPORTS}",
              "        if-no-files-found: ignore",
              "    - name: Autograding Reporter",
              f"      uses: {REPORTER}",
              "      env:"]
    lines += [f"        {step_id(m.id).upper()}_RESULTS: \"${{{{steps.{step_id(m.id)}.outputs.result}}}}\""
              for m in plan.modules]
    lines += ["      with:", f"        runners: {','.join(step_id(m.id) for m in plan.modules)}"]
    return "\n".join(lines) + "\n"


def build_template(plan: Plan, out, modules=None, allow_answer_in_stubs: bool = False) -> int:
    """The student repository: the release of `modules` (default: the graded ones; `release.assigned`
    refuses a set whose later stub gives an earlier answer away) with the workflow."""
    from .. import paths
    from ..release import assigned, check_out_dir, leaks, make_release, solution_only_lines
    root = paths.course_root()
    graded = [m.id for m in plan.modules]
    ids = assigned(list(modules or graded), allow_answer_in_stubs, root)
    missing = [g for g in graded if g not in ids]
    if missing:
        raise GraderError(f"--modules leaves out {', '.join(missing)}, which the assignment grades: "
                          "a student repository holds every module it grades.")
    out = check_out_dir(out, root)
    later = [f"{m.id}:{c.name}" for m in plan.modules for c in m.cases if c.visibility != "visible"]
    result = make_release(out, root, modules=ids, allow_answer_in_stubs=allow_answer_in_stubs)
    files = ((WORKFLOW, workflow(plan)), (PLAN, json.dumps(plan.to_json(), indent=1) + "\n"),
             (CONSTRAINTS, constraints_text(("nvrtc",))))
    try:
        for rel, text in files:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_text(text)
        found = leaks(out / ".github", solution_only_lines(root, ids))
        if found:
            raise GraderError("the workflow would give solutions away:\n  " + "\n  ".join(found))
    except OSError as e:
        raise GraderError(f"--out {out}: cannot write the workflow ({e.strerror or e}).") from None
    total = sum(m.points for m in plan.modules)
    cases = sum(len(m.cases) for m in plan.modules)
    print(f"wrote the student-repository template to {out} ({result['files'] + len(files)} files): the "
          f"course without its solutions and {WORKFLOW.as_posix()}, {len(plan.modules)} "
          f"step{'s' if len(plan.modules) > 1 else ''} with {cases} tests worth {total:g} points, "
          f"seed {plan.seed}.")
    if later:
        print(f"note: GitHub Classroom shows every result at once; the visibility set for {', '.join(later)} "
              "applies to Gradescope only.")
    print(f"Next: cd {out} && git init -b main && git add -A && git commit -m 'Template' and push it to a "
          "template repository of your classroom's organisation; make it the assignment's starter code.")
    return 0


# ---- inside the workflow -------------------------------------------------------------------------

def reporter_results(scored: ModuleScore, error: bool = False) -> dict:
    """The JSON GitHub Classroom's grading reporter reads: one test per case, its points if it passed."""
    failed = any(not c.passed for c in scored.cases)
    tests = [{"name": f"{scored.module.id}: {c.case.name}", "status": "pass" if c.passed else "fail",
              "score": c.score, "max_score": c.case.points, "message": _cut(c.output),
              "test_code": scored.replay, "filename": scored.file or f"exercises/{scored.module.id}.py",
              "line_no": 0}
             for c in scored.cases]
    return {"version": 1, "status": "error" if error else "fail" if failed else "pass",
            "max_score": scored.module.points, "tests": tests}


def _cut(text: str) -> str:
    if len(text) <= MESSAGE_CHARS:
        return text
    return text[:MESSAGE_CHARS - 40] + f"\n… (the rest is in the artifact {REPORTS})"


def set_output(results: dict) -> None:
    """The step's output `result`: the reporter's JSON in base64 (one line), in $GITHUB_OUTPUT."""
    encoded = base64.b64encode(json.dumps(results, separators=(",", ":")).encode()).decode()
    target = os.environ.get("GITHUB_OUTPUT")
    if target:
        with open(target, "a") as f:
            f.write(f"result={encoded}\n")


def print_verdict(scored: ModuleScore, row: dict | None, rel: str, seed: int) -> None:
    """The readable verdict of the log: what `grader check` prints, then the module's points."""
    from ..catalogue import resolve
    from ..cli import print_report
    m = scored.module
    report = (row or {}).get("report")
    if report and report.get("cases"):
        print_report(report, resolve(m.id), rel, scored.replay)
        if row.get("limit"):
            print(f"Note: {row['limit']}.")
    elif row is not None:
        print(f"grader check {m.id} · {rel} · backend cpu · seed {seed}\n\n✗ {row['verdict']}")
        if row.get("cause") and row["cause"] not in row["verdict"]:
            print(f"  {row['cause']}")
        if scored.replay:
            print(f"\nReplay it: {scored.replay}")
    else:
        print(f"✗ {scored.verdict}")
    print(f"\n{m.id}: {scored.score:g}/{m.points:g} points, {sum(c.passed for c in scored.cases)} of "
          f"{len(scored.cases)} tests pass: {scored.verdict}")


def run(ex_id: str, root: Path, out: Path | None) -> int:
    """Check module `ex_id` of the repository at `root` as the workflow's step: exit 0 when every case
    passes, 1 otherwise."""
    from ..catalogue import resolve
    from ..grade import Runner, interpret
    plan = Plan.from_json(json.loads((root / PLAN).read_text()))
    try:
        ex = resolve(ex_id)
    except KeyError as e:
        raise GraderError(e.args[0]) from None
    m = next((m for m in plan.modules if m.id == ex.id), None)
    if m is None:
        raise GraderError(f"{ex.id} is not graded by this assignment ({PLAN}: "
                          f"{', '.join(x.id for x in plan.modules)}).")
    rel = f"exercises/{m.id}.py"
    file = root / rel
    print(f"{m.id}: seed {plan.seed} (the assignment's), {plan.case_timeout:g} s per case, on the CPU emulator",
          flush=True)
    row = None
    if file.is_file():
        with tempfile.TemporaryDirectory(prefix="grader-classroom-") as tmp:
            child = Runner(Path(tmp)).check(m.id, file, rel, plan.backend, plan.seed, plan.case_timeout,
                                            m.limit, shrink=True)
        row = interpret(child, m.limit)
    scored = score_module(m, row, plan.seed, rel if file.is_file() else None, backend=plan.backend,
                          missing=f"no {rel} in your repository: the assignment grades that file; restore "
                                  "it from the starter code if you moved or deleted it.")
    print_verdict(scored, row, rel, plan.seed)
    error = row is not None and row.get("status") == "grader_error"
    results = reporter_results(scored, error)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{m.id}.results.json").write_text(json.dumps(results, indent=1) + "\n")
        if row is not None:
            (out / f"{m.id}.check.json").write_text(json.dumps(
                {"row": {k: v for k, v in row.items() if k != "report"}, "check": row.get("report"),
                 "stderr": child.stderr[-4000:]}, indent=1) + "\n")
    set_output(results)
    return {"pass": 0, "fail": 1}.get(results["status"], 2)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.autograder.github",
                                description="A step of GitHub Classroom's autograding workflow (classroom.yml).")
    p.add_argument("step", choices=("run",))
    p.add_argument("id", help="the module this step checks")
    p.add_argument("--root", default=".", help="the student's repository (default: here)")
    p.add_argument("--out", help="where the check's JSON report and the results go (the artifact)")
    args = p.parse_args(argv)
    root = Path(args.root).resolve()
    try:
        return run(args.id, root, Path(args.out) if args.out else None)
    except Exception as e:           # the grader's own failure: still a result, saying so
        traceback.print_exc()
        print(f"\nThe autograder itself failed (not your submission's fault): {type(e).__name__}: {e}. "
              "Tell your instructor.", flush=True)
        try:                         # the module's points still count in the total
            from ..catalogue import resolve
            wanted = resolve(args.id).id
            points = next(m.points for m in Plan.from_json(json.loads((root / PLAN).read_text())).modules
                          if m.id == wanted)
        except Exception:
            points = 0
        set_output({"version": 1, "status": "error", "max_score": points,
                    "message": f"the autograder failed: {type(e).__name__}: {e}",
                    "tests": [{"name": f"{args.id}: the autograder", "status": "fail", "score": 0,
                               "message": f"The autograder itself failed: {type(e).__name__}: {e}. "
                                          "Tell your instructor."}]})
        return 2


if __name__ == "__main__":
    sys.exit(main())
