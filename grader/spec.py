"""What a module declares as data: its cases, tolerances and benchmark shapes.

A task folder (grader/tasks/NAME/) builds its checks from these types; the engine, the pytest
plugin, `grader bench` and the tests read them and nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple


class Tolerance(NamedTuple):
    """A case passes when the relative Frobenius error is <= rel and the max abs error <= abs."""
    rel: float
    abs: float


# float32 accumulation over a few hundred terms lands near 1e-6 relative error; 2e-5 leaves room for
# exp2/__expf tricks while anything structurally wrong (a missed rescale, a wrong mask) is far above.
F32 = Tolerance(rel=2e-5, abs=2e-4)


@dataclass(frozen=True)
class Case:
    """One checked input: a name (unique in its module) and the parameters its generator reads."""
    name: str
    params: dict = field(default_factory=dict)

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.params.items())


@dataclass
class BenchContext:
    """What a baseline gets: the runtime, the inputs on the device, the case's parameters, and
    `solution(ex_id)`, the course's own finished version of a module (loaded by `grader bench`, so
    that task code never imports a solution)."""
    rt: object
    inputs: dict
    params: dict
    solution: Callable


@dataclass
class BenchCase:
    """A shape `grader bench` times, the figure that matters (FLOPs for compute-bound kernels, bytes
    for memory-bound ones), and baselines: callables (BenchContext) -> outputs, timed exactly like
    the student's function."""
    name: str
    params: dict
    flops: float = 0.0                    # for TFLOP/s
    bytes: float = 0.0                    # for GB/s
    baseline_only: tuple = ()             # inputs only baselines read: not in the roofline's minimum bytes
    baselines: dict[str, Callable] = field(default_factory=dict)


class Cause(NamedTuple):
    """A replay reproduced the output: `id` is stable (`lse:log2`, `keys_end:-1`, ...), `text` is
    what the student reads (engine/verdict.py)."""
    id: str
    text: str
    plain: bool = False   # reproduced only as a constant many bugs give (replays.matches)


class Seen(NamedTuple):
    """A plain observation of what the outputs show, never worded as a cause."""
    text: str


@dataclass
class LadderStep:
    """One rung of a module's speed ladder (grader/tasks/NAME/ladder.py, run by `grader ladder`): a
    complete kernel with the solution's signature, built from the solution's own code. `kernel(rt, d,
    dtype)` gives its main kernel as (the compiled function, its name, its shared-memory bytes), for
    the registers it takes; `timed=False` marks a variant checked with the whole ladder, never timed.
    A ladder's extra variants (module 11's) may support some head dimensions only (`dims`), be
    diagnostics that are timed but never checked (`checked=False`), or use PTX the CPU emulator does
    not run (`emulated=False`: checked on a GPU only)."""
    label: str
    fn: Callable
    kernel: Callable | None = None
    timed: bool = True
    dims: tuple = ()                      # () : every head dimension the module has
    checked: bool = True
    emulated: bool = True


@dataclass
class LadderContext:
    """What a ladder's steps are built from, handed over by `grader ladder` so that task code never
    imports a solution: `solution(ex_id)`, the course's finished module (one copy), and
    `fresh(ex_id)`, a new copy of it (its own KERNEL, CONFIG and compile cache, for a step to change)."""
    solution: Callable
    fresh: Callable


@dataclass
class LadderTiming:
    """How `grader ladder` times a ladder on a GPU once its steps passed their checks: every step and
    baseline at each shape in `shapes` (parameters as a case's), on the device inputs that
    `inputs(rt, params, solution)` makes (what the task's call() reads). A baseline is (label,
    fn(BenchContext) -> outputs, whether it runs on PyTorch: timed with torch's events); `ratios`
    names those shown as a "× label" column (their time / the row's). A figure is the median of
    `repeats` timings; `flops(params)` gives a call's FLOPs, for TFLOP/s."""
    shapes: list
    inputs: Callable
    flops: Callable
    baselines: list = field(default_factory=list)
    ratios: tuple = ()
    repeats: int = 1
