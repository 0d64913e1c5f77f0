"""The work check: a kernel whose every case passes can still do far more than the exercise asks (a grid
of mostly idle blocks, key tiles a mask or causality leaves empty loaded anyway). Its outputs cannot
show that, and a timing would depend on the machine and its load. So, on the task's WORK_CASE (its
bench.py), the submission runs traced on the emulator, and what a GPU would pay for is counted: the
blocks each kernel launches, and the bytes of each input array its blocks read (through a tensor map
too: TMA's reads are traced, named after the map's parameter). Where these are far
from the finished version's counts (recorded in grader/data/work_counts.json) by the factors below, the
check fails on a case of its own ("work"), with the counts and, where the finished version is installed,
the first place where the two traces part (trace.py), with its line: an observation, never a cause. The counts come from the emulator, so the verdict is the same on
every machine and under any load.

GRADER_WORK=0 turns it off (the grader's own tests, which check solutions many times over).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..catalogue import Exercise
from ..errors import GraderError
from ..spec import Case

BLOCK_FACTOR = 4.0     # blocks launched by one kernel, against the finished version's (more or fewer)
IDLE_FACTOR = 2.0      # ... or this many times its blocks, half of them or more reading and writing nothing
READ_FACTOR = 1.25     # bytes read from one input array, against the finished version's (a workspace the
                       # kernel makes, a split's partial output, is a design choice and is not compared)
MIN_EXCESS_BYTES = 4096   # below this, a difference in reads is the rounding of a tile, not work
CONFLICT_SHARE = 0.05  # shared-memory wavefronts lost to bank conflicts beyond the finished version's, as a
                       # share of all its wavefronts: past this, the conflicts cost a GPU real time
MIN_CONFLICT_WAVEFRONTS = 1024
SHARED_FACTOR = 1.25   # shared-memory wavefronts (bank conflicts aside), against the finished version's
WORK_SEED = 0          # the work case's inputs (08's mask) are the same for every check, whatever its seed


def enabled() -> bool:
    return os.environ.get("GRADER_WORK", "1") != "0"


def work_case(ex: Exercise) -> Case | None:
    """The case the work is counted on: the task's WORK_CASE (a BenchCase in bench.py), or None."""
    from ..tasks import load_piece
    try:
        bench = load_piece(ex, "bench")
    except (ImportError, FileNotFoundError):
        return None
    case = getattr(bench, "WORK_CASE", None)
    return Case(case.name, dict(case.params)) if case is not None else None


def _blocks(traces: list) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in traces:
        out[t.kernel] = out.get(t.kernel, 0) + int(np.prod(t.grid))
    return out


def _idle(traces: list, kernel: str) -> int:
    """Blocks of `kernel`'s launches that read and write no element of any array argument."""
    idle = 0
    for t in traces:
        if t.kernel == kernel:
            busy = np.unique(t.records["block"][t.records["arg"] >= 0]).size
            idle += int(np.prod(t.grid)) - busy
    return idle


def _reads(traces: list) -> dict[str, int]:
    """Bytes read per array argument (by parameter name), over every launch."""
    out: dict[str, int] = {}
    for t in traces:
        r = t.records[(t.records["write"] == 0) & (t.records["arg"] >= 0)]
        for slot, (name, _, _) in enumerate(t.arrays):
            out[name] = out.get(name, 0) + int(r["size"][r["arg"] == slot].sum())
    return out


def _input_names(ex: Exercise, case: Case) -> set[str]:
    """The arrays the check hands the kernel (q, k, v, a block table, a mask, dO ...), by name."""
    from .runner import case_rng, load_task
    inputs = load_task(ex).make_inputs(case.params, case_rng(WORK_SEED, case.name))
    return {k for k, v in inputs.items() if isinstance(v, np.ndarray)}


def _heaviest_line(traces: list, name: str) -> str | None:
    """The student's line that reads the most bytes of array `name` ('line N `text`', with the line that
    called the function holding it, where there is one)."""
    from ..runtimes.cpu.trace import _where
    per: dict[str, int] = {}
    for t in traces:
        for slot, (n, _, _) in enumerate(t.arrays):
            if n != name:
                continue
            r = t.records[(t.records["write"] == 0) & (t.records["arg"] == slot)]
            for w in np.unique(r["where"]):
                if t.lines.get(int(w), "").startswith(t.student + ":"):
                    said = _where(t, int(w))
                    per[said] = per.get(said, 0) + int(r["size"][r["where"] == w].sum())
    return max(per, key=per.get) if per else None


def _mb(n: int) -> str:
    return f"{n / 1e6:.3f} MB" if n >= 100_000 else f"{n / 1e3:.1f} KB"


COUNTS_FILE = Path(__file__).resolve().parents[1] / "data" / "work_counts.json"


def counts(traces: list) -> dict:
    """What the work check compares: blocks per kernel, bytes read per array argument, and the
    shared-memory wavefronts the accesses take against those they would take without bank conflicts."""
    return {"blocks": _blocks(traces), "reads": _reads(traces), "shared": _shared(traces)}


def _shared(traces: list) -> dict[str, int]:
    lines = [x for t in traces if getattr(t, "counts", None) for x in t.counts.lines]
    return {"wavefronts": sum(x.s_wavefronts for x in lines), "ideal": sum(x.s_ideal for x in lines)}


def _shared_lines(traces: list) -> dict[str, list[int]]:
    """Per student's line (file:line): [wavefronts its shared-memory accesses take, those they would
    take without bank conflicts]."""
    per: dict[str, list[int]] = {}
    for t in traces:
        base = Path(t.student).name if getattr(t, "student", None) else None
        for x in getattr(getattr(t, "counts", None), "lines", []):
            if base and x.where.startswith(base + ":"):
                w = per.setdefault(x.where, [0, 0])
                w[0] += x.s_wavefronts
                w[1] += x.s_ideal
    return per


def _conflicted_line(traces: list) -> str | None:
    """The student's line whose shared-memory accesses lose the most wavefronts to bank conflicts,
    with how many ways they conflict."""
    per = _shared_lines(traces)
    if not per:
        return None
    where, (wave, ideal) = max(per.items(), key=lambda kv: kv[1][0] - kv[1][1])
    if wave <= ideal:
        return None
    return f"line {where.rsplit(':', 1)[1]} ({wave / ideal:.1f}-way bank conflicts: {wave} wavefronts for {ideal})"


def _busiest_shared_line(traces: list, total: int) -> str | None:
    """The student's line whose shared-memory accesses take the most wavefronts (conflicts aside),
    where it takes a quarter of `total` or more. ldmatrix's accesses count where the emulator makes
    them, not at the student's call, so a kernel of ldmatrix loads often has no such line."""
    per = _shared_lines(traces)
    if not per:
        return None
    where, (_, ideal) = max(per.items(), key=lambda kv: kv[1][1])
    return f"line {where.rsplit(':', 1)[1]} ({ideal} wavefronts)" if ideal and 4 * ideal >= total else None


def _finished_traces(ex: Exercise, case: Case) -> list | None:
    """The finished version's launches traced on `case`, or None where it is not installed (a release,
    an autograder) or its trace was cut."""
    from ..release import solution_path
    from .diverge import _traced_run
    from .runner import load_exercise_function
    try:
        sol = Path(solution_path(ex.id, "counting the work"))
    except GraderError:
        return None
    if not sol.is_file():
        return None
    traces, _ = _traced_run(ex, load_exercise_function(ex, sol), case, WORK_SEED)
    return None if not traces or any(t.cut for t in traces) else traces


def finished_counts(ex: Exercise) -> dict:
    """The finished version's counts on the task's WORK_CASE, run here (it needs solutions/ID.py)."""
    case = work_case(ex)
    traces = _finished_traces(ex, case)
    if traces is None:
        raise GraderError(f"counting the work of {ex.id} needs its finished version, solutions/{ex.id}.py")
    return {"case": case.name, **counts(traces)}


def stored_counts(ex: Exercise) -> dict | None:
    """The finished version's counts as grader/data/work_counts.json records them, for a copy of the
    course without the solutions (a student release, an autograder): the verdict is the same there."""
    import json
    if not COUNTS_FILE.is_file():
        return None
    entry = json.loads(COUNTS_FILE.read_text()).get(ex.id)
    case = work_case(ex)
    return entry if entry and case and entry["case"] == case.name else None


def write_counts() -> None:
    """Record every task's finished-version counts (tests/test_work.py says when they are stale)."""
    import json
    from .. import catalogue
    out = {i: finished_counts(catalogue.resolve(i)) for i in catalogue.IDS if work_case(catalogue.resolve(i))}
    COUNTS_FILE.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


def compare(ex: Exercise, fn) -> str | None:
    """The work check's message for `fn` (the submission's entry function), or None where it does no
    more than the factors allow (or the check cannot run here: no WORK_CASE, no finished version, or
    the submission faults on the case, which its own cases would have shown). The finished version's
    counts are the recorded ones; it runs only for a finding's first divergence (a release or an
    autograder, which ship no finished version, get the finding without it)."""
    from ..runtimes.cpu.trace import first_divergence, launch_site
    from .diverge import _student_lines, _traced_run
    case = work_case(ex)
    if case is None or not enabled():
        return None
    mine, faulted = _traced_run(ex, fn, case, WORK_SEED)
    if faulted or not mine or any(t.cut for t in mine):
        return None
    _student_lines(mine, getattr(fn, "__code__", None) and fn.__code__.co_filename)
    # The finished version's counts as recorded (tests/test_work.py keeps them fresh): its traced run
    # is needed only for the first divergence of a finding, or where nothing is recorded.
    theirs = None
    reference = stored_counts(ex)
    if reference is None:
        theirs = _finished_traces(ex, case)
        if theirs is None:
            return None
        reference = counts(theirs)
    shape = ", ".join(f"{k}={v}" for k, v in case.params.items())
    found = []
    blocks_mine, blocks_theirs = _blocks(mine), reference["blocks"]
    for kernel, n in blocks_mine.items():
        m = blocks_theirs.get(kernel) or (sum(blocks_theirs.values()) if len(blocks_mine) == 1 else None)
        site = next((launch_site(t) for t in mine if t.kernel == kernel and launch_site(t)), "")
        if m and BLOCK_FACTOR * n < m:
            found.append(f"{kernel}{f' (launched at {site})' if site else ''} runs {n} blocks, where the "
                         f"finished version's runs {m} ({m / n:.0f}× more): on a GPU most SMs would wait.")
        idle = _idle(mine, kernel) if m and n >= IDLE_FACTOR * m else 0
        # Far more blocks than the finished version's; or more, most of them idle (a grid sized in
        # rows where a block computes several).
        if m and (n > BLOCK_FACTOR * m or (idle and 2 * idle >= n)):
            advice = (" Size the grid from the rows (or tiles) each block computes." if 2 * idle >= n else "")
            found.append(f"{kernel}{f' (launched at {site})' if site else ''} runs {n} blocks, where the "
                         f"finished version's runs {m} ({n / m:.0f}×); {idle} of them read and write no "
                         f"element of any array.{advice}")
    reads_mine, reads_theirs = _reads(mine), reference["reads"]
    inputs = _input_names(ex, case) | {m for t in mine for m in t.maps}   # a tensor map reads an input
    for name, n in reads_mine.items():
        m = reads_theirs.get(name) if name in inputs else None
        if m and n > READ_FACTOR * m and n - m >= MIN_EXCESS_BYTES:
            line = _heaviest_line(mine, name)
            found.append(f"the blocks read {_mb(n)} of {name}, where the finished version's read {_mb(m)} "
                         f"({n / m:.2f}×){f'; most of it at {line}' if line else ''}.")
    mine_s, theirs_s = _shared(mine), reference.get("shared")
    if theirs_s and theirs_s["ideal"]:
        # More shared-memory accesses than the finished version's, bank conflicts aside: tiles
        # loaded or multiplied that the schedule does not need.
        if (mine_s["ideal"] > SHARED_FACTOR * theirs_s["ideal"]
                and mine_s["ideal"] - theirs_s["ideal"] >= MIN_CONFLICT_WAVEFRONTS):
            line = _busiest_shared_line(mine, mine_s["ideal"])
            found.append(f"the blocks' shared-memory accesses take {mine_s['ideal']} wavefronts (bank conflicts "
                         f"aside), where the finished version's take {theirs_s['ideal']} "
                         f"({mine_s['ideal'] / theirs_s['ideal']:.2f}×){f'; the most at {line}' if line else ''}.")
        # Bank conflicts beyond the finished version's rate: at its rate, this many accesses would
        # lose `expected` wavefronts (more accesses are the finding above, not a conflict).
        lost = mine_s["wavefronts"] - mine_s["ideal"]
        expected = mine_s["ideal"] * (theirs_s["wavefronts"] / theirs_s["ideal"] - 1)
        if lost - expected > max(CONFLICT_SHARE * theirs_s["wavefronts"], MIN_CONFLICT_WAVEFRONTS):
            line = _conflicted_line(mine)
            found.append(f"the blocks' shared-memory accesses take {mine_s['wavefronts']} wavefronts where "
                         f"{mine_s['ideal']} would do without bank conflicts; the finished version's take "
                         f"{theirs_s['wavefronts']} for {theirs_s['ideal']}"
                         f"{f'. Most are lost at {line}' if line else ''}: the lanes of a warp that hit one bank "
                         "at different addresses wait for each other (the lesson's layout, or a swizzle, spreads "
                         "them over the 32 banks).")
    if not found:
        return None
    if theirs is None:
        theirs = _finished_traces(ex, case)
    where = first_divergence(mine, theirs) if theirs else None
    return (f"every case passes, but the kernel's work is far from the finished version's on the case "
            f"{case.name} ({shape}), counted on the emulator:\n"
            + "\n".join(f"- {x}" for x in found)
            + (f"\nobserved: {where}" if where else "")
            + "\nThe outputs are right; what a GPU pays for is not. Do the work the lesson's schedule needs, "
              "over the blocks it describes.")
