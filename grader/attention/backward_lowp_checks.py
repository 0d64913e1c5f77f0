"""The checks' functions that modules 11 and 14 share (grader/tasks/NAME/checks.py imports them): the
backward's inputs, float64 reference, tolerance rule, call, widening and diagnosis in float16 and
bfloat16, for a kernel with module 11's contract (q, k, v, o, lse, dO, scale, causal, dtype) ->
(dq, dk, dv) and d = 64 or 128. Each module's checks.py keeps its own CASES."""
from __future__ import annotations

from ..spec import Tolerance
from . import backward_lowp

# The tolerance of a case is computed from its inputs (tolerances below); these are about the loosest
# a float16 case gets, stated for the tools that list a module's tolerances.
TOLERANCES = {name: Tolerance(rel=3e-3, abs=3e-2) for name in backward_lowp.OUTPUTS}
SHRINK_KEYS = ("B", "H", "Hkv", "Nq", "Nk")          # d stays 64 or 128: the kernels support no other
# On the emulator, run the blocks a second time, last first: blocks whose shares of dQ do not add up
# in any order (a plain += where an atomic or a reduction is due) give a result that depends on it.
BLOCK_ORDER_CHECK = True


def valid(p) -> bool:
    return p["d"] in (64, 128) and p["H"] % p["Hkv"] == 0


def make_inputs(p, rng):
    return backward_lowp.backward_lowp_inputs(p, rng)


def reference(inputs, p):
    return backward_lowp.reference(inputs, p["dtype"])


def tolerances(inputs, p, ref):
    return backward_lowp.tolerances(inputs, p["dtype"], ref)


def call(fn, rt, inputs, p):
    dtype = p["dtype"] if p["dtype"] == "bfloat16" else None    # float16 is read from the arrays
    dq, dk, dv = fn(rt, inputs["q"], inputs["k"], inputs["v"], inputs["o"], inputs["lse"], inputs["do"],
                    inputs["scale"], causal=inputs["causal"], dtype=dtype)
    return {"dq": dq, "dk": dk, "dv": dv}


def widen(out, p):
    return backward_lowp.widen(out, p["dtype"])


def diagnose(ctx):
    return backward_lowp.diagnose(ctx, ctx.params["dtype"])


__all__ = ["TOLERANCES", "SHRINK_KEYS", "BLOCK_ORDER_CHECK", "valid", "make_inputs", "reference",
           "tolerances", "call", "widen", "diagnose"]
