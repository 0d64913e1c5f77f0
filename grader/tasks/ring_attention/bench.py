"""Benchmark for 12_ring_attention: the ring on every GPU of the machine, against one GPU and torch's
context parallel, forward and training step (forward + backward), in one run.

`grader bench 12` starts one process per GPU (NCCL between them, NVLink multicast off as ranks.ENV
says) and times, for each sequence length, with B = 1, H = 16, d = 128, float16:

- one GPU: the course's own kernels on the whole sequence (module 10's forward on an H100/H200, 14's
  backward), and torch's cuDNN attention;
- yours on P GPUs, and yours with the transfers left out (every send and receive a no-op: the
  numbers are wrong, the time is the computation's alone), which gives the share of the transfers
  hidden behind the computation;
- torch's context parallel (torch.distributed.tensor.experimental.context_parallel) with its cuDNN
  and FlashAttention-2 backends, on the same GPUs and shapes.

A time is the slowest rank's, from a barrier to its last kernel, median of the repeats. The speed-up is
one GPU's time over P GPUs'; the scaling efficiency is the speed-up over P. A timeline of one call of
each pass at the longest N (each rank's local attention and transfers, from CUDA events) is printed as
text.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from ...attention import ring
from ...runtimes.ranks import ENV, NcclComm

B, H, D = 1, 16, 128
SEQUENCES = (32768, 65536, 131072, 262144)
QUICK = (131072,)
MODES = (("forward", False), ("forward", True), ("training step", False), ("training step", True))


def flops(n: int, causal: bool, backward: bool) -> float:
    """Attention's FLOPs on the whole sequence: 4·N²·H·d forward (two products), 2.5× that backward."""
    f = 4.0 * B * H * n * n * D * (0.5 if causal else 1.0)
    return f * (3.5 if backward else 1.0)


class _NoTransfers:
    """A comm whose sends and receives do nothing: the computation's time alone."""

    def __init__(self, comm):
        self.rank, self.size = comm.rank, comm.size

    def send(self, *a):
        pass

    def recv(self, *a):
        pass

    def group(self):
        import contextlib
        return contextlib.nullcontext()


class _Timeline:
    """Wraps a rank's comm and attn: CUDA events around every local attention and every group of
    transfers, on the stream each runs in."""

    def __init__(self, rt, comm, attn):
        self.rt, self.comm, self.attn, self.spans = rt, comm, attn, []
        self.rank, self.size, self.dtype = comm.rank, comm.size, attn.dtype
        self._stream = None

    def _span(self, kind, stream, f):
        start, stop = self.rt.xp.cuda.Event(), self.rt.xp.cuda.Event()
        start.record(stream)
        out = f()
        stop.record(stream)
        self.spans.append((kind, start, stop))
        return out

    def forward(self, *a, **kw):
        cur = self.rt.xp.cuda.get_current_stream()
        return self._span("compute", cur, lambda: self.attn.forward(*a, **kw))

    def backward(self, *a, **kw):
        cur = self.rt.xp.cuda.get_current_stream()
        return self._span("compute", cur, lambda: self.attn.backward(*a, **kw))

    def send(self, buf, peer, stream):
        self._stream = stream
        self.comm.send(buf, peer, stream)

    def recv(self, buf, peer, stream):
        self._stream = stream
        self.comm.recv(buf, peer, stream)

    def group(self):
        import contextlib
        outer = self

        @contextlib.contextmanager
        def g():
            start, stop = outer.rt.xp.cuda.Event(), outer.rt.xp.cuda.Event()
            with outer.comm.group():
                yield
                start.record(outer._stream)      # before the group's end launches its transfers
            stop.record(outer._stream)
            outer.spans.append(("transfer", start, stop))
        return g()


def _rank(rank, size, uid, port, path, entry, lengths, reps, conn):
    os.environ.update(ENV)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(size))
    try:
        import importlib.util

        import cupy
        import torch
        import torch.distributed as dist
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        from ...runtimes.gpu import GpuRuntime
        cupy.cuda.Device(rank).use()
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        dist.init_process_group("nccl", rank=rank, world_size=size, device_id=dev)
        spec = importlib.util.spec_from_file_location("bench_ring", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, entry)
        rt = GpuRuntime()
        attn = ring.LocalAttention(rt, "float16")
        comm = NcclComm(rank, size, uid, path)

        def timed(f, everyone=True):
            """The slowest rank's milliseconds per call, median of reps (rank 0 alone if not everyone)."""
            times = []
            for i in range(reps + 1):
                dist.barrier(device_ids=[rank])
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                if everyone or rank == 0:
                    f()
                cupy.cuda.runtime.deviceSynchronize()
                t = torch.tensor([time.perf_counter() - t0], device=dev)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                if i:                      # the first call warms up (compiles, plans)
                    times.append(float(t.item()) * 1e3)
            return float(np.median(times))

        def attempt(f, everyone=True):
            try:
                return {"ms": timed(f, everyone)}
            except Exception as e:       # one contender failing (memory, an API) leaves the others
                return {"error": f"{type(e).__name__}: {str(e)[:200]}"}

        rows = []
        for n in lengths:
            g = torch.Generator(device=dev).manual_seed(n)
            full = [torch.randn(B, H, n, D, device=dev, dtype=torch.float16, generator=g) for _ in range(4)]
            scale = 1.0 / D ** 0.5
            pos = torch.as_tensor(ring.positions(rank, size, n), device=dev)
            mine = [x.index_select(2, pos).contiguous() for x in full]
            cq, ck, cv, cdo = (cupy.asarray(x) for x in mine)
            fq, fk, fv, fdo = (cupy.asarray(x) for x in full)
            for mode, causal in MODES:
                backward = mode == "training step"
                row = {"N": n, "mode": mode, "causal": causal, "ranks": size,
                       "tflop": flops(n, causal, backward) / 1e12, "results": {}}
                res = row["results"]

                def one_gpu():
                    o, lse = attn.forward(fq, fk, fv, scale, causal)
                    if backward:
                        attn.backward(fq, fk, fv, o, lse, fdo, scale, causal)

                res["course kernels, 1 GPU"] = attempt(one_gpu, everyone=False)

                def torch_one(backend):
                    def f():
                        q, k, v = (x.detach().requires_grad_(backward) for x in full[:3])
                        with sdpa_kernel(backend):
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            if backward:
                                o.backward(full[3])
                    return f

                res["torch cuDNN, 1 GPU"] = attempt(torch_one(SDPBackend.CUDNN_ATTENTION), everyone=False)
                kw = dict(n_tokens=n, scale=scale, causal=causal, do=cdo if backward else None)
                res["yours"] = attempt(lambda: fn(rt, comm, attn, cq, ck, cv, **kw))
                res["yours, no transfers"] = attempt(lambda: fn(rt, _NoTransfers(comm), attn, cq, ck, cv, **kw))
                for name, backend in (("torch CP, cuDNN", SDPBackend.CUDNN_ATTENTION),
                                      ("torch CP, FlashAttention-2", SDPBackend.FLASH_ATTENTION)):
                    res[name] = attempt(_torch_cp(full, size, causal, backward, backend, dist, F, sdpa_kernel))
                if n == lengths[-1]:
                    tl = _Timeline(rt, comm, attn)
                    dist.barrier(device_ids=[rank])
                    torch.cuda.synchronize()
                    origin = cupy.cuda.Event()
                    origin.record()
                    fn(rt, tl, tl, cq, ck, cv, **kw)
                    cupy.cuda.runtime.deviceSynchronize()
                    spans = [(k, cupy.cuda.get_elapsed_time(origin, a), cupy.cuda.get_elapsed_time(origin, b))
                             for k, a, b in tl.spans]
                    gathered = [None] * size
                    dist.all_gather_object(gathered, spans)
                    row["timeline"] = gathered
                rows.append(row)
            del full, mine, cq, ck, cv, cdo, fq, fk, fv, fdo
            cupy.get_default_memory_pool().free_all_blocks()
            torch.cuda.empty_cache()
        if rank == 0:
            conn.send(("done", rows))
        dist.destroy_process_group()
    except Exception as e:
        import traceback
        conn.send(("failed", f"rank {rank}: {type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"))


def _torch_cp(full, size, causal, backward, backend, dist, F, sdpa_kernel):
    """torch's context parallel over the same GPUs: the buffers sharded inside the context (its load
    balancing, head and tail chunks, only under the causal mask), gradient leaves made from the shards."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    try:
        from torch.distributed.tensor.experimental._attention import _cp_options
    except ImportError:
        from torch.distributed.tensor.experimental._context_parallel._attention import _cp_options
    mesh = init_device_mesh("cuda", (size,))

    def f():
        _cp_options.enable_load_balance = causal
        bufs = [x.clone() for x in full]
        with sdpa_kernel(backend), context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2, 2],
                                                    no_restore_buffers=set(bufs)):
            q, k, v = (x.detach().requires_grad_(backward) for x in bufs[:3])
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            if backward:
                o.backward(bufs[3])
    return f


def _timeline_text(spans_per_rank, what, width=72) -> list[str]:
    end = max((b for spans in spans_per_rank for _, _, b in spans), default=1.0)
    lines = [f"    timeline of one {what}, 0 .. {end:.1f} ms ('#': busy)"]
    for r, spans in enumerate(spans_per_rank):
        for kind in ("compute", "transfer"):
            cells = [" "] * width
            for k, a, b in spans:
                if k == kind:
                    for c in range(int(a / end * width), max(int(a / end * width) + 1, int(b / end * width))):
                        cells[min(c, width - 1)] = "#"
            lines.append(f"    rank {r} {kind:<8} |{''.join(cells)}|")
    return lines


def run(ex, path, as_json=False, quick=False) -> int:
    """`grader bench 12`: every GPU of this machine, one process each (see the module's docstring)."""
    import multiprocessing as mp
    import socket

    import cupy
    from cupy.cuda import nccl

    from ...errors import GraderError
    size = cupy.cuda.runtime.getDeviceCount()
    if size < 2:
        print(f"grader bench {ex.id}: this machine has {size} GPU; the ring's speed-up is measured on 2 or more "
              "(one process per GPU). Timing one GPU alone.")
    os.environ.update(ENV)
    uid = nccl.get_unique_id()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    lengths, reps = (QUICK, 2) if quick else (SEQUENCES, 3)
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for r in range(size):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_rank, args=(r, size, uid, port, str(path), ex.entry, lengths, reps, child))
        p.start()
        pipes.append(parent)
        procs.append(p)
    try:
        while True:
            ready = [c for c in pipes if c.poll(1.0)]
            if ready:
                try:
                    msg = ready[0].recv()
                    break
                except EOFError:     # the process closed its end: it ended without sending
                    pass
            if ready or not all(p.is_alive() for p in procs):
                for p in procs:
                    p.join(timeout=10)
                ended = ", ".join(f"rank {r} (exit code {p.exitcode})" for r, p in enumerate(procs)
                                  if not p.is_alive())
                raise GraderError(f"the benchmark's processes ended without a result: {ended or 'none yet'}; "
                                  "a negative exit code is the signal that ended it (-9: killed, say for "
                                  "memory; -11: a segmentation fault)")
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    if msg[0] == "failed":
        raise GraderError(f"the benchmark failed on {msg[1]}")
    rows = msg[1]
    for row in rows:
        res = row["results"]
        one, yours, alone = (res.get(k, {}).get("ms") for k in ("course kernels, 1 GPU", "yours", "yours, no transfers"))
        if one and yours:
            row["speedup"] = one / yours
            row["efficiency"] = one / yours / size
        if yours and alone:
            row["with_over_without_transfers"] = yours / alone
    import datetime

    import torch
    out = {"id": ex.id, "file": str(path), "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "gpus": size, "date": datetime.date.today().isoformat(),
           "versions": {"cupy": cupy.__version__, "torch": torch.__version__, "nccl": nccl.get_version()},
           "B": B, "H": H, "d": D, "dtype": "float16", "repeats": reps, "rows": rows}
    if as_json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"grader bench {ex.id} on {size} × {out['device']} (B={B}, H={H}, d={D}, float16; the slowest rank's time "
          f"from a barrier, median of {reps})")
    for row in rows:
        print(f"\n  N = {row['N']}, {row['mode']}{', causal' if row['causal'] else ''} ({row['tflop']:.1f} TFLOP)")
        yours = row["results"].get("yours", {}).get("ms")
        for name, r in row["results"].items():
            if "error" in r:
                print(f"    {name:<28} failed: {r['error'][:110]}")
                continue
            gpus = 1 if "1 GPU" in name else size
            per_gpu = row["tflop"] / (r["ms"] / 1e3) / gpus
            ratio = ""
            if yours and name not in ("yours",):
                x = r["ms"] / yours
                ratio = f"  (yours {x:.2f}× faster)" if x >= 1 else f"  (yours {1 / x:.2f}× slower)"
            print(f"    {name:<28} {r['ms']:9.2f} ms  {per_gpu:6.0f} TFLOP/s per GPU{ratio}")
        if "speedup" in row:
            print(f"    speed-up over one GPU {row['speedup']:.2f}×, scaling efficiency {100 * row['efficiency']:.0f}%"
                  + (f"; with transfers / without: {row['with_over_without_transfers']:.3f}"
                     if "with_over_without_transfers" in row else ""))
        if "timeline" in row:
            print("\n".join(_timeline_text(row["timeline"], row["mode"])))
    return 0
