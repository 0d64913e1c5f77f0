"""Checks for 13_decode_tensor_cores: paged decode of 1 to 8 new tokens per sequence, in float16 and
bfloat16, GQA groups of 1 to 16 (grader/attention/decode_tokens.py holds the inputs, the tolerance
rule of module 06 and the replays)."""
from ...attention.calls import split_option
from ...attention.decode_tokens import diagnose, make_inputs, reference, tolerances, widen  # noqa: F401
from ...spec import Case, Tolerance

C = Case
_ = dict(B=2, T=1, H=4, Hkv=2, d=64, page_size=16, dtype="float16")
CASES = [
    C("contexts_0_1_2_17", dict(_, B=4, H=2, lens="0/1/2/17")),
    C("gqa_16_page_size_32", dict(_, H=16, Hkv=1, lens="70/33", page_size=32)),
    C("gqa_4_page_size_1", dict(_, H=8, lens="37/10", page_size=1, dtype="bfloat16")),
    C("gqa_8_d128", dict(_, H=8, Hkv=1, d=128, lens="97/64", dtype="bfloat16")),
    # Token t sees the keys j <= context - T + t; contexts shorter than T leave the first tokens no key.
    C("tokens_8_causal", dict(_, B=3, T=8, lens="40/5/0", dtype="bfloat16")),
    C("tokens_3_context_1", dict(_, T=3, Hkv=4, lens="1/2")),
    C("tokens_4_gqa_8_two_row_tiles", dict(_, T=4, H=8, Hkv=1, d=128, lens="50/17", dtype="bfloat16")),
    C("tokens_8_gqa_16_row_blocks", dict(_, B=1, T=8, H=16, Hkv=1, lens="33")),
    # 40 rows per group (G = 8, T = 5): two row blocks, the second with 8 rows and 24 of padding, whose
    # out index would be the next sequence's tokens (past o for the last one).
    C("tokens_5_gqa_8_partial_row_block", dict(_, B=2, T=5, H=8, Hkv=1, lens="45/70")),
    # More stages than the ring holds: every stage is refilled.
    C("ring_wraps", dict(_, B=1, T=2, H=8, lens="700", num_splits=1, dtype="bfloat16")),
    C("splits_past_short_context", dict(_, T=4, H=8, lens="300/45", num_splits=8)),
    # 40 splits of 10 keys, key 395 (the last page) scoring about +150 over the rest.
    C("late_page_dominates", dict(_, lens="400/37", num_splits=40, hot_key=395, hot=150.0, dtype="bfloat16")),
    # 40 splits of 10 keys with ordinary scores: every split weighs in the combine, past the 8 warps'
    # first shares and the 32 lanes' first (late_page_dominates's one hot split hides the others).
    C("splits_40_each_weighs", dict(_, lens="400/37", num_splits=40)),
    # Key 2 scoring about +150 over the rest, then 400 more keys in the same split: every later stage's max
    # lies far below the running max.
    C("early_key_dominates", dict(_, lens="400/37", num_splits=1, hot_key=2, hot=150.0, dtype="bfloat16")),
    # Key 375 scoring about +150 over the rest, late in one split: the warps' merge must scale by the
    # block's max, not the first warp's (exp(> 88) = inf).
    C("late_key_dominates", dict(_, lens="400/37", num_splits=1, hot_key=375, hot=150.0, dtype="bfloat16")),
    C("large_logits", dict(_, T=2, lens="120/9", logit=50.0, num_splits=3, dtype="bfloat16")),
    C("scores_far_below_zero", dict(_, lens="150/7", shift=-150.0, num_splits=4)),
    C("custom_scale", dict(_, T=2, H=6, lens="97/53", scale=0.3, d=128)),
]
# The tolerance of a case is computed from its inputs (tolerances); these are the loosest ones a
# float16 case can get, stated for the tools that list a module's tolerances.
TOLERANCES = {"o": Tolerance(rel=2e-3, abs=2e-2), "lse": Tolerance(rel=2e-5, abs=2e-4)}
SHRINK_KEYS = ("B", "T", "H", "Hkv")


def valid(p) -> bool:
    return p["d"] in (64, 128) and p["H"] % p["Hkv"] == 0 and p["H"] // p["Hkv"] <= 16 and 1 <= p["T"] <= 8


def call(fn, rt, inputs, p):
    dtype = p["dtype"] if p["dtype"] == "bfloat16" else None    # float16 is read from the arrays
    o, lse = fn(rt, inputs["q"], inputs["k_pages"], inputs["v_pages"], inputs["block_table"],
                inputs["context_lens"], inputs["scale"], dtype=dtype, **split_option(p))
    return {"o": o, "lse": lse}
