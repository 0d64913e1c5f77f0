"""The references are the ground truth of every check, so they are tested against the direct formula
and against each other."""
import numpy as np
import pytest

from grader.attention import references as R


def rand(rng, *shape):
    return rng.standard_normal(shape)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,d", [(1, 1, 1, 1, 1, 4), (2, 4, 2, 5, 7, 8), (1, 6, 3, 7, 4, 4),
                                            (1, 2, 1, 3, 3, 2)])
def test_attention_matches_direct_formula(B, H, Hkv, Nq, Nk, d, causal):
    rng = np.random.default_rng(0)
    q, k, v = rand(rng, B, H, Nq, d), rand(rng, B, Hkv, Nk, d), rand(rng, B, Hkv, Nk, d)
    o, lse = R.attention(q, k, v, causal=causal)
    o2, lse2 = R.attention_direct(q, k, v, causal=causal)
    np.testing.assert_allclose(o, o2, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.isinf(lse), np.isinf(lse2))
    fin = np.isfinite(lse2)
    np.testing.assert_allclose(lse[fin], lse2[fin], rtol=1e-12)


def test_gqa_every_query_head_reads_its_own_group():
    # The seed's CPU reference filled only the first head of each group; this catches that.
    rng = np.random.default_rng(1)
    q, k, v = rand(rng, 1, 8, 3, 4), rand(rng, 1, 2, 5, 4), rand(rng, 1, 2, 5, 4)
    o, _ = R.attention(q, k, v)
    for h in range(8):
        g = h // 4
        o_h, _ = R.attention(q[:, h:h + 1], k[:, g:g + 1], v[:, g:g + 1])
        np.testing.assert_allclose(o[:, h], o_h[:, 0], rtol=1e-13)
    assert R.kv_head_of(5, 8, 2) == 1 and R.kv_head_of(3, 8, 2) == 0
    with pytest.raises(ValueError):
        R.kv_head_of(0, 6, 4)


def test_causal_is_bottom_right_aligned_and_empty_rows_are_zero_with_minus_inf_lse():
    m = R.causal_mask(2, 4)   # chunked prefill: the last query sees every key
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]
    rng = np.random.default_rng(2)
    q, k, v = rand(rng, 1, 1, 5, 3), rand(rng, 1, 1, 2, 3), rand(rng, 1, 1, 2, 3)
    o, lse = R.attention(q, k, v, causal=True)       # Nq > Nk: the first 3 rows see nothing
    assert np.all(o[0, 0, :3] == 0) and np.all(np.isneginf(lse[0, 0, :3]))
    assert np.all(np.isfinite(lse[0, 0, 3:])) and not np.isnan(o).any()
    # with Nq == Nk it is the usual lower triangle (PyTorch's is_causal agrees there)
    assert np.array_equal(R.causal_mask(4, 4), np.tril(np.ones((4, 4), dtype=bool)))


def test_large_logits_do_not_overflow():
    q = np.full((1, 1, 2, 4), 20.0)
    k = np.full((1, 1, 3, 4), 10.0)
    v = np.arange(12.0).reshape(1, 1, 3, 4)
    o, lse = R.attention(q, k, v, scale=1.0)
    np.testing.assert_allclose(o[0, 0, 0], v[0, 0].mean(axis=0))
    np.testing.assert_allclose(lse[0, 0, 0], 800 + np.log(3))


def test_online_softmax_state_equals_one_pass_for_any_chunk():
    rng = np.random.default_rng(3)
    x = 30 * rand(rng, 4, 37)
    m, l = R.softmax_state(x)
    for chunk in (1, 5, 32, 37, 100):
        m2, l2 = R.online_softmax_state(x, chunk)
        np.testing.assert_array_equal(m, m2)
        np.testing.assert_allclose(l, l2, rtol=1e-13)
    y, lse = R.softmax(x)
    np.testing.assert_allclose(lse, m + np.log(l), rtol=1e-14)
    np.testing.assert_allclose(y.sum(axis=-1), 1.0)


def test_merge_states_identity_and_symmetry():
    empty_m, empty_l = R.softmax_state(np.zeros((1, 0)))
    m, l = R.softmax_state(np.array([[1.0, 2.0, 3.0]]))
    assert R.merge_states(m, l, empty_m, empty_l) == (m, l)
    mm, ll = R.merge_states(empty_m, empty_l, empty_m, empty_l)
    assert np.isneginf(mm).all() and (ll == 0).all()
    a = R.softmax_state(np.array([[5.0, -1.0]]))
    b = R.softmax_state(np.array([[50.0]]))
    ab, ba = R.merge_states(*a, *b), R.merge_states(*b, *a)
    np.testing.assert_allclose(ab, ba)
    np.testing.assert_allclose(ab, R.softmax_state(np.array([[5.0, -1.0, 50.0]])))


def _decode_inputs(rng, B=3, H=4, Hkv=2, L=33, d=8, lens=(0, 1, 33)):
    return (rand(rng, B, H, d), rand(rng, B, Hkv, L, d), rand(rng, B, Hkv, L, d),
            np.array(lens, dtype=np.int32))


def test_decode_matches_prefill_reference_per_sequence():
    rng = np.random.default_rng(4)
    q, kc, vc, lens = _decode_inputs(rng)
    o, lse = R.decode_attention(q, kc, vc, lens)
    assert np.all(o[0] == 0) and np.isneginf(lse[0]).all()          # empty context
    np.testing.assert_allclose(o[1], np.repeat(vc[1, :, 0], 2, axis=0))  # one key: o = v
    o2, lse2 = R.attention(q[2][None, :, None], kc[2][None], vc[2][None])
    np.testing.assert_allclose(o[2], o2[0, :, 0], rtol=1e-13)
    np.testing.assert_allclose(lse[2], lse2[0, :, 0], rtol=1e-13)


@pytest.mark.parametrize("chunk", [1, 4, 16, 33, 64])
def test_split_kv_combined_equals_unsplit(chunk):
    rng = np.random.default_rng(5)
    q, kc, vc, lens = _decode_inputs(rng)
    o, lse = R.decode_attention(q, kc, vc, lens)
    o_part, lse_part = R.decode_partials(q, kc, vc, lens, chunk)
    o2, lse2 = R.combine_partials(o_part, lse_part)
    np.testing.assert_allclose(o2, o, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(np.isneginf(lse2), np.isneginf(lse))
    np.testing.assert_allclose(lse2[1:], lse[1:], rtol=1e-13)
    assert not np.isnan(o2).any()


def test_combine_survives_huge_lse():
    o_part = np.ones((1, 1, 2, 2))
    lse_part = np.array([[[1000.0, 999.0]]])
    o, lse = R.combine_partials(o_part, lse_part)
    np.testing.assert_allclose(o, 1.0)
    np.testing.assert_allclose(lse, 1000 + np.log1p(np.exp(-1.0)))


def test_paged_equals_contiguous_with_shuffled_pages():
    rng = np.random.default_rng(6)
    B, H, Hkv, d, page = 2, 4, 2, 8, 4
    lens = np.array([10, 3], dtype=np.int32)
    q, kc, vc, _ = _decode_inputs(rng, B=B, H=H, Hkv=Hkv, L=12, d=d, lens=(10, 3))
    n_pages = 8
    perm = rng.permutation(n_pages)
    table = perm.reshape(B, 4).astype(np.int32)
    k_pages = rand(rng, n_pages, page, Hkv, d)
    v_pages = rand(rng, n_pages, page, Hkv, d)
    for b in range(B):
        for pos in range(lens[b]):
            k_pages[table[b, pos // page], pos % page] = kc[b, :, pos]
            v_pages[table[b, pos // page], pos % page] = vc[b, :, pos]
    o, lse = R.paged_decode_attention(q, k_pages, v_pages, table, lens)
    o2, lse2 = R.decode_attention(q, kc, vc, lens)
    np.testing.assert_allclose(o, o2, rtol=1e-13)
    np.testing.assert_allclose(lse, lse2, rtol=1e-13)


def test_paged_decode_tokens_is_bottom_right_causal_prefill_over_the_gathered_cache():
    from grader.attention.decode_tokens import attend
    rng = np.random.default_rng(7)
    B, T, H, Hkv, d, ps = 3, 4, 6, 2, 8, 4
    lens = np.array([9, 2, 0], dtype=np.int32)
    table = np.array([[4, 0, 2], [5, -1, -1], [-1, -1, -1]], dtype=np.int32)
    q, kp, vp = rand(rng, B, T, H, d), rand(rng, 6, ps, Hkv, d), rand(rng, 6, ps, Hkv, d)
    o, lse = R.paged_decode_tokens(q, kp, vp, table, lens)
    k, v = R.gather_pages(kp, table, lens), R.gather_pages(vp, table, lens)
    for b in range(B):
        n = int(lens[b])
        if n == 0:
            assert (o[b] == 0).all() and np.isneginf(lse[b]).all()
            continue
        o2, lse2 = R.attention_direct(q[b].transpose(1, 0, 2)[None], k[b][None, :, :n], v[b][None, :, :n], causal=True)
        np.testing.assert_allclose(o[b], o2[0].transpose(1, 0, 2), atol=1e-12)
        np.testing.assert_array_equal(np.isneginf(lse[b]), np.isneginf(lse2[0].T))
    assert np.isneginf(lse[1, :2]).all() and np.isfinite(lse[1, 2:]).all()     # 2 keys, 4 tokens
    # one token: module 05's paged decode
    o1, lse1 = R.paged_decode_tokens(q[:, :1], kp, vp, table, lens)
    o5, lse5 = R.paged_decode_attention(q[:, 0], kp, vp, table, lens)
    np.testing.assert_allclose(o1[:, 0], o5, atol=1e-12)
    # the replays' own attention, with nothing changed, is the reference
    x = dict(q=q, k_pages=kp, v_pages=vp, block_table=table, context_lens=lens, scale=1 / np.sqrt(d))
    oa, lsea = attend(x)
    np.testing.assert_allclose(oa, o, atol=1e-12)
    np.testing.assert_array_equal(np.isneginf(lsea), np.isneginf(lse))
