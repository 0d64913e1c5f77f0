"""Module 12's kit: how a sequence is placed over P ranks, the references per rank, and the local
attention the ranks call (the course's finished kernels of modules 06, 10 and 11, and 14's backward on
an sm_90 GPU; in a student release, which has no solutions/, the student's own files of 06, 10 and 11).

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
# Module 14 comes after 12: its backward is the library's on an sm_90 GPU only where the course's own
# solution of it is here (not in a student release, whose 12 calls the student's 06, 10 and 11).
BACKWARD_SM90 = "14_backward_hopper"


@functools.lru_cache(maxsize=None)
def _solution(ex_id: str):
    """The course's finished module ex_id; in a student release (no solutions/), the student's own."""
    from .. import paths
    path = paths.solution_file(ex_id)
    if not path.is_file():
        path = paths.exercise_file(ex_id)
    if not path.is_file():
        raise GraderError(f"module 12 calls module {ex_id[:2]}'s finished kernels as its local attention, and this "
                          f"copy of the course has neither solutions/{ex_id}.py nor exercises/{ex_id}.py: release "
                          f"module 12 with the modules it calls ({', '.join(sorted({i[:2] for i in LIBRARY.values()}))}), "
                          "or after them")
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
        from .. import paths
        hopper_bwd = hopper and paths.solution_file(BACKWARD_SM90).is_file()
        self._bwd = _solution(BACKWARD_SM90 if hopper_bwd else LIBRARY["backward"])
        self.forward_name = "flash_hopper" if hopper else "flash_tc"
        self.backward_name = "flash_backward_hopper" if hopper_bwd else "flash_backward_tc"

    def _kind(self):
        return self.dtype if self.dtype == "bfloat16" else None

    def forward(self, q, k, v, scale, causal=False):
        return getattr(self._fwd, self.forward_name)(self.rt, q, k, v, float(scale), causal=bool(causal),
                                                     dtype=self._kind())

    def backward(self, q, k, v, o, lse, do, scale, causal=False):
        return getattr(self._bwd, self.backward_name)(self.rt, q, k, v, o, lse, do, float(scale),
                                                      causal=bool(causal), dtype=self._kind())


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
    """Module 09's relative distance (backward._distance), inf for another shape."""
    from .backward import _distance
    if np.shape(got) != np.shape(want):
        return np.inf
    return _distance(got, want, want)


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


def _block(x: dict, scale: float, rows: tuple, cols: tuple, mask: str) -> dict:
    """One (query chunk, key chunk) block's share of every output, float64: lse [B, H, n_q] of its scores,
    and its parts of dQ (its rows), dK and dV (its keys; a GQA group's heads summed), computed with the
    whole sequence's lse and D = rowsum(dO ∘ O), as the backward of every block uses them. mask: full or
    diagonal (module 03's bottom-right causal mask on the block)."""
    from . import references as R
    a, b = rows
    c, e = cols
    q, k, v = x["q"][:, :, a:b], x["k"][:, :, c:e], x["v"][:, :, c:e]
    H, Hkv = q.shape[1], k.shape[1]
    heads = [R.kv_head_of(h, H, Hkv) for h in range(H)]
    kh, vh = k[:, heads], v[:, heads]
    s = scale * (q @ np.swapaxes(kh, -1, -2))
    if mask == "diagonal":
        s = np.where(R.causal_mask(b - a, e - c), s, -np.inf)
    m = s.max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = {"lse": np.where(np.isfinite(m), m + np.log(np.exp(s - np.where(np.isfinite(m), m, 0)[..., None]).sum(-1)),
                               -np.inf)}
        if "do" in x:
            lse = x["lse"][:, :, a:b]
            pr = np.where(np.isfinite(s), np.exp(s - np.where(np.isfinite(lse), lse, np.inf)[..., None]), 0.0)
            do = x["do"][:, :, a:b]
            ds = pr * (do @ np.swapaxes(vh, -1, -2) - (do * x["o"][:, :, a:b]).sum(-1)[..., None])
            group = lambda t: t.reshape(t.shape[0], Hkv, H // Hkv, *t.shape[2:]).sum(axis=2)      # noqa: E731
            out.update(dq=scale * ds @ kh, dk=group(scale * np.swapaxes(ds, -1, -2) @ q),
                       dv=group(np.swapaxes(pr, -1, -2) @ do))
    return out


def _kinds_text(kinds: dict) -> str:
    parts = [f"{c} ({'all of it' if m == 'full' else 'the diagonal mask'})" for c, m in sorted(kinds.items())]
    return ", ".join(parts) if parts else "none"


PAIR_SEARCH_RANKS = 4       # the cases' largest P; the least-squares solve itself has no limit


def _sets(n_partners: int, want: dict):
    """Every choice of (skip, full, diagonal) per partner chunk, the mask's own first; past 729 choices,
    those that differ from the mask's in at most 3 chunks."""
    import itertools
    choices = (None, "full", "diagonal")
    yield dict(want)
    for combo in itertools.product(choices, repeat=n_partners):
        kinds = {c: m for c, m in enumerate(combo) if m is not None}
        if 3 ** n_partners > 729 and sum(kinds.get(c) != want.get(c) for c in range(n_partners)) > 3:
            continue
        if kinds != want:
            yield kinds


def _explain(got: np.ndarray, parts: dict, want: dict, n_partners: int, combine, close,
             linear=None) -> dict | str | None:
    """The set of partner blocks whose parts, combined, give `got`: "right" for the mask's own set, None
    if no set does. `linear(x)` maps an output into the space where it is the plain sum of its blocks'
    parts (the gradients: itself; lse: exp(lse - its row's largest block)): there one least-squares
    solve finds each block's weight, which must come out 0 or 1; where it does not (blocks that no
    data tells apart, or weights too small for the solve to see), the sets are tried one by one (_sets)."""
    if close(combine([parts[c, m] for c, m in sorted(want.items())], got), got):
        return "right"
    if linear is not None:
        keys = [(c, m) for c in range(n_partners) for m in ("full", "diagonal")]
        a, y = linear([parts[k] for k in keys], got)
        w = np.linalg.lstsq(a, y, rcond=None)[0]
        if np.all(np.isfinite(w)) and np.all(np.minimum(np.abs(w), np.abs(w - 1)) < 0.05):
            on = {k for k, x in zip(keys, w) if x > 0.5}
            kinds = {c: m for c, m in on}
            if len(kinds) == len(on) and close(combine([parts[c, m] for c, m in sorted(kinds.items())], got), got):
                return "right" if kinds == want else kinds
    for kinds in _sets(n_partners, want):
        if close(combine([parts[c, m] for c, m in sorted(kinds.items())], got), got):
            return "right" if kinds == want else kinds
    return None


def _grad_columns(columns, got):
    return np.stack([c.reshape(-1) for c in columns], axis=1), got.reshape(-1)


def _lse_columns(columns, got):
    cols = np.stack([c.reshape(-1) for c in columns], axis=1)
    top = np.max(np.where(np.isfinite(cols), cols, -np.inf), axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    ok = np.isfinite(got.reshape(-1))
    with np.errstate(over="ignore", invalid="ignore"):
        a, y = np.exp(cols - top), np.exp(got.reshape(-1)[:, None] - top)[:, 0]
    return np.where(ok[:, None], a, 0.0), np.where(ok, y, 0.0)


def _lse_of(chosen, like):
    return np.logaddexp.reduce(np.stack(chosen), axis=0) if chosen else np.full_like(like, -np.inf)


def _sum_of(chosen, like):
    return np.sum(np.stack(chosen), axis=0) if chosen else np.zeros_like(like)


def _lse_close(pred, got):
    with np.errstate(invalid="ignore"):
        return bool(((pred == got) | (np.abs(pred - got) <= 2e-3 * np.maximum(1.0, np.abs(got)) + 1e-3)).all())


def _grad_close(pred, got):
    return _rel(got, pred) <= 2e-2


def pair_causes(ctx, full_inputs: dict):
    """An output whose every chunk is the combination of another set of blocks than the mask allows: for
    lse, the log-sum-exp over some key chunks of the whole sequence (each whole, under the diagonal mask,
    or left out); for dQ the sum of those blocks' parts; for dK and dV the sum over query chunks. Says
    which chunks, with which mask, the first chunk that differs got."""
    p = ctx.params
    P, n = p["P"], p["N"]
    if P > PAIR_SEARCH_RANKS:
        return
    bounds, causal, scale = chunk_bounds(n, P), p["causal"], ctx.inputs["scale"]
    x = dict(full_inputs)
    if "do" in x:
        x["o"], x["lse"] = _full_outputs(x, scale, causal)
    kinds_of = lambda mine, other: ("full" if not causal or other < mine else "diagonal")     # noqa: E731
    for name in ("lse", "dq", "dk", "dv"):
        if per_rank(name, 0) not in ctx.out or all(ctx.cmp[per_rank(name, r)].passed for r in range(P)):
            continue
        by_key = name in ("dk", "dv")          # dK, dV: a key chunk's sum over query chunks
        found, cache = [], {}
        for r in range(P):
            out, first = np.asarray(ctx.out[per_rank(name, r)], np.float64), 0
            for mine in chunks_of(r, P):
                a, b = bounds[mine]
                got = out[:, :, first:first + b - a]
                first += b - a
                parts = {}
                for other in range(2 * P):
                    for mask in ("full", "diagonal"):
                        rows, cols = (bounds[other], bounds[mine]) if by_key else (bounds[mine], bounds[other])
                        key = (rows, cols, mask)
                        if key not in cache:
                            cache[key] = _block(x, scale, rows, cols, mask)
                        parts[other, mask] = cache[key][name]
                want = {o: kinds_of(mine, o) if not by_key else kinds_of(o, mine) for o in range(2 * P)
                        if not causal or (o <= mine if not by_key else o >= mine)}
                combine, close, linear = ((_lse_of, _lse_close, _lse_columns) if name == "lse"
                                          else (_sum_of, _grad_close, _grad_columns))
                kinds = _explain(got, parts, want, 2 * P, combine, close, linear)
                if kinds is None:
                    break                          # a chunk no set of blocks explains: not this kind of bug
                if kinds != "right":
                    found.append((r, mine, (a, b), kinds, want))
            else:
                continue
            found = []
            break
        if not found:
            continue
        r, mine, (a, b), got_kinds, want = found[0]
        side, other = ("keys", "query") if by_key else ("queries", "key")
        what = {"lse": "the log-sum-exp over", "dq": "the sum of the dQ parts of", "dk": "the sum of the dK parts of",
                "dv": "the sum of the dV parts of"}[name]
        yield Cause("ring:pairs",
                    f"{name} of rank {r}'s {side} in chunk {mine} (tokens {a}..{b - 1}) is {what} {other} chunks "
                    f"{_kinds_text(got_kinds)}, where the {'causal ' if causal else ''}mask gives {other} chunks "
                    f"{_kinds_text(want)} ("
                    + ("every chunk got another set of blocks" if len(found) == 2 * P else
                       f"{len(found)} of the {2 * P} chunks got another set of blocks, the others the right one")
                    + "): the ring combined the wrong blocks, or some with the wrong mask")
        return


def _full_outputs(x: dict, scale: float, causal: bool):
    from . import references as R
    return R.attention(x["q"], x["k"], x["v"], scale, causal=causal)


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
