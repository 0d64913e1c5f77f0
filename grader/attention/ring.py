"""Module 12's kit: how a sequence is placed over P ranks, the references per rank, and the local
attention the ranks call (the course's finished kernels).

The placement (the lesson states it, and the solution's chunk_bounds and chunks_of compute it): the
sequence of N tokens is cut into 2P chunks as evenly as possible, the first N mod 2P chunks one token
longer, and rank r holds chunks r and 2P-1-r, in that order (zig-zag: an early and a late chunk, so
that under the causal mask every rank has the same number of visible (query, key) pairs). Each rank's
q, k, v (and dO) are its two chunks, concatenated along the sequence: [B, H, n_r, d].
"""
from __future__ import annotations

import functools
import importlib.util

import numpy as np

from ..errors import GraderError


def chunk_bounds(n_tokens: int, ranks: int) -> list[tuple[int, int]]:
    """The 2P chunks as [start, end), in order; the first n_tokens mod 2P are one token longer."""
    n_chunks = 2 * ranks
    base, extra = divmod(n_tokens, n_chunks)
    bounds, start = [], 0
    for c in range(n_chunks):
        end = start + base + (c < extra)
        bounds.append((start, end))
        start = end
    return bounds


def chunks_of(rank: int, ranks: int) -> tuple[int, int]:
    return rank, 2 * ranks - 1 - rank


def positions(rank: int, ranks: int, n_tokens: int) -> np.ndarray:
    """The global token positions of rank's rows, in the order its arrays hold them."""
    bounds = chunk_bounds(n_tokens, ranks)
    return np.concatenate([np.arange(*bounds[c]) for c in chunks_of(rank, ranks)])


def shard(x: np.ndarray, rank: int, ranks: int, axis: int = 2) -> np.ndarray:
    """Rank's rows of a full-sequence array (the sequence along `axis`), contiguous."""
    return np.ascontiguousarray(np.take(x, positions(rank, ranks, x.shape[axis]), axis=axis))


def unshard(parts: list[np.ndarray], n_tokens: int, axis: int = 2) -> np.ndarray:
    """The full-sequence array from every rank's rows."""
    ranks = len(parts)
    shape = list(parts[0].shape)
    shape[axis] = n_tokens
    out = np.empty(shape, parts[0].dtype)
    for r, part in enumerate(parts):
        idx = [slice(None)] * len(shape)
        idx[axis] = positions(r, ranks, n_tokens)
        out[tuple(idx)] = part
    return out


def per_rank(name: str, rank: int) -> str:
    """An input's or output's name on one rank ("o on rank 1")."""
    return f"{name} on rank {rank}"


# ---- the local attention: the course's own finished kernels ----------------------------------------

LIBRARY = {"forward": "06_flash_tensor_cores", "forward_sm90": "10_flash_hopper",
           "backward": "11_backward_tensor_cores"}


@functools.lru_cache(maxsize=None)
def _solution(ex_id: str):
    from .. import paths
    path = paths.solution_file(ex_id)
    if not path.is_file():
        raise GraderError(f"module 12 calls the finished module {ex_id[:2]} as its local attention, and this copy "
                          f"of the course has no {path.relative_to(paths.course_root())}: ask your instructor "
                          "for the release that includes the course's library.")
    spec = importlib.util.spec_from_file_location(f"library_{ex_id}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LocalAttention:
    """What a rank calls for the attention of its query chunk against one key chunk: forward(q, k, v,
    scale, causal) -> (o, lse) and backward(q, k, v, o, lse, do, scale, causal) -> (dq, dk, dv), all
    contiguous [B, H, n, d] arrays of `dtype` (float16, or bfloat16 as uint16 bits) and lse float32.
    causal is the bottom-right mask of module 03 (on a square block: key j visible to query i <= j)."""

    def __init__(self, rt, dtype: str):
        self.rt, self.dtype = rt, dtype
        hopper = getattr(rt, "name", "") == "gpu" and str(getattr(rt, "compute_capability", "")) == "90"
        self._fwd = _solution(LIBRARY["forward_sm90" if hopper else "forward"])
        self._bwd = _solution(LIBRARY["backward"])
        self.forward_name = "flash_hopper" if hopper else "flash_tc"

    def _kind(self):
        return self.dtype if self.dtype == "bfloat16" else None

    def forward(self, q, k, v, scale, causal=False):
        return getattr(self._fwd, self.forward_name)(self.rt, q, k, v, float(scale), causal=bool(causal),
                                                     dtype=self._kind())

    def backward(self, q, k, v, o, lse, do, scale, causal=False):
        return self._bwd.flash_backward_tc(self.rt, q, k, v, o, lse, do, float(scale), causal=bool(causal),
                                           dtype=self._kind())


def library(rt, dtype: str) -> dict:
    """The keyword a rank's launcher gets besides its arrays: attn, its local attention."""
    return {"attn": LocalAttention(rt, dtype)}


# ---- what went wrong --------------------------------------------------------------------------------
#
# Each finding below is reproduced from the outputs, never guessed: an output equal to another rank's
# reference, or a row's lse equal to the log-sum-exp over another set of (query chunk, key chunk)
# blocks than the mask allows. What no finding explains is left to the observations.

from ..spec import Cause, Seen      # noqa: E402


def _rel(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape or (np.isfinite(got) != np.isfinite(want)).any():
        return np.inf
    ok = np.isfinite(want)
    return float(np.linalg.norm(np.where(ok, got - want, 0)) /
                 max(np.linalg.norm(np.where(ok, want, 0)), 1e-2 * np.sqrt(max(want.size, 1))))


def _names(ctx) -> list[str]:
    return [n for n in ("o", "lse", "dq", "dk", "dv") if per_rank(n, 0) in ctx.ref]


def other_rank_causes(ctx):
    """An output that equals another rank's reference: the right numbers on the wrong rank."""
    P = ctx.params["P"]
    for name in _names(ctx):
        for r in range(P):
            key = per_rank(name, r)
            if ctx.cmp[key].passed:
                continue
            own = _rel(ctx.out[key], ctx.ref[key])
            for j in range(P):
                err = _rel(ctx.out[key], ctx.ref[per_rank(name, j)]) if j != r else np.inf
                if err < 2e-2 and err * 10 < own:
                    what = ("the gradients of rank {j}'s keys and values, left on rank {r} instead of going back "
                            "to rank {j}" if name in ("dk", "dv") else "rank {j}'s result, on rank {r}")
                    yield Cause("ring:other_rank", f"{name} on rank {r} holds rank {j}'s {name} (its reference values, "
                                f"to a relative {err:.1g}): " + what.format(j=j, r=r))
                    return


def _block_lse(q, k, scale, mask: str) -> np.ndarray:
    """[B, H, n_q] log-sum-exp of one (query chunk, key chunk) block, float64; mask: full or diagonal
    (bottom-right causal, module 03's rule)."""
    from . import references as R
    H, Hkv = q.shape[1], k.shape[1]
    k = k[:, [R.kv_head_of(h, H, Hkv) for h in range(H)]]
    s = scale * (q @ np.swapaxes(k, -1, -2))
    if mask == "diagonal":
        s = np.where(R.causal_mask(q.shape[2], k.shape[2]), s, -np.inf)
    m = s.max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isfinite(m), m + np.log(np.exp(s - np.where(np.isfinite(m), m, 0)[..., None]).sum(-1)), -np.inf)


def _kinds_text(kinds: dict, bounds) -> str:
    parts = [f"{c} ({'all keys' if m == 'full' else 'the diagonal mask'})" for c, m in sorted(kinds.items())]
    return ", ".join(parts) if parts else "none"


PAIR_SEARCH_RANKS = 4       # 3^(2P) sets of blocks per query chunk: up to 6561


def pair_causes(ctx, full_inputs: dict):
    """Rows whose lse is the log-sum-exp over another set of key blocks than the mask allows: which
    key chunks, and with which mask, each query chunk of each rank got."""
    import itertools
    p = ctx.params
    P, n = p["P"], p["N"]
    if P > PAIR_SEARCH_RANKS or per_rank("lse", 0) not in ctx.out:
        return
    if all(ctx.cmp[per_rank("lse", r)].passed for r in range(P)):
        return
    bounds = chunk_bounds(n, P)
    q, k = full_inputs["q"], full_inputs["k"]
    scale = ctx.inputs["scale"]
    found, right = [], 0
    for r in range(P):
        lse_out = np.asarray(ctx.out[per_rank("lse", r)], np.float64)
        first = 0
        for qc in chunks_of(r, P):
            a, b = bounds[qc]
            got = lse_out[:, :, first:first + b - a].reshape(-1)
            first += b - a
            blocks = {}
            for kc, (ka, kb) in enumerate(bounds):
                for mask in ("full", "diagonal"):
                    blocks[kc, mask] = _block_lse(q[:, :, a:b], k[:, :, ka:kb], scale, mask).reshape(-1)
            want = {kc: ("full" if not p["causal"] or kc < qc else "diagonal") for kc in range(2 * P)
                    if not p["causal"] or kc <= qc}
            tol = 2e-3 * np.maximum(1.0, np.abs(got)) + 1e-3
            best = None
            for combo in itertools.product((None, "full", "diagonal"), repeat=2 * P):
                chosen = [blocks[kc, m] for kc, m in enumerate(combo) if m is not None]
                pred = np.logaddexp.reduce(np.stack(chosen), axis=0) if chosen else np.full_like(got, -np.inf)
                with np.errstate(invalid="ignore"):
                    close = (pred == got) | (np.abs(pred - got) <= tol)
                if close.all():
                    kinds = {kc: m for kc, m in enumerate(combo) if m is not None}
                    if kinds == want:
                        best = "right"
                        break
                    best = best or kinds
            if best is None:
                return                      # a row no set of blocks explains: not this kind of bug
            if best == "right":
                right += 1
            else:
                found.append((r, qc, (a, b), best, want))
    if not found:
        return
    r, qc, (a, b), got_kinds, want = found[0]
    total = 2 * P
    yield Cause("ring:pairs",
                f"the lse of rank {r}'s queries in chunk {qc} (tokens {a}..{b - 1}) is the log-sum-exp over key chunks "
                f"{_kinds_text(got_kinds, bounds)}, where the {'causal ' if p['causal'] else ''}mask gives key chunks "
                f"{_kinds_text(want, bounds)} ({len(found)} of the {total} query chunks got another set of key "
                "blocks; the others, the right one): the schedule attended to the wrong blocks, or with the wrong mask")


def merge_observations(ctx):
    """lse right on every rank and o not: the rows' log-sum-exp merged right and their o did not."""
    P = ctx.params["P"]
    lse_ok = all(ctx.cmp[per_rank("lse", r)].passed for r in range(P))
    o_bad = [r for r in range(P) if not ctx.cmp[per_rank("o", r)].passed]
    if lse_ok and o_bad:
        yield Seen(f"lse is right on every rank and o is not (on rank{'s' if len(o_bad) > 1 else ''} "
                   f"{', '.join(map(str, o_bad))}): each row's log-sum-exp came out of the merges right, and its o "
                   "did not")
    fwd_ok = all(ctx.cmp[per_rank(n, r)].passed for n in ("o", "lse") for r in range(P))
    grads = [n for n in ("dq", "dk", "dv") if per_rank(n, 0) in ctx.cmp]
    bad = [f"{n} on rank {r}" for n in grads for r in range(P) if not ctx.cmp[per_rank(n, r)].passed]
    if fwd_ok and bad:
        yield Seen(f"the forward's o and lse are right on every rank; the gradients are not: {', '.join(bad[:4])}"
                   f"{' …' if len(bad) > 4 else ''}")
