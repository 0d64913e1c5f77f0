"""The first divergence, for a failure no replay reproduced: run the submission and the finished
version on the emulator on the same (shrunk) case, both traced, and say where their blocks first read
or write other elements (grader/runtimes/cpu/trace.py). An observation with its line, never a cause.

It needs the finished version: a student release and an autograder ship none, and this says so.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..catalogue import Exercise
from ..errors import GraderError
from ..runtimes.base import KernelFault, LaunchError
from ..spec import Case

NO_SOLUTION = ("no finished version is installed here to trace your kernel against (a student release "
               "or an autograder ships none), so the first divergence was not traced.")


def _traced_run(ex: Exercise, fn, case: Case, seed: int) -> tuple[list, bool]:
    """The launches' traces, and whether a fault stopped the last one."""
    from ..runtimes.cpu.runtime import CpuRuntime
    from .runner import case_rng, load_task
    task = load_task(ex)
    rt = CpuRuntime(race_check="off")
    rt.counting = rt.tracing = True
    inputs = task.make_inputs(case.params, case_rng(seed, case.name))
    device = {k: rt.asarray(v.copy()) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    rt.start_poisoning()
    faulted = False
    try:
        task.call(fn, rt, device, case.params)
    except (KernelFault, LaunchError):   # the kernel's fault mid-way: the launches traced so far tell
        faulted = True
    finally:
        rt.poison_outputs = False
    for t, c in zip(rt.trace_log, rt.counter_log):     # one of each per launch that ran to its end
        t.counts = c
    return rt.trace_log, faulted


def _student_lines(traces: list, path: str | None) -> None:
    """The student's lines, with their text (addr2line gives the file's base name only)."""
    if not path:
        return
    base = Path(path).name
    for t in traces:
        t.lines = {w: path + p[len(base):] if p.startswith(base + ":") else p for w, p in t.lines.items()}
        t.student = path


def first_divergence(ex: Exercise, fn, case: Case, seed: int) -> str | None:
    """The observation for `fn` (the submission's entry function) on `case`, or None where the
    trace shows no difference in what the blocks read and write. NO_SOLUTION without a finished
    version."""
    from ..release import solution_path
    from ..runtimes.cpu.trace import first_divergence as compare
    from .runner import load_exercise_function
    try:
        sol_path = solution_path(ex.id, "tracing the first divergence")
    except GraderError:
        return NO_SOLUTION
    if not Path(sol_path).is_file():
        return NO_SOLUTION
    solution = load_exercise_function(ex, Path(sol_path))
    mine, faulted = _traced_run(ex, fn, case, seed)
    _student_lines(mine, getattr(fn, "__code__", None) and fn.__code__.co_filename)
    theirs, _ = _traced_run(ex, solution, case, seed)
    if not mine or not theirs:
        return None
    return compare(mine, theirs, partial=faulted)


def blocks_overlap(ex: Exercise, fn, case: Case, seed: int) -> str | None:
    """For a result that depends on the order of the blocks: the submission alone, traced on `case`,
    and the first output element two of its blocks store (no finished version is needed)."""
    from ..runtimes.cpu.trace import written_by_two_blocks
    mine, _ = _traced_run(ex, fn, case, seed)
    _student_lines(mine, getattr(fn, "__code__", None) and fn.__code__.co_filename)
    return written_by_two_blocks(mine)
