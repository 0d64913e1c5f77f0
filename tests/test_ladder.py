"""`grader ladder`: the speed ladders of modules 06, 10 and 11 as a course command (grader/ladder.py,
grader/tasks/NAME/ladder.py). On the CPU each step is checked on the emulator, never timed."""
import pytest

from grader.attention.ladders import fill, piece, replace
from grader.cli import main
from grader.errors import GraderError


def test_the_dispatcher_lists_steps_and_refuses_what_is_not_there(capsys):
    assert main(["ladder", "06", "--list"]) == 0
    out = capsys.readouterr().out
    assert "1  mma" in out and "5  +swizzle (solution)" in out and "(variant, all on)" not in out
    assert main(["ladder", "11", "--variants", "--list"]) == 0
    assert "19  ref: separate dQ pass" in capsys.readouterr().out

    assert main(["ladder", "06", "9", "--backend", "cpu"]) == 2           # no step 9: nothing runs
    err = capsys.readouterr().err
    assert "steps 1 to 5, not 9" in err and "--list" in err
    assert main(["ladder", "11", "--variants", "99"]) == 2
    assert "variants 1 to 35, not 99" in capsys.readouterr().err
    assert main(["ladder", "02"]) == 2                                    # a module without a ladder
    assert "02_flash_forward has no speed ladder; the modules with one: 06, 10, 11" in capsys.readouterr().err
    assert main(["ladder", "99"]) == 2
    assert "unknown exercise" in capsys.readouterr().err
    assert main(["ladder", "10", "--variants"]) == 2
    assert "no variants" in capsys.readouterr().err
    assert main(["ladder", "06", "--rounds", "3"]) == 2                   # a variants' flag on a ladder
    assert "--rounds is for module 11's variants" in capsys.readouterr().err


def test_one_step_is_checked_on_the_emulator_and_not_timed(capsys):
    assert main(["ladder", "06", "1", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("  ok   ") or line.startswith("  FAIL ")]
    assert lines and all(line.startswith("  ok   mma ") for line in lines), out   # step 1 alone, every case
    assert "= solution, bit for bit" in out                # its outputs next to the solution's
    assert "registers" in out and "every step checked is right" in out
    assert "timed" not in out and " ms" not in out


@pytest.mark.slow
def test_module_06s_whole_ladder_runs_on_the_cpu(capsys):
    """`grader ladder 06 --backend cpu`: every step and the all-on variant, which must equal the solution
    bit for bit (about a minute on two cores with a cold compile cache)."""
    assert main(["ladder", "06", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    for label in ("mma", "+ldmatrix", "+P in registers", "+cp.async", "+swizzle (solution)", "(variant, all on)"):
        assert f"  ok   {label} " in out, label
    assert "FAIL" not in out
    variant = [line for line in out.splitlines() if line.startswith("  ok   (variant, all on)")]
    assert variant and all("= solution, bit for bit" in line for line in variant)


def test_a_moved_line_of_the_solution_is_named():
    kernel = "// head\nint a;\n// BEGIN SOLUTION TODO(1): x\nint b;\n// END SOLUTION\nint c;\n"
    assert piece(kernel, "// BEGIN SOLUTION TODO(1)", "// END SOLUTION") == "int b;"
    assert piece(kernel, None, "int c;") == "// head\nint a;\nint b;"
    with pytest.raises(GraderError, match="0 lines begin with 'int z;'"):
        piece(kernel, "int z;", "int c;")
    with pytest.raises(GraderError, match="no line 'int z;' after 'int a;'"):
        piece(kernel, "int a;", "int z;")
    with pytest.raises(GraderError, match="has 0 of @B@"):
        fill("@A@", {"@A@": "x", "@B@": "y"})
    assert replace("int b;", "long b;")(kernel).count("long b;") == 1
    with pytest.raises(GraderError, match="has 2 of 'int b;', not one"):
        replace("int b;", "long b;")(kernel + "int b;\n")
