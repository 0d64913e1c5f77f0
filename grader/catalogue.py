"""The course, in order. Every tool reads this list; nothing else hard-codes the exercises.

Each exercise id `NN_name` names modules/NN_name.md (the lesson), exercises/NN_name.py (the stub),
solutions/NN_name.py, notebooks/NN_name.ipynb and the task folder grader/tasks/name/, which holds
the rest (title, goals, hints, checks, benchmark, wrong versions, notebook cells). The TODOs are
read from the solution's `BEGIN SOLUTION TODO(n): ...` markers.
"""
from __future__ import annotations

from dataclasses import dataclass

IDS = (
    "00_naive_attention",
    "01_online_softmax",
    "02_flash_forward",
    "03_flash_causal",
    "04_splitkv_decode",
    "05_paged_decode",
    "06_flash_tensor_cores",
    "07_varlen_prefill",
    "08_block_sparse",
    "09_flash_backward",
    "10_flash_hopper",
    "11_backward_tensor_cores",
    "12_ring_attention",
    "13_decode_tensor_cores",
    "14_backward_hopper",
)


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    entry: str                 # the Python function the exercise file defines
    goals: tuple[str, ...]
    hints: tuple[str, ...]

    @property
    def number(self) -> int:
        return int(self.id[:2])

    @property
    def name(self) -> str:
        return self.id[3:]

    @property
    def todos(self) -> tuple[str, ...]:
        """What TODO(1), TODO(2) ... ask for, from the solution's markers; from the stub's TODO lines
        where the solution is missing (a student release); empty if both are."""
        from . import paths
        from .stubs import stub_todo_texts, todo_texts
        path = paths.solution_file(self.id)
        if path.is_file():
            texts = todo_texts(path.read_text())
        elif paths.exercise_file(self.id).is_file():
            texts = stub_todo_texts(paths.exercise_file(self.id).read_text())
        else:
            return ()
        return tuple(texts[n] for n in sorted(texts))


def _load(ex_id: str) -> Exercise:
    from .tasks import package
    pkg = package(ex_id[3:])
    return Exercise(ex_id, pkg.TITLE, pkg.ENTRY, tuple(pkg.GOALS), tuple(pkg.HINTS))


EXERCISES: tuple[Exercise, ...] = tuple(_load(i) for i in IDS)
BY_ID = {ex.id: ex for ex in EXERCISES}


def resolve(name: str) -> Exercise:
    """Accept `02_flash_forward`, `02`, `2` or `flash_forward`."""
    key = str(name).strip()
    if key in BY_ID:
        return BY_ID[key]
    for ex in EXERCISES:
        if key.isdigit() and int(key) == ex.number:
            return ex
        if key == ex.name or key.replace("-", "_") == ex.name:
            return ex
    known = ", ".join(ex.id for ex in EXERCISES)
    raise KeyError(f"unknown exercise {name!r}. The exercises are: {known}.")
