#!/usr/bin/env python3
"""Execute a notebook top to bottom: with nbclient when it is installed (CI), else by running its
code cells in order in one namespace (the GPU machine has no Jupyter). Exit 1 on the first error.

    python scripts/run_notebook.py notebooks/02_flash_forward.ipynb [--timeout 600]
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def run_plain(path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    nb = json.loads(path.read_text())
    ns = {"__name__": "__main__"}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        src = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("%", "!")))
        try:
            exec(compile(src, f"{path.name}[cell {i}]", "exec"), ns)
        except Exception:
            print(f"{path.name}: cell {i} failed:\n{src[:500]}", file=sys.stderr)
            raise


def run_nbclient(path: Path, timeout: int) -> None:
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()


def main() -> int:
    path = Path(sys.argv[1]).resolve()
    timeout = int(sys.argv[sys.argv.index("--timeout") + 1]) if "--timeout" in sys.argv else 900
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.chdir(path.parent)
    try:
        import nbclient  # noqa: F401
        import ipykernel  # noqa: F401
    except ImportError:
        run_plain(path)
    else:
        run_nbclient(path, timeout)
    print(f"{path.name}: ran top to bottom")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
