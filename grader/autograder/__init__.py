"""`grader autograder gradescope|github ID... --out OUT`: the course graded where a class's submissions
arrive, on CPU-only machines (the emulator runs the kernels).

- gradescope.py: the autograder zip (setup.sh, run_autograder, the student release, the plan) and,
  inside Gradescope's container, the run that writes results.json;
- github.py: GitHub Classroom's autograding workflow, written into a student-repository template;
- submission.py: finding a module's file in whatever a student uploaded.

This file holds what both share: the plan (which modules, the points of each case, which cases
stay hidden until the due date, the time limits, the seed), the scoring of a module's cases from its
check (`score_module`: the same points on both platforms) and the versions the course was tested
with. The seed is derived from the modules graded (`assignment_name`) unless --seed gives one, so that
rebuilding an autograder keeps the class's inputs, and a student's replay gets them too.

A module's points default to POINTS below and are split evenly over its cases in sixteenths of a
point (`split_points`: binary fractions, whose sums are exact, also where GitHub Classroom's
reporter adds the tests' scores in JavaScript); `--points FILE` overrides them:

    {"00": 10,
     "02_flash_forward": {"points": 20, "visibility": "visible",
                          "cases": {"long": 3, "huge_logits": {"points": 2, "visibility": "after_due_date"}}}}

A case given its own points keeps them; the module's other cases share what is left.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from ..errors import GraderError

# Points per module (a module's cases share them). A module not listed gets DEFAULT_POINTS.
POINTS = {
    "00_naive_attention": 10, "01_online_softmax": 10, "02_flash_forward": 20, "03_flash_causal": 20,
    "04_splitkv_decode": 20, "05_paged_decode": 20, "06_flash_tensor_cores": 30, "07_varlen_prefill": 20,
    "08_block_sparse": 20, "09_flash_backward": 30, "10_flash_hopper": 30,
    "11_backward_tensor_cores": 30,
}
DEFAULT_POINTS = 10
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")   # Gradescope's words
BACKEND = "cpu"                 # autograders run on CPU-only workers: the emulator
FORMAT = 1                      # the plan's layout (autograder.json in the zip)


@dataclass
class CasePlan:
    name: str
    points: float
    visibility: str = "visible"


@dataclass
class ModulePlan:
    id: str
    entry: str                  # the function the exercise defines (finds a renamed file)
    points: float
    limit: float                # seconds for the whole check of one submission
    cases: list[CasePlan] = field(default_factory=list)


@dataclass
class Plan:
    modules: list[ModulePlan]
    seed: int
    case_timeout: float
    backend: str = BACKEND

    def to_json(self) -> dict:
        return dict(asdict(self), format=FORMAT)

    @classmethod
    def from_json(cls, data: dict) -> Plan:
        modules = [ModulePlan(**{**m, "cases": [CasePlan(**c) for c in m["cases"]]}) for m in data["modules"]]
        return cls(modules, int(data["seed"]), float(data["case_timeout"]), data.get("backend", BACKEND))


SHARE = 16                      # a case's share of its module's points is a whole number of 1/SHARE


def split_points(total: float, n: int) -> list[float]:
    """`total` over `n` cases in sixteenths of a point (hundredths where `total` is no whole number
    of sixteenths), summing exactly; the later (larger) cases get the odd units. Sixteenths are
    binary fractions: any sum of them is exact in floating point, so a student who passes every case
    gets exactly `total` wherever the scores are added (GitHub Classroom's reporter adds them in
    JavaScript: hundredths gave 20.000000000000004 of 20)."""
    unit = SHARE if abs(round(total * SHARE) - total * SHARE) < 1e-9 else 100
    units = round(total * unit)
    base, extra = divmod(units, n) if n else (0, 0)
    return [(base + (1 if i >= n - extra else 0)) / unit for i in range(n)]


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise GraderError(f"{where} must be a number of points, 0 or more (got {value!r}).")
    return float(value)


def _visibility(value, where: str) -> str:
    if value not in VISIBILITIES:
        raise GraderError(f"{where} must be one of {', '.join(VISIBILITIES)} (got {value!r}).")
    return value


def read_points(path) -> dict:
    """The --points file, parsed: {exercise id: {"points", "visibility", "cases": {case: {...}}}} with
    every id resolved and every value checked; a GraderError names what is wrong."""
    from ..catalogue import resolve
    from ..engine.runner import select_cases
    p = Path(path).expanduser()
    try:
        data = json.loads(p.read_text())
    except OSError as e:
        raise GraderError(f"--points {p}: cannot read it ({e.strerror or e}).") from None
    except ValueError as e:
        raise GraderError(f"--points {p} is not valid JSON: {e}.") from None
    if not isinstance(data, dict):
        raise GraderError(f"--points {p} must hold a JSON object: {{\"00\": 10, \"02\": {{\"points\": 20}}}}.")
    out = {}
    for key, spec in data.items():
        try:
            ex = resolve(key)
        except KeyError as e:
            raise GraderError(f"--points {p}: {e.args[0]}") from None
        where = f"--points {p}: {key}"
        if not isinstance(spec, dict):
            spec = {"points": spec}
        unknown = set(spec) - {"points", "visibility", "cases"}
        if unknown:
            raise GraderError(f"{where} has unknown keys {', '.join(sorted(unknown))} (known: points, "
                              "visibility, cases).")
        entry = {}
        if "points" in spec:
            entry["points"] = _number(spec["points"], f"{where}'s points")
        if "visibility" in spec:
            entry["visibility"] = _visibility(spec["visibility"], f"{where}'s visibility")
        names = {c.name for c in select_cases(ex)}
        cases = spec.get("cases", {})
        if not isinstance(cases, dict):
            raise GraderError(f"{where}'s cases must be an object: {{\"CASE\": points}} or "
                              "{\"CASE\": {\"points\": P, \"visibility\": V}}.")
        entry["cases"] = {}
        for name, c in cases.items():
            if name not in names:
                raise GraderError(f"{where} has no case {name!r}; its cases are: {', '.join(sorted(names))}.")
            c = c if isinstance(c, dict) else {"points": c}
            bad = set(c) - {"points", "visibility"}
            if bad:
                raise GraderError(f"{where}, case {name}: unknown keys {', '.join(sorted(bad))}.")
            entry["cases"][name] = {k: (_number(v, f"{where}, case {name}'s points") if k == "points"
                                        else _visibility(v, f"{where}, case {name}'s visibility"))
                                    for k, v in c.items()}
        out[ex.id] = entry
    return out


def make_plan(ids, points_file=None, after_due_date=(), case_timeout=None, seed=None,
              shrink=True) -> Plan:
    """The modules `ids` (as the command line gives them) with their cases' points and visibility."""
    from ..catalogue import resolve
    from ..engine.check import DEFAULT_CASE_TIMEOUT
    from ..engine.runner import select_cases
    from ..grade import assignment_seed, submission_limit
    exes = []
    for i in ids:
        try:
            ex = resolve(i)
        except KeyError as e:
            raise GraderError(e.args[0]) from None
        if ex not in exes:
            exes.append(ex)
    if case_timeout is not None and case_timeout <= 0:
        raise GraderError("--timeout must be a positive number of seconds.")
    case_timeout = float(case_timeout or DEFAULT_CASE_TIMEOUT[BACKEND])
    table = read_points(points_file) if points_file else {}
    hidden: dict[str, set[str]] = {}
    for spec in after_due_date or ():
        mod, sep, case = spec.partition(":")
        try:
            ex = resolve(mod)
        except KeyError as e:
            raise GraderError(f"--after-due-date {spec}: {e.args[0]}") from None
        if not sep or case not in {c.name for c in select_cases(ex)}:
            raise GraderError(f"--after-due-date {spec}: give ID:CASE with one of {ex.id}'s cases: "
                              + ", ".join(c.name for c in select_cases(ex)) + ".")
        if ex not in exes:
            raise GraderError(f"--after-due-date {spec}: {ex.id} is not among the modules graded here.")
        hidden.setdefault(ex.id, set()).add(case)
    modules = []
    for ex in exes:
        spec = table.get(ex.id, {})
        names = [c.name for c in select_cases(ex)]
        fixed = {n: c["points"] for n, c in spec.get("cases", {}).items() if "points" in c}
        free = [n for n in names if n not in fixed]
        total = spec.get("points", POINTS.get(ex.id, DEFAULT_POINTS) if free else sum(fixed.values()))
        left = total - sum(fixed.values())
        if left < -1e-9 or (not free and abs(left) > 1e-9):
            raise GraderError(f"--points {points_file}: {ex.id}'s cases are given {sum(fixed.values()):g} "
                              f"points, but the module has {total:g}.")
        shares = dict(zip(free, split_points(max(left, 0.0), len(free))))
        cases = []
        for n in names:
            c = spec.get("cases", {}).get(n, {})
            vis = "after_due_date" if n in hidden.get(ex.id, ()) else \
                c.get("visibility", spec.get("visibility", "visible"))
            cases.append(CasePlan(n, fixed.get(n, shares.get(n, 0.0)), vis))
        modules.append(ModulePlan(ex.id, ex.entry, round(total, 2),
                                  submission_limit(len(names), case_timeout, shrink), cases))
    return Plan(modules, seed if seed is not None else assignment_seed(assignment_name(m.id for m in modules)),
                case_timeout)


def assignment_name(ids) -> str:
    """An autograder's assignment, named by the modules it grades (in the course's order): its seed
    is derived from this name unless --seed gives one."""
    return "+".join(sorted(ids))


# ---- scoring a module: one function for both platforms ----------------------------------------------

def replay_command(ex_id: str, name: str, seed: int, backend: str = BACKEND) -> str:
    """The command a student pastes to replay their check: on their course's own exercise file when
    they submitted it under its name (exercises/ID.py), else on the file they submitted."""
    import shlex
    base = PurePosixPath(name).name
    which = "" if base == f"{ex_id}.py" else f"--file {shlex.quote(base)} "
    return f"grader check {ex_id} {which}--backend {backend} --seed {seed}"


def _shape(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def _err(x) -> str:
    return x if isinstance(x, str) else "-" if x is None else f"{x:.1e}"


def case_output(case: dict, replay: str) -> str:
    """What a student reads of one case: what `grader check` says of it (its message, the smallest
    failing shape, the command that replays it)."""
    from ..cli import failure_lines
    head = f"case {case['name']} ({_shape(case.get('params') or {})})"
    if case["passed"]:
        return f"{head}: passed (relative error {_err(case.get('rel_err'))}, max abs error " \
               f"{_err(case.get('max_abs_err'))})."
    if case["kind"] == "not_run":
        return f"{head}: {case['message']} (an earlier test of this module says why)."
    lines = failure_lines(case, replay) if case["kind"] != "not_implemented" else [case["message"]]
    if case.get("limit"):                      # grade.interpret: a MemoryError, a write refused
        lines.insert(1 if case["kind"] != "not_implemented" else 0, f"  ({case['limit']}.)")
    return f"{head}:\n" + "\n".join(lines)


@dataclass
class CaseScore:
    case: CasePlan
    passed: bool
    output: str                 # what the student reads of it

    @property
    def score(self) -> float:
        return self.case.points if self.passed else 0.0


@dataclass
class ModuleScore:
    module: ModulePlan
    cases: list[CaseScore]
    verdict: str                # the module in a few words: "all 18 tests pass", "does not compile: ..."
    file: str | None            # the file as the student knows it; None when there was none
    note: str = ""
    replay: str = ""            # the command that replays the check

    @property
    def score(self) -> float:
        return round(sum(c.score for c in self.cases), 6)      # exact for sixteenths


def score_module(m: ModulePlan, row: dict | None, seed: int, file: str | None, shown: str | None = None,
                 note: str = "", backend: str = BACKEND, missing: str | None = None) -> ModuleScore:
    """Module `m`'s cases scored from grade.py's reading of its check (`interpret`; its "report" the
    check's JSON): a case's points if it passed, 0 otherwise, with what the check says of it. Both
    autograders score with this, so a submission gets the same points on Gradescope and on GitHub
    Classroom. `file` is the submitted file's name (None: there was none); `shown` how the student
    knows it ("course.zip: exercises/02_flash_forward.py"); `row` None with a file: not checked (the
    budget ran out first); `missing` what to say when there is no file."""
    if file is None:
        why = missing or (f"no file for {m.id} in your submission: upload exercises/{m.id}.py (a .py file of "
                          f"any name that defines {m.entry}() works too, and so does a .zip of your course "
                          "folder).")
        return ModuleScore(m, [CaseScore(c, False, why) for c in m.cases], why, None, note)
    replay = replay_command(m.id, file, seed, backend)
    if row is None:
        why = (f"not checked: the autograder's time ran out before {m.id} (earlier modules took it); "
               "tell your instructor.")
        return ModuleScore(m, [CaseScore(c, False, why) for c in m.cases], why, shown or file, note, replay)
    report = row.get("report") or {}
    by_name = {c["name"]: c for c in report.get("cases", [])} if not report.get("error") else {}
    scored = []
    for c in m.cases:
        case = by_name.get(c.name)
        if case is None:
            whole = row.get("verdict") or "not checked"
            detail = row.get("cause") or row.get("message") or ""
            said = f"{whole}: {detail}" if detail and detail not in whole else whole
            scored.append(CaseScore(c, False, said))
        else:
            scored.append(CaseScore(c, bool(case["passed"]), case_output(case, replay)))
    status = row.get("status")
    if status in ("passed", "failed"):
        failed = [s.case.name for s in scored if not s.passed]
        verdict = (f"{len(failed)} of {len(scored)} tests failed, the first: {failed[0]}" if failed else
                   f"all {len(scored)} tests pass")
    elif status == "not_implemented":
        verdict = "not implemented yet: fill in the TODOs (each test says where to start)"
    else:
        verdict = row.get("verdict") or status or "not checked"
        if status in ("does_not_compile", "does_not_import") and row.get("cause") not in verdict:
            verdict += f": {row['cause']}"
    return ModuleScore(m, scored, verdict, shown or file, note, replay)


# ---- the versions tested ---------------------------------------------------------------------------

PROJECT = "flash-attention-course"


def pinned_requirements(extras=("nvrtc",)) -> tuple[list[str], list[str]]:
    """(["name==version", ...], [names not installed here]) for every distribution the course with
    `extras` needs, recursively, as installed in this environment: the versions it was tested with."""
    from importlib.metadata import PackageNotFoundError, distribution

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    pins: dict[str, str] = {}
    missing: list[str] = []
    todo = [(PROJECT, tuple(extras))]
    seen = set()
    while todo:
        name, want = todo.pop()
        if (canonicalize_name(name), want) in seen:
            continue
        seen.add((canonicalize_name(name), want))
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            missing.append(name)
            continue
        if canonicalize_name(name) != PROJECT:
            pins[canonicalize_name(name)] = f"{dist.metadata['Name']}=={dist.version}"
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (want or ("",))):
                continue
            if canonicalize_name(req.name) != PROJECT:
                todo.append((req.name, tuple(sorted(req.extras))))
    return [pins[k] for k in sorted(pins)], sorted(set(missing))


def constraints_text(extras=("nvrtc",)) -> str:
    """constraints.txt: the tested versions, for `pip install -c constraints.txt ...`."""
    from ..cli import version
    pins, missing = pinned_requirements(extras)
    py = ".".join(map(str, sys.version_info[:3]))
    lines = [f"# The versions the course (grader {version()}) was tested with, on Python {py}: pip installs",
             "# exactly these (pip install -c constraints.txt ...). Written by `grader autograder`."]
    if missing:
        lines.append(f"# Not installed where this was written, so not pinned: {', '.join(missing)}.")
    return "\n".join(lines + pins) + "\n"


def tested_python() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


# ---- the command ---------------------------------------------------------------------------------

def cmd_autograder(args) -> int:
    if args.platform != "github" and (args.modules or args.allow_answer_in_stubs):
        raise GraderError("--modules and --allow-answer-in-stubs are for github: they choose the modules of "
                          "the students' repository (a Gradescope zip is the instructors' and holds them all).")
    if args.platform == "github":
        for opt in ("after_due_date", "budget"):
            if getattr(args, opt):
                raise GraderError(f"--{opt.replace('_', '-')} is for Gradescope only: GitHub Classroom "
                                  "shows every test's result at once, and each module's step has its own "
                                  "time limit.")
    if args.budget is not None and args.budget <= 0:
        raise GraderError("--budget must be a positive number of seconds.")
    plan = make_plan(args.ids, args.points, args.after_due_date, args.timeout, args.seed)
    if args.platform == "gradescope":
        from .gradescope import build_zip
        return build_zip(plan, args.out, budget=args.budget)
    from .github import build_template
    return build_template(plan, args.out, args.modules, args.allow_answer_in_stubs)
