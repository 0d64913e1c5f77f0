"""GitHub Classroom: a student-repository template whose autograding workflow checks the course.

`grader autograder github ID... --out DIR` writes DIR as the template of the assignment's repository:
the student release (`grader release`: no solutions), plus

    .github/workflows/classroom.yml     the autograding workflow GitHub Classroom runs on every push
    .github/classroom/constraints.txt   the versions tested (pip -c)

The workflow installs the course with the nvrtc extra (CPU only: the emulator runs the kernels),
then runs one `classroom-resources/autograding-command-grader` step per module, `grader check ID
--backend cpu --json` with the plan's seed and time limit per case; the step's timeout (minutes) covers
the whole check and its max-score is the module's points (a command grader scores all or nothing:
the command's exit status). `classroom-resources/autograding-grader-reporter` adds them up. The
workflow is written by hand (no YAML library needed); the test reads it with one and runs its
commands as the runner would.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from ..errors import GraderError
from . import Plan, constraints_text, tested_python

WORKFLOW = Path(".github/workflows/classroom.yml")
CONSTRAINTS = Path(".github/classroom/constraints.txt")
INSTALL = f"python -m pip install -c {CONSTRAINTS.as_posix()} -e '.[nvrtc]'"


def step_id(ex_id: str) -> str:
    """A step id (a letter first; letters, digits, _) whose upper case names the reporter's variable."""
    return "m" + re.sub(r"\W", "_", ex_id)


def _q(text) -> str:
    """A YAML scalar: JSON's double-quoted strings are YAML's too."""
    return json.dumps(text) if isinstance(text, str) else str(text)


def check_command(ex_id: str, plan: Plan) -> str:
    return (f"grader check {ex_id} --backend {plan.backend} --json --seed {plan.seed} "
            f"--timeout {plan.case_timeout:g}")


def workflow(plan: Plan) -> str:
    from ..cli import version
    ids = " ".join(m.id for m in plan.modules)
    lines = [
        f"# GitHub Classroom's autograding for FlashAttention from scratch: {ids}.",
        f"# Written by `grader autograder github {ids}` (grader {version()}). Each module is one",
        "# command-grader step: `grader check` on the CPU emulator (no GPU), its points if every case passes.",
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
            "      uses: classroom-resources/autograding-command-grader@v1",
            "      with:",
            f"        test-name: {_q(m.id)}",
            "        setup-command: \"\"",
            f"        command: {_q(check_command(m.id, plan))}",
            f"        timeout: {max(1, math.ceil(m.limit / 60))}",
            f"        max-score: {m.points:g}",
        ]
    lines += ["    - name: Autograding Reporter",
              "      uses: classroom-resources/autograding-grader-reporter@v1",
              "      env:"]
    lines += [f"        {step_id(m.id).upper()}_RESULTS: \"${{{{steps.{step_id(m.id)}.outputs.result}}}}\""
              for m in plan.modules]
    lines += ["      with:", f"        runners: {','.join(step_id(m.id) for m in plan.modules)}"]
    return "\n".join(lines) + "\n"


def build_template(plan: Plan, out) -> int:
    from .. import paths
    from ..release import check_out_dir, leaks, make_release, solution_only_lines
    root = paths.course_root()
    out = check_out_dir(out, root)
    later = [f"{m.id}:{c.name}" for m in plan.modules for c in m.cases if c.visibility != "visible"]
    result = make_release(out, root)
    try:
        for rel, text in ((WORKFLOW, workflow(plan)), (CONSTRAINTS, constraints_text(("nvrtc",)))):
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_text(text)
        found = leaks(out / ".github", solution_only_lines(root))
        if found:
            raise GraderError("the workflow would give solutions away:\n  " + "\n  ".join(found))
    except OSError as e:
        raise GraderError(f"--out {out}: cannot write the workflow ({e.strerror or e}).") from None
    total = sum(m.points for m in plan.modules)
    print(f"wrote the student-repository template to {out} ({result['files'] + 2} files): the course "
          f"without its solutions and {WORKFLOW.as_posix()}, {len(plan.modules)} autograding "
          f"step{'s' if len(plan.modules) > 1 else ''} worth {total:g} points, seed {plan.seed}.")
    if later:
        print(f"note: GitHub Classroom shows every result at once; the visibility set for {', '.join(later)} "
              "applies to Gradescope only.")
    print(f"Next: cd {out} && git init -b main && git add -A && git commit -m 'Template' and push it to a "
          "template repository of your classroom's organisation; make it the assignment's starter code.")
    return 0
