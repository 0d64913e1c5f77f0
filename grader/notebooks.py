"""The class notebooks, generated: notebooks/ID.ipynb is built from grader/tasks/NAME/notebook.py.

A task's notebook.py holds CELLS, a list of md("...") and code("...") cells. `grader notebooks`
writes the .ipynb files (without outputs, with stable cell ids, so regenerating changes nothing that
did not change); `grader notebooks --check` (and CI) fails when a committed notebook differs from its
generation. Edit the cells in notebook.py, never the .ipynb.

Every notebook also gets SETUP_CELL, after its title: on Colab or a fresh machine it installs the
course (from the clone the notebook sits in, else from a clone of the repository named in
pyproject.toml's [project.urls]), with the extra that fits the GPU it finds; where the course is
installed it prints one line and does nothing else.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

# Self-contained: it runs before the course is installed. pick_extra() is the decision (tested in
# tests/test_notebooks_setup.py); {REPO_URL} is filled in from pyproject.toml.
SETUP_CELL = """
# Setup: installs the course on Colab or a fresh machine; where it is installed, only says so.
import importlib, os, re, shutil, subprocess, sys

REPO = "{REPO_URL}"


def pick_extra(nvidia_smi, cupy_works):
    \"\"\"The course's pip extra: none over a working CuPy (Colab ships one), cuda12/cuda13 for the
    CUDA version nvidia-smi shows, nvrtc (the CPU emulator, no GPU needed) otherwise.\"\"\"
    if cupy_works:
        return ""
    found = re.search(r"CUDA Version:\\s*(\\d+)", nvidia_smi or "")
    major = int(found[1]) if found else 0
    return "cuda13" if major >= 13 else "cuda12" if major == 12 else "nvrtc"


def setup_course():
    try:
        import grader.cli, grader.paths
        root = grader.paths.course_root()
        print(f"course already installed: grader {grader.cli.version()} ({root})")
        return
    except Exception:
        pass
    root = ".." if os.path.isfile("../grader/catalogue.py") else "flash-attention-course"
    if not os.path.isdir(root):
        subprocess.run(["git", "clone", "--depth", "1", REPO, root], check=True)
    smi = shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi"], capture_output=True, text=True,
                                                                timeout=60).stdout
    try:
        import cupy
        cupy_works = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        cupy_works = False
    root, extra = os.path.abspath(root), pick_extra(smi, cupy_works)
    print(f"installing the course from {root}" + (f" with [{extra}]" if extra else "") + " ...")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e",
                    root + (f"[{extra}]" if extra else "")], check=True)
    sys.path.insert(0, root)              # this kernel imports it now, without a restart
    os.environ["GRADER_ROOT"] = root
    importlib.invalidate_caches()
    print("installed: `!grader doctor` says what this machine runs")


setup_course()
"""


def project_urls(root: Path | None = None) -> dict[str, str]:
    """pyproject.toml's [project.urls] (the one place the course's addresses live)."""
    if root is None:
        from .paths import course_root
        root = course_root()
    text = (Path(root) / "pyproject.toml").read_text()
    try:
        import tomllib
    except ImportError:                   # Python 3.10: the table's `Key = "value"` lines
        section = re.search(r"^\[project\.urls\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
        return dict(re.findall(r'^([\w-]+)\s*=\s*"([^"]*)"', section[1], re.M)) if section else {}
    return dict(tomllib.loads(text).get("project", {}).get("urls", {}))


def setup_cell_source(repo_url: str | None = None) -> str:
    """The setup cell's code, with the repository's address."""
    url = repo_url or project_urls().get("Repository")
    if not url:
        raise ValueError("pyproject.toml has no [project.urls] Repository: the notebooks' setup cell clones it")
    return SETUP_CELL.replace("{REPO_URL}", url)


def md(text: str) -> tuple[str, str]:
    return ("markdown", text)


def code(text: str) -> tuple[str, str]:
    return ("code", text)


# Notebooks of the whole course rather than of one module: file stem -> the module holding CELLS.
COURSE_NOTEBOOKS = {"roofline": "grader.roofline_notebook"}


def cells_of(name) -> tuple[str, list]:
    """(the prefix of its cell ids, its CELLS) for an exercise or a COURSE_NOTEBOOKS stem."""
    if isinstance(name, str):
        import importlib
        return name, importlib.import_module(COURSE_NOTEBOOKS[name]).CELLS
    from .tasks import load_piece
    return name.id[:2], load_piece(name, "notebook").CELLS


def build(ex) -> dict:
    """The notebook of exercise `ex` (or of a COURSE_NOTEBOOKS stem) as nbformat 4.5 JSON, without outputs."""
    prefix, source = cells_of(ex)
    cells = []
    for n, (kind, text) in enumerate(source):
        cell = {"cell_type": kind, "id": f"{prefix}-{n:02d}", "metadata": {},
                "source": text.strip("\n").splitlines(keepends=True)}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        cells.append(cell)
    # hide-input: the course site shows the cell folded (Jupyter and Colab ignore the tag).
    setup = {"cell_type": "code", "id": f"{prefix}-setup", "metadata": {"tags": ["hide-input"]},
             "source": setup_cell_source().strip("\n").splitlines(keepends=True)}
    setup.update(execution_count=None, outputs=[])
    cells.insert(1 if cells and cells[0]["cell_type"] == "markdown" else 0, setup)
    return {"cells": cells,
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def render(ex) -> str:
    return json.dumps(build(ex), indent=1, ensure_ascii=False) + "\n"
