"""Build a kernel source into a shared library for the emulator, with the host C++ compiler.

The source is the exact text both runtimes compile (base.full_source: prelude, a #line directive
naming the student's file, the student's code), changed only where C++ cannot express a CUDA
construct and always on the same line, so every compiler message and every fault names the
student's line. Libraries are cached by a hash of everything that goes into them.
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..base import CompileError, line_directive
from . import ptx as _ptx

CSRC = Path(__file__).with_name("csrc")
HEADER = CSRC / "cuda_emu.h"              # the umbrella; its topics are in csrc/emu/
RUNTIME_SRC = CSRC / "emu_runtime.cpp"    # with csrc/platform/ and csrc/cudaemu_abi.h
INCLUDE = CSRC / "include"

# Never -ffast-math: it lets the compiler assume no infinities, and online softmax starts from
# -INFINITY. -fno-math-errno only lets sqrtf become one instruction. Stack-clash protection
# makes a large local array touch its pages in order, so an overflow hits the guard page instead
# of another thread's stack. DWARF 4: GCC 12's DWARF 5 line tables lose #line file names.
BASE_FLAGS = ["-std=c++17", "-O2", "-g1", "-gdwarf-4", "-fPIC", "-fvisibility=hidden", "-fno-strict-aliasing",
              "-fno-math-errno", "-fno-omit-frame-pointer", "-fstack-clash-protection", "-U_FORTIFY_SOURCE",
              "-D_FORTIFY_SOURCE=0", "-w",
              # A per-thread array indexed past its end (s[r][n] with n <= TN) traps at its line
              # instead of reading a neighbour on the stack: such a bug is silent on a GPU. GCC's
              # bounds check misses an array of structs (float4 kr[8]; kr[8] = ...): object-size
              # catches that one.
              "-fsanitize=bounds,object-size", "-fsanitize-undefined-trap-on-error", "-fno-crossjumping"]


def emulator_sources_digest() -> str:
    """A hash of every file under csrc/, names included.

    Part of every cache key: a build reads headers through #include chains that no list here
    would keep up with, so all of csrc/ counts, and an edit to any of it rebuilds.
    """
    h = hashlib.sha256()
    for path in sorted(p for p in CSRC.rglob("*") if p.is_file()):
        h.update(path.relative_to(CSRC).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def cache_dir() -> Path:
    """Where built libraries live: $GRADER_CACHE/cpu, else the user's cache folder."""
    root = os.environ.get("GRADER_CACHE")
    if root:
        return Path(root).expanduser() / "cpu"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "flash-course" / "cpu"


# ---------------------------------------------------------------------------------------------
# The host compiler.

@lru_cache(maxsize=1)
def find_compiler() -> tuple[str, str] | None:
    """(path, version line) of the host C++ compiler: $CXX, else g++, clang++ or c++ on PATH."""
    candidates = [os.environ["CXX"]] if os.environ.get("CXX") else []
    candidates += ["g++", "clang++", "c++"]
    for c in candidates:
        path = shutil.which(c)
        if not path:
            continue
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0:
            return path, (out.stdout.splitlines() or ["?"])[0].strip()
    return None


def compiler_status() -> str:
    found = find_compiler()
    if not found:
        return "not found: install g++ (Debian/Ubuntu: apt install g++) or clang++, or set CXX"
    return f"{found[1]} ({found[0]})"


def _compiler() -> tuple[str, str]:
    found = find_compiler()
    if not found:
        raise CompileError(
            "the CPU emulator needs a host C++ compiler and found none (looked for $CXX, g++, "
            "clang++, c++). Install one: `sudo apt install g++` (Debian/Ubuntu), "
            "`xcode-select --install` (macOS), or set CXX to its path.")
    return found


def _host_flags() -> list[str]:
    flags = list(BASE_FLAGS)
    if os.environ.get("GRADER_CPU_UCONTEXT"):
        flags.append("-DCUDAEMU_UCONTEXT")
    return flags


# ---------------------------------------------------------------------------------------------
# Where the source came from, and what it may not use.

def origin(source: str) -> tuple[str, int]:
    """(file name, line number of the source's first line), as the #line directive says."""
    m = re.match(r'#line (\d+) "(.*)"', line_directive(source))
    return (m.group(2), int(m.group(1))) if m else ("kernel.cu", 1)


def _blank(m: re.Match) -> str:
    # Keep newlines (for line numbers) and the length; drop everything else.
    return re.sub(r"[^\n]", " ", m.group(0))


def strip_code(src: str) -> str:
    """Comments and string/char literals blanked out, lines and offsets kept."""
    pattern = r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\''
    return re.sub(pattern, _blank, src, flags=re.S)


# Inline PTX (`asm`) is not here: ptx.py runs the subset tensor-core kernels use (mma.sync,
# ldmatrix, cp.async ...) and refuses any other instruction with its line. Nor is WMMA (below).
_UNSUPPORTED = [
    (r"\b__pipeline_\w+|\bmemcpy_async\b|\bcuda::pipeline\b|\bcuda::barrier\b",
     "asynchronous copies (__pipeline_*, memcpy_async, cuda::pipeline)",
     "Load the tile with ordinary loads and stores followed by __syncthreads(), or with cp.async "
     "in inline PTX (cp.async.cg.shared.global, commit_group, wait_group), which the emulator "
     "runs."),
    (r"\b__cluster_dims__\b|\bthis_cluster\s*\(|\bcluster_group\b|\bcluster\s*\.\s*sync\s*\(",
     "thread-block clusters",
     "Use one block per tile; clusters need a GPU."),
    (r"\bthis_grid\s*\(|\bgrid_group\b|\bgrid\s*\.\s*sync\s*\(",
     "grid-wide synchronisation (cooperative launch)",
     "Split the work into two kernel launches: a launch boundary is a grid-wide barrier."),
    (r"\btexture\s*<|\btex[123]D\w*\s*[<(]|\btex1Dfetch\b|\bcudaTextureObject_t\b|"
     r"\bsurf[123]D\w*\s*[<(]|\bcudaSurfaceObject_t\b",
     "textures and surfaces",
     "Read the array through an ordinary pointer."),
    (r"<<<", "dynamic parallelism (a kernel launching a kernel)",
     "Launch every kernel from Python."),
]
# WMMA (<mma.h>) is not here either: csrc/emu/wmma.h runs m16n16k16 with __half / bf16 inputs and
# float accumulators, and refuses the other shapes and types with a static_assert whose message
# starts with this; a failed build that contains it becomes that message at the student's line.
REFUSAL_PREFIX = "CPU emulator: "


def check_unsupported(source: str) -> None:
    """Refuse, with the student's line, what the emulator cannot run."""
    code = strip_code(source)
    fname, first = origin(source)
    for pattern, what, advice in _UNSUPPORTED:
        m = re.search(pattern, code)
        if m:
            line = first + code.count("\n", 0, m.start())
            raise CompileError(
                f"{fname}:{line}: {what} is not supported by the CPU emulator. {advice} "
                "(Or run on a GPU: --backend gpu.)")
    # Inline PTX: every asm statement must be one the emulator can run.
    try:
        _ptx.rewrite(source, lambda pos: f"{fname}:{first + code.count(chr(10), 0, pos)}")
    except ValueError as e:
        raise CompileError(str(e)) from None


# ---------------------------------------------------------------------------------------------
# Source changes for the host compiler. Each keeps the text on the same lines.

_EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+((?:__align__\s*\(\s*\w+\s*\)\s*|alignas\s*\(\s*\w+\s*\)\s*)*)"
    r"([A-Za-z_][\w:<>\s,]*?[\w>])\s*"
    r"((?:__align__\s*\(\s*\w+\s*\)\s*|alignas\s*\(\s*\w+\s*\)\s*)*)"
    r"\b([A-Za-z_]\w*)\s*\[\s*\]\s*;")


def _same_lines(original: str, replacement: str) -> str:
    return replacement + "\n" * original.count("\n")


def _where(code: str):
    """For a full source (prelude, #line directives, the student's code): offset -> 'file:line', as
    the last directive before it says."""
    marks = list(re.finditer(r'^#line (\d+) "(.*)"[ \t]*$', code, re.M))
    if not marks:
        return lambda pos: f"kernel.cu:{code.count(chr(10), 0, pos) + 1}"

    def where(pos: int) -> str:
        m = next((m for m in reversed(marks) if m.end() < pos), marks[0])
        return f"{m.group(2)}:{int(m.group(1)) + code.count(chr(10), m.end() + 1, pos)}"
    return where


def transform(source: str) -> str:
    """The student's source as the host compiler needs it."""
    # Inline PTX becomes calls into the emulator (csrc/emu/mma.h, async_copy.h), line for line.
    try:
        source = _ptx.rewrite(source, _where(source))
    except ValueError as e:
        raise CompileError(str(e)) from None
    code = strip_code(source)

    # `extern __shared__ T name[];` is the launch's dynamic shared memory: a reference to the
    # runtime's pointer, valid at file scope too (it binds once, and reads the current block's).
    out, pos = [], 0
    for m in _EXTERN_SHARED.finditer(code):
        ctype = " ".join(m.group(2).split())
        name = m.group(4)
        repl = (f"{ctype}* const& {name} = "
                f"*reinterpret_cast<{ctype}* const*>(&__cudaemu_dynamic_smem);")
        out.append(source[pos:m.start()])
        out.append(_same_lines(source[m.start():m.end()], repl))
        pos = m.end()
    out.append(source[pos:])
    source = "".join(out)

    # __shared__ already means static here, and a standard attribute may not follow it.
    source = re.sub(r"\bstatic(\s+)__shared__\b", r"\1__shared__", source)
    source = re.sub(r"\b__shared__(\s+)alignas\s*\(\s*(\w+)\s*\)",
                    r"__shared__\1__attribute__((aligned(\2)))", source)
    return _template_shared(source)


# `__shared__` is a static in a section of its own (csrc/emu/core.h), but GCC drops the section of a
# static local in a template instantiation: such an array would be neither poisoned at each block
# nor in the shared window of inline PTX, nor watched for races. Inside a template, each declaration
# becomes references to slots of the runtime's arena in that section (__cudaemu_template_shared).
_ALIGN = re.compile(r"__align__\s*\(\s*(\w+)\s*\)|alignas\s*\(\s*(\w+)\s*\)|"
                    r"__attribute__\s*\(\(\s*aligned\s*\(\s*(\w+)\s*\)\s*\)\)")
_DECLARATOR = re.compile(r"^\s*(\**)\s*([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*)$")


def _in_template(code: str, pos: int) -> bool:
    """Whether offset ``pos`` lies in the body of a template (function or class)."""
    depth, i = 0, pos - 1
    while i >= 0:
        c = code[i]
        if c == "}":
            depth += 1
        elif c == "{":
            if depth:
                depth -= 1
            else:                   # an enclosing brace: is its header a template's?
                start = max(code.rfind(";", 0, i), code.rfind("}", 0, i), code.rfind("{", 0, i))
                if re.search(r"\btemplate\s*<", code[start + 1:i]):
                    return True
        i -= 1
    return False


def _template_shared(source: str) -> str:
    code = strip_code(source)
    out, pos = [], 0
    for n, m in enumerate(re.finditer(r"\b__shared__\b", code)):
        end = code.find(";", m.end())
        if end < 0 or not _in_template(code, m.start()):
            continue
        body = source[m.end():end]
        align = [a for g in _ALIGN.findall(body) for a in g if a]
        plain = _ALIGN.sub(" ", body)
        first = re.match(r"\s*((?:[^\[,*&]*?\s)|(?:[^\[,]*?[*&]))\s*([A-Za-z_]\w*)\s*(?=\[|,|$)", plain)
        if not first or "(" in plain or "=" in plain:
            continue                # not a plain declaration of arrays or scalars: left as it was
        ctype, rest = first.group(1), plain[first.end(1):]
        pieces = [_DECLARATOR.match(rest[lo:hi]) for lo, hi in _ptx._split_top(rest, 0, len(rest), ",")]
        if not ctype.strip() or not all(pieces):
            continue
        repl = [f"static char __cudaemu_shkey{n}[{len(pieces)}];"]
        for k, d in enumerate(pieces):
            alias, name = f"__cudaemu_sh{n}_{k}", d.group(2)
            repl.append(
                f"using {alias} = {ctype.strip()} {d.group(1)}{d.group(3).strip()}; "
                f"{alias}& {name} = *reinterpret_cast<{alias}*>(__cudaemu_template_shared("
                f"&__cudaemu_shkey{n}[{k}], sizeof({alias}), "
                f"{_alignment(alias, align)}, \"{name}\", __FILE__, __LINE__));")
        out.append(source[pos:m.start()])
        out.append(_same_lines(source[m.start():end + 1], " ".join(repl)))
        pos = end + 1
    out.append(source[pos:])
    return "".join(out)


def _alignment(alias: str, align: list[str]) -> str:
    expr = f"alignof({alias})"
    for a in align:
        expr = f"((size_t)({a}) > {expr} ? (size_t)({a}) : {expr})"
    return expr


# ---------------------------------------------------------------------------------------------
# Entry points.

def _entry_code(exprs: list[str]) -> str:
    lines = ['\n#line 1 "cudaemu-entry-points"']
    for i, expr in enumerate(exprs):
        e = f"decltype(__cudaemu::entry_of(&{expr}))"
        vis = 'extern "C" __attribute__((visibility("default")))'
        lines.append(f"{vis} void __cudaemu_entry_{i}(void** a) {{ {e}::invoke(&{expr}, a); }}")
        lines.append(f"{vis} int __cudaemu_nparams_{i}() {{ return {e}::nparams(); }}")
        lines.append(f"{vis} const char* __cudaemu_param_{i}(int k) {{ return {e}::param(k); }}")
        lines.append(f"{vis} unsigned long __cudaemu_psize_{i}(int k) {{ return {e}::param_size(k); }}")
    return "\n".join(lines) + "\n"


def _defines(options) -> list[str]:
    """The options that mean the same to the host compiler: macro definitions."""
    out = []
    for o in options:
        o = str(o)
        for pre in ("-D", "--define-macro=", "-U", "--undefine-macro="):
            if o.startswith(pre) and len(o) > len(pre):
                flag = "-U" if pre.startswith(("-U", "--undef")) else "-D"
                out.append(flag + o[len(pre):])
    return out


_STATIC_ASSERT = re.compile(
    r"static.assert(?:ion)? failed[^\n]*?(?:: |\")(" + re.escape(REFUSAL_PREFIX) + r'[^\n"]*)')
_LOCATION = re.compile(r"^(.+?):(\d+):(?:\d+:)?\s+(?:required from|note: in instantiation|"
                       r"note: in .* requested here|note: .*requested here)", re.M)


def emulator_refusal(log: str, code: str) -> str | None:
    """'file:line: message' when the host compiler stopped at one of the emulator's own refusals
    (a static_assert in csrc/emu/, e.g. a WMMA shape it does not run), else None.

    The line is the first place in the student's file on the way to the assertion: GCC lists
    "file:line:col:   required from here" (and "required from 'f<...>'" for templates), clang
    "file:line:col: note: in instantiation ... requested here".
    """
    m = _STATIC_ASSERT.search(log)
    if not m:
        return None
    message = m.group(1).strip()
    d = re.search(r'^#line (\d+) "(.*)"[ \t]*$', code, re.M)
    student = d.group(2) if d else "kernel.cu"
    before = log[:m.start()]
    start = before.rfind("In instantiation of")
    start = before.rfind("\n", 0, start) + 1 if start >= 0 else 0
    place = None
    for loc in _LOCATION.finditer(log, start, m.start()):
        if os.path.basename(loc.group(1)) == os.path.basename(student):
            place = f"{student}:{loc.group(2)}"
            break
    if place is None:   # clang names the place after the error
        for loc in _LOCATION.finditer(log, m.end()):
            if os.path.basename(loc.group(1)) == os.path.basename(student):
                place = f"{student}:{loc.group(2)}"
                break
    advice = "" if "--backend gpu" in message else " (Or run on a GPU: --backend gpu.)"
    return f"{place + ': ' if place else ''}{message}{advice}"


@dataclass
class Built:
    path: Path
    entries: dict[str, int]   # get_function name -> index of its __cudaemu_entry_<i>


def _run(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except OSError as e:
        raise CompileError(f"could not run the host compiler for {what}: {e}") from None
    except subprocess.TimeoutExpired:
        raise CompileError(f"the host compiler took over 10 minutes on {what}") from None


def _atomic_build(target: Path, cmd_for, what: str, failure) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        out = Path(tmp) / target.name
        proc = _run(cmd_for(Path(tmp), out), what)
        if proc.returncode != 0:
            failure(proc.stderr + proc.stdout, Path(tmp))
        os.replace(out, target)


@lru_cache(maxsize=None)
def _runtime_object() -> Path:
    cxx, version = _compiler()
    flags = _host_flags()
    key = hashlib.sha256("\0".join([emulator_sources_digest(), version, cxx, *flags]).encode())
    target = cache_dir() / f"emu-runtime-{key.hexdigest()[:24]}.o"
    if not target.exists():
        def fail(log, _tmp):
            raise CompileError("the CPU emulator's runtime did not compile (a bug in the "
                               "emulator, or a compiler it does not know):", log)
        _atomic_build(target, lambda tmp, out: [cxx, *flags, "-c", str(RUNTIME_SRC), "-o", str(out)],
                      "the emulator runtime", fail)
    return target


def counting_flags(version: str) -> list[str]:
    """ThreadSanitizer's instrumentation without its runtime: every load and store of the kernel
    calls a __tsan_* function, which csrc/counters.h defines (it counts; no race machinery runs).
    Function entry and exit are not instrumented (nothing to count there)."""
    if "clang" in version.lower():
        return ["-fsanitize=thread", "-mllvm", "-tsan-instrument-func-entry-exit=0"]
    return ["-fsanitize=thread", "--param", "tsan-instrument-func-entry-exit=0"]


def build(code: str, exprs: list[str], names: list[str], options=(), nvrtc_checked=False,
          counting: bool = False) -> Built:
    """Compile ``code`` (already through base.full_source) with entry points for ``exprs``.

    ``names[i]`` is what get_function will be asked for (a kernel name or a name expression).
    ``counting``: instrument every load and store for the counters (csrc/counters.h); the kernel
    is compiled with the sanitizer's instrumentation and linked without its runtime.
    """
    cxx, version = _compiler()
    rt_obj = _runtime_object()
    flags = _host_flags() + _defines(options)
    extra = counting_flags(version) if counting else []
    text = transform(code) + _entry_code(exprs)
    key = hashlib.sha256("\0".join(
        [text, emulator_sources_digest(), version, cxx, *flags, *extra]).encode())
    target = cache_dir() / f"kernel-{key.hexdigest()[:32]}{'-counting' if counting else ''}.so"
    if not target.exists():
        def cmd(tmp: Path, out: Path):
            src = tmp / "kernel.cpp"
            src.write_text(text)
            include = ["-I", str(INCLUDE), "-include", str(HEADER)]
            if counting:   # compile instrumented, then link without the sanitizer's runtime
                obj = tmp / "kernel.o"
                return ["sh", "-c", " ".join(shlex.quote(str(x)) for x in
                        [cxx, *flags, *extra, *include, "-c", src, "-o", obj]) + " && " +
                        " ".join(shlex.quote(str(x)) for x in
                        [cxx, *flags, "-shared", obj, rt_obj, "-o", out, "-lm", "-ldl"])]
            return [cxx, *flags, "-shared", *include, str(src), str(rt_obj), "-o", str(out), "-lm", "-ldl"]

        def fail(log, tmp):
            log = log.replace(str(tmp) + os.sep, "")
            refused = emulator_refusal(log, code)
            if refused:
                raise CompileError(refused)
            if nvrtc_checked:
                raise CompileError(
                    "NVRTC accepts this kernel, but the CPU emulator cannot build it: it uses "
                    "a CUDA feature the emulator does not provide. The host compiler said:", log)
            raise CompileError(
                "the kernel did not compile (host C++ compiler; install NVRTC for the CUDA "
                "compiler's own messages: pip install -e '.[nvrtc]'):", log)
        _atomic_build(target, cmd, "the kernel", fail)
    return Built(target, {n: i for i, n in enumerate(names)})
