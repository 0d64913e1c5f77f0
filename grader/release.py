"""`grader release OUT_DIR`: the course as a student gets it, without anything that gives the solutions
away, and still fully checkable (`pip install -e OUT_DIR`, then `grader check 02` works there).

What a release leaves out, and why (LEFT_OUT below is the list the code applies):

- `solutions/`: the answers.
- `grader/tasks/*/wrong.py`: each wrong version is a text edit that quotes the solution's code.
- `grader/tasks/*/ladder.py`, `grader/tasks/*/variants.py`: the speed ladders' kernels (`grader ladder`)
  are the solutions' code spliced and edited, and quote it.
- `tests/`: most tests run or quote the solutions; `scripts/` (but the notebook runner): tuning sweeps,
  the GPU suite, the mutation and wrong-version runners, all read the solutions; `.ci/`: runs the tests.
- whatever the course's .gitignore names and every cache: `.git` (the history holds every solution;
  the release is a plain folder, never a copy of the repository), `build/`, `.venv/`, `*.egg-info`,
  `.grader/` (one person's progress), `__pycache__/`, `.pytest_cache/`.

What it changes: README.md (the developer and instructor parts become a note on what this copy
is), pyproject.toml (no pytest testpaths: there is no tests/), each task's HINTS (stored encoded, so that no file shows the last hints, which spell out code,
at a glance; `grader hint` still gives them one at a time), and it adds the marker file MARKER, which
tells the grader that it runs in a release: every feature that needs a solution then says so
(`solution_path`). Before it finishes, the release checks itself: no file may hold a line of a
solution's answer (between BEGIN/END SOLUTION) that no stub hands out.
"""
from __future__ import annotations

import ast
import base64
import fnmatch
import json
import re
import shutil
import subprocess
from pathlib import Path

from . import paths
from .errors import GraderError

MARKER = ".course-release"

# (pattern on the path relative to the course root, why it is left out). A pattern ending in "/"
# names a folder anywhere its name matches; the others are fnmatch patterns on the whole path.
LEFT_OUT = (
    ("solutions/", "the answers"),
    ("grader/tasks/*/wrong.py", "the wrong versions are edits that quote the solutions"),
    ("grader/tasks/*/ladder.py", "the speed ladders' kernels quote the solutions"),
    ("grader/tasks/*/variants.py", "module 11's variants are edits that quote its solution"),
    ("tests/", "most tests run or quote the solutions"),
    ("scripts/*", "instructors' tools that read the solutions (the notebook runner stays)"),
    (".ci/", "CI runs the tests"),
    ("site/", "the course site's sources: its builder (scripts/build_site.py) is an instructors' tool"),
    (".git/", "the history holds every solution"),
    (".venv/", "an environment, rebuilt by pip install -e"),
    ("build/", "build output"),
    ("dist/", "build output"),
    ("*.egg-info/", "build output"),
    (".grader/", "one person's progress and plots"),
    ("__pycache__/", "cache"),
    (".pytest_cache/", "cache"),
    (".benchmarks/", "cache"),
    (".ipynb_checkpoints/", "cache"),
    ("*.pyc", "cache"),
    (MARKER, "written anew"),
)
KEPT = ("scripts/run_notebook.py",)       # exceptions to LEFT_OUT: no solution in it, useful to all

SOLUTION_ONLY_MIN_CHARS = 25             # shorter answer lines (`}`, `++i;`) are everywhere


# ---- the grader inside a release -----------------------------------------------------------------

def is_release(root: Path | None = None) -> bool:
    """Is this course (the one the grader found, or `root`) a student release?"""
    try:
        root = Path(root) if root is not None else paths.course_root()
    except GraderError:
        return False
    return (root / MARKER).is_file()


class SolutionMissing(GraderError):
    """A feature needs a solution that this student release leaves out."""

    def __init__(self, ex_id: str, feature: str):
        super().__init__(f"{feature} needs solutions/{ex_id}.py, which a student release leaves out "
                         "(this copy has no solutions/). It works in the course's own repository.")
        self.ex_id = ex_id


def solution_path(ex_id: str, feature: str) -> Path:
    """solutions/ID.py for `feature` (words: "`grader check --solution`"), or a GraderError that says
    why it is missing: a student release leaves the solutions out; elsewhere the file is not there."""
    p = paths.solution_file(ex_id)
    if p.is_file():
        return p
    if is_release():
        raise SolutionMissing(ex_id, feature)
    raise GraderError(f"{feature} needs {p}, which does not exist. This exercise's files are not in "
                      "your copy of the course: `git pull` to get them.")


# ---- what gives a solution away ------------------------------------------------------------------

def answer_lines(sol: Path) -> list[str]:
    """The lines of a solution's answer: between BEGIN and END SOLUTION, stripped, longer than
    SOLUTION_ONLY_MIN_CHARS (shorter ones, `}` or `++i;`, are everywhere), not a STUB line."""
    from .stubs import BEGIN, END, STUB
    out, inside = [], False
    for line in sol.read_text().splitlines():
        if BEGIN.match(line):
            inside = True
        elif END.match(line):
            inside = False
        elif inside and not STUB.match(line):
            s = line.strip()
            if len(s) > SOLUTION_ONLY_MIN_CHARS:
                out.append(s)
    return out


def solution_only_lines(root: Path, modules: tuple[str, ...] | None = None) -> dict[str, str]:
    """{line: solution file} for every line of a solution's answer that no stub of the release (of
    `modules`' stubs, for an assignment) hands out: a later stub starts from an earlier module's
    answer (03's from 02's), and what a stub hands out is no secret."""
    given = "\n".join(p.read_text() for p in sorted((root / "exercises").glob("*.py"))
                      if modules is None or p.stem in modules)
    out: dict[str, str] = {}
    for sol in sorted((root / "solutions").glob("*.py")):
        for s in answer_lines(sol):
            if s not in given:
                out.setdefault(s, sol.name)
    return out


# A later stub that holds this share of an earlier module's answer lines (those its own stub does not
# hand out) gives that answer away: 03's stub holds 60 of 02's 71; a shared idiom (a bounds guard) is
# one line of twenty.
ANSWER_GIVEN_SHARE = 0.25


def answers_in_later_stubs(root: Path, modules: tuple[str, ...]) -> list[str]:
    """For an assignment of `modules`: 'exercises/LATER.py holds N of the M lines of ID's answer' for
    each assigned module whose answer a later assigned module's stub gives away."""
    found = []
    for ex_id in modules:
        own = (root / "exercises" / f"{ex_id}.py").read_text()
        secret = {s for s in answer_lines(root / "solutions" / f"{ex_id}.py") if s not in own}
        for later in (m for m in modules if m > ex_id):
            held = sorted(s for s in secret if s in (root / "exercises" / f"{later}.py").read_text())
            if secret and len(held) >= ANSWER_GIVEN_SHARE * len(secret):
                found.append(f"exercises/{later}.py holds {len(held)} of the {len(secret)} lines of {ex_id}'s "
                             f"answer (for example `{held[0]}`)")
    return found


def searchable_text(path: Path) -> str | None:
    """The text a reader sees in `path` (a notebook's cell sources as well as its JSON), None for a
    file that is not text."""
    try:
        text = path.read_text()
    except (UnicodeDecodeError, OSError):
        return None
    if path.suffix == ".ipynb":
        try:
            text += "\n" + "\n".join("".join(c.get("source", ())) for c in json.loads(text)["cells"])
        except (ValueError, KeyError, TypeError):
            pass
    return text


def leaks(folder: Path, lines: dict[str, str]) -> list[str]:
    """'file: line (from solution)' for each solution-only line that a file under `folder` holds."""
    found = []
    for p in sorted(q for q in folder.rglob("*") if q.is_file()):
        text = searchable_text(p)
        if text is None:
            continue
        for line, sol in lines.items():
            if line in text:
                found.append(f"{p.relative_to(folder).as_posix()}: {line!r} (from solutions/{sol})")
    return found


# ---- writing a release ---------------------------------------------------------------------------

def module_of(rel: str) -> str | None:
    """The exercise id a course file belongs to (its lesson, stub, solution, notebook or task
    folder), or None for a file every module shares."""
    from . import catalogue
    parts = rel.split("/")
    for ex_id in catalogue.IDS:
        if (len(parts) == 2 and parts[0] in ("modules", "exercises", "solutions", "notebooks")
                and parts[1].startswith(ex_id + ".")) or rel.startswith(f"grader/tasks/{ex_id[3:]}/"):
            return ex_id
    return None


def left_out(rel: str, modules: tuple[str, ...] | None = None) -> str | None:
    """Why the file at `rel` (posix, relative to the course root) stays out of a release, or None."""
    if modules is not None and module_of(rel) not in (None, *modules):
        return "modules not in this assignment (--modules)"
    if rel in KEPT:
        return None
    parts = rel.split("/")
    for pattern, why in LEFT_OUT:
        if pattern.endswith("/"):
            if any(fnmatch.fnmatch(part, pattern[:-1]) for part in parts[:-1]):
                return why
        elif fnmatch.fnmatch(rel, pattern):
            return why
    return None


def course_files(root: Path) -> list[str]:
    """The course's files, relative: what git tracks or would track (ignored files never), or every
    file when the course is not a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=root, capture_output=True, timeout=60)
        if out.returncode == 0:
            names = {n for n in out.stdout.decode().split("\0") if n}
            return sorted(n for n in names if (root / n).is_file())
    except (OSError, subprocess.SubprocessError):
        pass
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def encode_hints(source: str) -> str:
    """A task's __init__.py with its HINTS tuple stored as base64 JSON (the same tuple once imported)."""
    tree = ast.parse(source)
    node = next((n for n in tree.body if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "HINTS" for t in n.targets)), None)
    if node is None:
        return source
    hints = list(ast.literal_eval(node.value))
    blob = base64.b64encode(json.dumps(hints).encode()).decode()
    chunks = "\n".join(f'    "{blob[i:i + 96]}"' for i in range(0, len(blob), 96))
    lines = source.splitlines(keepends=True)
    new = ("# The hints, stored encoded in a student release so that no file shows them all at once:\n"
           "# `grader hint ID` gives them one at a time.\n"
           "import base64 as _b64, json as _json  # noqa: E401,E402\n"
           f"HINTS = tuple(_json.loads(_b64.b64decode(\n{chunks}\n)))\n")
    return "".join(lines[:node.lineno - 1]) + new + "".join(lines[node.end_lineno:])


RELEASE_NOTE = """## This copy: a student release

This folder is the course without its solutions. Left out: `solutions/`, the project's tests, the
instructors' scripts and the grader's wrong versions (planted bugs, written as edits of the solutions);
the hints are stored encoded so that no file shows them all at once (`grader hint ID` gives them one at
a time). Everything a student uses works here: `grader list`, `check`, `hint`, `watch`, `bench`,
`doctor` and the notebooks. What needs a solution says so: `grader check --solution`, `grader stubs`,
`python -m grader.wrong`, and the baselines of `grader bench` that time the course's own solution of a
module (those rows are skipped, named). The notebooks run your own exercise where the course's version
runs the solution, with a note: finish an exercise (`grader check ID` passes) before you run its notebook.
`docs/design.md` describes the course's full repository.
"""


def release_readme(text: str) -> str:
    """README.md for a release: no developer set-up or instructor tools that cannot work there."""
    text = re.sub(r"\nDeveloper:.*?```[a-z]*\n.*?```\n", "\n", text, count=1, flags=re.S)
    text = re.sub(r",\s*`solutions/ID\.py`\s*\(the finished version\)\s*and\s", " and ", text)
    text = re.sub(r"\n## For instructors\n.*?(?=\n## |\Z)", "\n" + RELEASE_NOTE.rstrip("\n") + "\n", text,
                  count=1, flags=re.S)
    if RELEASE_NOTE.splitlines()[0] not in text:
        text = text.rstrip("\n") + "\n\n" + RELEASE_NOTE
    text = "".join(line for line in text.splitlines(keepends=True)
                   if not line.startswith(("grader release", "grader stubs", "grader notebooks",
                                           "grader autograder")))
    return text


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("flash-attention-course")
    except PackageNotFoundError:
        return "unknown"


def check_out_dir(out: Path, root: Path) -> Path:
    out = Path(out).expanduser().resolve()
    if out == root or root in out.parents:
        raise GraderError(f"{out} is inside the course ({root}): write the release somewhere else.")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise GraderError(f"{out} exists and is not an empty folder: give a new or an empty one.")
    return out


def assigned(modules, allow_answer_in_stubs: bool = False, root: Path | None = None) -> tuple[str, ...] | None:
    """The exercise ids of `--modules` (any spelling `grader check` takes), in course order; None for
    every module. Refused: an assignment where a later module's stub hands out an earlier one's answer
    (03's stub starts from 02's finished kernel), unless `allow_answer_in_stubs`."""
    from . import catalogue
    if not modules:
        return None
    ids = []
    for name in modules:
        try:
            ids.append(catalogue.resolve(name).id)
        except KeyError as e:
            raise GraderError(f"--modules: {e.args[0]}") from None
    ids = tuple(sorted(set(ids)))
    root = Path(root).resolve() if root is not None else paths.course_root()
    if not allow_answer_in_stubs and (root / "solutions").is_dir():
        given = answers_in_later_stubs(root, ids)
        if given:
            raise GraderError(
                f"--modules {' '.join(i[:2] for i in ids)} is refused: a later module's stub hands out an "
                "earlier one's answer, on purpose (each module starts from the last one's finished kernel), "
                "so students would find the answer of the earlier module in the later one's stub:\n  "
                + "\n  ".join(given) + "\nAssign those modules apart (one after the other's deadline), or "
                "pass --allow-answer-in-stubs if that is what you want.")
    return ids


def restrict_catalogue(source: str, ids: tuple[str, ...]) -> str:
    """grader/catalogue.py for an assignment: IDS names only its modules (the others' files are gone)."""
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "IDS" for t in n.targets))
    lines = source.splitlines(keepends=True)
    new = "IDS = (  # this assignment's modules (grader release --modules)\n" + "".join(
        f'    "{i}",\n' for i in ids) + ")\n"
    return "".join(lines[:node.lineno - 1]) + new + "".join(lines[node.end_lineno:])


def make_release(out_dir, root: Path | None = None, modules=None, allow_answer_in_stubs: bool = False) -> dict:
    """Write the student release of the course at `root` (the grader's course by default) to
    `out_dir`, check it gives nothing away, and return {"out", "files", "left_out": {rel: why},
    "modules": the assigned ids or None}. `modules`: only those modules' lessons, stubs, notebooks
    and grader data (`assigned` says which assignments are refused)."""
    root = Path(root).resolve() if root is not None else paths.course_root()
    if is_release(root):
        raise GraderError(f"{root} is a student release already: make a release from the course's own "
                          "repository (it has the solutions).")
    if not (root / "solutions").is_dir():
        raise GraderError(f"{root} has no solutions/: a release is made from the course's own repository.")
    ids = assigned(modules, allow_answer_in_stubs, root)
    out = check_out_dir(out_dir, root)
    created = not out.exists()
    kept, dropped = [], {}
    for rel in course_files(root):
        why = left_out(rel, ids)
        if why:
            dropped[rel] = why
        else:
            kept.append(rel)
    try:
        for rel in kept:
            src, dst = root / rel, out / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if rel == "README.md":
                dst.write_text(release_readme(src.read_text()))
            elif rel == "pyproject.toml":        # no tests/ to point pytest at (it would warn)
                dst.write_text(re.sub(r"(?m)^testpaths\s*=.*\n", "", src.read_text()))
            elif fnmatch.fnmatch(rel, "grader/tasks/*/__init__.py"):
                dst.write_text(encode_hints(src.read_text()))
            elif rel == "grader/catalogue.py" and ids is not None:
                dst.write_text(restrict_catalogue(src.read_text(), ids))
            else:
                shutil.copy2(src, dst)
        (out / MARKER).write_text(json.dumps({
            "release": "student", "course_version": _version(),
            "left_out": sorted({p for p, _ in LEFT_OUT} - {MARKER}),
            "modules": list(ids) if ids is not None else "all",
            "note": "made by `grader release`: the course without its solutions. The grader reads this "
                    "file to say which features need the solutions."}, indent=1) + "\n")
        found = leaks(out, solution_only_lines(root, ids))
        if found:
            raise GraderError("the release would give solutions away; nothing was written. Lines of a "
                              "solution's answer that no stub hands out occur in:\n  " + "\n  ".join(found[:20]))
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for child in out.iterdir():
                shutil.rmtree(child, ignore_errors=True) if child.is_dir() and not child.is_symlink() \
                    else child.unlink()
        raise
    return {"out": str(out), "files": len(kept) + 1, "left_out": dropped, "modules": ids}


def leak_rule(ids: tuple[str, ...] | None, allow_answer_in_stubs: bool = False) -> str:
    """The rule the release's own check applied, in words."""
    rule = (f"checked: no file of it holds a line of a solution's answer (a line between BEGIN and END "
            f"SOLUTION longer than {SOLUTION_ONLY_MIN_CHARS} characters) unless a stub of this release hands "
            "it out")
    if ids is None or allow_answer_in_stubs:
        return rule + (" (each module's stub starts from the previous module's finished kernel, so a later "
                       "stub holds lines of an earlier module's answer on purpose)")
    return rule + (f", and no assigned module's stub holds {ANSWER_GIVEN_SHARE:.0%} or more of an earlier "
                   "assigned module's answer lines")


def main_release(out_dir, modules=None, allow_answer_in_stubs: bool = False) -> int:
    """`grader release OUT_DIR`: write it, then say what was left out and what to do next."""
    r = make_release(out_dir, modules=modules, allow_answer_in_stubs=allow_answer_in_stubs)
    groups: dict[str, int] = {}
    for why in r["left_out"].values():
        groups[why] = groups.get(why, 0) + 1
    print(f"wrote a student release of the course to {r['out']} ({r['files']} files)")
    print("left out:")
    for why, n in groups.items():
        print(f"  {n:4d} file{'s' if n > 1 else ' '}  {why}")
    first = r["modules"][0][:2] if r["modules"] else "00"
    if r["modules"]:
        print(f"modules: {' '.join(r['modules'])}")
    print(f"{leak_rule(r['modules'], allow_answer_in_stubs)}. Try it:\n"
          f"  cd {r['out']} && python3 -m venv .venv && . .venv/bin/activate && "
          f"pip install -e '.[nvrtc]' && grader check {first}")
    return 0

