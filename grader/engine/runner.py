"""Run one case of one exercise in this process: inputs, launch, compare, explain."""
from __future__ import annotations

import importlib.util
import dataclasses
import itertools
import re
import time
import traceback
import zlib
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..attention.calls import case_tiles
from ..catalogue import Exercise
from ..errors import CaseNotRunnable, CompileError, GraderError, KernelFault, LaunchError
from ..runtimes.provenance import Ledger
from ..runtimes.ranks import RankStall
from ..runtimes.base import is_poison, register_origin
from ..spec import Case
from ..tasks import load_task
from . import diagnose as dg
from . import verdict
from .compare import compare


@dataclass
class CaseResult:
    name: str
    passed: bool
    rel_err: float | None = None
    max_abs_err: float | None = None
    message: str = ""
    params: dict = field(default_factory=dict)
    kind: str = "checked"      # checked | not_implemented | compile_error | error | crash | timeout | not_run
    shrunk: dict | None = None  # the smallest shape found that still fails: {"params", "message", ...}
    plot: str | None = None     # a PNG of the error, with --plot
    cause: str | None = None    # the stated cause's id (engine/verdict.py: settle), or None
    observations: list = field(default_factory=list)   # what the outputs show, in plain words
    candidates: list = field(default_factory=list)     # [id, text] of every replay that reproduced it
    plain: list = field(default_factory=list)   # [id, text] of those that reproduced it only as a constant
    searched: bool = True       # the replay search finished (within its time budget)
    # A passing case: the ids of the replays that predict a wrong answer here, where the kernel was
    # right (verdict.refute fills it in when some failing case has candidates; None: not asked).
    refuted: list | None = None
    divergence: str | None = None   # the first failing case: where it parts from the finished version (diverge.py)
    contradicted: object = field(default=None, repr=False, compare=False)   # computes `refuted`

    def to_json(self) -> dict:
        d = asdict(dataclasses.replace(self, contradicted=None))
        d.pop("contradicted")
        for key in ("rel_err", "max_abs_err"):
            if isinstance(d[key], float) and not np.isfinite(d[key]):
                d[key] = str(d[key])
        return d


NOT_RUN_HERE = "not run on this machine: "   # a case this machine cannot run (CaseNotRunnable)
RIGHT_CASE_ELEMENTS = 1 << 17    # a passing case this small keeps its context for verdict.settle


def _replays_wrong_where_right(task, ctx, budget_s: float) -> set[str]:
    """The ids of the replays that predict a wrong answer on this passing case, under every one of
    their parameters (a family tries several: tile sizes, offsets): the diagnosis runs with
    ctx.probe = "wrong", where a replay 'matches' when it differs from the kernel's (right) output,
    and with "right", where it matches when it agrees; an id seen agreeing is not refuted."""
    if not hasattr(task, "diagnose"):
        return set()
    t0 = time.process_time()
    wrong, _, _ = verdict.search(task.diagnose(dataclasses.replace(ctx, probe="wrong")), budget_s / 2)
    left = budget_s - (time.process_time() - t0)
    right, _, complete = verdict.search(task.diagnose(dataclasses.replace(ctx, probe="right")), max(left, 0.0))
    if not complete:                  # an id not reached agreeing might have agreed: refute none of them
        return set()
    return {c.id for c in wrong} - {c.id for c in right}


def select_cases(ex: Exercise, names: list[str] | None = None, shape: dict | None = None) -> list[Case]:
    """The cases a check runs: all of them, the ones named, or one "custom" case of the given shape
    (the first case's parameters, overridden)."""
    task = load_task(ex)
    if shape:
        base = task.CASES[0].params if task.CASES else {}
        return [Case("custom", dict(base, **shape))]
    unknown = set(names or ()) - {c.name for c in task.CASES}
    if unknown:
        raise GraderError(f"{ex.id} has no case named {', '.join(sorted(unknown))}. Its cases: "
                          + ", ".join(c.name for c in task.CASES))
    return [c for c in task.CASES if not names or c.name in names]


class SubmissionError(GraderError):
    """The checked file itself is at fault (it does not import, or lacks its entry function): a
    failed check (exit 1), not a usage or environment error (exit 2)."""


def load_exercise_function(ex: Exercise, path: Path):
    """Import the student's file and return its entry function.

    A missing file is a GraderError (usage); a file that does not import, or that does not define
    the entry function, is a SubmissionError, with a traceback of the student's own frames.
    """
    path = Path(path)
    if not path.is_file():
        raise GraderError(f"no such file: {path}")
    register_origin(path)
    spec = importlib.util.spec_from_file_location(f"exercise_{ex.name}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise SubmissionError(f"{path.name} does not import:\n{student_traceback(e, path)}") from None
    fn = getattr(module, ex.entry, None)
    if not callable(fn):
        raise SubmissionError(f"{path.name} must define a function {ex.entry}(rt, ...).")
    return fn


def _shown(path) -> str:
    """The checked file as the student knows it: relative to the course when it lies inside."""
    from .. import paths
    try:
        return str(Path(path).resolve().relative_to(paths.course_root().resolve()))
    except (ValueError, OSError):
        return str(path)


def case_rng(seed: int, case_name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(case_name.encode())])


@lru_cache(maxsize=1)
def _library_dirs() -> tuple[Path, ...]:
    import sysconfig
    dirs = {Path(__file__).resolve().parents[1]}          # the grader package
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            dirs.add(Path(sysconfig.get_paths()[key]).resolve())
        except (KeyError, OSError):
            pass
    return tuple(dirs)


def is_student_frame(filename: str, path: Path) -> bool:
    """A frame of the student's code: the checked file, or a file of theirs it imports; not the
    grader, importlib, the standard library or an installed package."""
    if not filename or filename.startswith("<"):
        return False
    try:
        f = Path(filename).resolve()
        if f == Path(path).resolve():
            return True
    except (OSError, ValueError):
        return False
    return not any(f.is_relative_to(d) for d in _library_dirs())


def student_frames(exc: BaseException, path: Path) -> list:
    """The frames of `exc`'s traceback in the student's code (is_student_frame), outermost first: the
    last is where their code called into the grader, the runtime or a library."""
    return [f for f in traceback.extract_tb(exc.__traceback__) if is_student_frame(f.filename, path)]


def student_traceback(exc: BaseException, path: Path, limit: int = 5) -> str:
    """The traceback of `exc` with only the frames in the student's file (the last `limit`), no
    grader or importlib frames. A SyntaxError brings its own file, line and caret."""
    frames = student_frames(exc, path)
    lines = []
    if frames:
        lines.append("Traceback (most recent call last):\n")
        lines += traceback.StackSummary.from_list(frames[-limit:]).format()
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines).rstrip("\n")


def _student_frames(exc: BaseException, path: Path) -> str:
    return student_traceback(exc, path)


# ---- compile errors: the compiler's errors first, warnings folded ---------------------------

# NVRTC: `file(12): error: ...`, `file(12): warning #177-D: ...`; GCC/Clang: `file:12:5: error: ...`.
_NVRTC_DIAG = re.compile(r"^(?P<file>\S[^()\n]*)\((?P<line>\d+)\): (?P<sev>catastrophic error|"
                         r"error|warning|remark)(?: #[\w-]+)?: (?P<text>.*)$")
_HOST_DIAG = re.compile(r"^(?P<file>\S[^:\n]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|"
                        r"error|warning|note): (?P<text>.*)$")
_HOST_CONTEXT = re.compile(r"^\S[^:\n]*: (In |At global scope)|^In file included from |^\s+from ")
_NOISE = re.compile(r"^Remark: The warnings can be suppressed|^\d+ errors? detected in the compilation|"
                    r"^\d+ (errors?|warnings?)( and \d+ (errors?|warnings?))? generated\.$")


def format_compiler_log(log: str) -> str:
    """The compiler's errors as `file:line: error: text` with their source excerpt; warnings and
    remarks counted, not shown. A log in a format it does not know is returned as it is."""
    blocks: list[list] = []          # [severity, lines]
    context: list[str] = []          # GCC's "In function ..." lines, for the next diagnostic
    for raw in log.splitlines():
        line = raw.rstrip()
        if _NOISE.match(line.strip()):
            continue
        m = _NVRTC_DIAG.match(line) or _HOST_DIAG.match(line)
        if m:
            sev = m.group("sev")
            col = m.groupdict().get("col")
            where = f"{m.group('file')}:{m.group('line')}" + (f":{col}" if col else "")
            head = f"{where}: {sev}: {m.group('text')}"
            if sev == "note" and blocks:
                blocks[-1][1].append(head)
                continue
            blocks.append([sev, context + [head]])
            context = []
        elif _HOST_CONTEXT.match(line):
            context.append(line)
        elif blocks:
            blocks[-1][1].append(line)
    errors = [b for b in blocks if "error" in b[0]]
    if not errors:
        return log.strip()
    hidden = len(blocks) - len(errors)
    out = []
    for _, lines in errors:
        while lines and not lines[-1].strip():
            lines.pop()
        out += lines
    if hidden:
        out.append(f"({hidden} warning{'s' if hidden > 1 else ''} not shown)")
    return "\n".join(out)


_TOO_MUCH_SHARED = re.compile(r"uses too much shared data \((0x[0-9a-fA-F]+) bytes, (0x[0-9a-fA-F]+) max\)")


def compile_error_message(e: CompileError, path: Path | None = None) -> str:
    """What failed (the first line of the CompileError), then the compiler's errors; where ptxas
    refuses a kernel's static shared memory (a message with no line), the student's file's static
    __shared__ declarations, with their lines."""
    log = getattr(e, "log", "") or ""
    text = str(e)
    if not log:
        return text
    head = text[: len(text) - len(log)].rstrip("\n")
    log = log.replace("\x00", "")         # NVRTC's log on a GPU may hold a NUL byte
    return f"{head}\n{format_compiler_log(log)}" + _static_shared_lines(log, path)


def _static_shared_lines(log: str, path: Path | None) -> str:
    """ptxas's 'uses too much shared data' names no line: the static __shared__ declarations of the
    student's file, with their lines (comments and extern __shared__ left out), or ''."""
    m = _TOO_MUCH_SHARED.search(log)
    if m is None or path is None:
        return ""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return ""
    decls = [f"  line {n}: {t.strip()}" for n, t in enumerate(lines, 1)
             if "__shared__" in t and "extern" not in t and not t.lstrip().startswith(("//", "#"))]
    used, limit = int(m.group(1), 16), int(m.group(2), 16)
    where = (f"; {Path(path).name} declares these static __shared__ arrays:\n" + "\n".join(decls[:12])
             if decls else ".")
    return (f"\nThe kernel's static shared memory, {used} bytes, is more than the {limit} bytes a kernel may "
            f"declare statically{where}\nAn array's bytes are the product of its dimensions times its element's "
            "size: check each against what the kernel uses. Past that limit a buffer must be dynamic "
            "(extern __shared__, sized by the launch's shared_mem, opted in with max_dynamic_shared_size_bytes).")


def untouched(ex: Exercise, path: Path) -> list | None:
    """The TODOs the file still holds as the stub has them (stubs.untouched_todos), or None where the
    stub cannot be read."""
    from .. import paths
    from ..stubs import untouched_todos
    stub = paths.exercise_file(ex.id)
    try:
        return untouched_todos(stub.read_text(), Path(path).read_text()) if stub.is_file() else None
    except OSError:
        return None


def todos_left(ex: Exercise, path: Path, work: bool = False) -> str:
    """A failure of a file that still holds TODOs as the stub has them: which ones. Mid-way through a
    module, what a case waits for or reads (a barrier's arrival, a stage's release, a stored value)
    may be the work of a TODO not written yet; a message that names a line of written code as the
    place says nothing of them otherwise. `work`: the work check's failure, where a stub's
    placeholder can be right and slow (03's kv_end = n_k)."""
    left = sorted(untouched(ex, path) or [])
    if not left:
        return ""
    todos = ", ".join(f"TODO({k})" for k in left)
    one = len(left) == 1
    why = ("the stub's placeholder there may be what does this work." if work else
           f"what this case waits for or reads may be the work of {'that TODO' if one else 'one of them'}.")
    return (f"\nnote: your file still has {todos} as the stub has {'it' if one else 'them'} "
            f"(nothing written after the comment): {why}")


def not_implemented_message(ex: Exercise, path: Path) -> str:
    """No output element written: which TODO to fill in next, from the TODOs the file still holds as
    the stub has them (nothing written after the comment)."""
    from .. import paths
    left = untouched(ex, path)
    texts = dict(enumerate(ex.todos, 1))
    head = ("not implemented yet: no output element was written (each still holds the NaN the grader "
            "filled it with). ")
    where = (f"in {_shown(path)}; the lesson is modules/{ex.id}.md, and `grader hint {ex.id[:2]}` gives its "
             "hints one at a time.")
    if left == []:
        return head + (f"Every TODO has code after it {where} Check that your launch grid covers every "
                       "element and that the kernel really stores its results (the last TODOs store them).")

    # The lowest number left, not the first in the file: a file's order need not be the lesson's (in
    # module 14, TODO(7)'s code comes before TODO(2)'s).
    left = sorted(left) if left else [1]
    n = left[0]
    todo = f"TODO({n}) ({texts[n]})" if n in texts else f"TODO({n})"
    later = f"; then {', '.join(f'TODO({k})' for k in left[1:])}" if len(left) > 1 else ""
    if n == 1 and len(left) == max(len(texts), 1):
        return head + (f"Fill in {todo} and the TODOs after it {where} The outputs are stored by the "
                       "last TODOs, so this message stays until those are done.")
    done = [k for k in range(1, max(texts, default=n) + 1) if k not in left]
    return head + (f"Next: {todo}, which is still as the stub has it (nothing written after its comment)"
                   f"{later}, {where} Until those have code, nothing is stored: the grader checks what "
                   f"you wrote ({', '.join(f'TODO({k})' for k in done)}) once they do.")


def cited(message: str, path: Path) -> str:
    """An emulator report with every cited line the student's: lines of generated code said as such
    (base.generated_lines), and the source text of the first line of the checked file it cites."""
    from ..runtimes.base import generated_lines
    message = generated_lines(message)
    cited_lines = []
    for m in re.finditer(rf"(?<![\w.-]){re.escape(Path(path).name)}:(\d+)\b", message):
        if m.group(1) not in cited_lines:
            cited_lines.append(m.group(1))
    try:
        source = Path(path).read_text().splitlines()
    except OSError:
        source = []
    called = re.search(rf"called from {re.escape(Path(path).name)}:(\d+)", message)
    if called and called.group(1) in cited_lines[1:]:
        cited_lines.remove(called.group(1))
        cited_lines.insert(1, called.group(1))
    for n in cited_lines[:2]:            # the line itself, and where it was called from
        text = source[int(n) - 1].strip() if 0 < int(n) <= len(source) else ""
        if text and text not in message:
            message += f"\n  line {n}: {text}"
    return message


def launch_site(message: str, exc: BaseException, path: Path) -> str:
    """A refused launch (an argument of the wrong type, count or shape, a grid or shared-memory size)
    with the line of the student's file that launched it, where the message names none: the innermost
    frame of their code in the traceback is the launch call."""
    if re.search(rf"(?<![\w.-]){re.escape(Path(path).name)}:\d+", message):
        return message
    frames = student_frames(exc, path)
    if not frames:
        return message
    return message + f"\nlaunched at {Path(frames[-1].filename).name}:{frames[-1].lineno}"


def run_case(ex: Exercise, case, fn, rt, seed: int, path: Path, keep: dict | None = None,
             on_explain=None) -> CaseResult:
    """Run one case (see _run_case); a failing case run at other tile sizes (`tiles`) says so first."""
    res = _run_case(ex, case, fn, rt, seed, path, keep, on_explain)
    tiles = case_tiles(case.params)
    if tiles and not res.passed and res.kind != "not_run":
        m, n = tiles["BLOCK_M"], tiles["BLOCK_N"]
        res.message = (f"this case runs your file with BLOCK_M = {m} and BLOCK_N = {n} in CONFIG (CONFIG = "
                       f"dict(CONFIG, BLOCK_M={m}, BLOCK_N={n})), tile sizes the lesson offers: the kernel must "
                       "be right at those too.\n" + (res.message or ""))
    return res


def _run_case(ex: Exercise, case, fn, rt, seed: int, path: Path, keep: dict | None = None,
              on_explain=None) -> CaseResult:
    """Run one case. If `keep` is a dict, the inputs, reference and outputs are left in it.
    `on_explain()` is called when the kernel has failed and the grader starts explaining it: what
    follows is the grader's time, not the kernel's (the parent's time limit is told)."""
    task = load_task(ex)
    res = CaseResult(case.name, False, params=dict(case.params))
    rng = case_rng(seed, case.name)
    inputs = task.make_inputs(case.params, rng)
    # Copies, so the originals stay pristine for the reference and the "inputs unchanged" test (on the
    # CPU, rt.asarray of a NumPy array may be the array itself).
    device_inputs = {k: rt.asarray(v.copy()) if isinstance(v, np.ndarray) else v
                     for k, v in inputs.items()}
    rt.start_poisoning()
    if hasattr(rt, "block_order_check"):      # the emulator: rerun blocks last-first where a task asks
        rt.block_order_check = bool(getattr(task, "BLOCK_ORDER_CHECK", False))
        # What that finds is weighed below, against the numbers: it fails a case whose numbers are
        # right, and yields to a cause the numbers show.
        rt.block_order_defer, rt.block_order_found = True, None
    # The answer must come from the kernels (the grader's own tests of its comparisons turn it off).
    ledger = rt.ledger = Ledger(rt, device_inputs) if getattr(rt, "provenance_check", True) else None
    try:
        outs = task.call(fn, rt, device_inputs, case.params)
        rt.synchronize()
    except CompileError as e:
        res.kind, res.message = "compile_error", compile_error_message(e, path)
        return res
    except RankStall as e:               # GPU ranks that went silent: a time limit, which the emulator decides
        res.kind, res.message = "timeout", cited(str(e), path)
        return res
    except (LaunchError, KernelFault) as e:
        message = launch_site(str(e), e, path) if isinstance(e, LaunchError) else str(e)
        res.kind, res.message = "error", cited(message, path) + todos_left(ex, path)
        return res
    except CaseNotRunnable as e:         # this machine cannot run it (a case of more GPUs than it has)
        res.kind, res.message = "not_run", NOT_RUN_HERE + str(e)
        return res
    except NotImplementedError as e:
        res.kind = "not_implemented"
        res.message = f"not implemented yet: {e or 'fill in the TODOs'}"
        return res
    except GraderError as e:
        res.kind, res.message = "error", str(e)
        return res
    except Exception as e:
        res.kind = "error"
        res.message = (f"your code raised {type(e).__name__}: {e}\n"
                       + _student_frames(e, path))
        return res
    finally:
        rt.poison_outputs = False
        rt.ledger = None

    # Each output's own poison: its elements that still hold it were never written (a NaN holding
    # another array's poison was computed from memory nothing wrote).
    own = {k: rt.poison_index(v) for k, v in outs.items()}
    out = {k: rt.to_numpy(v) for k, v in outs.items()}
    if hasattr(task, "widen"):        # outputs in a type NumPy lacks (bfloat16 bits) -> float32
        out = task.widen(out, case.params)
    # The answer must come from the kernels (provenance.py): the outputs, and every buffer they read.
    # (Outputs that still hold only their poison are a stub's: "not implemented yet" below.)
    problem = ledger and ledger.verdict({k: v for k, v in outs.items() if k not in getattr(task, "TASK_MADE", ())})
    if problem and not all(is_poison(v, own.get(k)).all() for k, v in out.items() if np.asarray(v).size):
        res.kind, res.message = "error", problem
        return res
    for k, v in inputs.items():
        if isinstance(v, np.ndarray) and not np.array_equal(rt.to_numpy(device_inputs[k]), v, equal_nan=True):
            res.message = (f"the kernel changed its input {k!r}. Inputs are read-only: write results "
                           "only to the output arrays (and declare inputs const).")
            return res

    ref = task.reference(inputs, case.params)
    if keep is not None:
        keep.update(inputs=inputs, ref=ref, out=out)
    sized = [k for k in ref if np.asarray(out[k]).size]
    if sized and all(is_poison(out[k], own.get(k)).all() for k in sized):
        res.kind = "not_implemented"
        res.message = not_implemented_message(ex, path)
        if untouched(ex, path) == []:
            # Code after every TODO: not "not implemented yet", but a kernel that wrote nothing.
            res.kind = "checked"
            ran = getattr(rt, "launched", None) or []
            grids = "; ".join(f"{n} with grid {g} and blocks {b}" for n, g, b in ran[:3])
            res.message = (f"no output element was written: each still holds the NaN the grader filled it "
                           f"with, though every TODO of {_shown(path)} has code after it. "
                           + (f"The case launched {grids}{' …' if len(ran) > 3 else ''}. " if ran else
                              "The case launched no kernel. ")
                           + "Check that the grid covers the output and that the threads reach the stores "
                             "(the last TODOs store the results).")
        return res

    cmps = {}
    # A task whose tolerance depends on the case (low precision: a multiple of a same-precision
    # reference's error) computes it from the inputs; the others state one per output.
    tolerances = task.tolerances(inputs, case.params, ref) if hasattr(task, "tolerances") else task.TOLERANCES
    for name, want in ref.items():
        rel_tol, abs_tol = tolerances[name]
        try:
            cmps[name] = compare(name, out[name], want, rel_tol, abs_tol, own.get(name))
            if cmps[name].foreign is not None and cmps[name].foreign.any():
                cmps[name].foreign_from = rt.poison_source(np.asarray(out[name])[cmps[name].foreign])
        except ValueError as e:          # a shape the reference does not have: nothing to replay
            site = ledger.made_in(outs[name], path) if ledger is not None else ""
            res.message, res.searched = f"{e}{f'; {name} is the array made at {site}' if site else ''}.", False
            return res
    res.rel_err = max(c.rel_err for c in cmps.values())
    res.max_abs_err = max(c.max_abs_err for c in cmps.values())
    failing = [c for c in cmps.values() if not c.passed]
    config = getattr(fn, "__globals__", {}).get("CONFIG")
    ctx = dg.Context(ex, case.params, inputs, ref, out, cmps, config if isinstance(config, dict) else {})
    # Blocks that store over each other's elements (the emulator's rerun, last block first, changed
    # an output): right numbers in this order are luck, since a GPU runs the blocks in any order.
    overlap = getattr(rt, "block_order_found", None)
    if overlap is not None and not failing:
        res.kind, res.message = "error", cited(str(overlap), path) + todos_left(ex, path)
        return res
    if not failing:
        res.passed = True
        # A case whose verdict the task made itself (a refused input: no o, no lse) refutes no replay.
        if sum(np.size(v) for v in out.values()) <= RIGHT_CASE_ELEMENTS and \
                not set(out) & set(getattr(task, "TASK_MADE", ())):
            res.contradicted = lambda budget_s: _replays_wrong_where_right(task, ctx, budget_s)
        return res
    if on_explain is not None:
        on_explain()
    c = failing[0]
    lines = [f"{c.name}: {c.reason}.", f"worst element: {c.where()}."]
    lines += [f"{o.name}: {o.reason}." for o in failing[1:]]
    try:
        found = itertools.chain(task.diagnose(ctx) if hasattr(task, "diagnose") else (), dg.empty_row_causes(ctx),
                                dg.observations(ctx))
        causes, seen, res.searched = verdict.search(found, ctx=ctx)
    except Exception as e:        # the verdict above stands; the explanation failed, loudly
        frames = traceback.extract_tb(e.__traceback__)
        ours = [f for f in frames if Path(f.filename).resolve().is_relative_to(Path(__file__).resolve().parents[1])]
        causes, seen, at = [], [], (ours or frames)[-1]      # the grader's own line, not numpy's
        lines.append(f"(the grader failed while explaining this error — a bug in the grader, please report "
                     f"it: {type(e).__name__}: {e} at {at.filename}:{at.lineno})")
    res.candidates = [[k.id, k.text] for k in causes if not k.plain]
    if overlap is not None and not res.candidates:     # no cause in the numbers: the overlap is what was reproduced
        res.kind, res.message = "error", cited(str(overlap), path) + todos_left(ex, path)
        return res
    res.plain = [[k.id, k.text] for k in causes if k.plain]
    res.observations = list(seen)
    if overlap is not None:
        seen = list(seen) + [str(overlap).split(". Two blocks write")[0] + "."]
    lines += [f"observed: {text}" for text in seen]
    if not res.candidates and getattr(rt, "name", "") == "gpu":
        # A GPU runs an out-of-bounds read or a race without complaint; the emulator and
        # compute-sanitizer name them with their line.
        lines.append("no replayed bug reproduces this error. On a GPU an out-of-bounds access or a missing "
                     "__syncthreads() can give wrong numbers silently: `--backend cpu` (the emulator) or "
                     "`--sanitize` (compute-sanitizer) names such a bug and its line.")
    res.message = "\n".join(lines) + todos_left(ex, path)
    return res


# ---- shrinking: the smallest shape that still fails ------------------------------------------

SHRINKABLE = ("B", "H", "Hkv", "Nq", "Nk", "R", "n", "ctx", "max_len", "page_size", "d")
HEAD_DIMS = (32, 64, 96, 128)


def shrink_candidates(params: dict, task) -> list[dict]:
    """Smaller variants of `params`, one key changed at a time, most aggressive first."""
    keys = getattr(task, "SHRINK_KEYS", SHRINKABLE)
    out = []
    for key in keys:
        v = params.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 1:
            continue
        if key == "d":
            values = [h for h in HEAD_DIMS if h < v]
        else:
            values = sorted({1, v // 2, v - 1} - {v, 0})
        for nv in values:
            cand = dict(params, **{key: nv})
            if key == "B":
                cand = trim_lens(cand)
            if "H" in cand and "Hkv" in cand and (cand["H"] % cand["Hkv"] or cand["Hkv"] > cand["H"]):
                continue
            valid = getattr(task, "valid", None)
            if valid is not None and not valid(cand):
                continue
            out.append(cand)
    return out


def trim_lens(params: dict) -> dict:
    """Per-sequence lengths "a/b/c" cycle over the batch; with fewer sequences, keep only the ones used
    (so a shrunk shape prints what it runs: B=2, lens=70/1, not lens=70/1/33/0)."""
    out = dict(params)
    for key in ("lens", "lens_k"):
        if isinstance(out.get(key), str) and "/" in out[key]:
            vals = out[key].split("/")
            out[key] = "/".join(vals[b % len(vals)] for b in range(out["B"]))
    return out


CONTRAST_ZERO = ("masked",)     # a share the failing shape has, tried at 0 (a flag that is on: off)


def contrast_candidates(params: dict, task) -> list[dict]:
    """The failing shape with one feature turned off: a flag that is on, a share of masked entries.
    Not smaller, so never taken as the new shape; run only to say what the failure needs."""
    out = []
    for key, v in params.items():
        if v is True:                   # causal, backward, ...
            cand = dict(params, **{key: False})
        elif key in CONTRAST_ZERO and isinstance(v, (int, float)) and not isinstance(v, bool) and v:
            cand = dict(params, **{key: 0})
        else:
            continue
        valid = getattr(task, "valid", None)
        if valid is None or valid(cand):
            out.append(cand)
    return out


def changed_key(params: dict, cand: dict) -> str:
    """The key a one-change neighbour changed: the first that differs (B, not the lens it trims)."""
    return next(k for k in cand if cand[k] != params.get(k))


def one_change(params: dict, cand: dict) -> str:
    """'Nk=64 (not 65)'."""
    k = changed_key(params, cand)
    return f"{k}={cand[k]} (not {params[k]})"


def shrink(ex: Exercise, params: dict, fn, rt, seed: int, path: Path, max_tries=30, budget_s=15.0,
           clock=None):
    """Greedy: keep taking the first smaller shape that still fails, until none does.

    Returns (params, result, passing) for the smallest failing shape, or None when nothing smaller
    fails. `passing`: the shapes one change away from it that were run and pass, the smaller ones
    (each tried when no smaller shape failed) and the same shape with a feature turned off
    (contrast_candidates): what the failure needs, observed. The shrunk case is named "custom", like a
    case given with --shape, so the replay is exact. `clock` measures the budget, in CPU time (a
    loaded machine gets the same shape); the plugin's leaves out the time spent compiling (a cold
    kernel cache must not eat the search).
    """
    import time
    clock = clock or time.process_time
    task = load_task(ex)
    best, best_result, passing = None, None, []
    current = dict(params)
    tries, t0 = 0, clock()
    improved = True
    while improved and tries < max_tries and clock() - t0 < budget_s:
        improved, passing = False, []
        for cand in shrink_candidates(current, task):
            if tries >= max_tries or clock() - t0 >= budget_s:
                break
            tries += 1
            r = run_case(ex, Case("custom", cand), fn, rt, seed, path)
            if not r.passed and r.kind in ("checked", "error") and rt.healthy():
                current, best, best_result, improved = cand, cand, r, True
                break
            if r.passed:
                passing.append((cand, r))
    if best is None:
        return None
    for cand in contrast_candidates(best, task):
        if tries >= max_tries or clock() - t0 >= budget_s:
            break
        tries += 1
        passing.append((cand, run_case(ex, Case("custom", cand), fn, rt, seed, path)))
    return best, best_result, clean_passes(best, best_result, passing)


def clean_passes(params: dict, failed: CaseResult, tried: list) -> list[dict]:
    """Of the shapes tried one change away from the failing one, those that pass with an error far
    below the failure's (a hundredth of it: a near miss that happens to pass on these inputs says
    little), and of several values of one key only the nearest."""
    bad = failed.rel_err if failed.rel_err is not None else float("inf")
    nearest: dict = {}
    for cand, r in tried:
        if not r.passed or (np.isfinite(bad) and (r.rel_err is None or r.rel_err > bad / 100)):
            continue
        key = changed_key(params, cand)
        old = nearest.get(key)
        if old is None or abs(_as_number(cand[key]) - _as_number(params[key])) < \
                abs(_as_number(old[key]) - _as_number(params[key])):
            nearest[key] = cand
    return list(nearest.values())


def _as_number(v) -> float:
    return float(v) if isinstance(v, (int, float)) else 0.0


def parse_shape(text: str) -> dict:
    """'B=1,H=2,Nq=3,logit=50.0' -> {'B': 1, 'H': 2, 'Nq': 3, 'logit': 50.0}."""
    params = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        if "=" not in item:
            raise GraderError(f"--shape wants key=value pairs separated by commas, got {item!r}")
        key, value = (t.strip() for t in item.split("=", 1))
        for conv in (int, float):
            try:
                params[key] = conv(value)
                break
            except ValueError:
                pass
        else:
            params[key] = {"true": True, "false": False}.get(value.lower(), value)
    return params


def format_shape(params: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in params.items())
