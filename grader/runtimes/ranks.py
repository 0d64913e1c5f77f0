"""Ranks: one launcher run P times, once per GPU of a ring, passing slices to its neighbours (module 12).

The launcher the student writes is called once per rank, as `fn(rt, comm, ...)`. `comm` has NCCL's
point-to-point calls and nothing else:

    comm.rank, comm.size
    comm.send(array, peer, stream)      # the array's bytes to rank `peer`, in `stream`'s order
    comm.recv(array, peer, stream)      # into the array, from rank `peer`
    with comm.group(): ...              # ncclGroupStart / ncclGroupEnd: the calls inside progress together

and `rt.stream()` / `rt.event()` give CuPy's streams and events (`with stream:` makes kernels launch
there; `stream.record(event)`, `stream.wait_event(event)`).

On GPUs (`run_on_gpus`) every rank is a process of its own on its own GPU, and the calls are NCCL's
(`cupy.cuda.nccl`). With NVLink multicast off (ENV): the grader's rank processes carry those variables.

On the CPU (`StandIn`) the ranks are threads of this process that take turns (one runs at a time, so
the emulator and its checks see one launch at a time), and an in-process stand-in with NCCL's rules
moves the bytes. It checks correctness only, never speed:

- a send and a receive between two ranks match in the order each rank made them; a call outside a
  group returns when its peer has made the matching call, a group when all its calls have matched;
  no rank able to go on is a deadlock, named with every rank's waiting call and its line;
- a send and its receive must move the same number of bytes;
- every kernel, send and receive is an operation on a stream. Streams are ordered only by their
  events (`wait_event` after `record`), as CUDA orders non-blocking streams, and a buffer that one
  stream writes and another reads or writes with no event between them is a race across streams,
  named with both lines, whichever order the threads happened to run them in.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import CaseNotRunnable, GraderError, KernelFault

# NVLink multicast off in NCCL, PyTorch and NVSHMEM (the device docs: a program that uses it can take
# a shared host's GPUs out of service). Every rank process starts with these set.
ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# GPU ranks silent this long (inside NCCL, or waiting for the GPU at the end) are stopped as deadlocked.
# A check's cases are small (milliseconds of GPU work), and NCCL's waiting threads spin: a deadlock burns
# CPU time, which the check's own time limit counts.
STALL_S = 4.0
HEARTBEAT_S = 2.0   # a rank running Python (compiling, launching) says so this often


class RankDeadlock(KernelFault):
    """No rank can go on: each waits for a call that its peer has not made."""


class RankStall(KernelFault):
    """On GPUs: no rank has said anything for STALL_S seconds. A time limit proves no deadlock: the check
    reports it as a timeout, and replays the case on the emulator's stand-in, which decides."""


class StreamRace(KernelFault):
    """Two streams of one rank touch one buffer, one of them writing, with no event ordering them."""


def user_line(path) -> str:
    """Where the student's code is now: 'line L `text`' of their file (the innermost frame there), and
    the line of the ring's own loop it was reached from (the frame just inside the entry function)."""
    target = Path(path).resolve() if path else None
    frames = []
    for f in traceback.extract_stack()[:-1]:
        try:
            if target is not None and Path(f.filename).resolve() == target:
                frames.append(f)
        except OSError:
            continue
    if not frames:
        return "a line outside your file"
    said = lambda f: f"line {f.lineno} `{(f.line or '').strip()}`"       # noqa: E731
    inner, outer = frames[-1], frames[min(1, len(frames) - 1)]
    return said(inner) + (f", reached from {said(outer)}" if outer is not inner else "")


def _span(a) -> tuple[int, int]:
    start = int(a.__array_interface__["data"][0]) if isinstance(a, np.ndarray) else int(a.data.ptr)
    return start, start + int(a.nbytes)


def _describe(a) -> str:
    return f"a {np.dtype(a.dtype).name} array of shape {list(a.shape)}"


def _check_buffer(what: str, a, rank: int, size: int, peer, where: str) -> None:
    """`where`: the student's line that made the call (user_line), said in each message."""
    if not hasattr(a, "nbytes") or not hasattr(a, "dtype"):
        raise GraderError(f"rank {rank}: {what} ({where}) takes an array made through rt, got {type(a).__name__}")
    if not a.flags.c_contiguous:
        raise GraderError(f"rank {rank}: {what} ({where}) moves an array's bytes as they lie in memory, so the array "
                          f"must be contiguous; got {_describe(a)} that is a strided view. Send a contiguous "
                          "buffer (take the rows into one with a kernel first).")
    if not isinstance(peer, (int, np.integer)) or not 0 <= int(peer) < size or int(peer) == rank:
        raise GraderError(f"rank {rank}: {what} ({where}) needs a peer rank in 0 .. {size - 1} other than "
                          f"{rank}, got {peer!r}")


# ---- streams and events on the CPU ------------------------------------------------------------

_local = threading.local()      # .rank: the _Rank whose thread this is (None outside the stand-in)
_stream_ids = itertools.count(1)
_ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth"}


def current_rank():
    return getattr(_local, "rank", None)


class CpuEvent:
    """cupy.cuda.Event on the emulator: what its stream had done when it was recorded."""

    def __init__(self, *args, **kw):
        self.clock: dict[int, int] | None = None

    def record(self, stream=None):
        (stream or _current_stream()).record(self)

    def synchronize(self) -> None:       # the emulator has already run everything it was given
        pass

    @property
    def done(self) -> bool:
        return True


class CpuStream:
    """cupy.cuda.Stream on the emulator. Work runs at once, in program order; what the stream model
    keeps is which stream did what, and which events order the streams (a vector clock)."""

    def __init__(self, rank=None, label: str | None = None, **kw):
        self.rank = rank if rank is not None else current_rank()
        self.id = next(_stream_ids)
        self.clock: dict[int, int] = {self.id: 0}
        if label is None:
            made = (self.rank.made if self.rank else 0) + 1
            if self.rank is not None:
                self.rank.made = made
            where = user_line(self.rank.path if self.rank else None).split(", reached from")[0]
            label = f"stream {made} (the {_ORDINALS.get(made, f'{made}th')} that rt.stream() made, at {where})"
        self.label = label
        self.ptr = self.id

    def tick(self) -> int:
        self.clock[self.id] += 1
        return self.clock[self.id]

    def __enter__(self):
        if self.rank is not None:
            self.rank.streams.append(self)
        return self

    def __exit__(self, *exc):
        if self.rank is not None and self.rank.streams and self.rank.streams[-1] is self:
            self.rank.streams.pop()

    def use(self):
        return self.__enter__()

    def record(self, event=None):
        event = event if event is not None else CpuEvent()
        if not isinstance(event, CpuEvent):
            raise GraderError(f"stream.record takes an event made with rt.event(), got {type(event).__name__}")
        event.clock = dict(self.clock)
        return event

    def wait_event(self, event) -> None:
        if not isinstance(event, CpuEvent):
            raise GraderError(f"stream.wait_event takes an event made with rt.event(), got {type(event).__name__}")
        for k, v in (event.clock or {}).items():
            self.clock[k] = max(self.clock.get(k, 0), v)

    def synchronize(self) -> None:
        pass


def _current_stream() -> CpuStream:
    r = current_rank()
    if r is None:
        return CpuStream(label="the null stream")
    return r.streams[-1] if r.streams else r.null_stream


@dataclass
class _Access:
    keep: object            # the array, kept alive so that its addresses are not reused in the case
    lo: int
    hi: int
    stream: CpuStream
    clock: int
    write: bool
    what: str               # "kernel merge (line 40 `...`)"


class StreamModel:
    """The accesses of one case's ranks, and the races across streams among them."""

    def __init__(self):
        self.accesses: list[_Access] = []

    def access(self, rank, stream: CpuStream, arrays: list, written: list[bool], what: str) -> None:
        clock = stream.tick()
        for a, w in zip(arrays, written):
            lo, hi = _span(a)
            if hi <= lo:
                continue
            for prev in self.accesses:
                if prev.stream is stream or prev.hi <= lo or hi <= prev.lo or not (w or prev.write):
                    continue
                if stream.clock.get(prev.stream.id, 0) >= prev.clock:
                    continue         # an event orders the earlier access before this one
                raise StreamRace(self._race(rank, prev, what, w, a, stream))
            self.accesses.append(_Access(a, lo, hi, stream, clock, w, what))

    @staticmethod
    def _race(rank, prev: _Access, what: str, write: bool, a, stream: CpuStream) -> str:
        verb = lambda w: "writes" if w else "reads"                       # noqa: E731
        if prev.write and not write:
            risk = "the later one can read the buffer before the earlier write has landed"
        elif write and not prev.write:
            risk = "the later one can overwrite the buffer while the earlier one still reads it"
        else:
            risk = "the two writes can land in either order"
        return (f"a race across streams on rank {rank.rank}: {prev.what} {verb(prev.write)} {_describe(a)} on "
                f"{prev.stream.label}, and then {what} {verb(write)} it on {stream.label}, with no event "
                f"ordering the two: {risk}. Record an event on the first stream after its call and make the "
                "second stream wait for it before its call: second.wait_event(first.record()).")

    def kernel(self, rank, name: str, args, run) -> None:
        """Run a launch (run()) and enter what it read and wrote: every array argument is read, and
        written if its bytes changed."""
        arrays = [a for a in args if isinstance(a, np.ndarray)]
        before = [a.copy() for a in arrays]
        run()
        written = [not np.array_equal(b.view(np.uint8), a.view(np.uint8)) for b, a in zip(before, arrays)]
        self.access(rank, _current_stream(), arrays, written, f"kernel {name} ({user_line(rank.path)})")


# ---- the stand-in: ranks as threads of this process --------------------------------------------

@dataclass
class _Op:
    rank: int
    send: bool
    peer: int
    buf: object
    stream: CpuStream
    line: str
    data: np.ndarray | None = None     # a send's bytes, as they were when it was made
    matched: bool = False

    def text(self) -> str:
        return (f"comm.send to rank {self.peer}" if self.send else f"comm.recv from rank {self.peer}") + f" ({self.line})"


@dataclass
class _Rank:
    rank: int
    path: str
    null_stream: CpuStream | None = None
    streams: list = field(default_factory=list)
    waiting: list = field(default_factory=list)     # the ops this rank's thread waits for
    group: list | None = None                        # ops collected inside comm.group()
    made: int = 0                                    # streams made so far
    done: bool = False


class _Abort(BaseException):
    """Raised in a rank's thread when another rank has failed: stop quietly."""


class StandInComm:
    """The `comm` of one rank on the CPU: NCCL's point-to-point rules, in process (see the module)."""

    def __init__(self, world: "StandIn", rank: int):
        self._world, self.rank, self.size = world, rank, world.size

    def _op(self, send: bool, buf, peer, stream):
        what = "comm.send" if send else "comm.recv"
        me = self._world.ranks[self.rank]
        _check_buffer(what, buf, self.rank, self.size, peer, user_line(me.path))
        if not isinstance(stream, CpuStream):
            raise GraderError(f"rank {self.rank}: {what} needs the stream it runs in (a stream made with "
                              f"rt.stream()), got {type(stream).__name__}")
        op = _Op(self.rank, send, int(peer), buf, stream, user_line(me.path))
        self._world.model.access(me, stream, [buf], [not send], f"{what} {'to' if send else 'from'} rank {peer} "
                                 f"({op.line})")
        if send:
            op.data = np.array(buf, copy=True)
        if me.group is not None:
            me.group.append(op)
        else:
            self._world.post(me, [op])

    def send(self, buf, peer, stream) -> None:
        self._op(True, buf, peer, stream)

    def recv(self, buf, peer, stream) -> None:
        self._op(False, buf, peer, stream)

    @contextlib.contextmanager
    def group(self):
        me = self._world.ranks[self.rank]
        if me.group is not None:
            raise GraderError(f"rank {self.rank}: comm.group() inside comm.group() ({user_line(me.path)})")
        me.group = []
        try:
            yield
        finally:
            ops, me.group = me.group, None
        if ops:
            self._world.post(me, ops)


class StandIn:
    """P ranks as threads that take turns, and the bytes they pass (see the module's docstring)."""

    def __init__(self, rt, size: int, path):
        self.rt, self.size, self.path = rt, size, str(path)
        self.model = StreamModel()
        self.ranks = [_Rank(r, self.path) for r in range(size)]
        for r in self.ranks:
            r.null_stream = CpuStream(rank=r, label="the null stream")
        self.pending: dict[tuple[int, int], tuple[list, list]] = {}
        self.cv = threading.Condition()
        self.turn = 0
        self.failure: tuple[int, BaseException] | None = None

    # -- matching
    def post(self, me: _Rank, ops: list[_Op]) -> None:
        for op in ops:
            src, dst = (op.rank, op.peer) if op.send else (op.peer, op.rank)
            sends, recvs = self.pending.setdefault((src, dst), ([], []))
            (sends if op.send else recvs).append(op)
            while sends and recvs:
                self._deliver(sends.pop(0), recvs.pop(0))
        me.waiting = [op for op in ops if not op.matched]
        self._wait(me)

    def _deliver(self, s: _Op, r: _Op) -> None:
        if s.data.nbytes != r.buf.nbytes:
            raise GraderError(
                f"rank {s.rank}'s comm.send to rank {r.rank} ({s.line}) moves {s.data.nbytes} bytes "
                f"({_describe(s.data)}), but the receive it matches, rank {r.rank}'s comm.recv from rank "
                f"{s.rank} ({r.line}), has room for {r.buf.nbytes} ({_describe(r.buf)}). Sends and receives "
                "between two ranks match in the order each rank makes them; each pair must move the same bytes.")
        ledger = getattr(self.rt, "ledger", None)
        if ledger is not None:
            ledger.before("comm.recv", None, (r.buf,))
        r.buf.view(np.uint8).reshape(-1)[:] = s.data.view(np.uint8).reshape(-1)
        if ledger is not None:
            ledger.after("comm.recv")
        s.matched = r.matched = True

    # -- taking turns
    def _runnable(self, r: _Rank) -> bool:
        return not r.done and all(op.matched for op in r.waiting)

    def _pass_turn(self, me: _Rank) -> None:
        """Give the turn to the next rank that can go on (me last); none: a deadlock."""
        order = [self.ranks[(me.rank + i) % self.size] for i in range(1, self.size + 1)]
        nxt = next((r for r in order if self._runnable(r)), None)
        if nxt is None and self.failure is None and not all(r.done for r in self.ranks):
            self.failure = (me.rank, RankDeadlock(self._deadlock()))
        if nxt is not None:
            self.turn = nxt.rank
        self.cv.notify_all()

    def _wait(self, me: _Rank) -> None:
        with self.cv:
            if self._runnable(me):
                me.waiting = []
                return
            self._pass_turn(me)
            while self.failure is None and not (self.turn == me.rank and self._runnable(me)):
                self.cv.wait()
            if self.failure is not None:
                raise _Abort()
            me.waiting = []

    def _deadlock(self) -> str:
        lines = []
        for r in self.ranks:
            if r.done:
                lines.append(f"rank {r.rank} has returned")
            else:
                left = [op for op in r.waiting if not op.matched]
                lines.append(f"rank {r.rank} waits in " + "; ".join(op.text() for op in left))
        return ("the ranks deadlock: no rank can go on, because each waits for a call its peer has not made. "
                + ". ".join(lines) + ". A send completes only once its peer makes the matching receive "
                "(and the reverse), in the same order between the same two ranks; calls inside one "
                "`with comm.group():` wait for each other together.")

    # -- running
    def run(self, target, per_rank: list[dict]) -> list:
        results: list = [None] * self.size

        def body(r: _Rank):
            _local.rank = r
            try:
                with self.cv:
                    while self.turn != r.rank and self.failure is None:
                        self.cv.wait()
                    if self.failure is not None:
                        return
                results[r.rank] = target(StandInComm(self, r.rank), r, **per_rank[r.rank])
            except _Abort:
                pass
            except BaseException as e:       # the first failure stops every rank
                with self.cv:
                    if self.failure is None:
                        self.failure = (r.rank, e)
                    self.cv.notify_all()
            finally:
                with self.cv:
                    r.done = True
                    if self.failure is None and self.turn == r.rank:
                        self._pass_turn(r)
                    self.cv.notify_all()
                _local.rank = None

        threads = [threading.Thread(target=body, args=(r,), name=f"rank {r.rank}", daemon=True) for r in self.ranks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.failure is not None:
            rank, e = self.failure
            if not isinstance(e, (RankDeadlock, StreamRace, NotImplementedError)) and e.args and isinstance(e.args[0], str) \
                    and not e.args[0].startswith("rank "):
                e.args = (f"rank {rank}: {e.args[0]}",) + e.args[1:]     # which rank, in the message
            raise e
        return results


def run_on_cpu(rt, size: int, fn, per_rank: list[dict], path, setup=None) -> list:
    """Run fn(rt, comm, **per_rank[r]) for every rank r on the emulator, through the stand-in."""
    world = StandIn(rt, size, path)
    extra = setup(rt) if setup else {}
    rt.stream_model = world.model
    try:
        return world.run(lambda comm, r, **kw: fn(rt, comm, **extra, **kw), per_rank)
    finally:
        rt.stream_model = None


# ---- GPUs: one process per rank, NCCL --------------------------------------------------------

class NcclComm:
    """The `comm` of one rank on a GPU: NCCL's send and receive through cupy.cuda.nccl."""

    def __init__(self, rank: int, size: int, uid, path, report=None, state=None, rt=None):
        from cupy.cuda import nccl
        self._nccl, self.rank, self.size, self._path, self._report = nccl, rank, size, path, report
        self._state = state if state is not None else {}
        self._rt, self._grouped = rt, None          # while grading: the ledger sees NCCL write the receives
        self._comm = nccl.NcclCommunicator(size, uid, rank)     # slow at first (seconds), never silent

    def _in_nccl(self, f):
        """Run an NCCL call; while it runs, the rank's heartbeat is silent (it may block on its peers)."""
        before = self._state.get("where", "python")
        self._state["where"] = "nccl"
        try:
            return f()
        finally:
            self._state["where"] = before

    def _call(self, send: bool, buf, peer, stream):
        what = "comm.send" if send else "comm.recv"
        _check_buffer(what, buf, self.rank, self.size, peer, user_line(self._path))
        ptr = getattr(stream, "ptr", None)
        if ptr is None:
            raise GraderError(f"rank {self.rank}: {what} needs the stream it runs in (a stream made with "
                              f"rt.stream()), got {type(stream).__name__}")
        if self._report is not None:
            self._report(f"{what} {'to' if send else 'from'} rank {peer} ({user_line(self._path)})")
        f = self._comm.send if send else self._comm.recv
        if self._grouped is not None:
            self._grouped.append(buf)
            self._in_nccl(lambda: f(buf.data.ptr, buf.nbytes, self._nccl.NCCL_INT8, int(peer), ptr))
            return
        self._ledgered(what, [buf], lambda: f(buf.data.ptr, buf.nbytes, self._nccl.NCCL_INT8, int(peer), ptr))

    def _ledgered(self, what: str, bufs: list, f) -> None:
        """An NCCL call that may write `bufs`: to the ledger of a graded case it is a launch, and what it
        writes has landed (the device synchronised) before the launcher's code runs on."""
        ledger = getattr(self._rt, "ledger", None)
        if ledger is not None:
            ledger.before(what, None, tuple(bufs))
        self._in_nccl(f)
        if ledger is not None:
            self._in_nccl(lambda: ledger.after(what))

    def send(self, buf, peer, stream) -> None:
        self._call(True, buf, peer, stream)

    def recv(self, buf, peer, stream) -> None:
        self._call(False, buf, peer, stream)

    @contextlib.contextmanager
    def group(self):
        self._nccl.groupStart()
        self._grouped = []
        try:
            yield
        finally:
            bufs, self._grouped = self._grouped, None
            self._ledgered("comm.group", bufs, self._nccl.groupEnd)


def _rank_process(rank: int, size: int, uid, path: str, entry: str, setup, conn) -> None:
    """One rank's process: its GPU, the student's file, NCCL; the outputs go back through conn."""
    os.environ.update(ENV)
    try:
        import importlib.util

        import cupy
        cupy.cuda.Device(rank).use()
        from ..engine.runner import student_traceback
        from .base import register_origin
        from .gpu import GpuRuntime
        from .provenance import Ledger
        register_origin(path)
        spec = importlib.util.spec_from_file_location(f"rank{rank}_{Path(path).stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, entry)
        kwargs = conn.recv()
        rt = GpuRuntime()
        dev = {k: rt.asarray(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        rt.start_poisoning()
        ledger = rt.ledger = Ledger(rt, {k: v for k, v in dev.items() if hasattr(v, "nbytes")})
        lock, state = threading.Lock(), {"where": "python"}

        def say(msg):
            with lock:
                conn.send(msg)

        def heartbeat():            # silence only while NCCL or the GPU holds the rank: a hang there
            while state["where"] != "done":
                time.sleep(HEARTBEAT_S)
                if state["where"] == "python":
                    say(("alive",))

        def report(text):
            say(("call", text))

        threading.Thread(target=heartbeat, daemon=True).start()
        comm = NcclComm(rank, size, uid, path, report=report, state=state, rt=rt)
        try:
            out = fn(rt, comm, **(setup(rt) if setup else {}), **dev)
            state["where"] = "gpu"
            rt.synchronize()
            state["where"] = "done"
        except NotImplementedError as e:      # a stub's TODO: "not implemented yet", as on the CPU
            state["where"] = "done"
            say(("todo", str(e)))
            return
        except Exception as e:
            state["where"] = "done"
            say(("raised", f"{type(e).__name__}: {e}", student_traceback(e, Path(path)), isinstance(e, GraderError)))
            return
        outs = out if isinstance(out, tuple) else (out,)
        problem = ledger.verdict({str(i): a for i, a in enumerate(outs) if hasattr(a, "nbytes")})
        rt.ledger = None
        say(("done", tuple(rt.to_numpy(a) if hasattr(a, "nbytes") else a for a in outs), problem))
    except Exception as e:      # the grader's own failure in a rank (NCCL, CUDA): say it, do not hang
        conn.send(("failed", f"{type(e).__name__}: {e}"))


def run_on_gpus(size: int, fn, per_rank: list[dict], path, setup=None) -> list:
    """Run fn(rt, comm, **per_rank[r]) as `size` processes, rank r on GPU r, with NCCL between them."""
    import multiprocessing as mp

    import cupy
    from cupy.cuda import nccl
    have = cupy.cuda.runtime.getDeviceCount()
    if have < size:
        raise CaseNotRunnable(f"this case runs {size} ranks, one per GPU, and this machine has {have} GPU"
                              f"{'s' if have != 1 else ''} (NCCL refuses two ranks of one communicator on one "
                              f"GPU): run it on a machine with {size} GPUs, or on the CPU with --backend cpu, "
                              "where the stand-in plays every rank")
    os.environ.update(ENV)
    uid = nccl.get_unique_id()
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for r in range(size):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_rank_process, args=(r, size, uid, str(path), fn.__name__, setup, child), daemon=True)
        p.start()
        parent.send(per_rank[r])
        pipes.append(parent)
        procs.append(p)
    results: list = [None] * size
    calls: list[list[str]] = [[] for _ in range(size)]
    finished = [False] * size
    last = time.monotonic()
    try:
        while not all(finished):
            got = False
            for r, c in enumerate(pipes):
                while not finished[r] and c.poll():
                    msg = c.recv()
                    got = True
                    if msg[0] == "alive":
                        continue
                    if msg[0] == "call":
                        calls[r].append(msg[1])
                        continue
                    finished[r] = True
                    if msg[0] == "todo":
                        raise NotImplementedError(msg[1])
                    if msg[0] == "raised":
                        text, frames, ours = msg[1], msg[2], msg[3]
                        if ours:
                            raise GraderError(f"rank {r}: {text.split(': ', 1)[1]}")
                        raise _RankRaised(f"rank {r}: your code raised {text}\n{frames}")
                    if msg[0] == "failed":
                        raise GraderError(f"rank {r} could not run: {msg[1]}")
                    results[r] = msg[1]
                    if msg[2]:
                        raise GraderError(f"rank {r}: {msg[2]}")
                if not finished[r] and not procs[r].is_alive() and not c.poll():
                    raise KernelFault(f"rank {r}'s process ended with exit code {procs[r].exitcode} and no result "
                                      "(a fault on its GPU ends the process)")
            if got:
                last = time.monotonic()
            elif time.monotonic() - last > STALL_S:
                left = [r for r in range(size) if not finished[r]]
                said = ". ".join(f"rank {r}'s NCCL calls: " + ("; ".join(calls[r][-4:]) or "none") for r in left)
                raise RankStall(f"ranks {', '.join(map(str, left))} did not finish: nothing happened for "
                                f"{STALL_S:.0f} s. {said}.")
            else:
                time.sleep(0.01)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(timeout=10)
    return results


class _RankRaised(GraderError):
    """The student's code raised in a rank's process (its message holds their frames)."""


def run_ranks(rt, size: int, fn, per_rank: list[dict], setup=None) -> list:
    """fn(rt, comm, **setup(rt), **per_rank[r]) for r in 0 .. size-1, on rt's kind of device -> each rank's
    result. setup (a picklable callable) makes what every rank's launcher gets besides its arrays, on
    that rank's runtime."""
    path = fn.__code__.co_filename
    if getattr(rt, "name", "") == "gpu":
        if rt.ledger is not None:        # each rank's process keeps its own ledger and says what it found
            rt.ledger.elsewhere = True
        return run_on_gpus(size, fn, per_rank, path, setup)
    return run_on_cpu(rt, size, fn, per_rank, path, setup)
