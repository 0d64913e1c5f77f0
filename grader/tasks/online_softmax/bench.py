"""Benchmark for 01_online_softmax: one pass over x against CuPy's several."""
from ...attention.baselines import cupy_softmax
from ...spec import BenchCase

_SHAPE = dict(R=16384, n=4096)
BENCH = [
    # The fewest bytes: read x once, write y once.
    BenchCase("R16384_n4096", _SHAPE, bytes=2.0 * 4 * _SHAPE["R"] * _SHAPE["n"],
              baselines={"CuPy (max, exp, sum, divide)": cupy_softmax}),
]
# The work check's case (engine/work.py): rows not a multiple of a block's, so an idle block shows.
WORK_CASE = BenchCase("work_R130_n300", dict(R=130, n=300))
