"""The class notebooks, generated: notebooks/ID.ipynb is built from grader/tasks/NAME/notebook.py.

A task's notebook.py holds CELLS, a list of md("...") and code("...") cells. `grader notebooks`
writes the .ipynb files (without outputs, with stable cell ids, so regenerating changes nothing that
did not change); `grader notebooks --check` (and CI) fails when a committed notebook differs from its
generation. Edit the cells in notebook.py, never the .ipynb.
"""
from __future__ import annotations

import json


def md(text: str) -> tuple[str, str]:
    return ("markdown", text)


def code(text: str) -> tuple[str, str]:
    return ("code", text)


def build(ex) -> dict:
    """The notebook of exercise `ex` as nbformat 4.5 JSON, without outputs."""
    from .tasks import load_piece
    cells = []
    for n, (kind, text) in enumerate(load_piece(ex, "notebook").CELLS):
        cell = {"cell_type": kind, "id": f"{ex.id[:2]}-{n:02d}", "metadata": {},
                "source": text.strip("\n").splitlines(keepends=True)}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        cells.append(cell)
    return {"cells": cells,
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def render(ex) -> str:
    return json.dumps(build(ex), indent=1, ensure_ascii=False) + "\n"
