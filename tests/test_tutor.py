"""The grader as a tutor, on every module: the smallest failing shape, and a picture of the error."""
from pathlib import Path

import pytest

from grader import catalogue
from grader.cli import main
from grader.wrong import for_exercise, write


@pytest.mark.slow
@pytest.mark.parametrize("ex", catalogue.EXERCISES, ids=[e.id for e in catalogue.EXERCISES])
def test_plot_and_shrinking_work_on_every_module(ex, tmp_path, capsys, monkeypatch):
    # The module's wrong version whose failure is numeric (so there is an error to shrink and draw).
    ex_id = ex.id
    path = write(next(w for w in for_exercise(ex) if w.numeric), tmp_path)
    monkeypatch.setenv("GRADER_STATE_DIR", str(tmp_path / "state"))
    rc = main(["check", ex_id, "--file", str(path), "--backend", "cpu", "--seed", "3", "--plot"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "Smallest failing shape found:" in out and "--shape " in out, out[-3000:]
    png = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("Picture of the error: "))
    assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the replay command really reproduces the small failure
    replay = next(line.split("Replay it: ", 1)[1] for line in out.splitlines() if "Replay it: " in line)
    args = replay.split()[1:]
    assert main(args) == 1
    assert "custom" in capsys.readouterr().out


def test_error_figure_for_notebooks():
    import numpy as np

    from grader.plot import error_figure
    ref = {"o": np.ones((1, 2, 5, 4)), "lse": np.zeros((1, 2, 5))}
    out = {"o": np.ones((1, 2, 5, 4)), "lse": np.zeros((1, 2, 5))}
    out["o"][0, 1, 3, 2] = np.nan
    fig = error_figure(ref, out, "t")
    assert len(fig.axes) >= 6
