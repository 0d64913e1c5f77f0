"""Checks for 02_flash_forward: tiled attention with online softmax, GQA, any Nq and Nk.

The diagnosis replays the usual bugs in float64 (a missing bounds mask, a missing rescale, a forgotten
1/l, lse in log2 units, the wrong kv head ...) and names the one the student's output matches.
"""
from __future__ import annotations

from ...attention import lanes, replays, weights
from ...attention.calls import prefill_call, prefill_reference
from ...attention.inputs import attention_inputs, attention_shapes
from ...spec import F32, Case

CASES = attention_shapes() + [
    Case("batch_and_heads", dict(B=3, H=4, Hkv=2, Nq=45, Nk=150, d=32)),
    Case("many_key_tiles", dict(B=1, H=1, Hkv=1, Nq=40, Nk=300, d=32, logit=20.0)),
    Case("n_200_d_128", dict(B=1, H=1, Hkv=1, Nq=200, Nk=200, d=128)),
    # The file run with other tile sizes in its CONFIG (BLOCK_M x BLOCK_N), as the lesson's tile sweep
    # sets them: a tile index or bound written with the other tile's size is right only while they agree.
    Case("tiles_64x32", dict(B=1, H=2, Hkv=1, Nq=70, Nk=100, d=64, tiles="64x32")),
    Case("tiles_32x64", dict(B=1, H=1, Hkv=1, Nq=70, Nk=100, d=32, tiles="32x64")),
]
TOLERANCES = {"o": F32, "lse": F32}

make_inputs = attention_inputs
call = prefill_call


def reference(inputs, p):
    return prefill_reference(inputs)


def diagnose(ctx):
    s, v = replays.scores(ctx.inputs)
    yield from replays.prefill_causes(ctx, s, v)
    yield from lanes.store_layout_causes(ctx)
    yield from lanes.shared_p_causes(ctx, s, v)
    yield from weights.observation(weights.prefill_rows(ctx, s, v))
    yield from weights.dominant_column_observation(ctx, s, None)
