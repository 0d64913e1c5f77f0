"""The answer must come from the submission's kernels (grader/runtimes/provenance.py): a launcher that
computes attention with the array library fails, with or without a kernel to copy it through."""
import pytest

from grader import catalogue, paths
from grader.engine.check import run_check

EX = catalogue.resolve("00_naive_attention")
CASES = ["tiny"]

# Attention in the array library, as a student with an assistant might write it.
LIBRARY = '''
def library_attention(xp, q, k, v, scale):
    g = q.shape[1] // k.shape[1]
    k, v = xp.repeat(k, g, axis=1), xp.repeat(v, g, axis=1)
    s = xp.einsum("bhid,bhjd->bhij", q, k) * scale
    m = s.max(-1, keepdims=True)
    p = xp.exp(s - m)
    l = p.sum(-1, keepdims=True)
    o = xp.ascontiguousarray(xp.einsum("bhij,bhjd->bhid", p / l, v).astype(xp.float32))
    return o, xp.ascontiguousarray((m + xp.log(l))[..., 0].astype(xp.float32))

COPY = r"""
extern "C" __global__ void copy(const float* src, float* dst, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
"""

def through(rt, src, dst):
    copy = rt.compile(COPY).get_function("copy")
    copy(((src.size + 255) // 256,), (256,), (src, dst, rt.int32(src.size)))
'''

LAUNCHERS = {
    "no_kernel": (
        "    return library_attention(rt.xp, q, k, v, scale)\n",
        "o was not computed by your kernels: your launcher returned a float32 array of shape"),
    "copied_through_a_kernel": (
        "    o_x, lse_x = library_attention(rt.xp, q, k, v, scale)\n"
        "    o, lse = rt.empty(o_x.shape), rt.empty(lse_x.shape)\n"
        "    through(rt, o_x, o); through(rt, lse_x, lse)\n"
        "    return o, lse\n",
        "copy's argument 1 (float* src) is a float32 array of shape"),
    "copied_from_rt_asarray": (
        "    o_x, lse_x = (rt.asarray(a) for a in library_attention(rt.xp, q, k, v, scale))\n"
        "    o, lse = rt.empty(o_x.shape), rt.empty(lse_x.shape)\n"
        "    through(rt, o_x, o); through(rt, lse_x, lse)\n"
        "    return o, lse\n",
        "holds numbers your launcher computed on its own and passed through rt.asarray"),
    "assigned_after_the_kernel": (
        "    o_x, lse_x = library_attention(rt.xp, q, k, v, scale)\n"
        "    o, lse = rt.empty(o_x.shape), rt.empty(lse_x.shape)\n"
        "    through(rt, o, o); through(rt, lse, lse)\n"
        "    o[...] = o_x\n"
        "    lse[...] = lse_x\n"
        "    return o, lse\n",
        "o (the float32 array of shape [1, 1, 3, 32] made by rt.empty) was changed outside your kernels: "
        "its contents changed after launch 2 (copy) and before your launcher returned"),
    "returns_an_input": (
        "    o, lse = library_attention(rt.xp, q, k, v, scale)\n"
        "    q[...] = o\n"
        "    return q, rt.asarray(lse)\n",
        "the input 'q' was changed outside your kernels: its contents changed before any kernel ran"),
}


@pytest.mark.parametrize("how", LAUNCHERS)
def test_an_answer_made_outside_the_kernels_fails_with_what_was_seen(tmp_path, how):
    body, seen = LAUNCHERS[how]
    path = tmp_path / "attempt.py"
    path.write_text(LIBRARY + "\ndef naive_attention(rt, q, k, v, scale):\n" + body)
    report = run_check(EX, path, "cpu", 1, cases=CASES, shrink=False)
    case, = report["cases"]
    assert not report["passed"] and case["kind"] == "error", case
    assert seen in case["message"]
    assert case["cause"] is None


def test_the_solution_passes_the_same_case():
    report = run_check(EX, paths.solution_file(EX.id), "cpu", 1, cases=CASES, shrink=False)
    assert report["passed"], report["cases"]
