"""The emulator's counters: bytes, sectors and bank conflicts counted from the kernel's own accesses
agree with hand counts; a conflicting layout shows its n-way conflict; a kernel that skips no tile
shows the extra tiles; a race is found whatever order the threads ran in."""
from __future__ import annotations

import numpy as np
import pytest

from grader import catalogue
from grader.attention.baselines import key_tiles, prefill_bytes
from grader.counting import summary
from grader.course import load
from grader.runtimes.cpu import CpuRuntime
from grader.runtimes.cpu.counters import Report, conflicts_of

SHAPE = dict(B=1, H=2, Hkv=1, Nq=200, Nk=200, d=64)


@pytest.mark.parametrize("ex_id, causal", [("02_flash_forward", False), ("03_flash_causal", True)])
def test_counted_global_bytes_are_the_hand_count_of_the_tile_schedule(ex_id, causal):
    sol = load(ex_id)
    s = summary(catalogue.resolve(ex_id), getattr(sol, catalogue.resolve(ex_id).entry), sol.CONFIG, SHAPE)
    want = prefill_bytes(SHAPE, sol.CONFIG, causal=causal)
    assert abs(s["global_bytes"] - want) <= 0.01 * want, (s["global_bytes"], want)
    needed, _ = key_tiles(SHAPE, sol.CONFIG, causal=causal)
    assert s["tiles"]["needed"] == needed


def shared_kernel(stride: int) -> str:
    return r"""
extern "C" __global__ void touch(float* __restrict__ out)
{
    __shared__ float tile[32 * 33];
    const int t = threadIdx.x;
    tile[t * %d] = (float)t;          // lane t writes word t * stride
    __syncthreads();
    out[t] = tile[t * %d];
}
""" % (stride, stride)


@pytest.mark.parametrize("stride, ways", [(1, 1), (2, 2), (8, 8), (32, 32), (33, 1)])
def test_bank_conflicts_are_counted_n_way(stride, ways):
    rt = CpuRuntime(race_check="off", use_nvrtc=False)
    rt.counting = True
    out = np.zeros(32, np.float32)
    rt.compile(shared_kernel(stride)).get_function("touch")((1,), (32,), (out,))
    assert conflicts_of(Report(rt.counter_log)) == pytest.approx(ways)
    np.testing.assert_array_equal(out, np.arange(32))


@pytest.mark.parametrize("ex_id", ["02_flash_forward", "03_flash_causal"])
def test_the_solutions_have_no_bank_conflicts(ex_id):
    sol = load(ex_id)
    rt = CpuRuntime(race_check="off")
    rt.counting = True
    from grader.attention.inputs import attention_inputs
    x = attention_inputs(SHAPE, np.random.default_rng(0))
    getattr(sol, catalogue.resolve(ex_id).entry)(rt, x["q"], x["k"], x["v"], x["scale"])
    report = Report(rt.counter_log)
    assert conflicts_of(report) == 1.0, [(l.where, l.conflict_ways) for c in report.launches for l in c.lines
                                         if l.conflict_ways > 1]


def test_a_causal_kernel_that_skips_no_tile_passes_but_counts_about_twice_the_tiles(tmp_path):
    from grader.engine.check import run_check
    ex = catalogue.resolve("03_flash_causal")
    text = open(load(ex.id).__file__).read()
    old = "    const int kv_end = min(n_k, q_last + offset + 1);\n"
    assert text.count(old) == 1
    path = tmp_path / "no_skipping.py"
    path.write_text(text.replace(old, "    const int kv_end = n_k;   // every tile, masked ones too\n"))
    report = run_check(ex, path, "cpu", seed=1, cases=["causal_200_d_128", "chunked_prefill", "tiny"])
    assert report["passed"], [c["message"] for c in report["cases"] if not c["passed"]]

    from grader.engine.runner import load_exercise_function
    shape = dict(B=1, H=1, Hkv=1, Nq=512, Nk=512, d=64)
    sol = load(ex.id)
    good = summary(ex, sol.flash_causal, sol.CONFIG, shape)
    every = summary(ex, load_exercise_function(ex, path), sol.CONFIG, shape)
    tiles = every["tiles"]["computed"] / good["tiles"]["computed"]
    moved = every["global_bytes"] / good["global_bytes"]
    assert 1.7 <= tiles <= 2.0 and 1.5 <= moved <= 2.0, (tiles, moved)
    assert every["tiles"]["computed"] == every["tiles"]["all"]


RACY = r"""
extern "C" __global__ void shift(const float* __restrict__ x, float* __restrict__ y)
{
    __shared__ float s[64];
    const int t = threadIdx.x;
    s[t] = 0.0f;
    __syncthreads();                   // every word written once: no read of uninitialised memory
    s[t] = x[t];                       // @write
    %s
    y[t] = s[(t + 1) %% 64];           // @read
}
"""


@pytest.mark.parametrize("barrier", [False, True])
def test_the_counters_find_a_missing_barrier_whatever_the_order(barrier):
    rt = CpuRuntime(race_check="off", use_nvrtc=False)
    rt.counting = True
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    rt.compile(RACY % ("__syncthreads();" if barrier else "")).get_function("shift")((1,), (64,), (x, y))
    race = rt.counter_log[0].race
    if barrier:
        assert race is None
    else:
        assert race and "no __syncthreads() between them" in race and "shared memory" in race
