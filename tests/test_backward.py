"""Module 09's kit: the float64 reference gradients against finite differences of the forward, the
replayed bugs the grader names, and the tolerance on gradients that cancel."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from grader.attention import backward
from grader.attention import references as R
from grader.spec import F32
from markers import verdict


def inputs(**p):
    p = dict(dict(B=1, H=4, Hkv=2, Nq=7, Nk=11, d=8), **p)
    return backward.backward_inputs(p, np.random.default_rng(5))


def loss(x, q, k, v):
    """L = sum(dO ∘ O): its gradient with respect to O is dO."""
    o, _ = R.attention(q, k, v, x["scale"], causal=x["causal"])
    return float((np.asarray(x["do"], np.float64) * o).sum())


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [dict(), dict(Nq=11, Nk=5), dict(H=2, Hkv=2, logit=20.0)])
def test_the_reference_gradients_are_central_finite_differences_of_the_forward(causal, shape):
    x = inputs(causal=causal, **shape)
    grads = backward.reference(x)
    rng = np.random.default_rng(0)
    base = {n: np.asarray(x[n], np.float64) for n in ("q", "k", "v")}
    eps = 1e-6
    for name, grad in (("q", "dq"), ("k", "dk"), ("v", "dv")):
        for _ in range(6):
            idx = tuple(int(rng.integers(0, s)) for s in base[name].shape)
            plus, minus = {n: a.copy() for n, a in base.items()}, {n: a.copy() for n, a in base.items()}
            plus[name][idx] += eps
            minus[name][idx] -= eps
            fd = (loss(x, plus["q"], plus["k"], plus["v"]) - loss(x, minus["q"], minus["k"], minus["v"])) / (2 * eps)
            assert grads[grad][idx] == pytest.approx(fd, rel=1e-5, abs=1e-7), (name, idx)


def test_the_kernel_structure_recomputed_from_lse_and_o_gives_the_reference():
    """What a kernel computes (P from the saved lse, D from the saved O) equals the exact gradients up
    to the float32 rounding of o and lse."""
    x = inputs(causal=True, Nq=9, Nk=6)
    lse_col = lambda lse: np.where(np.isfinite(lse), lse, np.inf)[:, None]   # noqa: E731
    kernel_like = backward.gradients(x, probs=backward._exp_with(lambda s, lse: lse_col(lse)))
    for name, want in backward.reference(x).items():
        np.testing.assert_allclose(kernel_like[backward.OUTPUTS.index(name)], want, atol=1e-5)


def ctx_for(x, dq, dk, dv):
    ref = backward.reference(x)
    out = {"dq": dq, "dk": dk, "dv": dv}
    tol = backward.tolerances(x, ref, F32)
    cmp = {n: SimpleNamespace(passed=backward._distance(out[n], ref[n], ref[n]) <= tol[n].rel) for n in ref}
    return SimpleNamespace(params={}, inputs=x, ref=ref, out=out, cmp=cmp, config={"BLOCK_N": 64}, noise=0.0)


@pytest.mark.parametrize("bug, cid", [
    (dict(delta=lambda p, dp, do, o, b, h: np.zeros(p.shape[0])), "D:missing"),
    (dict(delta=lambda p, dp, do, o, b, h: dp.sum(axis=-1)), "D:plain_rowsum"),
    (dict(probs=backward._exp_with(lambda s, lse: 0.0 * s)), "P:no_lse"),
    (dict(heads=lambda g, n: [g * n]), "gqa:not_summed"),
    (dict(dq_scale=2.0), None),                                   # not a replay: observed, dQ alone
])
def test_replayed_bugs_are_named(bug, cid):
    x = inputs(causal=True)
    dq, dk, dv = backward.gradients(x, **bug)
    ids, text = verdict(backward.diagnose(ctx_for(x, dq, dk, dv)))
    if cid:
        assert ids[:1] == [cid], text
    else:
        assert ids == [] and "dK and dV are right; dQ is wrong" in text, text


def test_the_right_gradients_name_nothing_and_pass_their_tolerance():
    x = inputs(causal=True)
    ref = backward.reference(x)
    assert verdict(backward.diagnose(ctx_for(x, ref["dq"], ref["dk"], ref["dv"]))) == ([], "")


def test_the_tolerance_widens_only_where_a_gradient_cancels():
    one_key = inputs(Nq=1, Nk=1, H=1, Hkv=1, d=32)
    ref = backward.reference(one_key)
    assert np.abs(ref["dq"]).max() < 1e-12                      # dS = P (dP - D) = 0 with one key
    tol = backward.tolerances(one_key, ref, F32)
    assert tol["dq"].rel > 10 * F32.rel and tol["dv"].rel == F32.rel
    many = inputs(Nq=40, Nk=50, H=2, Hkv=2, d=32)
    tol = backward.tolerances(many, backward.reference(many), F32)
    assert all(t.rel < 2 * F32.rel for t in tol.values())


def test_a_reduction_of_d_that_misses_lanes_is_named():
    x = inputs(d=64, causal=True)
    part = (np.arange(64) % 32) < 8
    dq, dk, dv = backward.gradients(x, delta=lambda p, dp, do, o, b, h: (do * o)[:, part].sum(axis=-1))
    ids, text = verdict(backward.diagnose(ctx_for(x, dq, dk, dv)))
    assert ids == ["D:partial_lanes"] and "lanes 0 .. 7" in text, text
