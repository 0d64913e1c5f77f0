"""The block-sparse kit (grader/attention/blocksparse.py): the reference against the direct formula and
plain attention, rows with no key, the pattern helpers, the tile classes, and the launch code's mask
validation."""
import numpy as np
import pytest

from grader.attention import blocksparse as bs
from grader.attention import references as R
from grader.attention.inputs import attention_inputs


def _x(B=1, H=2, Hkv=1, Nq=9, Nk=13, d=8, seed=0):
    return attention_inputs(dict(B=B, H=H, Hkv=Hkv, Nq=Nq, Nk=Nk, d=d), np.random.default_rng(seed))


@pytest.mark.parametrize("block,causal", [((3, 4), False), ((2, 5), True), ((4, 4), False), ((1, 1), True)])
def test_reference_matches_the_direct_formula(block, causal):
    x = _x()
    rng = np.random.default_rng(1)
    mask = (rng.random((1, 2) + bs.mask_shape(9, 13, block)) < 0.6).astype(np.uint8) * 7
    o, lse = bs.attention(x["q"], x["k"], x["v"], x["scale"], mask, block, causal)
    o2, lse2 = bs.attention_direct(x["q"], x["k"], x["v"], x["scale"], mask, block, causal)
    assert np.allclose(o, o2, atol=1e-12) and np.array_equal(np.isneginf(lse), np.isneginf(lse2))
    assert np.allclose(lse[np.isfinite(lse)], lse2[np.isfinite(lse2)], atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_a_full_mask_is_plain_attention(causal):
    x = _x(Nq=20, Nk=11)
    mask = bs.for_heads(bs.full(20, 11, (7, 3)), 1, 2)
    o, lse = bs.attention(x["q"], x["k"], x["v"], x["scale"], mask, (7, 3), causal)
    o2, lse2 = R.attention(x["q"], x["k"], x["v"], x["scale"], causal=causal)
    assert np.allclose(o, o2) and np.array_equal(np.isneginf(lse), np.isneginf(lse2))
    assert np.allclose(lse[np.isfinite(lse)], lse2[np.isfinite(lse2)])


def test_rows_whose_blocks_are_all_masked_give_zero_and_minus_inf():
    x = _x(Nq=12, Nk=10)
    mask = np.ones((1, 2, 3, 2), np.uint8)
    mask[0, 0, 1] = 0                               # query block 1 of head 0: rows 4..7
    mask[0, 1] = 0                                  # all of head 1
    o, lse = bs.attention(x["q"], x["k"], x["v"], x["scale"], mask, (4, 5))
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    assert (o[0, 0, 4:8] == 0).all() and np.isneginf(lse[0, 0, 4:8]).all()
    assert np.isfinite(lse[0, 0, :4]).all() and np.isfinite(lse[0, 0, 8:]).all()
    assert (o[0, 1] == 0).all() and np.isneginf(lse[0, 1]).all()


def test_any_nonzero_byte_means_kept():
    x = _x()
    ones = bs.for_heads(bs.full(9, 13, (4, 4)), 1, 2)
    o1, _ = bs.attention(x["q"], x["k"], x["v"], x["scale"], ones, (4, 4))
    o2, _ = bs.attention(x["q"], x["k"], x["v"], x["scale"], ones * 200, (4, 4))
    assert np.array_equal(o1, o2)


def test_expand_follows_the_blocks():
    m = np.array([[1, 0], [0, 1]], np.uint8)
    e = bs.expand(m, (2, 3), 3, 5)
    assert e.shape == (3, 5)
    assert e[:2, :3].all() and not e[:2, 3:].any() and not e[2, :3].any() and e[2, 3:].all()


def test_pattern_shapes_and_contents():
    n_q, n_k, blk = 300, 500, (64, 100)
    shape = (5, 5)
    for m in (bs.full(n_q, n_k, blk), bs.local_window(n_q, n_k, blk, 50), bs.causal_blocks(n_q, n_k, blk),
              bs.global_tokens(n_q, n_k, blk, 10), bs.strided(n_q, n_k, blk, 2),
              bs.random_blocks(n_q, n_k, blk, 0.3, np.random.default_rng(0))):
        assert m.shape == shape and m.dtype == bool
    # causal blocks: exactly the blocks the causal mask touches
    touched = R.causal_mask(n_q, n_k)
    want = np.zeros(shape, bool)
    for i, j in zip(*np.nonzero(touched)):
        want[i // blk[0], j // blk[1]] = True
    assert np.array_equal(bs.causal_blocks(n_q, n_k, blk), want)
    # local window: the blocks holding a (query position, key) pair within the window
    w = 50
    pos = np.arange(n_q)[:, None] + (n_k - n_q)
    near = np.abs(np.arange(n_k)[None, :] - pos) <= w
    want = np.zeros(shape, bool)
    for i, j in zip(*np.nonzero(near)):
        want[i // blk[0], j // blk[1]] = True
    assert np.array_equal(bs.local_window(n_q, n_k, blk, w), want)
    g = bs.global_tokens(n_q, n_k, blk, 10)
    assert g[:, 0].all() and g[0, :].all() and not g[1:, 1:].any()
    assert np.array_equal(bs.strided(n_q, n_k, blk, 2)[0], [False, True, False, True, False])
    assert 0.1 < bs.density(bs.random_blocks(4096, 4096, (64, 64), 0.3, np.random.default_rng(0))) < 0.5
    fh = bs.for_heads(bs.local_window(n_q, n_k, blk, 50), 2, 3)
    assert fh.shape == (2, 3) + shape and fh.dtype == np.uint8 and fh.flags.c_contiguous


def test_case_masks_have_the_promised_shape():
    rng = np.random.default_rng(0)
    for pattern in bs.PATTERNS:
        p = dict(B=2, H=3, Hkv=1, Nq=150, Nk=70, d=32, pattern=pattern, mb_m=48, mb_n=32, density=0.5)
        m = bs.block_mask_for(p, rng)
        assert m.shape == (2, 3, 4, 3) and m.dtype == np.uint8
    single = bs.block_mask_for(dict(p, pattern="single"), rng)
    assert ((single != 0).sum(axis=-1) == 1).all()
    empty = bs.block_mask_for(dict(p, pattern="empty_rows"), rng)
    assert not empty[:, :, 1::3].any() and not empty[1, 2].any()


def test_tile_classes():
    n, blk = 256, (64, 64)
    m = np.eye(4, dtype=bool)
    cls = bs.tile_classes(m, blk, n, n, (64, 64))
    assert np.array_equal(cls, np.eye(4, dtype=int) * bs.FULL)
    # blocks of 32 under tiles of 64: a tile holding one kept block of four is partial
    m32 = np.zeros((8, 8), bool)
    m32[0, 0] = True
    cls = bs.tile_classes(m32, (32, 32), n, n, (64, 64))
    assert cls[0, 0] == bs.PER_ELEMENT and (cls.sum() == bs.PER_ELEMENT)
    # causal: the diagonal tiles take the per-element test, the tiles above it are skipped
    cls = bs.tile_classes(bs.full(n, n, blk), blk, n, n, (64, 64), causal=True)
    assert (np.diag(cls) == bs.PER_ELEMENT).all() and (cls[np.triu_indices(4, 1)] == bs.SKIPPED).all()
    assert (cls[np.tril_indices(4, -1)] == bs.FULL).all()


def test_launch_code_validates_the_mask():
    from grader.course import load
    from grader.runtimes import get_runtime
    sol = load("08_block_sparse")
    rt = get_runtime("cpu")
    x = _x(Nq=100, Nk=130, d=32)
    good = bs.for_heads(bs.full(100, 130, (64, 64)), 1, 2)
    with pytest.raises(ValueError, match="uint8"):
        sol.block_sparse(rt, x["q"], x["k"], x["v"], x["scale"], good.astype(np.int32), (64, 64))
    with pytest.raises(ValueError, match=r"ceil\(Nq / rows\)"):
        sol.block_sparse(rt, x["q"], x["k"], x["v"], x["scale"], good, (32, 64))
    with pytest.raises(ValueError, match="positive"):
        sol.block_sparse(rt, x["q"], x["k"], x["v"], x["scale"], good, (0, 64))
