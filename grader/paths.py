"""Where the course lives on disk, and the committed version of a file."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from .runtimes.base import GraderError


def course_root() -> Path:
    """The repository root: $GRADER_ROOT, else the first parent of the cwd with exercises/ and
    grader/catalogue.py, else the checkout this package was installed from (pip install -e .)."""
    env = os.environ.get("GRADER_ROOT")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for p in (here, *here.parents):
        if (p / "exercises").is_dir() and (p / "grader" / "catalogue.py").is_file():
            return p
    pkg_parent = Path(__file__).resolve().parent.parent
    if (pkg_parent / "exercises").is_dir():
        return pkg_parent
    raise GraderError("cannot find the course folder (with exercises/ and solutions/). Run the grader "
                      "inside your clone of the course, or set GRADER_ROOT to it.")


def exercise_file(ex_id: str) -> Path:
    return course_root() / "exercises" / f"{ex_id}.py"


def solution_file(ex_id: str) -> Path:
    return course_root() / "solutions" / f"{ex_id}.py"


def lesson_file(ex_id: str) -> Path:
    return course_root() / "modules" / f"{ex_id}.md"


def notebook_file(ex_id: str) -> Path:
    return course_root() / "notebooks" / f"{ex_id}.ipynb"


def state_dir() -> Path:
    """Progress and hints: .grader/ at the course root, or $GRADER_STATE_DIR."""
    d = Path(os.environ["GRADER_STATE_DIR"]) if os.environ.get("GRADER_STATE_DIR") else course_root() / ".grader"
    d.mkdir(parents=True, exist_ok=True)
    return d


def committed_text(path: Path) -> str:
    """The file as committed at HEAD (so a student's own edits never change the project's tests);
    the file on disk when this is not a git checkout or the file is not committed yet."""
    path = Path(path).resolve()
    root = course_root()
    try:
        rel = path.relative_to(root).as_posix()
        out = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=root, capture_output=True,
                             text=True, timeout=20)
        if out.returncode == 0:
            return out.stdout
    except (ValueError, OSError, subprocess.SubprocessError):
        pass
    return path.read_text()
