"""`grader check ID --sanitize`: one case under NVIDIA's compute-sanitizer, in the course's words.

Each tool runs the case in a fresh process (the pytest plugin of `grader check`, with one --shape)
with line info compiled in and a plain cudaMalloc per array, and what it reports is translated: memcheck (out-of-bounds accesses), racecheck
(shared-memory races: a missing __syncthreads), synccheck (barriers in divergent code) and initcheck
(reads of memory nothing wrote).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
_WHERE = re.compile(r"(?:at|in)\s+(?:0x[0-9a-f]+\s+in\s+)?([\w<>,: ]+?)(?:\+0x[0-9a-f]+)?\s+in\s+(\S+?):(\d+)")
_THREAD = re.compile(r"by thread \((\d+),(\d+),(\d+)\) in block \((\d+),(\d+),(\d+)\)")


def find_sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for pattern in ("/usr/local/cuda*/bin/compute-sanitizer", "/opt/nvidia/*/compute-sanitizer",
                    "/usr/local/cuda*/compute-sanitizer/compute-sanitizer"):
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    return None


def _blocks(output: str) -> list[str]:
    """compute-sanitizer prints each error as a run of '=========' lines; split them apart."""
    blocks, cur = [], []
    for line in output.splitlines():
        if not line.startswith("========="):
            continue
        body = line[9:].strip()
        starts = body and not line[9:].startswith("    ") and not body.startswith(("and ", "Saved", "by "))
        if starts and cur:
            blocks.append("\n".join(cur))
            cur = []
        if body:
            cur.append(body)
    if cur:
        blocks.append("\n".join(cur))
    return [b for b in blocks if not b.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY",
                                                   "Program hit", "Target application returned"))]


def translate(tool: str, output: str) -> list[str]:
    """Plain-words findings, one per distinct (kind, line)."""
    findings, seen = [], set()
    for block in _blocks(output):
        wheres = _WHERE.findall(block)
        lines = [f"{os.path.basename(f)}:{ln}" for _, f, ln in wheres]
        kernel = wheres[0][0].strip() if wheres else "the kernel"
        at = lines[0] if lines else "(line unknown)"
        th = _THREAD.search(block)
        who = f" (thread {th.group(1, 2, 3)}, block {th.group(4, 5, 6)})".replace("'", "") if th else ""
        m = re.search(r"Invalid __(global|shared|local)__ (read|write) of size (\d+)", block)
        if m:
            space, rw, size = m.groups()
            if space == "shared":
                what = (f"{rw} of {size} bytes outside shared memory in {kernel} at {at}{who}: an index "
                        "into a __shared__ tile is past its end (check the tile sizes and the shared_mem "
                        "given at launch).")
            else:
                what = (f"out-of-bounds {rw} of {size} bytes in {kernel} at {at}{who}: an index ran past "
                        "the end of an array. Check the bounds test on the last, partial tile (n_q, n_k "
                        "not multiples of the tile).")
        elif "Race reported" in block or "race" in block.lower() and "hazard" in block.lower():
            pair = " and ".join(dict.fromkeys(lines)) or at
            what = (f"a shared-memory race in {kernel} between {pair}: these accesses by different "
                    "threads can happen in either order. Put a __syncthreads() between them — typically "
                    "after loading a tile, and before the next tile overwrites it.")
        elif "Barrier error" in block or "barrier" in block.lower():
            what = (f"a __syncthreads() in {kernel} at {at} is not reached by every thread of the block "
                    "(a barrier inside an if, or after an early return). Move it where all threads pass.")
        elif "Uninitialized" in block:
            what = (f"{kernel} at {at}{who} reads memory that nothing wrote (an output never filled, or "
                    "a shared tile read before it is loaded).")
        elif re.search(r"error|invalid|fault", block, re.I):
            what = f"{block.splitlines()[0]} in {kernel} at {at}{who}"
        else:
            continue
        key = (what.split(" at ")[0][:40], at)
        if key not in seen:
            seen.add(key)
            findings.append(what)
    return findings


def run_sanitizers(ex, path: Path, params: dict, seed: int, tools=TOOLS, timeout=300) -> dict:
    """{tool: {"findings": [...], "clean": bool, "raw": tail of output}}; raises if not installed."""
    from .runtimes.base import GraderError
    exe = find_sanitizer()
    if exe is None:
        raise GraderError("compute-sanitizer is not installed here. It comes with the CUDA toolkit "
                          "(https://developer.nvidia.com/cuda-downloads); `--backend cpu` finds most of "
                          "the same bugs without it.")
    from .engine.check import child_command, child_env, plugin_args
    results = {}
    with tempfile.TemporaryDirectory(prefix="grader-san-") as tmp:
        # The same child as `grader check`, in one-case mode: the case's shape, no shrinking.
        plugin = plugin_args(ex, path, "gpu", seed, shape=params, shrink=False)
        env = dict(child_env(), GRADER_LINEINFO="1", GRADER_PLAIN_MALLOC="1")
        for tool in tools:
            cmd = [exe, "--tool", tool, "--print-limit", "20", *child_command(plugin, Path(tmp))]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
                out = p.stdout + p.stderr
            except subprocess.TimeoutExpired:
                results[tool] = {"findings": [f"{tool} did not finish within {timeout} s"], "clean": False,
                                 "raw": ""}
                continue
            findings = translate(tool, out)
            clean = not findings and re.search(r"ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards", out)
            results[tool] = {"findings": findings, "clean": bool(clean), "raw": out[-3000:]}
    return results

