"""Finding a module's file in what a student uploaded, whatever its folder or name.

A submission is a folder (Gradescope's /autograder/submission) holding the exercise file as it was
uploaded: `00_naive_attention.py`, a renamed `my_attention.py`, the whole course folder
(`exercises/00_naive_attention.py`, also what Gradescope's GitHub and Bitbucket submissions give), or
a .zip of any of these. Zips are unpacked (safely: no path outside the folder, bounded sizes) and
searched like folders.

For a module, `locate` takes, in order: a file named exactly `ID.py` (one under exercises/ first),
then a .py file that defines the module's entry function at top level (`def flash_forward(`), one
whose name mentions the module first; a file still identical to the stub comes last. Several
candidates: the first in that order, with a note that names them all.
"""
from __future__ import annotations

import re
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# Never a student's exercise: packaging junk, caches, and the course's own folders in an uploaded clone.
SKIPPED_PARTS = {"__MACOSX", "__pycache__", ".ipynb_checkpoints", ".git", ".grader", ".venv", "solutions",
                 "grader", "tests", "scripts"}
MAX_ZIP_BYTES = 64 * 2**20      # unpacked, per zip
MAX_ZIP_MEMBERS = 5000
MAX_DEPTH = 2                   # a zip inside a zip, no deeper


@dataclass
class Found:
    path: Path                  # the file to check
    shown: str                  # how the student knows it: "my_attention.py", "course.zip: exercises/00_...py"
    note: str = ""              # a choice the student should know about


def _visible(rel: Path) -> bool:
    return not any(part in SKIPPED_PARTS or part.startswith(".") for part in rel.parts)


def _unzip(archive: Path, dest: Path, notes: list[str], shown: str) -> bool:
    try:
        with zipfile.ZipFile(archive) as z:
            members = [m for m in z.infolist() if not m.is_dir()]
            if len(members) > MAX_ZIP_MEMBERS or sum(m.file_size for m in members) > MAX_ZIP_BYTES:
                notes.append(f"{shown} is too large to unpack here (over {MAX_ZIP_MEMBERS} files or "
                             f"{MAX_ZIP_BYTES >> 20} MB): upload the exercise files alone.")
                return False
            for m in members:
                rel = PurePosixPath(m.filename.replace("\\", "/"))
                if rel.is_absolute() or ".." in rel.parts or not rel.parts:
                    continue                          # never outside dest
                target = dest.joinpath(*rel.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(m) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
        return True
    except (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError, EOFError) as e:
        notes.append(f"{shown} could not be unpacked ({type(e).__name__}: {e}).")
        return False


def gather(folder: Path, work: Path) -> tuple[list[tuple[Path, str]], list[str]]:
    """Every .py file of the submission in `folder` as (path, shown), zips unpacked under `work`,
    and notes on what could not be read."""
    files: list[tuple[Path, str]] = []
    notes: list[str] = []
    counter = 0

    def walk(base: Path, prefix: str, depth: int) -> None:
        nonlocal counter
        if not base.is_dir():
            return
        for p in sorted(base.rglob("*")):
            rel = p.relative_to(base)
            if not _visible(rel) or not p.is_file() or p.is_symlink():
                continue
            shown = prefix + rel.as_posix()
            if p.suffix == ".py":
                files.append((p, shown))
            elif p.suffix.lower() == ".zip" and depth < MAX_DEPTH:
                counter += 1
                dest = work / f"{counter}-{p.stem}"
                if _unzip(p, dest, notes, shown):
                    walk(dest, f"{shown}: ", depth + 1)
    walk(Path(folder), "", 0)
    return files, notes


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def locate(ex_id: str, entry: str, files: list[tuple[Path, str]], stub: str | None = None) -> Found | None:
    """The file of module `ex_id` (entry function `entry`) among `files`, or None. A file that is
    still the stub (`stub`'s text) is taken only when no other candidate is there."""
    number, name = ex_id[:2], ex_id[3:]
    defines = re.compile(rf"^def\s+{re.escape(entry)}\s*\(", re.M)

    def rank(f):
        path, shown = f
        stem = path.stem.lower()
        named = name in stem or re.search(rf"(?<!\d){number}(?!\d)", stem) is not None
        return (stub is not None and _text(path) == stub, path.name != f"{ex_id}.py",
                path.parent.name != "exercises", not named, shown.count("/"), shown)
    candidates = sorted((f for f in files if f[0].name == f"{ex_id}.py" or defines.search(_text(f[0]))),
                        key=rank)
    if not candidates:
        return None
    path, shown = candidates[0]
    note = ""
    if len(candidates) > 1:
        note = f"several files could be {ex_id} ({', '.join(s for _, s in candidates)}); checked {shown}"
    return Found(path, shown, note)
