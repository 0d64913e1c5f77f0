"""Module 12's ranks on the CPU: the stand-in for NCCL (matching, groups, deadlocks) and the stream model
(races across streams), each able to fail; the placement; and the GPU path's refusal to share a GPU."""
import numpy as np
import pytest

from grader.attention import ring
from grader.errors import CaseNotRunnable, GraderError
from grader.runtimes import ranks
from grader.runtimes.cpu import CpuRuntime

COPY = r'''
extern "C" __global__ void copy(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
'''


@pytest.fixture(scope="module")
def rt():
    return CpuRuntime()


def _pass_on(rt, comm, x, grouped=True, receive_first=False, wait=True):
    """Send x to the next rank and receive the previous rank's into a new buffer, then copy it with a kernel
    on another stream (waiting for the receive's event, or not)."""
    got, out = rt.empty(x.shape, x.dtype), rt.empty(x.shape, x.dtype)
    transfer, compute = rt.stream(), rt.stream()
    nxt, prev = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    calls = [lambda: comm.send(x, nxt, transfer), lambda: comm.recv(got, prev, transfer)]
    if receive_first:
        calls.reverse()
    if grouped:
        with comm.group():
            for c in calls:
                c()
    else:
        for c in calls:
            c()
    if wait:
        compute.wait_event(transfer.record())
    with compute:
        rt.compile(COPY).get_function("copy")((1,), (32,), (got, out, np.int32(x.size)))
    return out


def _run(rt, size, **kw):
    data = [dict(x=rt.asarray(np.full(8, r, np.float32))) for r in range(size)]
    return ranks.run_ranks(rt, size, lambda rt, comm, x: _pass_on(rt, comm, x, **kw), data)


@pytest.mark.parametrize("size", [2, 3, 4])
def test_a_ring_exchange_in_a_group_delivers_each_slice_to_the_next_rank(rt, size):
    out = _run(rt, size)
    for r in range(size):
        assert (out[r] == (r - 1) % size).all()


def test_receives_before_sends_outside_a_group_deadlock_and_every_rank_is_named(rt):
    with pytest.raises(ranks.RankDeadlock) as e:
        _run(rt, 3, grouped=False, receive_first=True)
    text = str(e.value)
    for r in range(3):
        assert f"rank {r} waits in comm.recv from rank {(r - 1) % 3}" in text
    assert "line" in text


def test_sends_first_outside_a_group_also_deadlock(rt):
    """The stand-in's send waits for its receive (NCCL's rendezvous), whatever the size."""
    with pytest.raises(ranks.RankDeadlock, match="rank 0 waits in comm.send to rank 1"):
        _run(rt, 2, grouped=False)


def test_a_kernel_that_reads_a_receive_without_its_event_is_a_race_across_streams(rt):
    with pytest.raises(ranks.StreamRace) as e:
        _run(rt, 2, wait=False)
    text = str(e.value)
    assert "comm.recv from rank" in text and "kernel copy" in text and "no event ordering the two" in text


def test_a_receive_into_a_buffer_another_stream_still_reads_is_a_race(rt):
    def body(rt, comm, x):
        buf = rt.zeros(x.shape, x.dtype)
        out = rt.empty(x.shape, x.dtype)
        compute, transfer = rt.stream(), rt.stream()
        with compute:
            rt.compile(COPY).get_function("copy")((1,), (32,), (buf, out, np.int32(x.size)))
        with comm.group():                   # the receive overwrites buf with no event after the read
            comm.send(x, (comm.rank + 1) % comm.size, transfer)
            comm.recv(buf, (comm.rank - 1) % comm.size, transfer)
        return out
    with pytest.raises(ranks.StreamRace, match="can overwrite the buffer while the earlier one still reads it"):
        ranks.run_ranks(rt, 2, body, [dict(x=rt.asarray(np.ones(8, np.float32))) for _ in range(2)])


def test_a_send_and_its_receive_of_different_sizes_are_refused(rt):
    def body(rt, comm, x):
        buf = rt.empty(x.size + comm.rank, x.dtype)
        s = rt.stream()
        with comm.group():
            comm.send(x, 1 - comm.rank, s)
            comm.recv(buf, 1 - comm.rank, s)
        return buf
    with pytest.raises(GraderError, match="moves 32 bytes.*has room for 36"):
        ranks.run_ranks(rt, 2, body, [dict(x=rt.asarray(np.ones(8, np.float32))) for _ in range(2)])


def test_a_peer_out_of_range_and_a_strided_buffer_are_refused(rt):
    def bad_peer(rt, comm, x):
        comm.send(x, comm.size, rt.stream())

    def strided(rt, comm, x):
        comm.send(x[::2], 1 - comm.rank, rt.stream())
    data = [dict(x=rt.asarray(np.ones(8, np.float32))) for _ in range(2)]
    with pytest.raises(GraderError, match="needs a peer rank in 0 .. 1"):
        ranks.run_ranks(rt, 2, bad_peer, data)
    with pytest.raises(GraderError, match="must be contiguous"):
        ranks.run_ranks(rt, 2, strided, data)


def test_a_rank_that_raises_stops_every_rank_and_is_named(rt):
    def body(rt, comm, x):
        if comm.rank == 1:
            raise ValueError("boom")
        comm.recv(rt.empty(x.shape, x.dtype), 1, rt.stream())
    with pytest.raises(ValueError, match="rank 1: boom"):
        ranks.run_ranks(rt, 2, body, [dict(x=rt.asarray(np.ones(8, np.float32))) for _ in range(2)])


@pytest.mark.parametrize("n,size", [(24, 2), (29, 3), (31, 3), (40, 4), (9, 4)])
def test_the_placement_covers_the_sequence_once_and_agrees_with_the_solution(n, size):
    from grader.course import load
    sol = load("12_ring_attention")
    bounds = ring.chunk_bounds(n, size)
    assert bounds == sol.chunk_bounds(n, size)
    lengths = [b - a for a, b in bounds]
    assert bounds[0][0] == 0 and bounds[-1][1] == n and max(lengths) - min(lengths) <= 1
    assert all(ring.chunks_of(r, size) == tuple(sol.chunks_of(r, size)) for r in range(size))
    assert sorted(np.concatenate([ring.positions(r, size, n) for r in range(size)]).tolist()) == list(range(n))
    x = np.arange(2 * n).reshape(1, 1, n, 2)
    assert (ring.unshard([ring.shard(x, r, size) for r in range(size)], n) == x).all()


def test_zigzag_gives_every_rank_the_same_causal_work():
    n, size = 4096, 4
    work = [int((ring.positions(r, size, n) + 1).sum()) for r in range(size)]
    assert max(work) == min(work)


def test_more_ranks_than_gpus_is_a_case_not_run(monkeypatch):
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.runtime.getDeviceCount() >= 8:
        pytest.skip("this machine has 8 GPUs")
    with pytest.raises(CaseNotRunnable, match="one per GPU"):
        ranks.run_on_gpus(8, lambda: None, [{}] * 8, __file__)


def test_gpu_ranks_that_go_silent_are_a_timeout_for_the_emulator_to_decide(rt, monkeypatch):
    """On GPUs, ranks silent for STALL_S prove no deadlock: the case is a timeout, not an error, so that the
    GPU check replays it on the CPU stand-in (engine/check.py, cpu_replay), which names the waiting calls."""
    from grader import catalogue, paths
    from grader.engine.runner import load_exercise_function, run_case
    from grader.tasks import load_task
    ex = catalogue.resolve("12_ring_attention")
    task = load_task(ex)
    case = next(c for c in task.CASES if c.name == "two_ranks")

    def silent(*args, **kwargs):        # what run_on_gpus raises in the parent, outside every rank
        raise ranks.RankStall("ranks 0, 1 did not finish: nothing happened for 4 s. rank 0's NCCL calls: "
                              "comm.recv from rank 1")
    monkeypatch.setattr(task, "call", silent)
    path = paths.solution_file(ex.id)
    res = run_case(ex, case, load_exercise_function(ex, path), rt, 1, path)
    assert res.kind == "timeout" and res.message.startswith("ranks 0, 1 did not finish"), res
