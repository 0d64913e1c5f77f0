"""Benchmark for 04_splitkv_decode: bytes per second against a copy, and against one split."""
from ...attention.baselines import copy_bandwidth, kv_bytes
from ...spec import BenchCase, BenchContext
from .checks import call


def single_split(b: BenchContext):
    """The course solution forced to one split: one block per (sequence, kv head)."""
    return call(b.solution("04_splitkv_decode").splitkv_decode, b.rt, b.inputs, dict(b.params, num_splits=1))


def _case(name, **p):
    return BenchCase(name, p, bytes=kv_bytes(p),
                     baselines={"copy bandwidth": copy_bandwidth, "solution, 1 split": single_split})


BENCH = [
    _case("batch 1, long context", B=1, H=32, Hkv=8, d=128, ctx=65536),
    _case("batch 64", B=64, H=32, Hkv=8, d=128, ctx=2048),
]

# What `grader bench --backend cpu` counts on the emulator.
COUNTER_CASE = _case("counters: batch 4, context 4096", B=4, H=8, Hkv=2, d=128, ctx=4096)


# What the work check counts (engine/work.py): a block reads its split of a context, not the whole cache (max_len = 400).
WORK_CASE = BenchCase("work_contexts_300_40_0_max_400", dict(B=3, H=4, Hkv=2, d=64, lens="300/40/0", max_len=400))
