"""The first divergence: a failure no replay explains is traced on the emulator against the finished
version, and the report says where the two first part, with the line (engine/diverge.py,
runtimes/cpu/trace.py). Each kernel here carries a bug no replay family holds."""
import json
from pathlib import Path

import pytest

from grader import catalogue, paths
from grader.engine.check import run_check

EX = catalogue.resolve("02_flash_forward")

ROOT = Path(__file__).resolve().parents[1]


def planted(tmp_path, old, new, name, ex=EX):
    text = paths.committed_text(paths.solution_file(ex.id))
    assert old in text, "the solution changed: update this test's edit"
    f = tmp_path / name
    f.write_text(text.replace(old, new, 1))
    line = next(i for i, t in enumerate(f.read_text().splitlines(), 1) if new.splitlines()[0] in t)
    return f, line


@pytest.fixture(autouse=True)
def tracing(monkeypatch):
    # conftest.py turns it off for the rest of the suite; unset, it is on (the default), and the check's
    # child, run from the repository's root, must not read tests/conftest.py and turn it off again.
    monkeypatch.delenv("GRADER_TRACE")
    monkeypatch.chdir(ROOT)


def first_failure(path, case, ex=EX):
    report = run_check(ex, path, "cpu", 7, cases=[case])
    return next(c for c in report["cases"] if not c["passed"])


@pytest.mark.slow
def test_a_block_reading_another_kv_head_is_traced_to_its_load(tmp_path):
    f, _ = planted(tmp_path, "const float* k_bh = k + (size_t)(b * H_kv + h_kv) * n_k * D;",
                   "const float* k_bh = k + (size_t)(b * H_kv + (H_kv - 1 - h_kv)) * n_k * D;", "k_head.py")
    text = f.read_text()
    load = next(i for i, t in enumerate(text.splitlines(), 1) if "k_bh + (size_t)(kv_start + j) * D" in t)
    case = first_failure(f, "below_tile")          # H = Hkv = 2
    assert case["cause"] is None
    said = case["divergence"]
    assert said and "first divergence" in said and f"line {load}" in said, said
    assert "k[0, 1," in said and "k[0, 0," in said, said      # the head it reads, the head it should


@pytest.mark.slow
def test_a_value_bug_in_shared_memory_names_the_barrier_and_the_store(tmp_path):
    f, line = planted(tmp_path, "make_float4(s[0][n], s[1][n], s[2][n], s[3][n]);",
                      "make_float4(s[0][n], s[1][n], s[3][n], s[2][n]);", "p_rows.py")
    case = first_failure(f, "tiny")
    said = case["divergence"]
    assert said and "__syncthreads()" in said and "shared memory differs" in said, said
    assert f"line {line - 1}" in said or f"line {line}" in said, said     # the store of P into p_s


def test_without_a_finished_version_the_trace_is_skipped_and_says_so(tmp_path, monkeypatch):
    from grader.engine import diverge
    from grader.spec import Case

    def missing(ex_id, feature):
        from grader.errors import GraderError
        raise GraderError("no solution here")
    monkeypatch.setattr("grader.release.solution_path", missing)
    assert diverge.first_divergence(EX, None, Case("tiny", {}), 7) == diverge.NO_SOLUTION


def test_a_source_put_together_from_pieces_is_cited_at_the_students_lines(tmp_path):
    from grader.runtimes.base import generated_lines, line_text, placed, register_origin
    f = tmp_path / "pieces.py"
    body = "\n".join(f"int line_{i} = {i};" for i in range(10))
    f.write_text(f'KERNEL = r"""\n{body}\n@HELPERS@\n{body.replace("line_", "after_")}\n"""\n')
    register_origin(f)
    text = f.read_text()
    source = text.split('r"""', 1)[1].split('"""')[0].replace("@HELPERS@", "int gen_a;\nint gen_b;\nint gen_c;")
    out = placed(source)
    assert '#line 2 "pieces.py"' in out and '"pieces.py@12"' in out, out
    assert line_text(source, 14) == "int after_1 = 1;"
    assert generated_lines("pieces.py@12:2: boom") == "pieces.py:12 (line 2 of the code generated in place of line 12): boom"


@pytest.mark.slow
def test_a_row_stored_by_another_thread_names_the_store_and_the_finished_versions_thread(tmp_path):
    ex = catalogue.resolve("03_flash_causal")
    f, line = planted(tmp_path, "const int i = q_start + ty * TM + r;\n        if (i < n_q) {\n            const float inv_l",
                      "const int i = q_start + ty + r * (BLOCK_M / TM);\n        if (i < n_q) {\n            const float inv_l",
                      "rows.py", ex)          # the epilogue's rows only
    said = first_failure(f, "tiny", ex)["divergence"]      # an lse of -inf in the row with no key
    assert said and "the first stored value that differs" in said, said
    assert "in the finished version, thread 0 of block (0, 0, 0) stores it" in said, said


@pytest.mark.slow
def test_an_element_two_blocks_store_is_named_with_both_blocks_and_the_line(tmp_path):
    ex = catalogue.resolve("07_varlen_prefill")
    f, line = planted(tmp_path, "lse[(size_t)h * total_q + q_begin + i]", "lse[(size_t)h * total_q + i]",
                      "lse_rows.py", ex)
    case = first_failure(f, "lengths_0_and_1", ex)
    assert case["kind"] == "error" and "depends on the order in which the blocks run" in case["message"]
    said = case["divergence"]
    assert said and "is stored by two blocks" in said and f"both at line {line}" in said, said


@pytest.mark.slow
def test_a_gpu_failure_with_no_cause_takes_the_emulators_cause(tmp_path):
    """A GPU returns one canonical NaN, so the grader's poison loses its payload there and a replay
    that needs it cannot tell which elements nothing wrote; the emulator's run of the case can."""
    from grader.engine.check import confirm_on_emulator
    from grader.engine.runner import CaseResult, select_cases
    ex = catalogue.resolve("00_naive_attention")
    f, _ = planted(tmp_path, "scores_grid = (cdiv(n_k, 16), cdiv(n_q, 16), B * H)",
                   "scores_grid = (cdiv(n_q, 16), cdiv(n_k, 16), B * H)", "grid.py", ex)
    cpu = run_check(ex, f, "cpu", 7, shrink=False)
    first = next(c for c in cpu["cases"] if not c["passed"])
    assert first["cause"] == "grid:scores_xy_swapped"
    gpu_said = "o: 12 NaN/Inf values computed where the answer is finite\nno replayed bug reproduces this error."
    ordered = []
    for c in select_cases(ex, None, None):
        failed = c.name == first["name"]
        ordered.append(CaseResult(c.name, not failed, params=dict(c.params), kind="checked",
                                  message=gpu_said if failed else ""))
        if failed:
            break
    confirm_on_emulator(ex, f, 7, ordered, None, None)
    r = ordered[-1]
    assert r.cause == "grid:scores_xy_swapped" and not r.passed
    assert "the same case fails on the CPU emulator too (seed 7)" in r.message and "likely cause:" in r.message
    assert "no replayed bug reproduces" not in r.message


@pytest.mark.slow
def test_a_gpu_failure_the_emulator_passes_says_so_instead_of_advising_the_emulator():
    """Blind batch 37 on an H200: a GPU failure that no replay explained kept the advice to run
    `--backend cpu`, though the check had just run the same case there. What that run found is said."""
    from grader.engine.check import confirm_on_emulator
    from grader.engine.runner import CaseResult, select_cases
    ex = catalogue.resolve("00_naive_attention")
    gpu_said = "o: relative error 0.5 > 2e-05\nno replayed bug reproduces this error. On a GPU ..."
    first = select_cases(ex, None, None)[0]
    ordered = [CaseResult(first.name, False, params=dict(first.params), kind="checked", message=gpu_said)]
    from grader import paths
    confirm_on_emulator(ex, paths.solution_file(ex.id), 7, ordered, None, None)
    r = ordered[0]
    assert not r.passed and "no replayed bug reproduces" not in r.message, r.message
    assert "the same case passes on the CPU emulator (seed 7), where no data race" in r.message, r.message


@pytest.mark.slow
def test_a_bug_a_replay_names_also_gets_its_place(tmp_path):
    # lse without the running max: a replay states the cause in words ("lse:no_max"); the first
    # divergence adds where: the store of lse, with its line.
    f, line = planted(tmp_path, "lse[(size_t)(b * H + h) * n_q + i] = (m[r] + log2f(l_row)) * M_LN2_F;",
                      "lse[(size_t)(b * H + h) * n_q + i] = log2f(l_row) * M_LN2_F;", "lse_no_max.py")
    case = first_failure(f, "tiny")
    assert case["cause"] == "lse:no_max", case["message"]
    said = case["divergence"]
    assert said and f"line {line}" in said, case["message"]
    assert "likely cause:" in case["message"] and f"line {line}" in case["message"], case["message"]


@pytest.mark.slow
def test_a_thread_that_stops_early_is_placed_at_its_reads(tmp_path):
    # The edge test against n_q instead of n_k: with Nq < Nk, the threads of keys past Nq read no
    # element of k. The observation names the line where the launch's other threads read k.
    ex = catalogue.resolve("00")
    f, guard = planted(tmp_path, "if (i >= n_q || j >= n_k) return;", "if (i >= n_q || j >= n_q) return;",
                       "key_bound.py", ex)
    read = next(i for i, t in enumerate(f.read_text().splitlines(), 1) if "dot += q_i[c] * k_j[c]" in t)
    case = first_failure(f, "tiny", ex)
    said = case["divergence"]
    assert said and "stops after" in said and f"line {read}" in said, case["message"]


@pytest.mark.slow
def test_a_grid_unlike_the_finished_versions_is_placed_at_its_launch(tmp_path):
    ex = catalogue.resolve("00")
    f, _ = planted(tmp_path, "output_grid = (cdiv(d, 16), cdiv(n_q, 16), B * H)",
                   "output_grid = (cdiv(d, 16), cdiv(n_q, 16), B * H_kv)", "grid_z.py", ex)
    launch = next(i for i, t in enumerate(f.read_text().splitlines(), 1) if "output(output_grid, block2d" in t)
    case = first_failure(f, "gqa_4_to_1", ex)
    said = case["divergence"]
    assert said and "runs grid" in said and f"launched at line {launch}" in said, case["message"]


def test_arrays_only_one_version_passes_are_left_out_and_said():
    from grader.runtimes.cpu.trace import LaunchTrace, _slot_pairs, _unseen
    mine = LaunchTrace("k", (1, 1, 1), (32, 1, 1), [("q", (4,), 4), ("o", (4,), 4)], None, {}, False,
                       maps=("k_map",))
    theirs = LaunchTrace("k", (1, 1, 1), (32, 1, 1), [("q", (4,), 4), ("work", (1,), 4), ("o", (4,), 4)],
                         None, {}, False)
    assert _slot_pairs(mine, theirs) == [(0, 0), (1, 2)]
    said = _unseen(mine, theirs)
    assert "work" in said and "k_map" in said, said
    assert _slot_pairs(mine, mine) == [(0, 0), (1, 1)] and _unseen(theirs, theirs) == ""


@pytest.mark.slow
def test_varlen_gets_its_place_past_its_refused_inputs(tmp_path):
    # Module 07's last cases pass by refusing broken offsets (no o, no lse). Asking them which replays
    # they refute raised a KeyError in the check's child after its last case, so no 07 check ever
    # traced its first divergence.
    ex = catalogue.resolve("07")
    f, _ = planted(tmp_path, "const int kv_end = causal ? min(n_k, q_last + offset + 1) : n_k;",
                   "const int kv_end = causal ? min(n_k, q_last + 1) : n_k;", "kv_end.py", ex)
    report = run_check(ex, f, "cpu", 7)
    first = next(c for c in report["cases"] if not c["passed"])
    assert first["divergence"] and "first divergence" in first["divergence"], first["message"]
    assert all(c["passed"] for c in report["cases"] if c["name"].startswith("bad_")), report["cases"]


@pytest.mark.slow
def test_a_gpu_pass_that_the_emulator_fails_fails(tmp_path):
    """Same inputs, right on a GPU and wrong on the emulator (a race or a read past an array that the
    GPU happened to get right): the check's verdict is the emulator's, with its report, as on the CPU."""
    from grader.engine.check import confirm_on_emulator
    from grader.engine.runner import CaseResult, select_cases
    ex = catalogue.resolve("00_naive_attention")
    f, _ = planted(tmp_path, "scores_grid = (cdiv(n_k, 16), cdiv(n_q, 16), B * H)",
                   "scores_grid = (cdiv(n_q, 16), cdiv(n_k, 16), B * H)", "grid.py", ex)
    ordered = [CaseResult(c.name, True, params=dict(c.params)) for c in select_cases(ex, None, None)]
    note = confirm_on_emulator(ex, f, 7, ordered, None, None)
    failed = [r for r in ordered if not r.passed]
    assert len(failed) == 1, [r.name for r in failed]
    r = failed[0]
    assert r.message.startswith("passes on the GPU, and fails on the CPU emulator with the same inputs"), r.message
    assert r.cause == "grid:scores_xy_swapped", r.cause
    assert note.startswith(f"case {r.name} passed on the GPU and fails on the CPU emulator"), note


@pytest.mark.slow
def test_a_gpu_pass_runs_the_cases_this_machine_has_too_few_gpus_for_on_the_emulator(tmp_path):
    """Module 12 on one GPU runs only its one-rank case: a race between a rank's streams (the compute
    stream not waiting for the receive) passed there. The emulator plays every rank, and its verdict
    on the cases the GPU could not run is the check's."""
    from grader.engine.check import confirm_on_emulator
    from grader.engine.runner import NOT_RUN_HERE, CaseResult, select_cases
    ex = catalogue.resolve("12_ring_attention")
    f, _ = planted(tmp_path, "    ring.compute.wait_event(arrived)\n", "\n", "no_wait.py", ex)
    cases = select_cases(ex, ["one_rank", "two_ranks"], None)
    ordered = [CaseResult(c.name, c.params["P"] == 1, params=dict(c.params),
                          kind="checked" if c.params["P"] == 1 else "not_run",
                          message="" if c.params["P"] == 1 else NOT_RUN_HERE + "this case runs 2 ranks")
               for c in cases]
    note = confirm_on_emulator(ex, f, 7, ordered, None, None)
    one, two = ordered
    assert one.passed and not two.passed and two.kind != "not_run", two
    assert two.message.startswith("run on the CPU emulator, which plays every rank"), two.message
    assert "two_ranks" in note and "too few GPUs" in note


@pytest.mark.slow
def test_an_ordering_fault_cites_the_wait_that_let_the_thread_through(tmp_path):
    """The thread adding dQ waits on dq_full with the empty barriers' parity (blind batch 23): the wait
    returns at once, and the fault, reported where the bulk reduction's source was rewritten, names
    that wait by the student's line that called it."""
    ex = catalogue.resolve("14_backward_hopper")
    f, line = planted(tmp_path, "mbar_wait(dq_full(c), it & 1);", "mbar_wait(dq_full(c), (it & 1) ^ 1);",
                      "dq_full_parity.py", ex)
    case = first_failure(f, "tiny", ex)
    assert case["kind"] == "error"
    assert (f"last passed the mbarrier wait at dq_full_parity.py:" in case["message"]
            and f"(called from dq_full_parity.py:{line}) (parity 1" in case["message"]), case["message"]
    assert "a wait on parity 1 of a barrier that has completed no phase returns at once" in case["message"]


@pytest.mark.slow
def test_an_access_inside_a_helper_is_placed_at_the_students_call(tmp_path):
    """dQ's atomics in module 11 go through atomicAdd (the emulator's own header) inside the solution's
    helper atomic_add2: the place said is the student's line, with the helper's call site, never a
    line of the emulator's header given as if it were theirs (blind batch 23 was told "line 49")."""
    ex = catalogue.resolve("11_backward_tensor_cores")
    f, _ = planted(tmp_path, "const int i = m_start + mq * 16 + g + 8 * r;",
                   "const int i = m_start + warp * 16 + g + 8 * r;", "dq_rows.py", ex)
    text = f.read_text().splitlines()
    add = next(i for i, t in enumerate(text, 1) if "atomicAdd(reinterpret_cast<float2*>(dst)" in t)
    call = next(i for i, t in enumerate(text, 1) if "atomic_add2(" in t and "__device__" not in t)
    case = first_failure(f, "tiny", ex)
    said = case["divergence"]
    assert said and f"at line {add} `atomicAdd(" in said and f"(in `atomic_add2`, called at line {call} `" in said, said


@pytest.mark.slow
def test_a_read_of_a_copy_in_flight_cites_the_issuing_threads_last_wait(tmp_path):
    """Module 06's main loop waiting with cp.async.wait_group 1 (blind batch 23): the read is reported
    at the ldmatrix, and the issuing thread's last wait is named by the student's line that called it,
    with its N."""
    ex = catalogue.resolve("06_flash_tensor_cores")
    text = paths.committed_text(paths.solution_file(ex.id))
    loop_wait = "        cp_async_wait<0>();\n        __syncthreads();"
    assert text.count(loop_wait) == 1, "the solution's main-loop wait changed: update this test's edit"
    f, line = planted(tmp_path, loop_wait, "        cp_async_wait<1>();\n        __syncthreads();", "wait_one.py", ex)
    case = first_failure(f, "one_query_one_key", ex)
    assert case["kind"] == "error"
    assert f"(called from wait_one.py:{line}), wait_group 1: it left the 1 newest committed group(s) in flight" \
        in case["message"], case["message"]


@pytest.mark.slow
def test_a_fault_in_generated_helpers_names_the_students_call(tmp_path):
    """Module 10's wgmma helpers are code generated in place of one line (`@WGMMA_HELPERS@`): a fault in
    them (here a wgmma reading Q's ordinary stores with no proxy fence, blind batch 23) names the
    student's line that called the helper, not that placeholder alone."""
    ex = catalogue.resolve("10_flash_hopper")
    fence = '        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // wgmma reads through the async proxy\n'
    f, _ = planted(tmp_path, fence, "\n", "no_fence.py", ex)
    call = next(i for i, t in enumerate(f.read_text().splitlines(), 1) if "if (kk == 0) wgmma_s0(s, dq, dk);" in t)
    case = first_failure(f, "one_query_one_key", ex)
    assert case["kind"] == "error" and f"(in a function called from no_fence.py:{call}" in case["message"], case["message"]


@pytest.mark.slow
def test_a_read_past_an_arrays_end_keeps_its_block_and_line(tmp_path):
    """A row loop to j <= n (blind batch 24) reads one element past x's end, inside the padding that
    keeps a 1-element buffer 16-byte aligned, where no guard page faults. Keyed by block · elements, that
    element was taken for the next block's x[0, 0] ("block (0, 0, 1) reads x[0, 0]"); it is block 0's
    read past the end, at its line."""
    ex = catalogue.resolve("01_online_softmax")
    f, line = planted(tmp_path, "    for (int j = lane; j < n; j += 32)\n",
                      "    for (int j = lane; j <= n; j += 32)\n", "past_end.py", ex)
    case = first_failure(f, "one_element", ex)
    div = case["divergence"] or ""
    assert "block (0, 0, 0) reads x's element 1 (flat), outside its 1 elements" in div, div
    assert f"(line {line + 1} `merge(m, l, x_row[j]" in div and ",." not in div, div   # the read, in the loop


@pytest.mark.slow
def test_a_hang_on_an_mbarrier_counts_its_arrivals_and_names_the_last(tmp_path):
    """Every lane arrives on dq_full, whose count is one per warp (blind batch 24): the phases run ahead
    of the waits, and the block hangs at a wait. The hang says how many arrivals the barrier had, from
    how many threads, and where the last came from: the student's call."""
    ex = catalogue.resolve("14_backward_hopper")
    f, line = planted(tmp_path, "        if (lane == 0) mbar_arrive(dq_full(cw));",
                      "        mbar_arrive(dq_full(cw));", "every_lane.py", ex)
    case = first_failure(f, "tiny", ex)
    assert case["kind"] == "error" and "the block hangs" in case["message"]
    assert ("Since its init it has had 128 arrival(s), from 128 thread(s), at 4 per phase; the last by "
            "thread 255 at every_lane.py:") in case["message"], case["message"]
    assert f"(called from every_lane.py:{line})." in case["message"], case["message"]


@pytest.mark.slow
def test_a_gpu_failure_takes_the_emulators_cause_beside_a_fault_in_a_later_case(tmp_path):
    """01's row loop to j <= n (blind batch 24): on the emulator the first failing case's error is the
    replayed cause, and a later case reads past x's end (a fault). The GPU's first failure, which its
    garbage past the end kept from matching the replay, takes the emulator's cause too, not only the
    note of the later fault."""
    from grader.engine.check import confirm_on_emulator
    from grader.engine.runner import CaseResult, select_cases
    ex = catalogue.resolve("01_online_softmax")
    f, _ = planted(tmp_path, "    for (int j = lane; j < n; j += 32)\n",
                   "    for (int j = lane; j <= n; j += 32)\n", "past_end.py", ex)
    cpu = run_check(ex, f, "cpu", 7, shrink=False)
    first = next(c for c in cpu["cases"] if not c["passed"])
    assert first["name"] == "one_element" and first["cause"] == "row_bound:one_past_end"
    gpu_said = "y: relative error 0.166 > 2e-05\nno replayed bug reproduces this error."
    ordered = [CaseResult(c.name, False, params=dict(c.params), kind="checked", message=gpu_said)
               for c in select_cases(ex, None, None)]
    note = confirm_on_emulator(ex, f, 7, ordered, None, None)
    assert ordered[0].cause == "row_bound:one_past_end" and "likely cause:" in ordered[0].message
    assert "It is in case " in note and "out-of-bounds read of argument 1 (float* x)" in note, note


@pytest.mark.slow
def test_a_named_barrier_used_by_more_threads_than_its_count_is_named(tmp_path):
    """Module 14's barrier after the dS stores counted 128 threads where both consumers' 256 use it (blind
    batch 25): each warpgroup could pass alone and read the other's dS before it was stored. An H200 and
    the emulator's small cases passed it; one case on the CPU failed with wrong numbers and no place.
    The emulator now names the barrier at the first thread past its count."""
    ex = catalogue.resolve("14_backward_hopper")
    f, line = planted(tmp_path, 'asm volatile("bar.sync 1, 256;" ::: "memory");',
                      'asm volatile("bar.sync 1, 128;" ::: "memory");', "bar_count.py", ex)
    case = first_failure(f, "tiny", ex)
    assert case["kind"] == "error", case
    assert case["message"].startswith(f"bar_count.py:{line}: flash_backward_hopper: bar.sync 1, 128: thread ")
    assert "-th different thread to use barrier 1 with a count of 128" in case["message"]


def test_the_function_holding_a_line_is_found_on_one_line_too():
    """09's load4 is a whole function on one line: an access there is said 'in `load4`', with the call
    the inline chain gives (a name read from the source, above or on the line)."""
    from grader.runtimes.cpu.trace import _enclosing_function
    f = str(ROOT / "solutions" / "09_flash_backward.py")
    lines = open(f).read().splitlines()
    one = next(i for i, t in enumerate(lines, 1) if "float4 load4(" in t)
    assert _enclosing_function(f, one) == ("load4", one, one)
    f11 = str(ROOT / "solutions" / "11_backward_tensor_cores.py")
    lines = open(f11).read().splitlines()
    inside = next(i for i, t in enumerate(lines, 1) if "atomicAdd(reinterpret_cast<float2*>(dst)" in t)
    assert _enclosing_function(f11, inside)[0] == "atomic_add2"


def test_a_buffer_rewritten_before_the_other_warpgroup_read_it_is_named(tmp_path):
    """Module 14 with one dSᵀ tile where the solution alternates two (blind batch 26): a consumer that
    runs a step ahead stores its next dSᵀ over the tile the other consumer's dQ product has not read
    yet. Forward, reverse and shuffled orders keep the warpgroups in step and passed it; the greedy
    order lets one run ahead, and the first wgmma that read other values there is named."""
    ex = catalogue.resolve("14_backward_hopper")
    text = paths.committed_text(paths.solution_file(ex.id))
    edits = (("smem_addr(ds_s + (it % 2) * DS_BYTES)", "smem_addr(ds_s)"),
             ("ds_s + (it % 2) * DS_BYTES + (i / BOX)", "ds_s + (i / BOX)"))
    for old, new in edits:
        assert text.count(old) == 1, "the solution changed: update this test's edit"
        text = text.replace(old, new)
    f = tmp_path / "one_ds_tile.py"
    f.write_text(text)
    dq = next(i for i, t in enumerate(text.splitlines(), 1) if "wgmma_dq0(dq, da, db); else wgmma_dq(" in t)
    case = first_failure(f, "tile_plus_1", ex)
    assert case["kind"] == "error", case
    assert case["message"].startswith(f"one_ds_tile.py:{dq}: flash_backward_hopper: the wgmma.mma_async at "), case["message"]
    assert "read other values of its A from shared memory" in case["message"]
    assert "greedily" in case["message"]


def test_a_launch_handed_other_values_by_the_host_is_traced_to_them(tmp_path):
    """Module 12's running lse started at 0, not -inf, by the host code (blind batch 26): the first
    kernel agrees with the finished version's, the merge is handed other values. The divergence says
    which array and element, and that the difference comes from before the launch."""
    ex = catalogue.resolve("12_ring_attention")
    f, _ = planted(tmp_path, 'lse = rt.full(q.shape[:3], -np.inf, "float32")', 'lse = rt.zeros(q.shape[:3], "float32")',
                   "lse_zero.py", ex)
    case = first_failure(f, "one_rank", ex)
    said = case["divergence"] or ""
    assert "(merge_partial)" in said and "is handed other values than the finished version's" in said, said
    assert "holds 0 where the finished version's holds -inf" in said
    assert "the difference comes from the host code that fills or passes lse" in said


def test_bfloat16_outputs_are_compared_by_value():
    # NumPy keeps bfloat16 as uint16 bits: the first stored value that differs is found there too.
    import numpy as np
    from grader.runtimes.cpu.trace import _values
    bits = np.array([0x3F80, 0xC000], dtype=np.uint16)          # 1.0, -2.0 in bfloat16
    assert _values(bits).tolist() == [1.0, -2.0]
    assert _values(np.array([3, -4], dtype=np.int32)).tolist() == [3.0, -4.0]


def test_a_race_the_finder_cannot_pair_is_traced_in_both_orders():
    # 12's merge without the __syncwarp before lane 0 rewrites lse (blind batch 29): the race finder
    # does not order lanes by __syncwarp, so no pair is named; the two orders, traced, part at a line.
    from pathlib import Path
    from grader import catalogue
    from grader.engine.check import run_check
    path = Path(__file__).parent / "blind" / "12_ring_attention" / "merge_no_syncwarp_b29.py"
    report = run_check(catalogue.resolve("12"), path, "cpu", seed=7, cases=["one_rank"])
    msg = report["cases"][0]["message"]
    assert not report["passed"] and "depends on the order in which the threads" in msg
    assert "traced again forward and in reverse order: first divergence from the forward run" in msg
    assert "is stored at line 97 `o[row * d + c] =" in msg


@pytest.mark.slow
def test_a_tile_copied_to_the_wrong_place_names_the_copy_and_both_sources(tmp_path):
    ex = catalogue.resolve("06_flash_tensor_cores")
    f, _ = planted(tmp_path, "elem_t* dst = tile + swz<D>(r, c);", "elem_t* dst = tile + r * D + c;",
                   "unswizzled.py", ex)     # the copies land unswizzled; ldmatrix reads them swizzled
    said = first_failure(f, "bf16_tile_plus_1", ex)["divergence"]
    assert said and "the last write to it before that barrier is the copy at line" in said, said
    assert "called at line 163" in said and "where the finished version's copied" in said, said


def test_an_output_of_the_wrong_shape_names_the_line_that_made_it(tmp_path):
    ex = catalogue.resolve("00_naive_attention")
    f, line = planted(tmp_path, 'lse = rt.empty((B, H, n_q), "float32")', 'lse = rt.empty((B, n_q, H), "float32")',
                      "lse_shape.py", ex)
    said = first_failure(f, "tiny", ex)["message"]
    assert "output 'lse' has shape" in said and f"lse is the array made at line {line} `" in said, said


@pytest.mark.slow
def test_a_barrier_made_a_syncwarp_is_named_as_a_race_between_warps(tmp_path):
    # __syncwarp orders the lanes of one warp, so a pair of one warp is not provably a race: the finder
    # looks for a pair of two warps first (blind batch 32's 03), and names it.
    f, line = planted(tmp_path, "        __syncthreads();                     // everyone is done with k_s, v_s, p_s",
                      "        __syncwarp();                        // everyone is done with k_s, v_s, p_s",
                      "end_syncwarp.py")
    case = first_failure(f, "many_key_tiles")
    assert "data race in block" in case["message"], case["message"]
    threads = [int(t) for t in __import__("re").findall(r"thread \((\d+), 0, 0\)", case["message"])[:2]]
    assert len(threads) == 2 and threads[0] // 32 != threads[1] // 32, case["message"]


@pytest.mark.slow
def test_a_rescale_before_a_wgmma_without_its_fence_is_named(tmp_path):
    # 10's P V wgmma issued without wgmma.fence after the accumulators were rescaled (blind batch 33):
    # the emulator compares what the wait handed back with what the next wgmma accumulates into.
    ex = catalogue.resolve("10_flash_hopper")
    old = "            const unsigned v_base = smem_addr(v_s + st * KV_BYTES);\n            wgmma_fence();\n"
    f, _ = planted(tmp_path, old, "            const unsigned v_base = smem_addr(v_s + st * KV_BYTES);\n",
                   "no_fence.py", ex)
    said = first_failure(f, "head_dim_128", ex)["message"]
    assert "wgmma.mma_async accumulates into registers that ordinary instructions changed" in said, said
    assert "with no wgmma.fence since" in said, said


@pytest.mark.slow
def test_a_merge_measured_against_the_new_part_overflows_on_an_early_dominant_key(tmp_path):
    # 12's merge with the new part's lse as its reference (blind batch 33): the part merged first on
    # rank 0 holds key 1, about 150 above the rest.
    ex = catalogue.resolve("12_ring_attention")
    f, _ = planted(tmp_path, "const float m = fmaxf(lse_old, lse_new_part);", "const float m = lse_new_part;",
                   "part_reference.py", ex)
    case = first_failure(f, "early_key_dominates", ex)
    assert "on rank 0" in case["message"] and "NaN/Inf" in case["message"], case["message"]


@pytest.mark.slow
def test_a_case_too_many_ranks_for_this_machine_gets_its_place_from_the_emulator(tmp_path):
    """12's merge against the new part's lse (blind batch 33), checked on one GPU: the emulator runs the
    two-rank case, and its failure is shrunk and traced there as on the CPU, so it carries a line."""
    from grader.engine.check import confirm_on_emulator
    from grader.engine.runner import NOT_RUN_HERE, CaseResult, select_cases
    ex = catalogue.resolve("12_ring_attention")
    f, _ = planted(tmp_path, "const float m = fmaxf(lse_old, lse_new_part);", "const float m = lse_new_part;",
                   "part_reference.py", ex)
    cases = select_cases(ex, ["one_rank", "early_key_dominates"], None)
    ordered = [CaseResult(c.name, c.params["P"] == 1, params=dict(c.params),
                          kind="checked" if c.params["P"] == 1 else "not_run",
                          message="" if c.params["P"] == 1 else NOT_RUN_HERE + "this case runs 2 ranks")
               for c in cases]
    confirm_on_emulator(ex, f, 7, ordered, None, None)
    two = ordered[1]
    assert not two.passed and two.message.startswith("run on the CPU emulator"), two.message
    assert "first divergence" in two.message and "`o[row * d + c] = (w_old" in two.message, two.message


@pytest.mark.slow
def test_a_multi_rank_divergence_pairs_each_ranks_own_launches(tmp_path):
    """Module 12's ranks are threads that take turns, and a submission that moves no slice interleaves
    them otherwise than the finished version: the launches are compared rank by rank, so rank 0's second
    local attention is paired with the finished version's, and is handed another k (the slice that never
    arrived), not another q. A line of the library's kernel is said to be the library's, and a line of a
    kernel the student's own file launches is not (05's kernel, compiled once for two files that hold
    the same source, cites the first file's name)."""
    ex = catalogue.resolve("12_ring_attention")
    f, _ = planted(tmp_path, "    coming = tuple(ring.slice_in(slot[step % 2], nxt) for slot in slots)\n",
                   "    return None, None\n", "no_transfer.py", ex)
    case = first_failure(f, "two_ranks", ex)
    said = case["shrunk"]["divergence"] if case.get("shrunk") and case["shrunk"].get("divergence") else case["divergence"]
    assert said and said.startswith("on rank 0, counting its own launches:"), said
    assert "is handed other values than the finished version's: before it runs, k[" in said, said
    assert "of the kernel source that 06_flash_tensor_cores.py compiles (a library your file calls)" in said, said


def test_an_array_of_the_wrong_type_names_its_launch_and_where_it_was_made(tmp_path):
    """A float32 parameter handed a float16 array (blind batch 35's 06 made lse in q's dtype): the
    message names the line of the launch and the line that made the array, both in the student's file."""
    ex = catalogue.resolve("06_flash_tensor_cores")
    f, line = planted(tmp_path, 'lse = rt.empty((B, H, n_q), "float32")', "lse = rt.empty((B, H, n_q), q.dtype)",
                      "lse_dtype.py", ex)
    case = first_failure(f, "one_query_one_key", ex)
    assert "argument 5 (float* lse) points to float, but the launch at line " in case["message"], case["message"]
    assert f"(the array made at line {line} `lse = rt.empty((B, H, n_q), q.dtype)`)" in case["message"], case["message"]


@pytest.mark.slow
def test_a_kernel_the_students_file_launches_is_never_called_a_library(tmp_path):
    """05's kernel source is the same in a submission whose bug is in its launch code, so the build is
    shared and its lines cite the finished file's name: the line is still the student's own."""
    ex = catalogue.resolve("05_paged_decode")
    f, _ = planted(tmp_path, "             rt.float32(scale * LOG2E)))", "             rt.float32(scale)))",
                   "host_scale.py", ex)
    case = first_failure(f, "contexts_0_1_2_5", ex)
    said = json.dumps(case)
    assert "first divergence" in said and "library" not in said, said


def test_a_difference_that_untraced_writes_may_explain_is_not_blamed_on_the_host():
    """Blind batch 42's 14 (dQ's part stored unswizzled into shared memory, then reduced into dq_acc
    by a bulk copy the trace does not record): convert_dq is handed other dq_acc values, but the host
    code is not the only place they can come from."""
    from pathlib import Path
    ex = catalogue.resolve("14_backward_hopper")
    f = Path(__file__).parent / "blind" / "14_backward_hopper" / "dq_part_unswizzled_b42.py"
    case = first_failure(f, "tiny", ex)
    said = (case.get("shrunk") or {}).get("divergence") or case["divergence"] or ""
    assert "(convert_dq)" in said and "is handed other values" in said, said
    assert "comes from the host code" not in said
    assert "may come from such a write in an earlier launch, or from the host code" in said


def test_a_library_kernel_that_parts_names_the_students_call_that_ran_it():
    """Blind batch 43's 12: the ring's backward passes the global causal flag to module 11's local
    backward instead of `kind == DIAGONAL`. The first divergence is inside the library's kernel; the
    student's part is the call, so the divergence names the line of that call."""
    from pathlib import Path
    ex = catalogue.resolve("12_ring_attention")
    f = Path(__file__).parent / "blind" / "12_ring_attention" / "backward_causal_flag_passthrough_b43.py"
    case = first_failure(f, "training_step_causal_three_ranks_remainder", ex)
    said = (case.get("shrunk") or {}).get("divergence") or case["divergence"] or ""
    assert "(flash_backward_tc<64>), launched at line 339 `dq_p, dk_p, dv_p = ring.attn.backward(" in said, said
