"""The setup cell at the top of every notebook: a no-op where the course is installed (CI, a clone set up
by the README), an install on Colab or a fresh machine, with the extra that fits the GPU."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.notebooks import project_urls, setup_cell_source

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SMI = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: {cuda}     |
|-----------------------------------------+------------------------+----------------------+"""


def setup_source(nb: Path) -> str:
    cells = json.loads(nb.read_text())["cells"]
    setup = [c for c in cells if c["id"].endswith("-setup")]
    assert len(setup) == 1 and cells.index(setup[0]) <= 1, f"{nb.name}: one setup cell, at the top"
    return "".join(setup[0]["source"])


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_notebook_starts_with_the_setup_cell(nb):
    cells = json.loads(nb.read_text())["cells"]
    prefix = nb.stem[:2] if nb.stem[:2].isdigit() else nb.stem      # a module's number, or the course notebook's name
    assert cells[0]["cell_type"] == "markdown" and cells[1]["id"] == f"{prefix}-setup"
    assert setup_source(nb) == setup_cell_source().strip("\n")
    assert [c["id"] for c in cells[2:4]] == [f"{prefix}-01", f"{prefix}-02"]   # ids kept


def test_the_repository_address_lives_in_pyproject_only():
    url = project_urls(ROOT)["Repository"]
    assert url.startswith("https://") and f'REPO = "{url}"' in setup_cell_source()
    assert {"Repository", "Documentation", "Issues"} <= set(project_urls(ROOT))


def test_project_urls_parse_without_tomllib(monkeypatch):
    with_tomllib = project_urls(ROOT)
    monkeypatch.setitem(sys.modules, "tomllib", None)          # Python 3.10 has none
    assert project_urls(ROOT) == with_tomllib


DRIVER = r"""
import subprocess, sys
def forbidden(*args, **kwargs):
    raise SystemExit(f"the setup cell started a process: {args}")
subprocess.run = subprocess.Popen = subprocess.call = subprocess.check_call = subprocess.check_output = forbidden
exec(compile(open(sys.argv[1]).read(), "setup-cell", "exec"), {"__name__": "__main__"})
"""


def test_the_setup_cell_is_a_no_op_where_the_course_is_installed(tmp_path):
    cell = tmp_path / "cell.py"
    cell.write_text(setup_source(NOTEBOOKS[0]))
    env = dict(os.environ, GRADER_ROOT=str(ROOT), PIP_INDEX_URL="http://127.0.0.1:9/",
               PIP_NO_INDEX="1")                                # pip would fail, were it run
    r = subprocess.run([sys.executable, "-c", DRIVER, str(cell)], cwd=ROOT / "notebooks", env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("course already installed: grader "), r.stdout


@pytest.fixture
def cell(capsys):
    """The cell's namespace, executed here (the course is installed: it only prints)."""
    ns = {"__name__": "__main__"}
    exec(setup_cell_source(), ns)
    assert "course already installed" in capsys.readouterr().out
    return ns


@pytest.mark.parametrize("smi, cupy_works, extra", [
    (None, False, "nvrtc"),                                     # no nvidia-smi: the CPU emulator
    (SMI.format(cuda="12.4"), False, "cuda12"),
    (SMI.format(cuda="13.0"), False, "cuda13"),
    (SMI.format(cuda="12.4"), True, ""),                        # Colab: its cupy-cuda12x is kept
    (SMI.format(cuda="11.8"), False, "nvrtc"),                  # too old for the course's CuPy builds
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", False, "nvrtc"),
])
def test_the_extra_fits_the_gpu(cell, smi, cupy_works, extra):
    assert cell["pick_extra"](smi, cupy_works) == extra


def _install(cell, monkeypatch, cwd):
    """Run setup_course() as on a machine without the course: record the commands it would run."""
    calls = []
    monkeypatch.setitem(sys.modules, "grader", None)            # `import grader` fails
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    monkeypatch.setattr("shutil.which", lambda name: None)      # no nvidia-smi
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("GRADER_ROOT", "unchanged")
    monkeypatch.chdir(cwd)
    cell["setup_course"]()
    return calls


def test_inside_a_clone_it_installs_that_clone(cell, monkeypatch, tmp_path, capsys):
    (tmp_path / "grader").mkdir()
    (tmp_path / "grader" / "catalogue.py").write_text("")
    (tmp_path / "notebooks").mkdir()
    calls = _install(cell, monkeypatch, tmp_path / "notebooks")
    assert calls == [[sys.executable, "-m", "pip", "install", "-q", "-e", f"{tmp_path}[nvrtc]"]]
    assert sys.path[0] == str(tmp_path) and os.environ["GRADER_ROOT"] == str(tmp_path)


def test_elsewhere_it_clones_the_repository_then_installs_it(cell, monkeypatch, tmp_path):
    calls = _install(cell, monkeypatch, tmp_path)
    url = project_urls(ROOT)["Repository"]
    assert calls == [["git", "clone", "--depth", "1", url, "flash-attention-course"],
                     [sys.executable, "-m", "pip", "install", "-q", "-e",
                      f"{tmp_path / 'flash-attention-course'}[nvrtc]"]]
