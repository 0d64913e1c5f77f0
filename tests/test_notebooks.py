"""Every notebook runs top to bottom (on the CPU runtime in CI) and is stored without outputs."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(nb):
    data = json.loads(nb.read_text())
    for cell in data["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, (
                f"{nb.name}: clear the outputs before committing")


@pytest.mark.slow
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(nb, built_site):
    """Executed once per session by the site build (the `built_site` fixture), not again here."""
    if built_site is not None:
        error = built_site.error(nb.stem)
        assert error is None, error
        return
    # No Jupyter in this environment (the GPU machine): run its code cells in one namespace.
    env = dict(os.environ, GRADER_ROOT=str(ROOT), MPLBACKEND="Agg")
    env.setdefault("GRADER_BACKEND", "cpu")
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_notebook.py"), str(nb)],
                         capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
