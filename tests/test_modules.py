"""Every module is complete: one task folder with all its pieces, plus the four student-facing files.

Adding a module means grader/tasks/NAME/ (checks, bench, wrong versions, notebook cells, catalogue
data) and modules/ID.md, exercises/ID.py, solutions/ID.py, notebooks/ID.ipynb (docs/design.md says
how); these tests fail, naming the missing piece, when one is left out.
"""
import ast
import re
from pathlib import Path

import pytest

from grader import catalogue, paths
from grader.notebooks import render
from grader.spec import BenchCase, Case, Tolerance
from grader.stubs import todo_numbers, todo_texts
from grader.tasks import PIECES, load_piece, package
from grader.wrong import Wrong

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "grader" / "tasks"
IDS = list(catalogue.IDS)


def test_every_task_folder_is_in_the_catalogue_and_the_course_is_in_order():
    folders = sorted(p.name for p in TASKS.iterdir() if (p / "__init__.py").is_file())
    assert folders == sorted(ex.name for ex in catalogue.EXERCISES), (
        "each folder under grader/tasks/ is one module, listed once in grader/catalogue.py IDS")
    assert IDS == sorted(IDS) and all(re.fullmatch(r"\d\d_[a-z0-9_]+", i) for i in IDS)


@pytest.mark.parametrize("ex_id", IDS)
def test_the_four_student_files_exist(ex_id):
    for path in (paths.lesson_file(ex_id), paths.exercise_file(ex_id), paths.solution_file(ex_id),
                 paths.notebook_file(ex_id)):
        assert path.is_file(), f"{ex_id}: {path.relative_to(ROOT)} is missing"


@pytest.mark.parametrize("ex_id", IDS)
def test_catalogue_data(ex_id):
    ex = catalogue.resolve(ex_id)
    pkg = package(ex.name)
    for attr in ("TITLE", "ENTRY", "GOALS", "HINTS"):
        assert getattr(pkg, attr, None), f"grader/tasks/{ex.name}/__init__.py must define {attr}"
    assert f"def {ex.entry}(" in paths.solution_file(ex_id).read_text(), (
        f"solutions/{ex_id}.py must define {ex.entry}(rt, ...), the ENTRY of its task folder")


@pytest.mark.parametrize("ex_id", IDS)
def test_every_piece_is_there_and_well_formed(ex_id):
    ex = catalogue.resolve(ex_id)
    for piece in PIECES:
        assert (TASKS / ex.name / f"{piece}.py").is_file(), f"grader/tasks/{ex.name}/{piece}.py is missing"
    checks = load_piece(ex, "checks")
    for attr in ("CASES", "TOLERANCES", "make_inputs", "reference", "call"):
        assert hasattr(checks, attr), f"grader/tasks/{ex.name}/checks.py must define {attr}"
    names = [c.name for c in checks.CASES]
    assert names and len(set(names)) == len(names), "cases need unique names"
    assert all(isinstance(c, Case) for c in checks.CASES)
    assert all(isinstance(t, Tolerance) for t in checks.TOLERANCES.values())
    bench = load_piece(ex, "bench")
    if hasattr(bench, "run"):            # a benchmark of its own (12: one process per GPU)
        assert callable(bench.run)
    else:
        assert bench.BENCH and all(isinstance(b, BenchCase) and b.baselines and (b.flops or b.bytes)
                                   for b in bench.BENCH)
    wrong = load_piece(ex, "wrong").WRONG
    assert len(wrong) >= 3 and all(isinstance(w, Wrong) and w.exercise == ex_id for w in wrong)
    assert sum(w.numeric for w in wrong) == 1, "mark one wrong version numeric=True (shrinking, --plot)"
    cells = load_piece(ex, "notebook").CELLS
    assert cells and {kind for kind, _ in cells} <= {"markdown", "code"}


@pytest.mark.parametrize("ex_id", IDS)
def test_the_reference_outputs_have_tolerances(ex_id):
    import numpy as np
    ex = catalogue.resolve(ex_id)
    checks = load_piece(ex, "checks")
    case = checks.CASES[0]
    inputs = checks.make_inputs(case.params, np.random.default_rng(0))
    ref = checks.reference(inputs, case.params)
    if hasattr(checks, "tolerances"):    # a tolerance per case (low precision; 12: per rank)
        assert set(ref) == set(checks.tolerances(inputs, case.params, ref))
    else:
        assert set(ref) == set(checks.TOLERANCES)


@pytest.mark.parametrize("ex_id", IDS)
def test_todos_are_numbered_from_one_in_solution_and_stub(ex_id):
    solution = paths.committed_text(paths.solution_file(ex_id))
    stub = paths.committed_text(paths.exercise_file(ex_id))
    n = len(todo_texts(solution))
    assert n and sorted(todo_texts(solution)) == list(range(1, n + 1))
    assert todo_numbers(stub) == list(range(1, n + 1))


@pytest.mark.parametrize("ex_id", IDS)
def test_committed_notebook_is_generated_from_its_cells(ex_id):
    ex = catalogue.resolve(ex_id)
    assert paths.committed_text(paths.notebook_file(ex_id)) == render(ex), (
        f"notebooks/{ex_id}.ipynb differs from grader/tasks/{ex.name}/notebook.py: run `grader notebooks`")


def _imports(path: Path) -> list[str]:
    """Absolute names of the modules a file imports (relative imports resolved)."""
    pkg = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = pkg.split(".")[:len(pkg.split(".")) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out += [mod] + [f"{mod}.{a.name}" for a in node.names]
    return out


@pytest.mark.parametrize("folder", sorted(p.name for p in TASKS.iterdir() if p.is_dir() and p.name != "__pycache__"))
def test_tasks_import_the_kit_never_each_other_or_a_solution(folder):
    for path in (TASKS / folder).glob("*.py"):
        for mod in _imports(path):
            if mod.startswith("grader.tasks."):
                assert mod.split(".")[2] == folder, f"{path.relative_to(ROOT)} imports another task: {mod}"
            assert not mod.startswith(("grader.course", "grader.engine", "grader.cli")), (
                f"{path.relative_to(ROOT)} imports {mod}: tasks sit below the tools")


def test_nothing_refers_outside_the_repository():
    tracked = [p for p in ROOT.rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".ipynb", ".toml", "")
               and not any(part.startswith(".") or part in ("build", "__pycache__") for part in
                           p.relative_to(ROOT).parts)]
    outside = ("DESIGN" + ".md", ".." + "/shared")      # spelled apart so this file passes too
    for path in tracked:
        text = path.read_text(errors="ignore")
        assert not any(name in text for name in outside), (
            f"{path.relative_to(ROOT)} refers to a file outside the repository")
