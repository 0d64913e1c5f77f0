"""Checks for 09_flash_backward: dQ, dK and dV from q, k, v, o, lse and dO, GQA, optional causal.

The reference gradients are float64 and computed from the scores, not from the kernel's lse
(tests/test_backward.py checks them against central finite differences of the forward). The
diagnosis replays the usual bugs: D forgotten or computed from V, P recomputed with the wrong scale,
without lse or without the mask, dK and dV not summed over a GQA group, a scale dropped; then says
which gradients are right, which locates the step at fault.
"""
from __future__ import annotations

from ...attention import backward
from ...attention.inputs import attention_shapes
from ...spec import F32, Case

CASES = attention_shapes() + [
    Case("many_key_tiles", dict(B=1, H=2, Hkv=1, Nq=40, Nk=300, d=32)),
    Case("causal_square", dict(B=1, H=2, Hkv=2, Nq=70, Nk=70, d=64, causal=True)),
    Case("causal_chunked", dict(B=1, H=2, Hkv=1, Nq=40, Nk=170, d=64, causal=True)),
    Case("causal_queries_past_keys", dict(B=1, H=2, Hkv=2, Nq=150, Nk=60, d=32, causal=True)),
    # Nq > Nk over whole key tiles: a diagonal that starts inside a full key tile.
    Case("causal_queries_past_key_tiles", dict(B=1, H=1, Hkv=1, Nq=200, Nk=130, d=32, causal=True)),
    # No query at all: nothing flows back to K and V, so dK = dV = 0, written even though no query tile
    # ever runs (a store of dK and dV inside the loop over query tiles leaves them unwritten).
    Case("no_queries", dict(B=1, H=2, Hkv=1, Nq=0, Nk=37, d=32)),
    Case("causal_gqa", dict(B=2, H=8, Hkv=2, Nq=50, Nk=120, d=64, causal=True)),
    Case("causal_large_logits", dict(B=1, H=1, Hkv=1, Nq=130, Nk=130, d=64, logit=50.0, causal=True)),
    Case("causal_d_128", dict(B=1, H=2, Hkv=1, Nq=100, Nk=140, d=128, causal=True)),
]
TOLERANCES = {"dq": F32, "dk": F32, "dv": F32}
# On the emulator, run the blocks a second time, last first: blocks that add into dQ with a plain +=
# (not atomicAdd) give a result that depends on their order (on a GPU they lose updates).
BLOCK_ORDER_CHECK = True

make_inputs = backward.backward_inputs


def tolerances(inputs, p, ref):
    """F32 relative to the larger of each gradient and the size of the terms it sums (a row with one
    key has a dQ of exactly 0 in exact arithmetic, and float32 rounding of terms of order 1)."""
    return backward.tolerances(inputs, ref, F32)


def reference(inputs, p):
    return backward.reference(inputs)


def call(fn, rt, inputs, p):
    dq, dk, dv = fn(rt, inputs["q"], inputs["k"], inputs["v"], inputs["o"], inputs["lse"], inputs["do"],
                    inputs["scale"], causal=inputs["causal"])
    return {"dq": dq, "dk": dk, "dv": dv}


def diagnose(ctx) -> str | None:
    return backward.diagnose(ctx)
