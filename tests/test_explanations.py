"""The shape analysis of attention/weights.py and the contradiction check of engine/consistency.py,
on synthetic outputs: each kind of bug is read back from the output alone, and a message that
contradicts its case is caught."""
import math

import numpy as np

from grader.attention import weights
from grader.engine.consistency import contradictions


def row(o, s, v, next_v=None):
    o_ref = weights.softmax(s) @ v
    return weights.Row("o[0, 0, 0]", o, o_ref, s, v, next_v, None if next_v is None else len(s))


def sample(n=6, d=32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n), rng.standard_normal((n, d))


def test_a_flipped_exponent_is_read_back_as_a_sign():
    s, v = sample()
    w = np.exp(s.max() - s)
    assert weights.row_kind(row(w / w.sum() @ v, s, v))[0] == "sign"


def test_parts_merged_with_different_maxima_are_groups():
    s, v = sample()
    p = np.exp(s - s.max())
    p[3:] *= 2.5                                  # the second half of the keys scaled by another max
    assert weights.row_kind(row(p / p.sum() @ v, s, v)) == ("groups", 2)


def test_a_key_past_the_end_is_named_with_its_index():
    s, v = sample(n=7)
    p = weights.softmax(s)                        # over 7 keys; the row sees 6
    assert weights.row_kind(row(p @ v, s[:6], v[:6], next_v=v[6])) == ("extra_key", 6)


def test_a_wrong_sum_is_a_row_factor_and_columns_split_between_threads_are_groups():
    s, v = sample()
    o = weights.softmax(s) @ v
    assert weights.row_kind(row(0.8 * o, s, v))[0] == "row_factor"
    o2 = o.copy()
    o2[8:16] *= 1.7                               # one thread's columns divided by a partial sum
    assert weights.row_kind(row(o2, s, v))[0] == "column_groups"


def test_the_right_answer_and_unidentifiable_rows_claim_nothing():
    s, v = sample()
    assert weights.row_kind(row(weights.softmax(s) @ v, s, v))[0] == "ok"
    s, v = sample(n=40, d=32)                     # more keys than features: w is not determined
    assert weights.row_kind(row(0.5 * weights.softmax(s) @ v, s, v))[0] in ("row_factor", "unidentifiable")
    assert list(weights.observation([])) == []


def test_contradictions_are_found():
    small = {"lse": np.array([1.0, 2.0])}
    large = {"lse": np.array([120.0, 130.0])}
    p = dict(B=1, H=2, Hkv=2, d=64)
    inputs = {"q": np.zeros((1, 2, 3, 64)), "scale": 1 / math.sqrt(64)}
    assert contradictions("key tiles of 16", p, inputs, small, {"BLOCK_N": 64, "BLOCK_M": 64})
    assert not contradictions("key tiles of 64", p, inputs, small, {"BLOCK_N": 64, "BLOCK_M": 64})
    assert contradictions("this case has large scores", p, inputs, small)
    assert not contradictions("this case has large scores", p, inputs, large)
    assert contradictions("NaN where the answer is finite and the scores are small", p, inputs, large)
    assert contradictions("the error starts where a context spans several splits", p, inputs, small)
    assert not contradictions("spans several splits", dict(p, num_splits=3), inputs, small)
    assert contradictions("batch entry b = 0 of o is right", p, inputs, small)
    assert contradictions("GQA mapping: query head h = 1", p, inputs, small)
    assert contradictions("rows with no visible key give NaN", p, inputs, small)
    assert contradictions("the kernel ignores its scale argument", p, inputs, small)
    assert not contradictions("the kernel ignores its scale argument", p, dict(inputs, scale=0.3), small)


def test_a_whole_output_off_by_one_of_the_cases_constants_names_it():
    """dS scaled twice (blind batch 23) leaves dQ and dK off by the softmax scale: the factor is named
    as the constant it equals, every one where two coincide, and a factor that is none is left bare."""
    from types import SimpleNamespace

    from grader.engine.diagnose import row_factors
    want = np.random.default_rng(0).standard_normal((3, 5, 64))
    ctx = SimpleNamespace(params={"d": 64, "H": 8, "Hkv": 1}, inputs={"scale": 0.125})
    assert "0.125 (the case's softmax scale, 1/√64 here; equally, one over the group size H / Hkv)" in \
        row_factors("dq", want * 0.125, want, ctx)
    eight = row_factors("o", want * 8, want, ctx)
    assert "(one over the case's softmax scale; equally, the group size H / Hkv)" in eight
    assert "1.443 (log2 e)" in row_factors("o", want * math.log2(math.e), want, ctx)
    assert "same factor, 3: the whole" in row_factors("o", want * 3, want, ctx)
