"""Benchmark for 05_paged_decode: the page lookup should cost little next to module 04 on the same data."""
from ...attention.baselines import copy_bandwidth, kv_bytes
from ...spec import BenchCase, BenchContext
from .checks import call


def single_split(b: BenchContext):
    return call(b.solution("05_paged_decode").paged_decode, b.rt, b.inputs, dict(b.params, num_splits=1))


def splitkv_same_data(b: BenchContext):
    """Module 04's solution on the same keys and values, laid out contiguously."""
    i = b.inputs
    fn = b.solution("04_splitkv_decode").splitkv_decode
    return fn(b.rt, i["q"], i["k_cache"], i["v_cache"], i["context_lens"], i["scale"])


def _case(name, **p):
    return BenchCase(name, p, bytes=kv_bytes(p),
                     baselines={"copy bandwidth": copy_bandwidth, "solution, 1 split": single_split,
                                "04 solution, same data": splitkv_same_data})


BENCH = [
    _case("batch 1, long context", B=1, H=32, Hkv=8, d=128, ctx=65536, page_size=16, contiguous_copy=True),
    _case("batch 64", B=64, H=32, Hkv=8, d=128, ctx=2048, page_size=16, contiguous_copy=True),
]

# What `grader bench --backend cpu` counts on the emulator.
COUNTER_CASE = _case("counters: batch 4, context 4096", B=4, H=8, Hkv=2, d=128, ctx=4096, page_size=16)


# What the work check counts (engine/work.py): a block reads the pages of its context, not every column of the block table.
WORK_CASE = BenchCase("work_contexts_300_40_0_pages_32", dict(B=3, H=4, Hkv=2, d=64, lens="300/40/0", max_pages=32))
