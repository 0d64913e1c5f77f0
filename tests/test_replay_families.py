"""The replay families' building blocks: the rearrangements of mma fragments, the key counts of a
warp's loop, and the block-sparse kernel's tile decision (which must agree with the mask exactly
when nothing is misread)."""
import numpy as np

from grader.attention import blocksparse as BS
from grader.attention.fragments import pieces_transposed, quadrants_swapped
from grader.attention.replays import split_key_counts


def test_quadrant_swap_exchanges_the_off_diagonal_pieces_of_each_16x16_block():
    x = np.arange(2 * 32 * 48, dtype=float).reshape(2, 32, 48)
    y = quadrants_swapped(x)
    assert y[0, 0, 8] == x[0, 8, 0] and y[0, 8, 0] == x[0, 0, 8]       # top-right <-> bottom-left
    assert y[1, 16 + 3, 32 + 5] == x[1, 16 + 3, 32 + 5]                 # the diagonal pieces stay
    assert np.array_equal(quadrants_swapped(y), x)


def test_piece_transpose_transposes_each_8x8_piece_in_place():
    x = np.arange(24 * 16, dtype=float).reshape(24, 16)
    y = pieces_transposed(x)
    assert y[8 + 1, 8 + 2] == x[8 + 2, 8 + 1] and y[0, 0] == x[0, 0]
    assert np.array_equal(pieces_transposed(y), x)


def test_warp_key_counts():
    right = split_key_counts(100, 4, 8, start=lambda w: w * 8, step=32)
    assert (right == 1).all()
    skipped = split_key_counts(100, 4, 8, start=lambda w: w * 8, step=32, skip_warp=3)
    assert (skipped == ((np.arange(100) // 8) % 4 != 3)).all()
    overlapping = split_key_counts(40, 4, 8, start=lambda w: w * 8, step=8)
    assert list(overlapping[::8]) == [1, 2, 3, 4, 4]


def test_the_tile_decision_without_a_misreading_is_the_mask():
    rng = np.random.default_rng(0)
    for _ in range(100):
        n_q, n_k = (int(x) for x in rng.integers(1, 200, 2))
        block = (int(rng.integers(8, 100)), int(rng.integers(8, 100)))
        causal = bool(rng.integers(2))
        bm = rng.random((2, 2) + BS.mask_shape(n_q, n_k, block)) < 0.5
        assert np.array_equal(BS.decided_visible(bm, block, n_q, n_k, (64, 64), causal),
                              BS.visible(bm, block, n_q, n_k, causal))


def test_a_tile_called_partial_by_its_columns_alone_runs_whole():
    # Mask blocks of 32 rows in tiles of 64: rows 0-31 keep key block 0, rows 32-63 drop it.
    bm = np.array([[[[1, 1], [0, 1]]]], bool)
    vis = BS.decided_visible(bm, (32, 32), 64, 64, (64, 64), False, count_columns_only=True)
    assert vis.all()                        # 3 kept >= 2 columns: "whole", the dropped block leaks
    assert not BS.visible(bm, (32, 32), 64, 64)[..., 32:, :32].any()


def _attention(s, v):
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    l = p.sum(axis=-1)
    return p @ v / l[..., None], s.max(axis=-1) + np.log(l)


def test_a_full_butterfly_over_the_lanes_is_the_softmax():
    from grader.attention.lanes import lane_streamed
    rng = np.random.default_rng(1)
    s, v = rng.normal(size=(2, 5, 70)), rng.normal(size=(2, 70, 32))
    o, lse = _attention(s, v)
    for lanes, key_lane, col_lane, full in ((8, (np.arange(70) // 4) % 8, (np.arange(32) // 4) % 8, (4, 2, 1)),
                                            (4, (np.arange(70) % 8) // 2, (np.arange(32) % 8) // 2, (2, 1))):
        o_alt, lse_alt = lane_streamed(s, v, 64, lanes, key_lane, col_lane, full, full)
        assert np.allclose(o_alt, o, rtol=1e-5) and np.allclose(lse_alt, lse, rtol=1e-5)
        # Each lane alone: o's columns divided by their own lane's part of l, which is smaller.
        o_own, _ = lane_streamed(s, v, 64, lanes, key_lane, col_lane, full, ())
        assert (np.abs(o_own) > np.abs(o) * 1.5).mean() > 0.9


def test_the_exp2_replay_with_m_in_log2_units_is_softmax_of_scaled_scores():
    from grader.attention.replays import exp2_shift_in_other_units
    rng = np.random.default_rng(2)
    t, v = rng.normal(size=(3, 40)), rng.normal(size=(40, 16))
    o, lse = exp2_shift_in_other_units(t, v)
    o_want, lse_want = _attention(t * np.log(2.0), v)
    assert np.allclose(o, o_want, rtol=1e-4) and np.allclose(lse, lse_want, rtol=1e-4)
    o0, lse0 = exp2_shift_in_other_units(np.zeros((2, 0)), np.zeros((0, 16)))     # no keys at all
    assert (o0 == 0).all() and (lse0 == -np.inf).all()


def test_the_backward_visits_the_query_tiles_from_the_first_row_that_sees_the_key_block():
    from grader.attention.backward import visited
    seen = visited(100, 230, 64, 64, lambda k0, off: k0 - off)       # offset 130
    assert seen.all()                                  # every key block's first row is at or before 0
    seen = visited(200, 200, 64, 64, lambda k0, off: k0 - off)
    assert seen[64:, 64].all() and not seen[:64, 64].any() and seen[:, :64].all()


def test_an_inverted_element_test_keeps_whole_tiles_and_flips_partial_ones():
    bm = np.array([[[[1, 0], [1, 1]]]], bool)
    vis = BS.decided_visible(bm, (32, 32), 64, 64, (64, 64), False, element_inverted=True)
    truth = BS.visible(bm, (32, 32), 64, 64)
    assert np.array_equal(vis, ~truth)                 # one tile, partial: every key flipped


def test_each_array_made_while_grading_has_its_own_poison():
    from grader.runtimes.base import Runtime, is_poison
    rt = Runtime()
    rt.start_poisoning()
    a, b = rt.empty((3, 4)), rt.empty((2,))
    assert rt.poison_index(a) == 0 and rt.poison_index(b) == 1
    assert is_poison(a).all() and is_poison(a, 0).all() and not is_poison(a, 1).any()
    # Arithmetic keeps a NaN's payload: a value computed from b is b's poison, not a's.
    a[0, 0] = b[0] * np.float32(2) + np.float32(1)
    assert is_poison(a).all() and not is_poison(a, 0)[0, 0] and is_poison(a, 1)[0, 0]
    assert "float32 array of shape [2]" in rt.poison_source(a[0:1, 0])
    a[1, 1] = np.nan            # a NaN of the machine's own: no poison at all
    assert not is_poison(a)[1, 1]


def test_the_fourth_p_register_from_row_g_repeats_the_upper_right_piece():
    from grader.attention.fragments import lower_rows_from_upper
    x = np.arange(32 * 16, dtype=float).reshape(32, 16)
    y = lower_rows_from_upper(x)
    assert y[8 + 2, 8 + 3] == x[2, 8 + 3] and y[16 + 8, 8] == x[16, 8]
    assert (y[:8] == x[:8]).all() and (y[8:16, :8] == x[8:16, :8]).all()


def test_the_tile_decision_variants_of_the_kept_count():
    # One query tile of 64 rows over mask blocks of 32 × 32, two key columns: kept blocks only in
    # column 0. The last block (row 1, column 1) is dropped: counting it alone skips the tile.
    bm = np.array([[[[1, 0], [1, 0]]]], np.uint8)
    args = (bm != 0, (32, 32), 64, 64, (64, 64), False)
    right = BS.decided_visible(*args)
    assert right[..., :, :32].all() and not right[..., :, 32:].any()
    assert not BS.decided_visible(*args, kept_last_only=True).any()
    # Scanning one column short counts only column 0: kept, so still partial and right here.
    assert np.array_equal(BS.decided_visible(*args, rect_cols_short=True), right)


def test_the_guard_on_the_tile_max_changes_lse_not_o():
    from grader.attention.replays import streamed
    rng = np.random.default_rng(1)
    s, v = rng.normal(size=(1, 1, 4, 8)) * 3, rng.normal(size=(1, 1, 8, 5))
    vis = np.ones((4, 8), bool)
    vis[:, 4:] = False                          # the second tile of 4 keys: nothing visible
    o, lse = streamed(s, v, 4, visible=vis)
    o_g, lse_g = streamed(s, v, 4, visible=vis, guard_tile=True)
    assert np.allclose(o, o_g) and not np.allclose(lse, lse_g)


def test_a_decode_warps_loop_without_a_bug_is_the_attention():
    from grader.attention import references as R
    from grader.attention.replays import warp_streamed
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(3, 2, 16)), rng.normal(size=(3, 2, 150, 16)), rng.normal(size=(3, 2, 150, 16))
    lens = np.array([0, 37, 150])
    scale = 0.25
    scores = scale * np.einsum("bhd,bhjd->bhj", q, k)
    want_o, want_lse = R.decode_attention(q, k, v, lens, scale)
    for chunk in (150, 64, 33):
        o, lse = warp_streamed(scores, v, lens, chunk, 4, 8)
        assert np.allclose(o, want_o, atol=1e-6) and np.allclose(lse, want_lse, atol=1e-6)
    o, _ = warp_streamed(scores, v, lens, 150, 4, 8, rescale_l=False)      # the bug changes the result
    assert not np.allclose(o[2], want_o[2], atol=1e-3)
