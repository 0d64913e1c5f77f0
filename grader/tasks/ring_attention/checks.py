"""Checks for 12_ring_attention: one sequence over P ranks, forward and the training step's backward.

Each case places a sequence of N tokens over P ranks (grader/attention/ring.py: 2P chunks, rank r
holding chunks r and 2P-1-r) and runs the launcher once per rank: on the CPU as threads of one process
through the stand-in for NCCL (grader/runtimes/ranks.py), which names a deadlock with every rank's
waiting call and a race across streams with both lines; on GPUs as one process per GPU through NCCL. A
case of P ranks needs P GPUs there, and is reported as not run on a machine with fewer.

Every output is checked per rank ("o on rank 1") against the float64 attention of the whole sequence,
taken at that rank's positions: o and lse, and with "backward", dQ, dK and dV of a training step whose
loss gradient is dO. The tolerance is module 06's low-precision rule on the whole sequence: a few times
the error of a same-precision reference (grader/attention/lowp.py, backward_lowp.py).
"""
from __future__ import annotations

import functools

import numpy as np

from ...attention import backward, backward_lowp, lowp
from ...attention import references as R
from ...attention import ring
from ...attention.inputs import attention_inputs
from ...runtimes.ranks import run_ranks
from ...errors import GraderError
from ...spec import Case, Tolerance

SHAPES = [  # name, (P, B, H, Hkv, N, d), extra
    ("one_rank", (1, 1, 2, 2, 20, 64), {}),
    ("two_ranks", (2, 1, 2, 2, 24, 64), {}),
    ("three_ranks_remainder", (3, 1, 2, 1, 29, 64), {}),
    ("four_ranks", (4, 1, 2, 2, 40, 64), {}),
    ("causal_two_ranks", (2, 1, 2, 2, 24, 64), {"causal": True}),
    ("causal_three_ranks_remainder", (3, 1, 2, 2, 31, 64), {"causal": True}),
    ("causal_four_ranks", (4, 1, 2, 1, 40, 64), {"causal": True}),
    ("causal_gqa_4_to_1", (2, 1, 4, 1, 26, 64), {"causal": True}),
    ("head_dim_128", (2, 1, 2, 2, 22, 128), {}),
    ("bf16_causal_three_ranks", (3, 1, 2, 2, 30, 64), {"causal": True, "dtype": "bfloat16"}),
    ("large_logits_causal", (2, 1, 2, 2, 24, 64), {"causal": True, "logit": 50.0}),
    # Key 1 (rank 0's own chunk, merged first there) scores about +150 over the rest: every part rank 0
    # merges after it has an lse far below the running one.
    ("early_key_dominates", (2, 1, 2, 2, 24, 64), {"hot_key": 1, "hot": 150.0}),
    ("training_step_two_ranks", (2, 1, 2, 2, 24, 64), {"backward": True}),
    ("training_step_causal_three_ranks_remainder", (3, 1, 2, 1, 31, 64), {"backward": True, "causal": True}),
    ("training_step_causal_four_ranks_bf16_gqa", (4, 1, 2, 1, 32, 64),
     {"backward": True, "causal": True, "dtype": "bfloat16"}),
    ("training_step_causal_d128", (2, 1, 2, 2, 20, 128), {"backward": True, "causal": True}),
    # Two sequences of a GQA group: every batch offset of the slices, the merges and the gradients'
    # sums is used with b > 0.
    ("batch_2_gqa_three_ranks", (3, 2, 6, 2, 27, 64), {"causal": True}),
    ("training_step_batch_2_gqa", (2, 2, 4, 2, 24, 64), {"backward": True}),
]
CASES = [Case(name, dict(dict(zip(("P", "B", "H", "Hkv", "N", "d"), shape)),
                         **{"dtype": "float16", "causal": False, "backward": False, **extra}))
         for name, shape, extra in SHAPES]
FORWARD, GRADIENTS = ("o", "lse"), backward.OUTPUTS
# Per case, each output on each rank gets its own tolerance (tolerances below); these are about the
# loosest a float16 case gets, for the tools that list a module's tolerances.
TOLERANCES = {name: Tolerance(rel=3e-3, abs=3e-2) for name in FORWARD + GRADIENTS}
SHRINK_KEYS = ("B", "H", "Hkv")


def valid(p) -> bool:
    return p["d"] in (64, 128) and p["H"] % p["Hkv"] == 0 and p["N"] >= 2 * p["P"]


def outputs(p) -> tuple[str, ...]:
    return FORWARD + (GRADIENTS if p.get("backward") else ())


def make_inputs(p, rng):
    dtype, P = p["dtype"], p["P"]
    x = attention_inputs(dict(p, Nq=p["N"], Nk=p["N"]), rng)
    full = {name: lowp.encode(x[name], dtype) for name in ("q", "k", "v")}
    if p.get("backward"):
        full["do"] = lowp.encode(rng.standard_normal(x["q"].shape), dtype)
    out = {ring.per_rank(name, r): ring.shard(a, r, P) for r in range(P) for name, a in full.items()}
    out["scale"] = x["scale"]
    return out


def _full(inputs, p) -> dict:
    """The whole sequence's inputs as the float64 values they hold."""
    names = ("q", "k", "v") + (("do",) if p.get("backward") else ())
    return {name: ring.unshard([lowp.decode(inputs[ring.per_rank(name, r)], p["dtype"]).astype(np.float64)
                                for r in range(p["P"])], p["N"]) for name in names}


def _per_rank(full: dict, p) -> dict:
    return {ring.per_rank(name, r): ring.shard(a, r, p["P"]) for name, a in full.items() for r in range(p["P"])}


def _whole(inputs, p) -> dict:
    """The float64 outputs of the whole sequence."""
    x = _full(inputs, p)
    o, lse = R.attention(x["q"], x["k"], x["v"], inputs["scale"], causal=p["causal"])
    out = {"o": o, "lse": lse}
    if p.get("backward"):
        out.update(backward.reference(dict(x, o=o, lse=lse, scale=inputs["scale"], causal=p["causal"])))
    return out


def reference(inputs, p):
    return _per_rank(_whole(inputs, p), p)


def tolerances(inputs, p, ref):
    """Module 06's rule on the whole sequence (a few times a same-precision reference's error), the same
    for every rank's part of an output."""
    dtype, x, whole = p["dtype"], _full(inputs, p), _whole(inputs, p)
    q, k, v = (lowp.rounded(x[n], dtype) for n in ("q", "k", "v"))
    o_sp, lse_sp = lowp.same_precision_attention(q, k, v, inputs["scale"], dtype, causal=p["causal"])
    tol = lowp.tolerances(o_sp, lse_sp, whole, dtype)
    if p.get("backward"):
        grads = dict(q=lowp.encode(q, dtype), k=lowp.encode(k, dtype), v=lowp.encode(v, dtype),
                     o=lowp.encode(whole["o"], dtype), do=lowp.encode(x["do"], dtype),
                     lse=whole["lse"].astype(np.float32), scale=inputs["scale"], causal=p["causal"])
        tol.update(backward_lowp.tolerances(grads, dtype, whole))
    return {ring.per_rank(name, r): tol[name] for name in outputs(p) for r in range(p["P"])}


def placement_contract(fn, p) -> None:
    """The file's own chunk_bounds and chunks_of, where it defines them, must place the tokens where the
    grader placed them (the lesson's placement): else its ranks read their rows at other positions."""
    P, n = p["P"], p["N"]
    g = getattr(fn, "__globals__", {})
    for name, theirs, ours in (("chunk_bounds", lambda f: [tuple(map(int, b)) for b in f(n, P)], ring.chunk_bounds(n, P)),
                               ("chunks_of", lambda f: [tuple(map(int, f(r, P))) for r in range(P)],
                                [ring.chunks_of(r, P) for r in range(P)])):
        f = g.get(name)
        if not callable(f):
            continue
        try:
            got = theirs(f)
        except Exception as e:
            raise GraderError(f"your {name} raised {type(e).__name__}: {e} for N = {n}, P = {P}") from None
        if got != [tuple(x) for x in ours]:
            args = f"({n}, {P})" if name == "chunk_bounds" else f"(r, {P}) for r = 0 .. {P - 1}"
            raise GraderError(f"your {name}{args} gives {got}, but the grader placed the tokens as the lesson says: "
                              f"{[tuple(x) for x in ours]} (2P chunks, the first N mod 2P one token longer; rank r "
                              "holds chunks r and 2P-1-r). Each rank's q, k and v hold the tokens of that placement.")


def call(fn, rt, inputs, p):
    P = p["P"]
    placement_contract(fn, p)
    per_rank = []
    for r in range(P):
        kw = {name: rt.to_numpy(inputs[ring.per_rank(name, r)]) if getattr(rt, "name", "") == "gpu"
              else inputs[ring.per_rank(name, r)] for name in ("q", "k", "v")}
        if p.get("backward"):
            name = ring.per_rank("do", r)
            kw["do"] = rt.to_numpy(inputs[name]) if getattr(rt, "name", "") == "gpu" else inputs[name]
        kw.update(n_tokens=p["N"], scale=inputs["scale"], causal=p["causal"])
        per_rank.append(kw)
    results = run_ranks(rt, P, fn, per_rank, setup=functools.partial(ring.library, dtype=p["dtype"]))
    out = {}
    for r, got in enumerate(results):
        got = got if isinstance(got, tuple) else (got,)
        names = outputs(p)
        if len(got) != len(names):
            raise TypeError(f"rank {r}'s ring_attention returned {len(got)} arrays; it returns (o, lse)"
                            + (", and with do also (dq, dk, dv): five" if p.get("backward") else ""))
        out.update({ring.per_rank(name, r): a for name, a in zip(names, got)})
    return out


def widen(out, p):
    return {name: (a if name.startswith("lse") else lowp.decode(a, p["dtype"])) for name, a in out.items()}


def diagnose(ctx):
    if ctx.probe:
        return
    yield from ring.other_rank_causes(ctx)
    yield from ring.pair_causes(ctx, _full(ctx.inputs, ctx.params))
    yield from ring.merge_observations(ctx)
