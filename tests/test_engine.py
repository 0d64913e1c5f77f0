"""The check engine survives what a student's code can do: crash, hang, raise, corrupt inputs."""
import json
import re

import pytest

from grader import catalogue
from grader.cli import main
from grader.engine.check import run_check

EX = catalogue.resolve("00_naive_attention")
CASES = ["one_query_one_key", "tiny"]


KEY_LOOP = "for (int j = 0; j < n_k; ++j) acc += "     # module 00's output kernel, its loop over keys


def edited_solution(tmp_path, name, loop):
    """Module 00's solution with its loop over keys replaced by `loop`, written to tmp_path/name."""
    from grader import paths
    text = paths.committed_text(paths.solution_file(EX.id))
    assert KEY_LOOP in text, "the output kernel's loop over keys changed: update this test's edit"
    path = tmp_path / name
    path.write_text(text.replace(KEY_LOOP, loop, 1))
    return path


def write(tmp_path, body):
    p = tmp_path / "attempt.py"
    p.write_text("import os, time\nimport numpy as np\n\ndef naive_attention(rt, q, k, v, scale):\n" + body)
    return p


def test_a_crashing_process_is_a_failed_case_and_the_grader_carries_on(tmp_path):
    report = run_check(EX, write(tmp_path, "    os._exit(139)\n"), "cpu", 1, cases=CASES)
    assert not report["passed"] and report["error"] is None
    first, second = report["cases"]
    assert first["kind"] == "crash" and "exit code 139" in first["message"]
    assert second["kind"] == "not_run"


@pytest.mark.slow
def test_a_hang_is_stopped_by_the_time_limit(tmp_path):
    report = run_check(EX, write(tmp_path, "    while True: pass\n"), "cpu", 1,
                       case_timeout=3, cases=CASES)
    first, second = report["cases"]
    assert first["kind"] == "timeout"
    assert "did not finish within 3 s of CPU time" in first["message"]
    assert "attempt.py:5" in first["message"]          # SIGINT first: the Python line that spun
    assert second["kind"] == "not_run" and "did not finish in time" in second["message"]


@pytest.mark.slow
def test_an_endless_kernel_is_reported_with_its_line_after_the_earlier_verdicts(tmp_path):
    """`grader check` prints each verdict as it comes; a kernel that never ends is stopped by the
    default time limit, within seconds, naming the line the threads spin on."""
    import os
    import subprocess
    import sys
    import threading
    import time

    # The bound never grows once n_q > 1: one_query_one_key (Nq=1) passes, tiny (Nq=3) hangs.
    endless = "for (int j = 0; j < n_k; j += (n_q > 1 ? 0 : 1)) acc += "
    hang = edited_solution(tmp_path, "hang.py", endless)
    line = next(i for i, t in enumerate(hang.read_text().splitlines(), 1) if endless in t)
    env = dict(os.environ, GRADER_STATE_DIR=str(tmp_path / "state"), PYTHONUNBUFFERED="1")
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "grader", "check", "00", "--file", str(hang),
                             "--backend", "cpu", "--seed", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    watchdog = threading.Timer(120, proc.kill)        # never let the test itself hang
    watchdog.start()
    seen = []
    try:
        for out in proc.stdout:
            seen.append((time.monotonic() - t0, out.rstrip("\n")))
        rc = proc.wait(timeout=10)
    finally:
        watchdog.cancel()
        proc.kill()
    total = time.monotonic() - t0
    log = "\n".join(f"{t:6.2f}s {out}" for t, out in seen)
    at = {name: next((t for t, out in seen if name in out), None)
          for name in ("✓ one_query_one_key", "[timeout]", f"hang.py:{line}")}
    assert rc == 1, log
    assert None not in at.values(), log
    assert total < 30, log
    # The first verdict is on the terminal while the second case still runs, long before the hang
    # is reported (which takes the whole time limit).
    assert at["✓ one_query_one_key"] + 5 < at["[timeout]"], log
    assert "output_kernel" in log and "did not finish within" in log, log


def test_compiling_does_not_count_against_a_case():
    from grader.engine import check
    now = [100.0]
    watch = check._Watch(10.0, {"a": {}}, None, clock=lambda: now[0])
    watch.handle({"event": "start", "case": "a"})
    assert watch.deadline == 110.0
    now[0] = 104.0
    watch.handle({"event": "compiling"})
    assert watch.deadline == 104.0 + check.COMPILE_TIMEOUT
    now[0] = 190.0                                      # a long compile
    watch.handle({"event": "compiled"})
    assert watch.deadline == 196.0                      # the 6 s the case had left
    seen = []
    watch.on_result = seen.append
    watch.handle({"event": "result", "result": {"name": "a", "passed": True}})
    assert [c["name"] for c in seen] == ["a"] and watch.running is None


def test_a_case_is_limited_by_the_childs_cpu_time_with_the_wall_clock_as_a_backstop():
    """Two checks per core double the wall time of a case, not its CPU time: the verdict is the same."""
    from grader.engine import check
    wall, cpu = [0.0], [0.0]
    watch = check._Watch(10.0, {"a": {}}, None, clock=lambda: wall[0], cpu=lambda: cpu[0])
    watch.handle({"event": "start", "case": "a"})
    wall[0], cpu[0] = 19.0, 9.5                      # a loaded machine: half the CPU per second
    assert not watch.expired()
    cpu[0] = 10.5
    assert watch.expired() and not watch.idle
    watch.handle({"event": "start", "case": "b"})     # a case that waits rather than computes
    wall[0] += 10.0 * check.WALL_FACTOR + 1
    assert watch.expired() and watch.idle
    assert "waiting, not computing" in check.timeout_message(10.0, idle=True)


def test_the_default_time_limits_are_seconds_not_minutes():
    from grader.engine.check import DEFAULT_CASE_TIMEOUT
    assert 5 <= DEFAULT_CASE_TIMEOUT["gpu"] <= DEFAULT_CASE_TIMEOUT["cpu"] <= 20


def test_python_errors_name_the_students_line(tmp_path):
    report = run_check(EX, write(tmp_path, "    return undefined_name\n"), "cpu", 1, cases=CASES)
    msg = report["cases"][0]["message"]
    assert "NameError" in msg and "attempt.py" in msg


def test_not_implemented_error_counts_as_not_implemented(tmp_path):
    report = run_check(EX, write(tmp_path, "    raise NotImplementedError('TODO(1)')\n"), "cpu", 1,
                       cases=CASES)
    assert all(c["kind"] == "not_implemented" for c in report["cases"])


def test_changing_an_input_is_caught(tmp_path):
    body = ("    q[...] = 0\n    o = rt.zeros(q.shape)\n    lse = rt.zeros(q.shape[:3])\n"
            "    return o, lse\n")
    report = run_check(EX, write(tmp_path, body), "cpu", 1, cases=CASES)
    assert "the input 'q' was changed outside your kernels" in report["cases"][0]["message"]


def test_zeros_never_pass_and_json_follows_the_contract(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GRADER_STATE_DIR", str(tmp_path / "state"))
    # A kernel that writes nothing into outputs made by rt.zeros: the zeros come from a launch.
    body = ("    o, lse = rt.zeros(q.shape), rt.zeros(q.shape[:3])\n"
            "    noop = rt.compile('extern \"C\" __global__ void noop(float* o, float* lse) {}').get_function('noop')\n"
            "    noop((1,), (1,), (o, lse))\n"
            "    return o, lse\n")
    path = write(tmp_path, body)
    rc = main(["check", "00", "--file", str(path), "--backend", "cpu", "--seed", "5", "--json",
               "--case", "tiny"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert set(report) >= {"id", "file", "backend", "passed", "cases"}
    case = report["cases"][0]
    assert set(case) >= {"name", "passed", "rel_err", "max_abs_err", "message"}
    assert case["passed"] is False and case["rel_err"] == pytest.approx(1.0)
    assert "all zeros" in case["message"]


def test_seed_replays_the_same_inputs():
    from grader.engine.runner import case_rng
    a = case_rng(42, "tiny").standard_normal(5)
    b = case_rng(42, "tiny").standard_normal(5)
    c = case_rng(43, "tiny").standard_normal(5)
    assert (a == b).all() and not (a == c).all()


def test_resources_are_reported_after_compiling(tmp_path, capsys, monkeypatch):
    from grader.runtimes.cpu import nvrtc
    if not nvrtc.available():
        pytest.skip("NVRTC is not installed: pip install -e '.[nvrtc]'")
    monkeypatch.setenv("GRADER_STATE_DIR", str(tmp_path / "state"))
    # A per-thread array indexed at run time lives in local memory: the report must warn.
    body = '''
KERNEL = r"""
extern "C" __global__ void local_array(const float* q, float* o, int n) {
    float a[64];
    for (int i = 0; i < 64; ++i) a[i] = q[i % n];
    int t = threadIdx.x;
    if (t < n) o[t] = a[(t * 7) % 64];
}
"""

def naive_attention(rt, q, k, v, scale):
    o = rt.zeros(q.shape, "float32")
    rt.compile(KERNEL).get_function("local_array")((1,), (32,), (q, o, rt.int32(min(q.size, 32))))
    return o, rt.zeros(q.shape[:3], "float32")
'''
    path = tmp_path / "attempt.py"
    path.write_text(body)
    main(["check", "00", "--file", str(path), "--backend", "cpu", "--case", "tiny", "--no-shrink"])
    out = capsys.readouterr().out
    assert "Resources per kernel:" in out and "local_array:" in out and "registers/thread" in out
    assert "warning: local_array keeps" in out and "local memory" in out


def test_computed_nan_is_not_mistaken_for_an_unwritten_output(tmp_path):
    # Every element written, but as NaN: that is a bug in the arithmetic, not "not implemented yet".
    body = "    return rt.full(q.shape, np.nan), rt.full(q.shape[:3], np.nan)\n"
    report = run_check(EX, write(tmp_path, body), "cpu", 1, cases=CASES, provenance=False)
    case = report["cases"][0]
    assert case["kind"] == "checked" and "not implemented" not in case["message"]
    assert "the kernel computed NaN/Inf in 32 elements of o where the answer is finite, filling every row" \
        in case["message"] and "never written" not in case["message"]


def test_partly_unwritten_output_is_named(tmp_path):
    body = ("    o = rt.empty(q.shape, 'float32')\n    o[..., :1, :] = 0.5\n"
            "    return o, rt.zeros(q.shape[:3])\n")
    report = run_check(EX, write(tmp_path, body), "cpu", 1, cases=["tiny"], provenance=False)
    assert "were never written" in report["cases"][0]["message"]


def test_per_row_factor_is_named_only_when_nearly_every_row_is_scaled(tmp_path):
    from grader.attention import references as R
    scaled = ("    o, lse = R.attention(rt.to_numpy(q), rt.to_numpy(k), rt.to_numpy(v), scale)\n"
              "    o = o * (2.0 + np.arange(o.shape[2]))[:, None]\n"
              "    return rt.asarray(o.astype(np.float32)), rt.asarray(lse.astype(np.float32))\n")
    header = "from grader.attention import references as R\n"
    every = write(tmp_path, scaled)
    every.write_text(header + every.read_text())
    msg = run_check(EX, every, "cpu", 1, cases=["primes"], provenance=False)["cases"][0]["message"]
    assert "each row of o is the right answer times a factor of its own" in msg
    one = write(tmp_path, "    o0, lse0 = R.attention(rt.to_numpy(q), rt.to_numpy(k), rt.to_numpy(v), scale)\n"
                "    o0[:, :, 3] *= 2.0\n"
                "    return rt.asarray(o0.astype(np.float32)), rt.asarray(lse0.astype(np.float32))\n")
    one.write_text(header + one.read_text())
    msg = run_check(EX, one, "cpu", 1, cases=["primes"], provenance=False)["cases"][0]["message"]
    assert "factor of its own" not in msg and "relative error" in msg


NVRTC_LOG = """\
attempt.py(27): error: identifier "undefined_var" is undefined
        float x = undefined_var;
                  ^

attempt.py(26): warning #177-D: variable "unused" was declared but never referenced
        int unused;
            ^

Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"

attempt.py(28): warning #550-D: variable "y" was set but never used
        float y = 1.0f;
              ^

1 error detected in the compilation of "attempt.py".
"""

GCC_LOG = """\
attempt.py: In function 'void scores_kernel(const float*)':
attempt.py:27:15: error: 'undefined_var' was not declared in this scope
   27 |     float x = undefined_var;
      |               ^~~~~~~~~~~~~
attempt.py:26:9: warning: unused variable 'unused' [-Wunused-variable]
   26 |     int unused;
      |         ^~~~~~
"""


def test_compiler_errors_come_first_and_warnings_are_folded():
    from grader.engine.runner import compile_error_message
    from grader.errors import CompileError
    msg = compile_error_message(CompileError("the kernel did not compile (NVRTC):", NVRTC_LOG))
    lines = msg.splitlines()
    assert lines[0] == "the kernel did not compile (NVRTC):"
    assert lines[1] == 'attempt.py:27: error: identifier "undefined_var" is undefined'
    assert "float x = undefined_var;" in lines[2]
    assert lines[-1] == "(2 warnings not shown)"
    assert "unused" not in msg and "Remark" not in msg and "detected in the compilation" not in msg
    msg = compile_error_message(CompileError("the kernel did not compile (host C++ compiler):", GCC_LOG))
    assert "attempt.py:27:15: error: 'undefined_var' was not declared" in msg
    assert "In function 'void scores_kernel" in msg
    assert msg.splitlines()[-1] == "(1 warning not shown)" and "unused" not in msg
    # A log in a shape it does not know is shown as it is.
    assert compile_error_message(CompileError("failed:", "something odd")) == "failed:\nsomething odd"


def test_static_shared_memory_past_the_limit_names_the_files_shared_declarations(tmp_path):
    """ptxas refuses too much static shared memory with no line (blind batch 52's 04): the message
    lists the file's static __shared__ declarations with their lines, not the dynamic one."""
    from grader.engine.runner import compile_error_message
    from grader.errors import CompileError
    src = tmp_path / "attempt.py"
    src.write_text('KERNEL = r"""\n__global__ void k() {\n    __shared__ float4 acc_s[4][16][128];\n'
                   '    extern __shared__ float dyn[];\n    // __shared__ in a comment\n}\n"""\n')
    log = ("ptxas error   : Entry function 'k' uses too much shared data (0x10100 bytes, 0xc000 max)\n\x00\n")
    msg = compile_error_message(CompileError("the kernel did not compile (NVRTC):", log), src)
    assert "65792 bytes, is more than the 49152 bytes" in msg
    assert "line 3: __shared__ float4 acc_s[4][16][128];" in msg
    assert "float dyn[]" not in msg and "in a comment" not in msg and "\x00" not in msg
    # Any other compiler error is left as it was.
    assert "declares" not in compile_error_message(CompileError("failed:", "something odd"), src)


def test_a_kernel_that_does_not_compile_is_one_block_with_the_compilers_error(tmp_path, capsys, monkeypatch):
    from grader.runtimes.cpu import nvrtc
    monkeypatch.setenv("GRADER_STATE_DIR", str(tmp_path / "state"))
    body = '''
KERNEL = r"""
extern "C" __global__ void broken(float* o, int n) {
    int unused;
    o[threadIdx.x] = undefined_var;
}
"""

def naive_attention(rt, q, k, v, scale):
    rt.compile(KERNEL)
    return rt.zeros(q.shape, "float32"), rt.zeros(q.shape[:3], "float32")
'''
    path = tmp_path / "attempt.py"
    path.write_text(body)
    line = next(i for i, t in enumerate(body.splitlines(), 1) if "undefined_var" in t)
    rc = main(["check", "00", "--file", str(path), "--backend", "cpu", "--seed", "1"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "✗ the kernel did not compile" in out
    assert f"attempt.py:{line}:" in out and "undefined_var" in out
    assert "[not run]" not in out and "one_query_one_key" not in out   # no table of cases that never ran
    from grader.engine.runner import select_cases
    assert f"0 passed, 1 failed, {len(select_cases(catalogue.resolve('00'))) - 1} not run" in out
    if nvrtc.available():
        assert "(1 warning not shown)" in out and "unused" not in out


def test_inf_with_small_scores_is_not_called_an_overflow(tmp_path):
    # +inf in one row of a case whose scores are small: the message says what it saw, not "overflow".
    body = ("    o, lse = R.attention(rt.to_numpy(q), rt.to_numpy(k), rt.to_numpy(v), scale)\n"
            "    o[0, 0, 1, :] = np.inf\n"
            "    return rt.asarray(o.astype(np.float32)), rt.asarray(lse.astype(np.float32))\n")
    path = write(tmp_path, body)
    path.write_text("from grader.attention import references as R\n" + path.read_text())
    msg = run_check(EX, path, "cpu", 1, cases=["tiny"], provenance=False)["cases"][0]["message"]
    assert "large scores" not in msg and "overflow" not in msg.split("likely cause:")[-1].split(".")[0]
    assert "computed +inf in 32 elements of o where the answer is finite" in msg and "expf cannot overflow" in msg


def test_an_output_never_written_while_others_were_is_named_as_such():
    import numpy as np

    from grader.engine.compare import compare
    from grader.engine.diagnose import Context, observations
    from grader.runtimes.base import POISON_BITS
    ref = {"dq": np.ones((2, 3)), "dk": np.ones((2, 3)), "dv": np.ones((2, 3))}
    poison = np.full((2, 3), POISON_BITS[4], np.uint32).view(np.float32)
    out = {"dq": np.zeros((2, 3), np.float32), "dk": poison.copy(), "dv": poison.copy()}
    cmp = {n: compare(n, out[n], ref[n], 1e-5, 1e-4) for n in ref}
    seen = [s.text for s in observations(Context(None, {}, {}, ref, out, cmp))]
    assert seen[0].startswith("dk and dv were never written at all") and "while dq was written" in seen[0]
    assert "dq is all zeros" in " ".join(seen)
    out["dk"][0, 0] = 1.0                   # partly written: the element-level message, not this one
    cmp = {n: compare(n, out[n], ref[n], 1e-5, 1e-4) for n in ref}
    seen = [s.text for s in observations(Context(None, {}, {}, ref, out, cmp))]
    assert seen[0].startswith("dv was never written at all")
    assert any(s.startswith("5 of 6 elements of dk were never written") for s in seen), seen


def test_a_kernel_that_writes_nothing_though_every_todo_has_code_is_not_called_unimplemented(tmp_path):
    from grader import paths
    text = paths.committed_text(paths.solution_file(EX.id))
    for kernel in ("scores_kernel", "softmax_kernel", "output_kernel"):
        head = f'extern "C" __global__ void {kernel}('
        assert head in text, "a kernel of module 00 changed its name: update this test"
        start = text.index("{", text.index(head))
        text = text[:start + 1] + "\n    if (blockDim.x > 0) return;" + text[start + 1:]
    f = tmp_path / "nothing.py"
    f.write_text(text)
    case = run_check(EX, f, "cpu", 1, cases=["tiny"])["cases"][0]
    assert case["kind"] == "checked" and "not implemented yet" not in case["message"], case["message"]
    assert "every TODO" in case["message"] and "with grid" in case["message"]


def test_row_factors_say_when_one_factor_holds_for_the_whole_array_and_word_gradients_as_such():
    import numpy as np
    from grader.engine.diagnose import row_factors
    rng = np.random.default_rng(0)
    want = rng.standard_normal((2, 3, 5, 8))
    said = row_factors("dk", want * 8.0, want)
    assert "one and the same factor, 8" in said and "weights" not in said
    per_row = want * (2.0 + np.arange(5))[:, None]
    assert "relative to each other" not in row_factors("dq", per_row, want)
    assert "relative to each other" in row_factors("o", per_row, want)


def _refusing_solution(tmp_path, refuse: str):
    """Module 00's solution, refusing the cases where `refuse` holds as this machine cannot run them
    (module 12 on a GPU: more ranks than GPUs)."""
    from grader import paths
    text = paths.solution_file("00_naive_attention").read_text()
    head = "def naive_attention(rt, q, k, v, scale):\n"
    assert text.count(head) == 1
    text = text.replace(head, head + f"    from grader.errors import CaseNotRunnable\n    if {refuse}:\n"
                        "        raise CaseNotRunnable('needs more GPUs than this machine has')\n")
    p = tmp_path / "attempt.py"
    p.write_text(text)
    return p


def test_a_check_whose_other_cases_cannot_run_here_passes_with_them_not_run(tmp_path):
    report = run_check(EX, _refusing_solution(tmp_path, "q.shape[2] > 1"), "cpu", 1, cases=CASES)
    first, second = report["cases"]
    assert first["passed"] and second["kind"] == "not_run" and "more GPUs" in second["message"]
    assert report["passed"]


def test_a_check_none_of_whose_cases_ran_does_not_pass(tmp_path):
    report = run_check(EX, _refusing_solution(tmp_path, "True"), "cpu", 1, cases=CASES)
    assert all(c["kind"] == "not_run" for c in report["cases"])
    assert not report["passed"]


def test_a_diagnosis_stops_at_its_budget_inside_one_item():
    """One item of a diagnosis can run many replays (module 10's 13400-row case: over 30 s in one):
    the replays spend the search's budget as they go, and the search ends there, incomplete."""
    import time

    from grader.engine.verdict import search, spend

    def endless_replays():
        while True:
            spend()
        yield                                             # never reached: a generator all the same

    t0 = time.process_time()
    causes, seen, complete = search(endless_replays(), budget_s=0.2)
    assert (causes, seen, complete) == ([], [], False)
    assert time.process_time() - t0 < 2.0
    spend()                                               # outside a search nothing is spent


@pytest.mark.slow
def test_a_later_hang_leaves_the_first_failure_its_traced_line(tmp_path, monkeypatch):
    """The first failure's divergence is traced after the last case; a later case that hangs stops the
    child before that, so the first failing case is run again alone for its trace."""
    monkeypatch.delenv("GRADER_TRACE")                    # tests/conftest.py turns tracing off
    # tiny (Nq = 3) leaves out its last key; below_tile (Nq = 17) never ends.
    path = edited_solution(tmp_path, "late_hang.py", "for (int j = 0; j < n_k - 1; j += (n_q > 10 ? 0 : 1)) acc += ")
    report = run_check(EX, path, "cpu", 1, case_timeout=3, cases=["tiny", "below_tile"])
    first, second = report["cases"]
    assert first["kind"] == "checked" and second["kind"] == "timeout"
    assert "first divergence" in first["message"] and re.search(r"\(launched at line \d+ `", first["message"]), \
        first["message"]


def test_the_grader_explaining_a_failure_is_not_the_kernels_time(tmp_path):
    """A failing case tells the parent when its kernel is done and the explanation starts (an
    "explore" event), so that the replays' time is never reported as a kernel that did not finish."""
    from grader import paths
    from grader.engine.runner import load_exercise_function, run_case
    from grader.runtimes import get_runtime
    from grader.tasks import load_task
    wrong = edited_solution(tmp_path, "wrong.py", "for (int j = 0; j < n_k - 1; ++j) acc += ")
    case = next(c for c in load_task(EX).CASES if c.name == "tiny")
    rt = get_runtime("cpu")
    for path, told in ((paths.solution_file(EX.id), []), (wrong, ["explaining"])):
        calls = []
        result = run_case(EX, case, load_exercise_function(EX, path), rt, 1, path,
                          on_explain=lambda: calls.append("explaining"))
        assert calls == told and result.passed == (not told)


def test_the_next_todo_named_is_the_lowest_number_left_not_the_first_in_the_file(monkeypatch):
    """In module 14's file TODO(7)'s code comes before TODO(2)'s: a student who has written TODO(1)
    is told TODO(2) next, and which TODOs are written."""
    from grader import paths
    from grader.engine import runner
    ex = catalogue.resolve("14")
    monkeypatch.setattr(runner, "untouched", lambda ex, path: [7, 2, 3, 4, 5, 6, 8])   # the stub's order
    text = runner.not_implemented_message(ex, paths.exercise_file(ex.id))
    assert "Next: TODO(2) (" in text and "then TODO(3), TODO(4), TODO(5), TODO(6), TODO(7), TODO(8)," in text
    assert "checks what you wrote (TODO(1)) once they do" in text
    monkeypatch.setattr(runner, "untouched", lambda ex, path: [1, 2, 3, 4, 5, 6, 7, 8])
    assert "Fill in TODO(1) (" in runner.not_implemented_message(ex, paths.exercise_file(ex.id))


def test_a_failure_mid_way_names_the_todos_still_as_the_stub_has_them(tmp_path, monkeypatch):
    """Module 14 with only TODO(1) written hangs at its correct wait for a release that TODO(6) makes:
    the message says which TODOs are not written yet. A finished file gets no such note."""
    from grader import paths
    from grader.engine import runner
    ex = catalogue.resolve("14")
    monkeypatch.setattr(runner, "untouched", lambda ex, path: [7, 2, 3, 4, 5, 6, 8])
    note = runner.todos_left(ex, paths.exercise_file(ex.id))
    assert "still has TODO(2), TODO(3), TODO(4), TODO(5), TODO(6), TODO(7), TODO(8) as the stub has them" in note
    monkeypatch.setattr(runner, "untouched", lambda ex, path: [])
    assert runner.todos_left(ex, paths.solution_file(ex.id)) == ""
    monkeypatch.undo()
    wrong = edited_solution(tmp_path, "wrong.py", "for (int j = 0; j < n_k - 1; ++j) acc += ")
    assert runner.untouched(EX, wrong) == [] and runner.todos_left(EX, wrong) == ""


def test_an_explanation_past_its_allowance_is_the_graders_time_not_a_hang():
    """A case whose kernel failed and whose explanation then runs long is stopped as the grader's
    overrun: its verdict is a wrong output, never a kernel that did not finish."""
    from grader.engine import check
    now = [0.0]
    watch = check._Watch(10.0, {"a": {}}, None, clock=lambda: now[0])
    watch.handle({"event": "start", "case": "a"})
    assert not watch.explaining
    watch.handle({"event": "explore", "case": "a"})
    assert watch.explaining
    now[0] = 10.0 + 1
    assert not watch.expired()                          # the allowance, not the case's 10 s
    now[0] = check.SHRINK_ALLOWANCE + 10.0 + 1
    assert watch.expired()
    watch.handle({"event": "start", "case": "b"})
    assert not watch.explaining


def test_a_gpu_pass_is_confirmed_on_every_case_it_ran(monkeypatch, tmp_path):
    """One verdict everywhere: a GPU pass runs every case it ran again on the emulator (blind batch 34's
    08 read a mask row past the end only in a case outside the few smallest, and passed on a GPU)."""
    from grader.engine import check
    from grader.engine.runner import CaseResult
    from grader.runtimes.cpu import build
    from grader.tasks import load_task
    ex = catalogue.resolve("10")
    cases = load_task(ex).CASES
    ordered = [CaseResult(c.name, True, params=dict(c.params)) for c in cases]
    asked = {}

    def fake_run_check(ex_, path, backend, seed, cases=None, **kw):
        asked.update(backend=backend, cases=cases)
        return {"cases": [CaseResult(n, True).to_json() for n in cases], "error": None}
    monkeypatch.setattr(check, "run_check", fake_run_check)
    monkeypatch.setattr(build, "find_compiler", lambda: "c++")
    note = check.confirm_on_emulator(ex, tmp_path / "k.py", 7, ordered, None, None)
    assert asked == {"backend": "cpu", "cases": [c.name for c in cases]}
    assert note.startswith(f"confirmed on the CPU emulator on every case the GPU ran ({len(cases)}")


def test_a_gpu_failure_takes_an_earlier_case_that_only_the_emulator_fails(monkeypatch, tmp_path):
    """One verdict everywhere: blind batch 42's 00 (an in-place softmax race) passed its one-row case on a
    GPU, whose lockstep warp hid the race, and failed a later one; the emulator fails the one-row case.
    The GPU's check then fails that case too, with the emulator's report: the CPU's first failing case."""
    from grader.engine import check
    from grader.engine.runner import CaseResult
    from grader.runtimes.cpu import build
    from grader.tasks import load_task
    ex = catalogue.resolve("00")
    first, second = load_task(ex).CASES[:2]
    ordered = [CaseResult(first.name, True, params=dict(first.params)),
               CaseResult(second.name, False, params=dict(second.params), message="o: relative error 0.5")]

    def fake_run_check(ex_, path, backend, seed, cases=None, **kw):
        return {"cases": [CaseResult(n, False, message=f"o: wrong in {n}").to_json() for n in cases], "error": None}
    monkeypatch.setattr(check, "run_check", fake_run_check)
    monkeypatch.setattr(build, "find_compiler", lambda: "c++")
    note = check.confirm_on_emulator(ex, tmp_path / "k.py", 7, ordered, None, None)
    assert not ordered[0].passed and ordered[0].kind == "checked"
    assert ordered[0].message.startswith("passes on the GPU, and fails on the CPU emulator with the same inputs")
    assert f"o: wrong in {first.name}" in ordered[0].message
    assert note.startswith(f"case {first.name} passed on the GPU and fails on the CPU emulator"), note


def test_a_gpu_failure_puts_the_cases_it_could_not_run_in_place_from_the_emulator(monkeypatch, tmp_path):
    """One verdict everywhere: blind batch 44's 12 failed a three-rank case first on the CPU; two GPUs cannot
    run it, and failed a later case. On a GPU failure too the emulator plays the cases the machine could
    not run, and its verdict on them is the check's, in their place."""
    from grader.engine import check
    from grader.engine.runner import NOT_RUN_HERE, CaseResult
    from grader.runtimes.cpu import build
    from grader.tasks import load_task
    ex = catalogue.resolve("12")
    three, later = (next(c for c in load_task(ex).CASES if c.params["P"] == 3),
                    next(c for c in load_task(ex).CASES if c.params["P"] == 2))
    ordered = [CaseResult(three.name, False, params=dict(three.params), kind="not_run",
                          message=NOT_RUN_HERE + "this case runs 3 ranks"),
               CaseResult(later.name, False, params=dict(later.params), message="dk: relative error 0.9")]
    asked = {}

    def fake_run_check(ex_, path, backend, seed, cases=None, **kw):
        asked["cases"] = cases
        return {"cases": [CaseResult(n, False, message=f"dk: wrong in {n}").to_json() for n in cases], "error": None}
    monkeypatch.setattr(check, "run_check", fake_run_check)
    monkeypatch.setattr(build, "find_compiler", lambda: "c++")
    check.confirm_on_emulator(ex, tmp_path / "k.py", 7, ordered, None, None)
    assert set(asked["cases"]) == {three.name, later.name}
    assert not ordered[0].passed and ordered[0].kind == "checked", ordered[0]
    assert ordered[0].message.startswith("run on the CPU emulator, which plays every rank")
    assert f"dk: wrong in {three.name}" in ordered[0].message


def test_a_gpu_crash_is_replayed_on_the_emulator_as_the_cpus_check_runs_it(monkeypatch, tmp_path):
    """Blind batch 44's 05 crashed on a GPU and gave wrong numbers on the emulator, whose first divergence
    names the line only when the failure is shrunk and traced: the replay of a crash is, as the CPU's
    check is (a timeout's already was)."""
    from grader.engine import check
    from grader.engine.runner import CaseResult
    from grader.runtimes.cpu import build
    ex = catalogue.resolve("05")
    asked = {}

    def fake_run_check(ex_, path, backend, seed, cases=None, **kw):
        asked.update(kw, backend=backend)
        return {"cases": [CaseResult(cases[0], False, message="o: wrong\nobserved: first divergence at line 161").to_json()]}
    monkeypatch.setattr(check, "run_check", fake_run_check)
    monkeypatch.setattr(build, "find_compiler", lambda: "c++")
    said = check.cpu_replay(ex, tmp_path / "k.py", 7, CaseResult("pages_in_order", False, kind="crash"), None)
    assert asked["backend"] == "cpu" and asked["shrink"] is True, asked
    assert said.startswith("\nThe same case on the CPU emulator (seed 7):") and "line 161" in said, said


def test_a_gpu_cause_is_settled_again_with_the_cases_only_the_emulator_ran(monkeypatch, tmp_path):
    """Blind batch 45's 12 on two GPUs: every two-rank case reproduced ring:pairs, which two four-rank cases
    (failing on the CPU) did not, so the CPU stated no cause and the GPU stated it. The cases the GPU
    could not run now take part in settling the GPU's cause too; what followed the cause's line stays."""
    from grader.engine import check
    from grader.engine.runner import NOT_RUN_HERE, CaseResult
    from grader.engine.verdict import settle
    from grader.runtimes.cpu import build
    from grader.tasks import load_task
    ex = catalogue.resolve("12")
    two, four = (next(c for c in load_task(ex).CASES if c.params["P"] == p and c.params["causal"]) for p in (2, 4))
    pairs = [["ring:pairs", "the ring combined the wrong blocks"]]
    ordered = [CaseResult(two.name, False, params=dict(two.params), message="o: relative error 1.2",
                          candidates=pairs),
               CaseResult(four.name, False, params=dict(four.params), kind="not_run",
                          message=NOT_RUN_HERE + "this case runs 4 ranks")]
    settle(ordered)
    ordered[0].message += "\nobserved: first divergence at line 66"
    assert ordered[0].cause == "ring:pairs"

    def fake_run_check(ex_, path, backend, seed, cases=None, **kw):
        return {"cases": [CaseResult(two.name, False, message="o: wrong", candidates=pairs).to_json(),
                          CaseResult(four.name, False, message="o: wrong too").to_json()], "error": None}
    monkeypatch.setattr(check, "run_check", fake_run_check)
    monkeypatch.setattr(build, "find_compiler", lambda: "c++")
    check.confirm_on_emulator(ex, tmp_path / "k.py", 7, ordered, None, None)
    assert ordered[0].cause is None and "likely cause" not in ordered[0].message, ordered[0].message
    assert "\nobserved: first divergence at line 66\n" in ordered[0].message
    assert not ordered[1].passed and ordered[1].kind == "checked"


def test_a_refused_launch_names_the_line_that_launched_it(tmp_path):
    """A scalar of the wrong type (blind batch 40: the scale passed as rt.int32) is refused before the
    kernel runs; the message names the student's launch, on either backend (check_args is shared)."""
    from grader import paths
    ex = catalogue.resolve("00_naive_attention")
    text = paths.committed_text(paths.solution_file(ex.id))
    assert "rt.float32(scale)" in text, "the solution changed: update this test's edit"
    f = tmp_path / "int_scale.py"
    f.write_text(text.replace("rt.float32(scale)", "rt.int32(scale)", 1))
    report = run_check(ex, f, "cpu", seed=7, cases=["one_query_one_key"], shrink=False)
    message = report["cases"][0]["message"]
    assert "expects float32, but the launch passed int32" in message, message
    assert re.search(r"launched at int_scale\.py:\d+\n\s+line \d+: ", message), message


def test_the_smallest_failing_shape_says_which_one_change_makes_it_pass(tmp_path):
    """A second key tile's bug (S not zeroed per tile): Nk = 65 fails, Nk = 64 passes, and the
    grader says so, naming only the nearest passing value of each key."""
    from pathlib import Path
    path = Path(__file__).parent / "blind" / "02_flash_forward" / "scores_zeroed_once_b41.py"
    r = run_check(catalogue.resolve("02"), path, "cpu", 3, cases=["tile_plus_1"])
    shrunk = r["cases"][0]["shrunk"]
    assert shrunk and "Nk=65" in shrunk["shape"]
    line = next(x for x in shrunk["message"].splitlines() if "passes with any one of these changes" in x)
    assert "Nk=64 (not 65)" in line and "Nk=1 " not in line


def test_clean_passes_drop_near_misses_and_keep_the_nearest_value():
    from grader.engine.runner import CaseResult, clean_passes
    failing = {"Nk": 65, "d": 32, "causal": True}
    fail = CaseResult("custom", False, rel_err=1e-3)
    tried = [({"Nk": 1, "d": 32, "causal": True}, CaseResult("custom", True, rel_err=1e-8)),
             ({"Nk": 64, "d": 32, "causal": True}, CaseResult("custom", True, rel_err=1e-8)),
             ({"Nk": 65, "d": 16, "causal": True}, CaseResult("custom", True, rel_err=5e-5)),     # a near miss
             ({"Nk": 65, "d": 32, "causal": False}, CaseResult("custom", False, rel_err=1e-3))]
    assert clean_passes(failing, fail, tried) == [{"Nk": 64, "d": 32, "causal": True}]


def test_a_cp_async_read_by_another_warp_before_a_barrier_is_named_with_both_lines():
    """Blind kernel b42 (module 13): __syncwarp where the first stage needs __syncthreads, so a warp's
    ldmatrix reads q rows another warp's cp.async wrote. The emulator notes where each copy landed and
    the barriers passed since, and names the kernel lines that called the copy, its wait and the read."""
    from pathlib import Path
    path = Path(__file__).parent / "blind" / "13_decode_tensor_cores" / "first_stage_syncwarp_b42.py"
    r = run_check(catalogue.resolve("13"), path, "cpu", 3, cases=["gqa_16_page_size_32"], shrink=False)
    message = r["cases"][0]["message"]
    assert message.startswith("first_stage_syncwarp_b42.py:84: decode_partial<64, 1>: ldmatrix"), message
    assert "(called from first_stage_syncwarp_b42.py:303)" in message, message        # the q copy
    assert "called from first_stage_syncwarp_b42.py:189" in message, message          # the read of q
    assert "this warp has passed no block barrier (__syncthreads()) since the copy landed" in message


def test_blocks_that_store_over_each_other_fail_a_case_whose_numbers_are_right(tmp_path):
    """Module 04's combine with its lane guard off by one where a row's context is empty: lane d / 4
    zeroes 4 floats of the next row, which that row's block, run later, writes again. The numbers
    come out right in launch order; the emulator's rerun, last block first, shows the overlap."""
    from pathlib import Path
    right = "        if (4 * lane < d) reinterpret_cast<float4*>(o + row * d)[lane] = make_float4(0.f, 0.f, 0.f, 0.f);"
    text = (Path(__file__).parents[1] / "solutions" / "04_splitkv_decode.py").read_text()
    assert text.count(right) == 1
    path = tmp_path / "combine_guard.py"
    path.write_text(text.replace(right, right.replace("4 * lane < d", "4 * lane <= d")))
    case = run_check(catalogue.resolve("04"), path, "cpu", 1, cases=["contexts_0_1_2_5"], shrink=False)["cases"][0]
    assert not case["passed"] and case["kind"] == "error", case
    assert "depends on the order in which the blocks run" in case["message"] and "float* o" in case["message"]


def test_a_bulk_reduction_never_committed_whose_source_is_rewritten_is_named():
    """Blind kernel b48 (module 14): no bulk_commit() after dQ's bulk reduction, so the wait that
    follows covers nothing, the part is handed back and rewritten while the reduction may still read
    it. The thread's next bulk instruction names the uncommitted one and the call that issued it."""
    from pathlib import Path
    path = Path(__file__).parent / "blind" / "14_backward_hopper" / "bwd_hopper_reduce_uncommitted_b48.py"
    r = run_check(catalogue.resolve("14"), path, "cpu", 3, cases=["tile_plus_1"], shrink=False)
    message = r["cases"][0]["message"]
    assert "was never committed (no cp.async.bulk.commit_group after it)" in message, message
    assert "called from bwd_hopper_reduce_uncommitted_b48.py:287" in message, message


def test_a_tiles_case_sets_the_files_tile_sizes_around_the_call_and_restores_them():
    from grader.attention.calls import case_tiles, tiles_of
    from grader.attention.replays import kernel_config
    g = {"CONFIG": dict(BLOCK_M=64, BLOCK_N=64, TM=4)}
    seen = []
    fn = eval("lambda: seen.append(dict(CONFIG))", g | {"seen": seen})
    with tiles_of(fn, {"tiles": "64x32"}):
        fn()
    assert seen == [dict(BLOCK_M=64, BLOCK_N=32, TM=4)] and fn.__globals__["CONFIG"]["BLOCK_N"] == 64
    with pytest.raises(ZeroDivisionError), tiles_of(fn, {"tiles": "32x64"}):
        1 / 0
    assert fn.__globals__["CONFIG"] == dict(BLOCK_M=64, BLOCK_N=64, TM=4)      # restored after a raise too
    assert case_tiles({"d": 32}) == {} and case_tiles({"tiles": "32x64"}) == {"BLOCK_M": 32, "BLOCK_N": 64}
    assert kernel_config(g["CONFIG"], {"tiles": "64x32"})["BLOCK_N"] == 32     # the replays see the case's
