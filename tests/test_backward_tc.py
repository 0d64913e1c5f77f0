"""Module 11's kit (grader/attention/backward_lowp.py) and one training step end to end: module 06's
forward, then module 11's backward, against the float64 gradients always and against PyTorch's
autograd where PyTorch is installed; on the CPU emulator, and on a GPU where one is visible."""
from __future__ import annotations

import numpy as np
import pytest

from grader.attention import backward, backward_lowp, lowp
from grader.attention.fragments import pieces_transposed
from grader.attention import references as R
from grader.course import load

DTYPES = ("float16", "bfloat16")


def inputs(dtype="float16", seed=5, **p):
    p = dict(dict(B=1, H=4, Hkv=2, Nq=7, Nk=11, d=16, dtype=dtype, causal=False), **p)
    return backward_lowp.backward_lowp_inputs(p, np.random.default_rng(seed))


def loss(x, q, k, v):
    """L = sum(dO ∘ O): its gradient with respect to O is dO."""
    o, _ = R.attention(q, k, v, x["scale"], causal=x["causal"])
    return float((np.asarray(x["do"], np.float64) * o).sum())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_the_reference_is_central_finite_differences_of_the_forward_on_the_rounded_inputs(dtype, causal):
    """Module 09's test of its reference, on the values a 16-bit case holds: the inputs' rounding is
    the inputs', not an error of the gradients."""
    x = backward_lowp.decoded(inputs(dtype, causal=causal, Nq=11, Nk=5 if causal else 11), dtype)
    grads = backward_lowp.reference(inputs(dtype, causal=causal, Nq=11, Nk=5 if causal else 11), dtype)
    rng = np.random.default_rng(0)
    base = {n: np.asarray(x[n], np.float64) for n in ("q", "k", "v")}
    eps = 1e-6
    for name, grad in (("q", "dq"), ("k", "dk"), ("v", "dv")):
        for _ in range(4):
            idx = tuple(int(rng.integers(0, s)) for s in base[name].shape)
            plus, minus = {n: a.copy() for n, a in base.items()}, {n: a.copy() for n, a in base.items()}
            plus[name][idx] += eps
            minus[name][idx] -= eps
            fd = (loss(x, plus["q"], plus["k"], plus["v"]) - loss(x, minus["q"], minus["k"], minus["v"])) / (2 * eps)
            assert grads[grad][idx] == pytest.approx(fd, rel=1e-5, abs=1e-7), (name, idx)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_same_precision_gradients_err_by_rounding_and_earn_a_tolerance_above_it(dtype):
    x = inputs(dtype, Nq=40, Nk=70, d=64, causal=True)
    ref = backward_lowp.reference(x, dtype)
    sp = backward_lowp.same_precision_gradients(x, dtype)
    tol = backward_lowp.tolerances(x, dtype, ref)
    for name in backward_lowp.OUTPUTS:
        err = lowp.rel_error(sp[name], ref[name])
        assert lowp.EPS[dtype] / 8 < err < lowp.EPS[dtype], (name, err)       # rounding, not a bug
        assert err < tol[name].rel < 4 * err + lowp.EPS[dtype] / 8, (name, tol[name])


def test_a_gradient_that_cancels_is_held_to_float32_noise_of_its_terms():
    """One key per row: dS = 0 exactly, so dQ and dK are 0; the bound is float32 noise of the terms
    dP and D (CANCELLATION of their size), not 3 times a reference error that may be exactly 0."""
    x = inputs("float16", Nq=1, Nk=1, d=64, H=1, Hkv=1)
    ref = backward_lowp.reference(x, "float16")
    tol = backward_lowp.tolerances(x, "float16", ref)
    assert np.abs(ref["dq"]).max() < 1e-12
    mags = backward.magnitudes(backward_lowp.decoded(x, "float16"))
    assert tol["dq"].abs == pytest.approx(max(tol["dq"].abs, backward_lowp.CANCELLATION * mags["dq"].max()))
    assert tol["dq"].abs < 1e-3 and tol["dq"].rel < 1e-2


def test_pieces_transposed_transposes_each_8_by_8_piece_in_place():
    x = np.arange(2 * 16 * 24, dtype=np.float64).reshape(2, 16, 24)
    t = pieces_transposed(x)
    np.testing.assert_array_equal(t[1, 8:16, 16:24], x[1, 8:16, 16:24].T)
    np.testing.assert_array_equal(pieces_transposed(t), x)
    ragged = pieces_transposed(x[:, :13, :])          # rows from 13 on pad with zeros
    assert ragged.shape == (2, 13, 24) and ragged[0, 0, 12] == x[0, 4, 8] and ragged[0, 8, 13] == 0.0


# ---- one training step ----------------------------------------------------------------------------

def runtime(backend):
    from grader.runtimes import get_runtime
    return get_runtime(backend)


def check_training_step(rt, x, dtype, forward, backward):
    """One training step on `rt`: forward(rt, q, k, v, scale, causal=, dtype=) -> (o, lse), then
    backward(rt, q, k, v, o, lse, do, scale, causal=, dtype=) -> (dq, dk, dv), from the inputs x
    (backward_lowp_inputs). Each gradient passes the grader's rule with the forward's o and lse in the
    same-precision reference, against the float64 gradients; and, with PyTorch, lies as close to
    torch.autograd's float32 gradients."""
    causal = x["causal"]
    dev = {n: rt.asarray(x[n]) for n in ("q", "k", "v", "do")}
    kw = dict(causal=causal, dtype=dtype if dtype == "bfloat16" else None)
    o, lse = forward(rt, dev["q"], dev["k"], dev["v"], x["scale"], **kw)
    grads = backward(rt, dev["q"], dev["k"], dev["v"], o, lse, dev["do"], x["scale"], **kw)
    got = {n: lowp.decode(rt.to_numpy(g), dtype).astype(np.float64) for n, g in zip(backward_lowp.OUTPUTS, grads)}
    step = dict(x, o=rt.to_numpy(o), lse=rt.to_numpy(lse))          # the forward kernel's o and lse
    ref = backward_lowp.reference(step, dtype)                         # float64, independent of o and lse
    tol = backward_lowp.tolerances(step, dtype, ref)
    for name in backward_lowp.OUTPUTS:
        assert lowp.rel_error(got[name], ref[name]) <= tol[name].rel, name
        assert np.abs(got[name] - ref[name]).max() <= tol[name].abs, name
    try:
        import torch
    except ImportError:
        return
    n_q, n_k = np.shape(x["q"])[2], np.shape(x["k"])[2]
    values = backward_lowp.decoded(x, dtype)
    q, k, v = (torch.tensor(values[n], dtype=torch.float32, requires_grad=True) for n in ("q", "k", "v"))
    mask = torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q) if causal else None   # bottom-right
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=x["scale"], enable_gqa=True)
    out.backward(torch.tensor(values["do"], dtype=torch.float32))
    for name, t in zip(backward_lowp.OUTPUTS, (q, k, v)):
        auto = t.grad.double().numpy()
        assert lowp.rel_error(auto, ref[name]) < 1e-5, name                # autograd is the float64 answer
        assert lowp.rel_error(got[name], auto) <= tol[name].rel + 1e-5, name


@pytest.mark.parametrize("backend", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype, d", [("float16", 64), ("bfloat16", 128)])
def test_one_training_step_forward_of_06_then_backward_of_11(backend, dtype, d):
    """q, k, v, dO in 16 bits; module 06 computes o and lse, module 11 the gradients from them
    (check_training_step says against what)."""
    x = inputs(dtype, seed=11, B=1, H=4, Hkv=2, Nq=40, Nk=70, d=d, causal=True)
    check_training_step(runtime(backend), x, dtype, load("06_flash_tensor_cores").flash_tc,
                        load("11_backward_tensor_cores").flash_backward_tc)
