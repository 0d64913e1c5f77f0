"""Wrong versions: a solution with one planted bug, which the checks must reject with the right words.

Each task folder's wrong.py lists its own as `Wrong` entries, kept as the exact text edits that plant
the bug, so they follow the solutions as those change: `build` applies the edits to the committed
solution and fails loudly when an edit no longer matches exactly once (then update the edit).

    python -m grader.wrong 02 no_rescale > /tmp/no_rescale.py        # one of them as a file
    grader check 02 --file /tmp/no_rescale.py --backend cpu           # what a student would be told

`cause`: the id of the replay that reproduces the bug (engine/verdict.py), which the check must
state, and no other; None when no replay models it (a fault the emulator names, an observation):
then the check must state no cause at all. `expect`: phrases that must all appear in the message of
the first failing case. `cases`, when
given, are the cases the project's test runs (to keep CI fast). `numeric`: the failure is a wrong
number rather than a crash or a fault, so there is an error to shrink and to draw (one per module).
`backends`: where the explanation is expected (some come from the CPU emulator's own detectors).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Wrong:
    exercise: str
    name: str
    what: str
    edits: tuple            # ((old, new), ...): each old text occurs exactly once in the solution
    expect: tuple           # phrases the grader's message must contain
    cause: str | None = None  # the stated cause's id (None: the check states none)
    cases: tuple | None = None
    numeric: bool = False
    backends: tuple = ("cpu", "gpu")

    @property
    def id(self) -> str:
        return f"{self.exercise}/{self.name}"


def build(w: Wrong, solution_text: str | None = None) -> str:
    """The wrong version's source: the solution (docstring replaced) with the bug's edits applied."""
    from .release import solution_path
    text = solution_text if solution_text is not None else \
        solution_path(w.exercise, "a wrong version (python -m grader.wrong)").read_text()
    for old, new in w.edits:
        n = text.count(old)
        if n != 1:
            raise ValueError(f"{w.id}: the text to replace occurs {n} times in solutions/{w.exercise}.py "
                             f"(it must occur once); update the edit in grader/tasks/*/wrong.py:\n{old}")
        text = text.replace(old, new)
    body = text.split('"""', 2)[2] if text.lstrip().startswith('"""') else text
    return f'"""WRONG VERSION of {w.exercise} ({w.name}): {w.what}."""' + body


def write(w: Wrong, folder) -> Path:
    path = Path(folder) / f"{w.exercise}-{w.name}.py"
    path.write_text(build(w))
    return path


def for_exercise(ex) -> list[Wrong]:
    from .release import is_release
    from .tasks import load_piece
    if is_release():
        from .errors import GraderError
        raise GraderError(f"the wrong versions of {ex.id} (grader/tasks/{ex.name}/wrong.py) are edits of "
                          f"solutions/{ex.id}.py, which a student release leaves out, with them.")
    return list(load_piece(ex, "wrong").WRONG)


def all_wrong() -> list[Wrong]:
    from .catalogue import EXERCISES
    return [w for ex in EXERCISES for w in for_exercise(ex)]


def find(exercise: str, name: str) -> Wrong:
    from .catalogue import resolve
    ex = resolve(exercise)                        # accepts 01, 1, online_softmax ...
    for w in for_exercise(ex):
        if w.name == name:
            return w
    raise KeyError(f"no wrong version {ex.id}/{name}; there are: "
                   + ", ".join(w.name for w in for_exercise(ex)))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m grader.wrong EXERCISE NAME")
    from .errors import GraderError
    try:
        sys.stdout.write(build(find(sys.argv[1], sys.argv[2])))
    except GraderError as e:
        sys.exit(f"grader: {e}")
