"""Half precision for module 06 (grader/attention/lowp.py): bfloat16 bits, the poison of 2-byte
outputs, and a tolerance that a correct low-precision kernel meets and a structural bug does not."""
import numpy as np

from grader.attention import lowp
from grader.attention import references as R
from grader.engine.diagnose import misplaced_rows
from grader.runtimes.base import POISON_BITS, Runtime, is_poison


def test_bfloat16_bits_round_to_nearest_even_and_decode_exactly():
    x = np.array([1.0, -2.5, 3.14159, 1 + 2 ** -8, 1 + 3 * 2 ** -9, 65504.0], np.float32)
    bits = lowp.bf16_bits(x)
    assert bits.dtype == np.uint16
    back = lowp.bf16_value(bits)
    assert back[0] == 1.0 and back[1] == -2.5
    assert back[3] == 1.0                          # a tie rounds to even
    assert back[4] == 1 + 2 ** -7                  # above the tie rounds up
    assert np.all(np.abs(back - x) <= np.abs(x) * 2 ** -8)


def test_unwritten_two_byte_outputs_stay_poison_once_widened():
    rt = Runtime()
    rt.poison_outputs = True
    for dtype, np_dtype in (("float16", np.float16), ("bfloat16", np.uint16)):
        o = rt.empty((3, 4), np_dtype)
        o[0] = lowp.encode(np.ones(4), dtype)
        wide = lowp.decode(o, dtype)
        assert wide.dtype == np.float32
        assert not is_poison(wide[0]).any() and is_poison(wide[1:]).all()
        assert (wide[1:].view(np.uint32) == POISON_BITS[4]).all()


def inputs(dtype, n=70, d=64, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (lowp.rounded(rng.standard_normal((1, 2, n, d)), dtype) for _ in range(3))
    return q, k, v, 1 / np.sqrt(d)


def test_the_same_precision_reference_passes_its_tolerance_and_a_bug_does_not():
    for dtype in lowp.DTYPES:
        q, k, v, scale = inputs(dtype)
        o, lse = R.attention(q, k, v, scale)
        o_sp, lse_sp = lowp.same_precision_attention(q, k, v, scale, dtype)
        tol = lowp.tolerances(o_sp, lse_sp, {"o": o, "lse": lse}, dtype)
        err = lowp.rel_error(o_sp, o)
        assert 0 < err <= tol["o"].rel < 10 * lowp.EPS[dtype]
        wrong = lowp.same_precision_attention(q, k, v, scale * 1.05, dtype)[0]   # a 5% scale error
        assert lowp.rel_error(wrong, o) > tol["o"].rel


def test_rows_stored_at_the_wrong_row_are_named():
    rng = np.random.default_rng(1)
    want = rng.standard_normal((2, 16, 8))
    got = want.copy()
    got[:, [0, 8]] = want[:, [8, 0]]               # rows 0 and 8 swapped in each block
    assert "hold another row" in misplaced_rows("o", got, want, 1e-3)
    got[:, 0] += 1.0                                # not another row's answer any more
    assert misplaced_rows("o", got, want, 1e-3) is None


def test_float16_bits_stored_where_bfloat16_is_due_are_named(tmp_path):
    # Module 06's o converted with the float16 intrinsic: read as bfloat16 it is garbage, but read as
    # float16 right; the cause names the format stored (blind batch 28's kernel).
    from pathlib import Path
    from grader import catalogue
    from grader.corpus import stated_causes
    from grader.engine.check import run_check
    path = Path(__file__).parent / "blind" / "06_flash_tensor_cores" / "o_store_half_bf16_b28.py"
    report = run_check(catalogue.resolve("06"), path, "cpu", seed=3, cases=["bf16_tile_plus_1"])
    assert not report["passed"]
    assert stated_causes(report) == {"store:o_as_float16"}
    x = np.array([0.5, -2.0, 3.25])
    assert np.allclose(lowp.stored_as(x, "bfloat16", "bfloat16"), x)
    assert not np.allclose(lowp.stored_as(x, "float16", "bfloat16"), x)
