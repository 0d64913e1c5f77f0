"""A failing case's verdict: reproduced causes and plain observations, and the cause a check states.

A task's `diagnose(ctx)` yields what it finds on one failing case:

- `Cause(id, text)`: a replay (the reference computation with exactly one bug, attention/replays.py)
  reproduced the kernel's outputs on this case. `id` is stable (`lse:log2`, `keys_end:-1`,
  `index_drop:batch:k`, ...): the class report groups by it and the tests compare it with the bug a
  wrong kernel was written with.
- `Seen(text)`: an observation, a plain statement of what the outputs show (which outputs, rows or
  batch entries are wrong or still hold the grader's NaN, the error's pattern). Never worded as a
  cause.

One case is not enough to state a cause: on a small case several bugs give the same numbers. A check
states a cause (`likely cause: ...`) only when one replay reproduces the first failing case, its
shrunk case, and every other failing case whose search finished (`settle`). A cause another failing
case contradicts is withdrawn; what was observed is still said.
"""
from __future__ import annotations

import time
from typing import Iterable

from ..spec import Cause, Seen


LINE = "\nlikely cause: "   # the stated cause's line, last when stated (a first divergence may follow it)
SEVERAL = "\nobserved: several replayed bugs "   # or this one, when no case tells the replays apart
# Budgets are seconds of this process's CPU time (time.process_time), never of the wall clock, so that
# a loaded machine cuts no search short: every diagnosis here finishes in well under a second.
SEARCH_BUDGET_S = 8.0      # replays per failing case; what is not searched by then does not count
PROBE_BUDGET_S = 6.0       # replays on the passing cases of one check, to withdraw the ones they refute


class OverBudget(BaseException):
    """Raised by `spend` inside a diagnosis whose search has used its budget (a BaseException, so
    that no `except Exception` in a diagnosis takes it for a replay's failure)."""


_deadline = float("inf")     # the running search's end, in this process's CPU time


def spend() -> None:
    """Called by the replays before each costly step (attention.replays.attend, matches): stops the
    search that runs them once its budget is spent. A search checks its budget between the items a
    diagnosis yields, but one item can run many replays: on module 10's 13400-row case, one took
    over 30 s, and the case was reported as a kernel that did not finish."""
    if time.process_time() > _deadline:
        raise OverBudget


def search(items: Iterable, budget_s: float = SEARCH_BUDGET_S, ctx=None) -> tuple[list[Cause], list[str], bool]:
    """Run a diagnosis generator to its end or its time budget: (causes in order, observations,
    complete). A replay family yields each id at most once (the first text is kept, unless it was
    a plain match and a telling one follows). A cause yielded right after a plain match of `ctx`
    (replays.matches) is marked plain."""
    global _deadline
    outer = _deadline
    _deadline = min(outer, time.process_time() + budget_s)     # a search inside a search ends by the outer's end too
    try:
        return _search(items, ctx)
    finally:
        _deadline = outer


def _search(items: Iterable, ctx) -> tuple[list[Cause], list[str], bool]:
    causes: list[Cause] = []
    seen: list[str] = []
    it = iter(items)
    while True:
        if time.process_time() > _deadline:
            return causes, seen, False
        try:
            item = next(it)
        except StopIteration:
            return causes, seen, True
        except OverBudget:
            return causes, seen, False
        plain = bool(getattr(ctx, "plain", False))
        if ctx is not None:
            ctx.plain = False
        if item is None:
            continue
        if isinstance(item, Cause):
            item = item._replace(plain=plain or item.plain)
            old = next((i for i, c in enumerate(causes) if c.id == item.id), None)
            if old is None:
                causes.append(item)
            elif causes[old].plain and not item.plain:
                causes[old] = item
        elif isinstance(item, Seen):
            if item.text not in seen:
                seen.append(item.text)
        else:
            raise TypeError(f"a diagnosis yielded {item!r}: Cause or Seen expected")


def refute(results: list, budget_s: float = PROBE_BUDGET_S) -> list:
    """Ask the passing cases not asked yet which replays would have got them wrong (`refuted`), as
    long as some failing case has candidates, within the time budget. Returns the cases asked."""
    if not any(r.candidates for r in results if not r.passed):
        return []
    asked, t0 = [], time.process_time()
    for r in results:
        left = budget_s - (time.process_time() - t0)
        if left <= 0:
            break
        if r.passed and r.refuted is None and callable(getattr(r, "contradicted", None)):
            r.refuted = sorted(r.contradicted(left))
            asked.append(r)
    return asked


def _ids(r: dict | object, key="candidates") -> list[str]:
    cands = r.get(key) if isinstance(r, dict) else getattr(r, key, None)
    return [c[0] for c in cands or ()]


def _reproduced(r: dict | object) -> dict[str, str]:
    """id -> text of every replay that reproduced this case, telling or plain."""
    get = r.get if isinstance(r, dict) else lambda key: getattr(r, key, None)
    return {c[0]: c[1] for key in ("plain", "candidates") for c in get(key) or ()}


def _unsaid(message: str) -> str:
    """The message without what settle said in it (its likely-cause or several-replays line), and with
    what came after that line (a first divergence added later) kept."""
    for marker in (LINE, SEVERAL):
        if marker in message:
            head, tail = message.split(marker, 1)
            message = head + ("\n" + tail.split("\n", 1)[1] if "\n" in tail else "")
    return message


def settle(results: list) -> None:
    """Choose the cause the check states (CaseResult objects, in case order), in place.

    The first failing (checked) case proposes its reproduced causes in order; those that also
    reproduce its shrunk case and every other failing case with a finished search, and that no
    passing case refutes (a replay predicting a wrong answer where the kernel was right), remain. One
    left is stated on every failing case it reproduces (`cause`, and a `likely cause:` line); several
    left are named together as an observation; none left, and the observations stand alone.

    A plain match (a constant such as lse = 0 of one-key rows, which many bugs give) reproduces a
    case but tells nothing alone: it never proposes. Where the first failing case has only plain
    matches, the first failing case with a telling one proposes, among the ids the first reproduces.
    """
    failing = [r for r in results if not r.passed and r.kind == "checked"]
    for r in results:                     # settling again (plain pytest, case by case) starts afresh
        r.cause = None
        r.message = _unsaid(r.message)
        if isinstance(r.shrunk, dict):
            r.shrunk["cause"] = None
            r.shrunk["message"] = _unsaid(r.shrunk["message"])
    if not failing:
        return
    first = failing[0]
    shrunk = first.shrunk if isinstance(first.shrunk, dict) and first.shrunk.get("kind", "checked") == "checked" else None

    def agrees(cid: str) -> bool:
        for r in failing[1:]:
            if cid not in _reproduced(r) and r.searched:
                return False
        if shrunk is not None and cid not in _reproduced(shrunk) and shrunk.get("searched", True):
            return False
        return True

    proposer = next((r for r in failing if r.candidates), None)
    proposed = [c for c in proposer.candidates if c[0] in _reproduced(first)] if proposer else []
    agreed = [c for c in proposed if agrees(c[0])]
    if agreed:
        refute(results)
    # A replay that predicts a wrong answer on a case the kernel passed is not its bug.
    refuted = {cid for r in results if r.passed for cid in (r.refuted or ())}
    agreed = [c for c in agreed if c[0] not in refuted]
    if len(agreed) > 1:
        # Several replays reproduce every failing case alike: no failing case tells them apart, so
        # naming one would be a guess. Say what was reproduced, as an observation.
        said = "; ".join(text.split(" (the output")[0].split(": ")[0] for _, text in agreed[:4])
        first.message = first.message.rstrip("\n") + (
            f"{SEVERAL}({len(agreed)}) reproduce every failing case equally, and no case tells them "
            f"apart: {said}.")
        return
    if not agreed:
        return
    cid = agreed[0][0]
    for r in failing:
        texts = _reproduced(r)
        if cid in texts:
            r.cause = cid
            r.message = r.message.rstrip("\n") + f"{LINE}{texts[cid]}"
    if shrunk is not None:
        texts = _reproduced(shrunk)
        if cid in texts:
            shrunk["cause"] = cid
            shrunk["message"] = shrunk["message"].rstrip("\n") + f"{LINE}{texts[cid]}"
