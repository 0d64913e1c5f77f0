"""`grader release OUT_DIR`: a student copy without the solutions, that gives none away and still checks."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.cli import main
from grader.errors import GraderError
from grader.release import MARKER, make_release
from grader.stubs import BEGIN, END, STUB

ROOT = Path(__file__).resolve().parent.parent
MIN_CHARS = 25


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "course"
    make_release(out, root=ROOT)
    return out


def grader_in(release, *args, tmp_path, code=None):
    """Run the release's own grader (not this checkout's) inside the release."""
    env = dict(os.environ, GRADER_ROOT=str(release), PYTHONPATH=str(release),
               GRADER_STATE_DIR=str(tmp_path / "state"))
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "grader", *args]
    return subprocess.run(cmd, cwd=release, env=env, capture_output=True, text=True, timeout=600)


def solution_only_lines() -> dict[str, str]:
    """Each answer line of a solution (between its BEGIN and END SOLUTION markers, stripped, longer
    than MIN_CHARS, not a STUB line) that no stub holds. A stub may hold an earlier module's answer on
    purpose (03's starts from 02's finished tile loop): what the exercises hand out is no secret."""
    handed_out = "\n".join(p.read_text() for p in (ROOT / "exercises").glob("*.py"))
    lines = {}
    for sol in sorted((ROOT / "solutions").glob("*.py")):
        inside = False
        for line in sol.read_text().splitlines():
            if BEGIN.match(line):
                inside = True
            elif END.match(line):
                inside = False
            elif inside and not STUB.match(line) and len(line.strip()) > MIN_CHARS \
                    and line.strip() not in handed_out:
                lines[line.strip()] = sol.name
    return lines


def holders(folder: Path, lines: dict[str, str]) -> list[str]:
    found = []
    for p in sorted(q for q in folder.rglob("*") if q.is_file()):
        try:
            text = p.read_text()
        except UnicodeDecodeError:
            continue
        if p.suffix == ".ipynb":            # what a reader sees: the cells' sources, unescaped
            import json
            text += "".join("".join(c["source"]) for c in json.loads(text)["cells"])
        found += [f"{p.relative_to(folder)}: {line} ({sol})" for line, sol in lines.items() if line in text]
    return found


def test_release_leaves_out_the_solutions_and_what_quotes_them(release):
    assert (release / MARKER).is_file()
    assert not (release / "solutions").exists()
    for gone in ("tests", ".git", ".ci", "build", ".venv", ".grader"):
        assert not (release / gone).exists(), gone
    assert not list(release.glob("grader/tasks/*/wrong.py"))
    assert not list(release.rglob("__pycache__")) and not list(release.rglob("*.egg-info"))
    assert sorted(p.name for p in (release / "scripts").iterdir()) == ["run_notebook.py"]
    for kept in ("exercises/00_naive_attention.py", "modules/09_flash_backward.md",
                 "notebooks/02_flash_forward.ipynb", "grader/catalogue.py", "pyproject.toml", "LICENSE"):
        assert (release / kept).is_file(), kept


def test_no_file_of_the_release_gives_a_solution_line_away(release):
    lines = solution_only_lines()
    assert len(lines) > 100                        # the test has teeth: many answer lines to look for
    assert holders(ROOT / "grader" / "tasks", lines)   # ... and finds them where they are (wrong.py, hints)
    leaked = holders(release, lines)
    assert not leaked, "the release gives solutions away:\n" + "\n".join(leaked[:20])


def test_a_stub_is_not_implemented_and_a_solution_copied_in_passes(release, tmp_path):
    r = grader_in(release, code="import grader; print(grader.__file__)", tmp_path=tmp_path)
    assert Path(r.stdout.strip()).is_relative_to(release)          # the release's own grader runs
    r = grader_in(release, "check", "00", "--backend", "cpu", tmp_path=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "not implemented yet" in r.stdout
    assert "TODO(1) (compute S[b, h, i, j]" in r.stdout           # the TODO's words, read from the stub
    stub = release / "exercises" / "00_naive_attention.py"
    kept = stub.read_text()
    try:
        shutil.copy(ROOT / "solutions" / "00_naive_attention.py", stub)
        r = grader_in(release, "check", "00", "--backend", "cpu", tmp_path=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        stub.write_text(kept)


def test_what_needs_a_solution_says_so(release, tmp_path):
    why = "needs solutions/00_naive_attention.py, which a student release leaves out"
    r = grader_in(release, "check", "00", "--solution", "--backend", "cpu", tmp_path=tmp_path)
    assert r.returncode == 2 and why in r.stderr, r.stdout + r.stderr
    r = grader_in(release, "stubs", tmp_path=tmp_path)
    assert r.returncode == 2 and "which a student release leaves out" in r.stderr
    r = grader_in(release, "ladder", "06", "--backend", "cpu", tmp_path=tmp_path)    # no ladder.py either
    assert r.returncode == 2 and "needs solutions/06_flash_tensor_cores.py, which a student release" in r.stderr
    assert not list(release.glob("grader/tasks/*/ladder.py")) and not list(release.glob("grader/tasks/*/variants.py"))
    r = grader_in(release, code="import runpy, sys; sys.argv = ['w', '02', 'no_rescale']; "
                  "runpy.run_module('grader.wrong', run_name='__main__')", tmp_path=tmp_path)
    assert r.returncode != 0 and "which a student release leaves out" in r.stderr
    r = grader_in(release, code="from grader.bench import _solution\n_solution('02_flash_forward')",
                  tmp_path=tmp_path)
    assert "SolutionMissing" in r.stderr and "needs solutions/02_flash_forward.py" in r.stderr


def test_notebooks_run_the_students_exercise_with_a_note(release, tmp_path):
    r = grader_in(release, code="from grader.course import load\nm = load('02_flash_forward')\n"
                  "load('02_flash_forward')\nprint(m.__file__)", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("note: this student release has no solutions/") == 1       # once per module
    assert "no `grader check 02` is recorded yet" in r.stdout
    assert r.stdout.strip().endswith(str(Path("exercises") / "02_flash_forward.py"))


def test_hints_are_encoded_but_given_one_at_a_time(release, tmp_path):
    from grader import catalogue
    hint = catalogue.resolve("00").hints[-1]
    assert hint not in (release / "grader/tasks/naive_attention/__init__.py").read_text()
    r = grader_in(release, "hint", "00", str(len(catalogue.resolve("00").hints)), tmp_path=tmp_path)
    assert r.returncode == 0 and hint in r.stdout


def test_the_readme_has_no_instructions_that_cannot_work_there(release):
    text = (release / "README.md").read_text()
    assert "student release" in text
    for gone in ("pip install -e '.[dev]'", "## For instructors", "solutions/ID.py", "scripts/gpu_suite.py"):
        assert gone not in text, gone
    assert "grader check 00_naive_attention" in text


def test_release_refuses_a_folder_in_use_or_inside_the_course(tmp_path, release, capsys):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(GraderError, match="not an empty folder"):
        make_release(busy, root=ROOT)
    assert (busy / "notes.txt").read_text() == "mine"
    assert main(["release", str(busy)]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    with pytest.raises(GraderError, match="inside the course"):
        make_release(ROOT / "out" / "release", root=ROOT)
    with pytest.raises(GraderError, match="a student release already"):
        make_release(tmp_path / "again", root=release)
    empty = tmp_path / "empty"
    empty.mkdir()
    make_release(empty, root=ROOT)                 # an empty folder is fine
    assert (empty / MARKER).is_file()


def test_an_assignment_holds_only_its_modules_and_no_line_of_their_answers(tmp_path):
    out = tmp_path / "course"
    r = make_release(out, root=ROOT, modules=["00", "1", "flash_forward"])
    assert r["modules"] == ("00_naive_attention", "01_online_softmax", "02_flash_forward")
    assert sorted(p.name for p in (out / "exercises").glob("*.py")) == [f"{i}.py" for i in r["modules"]]
    assert sorted(p.stem for p in (out / "modules").glob("*.md")) == list(r["modules"])
    assert not (out / "grader" / "tasks" / "flash_causal").exists()
    # Any line of 02's solution longer than a bounds guard: only what its own stub hands out.
    own = (ROOT / "exercises" / "02_flash_forward.py").read_text()
    answer = {s.strip() for s in (ROOT / "solutions" / "02_flash_forward.py").read_text().splitlines()
              if len(s.strip()) > MIN_CHARS and s.strip() not in own}
    for p in (q for q in out.rglob("*") if q.is_file()):
        text = p.read_text(errors="ignore")
        held = [s for s in answer if s in text]
        assert not held, f"{p.relative_to(out)} holds {held[:2]}"
    listed = grader_in(out, "list", tmp_path=tmp_path)
    assert listed.returncode == 0 and "02_flash_forward" in listed.stdout and "03_flash" not in listed.stdout


def test_an_assignment_whose_later_stub_holds_an_earlier_answer_is_refused_with_the_reason(tmp_path, capsys):
    with pytest.raises(GraderError, match=r"(?s)--modules 02 03 is refused.*exercises/03_flash_causal.py holds \d+ of "
                                          r"the \d+ lines of 02_flash_forward's answer"):
        make_release(tmp_path / "a", root=ROOT, modules=["02", "03"])
    assert not (tmp_path / "a").exists()
    assert main(["release", str(tmp_path / "b"), "--modules", "02", "03"]) == 2
    assert "--allow-answer-in-stubs" in capsys.readouterr().err
    r = make_release(tmp_path / "c", root=ROOT, modules=["02", "03"], allow_answer_in_stubs=True)
    assert r["modules"] == ("02_flash_forward", "03_flash_causal")
