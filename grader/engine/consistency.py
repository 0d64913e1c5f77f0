"""Does an explanation contradict its own case?

A message that blames the combine of several splits in a case with one split, overflow in a case
whose scores are small, tiles of 16 to a kernel whose CONFIG says 64, the batch offset when B = 1 ...
sends a student after a bug their kernel cannot have. `contradictions` reads a verdict's message
against the case it explains (its parameters, its reference, the kernel's CONFIG) and lists every
such claim. The project's tests run it over the curated wrong versions and the mutants.
"""
from __future__ import annotations

import math
import re

import numpy as np


def case_reference(ex, name: str, params: dict, seed: int) -> tuple[dict, dict]:
    """(inputs, reference) of a case as the check built them (same seed, same case name)."""
    from ..tasks import load_task
    from .runner import case_rng
    task = load_task(ex)
    inputs = task.make_inputs(params, case_rng(seed, name))
    return inputs, task.reference(inputs, params)


def contradictions(message: str, params: dict, inputs: dict, ref: dict, config: dict | None = None) -> list[str]:
    """The claims of `message` that its case (params, inputs, ref) or the kernel's CONFIG refute."""
    out = []
    lse = np.asarray(ref.get("lse", np.zeros(0)), np.float64)
    top = float(lse[np.isfinite(lse)].max(initial=-np.inf))
    from ..attention.replays import kernel_config
    declared = {int(v) for k, v in kernel_config(config, params).items()
                if k in ("BLOCK_M", "BLOCK_N") and isinstance(v, int)}

    for m in re.finditer(r"tiles? of (\d+)(?: queries × (\d+) keys)?", message):
        sizes = {int(g) for g in m.groups() if g}
        if declared and not sizes <= declared:
            out.append(f"names tiles of {sorted(sizes)} but the kernel's CONFIG declares {sorted(declared)}")
    if re.search(r"large scores|overflows? to inf|^overflow", message, re.M) and top <= 80:
        out.append(f"blames overflow but the case's lse is at most {top:.1f}")
    if "scores are small" in message and top > 80:
        out.append(f"says the scores are small but the case's lse reaches {top:.0f}")
    splits = params.get("num_splits")
    if "spans several splits" in message and not (splits and splits > 1):
        out.append("blames several splits in a case that does not force more than one")
    m = re.search(r"splits of (\d+) keys", message)
    lens = inputs.get("context_lens")
    if m and lens is not None and int(m.group(1)) >= int(np.max(lens, initial=0)):
        out.append(f"blames splits of {m.group(1)} keys where every context fits in one")
    if re.search(r"batch entry b = 0|batch offset|b >= 1 still holds", message) and params.get("B", 1) < 2:
        out.append("blames the batch offset in a case with B = 1")
    if re.search(r"GQA mapping|wrong kv head", message) and params.get("H") == params.get("Hkv"):
        out.append("blames the GQA mapping in a case with H == Hkv")
    if re.search(r"rows with no visible key|sequences with an empty context", message) and not np.isneginf(lse).any():
        out.append("blames rows with no key in a case where every row has keys")
    if "ignores its scale argument" in message and "scale" in inputs and "q" in inputs:
        d = np.shape(inputs["q"])[-1]
        if abs(inputs["scale"] - 1 / math.sqrt(d)) <= 1e-6 * inputs["scale"]:
            out.append("blames an ignored scale in a case that passes the default scale")
    return out


def report_contradictions(ex, report: dict, seed: int, config: dict | None = None) -> list[str]:
    """Every contradiction in the messages of a check's report (first failures and shrunk shapes)."""
    found = []
    for case in report.get("cases", ()):
        if case.get("passed") or case.get("kind") not in ("checked", "error"):
            continue
        for name, params, message in ((case["name"], case["params"], case["message"]),
                                      *((("custom", case["shrunk"]["params"], case["shrunk"]["message"]),)
                                        if case.get("shrunk") else ())):
            if "likely cause" not in message:
                continue
            inputs, ref = case_reference(ex, name, params, seed)
            found += [f"{case['name']}{' (shrunk)' if name == 'custom' else ''}: {c}"
                      for c in contradictions(message, params, inputs, ref, config)]
    return found


def file_config(ex, path) -> dict:
    """The CONFIG dict of a checked file (its tile sizes), or {} when it has none."""
    from .runner import load_exercise_function
    config = getattr(load_exercise_function(ex, path), "__globals__", {}).get("CONFIG")
    return config if isinstance(config, dict) else {}
