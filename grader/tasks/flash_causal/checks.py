"""Checks for 03_flash_causal: causal attention with the mask aligned bottom-right.

Query i sees key j iff j <= i + (Nk - Nq). Nq < Nk is chunked prefill; Nq > Nk leaves the first
Nq - Nk rows with no visible key (o = 0, lse = -inf). The diagnosis replays the usual mask bugs
(top-left alignment, an off-by-one on the diagonal, diagonal tiles without the per-element test, a
loop over key tiles that stops too early) and the bugs of module 02.
"""
from __future__ import annotations

from ...attention import lanes, references as R
from ...attention import replays, weights
from ...attention.calls import prefill_call, prefill_reference
from ...attention.inputs import attention_inputs, attention_shapes
from ...spec import F32, Case

CASES = attention_shapes() + [
    Case("chunked_prefill", dict(B=1, H=2, Hkv=1, Nq=40, Nk=170, d=64)),
    Case("chunk_of_one_tile", dict(B=1, H=1, Hkv=1, Nq=64, Nk=200, d=32)),
    Case("one_query_many_keys", dict(B=2, H=2, Hkv=2, Nq=1, Nk=150, d=64)),
    Case("queries_past_keys", dict(B=1, H=2, Hkv=2, Nq=150, Nk=60, d=32)),
    Case("no_keys_for_a_tile", dict(B=1, H=1, Hkv=1, Nq=200, Nk=5, d=32)),
    Case("gqa_chunked", dict(B=2, H=8, Hkv=2, Nq=50, Nk=120, d=64)),
    Case("causal_200_d_128", dict(B=1, H=1, Hkv=1, Nq=200, Nk=200, d=128)),
    Case("causal_large_logits", dict(B=1, H=1, Hkv=1, Nq=130, Nk=130, d=64, logit=50.0)),
    # Offset 1: a key tile starts at the diagonal key of a query tile's last row inside the matrix,
    # not only at the last key (a loop bound one key short shows here, and is told from a last key
    # left out).
    Case("offset_one", dict(B=1, H=1, Hkv=1, Nq=128, Nk=129, d=32)),
    # Nq > Nk with whole key tiles: the second query tile's diagonal starts inside key tile 0, which
    # is full, so only a diagonal test that includes the offset gives it the per-element mask.
    Case("queries_past_key_tiles", dict(B=1, H=1, Hkv=1, Nq=200, Nk=130, d=32)),
    # Offset 62 (64 - 2) with whole key tiles: each query tile's first row sees exactly up to one key
    # before a key tile's last, so a diagonal test one key too lenient lets it see that last key.
    # No case above has offset 62 modulo 64.
    Case("offset_62", dict(B=1, H=1, Hkv=1, Nq=66, Nk=128, d=32)),
    # The file run with other tile sizes in its CONFIG (BLOCK_M x BLOCK_N), as the lesson's tile sweep
    # sets them: a tile index or bound written with the other tile's size is right only while they agree.
    Case("tiles_64x32", dict(B=1, H=2, Hkv=1, Nq=70, Nk=100, d=64, tiles="64x32")),
    Case("tiles_32x64", dict(B=1, H=1, Hkv=1, Nq=70, Nk=100, d=32, tiles="32x64")),
]
TOLERANCES = {"o": F32, "lse": F32}

make_inputs = attention_inputs
call = prefill_call


def reference(inputs, p):
    return prefill_reference(inputs, causal=True)


def diagnose(ctx):
    n_q, n_k = ctx.params["Nq"], ctx.params["Nk"]
    s, v = replays.scores(ctx.inputs)
    visible = R.causal_mask(n_q, n_k)
    yield from replays.empty_row_causes(ctx)
    yield from replays.mask_causes(ctx, s, v)
    yield from replays.prefill_causes(ctx, s, v, visible)
    yield from lanes.partial_l_guard_causes(ctx, s, v, visible)
    yield from weights.observation(weights.prefill_rows(ctx, s, v, visible))
    yield from weights.dominant_column_observation(ctx, s, visible)
