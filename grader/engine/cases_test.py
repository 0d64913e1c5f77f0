"""The pytest face of a check: one test per case of the exercise (see worker.py)."""
import pytest

from grader.engine import worker
from grader.engine.runner import CaseResult, run_case
from grader.runtimes.base import GraderError

# CUDA errors that leave the context unusable: every later launch in this process would fail too.
_STICKY = ("IllegalAddress", "ILLEGAL_ADDRESS", "LaunchFailure", "LAUNCH_FAILED", "MisalignedAddress",
           "MISALIGNED_ADDRESS", "IllegalInstruction", "ILLEGAL_INSTRUCTION", "HardwareStackError",
           "cudaErrorAssert", "unspecified launch failure", "illegal memory access")


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        s = worker.session()
        metafunc.parametrize("case", s.cases, ids=[c.name for c in s.cases])


def test_case(case):
    s = worker.session()
    if s.stop_reason:
        s.emit(event="result", result=CaseResult(case.name, False, message=s.stop_reason,
                                                 params=dict(case.params), kind="not_run").to_json())
        pytest.skip(s.stop_reason)
    s.emit(event="start", case=case.name)
    try:
        fn, rt = s.setup()
    except GraderError as e:
        s.emit(event="fatal", message=str(e))
        pytest.exit(str(e), returncode=3)
    except Exception as e:  # a broken installation, not the student's kernel
        msg = f"the {s.cfg['backend']} runtime could not start: {type(e).__name__}: {e}"
        s.emit(event="fatal", message=msg)
        pytest.exit(msg, returncode=3)
    keep = {}
    result = run_case(s.ex, case, fn, rt, s.seed, s.path, keep=keep)
    if result.kind == "error" and (any(tag in result.message for tag in _STICKY) or not rt.healthy()):
        result.kind = "crash"
        result.message = ("the kernel crashed on the GPU: " + result.message.splitlines()[0] +
                          "\nAn illegal memory access means an index ran outside an array: check the "
                          "bounds tests on the last, partial tile. The CUDA context is lost, so the "
                          "remaining cases were not run. `--backend cpu` names the line and the array.")
        s.stop_reason = "not run: an earlier case crashed the GPU context"
    elif result.kind == "compile_error":
        s.stop_reason = "not run: the kernel does not compile"
    elif not result.passed and result.kind in ("checked", "error"):
        s.failures_seen += 1
        if s.failures_seen == 1:
            _explore_first_failure(s, case, result, keep, fn, rt)
    s.emit(event="result", result=result.to_json())
    resources = getattr(rt, "resources", None)
    if resources:
        s.emit(event="resources", resources={k: dict(v) for k, v in resources.items()})
    assert result.passed, result.message


def _explore_first_failure(s, case, result, keep, fn, rt):
    """For the first failing case only: save its arrays for --plot, and shrink it."""
    if s.plot_dir and keep.get("ref"):
        import os
        import numpy as np
        path = os.path.join(s.plot_dir, f"{s.ex.id}-{case.name}.npz")
        np.savez(path, **{f"ref_{k}": v for k, v in keep["ref"].items()},
                 **{f"out_{k}": np.asarray(v) for k, v in keep["out"].items()})
        result.plot = path
    if s.shrink and case.name != "custom":
        from grader.engine.runner import format_shape, shrink
        found = shrink(s.ex, case.params, fn, rt, s.seed, s.path)
        if found:
            params, r = found
            result.shrunk = {"params": params, "message": r.message, "shape": format_shape(params)}
