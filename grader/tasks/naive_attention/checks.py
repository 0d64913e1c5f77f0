"""Checks for 00_naive_attention: attention with GQA, no mask, materialised scores."""
from __future__ import annotations

from ...attention import replays, weights
from ...attention.calls import prefill_call, prefill_reference
from ...attention.inputs import attention_inputs, attention_shapes
from ...spec import F32, Case

CASES = attention_shapes() + [
    Case("n_256", dict(B=1, H=1, Hkv=1, Nq=256, Nk=256, d=64)),
    # Scores near ±150: expf overflows past 88.7 unless the row max is subtracted first.
    Case("huge_logits", dict(B=1, H=1, Hkv=1, Nq=20, Nk=33, d=32, logit=150.0)),
]
TOLERANCES = {"o": F32, "lse": F32}

make_inputs = attention_inputs
call = prefill_call


def reference(inputs, p):
    return prefill_reference(inputs)


def diagnose(ctx):
    # The same replayed bugs as FlashAttention's, minus the tiling: a forgotten 1/l, lse's units,
    # the exponent, the key range, the indexing, the scale.
    s, v = replays.scores(ctx.inputs)
    yield from replays.output_causes(ctx, s, v)
    yield from replays.exponent_causes(ctx, s, v)
    yield from replays.key_range_causes(ctx, s, v)
    yield from replays.setup_causes(ctx)
    yield from weights.observation(weights.prefill_rows(ctx, s, v))
