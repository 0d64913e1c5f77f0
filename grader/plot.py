"""Pictures of an error: the reference, the student's output and |error| side by side.

`grader check ID --plot` writes one PNG for the first failing case; in a notebook,
`error_figure(ref, out)` returns the same matplotlib figure, which Jupyter shows inline.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


def _slice_2d(a: np.ndarray, at: tuple) -> tuple[np.ndarray, str]:
    """The 2-D slice of `a` through the index `at`, over its last two axes."""
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 1:
        return a[None, :], "(row, column)"
    lead = tuple(int(i) for i in at[:a.ndim - 2])
    label = f"slice {list(lead)} over " if lead else ""
    return a[lead], label


def error_figure(ref: dict, out: dict, title: str = ""):
    """A figure with one row per output: reference | yours | |error| (NaN shown in magenta)."""
    import matplotlib
    import matplotlib.pyplot as plt
    names = [n for n in ref if n in out]
    fig, axes = plt.subplots(len(names), 3, figsize=(13, 3.6 * len(names)), squeeze=False)
    for row, name in zip(axes, names):
        want = np.asarray(ref[name], np.float64)
        got = np.asarray(out[name], np.float64)
        with np.errstate(invalid="ignore"):
            err = np.abs(got - want)
        err = np.where(np.isfinite(want) & ~np.isfinite(got), np.inf, np.nan_to_num(err, nan=0.0, posinf=0.0))
        flat = np.where(np.isfinite(err), err, -1)
        worst = np.unravel_index(int(np.argmax(np.where(np.isinf(err), np.finfo(float).max, flat))), err.shape)
        axis_names = {4: "(row, feature)", 3: "(head, row)", 2: "(row, column)", 1: "(row, column)"}
        for ax, data, what in zip(row, (want, got, err), ("reference", "yours", "|error|")):
            sl, label = _slice_2d(data, worst)
            cmap = matplotlib.colormaps["viridis" if what != "|error|" else "magma"].with_extremes(bad="magenta")
            shown = np.ma.masked_invalid(sl)
            im = ax.imshow(shown, aspect="auto", interpolation="nearest", cmap=cmap)
            ax.set_title(f"{name}: {what}")
            ax.set_xlabel(f"{label}{axis_names.get(data.ndim, '')}")
            fig.colorbar(im, ax=ax, fraction=0.046)
        row[2].plot(worst[-1], worst[-2] if err.ndim >= 2 else 0, "c+", ms=14, mew=2)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def save_error_plot(npz_path: str | Path, png_path: str | Path, title: str = "") -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = np.load(npz_path)
    ref = {k[4:]: data[k] for k in data.files if k.startswith("ref_")}
    out = {k[4:]: data[k] for k in data.files if k.startswith("out_")}
    fig = error_figure(ref, out, title)
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=90)
    plt.close(fig)
    return png_path
