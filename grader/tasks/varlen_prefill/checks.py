"""Checks for 07_varlen_prefill: a packed batch of sequences of different lengths (cu_seqlens).

Inputs: q [total_q, H, d], k and v [total_k, Hkv, d], cu_seqlens_q/k [B + 1] int32, max_seqlen_q/k,
optional causal (bottom-right per sequence). Outputs o [total_q, H, d], lse [H, total_q].

Parameters are scalars, so a shape replays with --shape: `lens` is "a/b/c" (sequence b gets entry
b % 3), `lens_k` the keys' lengths (default: `lens`). Cases with `bad` hand the launcher a broken
cu_seqlens and pass when it raises ValueError or TypeError before any kernel runs.
"""
from __future__ import annotations

import numpy as np

from ...attention import varlen
from ...errors import GraderError
from ...spec import F32, Case, Tolerance

C = Case
CASES = [
    C("one_sequence_of_one", dict(B=1, H=1, Hkv=1, d=32, lens="1")),
    C("lengths_0_and_1", dict(B=4, H=2, Hkv=2, d=32, lens="0/1/3/0")),
    C("batch_of_one", dict(B=1, H=2, Hkv=1, d=64, lens="70")),
    C("tile_edges", dict(B=3, H=1, Hkv=1, d=64, lens="63/64/65")),
    C("one_long_many_short", dict(B=6, H=2, Hkv=1, d=32, lens="150/2/1/9/3/17")),
    C("chunked_prefill", dict(B=3, H=2, Hkv=1, d=64, lens="10/40/1", lens_k="100/40/70")),
    C("chunked_prefill_causal", dict(B=3, H=2, Hkv=1, d=64, lens="10/40/1", lens_k="100/40/70", causal=True)),
    C("causal", dict(B=4, H=2, Hkv=2, d=32, lens="70/1/33/0", causal=True)),
    C("causal_queries_past_keys", dict(B=2, H=2, Hkv=1, d=32, lens="30/5", lens_k="10/5", causal=True)),
    # A whole causal 64 x 64 sequence packed after one with more queries than keys: its queries start at
    # 80 in q, its keys at 10 in k, so a test in packed positions sees its diagonal 70 rows away.
    # Causal offsets 62, 61 and 63 (n_k - n_q modulo 64) over whole key tiles: a diagonal test one key
    # too lenient (or too strict) shows at one of them, in one sequence.
    C("causal_offsets_61_to_63", dict(B=4, H=1, Hkv=1, d=32, lens="2/3/1/66", lens_k="64/64/64/128", causal=True)),
    C("causal_after_queries_past_keys", dict(B=2, H=1, Hkv=1, d=32, lens="80/64", lens_k="10/64", causal=True)),
    # More queries than keys, and a sequence with none: a query tile past n_k still has rows to write.
    C("queries_past_keys", dict(B=3, H=2, Hkv=1, d=32, lens="100/5/30", lens_k="10/0/30")),
    C("gqa_4_to_1", dict(B=2, H=8, Hkv=2, d=64, lens="33/47", lens_k="47/20")),
    C("head_dim_96", dict(B=2, H=2, Hkv=1, d=96, lens="50/20", causal=True)),
    C("head_dim_128", dict(B=2, H=2, Hkv=2, d=128, lens="70/130", lens_k="130/130", causal=True)),
    C("large_logits", dict(B=2, H=2, Hkv=2, d=64, lens="40/77", logit=50.0)),
    # Not 1/sqrt(d): a kernel that computes its own scale instead of using the argument fails here.
    C("custom_scale", dict(B=2, H=6, Hkv=2, d=64, lens="33/47", scale=0.3)),
    # Broken offsets: the launcher must refuse them before launching anything.
    C("bad_cu_seqlens_decreasing", dict(B=3, H=1, Hkv=1, d=32, lens="5/3/4", bad="decreasing")),
    C("bad_cu_seqlens_last_entry", dict(B=2, H=1, Hkv=1, d=32, lens="5/3", bad="last_entry")),
    C("bad_cu_seqlens_int64", dict(B=2, H=1, Hkv=1, d=32, lens="5/3", bad="int64")),
    C("bad_max_seqlen", dict(B=2, H=1, Hkv=1, d=32, lens="5/70", bad="max_seqlen")),
]
TOLERANCES = {"o": F32, "lse": F32}
SHRINK_KEYS = ("B", "H", "Hkv", "d")
# On the emulator, run the blocks a second time, last first: a block that stores past its own
# sequence, over the next one's rows, changes the result (on a GPU the two race).
BLOCK_ORDER_CHECK = True
TASK_MADE = ("refused",)   # a "bad" case's verdict, made here, not by the launcher (runner.py's provenance)


def valid(p) -> bool:
    return p["d"] in (32, 64, 96, 128) and p["H"] % p["Hkv"] == 0


make_inputs = varlen.varlen_inputs


def tolerances(inputs, p, ref):
    """The broken-offset cases have one output, 1 when the launcher refused them."""
    return {"refused": Tolerance(0.0, 0.0)} if p.get("bad") else TOLERANCES


def reference(inputs, p):
    if p.get("bad"):
        return {"refused": np.ones(1)}
    return varlen.reference(inputs)


# What each broken case breaks, and how it reads to a student.
BREAK = {
    "decreasing": "cu_seqlens_q decreases (sequence 1 has a negative length)",
    "last_entry": "the last entry of cu_seqlens_k is not the number of packed keys",
    "int64": "cu_seqlens_q is int64, not int32",
    "max_seqlen": "max_seqlen_q is smaller than the longest sequence",
}


def _broken(rt, inputs, bad):
    """The call's arguments with one thing broken."""
    args = dict(inputs)
    cu_q, cu_k = (rt.to_numpy(inputs[x]) for x in ("cu_seqlens_q", "cu_seqlens_k"))
    if bad == "decreasing":
        cu_q = cu_q.copy()
        cu_q[1], cu_q[2] = cu_q[2], cu_q[1]
        args["cu_seqlens_q"] = rt.asarray(cu_q)
    elif bad == "last_entry":
        args["cu_seqlens_k"] = rt.asarray(np.append(cu_k[:-1], cu_k[-1] + 1).astype(np.int32))
    elif bad == "int64":
        args["cu_seqlens_q"] = rt.asarray(cu_q.astype(np.int64))
    elif bad == "max_seqlen":
        args["max_seqlen_q"] = int(np.diff(cu_q).max()) - 1
    else:
        raise GraderError(f"unknown broken input {bad!r}; the known ones: {', '.join(BREAK)}")
    return args


class CountingRuntime:
    """The runtime, counting kernel launches, so that a refusal can be told apart from a crash that
    happened after a kernel ran."""

    def __init__(self, rt):
        object.__setattr__(self, "_rt", rt)
        object.__setattr__(self, "launches", 0)

    def __getattr__(self, name):
        return getattr(self._rt, name)

    def compile(self, *a, **kw):
        return _CountingModule(self, self._rt.compile(*a, **kw))


class _CountingModule:
    def __init__(self, owner, module):
        self._owner, self._module = owner, module

    def get_function(self, name):
        return _CountingKernel(self._owner, self._module.get_function(name))


class _CountingKernel:
    def __init__(self, owner, kernel):
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_kernel", kernel)

    def __getattr__(self, name):
        return getattr(self._kernel, name)

    def __setattr__(self, name, value):
        setattr(self._kernel, name, value)

    def __call__(self, *a, **kw):
        object.__setattr__(self._owner, "launches", self._owner.launches + 1)
        return self._kernel(*a, **kw)


def _args(inputs):
    return (inputs["q"], inputs["k"], inputs["v"], inputs["cu_seqlens_q"], inputs["cu_seqlens_k"],
            inputs["max_seqlen_q"], inputs["max_seqlen_k"], inputs["scale"])


def call(fn, rt, inputs, p):
    if not p.get("bad"):
        o, lse = fn(rt, *_args(inputs), causal=inputs["causal"])
        return {"o": o, "lse": lse}
    what = BREAK.get(p["bad"], p["bad"])
    counting = CountingRuntime(rt)
    try:
        fn(counting, *_args(_broken(rt, inputs, p["bad"])), causal=inputs["causal"])
    except (ValueError, TypeError) as e:
        if counting.launches:
            raise GraderError(f"the launcher raised {type(e).__name__} ({e}) only after launching a kernel. "
                              f"Here {what}: check cu_seqlens and max_seqlen before launching anything.") from None
        return {"refused": np.ones(1, np.float32)}
    raise GraderError(f"the launcher accepted broken offsets: {what}, and {'launched the kernel' if counting.launches else 'returned'} "
                      f"without an error. The kernel trusts cu_seqlens blindly (a wrong offset reads another "
                      f"sequence's keys, or past the end of the buffer): raise ValueError before launching. "
                      f"check_cu_seqlens in the stub does it.")


def diagnose(ctx) -> str | None:
    return varlen.diagnose(ctx)
