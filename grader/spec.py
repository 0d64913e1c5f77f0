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
