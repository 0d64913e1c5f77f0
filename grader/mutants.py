"""Mutants: wrong kernels derived automatically from each solution, one small change each.

The curated wrong versions (grader/tasks/*/wrong.py) are bugs someone thought of; mutants are the
classes of bug students make, applied everywhere they can be: an off-by-one in a bound or a guard, a
dropped __syncthreads, the wrong shuffle intrinsic or offset, an index term dropped, the sign of an
exponent flipped, log2 units where natural ones are due. Each operator lists the replay ids of its
bug (grader/attention/replays.py and the tasks' checks): a mutant is named only when the cause its
check states is one of them, or, for the bugs the emulator reports itself (a race, an access out of
bounds), when that report is its first failure (grader/corpus.py's score).

    python scripts/mutate.py [IDS...] [--max-per-op N]     the full report (see that script)

Only the student's parts of a solution (between BEGIN SOLUTION and END SOLUTION) are mutated.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .corpus import EMULATOR, score
from .stubs import BEGIN, END


@dataclass(frozen=True)
class Operator:
    name: str
    cause: str                                   # the bug, in words
    pattern: re.Pattern
    replace: Callable[[re.Match], str]
    causes: tuple[str, ...]                      # the replay ids of this operator's bug ("x:" a family)
    line_filter: Callable[[str], bool] = lambda line: True


def _sub(text: str) -> Callable[[re.Match], str]:
    return lambda m: m.expand(text)


_GUARD = lambda line: bool(re.search(r"\b(if|for|while)\b|\?", line))   # noqa: E731
# A bound or guard moved by one: the replays of a loop's start or end, a mask's edge, the guard of
# a row with no key (l > 0 become l >= 0: its 1/l is inf), or the emulator's out-of-bounds report.
_BOUNDS = (EMULATOR, "keys_end:", "keys_start:", "key_tiles_end:", "split_end:", "bounds_mask:",
           "mask:diagonal_excluded", "mask:one_extra", "varlen:rows_past_end", "varlen:keys_past_end",
           "empty_rows:", "tile_skipped:", "row_bound:",
           "ring:pairs")     # 12: a block bound moved changes which (query, key) blocks a chunk combines
_LANES = (EMULATOR, "reduce:", "D:partial_lanes")

OPERATORS = (
    Operator("bound_lt_to_le", "an off-by-one in a bound or guard (< became <=)",
             re.compile(r"(?<=\s)<(?=\s)"), _sub("<="), _BOUNDS, _GUARD),
    Operator("bound_ge_to_gt", "an off-by-one in a bound or guard (>= became >)",
             re.compile(r"(?<=\s)>=(?=\s)"), _sub(">"), _BOUNDS, _GUARD),
    Operator("bound_gt_to_ge", "an off-by-one in a bound or guard (> became >=)",
             re.compile(r"(?<=\s)>(?=\s)"), _sub(">="), _BOUNDS, _GUARD),
    Operator("drop_syncthreads", "a __syncthreads() left out",
             re.compile(r"__syncthreads\(\);"), _sub("/* dropped */;"), (EMULATOR,)),
    Operator("shfl_xor_to_down", "__shfl_down_sync where a butterfly needs __shfl_xor_sync",
             re.compile(r"__shfl_xor_sync"), _sub("__shfl_down_sync"), _LANES),
    Operator("shfl_offset_half", "a butterfly that starts at half the right offset",
             re.compile(r"(\b(?:offset|stride)\s*=\s*)(16|COLS\s*/\s*2)\b"), _sub(r"\1(\2) / 2"), _LANES),
    Operator("drop_batch_term", "the batch offset dropped from an index",
             re.compile(r"(\(?)\s*\b(?:b|batch)\s*\*\s*\w+\s*\+\s*"), _sub(r"\1"),   # an opening paren kept
             (EMULATOR, "index_drop:batch:", "varlen:batch_offset")),
    Operator("flip_exponent_sign", "the sign of an exponent flipped",
             re.compile(r"\b(exp2?f)\((\w+(?:\[\w+\])*) - (\w+(?:\[\w+\])*)\)"), _sub(r"\1(\3 - \2)"),
             ("exp:sign", "combine:sign", "merge:sign:")),
    Operator("ln2_dropped", "lse left in log2 units (the factor ln 2 dropped)",
             re.compile(r"\s*\*\s*M_LN2_F"), _sub(""), ("lse:log2", "lse:l_units", "P:lse_units")),
    Operator("drop_syncwarp", "a __syncwarp() left out (lanes of a warp that share memory no longer ordered)",
             re.compile(r"__syncwarp\(\);"), _sub("/* dropped */;"), (EMULATOR,)),
)


@dataclass(frozen=True)
class Mutant:
    exercise: str
    op: Operator
    line: int                 # 1-based line of the solution
    before: str
    after: str

    @property
    def id(self) -> str:
        return f"{self.exercise}/{self.op.name}@{self.line}"

    def source(self, solution: str) -> str:
        lines = solution.splitlines(keepends=True)
        assert lines[self.line - 1] == self.before
        lines[self.line - 1] = self.after
        return "".join(lines)



def _student_lines(solution: str):
    """(line number, text, comment marker) of the lines inside BEGIN/END SOLUTION blocks, minus
    comment lines; the marker is // inside the CUDA string and # in the Python launch code."""
    inside, cuda = False, False
    for n, line in enumerate(solution.splitlines(keepends=True), 1):
        if re.match(r'^\w+\s*=\s*r"""', line):
            cuda = True
        elif line.strip() == '"""' and cuda:
            cuda = False
        if BEGIN.match(line.rstrip("\n")):
            inside = True
        elif END.match(line.rstrip("\n")):
            inside = False
        elif inside and not line.lstrip().startswith(("//", "#")):
            yield n, line, ("//" if cuda else "#")


def mutants(exercise: str, solution: str, operators=OPERATORS) -> list[Mutant]:
    """Every single-site mutation of the student's lines, one per (operator, match)."""
    out = []
    for n, line, marker in _student_lines(solution):
        code, sep, comment = line.partition(marker)
        for op in operators:
            if not op.line_filter(code):
                continue
            for m in op.pattern.finditer(code):
                new_code = code[:m.start()] + op.replace(m) + code[m.end():]
                if new_code != code:
                    out.append(Mutant(exercise, op, n, line, new_code + sep + comment))
    return out


# ---- running them ----------------------------------------------------------------------------------

@dataclass
class Verdict:
    mutant: Mutant
    rejected: bool
    first_message: str = ""
    first_case: str = ""
    changes_output: bool = True       # False: the mutant computes exactly what the solution does
    contradictions: tuple = ()        # claims of its messages that its own cases refute
    score: str = "passed"             # corpus.score against the operator's replay ids

    @property
    def named(self) -> bool:
        return self.score == "named"


def quick_cases(ex) -> list[str]:
    """The cases a mutant is checked on: those the module's curated wrong versions use, plus the
    edge cases every module has (so an off-by-one at a tile edge or an empty row shows)."""
    from .tasks import load_task
    from .wrong import for_exercise
    names = {c for w in for_exercise(ex) for c in (w.cases or ())}
    names |= {"one_element", "fewer_than_a_warp", "tiny", "tile_plus_1", "primes", "custom_scale",
              "contexts_0_1_2_5", "gqa_4_to_1", "many_rows", "long_rows", "long", "long_context"}
    return [c.name for c in load_task(ex).CASES if c.name in names]


def _same_outputs(ex, path, solution_path, cases, seed) -> bool:
    """Does the mutant compute bit for bit what the solution computes on these cases (CPU runtime)?"""
    import numpy as np

    from .engine.runner import case_rng, load_exercise_function
    from .runtimes import get_runtime
    from .tasks import load_task
    task, rt = load_task(ex), get_runtime("cpu")
    fns = [load_exercise_function(ex, p) for p in (path, solution_path)]
    for case in (c for c in task.CASES if c.name in cases):
        outs = []
        for fn in fns:
            inputs = task.make_inputs(case.params, case_rng(seed, case.name))
            dev = {k: rt.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
            outs.append({k: rt.to_numpy(v) for k, v in task.call(fn, rt, dev, case.params).items()})
        if any(not np.array_equal(outs[0][k], outs[1][k], equal_nan=True) for k in outs[1]):
            return False
    return True


def run_mutant(m: Mutant, folder, seed: int = 7, case_timeout: float = 20.0) -> Verdict:
    from pathlib import Path

    from . import catalogue
    from .engine.check import run_check
    ex = catalogue.resolve(m.exercise)
    from .release import solution_path as _solution_path
    solution_path = _solution_path(ex.id, "a mutant")
    path = Path(folder) / f"{m.exercise}-{m.op.name}-{m.line}.py"
    path.write_text(m.source(solution_path.read_text()))
    cases = quick_cases(ex)
    report = run_check(ex, path, "cpu", seed, case_timeout=case_timeout, cases=cases, shrink=False)
    if report["passed"]:               # before calling it an escape: every case, as a student's check runs
        report = run_check(ex, path, "cpu", seed, case_timeout=case_timeout, shrink=False)
    failing = [c for c in report["cases"] if not c["passed"] and c["kind"] != "not_run"]
    if report["passed"]:
        return Verdict(m, False, changes_output=not _same_outputs(ex, path, solution_path, cases, seed))
    first = failing[0] if failing else {"message": report.get("error") or "", "name": "-"}
    from .engine.consistency import file_config, report_contradictions
    found = tuple(report_contradictions(ex, report, seed, file_config(ex, path)))
    return Verdict(m, True, first["message"], first["name"], contradictions=found,
                   score=score(report, m.op.causes))


def summarise(verdicts: list[Verdict]) -> dict:
    """Per module: mutants that change the output, the share rejected, the share whose stated cause is
    the operator's own replay (named), the rejected ones with no cause (silent) and those with
    another bug's cause (wrong); and the mutants that change no output (listed, not counted)."""
    out: dict = {}
    for v in verdicts:
        row = out.setdefault(v.mutant.exercise, {"mutants": 0, "equivalent": [], "rejected": 0, "named": 0,
                                                  "escaped": [], "silent": [], "wrong": []})
        if not v.changes_output:
            row["equivalent"].append(v.mutant.id)
            continue
        row["mutants"] += 1
        if v.rejected:
            row["rejected"] += 1
            if v.named:
                row["named"] += 1
            else:
                row[v.score].append(v.mutant.id)
        else:
            row["escaped"].append(v.mutant.id)
    return out
