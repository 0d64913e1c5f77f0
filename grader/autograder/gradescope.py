"""Gradescope: the autograder zip, and the run inside Gradescope's container that writes results.json.

`grader autograder gradescope ID... --out FILE.zip` writes a zip whose root holds

    setup.sh          run once, as root, when Gradescope builds the image: installs the student
                      release below with the nvrtc extra at the tested versions, checks the
                      machine (`grader doctor`), and warms the kernel cache (`warm` below)
    run_autograder    run for every submission: `python -m grader.autograder.gradescope run`, and a
                      results.json that says so should even that fail to start
    autograder.json   the plan: modules, each case's points and visibility, the seed, the limits
    constraints.txt   the versions tested (pip -c)
    course/           the student release (`grader release`): no solutions, no wrong versions
    README.md         these files, for the instructor

Gradescope lays it out as /autograder/source (the zip), /autograder/submission (the student's
upload) and /autograder/results (where results.json goes); AUTOGRADER_ROOT moves /autograder, so
that a test lays out the same tree anywhere.

`run` finds each module's file in the submission (submission.py), checks it in a child process
with grade.py's runner (`grader check --json`, the plan's seed, a time limit per case and one for
the whole check, a scratch folder of its own, the limits of grader/limits.py; messages name the
file by its own name, never /autograder's paths), and writes one test per case, scored by
`score_module` as GitHub Classroom's are: its points if it passed, 0 otherwise, with the grader's
message, the smallest failing shape and the command that replays it. A missing file, a file that
does not import or compile, a crash, a hang and a limit hit all score 0 with what happened; results.json
is written before anything runs (every test "not graded yet") and after each module, so that
even a run stopped by Gradescope's own time limit leaves one.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

from ..errors import GraderError
from ..limits import Limits
from . import BACKEND, ModulePlan, Plan, constraints_text, replay_command, score_module, tested_python
from .submission import Found, gather, locate

CONFIG = "autograder.json"
COURSE = "course"
DEFAULT_BUDGET = 540.0          # seconds per submission: Gradescope's default limit (10 min) less a minute
RESERVE = 10.0                  # seconds kept back at the end of the budget to write the results
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # every entry's date: the same plan gives the same zip

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (written by
# `grader autograder gradescope`; README.md says what each file is). It installs the course's student
# release (course/) with the nvrtc extra at the versions it was tested with (constraints.txt), checks
# the machine, and warms the kernel cache so that the first submission does not pay for it.
#
# AUTOGRADER_ROOT moves /autograder (a test lays the tree out elsewhere). FLASH_AUTOGRADER_SKIP_INSTALL=1
# skips the network part (apt, the virtual environment, pip) and uses FLASH_AUTOGRADER_PYTHON, an
# interpreter that has the course's dependencies already; everything after it runs as on Gradescope.
set -euo pipefail
AG="${AUTOGRADER_ROOT:-/autograder}"
SRC="$AG/source"
TESTED_PYTHON="@PYTHON@"
if [ -z "${FLASH_AUTOGRADER_SKIP_INSTALL:-}" ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends g++ python3 python3-venv python3-pip >/dev/null
    PY3=python3
    if ! command -v "python$TESTED_PYTHON" >/dev/null 2>&1 &&
            ! python3 -c "import sys; sys.exit(sys.version_info[:2] < tuple(map(int, '$TESTED_PYTHON'.split('.'))))"; then
        # The image's Python is older than the one the versions were tested on: add that one.
        apt-get install -y -qq --no-install-recommends "python$TESTED_PYTHON" >/dev/null 2>&1 ||
            echo "setup.sh: no Python $TESTED_PYTHON here; the pinned versions may not install on $(python3 -V)." >&2
    fi
    if command -v "python$TESTED_PYTHON" >/dev/null 2>&1; then
        PY3="python$TESTED_PYTHON"
        apt-get install -y -qq --no-install-recommends "python$TESTED_PYTHON-venv" >/dev/null 2>&1 || true
    fi
    "$PY3" -m venv "$AG/venv"
    PY="$AG/venv/bin/python"
    "$PY" -m pip install -q --upgrade pip
    "$PY" -m pip install -q -c "$SRC/constraints.txt" -e "$SRC/course[nvrtc]"
else
    PY="$(command -v "${FLASH_AUTOGRADER_PYTHON:-python3}")"
fi
echo "$PY" > "$SRC/.python"
export GRADER_ROOT="$SRC/course" PYTHONPATH="$SRC/course" GRADER_BACKEND=cpu PYTHONDONTWRITEBYTECODE=1
export GRADER_CACHE="${GRADER_CACHE:-$AG/kernel-cache}"
"$PY" -m grader --version
"$PY" -m grader doctor
"$PY" -m grader.autograder.gradescope warm --root "$AG"
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this for every submission (written by `grader autograder gradescope`): it checks the
# student's files in /autograder/submission and writes /autograder/results/results.json. Whatever the
# submission does, results.json is written; should the grader itself not start, it says so.
AG="${AUTOGRADER_ROOT:-/autograder}"
SRC="$AG/source"
mkdir -p "$AG/results"
PY="$(cat "$SRC/.python" 2>/dev/null || true)"
[ -n "$PY" ] || PY=python3
export GRADER_ROOT="$SRC/course" PYTHONPATH="$SRC/course" GRADER_BACKEND=cpu PYTHONDONTWRITEBYTECODE=1
export GRADER_CACHE="${GRADER_CACHE:-$AG/kernel-cache}"
cd "$AG" || exit 0
"$PY" -m grader.autograder.gradescope run --root "$AG"
if [ ! -s "$AG/results/results.json" ]; then
    cat > "$AG/results/results.json" <<'EOF'
{"score": 0, "output": "The autograder could not start the grader (this is not your submission's fault): tell your instructor, who sees why in the autograder's output.", "stdout_visibility": "hidden", "tests": []}
EOF
fi
exit 0
"""

README = """# A Gradescope autograder for FlashAttention from scratch

Written by `grader autograder gradescope {ids}` (grader {version}). Upload this zip as the
assignment's autograder (a programming assignment, any Ubuntu base image). No GPU is used: the
grader runs every kernel on its CPU emulator.

- `setup.sh`: installs `course/` (the student release: no solutions) with the `nvrtc` extra at the
  versions in `constraints.txt` (tested on Python {python}), runs `grader doctor`, and checks every
  module's stub once, which builds the emulator's runtime into the kernel cache.
- `run_autograder`: finds each module's file in the submission (any name or folder, or a .zip),
  checks it with seed {seed}, and writes `results.json`: one test per case.
- `autograder.json`: the modules, each case's points and visibility, the time limits.

Every submission is checked on the same inputs (seed {seed}, derived from the modules unless
`--seed` gave it), under limits on memory, CPU time, processes and output ({limits}), in a scratch
folder of its own. Students replay a check with the command its output names, for instance
{replays} (each failing test names the `--case` or `--shape` that replays it alone).

Try it before uploading, in a folder laid out as Gradescope lays it out (AUTOGRADER_ROOT stands for
/autograder; without root, skip setup.sh's apt and pip part and use a Python that has the course):

    mkdir -p ag/submission ag/results && unzip -q THIS.zip -d ag/source && cp ag/source/run_autograder ag/
    export AUTOGRADER_ROOT=$PWD/ag FLASH_AUTOGRADER_SKIP_INSTALL=1 FLASH_AUTOGRADER_PYTHON=python3
    bash ag/source/setup.sh && cp my_attention.py ag/submission/ && ag/run_autograder
    cat ag/results/results.json
"""


# ---- building the zip --------------------------------------------------------------------------

def check_out_zip(out, root: Path) -> Path:
    """--out as a writable FILE.zip outside the course (a file inside would go into the next
    release); a GraderError says what is wrong."""
    out = Path(out).expanduser()
    if out.suffix.lower() != ".zip":
        raise GraderError(f"--out {out}: give the zip file to write, FILE.zip.")
    out = out.resolve()
    if out == root or root in out.parents:
        raise GraderError(f"--out {out} is inside the course ({root}), whose next release would copy it: "
                          "write it somewhere else.")
    if out.is_dir():
        raise GraderError(f"--out {out} is a folder: give the zip file to write, FILE.zip.")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}.", delete=True):
            pass
    except OSError as e:
        raise GraderError(f"--out {out}: cannot write there ({e.strerror or e}).") from None
    return out


def _zip_folder(folder: Path, out: Path) -> int:
    """Write every file under `folder` into the zip `out` (atomically), modes kept, dates fixed."""
    part = out.with_name(f".{out.name}.part")
    n = 0
    try:
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
            for p in sorted(q for q in folder.rglob("*") if q.is_file()):
                info = zipfile.ZipInfo.from_file(p, p.relative_to(folder).as_posix())
                info.date_time = ZIP_TIME
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, p.read_bytes())
                n += 1
        os.replace(part, out)
    finally:
        part.unlink(missing_ok=True)
    return n


def build_zip(plan: Plan, out, budget: float | None = None) -> int:
    from .. import paths
    from ..cli import version
    from ..release import leaks, make_release, solution_only_lines
    root = paths.course_root()
    out = check_out_zip(out, root)
    budget = float(budget or DEFAULT_BUDGET)
    with tempfile.TemporaryDirectory(prefix="grader-autograder-") as tmp:
        stage = Path(tmp) / "zip"
        make_release(stage / COURSE, root)                   # refuses a release, checks for leaks
        ids = " ".join(m.id for m in plan.modules)
        limits = Limits.for_check(plan.backend, max(m.limit for m in plan.modules))
        texts = {
            "setup.sh": SETUP_SH.replace("@PYTHON@", tested_python()),
            "run_autograder": RUN_AUTOGRADER,
            CONFIG: json.dumps(dict(plan.to_json(), budget=budget, grader_version=version(),
                                    python=tested_python()), indent=1) + "\n",
            "constraints.txt": constraints_text(("nvrtc",)),
            "README.md": README.format(ids=ids, version=version(), python=tested_python(), seed=plan.seed,
                                       limits=limits.describe(),
                                       replays=", ".join(f"`{replay_command(m.id, m.id + '.py', plan.seed)}`"
                                                         for m in plan.modules)),
        }
        for name, text in texts.items():
            (stage / name).write_text(text)
        for name in ("setup.sh", "run_autograder"):
            (stage / name).chmod(0o755)
        found = leaks(stage, solution_only_lines(root))
        if found:
            raise GraderError("the autograder would give solutions away; nothing was written. Lines of "
                              "a solution's answer occur in:\n  " + "\n  ".join(found[:20]))
        n = _zip_folder(stage, out)
    cases = sum(len(m.cases) for m in plan.modules)
    total = sum(m.points for m in plan.modules)
    later = sum(c.visibility != "visible" for m in plan.modules for c in m.cases)
    print(f"wrote {out} ({n} files): the Gradescope autograder of {ids}, {cases} tests worth {total:g} "
          f"points{f' ({later} hidden until later)' if later else ''}, seed {plan.seed}, "
          f"{plan.case_timeout:g} s per case, {budget:g} s per submission.")
    print("No solution is in it (checked). Upload it as the assignment's autograder; no GPU is needed.")
    return 0


# ---- inside the container ----------------------------------------------------------------------

def _test(m: ModulePlan, c, passed: bool, output: str) -> dict:
    return {"name": f"{m.id}: {c.name}", "score": c.points if passed else 0.0, "max_score": c.points,
            "status": "passed" if passed else "failed", "output": output, "visibility": c.visibility}


def module_tests(m: ModulePlan, found: Found | None, row: dict | None, seed: int,
                 backend: str = BACKEND) -> tuple[list[dict], str, str | None]:
    """The tests of module `m`, the line the submission's summary gives it, and the command that
    replays its check (None without a file). The points are `score_module`'s, as on GitHub Classroom.
    `row` is grade.py's reading of the child's outcome (`interpret`), None when no check ran
    (`found` None: no file; else the budget ran out)."""
    scored = score_module(m, row, seed, found.path.name if found else None, found.shown if found else None,
                          found.note if found else "", backend)
    tests = [_test(m, s.case, s.passed, s.output) for s in scored.cases]
    if found is None or row is None:
        return tests, f"{m.id}: 0/{m.points:g} points: {scored.verdict}", scored.replay or None
    shown = [s for s in scored.cases if s.case.visibility == "visible"]
    got = sum(s.score for s in shown)
    of = sum(s.case.points for s in shown)
    later = len(scored.cases) - len(shown)
    verdict = scored.verdict
    if row.get("status") in ("passed", "failed"):        # of the tests shown now
        failed = [s.case.name for s in shown if not s.passed]
        verdict = (f"{len(failed)} of {len(shown)} tests failed, the first: {failed[0]}" if failed else
                   f"all {len(shown)} tests pass")
    line = (f"{m.id}: {got:g}/{of:g} points ({scored.file}): {verdict}"
            + (f"; {later} more test{'s' if later > 1 else ''} shown later" if later else "")
            + (f". Note: {scored.note}" if scored.note else ""))
    return tests, line, scored.replay


def results_json(tests: list[dict], lines: list[str], seconds: float, plan: Plan, notes=(),
                 replays=()) -> dict:
    """results.json: the tests, and an output that gives each module's line, the seed and the
    commands that replay each module's check."""
    out = lines + [f"Note: {n}" for n in notes]
    out.append(f"Checked on the CPU emulator with seed {plan.seed}, the assignment's: every submission gets "
               "the same inputs.")
    if replays:
        out.append("Replay a check on your own machine, in your copy of the course: "
                   + "; ".join(f"`{r}`" for r in replays) + ".")
    return {"score": round(sum(t["score"] for t in tests), 6), "execution_time": int(round(seconds)),
            "output": "\n".join(out), "visibility": "visible", "stdout_visibility": "hidden",
            "tests": tests}


def _write(path: Path, data: dict) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(part, path)


def load_plan(root: Path) -> tuple[Plan, float]:
    data = json.loads((root / "source" / CONFIG).read_text())
    return Plan.from_json(data), float(data.get("budget", DEFAULT_BUDGET))


def run(root: Path) -> int:
    """Grade the submission under `root` (Gradescope's /autograder): results/results.json."""
    from ..grade import Runner, interpret
    start = time.monotonic()
    results = root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    plan, budget = load_plan(root)
    pending = "not graded yet: the autograder stopped before this test (its time limit?); tell your instructor."
    tests = {m.id: [_test(m, c, False, pending) for c in m.cases] for m in plan.modules}
    lines = {m.id: f"{m.id}: not graded yet" for m in plan.modules}
    replays: dict[str, str] = {}

    def write(notes=()) -> None:
        _write(results, results_json([t for m in plan.modules for t in tests[m.id]],
                                     [lines[m.id] for m in plan.modules], time.monotonic() - start, plan, notes,
                                     [replays[m.id] for m in plan.modules if replays.get(m.id)]))
    write()
    print(f"seed {plan.seed}; {plan.case_timeout:g} s per case", flush=True)
    with tempfile.TemporaryDirectory(prefix="autograder-") as tmp:
        tmp = Path(tmp)
        files, notes = gather(root / "submission", tmp / "unpacked")
        print(f"submission: {', '.join(s for _, s in files) or 'no .py file'}", flush=True)
        runner = Runner(tmp)
        for m in plan.modules:
            stub = root / "source" / COURSE / "exercises" / f"{m.id}.py"
            found = locate(m.id, m.entry, files, stub.read_text() if stub.is_file() else None)
            row = None
            left = budget - (time.monotonic() - start) - RESERVE
            if found is not None and left > 5:
                limit = min(m.limit, left)
                child = runner.check(m.id, found.path, found.path.name, plan.backend, plan.seed,
                                     plan.case_timeout, limit, shrink=True)
                row = interpret(child, limit)
                if child.stderr.strip():
                    print(child.stderr[-4000:], flush=True)
            tests[m.id], lines[m.id], replays[m.id] = module_tests(m, found, row, plan.seed, plan.backend)
            print(lines[m.id], flush=True)
            write(notes)
    return 0


def warm(root: Path) -> int:
    """Check every module's stub once (setup.sh): builds the emulator's runtime and the stubs'
    kernels into the kernel cache, and proves the machine can check. Exit 1 when it cannot."""
    from ..grade import Runner, interpret
    plan, _ = load_plan(root)
    with tempfile.TemporaryDirectory(prefix="autograder-warm-") as tmp:
        runner = Runner(Path(tmp))
        for m in plan.modules:
            stub = root / "source" / COURSE / "exercises" / f"{m.id}.py"
            child = runner.check(m.id, stub, stub.name, plan.backend, plan.seed, plan.case_timeout, m.limit)
            row = interpret(child, m.limit)
            print(f"warm {m.id}: the stub is {row['verdict']} ({child.seconds:.1f} s)", flush=True)
            if row["status"] not in ("not_implemented", "passed", "failed"):
                print(f"setup.sh: this machine cannot check {m.id}: {row['cause']}\n{child.stderr[-4000:]}",
                      flush=True)
                return 1
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.autograder.gradescope",
                                description="Inside Gradescope's container (setup.sh and run_autograder call it).")
    p.add_argument("step", choices=("run", "warm"))
    p.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    args = p.parse_args(argv)
    root = Path(args.root)
    if args.step == "warm":
        return warm(root)
    try:
        return run(root)
    except Exception as e:           # the autograder's own failure: still a results.json that says so
        traceback.print_exc()
        results = root / "results" / "results.json"
        results.parent.mkdir(parents=True, exist_ok=True)
        _write(results, {"score": 0, "output": "The autograder itself failed (not your submission's fault): "
                         f"{type(e).__name__}: {e}. Tell your instructor.", "stdout_visibility": "hidden",
                         "tests": []})
        return 0


if __name__ == "__main__":
    sys.exit(main())
