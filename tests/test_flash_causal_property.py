"""Causality as a property of the 03 solution, on the CPU runtime: changing a future key or value
leaves every earlier output bit-identical (not merely close: a masked key must contribute exactly 0,
and must not move the running max)."""
import numpy as np
import pytest

from grader.attention import references as R
from grader.course import load
from grader.runtimes import get_runtime

SHAPES = [  # (Nq, Nk, d): square, chunked prefill, more queries than keys, tile edges
    (70, 70, 32),
    (20, 90, 64),
    (80, 30, 32),
    (65, 129, 32),
]


@pytest.fixture(scope="module")
def causal():
    return load("03_flash_causal").flash_causal


@pytest.fixture(scope="module")
def rt():
    return get_runtime("cpu")


def run(fn, rt, q, k, v, scale):
    o, lse = fn(rt, rt.asarray(q), rt.asarray(k), rt.asarray(v), scale)
    return rt.to_numpy(o).copy(), rt.to_numpy(lse).copy()


@pytest.mark.parametrize("n_q,n_k,d", SHAPES)
def test_future_keys_do_not_change_earlier_outputs(causal, rt, n_q, n_k, d):
    rng = np.random.default_rng(n_q * 1000 + n_k)
    B, H, Hkv = 1, 2, 1
    q = rng.standard_normal((B, H, n_q, d)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, n_k, d)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, n_k, d)).astype(np.float32)
    scale = 1.0 / np.sqrt(d)
    o, lse = run(causal, rt, q, k, v, scale)
    want_o, want_lse = R.attention(q, k, v, scale, causal=True)
    assert np.allclose(o, want_o, atol=1e-4) and np.allclose(lse, want_lse, atol=1e-4)

    offset = n_k - n_q
    for j in sorted({n_k - 1, n_k // 2, max(offset, 0), min(n_k - 1, offset + n_q // 3)}):
        # Key j is visible to rows i >= j - offset only: every row before that must not change.
        k2, v2 = k.copy(), v.copy()
        k2[..., j, :] = rng.standard_normal(d) * 10      # a huge score would move an unmasked max
        v2[..., j, :] = rng.standard_normal(d) * 100
        o2, lse2 = run(causal, rt, q, k2, v2, scale)
        earlier = max(0, min(n_q, j - offset))
        assert np.array_equal(o2[..., :earlier, :], o[..., :earlier, :]), f"key {j} changed an earlier output"
        assert np.array_equal(lse2[..., :earlier], lse[..., :earlier]), f"key {j} changed an earlier lse"
        if earlier < n_q:                                  # and the rows that do see it do change
            assert not np.array_equal(o2[..., earlier:, :], o[..., earlier:, :])


def test_rows_without_keys_are_zero_not_nan(causal, rt):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 1, 100, 32)).astype(np.float32)
    k = rng.standard_normal((1, 1, 10, 32)).astype(np.float32)
    v = rng.standard_normal((1, 1, 10, 32)).astype(np.float32)
    o, lse = run(causal, rt, q, k, v, 1 / np.sqrt(32))
    assert np.all(o[..., :90, :] == 0) and np.all(lse[..., :90] == -np.inf)
    assert np.isfinite(o).all() and np.isfinite(lse[..., 90:]).all()
