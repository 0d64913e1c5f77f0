"""Module 07's kit: the packed batch, its reference, the launcher's refusals and the packing replays."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from grader.attention import references as R
from grader.attention import varlen
from grader.errors import GraderError
from grader.tasks.varlen_prefill import checks
from markers import verdict


def batch(**p):
    p = {k: v for k, v in dict(dict(B=4, H=4, Hkv=2, d=32, lens="9/0/1/30", lens_k="20/3/1/30"), **p).items()
         if v is not None}
    return p, varlen.varlen_inputs(p, np.random.default_rng(3))


def test_cu_seqlens_are_the_running_sum_with_a_zero_in_front():
    np.testing.assert_array_equal(varlen.cu_seqlens([3, 0, 5]), [0, 3, 3, 8])
    assert varlen.cu_seqlens([3, 0, 5]).dtype == np.int32
    assert varlen.lengths(dict(B=5, lens="1/2")) == [1, 2, 1, 2, 1]
    assert varlen.lengths(dict(B=2, lens="1/2", lens_k="7"), "lens_k") == [7, 7]


@pytest.mark.parametrize("causal", [False, True])
def test_the_reference_is_each_sequence_on_its_own(causal):
    p, x = batch(causal=causal)
    ref = varlen.reference(x)
    assert ref["o"].shape == x["q"].shape and ref["lse"].shape == (4, x["q"].shape[0])
    for b, (qb, nq, kb, nk) in enumerate(varlen.spans(x)):
        seq = varlen.sequence(x, b)
        o, lse = R.attention(seq["q"], seq["k"], seq["v"], x["scale"], causal=causal)
        np.testing.assert_allclose(ref["o"][qb:qb + nq], o[0].transpose(1, 0, 2), atol=1e-12)
        np.testing.assert_array_equal(np.isinf(ref["lse"][:, qb:qb + nq]), np.isinf(lse[0]))


def test_the_padded_copy_holds_the_same_attention_in_its_real_rows():
    p, x = batch(lens="9/1/30", lens_k=None, B=3, causal=True, padded_copy=True)
    ref = varlen.reference(x)
    o, _ = R.attention(x["q_padded"], x["k_padded"], x["v_padded"], x["scale"], causal=True)
    for b, (qb, nq, _, _) in enumerate(varlen.spans(x)):
        np.testing.assert_allclose(o[b, :, :nq].transpose(1, 0, 2), ref["o"][qb:qb + nq], atol=1e-12)


def ctx_for(p, x, o, lse):
    ref = varlen.reference(x)
    out = {"o": o, "lse": lse}
    cmp = {k: SimpleNamespace(passed=varlen.replays.rel(out[k], ref[k]) < 1e-5) for k in ref}
    return SimpleNamespace(exercise=None, params=p, inputs=x, ref=ref, out=out, cmp=cmp, config={}, noise=0.0)


def test_keys_read_past_the_sequence_end_are_named_as_crossing_into_the_next_sequence():
    p, x = batch()
    sp = varlen.spans(x)
    o, lse = varlen.attend(x, keys=lambda b: (sp[b][2], min(int(x["max_seqlen_k"]), x["k"].shape[0] - sp[b][2])))
    ids, text = verdict(varlen.diagnose(ctx_for(p, x, o, lse)))
    assert ids == ["varlen:keys_past_end"] and "next sequence" in text and "max_seqlen_k" in text


def test_keys_at_the_query_offsets_and_lse_token_major_are_named():
    p, x = batch(lens="9/4/1/30", lens_k="20/3/1/30")
    sp = varlen.spans(x)
    o, lse = varlen.attend(x, keys=lambda b: (sp[b][0], sp[b][3]))
    ids, text = verdict(varlen.diagnose(ctx_for(p, x, o, lse)))
    assert ids == ["varlen:key_offsets"] and "cu_seqlens_q" in text
    ref = varlen.reference(x)
    wrong_lse = np.ascontiguousarray(ref["lse"].T).reshape(ref["lse"].shape)
    ids, text = verdict(varlen.diagnose(ctx_for(p, x, ref["o"], wrong_lse)))
    assert ids == ["varlen:lse_layout"] and "token-major" in text


def test_the_wrong_sequences_are_replayed_as_batches_of_one_and_the_right_ones_contradict():
    p, x = batch(causal=True)
    ref = varlen.reference(x)
    ids, text = verdict(varlen.diagnose(ctx_for(p, x, ref["o"], ref["lse"] / np.log(2.0))))
    assert ids == ["lse:log2"] and "each read as a batch of one" in text, text
    # The same bug in one sequence only: the right ones, replayed, would be wrong too, so it is no cause.
    qb, nq, _, _ = varlen.spans(x)[3]
    lse = ref["lse"].copy()
    lse[:, qb:qb + nq] /= np.log(2.0)
    ids, text = verdict(varlen.diagnose(ctx_for(p, x, ref["o"], lse)))
    assert ids == [] and "sequence 3 (n_q = 30, n_k = 30) is wrong and sequences 0, 2 are right" in text


def test_a_right_answer_names_nothing():
    p, x = batch(causal=True)
    ref = varlen.reference(x)
    assert verdict(varlen.diagnose(ctx_for(p, x, ref["o"], ref["lse"]))) == ([], "")


def test_broken_offsets_must_be_refused_before_any_launch(rt):
    from grader.course import load
    sol = load("07_varlen_prefill")
    for case in (c for c in checks.CASES if c.params.get("bad")):
        x = checks.make_inputs(case.params, np.random.default_rng(0))
        assert checks.call(sol.varlen_prefill, rt, dict(x), case.params) == {"refused": np.ones(1, np.float32)}

    def no_checks(rt_, q, k, v, cu_q, cu_k, max_q, max_k, scale, causal=False):   # launches anyway
        saved = sol.check_cu_seqlens
        sol.check_cu_seqlens = lambda *a: None
        try:
            return sol.varlen_prefill(rt_, q, k, v, cu_q, cu_k, max_q, max_k, scale, causal)
        finally:
            sol.check_cu_seqlens = saved

    case = next(c for c in checks.CASES if c.params.get("bad") == "max_seqlen")
    x = checks.make_inputs(case.params, np.random.default_rng(0))
    with pytest.raises(GraderError, match="accepted broken offsets.*launched the kernel"):
        checks.call(no_checks, rt, dict(x), case.params)

    def late_refusal(rt_, *args, causal=False):                              # refuses after launching
        sol.varlen_prefill(rt_, *checks._args(varlen.varlen_inputs(dict(B=1, H=1, Hkv=1, d=32, lens="3"),
                                                                   np.random.default_rng(1))))
        raise ValueError("cu_seqlens_k is wrong")
    with pytest.raises(GraderError, match="only after launching a kernel"):
        checks.call(late_refusal, rt, dict(x), case.params)
