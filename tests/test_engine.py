"""The check engine survives what a student's code can do: crash, hang, raise, corrupt inputs."""
import json

import pytest

from grader import catalogue
from grader.cli import main
from grader.engine.check import run_check

EX = catalogue.resolve("00_naive_attention")
CASES = ["one_query_one_key", "tiny"]


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
    report = run_check(EX, write(tmp_path, "    while True: time.sleep(0.01)\n"), "cpu", 1,
                       case_timeout=3, cases=CASES)
    assert report["cases"][0]["kind"] == "timeout"
    assert "did not finish within 3 s" in report["cases"][0]["message"]


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
    assert "changed its input 'q'" in report["cases"][0]["message"]


def test_zeros_never_pass_and_json_follows_the_contract(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GRADER_STATE_DIR", str(tmp_path / "state"))
    body = "    return rt.zeros(q.shape), rt.zeros(q.shape[:3])\n"
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
    report = run_check(EX, write(tmp_path, body), "cpu", 1, cases=CASES)
    case = report["cases"][0]
    assert case["kind"] == "checked" and "not implemented" not in case["message"]
    assert "whole rows of o are NaN" in case["message"]


def test_partly_unwritten_output_is_named(tmp_path):
    body = ("    o = rt.empty(q.shape, 'float32')\n    o[..., :1, :] = 0.5\n"
            "    return o, rt.zeros(q.shape[:3])\n")
    report = run_check(EX, write(tmp_path, body), "cpu", 1, cases=["tiny"])
    assert "were never written" in report["cases"][0]["message"]


def test_per_row_factor_is_named_only_when_nearly_every_row_is_scaled(tmp_path):
    from grader.attention import references as R
    scaled = ("    o, lse = R.attention(rt.to_numpy(q), rt.to_numpy(k), rt.to_numpy(v), scale)\n"
              "    o = o * (2.0 + np.arange(o.shape[2]))[:, None]\n"
              "    return rt.asarray(o.astype(np.float32)), rt.asarray(lse.astype(np.float32))\n")
    header = "from grader.attention import references as R\n"
    every = write(tmp_path, scaled)
    every.write_text(header + every.read_text())
    msg = run_check(EX, every, "cpu", 1, cases=["primes"])["cases"][0]["message"]
    assert "times a constant factor" in msg
    one = write(tmp_path, "    o0, lse0 = R.attention(rt.to_numpy(q), rt.to_numpy(k), rt.to_numpy(v), scale)\n"
                "    o0[:, :, 3] *= 2.0\n"
                "    return rt.asarray(o0.astype(np.float32)), rt.asarray(lse0.astype(np.float32))\n")
    one.write_text(header + one.read_text())
    msg = run_check(EX, one, "cpu", 1, cases=["primes"])["cases"][0]["message"]
    assert "constant factor" not in msg and "relative error" in msg
