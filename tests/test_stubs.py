import re

import pytest

from grader.stubs import StubError, derive_stub, todo_numbers, untouched_todos

SOLUTION = '''KERNEL = r"""
__global__ void f(float* o) {
    int i = threadIdx.x;
    // BEGIN SOLUTION TODO(1): write o[i]
    o[i] = 2.0f * i;
    // STUB: (void)i;
    // END SOLUTION
}
"""

def f(rt, o):
    # BEGIN SOLUTION TODO(2): launch
    grid = (4,)
    # STUB: grid = (1,)
    # END SOLUTION
    return grid
'''


def test_stub_keeps_todo_and_stub_lines_and_drops_the_answer():
    stub = derive_stub(SOLUTION)
    assert "// TODO(1): write o[i]\n    (void)i;\n" in stub
    assert "    # TODO(2): launch\n    grid = (1,)\n" in stub
    assert "2.0f" not in stub and "(4,)" not in stub and "SOLUTION" not in stub
    assert todo_numbers(stub) == [1, 2]
    assert derive_stub(stub) == stub            # a stub has nothing left to strip


@pytest.mark.parametrize("bad, why", [
    ("// BEGIN SOLUTION TODO(1): x\n", "never closed"),
    ("# END SOLUTION\n", "without BEGIN"),
    ("// BEGIN SOLUTION TODO(1): a\n// BEGIN SOLUTION TODO(2): b\n// END SOLUTION\n", "inside another"),
    ("// BEGIN SOLUTION\n// END SOLUTION\n", "TODO(n)"),
])
def test_malformed_markers_are_refused_with_the_line(bad, why):
    with pytest.raises(StubError, match=re.escape(why)):
        derive_stub(bad, "sol.py")


def test_the_todos_a_file_still_holds_as_the_stub_has_them():
    stub = derive_stub(SOLUTION)
    assert untouched_todos(stub, stub) == [1, 2]
    first_done = stub.replace("    (void)i;\n", "    o[i] = 2.0f * i;\n")
    assert untouched_todos(stub, first_done) == [2]
    comment_kept_code_after = stub.replace("    # TODO(2): launch\n", "    # TODO(2): launch\n    grid = (4,)\n")
    assert untouched_todos(stub, comment_kept_code_after) == [1]
    assert untouched_todos(stub, "    o[i] = 2.0f * i;\n") == []       # the comments gone: nothing to name
