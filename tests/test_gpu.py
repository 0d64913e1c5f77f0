"""On a real GPU (skipped elsewhere): the same verdicts as the CPU, and crashes contained."""
import pytest

from grader import catalogue, paths
from grader.engine.check import run_check

pytestmark = pytest.mark.gpu

AVAILABLE = [ex for ex in catalogue.EXERCISES if paths.solution_file(ex.id).is_file()]


@pytest.mark.parametrize("ex", AVAILABLE, ids=[e.id for e in AVAILABLE])
def test_solution_passes_on_the_gpu(ex):
    report = run_check(ex, paths.solution_file(ex.id), "gpu", seed=1234)
    assert report["passed"], [c for c in report["cases"] if not c["passed"]][:2]


OOB = '''
KERNEL = r"""
extern "C" __global__ void oob(float* o, int n) {
    // writes far outside the array: an illegal address that poisons the CUDA context
    o[(size_t)threadIdx.x * 1000000000ull + 987654321ull] = 1.0f;
}
"""

def naive_attention(rt, q, k, v, scale):
    o = rt.empty(q.shape, "float32")
    lse = rt.empty(q.shape[:3], "float32")
    rt.compile(KERNEL).get_function("oob")((1,), (32,), (o, rt.int32(1)))
    return o, lse
'''


def test_an_illegal_address_is_a_failed_case_not_a_dead_grader(tmp_path):
    path = tmp_path / "oob.py"
    path.write_text(OOB)
    ex = catalogue.resolve("00")
    report = run_check(ex, path, "gpu", seed=1, cases=["one_query_one_key", "tiny", "primes"])
    assert not report["passed"] and report["error"] is None
    first = report["cases"][0]
    assert first["kind"] == "crash", first
    assert "not run" in report["cases"][1]["message"]
    # ...and the grader still works afterwards, in a fresh child process:
    again = run_check(ex, paths.solution_file(ex.id), "gpu", seed=1, cases=["tiny"])
    assert again["passed"]


def test_python_int_for_int_parameter_is_refused_on_the_gpu():
    from grader.runtimes import get_runtime
    from grader.runtimes.base import LaunchError
    rt = get_runtime("gpu")
    k = rt.compile('extern "C" __global__ void f(float* o, int n) { o[0] = n; }').get_function("f")
    with pytest.raises(LaunchError, match=r"argument 2 \(int n\).*rt.int32"):
        k((1,), (1,), (rt.empty((1,)), 3))


PAST_THE_END = '''
KERNEL = r"""
extern "C" __global__ void past_the_end(float* o, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    o[i] = 0.0f;            // no bounds test: the last block writes past o's end
}
"""

def naive_attention(rt, q, k, v, scale):
    o = rt.empty(q.shape, "float32")
    lse = rt.zeros(q.shape[:3], "float32")
    n = o.size
    rt.compile(KERNEL).get_function("past_the_end")(((n + 255) // 256,), (256,), (o, rt.int32(n)))
    return o, lse
'''

RACY = '''
KERNEL = r"""
extern "C" __global__ void racy(const float* q, float* o, int n) {
    __shared__ float tile[256];
    int t = threadIdx.x;
    tile[t] = t < n ? q[t] : 0.0f;
    // missing __syncthreads(): thread t reads what thread 255 - t may not have written yet
    if (t < n) o[t] = tile[255 - t];
}
"""

def naive_attention(rt, q, k, v, scale):
    o = rt.zeros(q.shape, "float32")
    lse = rt.zeros(q.shape[:3], "float32")
    rt.compile(KERNEL).get_function("racy")((1,), (256,), (q, o, rt.int32(min(q.size, 256))))
    return o, lse
'''


def _sanitize(tmp_path, source, capsys):
    from grader.cli import main
    path = tmp_path / "attempt.py"
    path.write_text(source)
    rc = main(["check", "00", "--file", str(path), "--backend", "gpu", "--case", "primes",
               "--no-shrink", "--sanitize"])
    out = capsys.readouterr().out
    print(out)
    return rc, out


def test_sanitize_names_an_out_of_bounds_write_and_its_line(tmp_path, capsys):
    rc, out = _sanitize(tmp_path, PAST_THE_END, capsys)
    assert rc == 1
    assert "memcheck: found" in out and "out-of-bounds write" in out and "attempt.py:5" in out


def test_sanitize_names_a_shared_memory_race(tmp_path, capsys):
    rc, out = _sanitize(tmp_path, RACY, capsys)
    assert "racecheck: found" in out and "__syncthreads()" in out and "attempt.py:" in out


def test_bench_times_the_device_not_the_host():
    """grader bench's time_gpu: a call that spends 5 ms on the host before a tiny kernel is timed at the
    kernel's microseconds (the GPU was kept busy while the host queued it), and its host time is kept."""
    import time

    from grader.bench import time_gpu
    from grader.runtimes import get_runtime
    rt = get_runtime("gpu")
    x = rt.xp.ones(1024, dtype="float32")

    def slow_host():
        time.sleep(0.005)
        x.__iadd__(1)             # one tiny kernel

    host = []
    times = time_gpu(slow_host, rt, warmup=1, reps=5, host=host)
    assert max(times) < 1.0, times                   # ms: the 5 ms of host time are not in it
    assert min(host) >= 5.0, host
