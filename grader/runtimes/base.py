"""The runtime interface every exercise is written against, and what both runtimes share.

An exercise never imports CuPy. It receives a runtime ``rt`` and uses only this:

    mod = rt.compile(SOURCE, name_expressions=(...))     # -> Module
    kernel = mod.get_function("name")                     # -> Kernel
    kernel.max_dynamic_shared_size_bytes = nbytes         # opt in past 48 KB
    kernel(grid, block, (arrays and scalars...), shared_mem=nbytes)
    rt.empty(shape, "float32"), rt.zeros(...), rt.full(...), rt.asarray(numpy_array)
    rt.int32(n), rt.uint32(n), rt.float32(x), rt.int64(n)   # scalars, typed like the C parameter
    rt.multiprocessor_count, rt.max_shared_memory_per_block, rt.max_shared_memory_per_block_optin
    rt.xp                                                 # cupy on the GPU, numpy on the CPU

The GPU runtime wraps CuPy's RawModule/RawKernel; the CPU runtime wraps the emulator. Both prepend
PRELUDE, both map compiler messages back to the line of the exercise file, and both refuse a launch
whose scalar argument does not match its C parameter's type.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import (CompileError, GraderError, KernelFault, LaunchError,  # noqa: F401  (re-exported)
                      RuntimeUnavailable)

# Prepended to every kernel source by both runtimes. NVRTC has no <math.h> or <float.h>, so the
# constants a kernel needs most are defined here (guarded, so a host compiler's own win).
PRELUDE = r"""
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
#ifndef FLT_MAX
#define FLT_MAX 3.402823466e+38f
#endif
#ifndef FLT_MIN
#define FLT_MIN 1.175494351e-38f
#endif
#ifndef M_LOG2E_F
#define M_LOG2E_F 1.4426950408889634f
#endif
#ifndef M_LN2_F
#define M_LN2_F 0.6931471805599453f
#endif
"""


# ---------------------------------------------------------------------------------------------
# Where a kernel source came from, so compiler messages can name the student's file and line.

_origins: list[Path] = []


def register_origin(path) -> None:
    """Remember a Python file whose string literals may hold kernel sources."""
    p = Path(path).resolve()
    if p not in _origins:
        _origins.insert(0, p)


def line_directive(source: str) -> str:
    """A ``#line`` directive that makes line 1 of ``source`` report as its line in its file (the first
    directive of `placed`)."""
    return placed(source).split("\n", 1)[0] + "\n"


GENERATED = "@"   # `file.py@L`: code a Python function generated in place of line L of file.py


def placed(source: str) -> str:
    """``source`` with ``#line`` directives, so that every line the compilers and the emulator cite is
    the student's: a source found whole in a file starts at its line there; a source put together
    from pieces of a file (module 10's kernel, with wgmma helpers generated into its text) gets a
    directive per piece, and each generated stretch is reported as `file.py@L:k`, line k of the code
    generated in place of line L (`generated_lines` words it for the student)."""
    texts = []
    for path in _origins:
        try:
            text = path.read_text()
        except OSError:
            continue
        pos = text.find(source)
        if pos >= 0:
            return f'#line {text.count(chr(10), 0, pos) + 1} "{path.name}"\n' + source
        texts.append((path, text))
    import difflib
    lines = source.split("\n")
    best = None
    for path, text in texts:
        blocks = [b for b in difflib.SequenceMatcher(None, lines, text.split("\n"), autojunk=False)
                  .get_matching_blocks() if b.size >= 3]
        covered = sum(b.size for b in blocks)
        if covered * 2 >= len(lines) and (best is None or covered > best[2]):
            best = (path, blocks, covered)
    if best is None:
        return '#line 1 "kernel.cu"\n' + source
    path, blocks, _ = best

    def boundary(out: list) -> bool:
        """May a directive go here? Only between statements: never inside an asm statement, a macro
        or an expression that spans lines (the last code line ends a statement, a block or a
        directive)."""
        for text in reversed(out):
            code = text.split("//", 1)[0].strip()
            if code:
                return code.startswith("#") and not code.endswith("\\") or code.endswith((";", "{", "}"))
        return True
    out, i, file_end = [], 0, 0
    for b in blocks + [None]:
        a_start = b.a if b else len(lines)
        if i < a_start:
            run = lines[i:a_start]
            if not any(t.strip() for t in run) and (out or b is not None):   # blank lines: no code to cite
                if not out:
                    out.append(f'#line {b.b + 1 - len(run)} "{path.name}"')
                out.extend(run)
            else:
                if boundary(out):
                    out.append(f'#line 1 "{path.name}{GENERATED}{file_end + 1}"')
                out.extend(run)
        if b is None:
            break
        if boundary(out):
            out.append(f'#line {b.b + 1} "{path.name}"')
        out.extend(lines[b.a:b.a + b.size])
        i, file_end = b.a + b.size, b.b + b.size
    return "\n".join(out)


def bf16_value(bits) -> np.ndarray:
    """bfloat16 bits (uint16, as NumPy holds a bfloat16 array) -> float32, exactly."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def source_lines(source: str) -> dict[int, str]:
    """Every line of ``source`` that reports as a line of the student's file, by that line number."""
    out, name, n = {}, None, 0
    for text in placed(source).split("\n"):
        m = re.match(r'#line (\d+) "(.*)"$', text)
        if m:
            name, n = m.group(2), int(m.group(1))
            continue
        if name is not None and GENERATED not in name:
            out.setdefault(n, text)
        n += 1
    return out


def python_stack() -> tuple:
    """(file, line, text) of the Python frames of the caller, outermost first."""
    import traceback
    return tuple((f.filename, f.lineno, (f.line or "").strip()) for f in traceback.extract_stack()[:-1])


def site_in(stack: tuple, path) -> str:
    """'line N `text`' of the innermost frame of `stack` (python_stack's) in the file `path`, with
    ' (called from line M `text`)' where the frame outside it is in that file too; '' where none is."""
    import os
    want = os.path.realpath(str(path))
    mine = [(n, t) for f, n, t in reversed(stack) if os.path.realpath(f) == want][:2]
    said = [f"line {n}" + (f" `{t}`" if t else "") for n, t in mine]
    return said[0] + (f" (called from {said[1]})" if len(said) > 1 else "") if said else ""


def line_text(source: str, line: int) -> str | None:
    """The text of the line of ``source`` that reports as ``line`` of the student's file (`placed`),
    or None where no line does."""
    return source_lines(source).get(line)


def generated_lines(text: str) -> str:
    """`file.py@L:k` (a line of generated code) in the student's words."""
    return re.sub(r"(\b[\w.-]+\.py)@(\d+):(\d+)", r"\1:\2 (line \3 of the code generated in place of line \2)", text)


def full_source(source: str) -> str:
    """What both runtimes compile: the prelude, then the student's source at its own line numbers."""
    return PRELUDE + placed(source)


# ---------------------------------------------------------------------------------------------
# Kernel signatures: parsed from the source so a launch can be checked before it runs.

@dataclass(frozen=True)
class Param:
    name: str
    ctype: str        # the C type with qualifiers removed: "float*", "int", "unsigned int" ...
    pointer: bool


_SCALARS = {
    "int": np.int32, "int32_t": np.int32, "unsigned": np.uint32, "unsigned int": np.uint32,
    "uint32_t": np.uint32, "long long": np.int64, "long long int": np.int64, "int64_t": np.int64,
    "unsigned long long": np.uint64, "uint64_t": np.uint64, "size_t": np.uint64,
    "float": np.float32, "double": np.float64, "bool": np.bool_, "short": np.int16,
    "unsigned short": np.uint16, "char": np.int8, "unsigned char": np.uint8,
}
_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict)\b")
_KERNEL = re.compile(
    r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+'
    r'(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(([^)]*)\)', re.S)


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def parse_signatures(source: str) -> dict[str, list[Param] | None]:
    """``extern "C" __global__`` kernels and their parameters (templates are not parsed). A parameter
    list with preprocessor lines in it gives None, parameters unknown: they depend on the -D options
    (the emulator then reads them from the compiled kernel; a GPU launch goes unchecked)."""
    out: dict[str, list[Param] | None] = {}
    for m in _KERNEL.finditer(_strip_comments(source)):
        if re.search(r"^\s*#", m.group(2), re.M):
            out[m.group(1)] = None
            continue
        params = []
        for raw in m.group(2).split(","):
            raw = " ".join(_QUALIFIERS.sub(" ", raw).split())
            if not raw or raw == "void":
                continue
            pm = re.match(r"(.*?)([\w]+)\s*(\[\s*\])?$", raw)
            if not pm:
                continue
            ctype = pm.group(1).replace(" *", "*").strip()
            pointer = "*" in ctype or bool(pm.group(3))
            params.append(Param(pm.group(2), " ".join(ctype.split()), pointer))
        out[m.group(1)] = params
    return out


def check_args(kernel: str, params: list[Param] | None, args, is_array) -> None:
    """Refuse arguments that would reach the kernel as the wrong bytes."""
    if params is None:
        return
    if not isinstance(args, tuple):
        raise LaunchError(f"{kernel}: the kernel arguments must be a tuple, got {type(args).__name__}")
    if len(args) != len(params):
        raise LaunchError(
            f"{kernel} takes {len(params)} arguments ({', '.join(p.name for p in params)}) "
            f"but the launch passed {len(args)}.")
    for i, (p, a) in enumerate(zip(params, args)):
        where = f"{kernel}: argument {i + 1} ({p.ctype} {p.name})"
        if p.pointer:
            if not is_array(a):
                raise LaunchError(f"{where} is a pointer, but the launch passed {type(a).__name__}. "
                                  "Pass an array allocated with rt.empty/rt.zeros/rt.asarray.")
            continue
        want = _SCALARS.get(p.ctype.replace("*", "").strip())
        if want is None:
            continue  # a struct or a type we do not know: let it through
        # np.float64 subclasses float: only a true Python scalar is the 8-byte surprise.
        if isinstance(a, (bool, int, float)) and not isinstance(a, np.generic):
            raise LaunchError(
                f"{where} got a Python {type(a).__name__}. CuPy sends a Python int as 8 bytes and a "
                f"float as a double, so the kernel would read garbage. Wrap it: "
                f"rt.{np.dtype(want).name}({p.name}).")
        if is_array(a):
            raise LaunchError(f"{where} is a scalar, but the launch passed an array.")
        if not isinstance(a, np.generic) or np.dtype(type(a)) != np.dtype(want):
            got = np.dtype(type(a)).name if isinstance(a, np.generic) else type(a).__name__
            raise LaunchError(f"{where} expects {np.dtype(want).name}, but the launch passed {got}. "
                              f"Wrap it: rt.{np.dtype(want).name}(...).")


def check_launch(kernel: str, grid, block, shared_mem, max_threads=1024) -> tuple[tuple, tuple]:
    """Normalise grid and block to 3-tuples of positive ints and refuse impossible launches."""
    def dims(x, what):
        if isinstance(x, (int, np.integer)):
            x = (int(x),)
        x = tuple(int(v) for v in x)
        if not 1 <= len(x) <= 3 or any(v < 1 for v in x):
            raise LaunchError(f"{kernel}: {what} {x} must have 1 to 3 positive sizes.")
        return x + (1,) * (3 - len(x))
    g, b = dims(grid, "grid"), dims(block, "block")
    threads = b[0] * b[1] * b[2]
    if threads > max_threads:
        raise LaunchError(f"{kernel}: a block of {b} is {threads} threads; a block holds at most "
                          f"{max_threads}. Use fewer threads per block and more blocks.")
    if b[2] > 64:
        raise LaunchError(f"{kernel}: blockDim.z is at most 64, got {b[2]}.")
    if g[1] > 65535 or g[2] > 65535:
        raise LaunchError(f"{kernel}: gridDim.y and gridDim.z are at most 65535, got {g}.")
    if int(shared_mem) < 0:
        raise LaunchError(f"{kernel}: shared_mem must be >= 0, got {shared_mem}.")
    return g, b


# The NaN that rt.empty() is filled with while grading: a quiet NaN with a payload no arithmetic
# produces (a GPU's computed NaN is 0x7fffffff, x86's 0xffc00000), so "never written" can be told
# apart from "computed as NaN".
POISON_BITS = {2: 0x7E5E, 4: 0x7FC0DEAD, 8: 0x7FF80000DEADDEAD}
# NumPy has no bfloat16: such outputs are uint16 arrays of bf16 bits, poisoned with a bf16 NaN of
# the same kind (grader/attention/lowp.py turns it into float32's poison when it widens the output).
BF16_POISON_BITS = 0x7FDE


# float32 and float64 arrays get one payload each, in the order rt.empty() made them during a case
# (6 bits of it: the first 64 arrays), so that an output computed from another array nothing wrote
# (00's scores, a decode workspace) is told apart from one never written: arithmetic on a NaN keeps
# its payload. 16-bit arrays share one payload (too few bits to spare).
_PAYLOAD_SHIFT = {4: 16, 8: 32}
PAYLOADS = 64


def poison_bits(itemsize: int, k: int = 0) -> int:
    """The poison of the k-th array rt.empty() made while grading, for this element size."""
    shift = _PAYLOAD_SHIFT.get(itemsize)
    return POISON_BITS[itemsize] + ((k % PAYLOADS) << shift if shift else 0)


def is_poison(a, k: int | None = None) -> np.ndarray:
    """True where a float array still holds the grader's poison, bit for bit: any array's, or with
    `k`, exactly the k-th array's (that array's own elements that nothing wrote)."""
    a = np.asarray(a)
    if a.dtype.kind != "f" or a.dtype.itemsize not in POISON_BITS:
        return np.isnan(a) if a.dtype.kind in "fc" else np.zeros(a.shape, bool)
    size = a.dtype.itemsize
    bits = a.view(f"u{size}")
    if k is not None:
        return bits == poison_bits(size, k)
    shift = _PAYLOAD_SHIFT.get(size)
    if shift is None:
        return bits == POISON_BITS[size]
    return (bits & ~np.array((PAYLOADS - 1) << shift, bits.dtype)) == POISON_BITS[size]


def _address(a) -> int:
    """The data address of a NumPy or CuPy array."""
    data = getattr(a, "data", None)
    ptr = getattr(data, "ptr", None)
    return int(ptr) if ptr is not None else int(np.asarray(a).__array_interface__["data"][0])


class Runtime:
    """What an exercise may use. Subclasses: GpuRuntime (CuPy) and CpuRuntime (the emulator)."""

    name = "base"
    int32, uint32, int64, uint64 = np.int32, np.uint32, np.int64, np.uint64
    float32, float64 = np.float32, np.float64

    xp = np
    multiprocessor_count = 1
    max_shared_memory_per_block = 48 * 1024
    max_shared_memory_per_block_optin = 48 * 1024
    device_name = "?"
    # kernel name -> {"num_regs", "local_size_bytes" (spills), "shared_size_bytes", ...}, filled as
    # kernels launch, so the grader can report what each kernel costs. Each runtime sets its own dict.
    resources: dict | None = None

    def compile(self, source: str, options=(), name_expressions=None):
        raise NotImplementedError

    # The grader sets this while checking: every rt.empty() is then filled with NaN (or a sentinel for
    # integers), so an output element the kernel never writes is caught instead of passing by luck.
    poison_outputs = False

    def start_poisoning(self) -> None:
        """From now on rt.empty() fills each float array with a poison of its own (the grader
        calls this before a case, and sets poison_outputs back to False after it)."""
        self.poison_outputs = True
        self._poisoned: list[tuple[int, tuple, str]] = []   # payload k -> (data address, shape, dtype)
        self.launched: list[tuple[str, tuple, tuple]] = []  # (kernel, grid, block) of each launch since

    def note_launch(self, name: str, grid, block) -> None:
        """A kernel launch, for the case's report (what ran when nothing was written)."""
        if getattr(self, "launched", None) is not None:
            self.launched.append((name, tuple(grid), tuple(block)))

    def poison_source(self, a) -> str:
        """The arrays whose poison the elements of `a` hold, in words ("the float32 array of shape
        [1, 2, 70, 13]"), for the elements that hold another array's poison."""
        a = np.asarray(a)
        shift = _PAYLOAD_SHIFT.get(a.dtype.itemsize)
        if a.dtype.kind != "f" or shift is None:
            return "another array"
        made = getattr(self, "_poisoned", [])
        ks = sorted(set(((a.view(f"u{a.dtype.itemsize}")[is_poison(a)] >> shift) & (PAYLOADS - 1)).tolist()))
        named = [f"the {made[k][2]} array of shape {list(made[k][1])}" for k in ks if k < len(made)]
        return " and ".join(named) if named else "another array"

    def poison_index(self, a) -> int | None:
        """Which payload rt.empty() gave the array `a` (its own poison), None if it made no such array."""
        if np.dtype(getattr(a, "dtype", np.float32)).itemsize not in _PAYLOAD_SHIFT:
            return 0
        where = _address(a)
        return next((k for k, (addr, _, _) in enumerate(getattr(self, "_poisoned", [])) if addr == where), None)

    # While the grader checks a case: the ledger of its buffers (provenance.py), so that an answer the
    # launcher computes outside its kernels fails. The runtimes report each launch to it.
    ledger = None

    def _made(self, a, how: str, call: str):
        if self.ledger is not None:
            self.ledger.made(a, how, call)
        return a

    def empty(self, shape, dtype="float32"):
        return self._made(self._empty(shape, dtype), "made", "rt.empty")

    def _empty(self, shape, dtype):
        if not self.poison_outputs:
            return self.xp.empty(shape, dtype=dtype)
        dt = np.dtype(dtype)
        if dt.kind == "f" and dt.itemsize in POISON_BITS:
            if not hasattr(self, "_poisoned"):      # poison_outputs set without start_poisoning()
                self._poisoned = []
            k = len(self._poisoned)
            out = self.xp.full(shape, poison_bits(dt.itemsize, k), dtype=np.dtype(f"u{dt.itemsize}")).view(dt)
            self._poisoned.append((_address(out), tuple(np.shape(out)), dt.name))
            return out
        if dt == np.uint16:
            return self.xp.full(shape, BF16_POISON_BITS, dtype=dt)
        fill = np.nan if dt.kind in "fc" else (np.iinfo(dt).min if dt.kind in "iu" else 0)
        return self.xp.full(shape, fill, dtype=dt)

    # A tensor map as a kernel parameter: 128 opaque bytes, 64-byte aligned (CUtensorMap).
    TENSOR_MAP = np.dtype([("opaque", np.uint64, 16)], align=True)
    TMA_BOX_COLS = 64        # features per box: one 128-byte swizzled row of 16-bit elements

    def tma_layout(self, x, box_rows: int, elem: str):
        """The geometry of tensor_map's map, after the checks cuTensorMapEncodeTiled makes: x [..., n, d]
        of 16-bit elements, contiguous, seen as [B·H, n, d] -> (base address, dims (d, n, B·H), strides
        in bytes of dims 1 and 2, box (64, box_rows, 1)), innermost first."""
        if x.dtype.itemsize != 2 or not x.flags.c_contiguous or x.ndim < 2:
            raise LaunchError(f"a tensor map needs a contiguous array of 16-bit elements with at least two "
                              f"dimensions, got {x.dtype} of shape {tuple(x.shape)}"
                              f"{' (not contiguous)' if not x.flags.c_contiguous else ''}")
        if elem not in ("float16", "bfloat16"):
            raise LaunchError(f"a tensor map's element type is float16 or bfloat16, got {elem!r}")
        *lead, n, d = x.shape
        bh = int(np.prod(lead)) if lead else 1
        base = _address(x)
        strides = (d * 2, n * d * 2)
        if base % 16 or any(v % 16 for v in strides):
            raise LaunchError(f"a tensor map needs a 16-byte aligned address and strides that are multiples "
                              f"of 16 bytes; got rows of {d * 2} bytes")
        if not 1 <= box_rows <= 256:
            raise LaunchError(f"a tensor map's box has 1 to 256 elements per dimension, got {box_rows} rows")
        if min(d, n, bh) < 1:
            raise LaunchError(f"a tensor map over an empty array {tuple(x.shape)}")
        return base, (d, n, bh), strides, (self.TMA_BOX_COLS, int(box_rows), 1)

    def tensor_map(self, x, box_rows: int, elem: str):
        """A TMA tensor map (module 10) over x [..., n, d] of 16-bit elements, seen as [B·H, n, d]:
        boxes of 64 features × box_rows rows, 128-byte swizzle, zeros past the ends. Returned as the
        128 bytes a kernel takes by value (`const __grid_constant__ TensorMap`)."""
        raise RuntimeUnavailable(f"the {self.name} runtime has no tensor memory accelerator (TMA): "
                                 "module 10 runs on an sm_90 GPU (--backend gpu)")

    def zeros(self, shape, dtype="float32"):
        return self._made(self.xp.zeros(shape, dtype=dtype), "made", "rt.zeros")

    def full(self, shape, value, dtype="float32"):
        return self._made(self.xp.full(shape, value, dtype=dtype), "made", "rt.full")

    def asarray(self, a, dtype=None):
        return self._made(self.xp.ascontiguousarray(self.xp.asarray(a, dtype=dtype)), "host", "rt.asarray")

    def to_numpy(self, a) -> np.ndarray:
        return np.asarray(a)

    def synchronize(self) -> None:
        pass

    def healthy(self) -> bool:
        """False once a fault has left the device unusable (a GPU context after an illegal address)."""
        return True
