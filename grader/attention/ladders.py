"""What the speed ladders (grader/tasks/NAME/ladder.py, run by `grader ladder`) share: cutting pieces
out of a solution's kernel text, editing it, and a copy of a solution module that runs another kernel.

A step of a ladder is a complete kernel that shares the solution's code rather than copying it: its
text is the ladder's own lines with the solution's pieces spliced in (`piece`, `fill`), or the
solution's text with edits (`replace`), and it runs through the solution's own launch code
(`with_kernel`). Should the solution's text move, an error names the line that is no longer found.
"""
from __future__ import annotations

import re

from ..errors import GraderError

_MARKER = re.compile(r"^\s*//\s*(BEGIN|END) SOLUTION")


def piece(kernel: str, first: str | None, before: str | None = None, *, block: str | None = None,
          through: str | None = None, where: str = "the solution") -> str:
    """Lines of a solution's `kernel` text, the BEGIN/END SOLUTION marker lines left out: from the
    line that begins with `first` (after its indentation; None: the first line) up to, not including,
    the next line that begins with `before` (None, with no `block` or `through`: to the end); or up to
    and including the next line that begins with `through`; or to the end of the block that the next
    line beginning with `block` opens (its closing "}" or "};" at that line's indentation)."""
    lines = kernel.strip("\n").split("\n")
    start = 0
    if first is not None:
        starts = [i for i, s in enumerate(lines) if s.strip().startswith(first)]
        if len(starts) != 1:
            raise GraderError(f"{where}: {len(starts)} lines begin with {first!r}, not one")
        start = starts[0]
    end = len(lines)
    mark = before or through or block
    if mark is not None:
        j = next((k for k in range(start + (before is not None), len(lines)) if lines[k].strip().startswith(mark)),
                 None)
        if j is None:
            raise GraderError(f"{where}: no line {mark!r} after {first!r}")
        if block is not None:
            indent = lines[j][: len(lines[j]) - len(lines[j].lstrip())]
            j = next((k for k in range(j + 1, len(lines)) if lines[k] in (indent + "}", indent + "};")), None)
            if j is None:
                raise GraderError(f"{where}: the block {block!r} after {first!r} does not close")
        end = j if before is not None else j + 1
    return "\n".join(s for s in lines[start:end] if not _MARKER.match(s)).rstrip()


def pieces(kernel: str, cuts: dict, where: str = "the solution") -> dict:
    """{@KEY@: its piece of `kernel`} for each @KEY@: (first, before) of `cuts` (as piece() reads them)."""
    return {key: piece(kernel, first, before, where=where) for key, (first, before) in cuts.items()}


def fill(template: str, pieces: dict) -> str:
    """`template` with each @KEY@ of `pieces` replaced by its text; each key must occur exactly once."""
    for key, text in pieces.items():
        if template.count(key) != 1:
            raise GraderError(f"the ladder's kernel text has {template.count(key)} of {key}, not one")
        template = template.replace(key, text)
    return template


def replace(old: str, new: str, where: str = "the solution"):
    """An edit of a kernel's text: `old`, which must occur exactly once, becomes `new`."""
    def edit(text: str) -> str:
        if text.count(old) != 1:
            raise GraderError(f"{where}'s text has {text.count(old)} of {old[:90]!r}, not one")
        return text.replace(old, new)
    return edit


def switch_ladder(switches: tuple, labels: list, step) -> list:
    """The steps of a ladder of compile-time switches, each one switch more: step i (from 1) is
    step(labels[i - 1], {the first i - 1 switches on, the others off}); the last label is the solution
    itself, step(label, None). Then the variant with every switch on, checked with the steps and never
    timed: the solution's kernel as the ladder's text builds it."""
    def first(n: int) -> dict:
        return {name: int(i < n) for i, name in enumerate(switches)}
    if len(labels) != len(switches) + 1:
        raise GraderError(f"{len(switches)} switches make {len(switches) + 1} steps, not {len(labels)}")
    return ([step(label, first(i)) for i, label in enumerate(labels[:-1])] + [step(labels[-1], None)]
            + [step("(variant, all on)", first(len(switches)), timed=False)])


def with_kernel(module, kernel: str, switches: dict | None = None, shared_bytes=None):
    """`module`, a fresh copy of a solution (LadderContext.fresh), running `kernel` through the
    solution's own launch code: its KERNEL replaced, `switches` added to every CONFIG[d] (the launch
    code compiles CONFIG's items in as -D options) and, when the kernel lays out its shared memory
    otherwise, shared_bytes(module, d) in place of the solution's."""
    module.KERNEL = kernel
    module.CONFIG = {d: dict(cfg, **(switches or {})) for d, cfg in module.CONFIG.items()}
    if shared_bytes is not None:
        module.shared_bytes = lambda d: shared_bytes(module, d)
    return module


def normal_inputs(rt, params: dict, solution=None, names=("q", "k", "v")) -> dict:
    """What a ladder is timed on: each of `names` [B, H, N, d] in float16 from a standard normal, on
    rt's device (the timed shapes have H = Hkv and Nq = Nk), and the default scale."""
    xp = rt.xp
    shape = (params["B"], params["H"], params["Nq"], params["d"])
    return dict({n: xp.random.standard_normal(shape, dtype=xp.float32).astype(xp.float16) for n in names},
                scale=params["d"] ** -0.5, causal=params["causal"])


# What the ladders of modules 06 and 11 share before their switches turn cp.async and ldmatrix on: tile
# copies and fragment reads done with plain loads and stores. The kernel defines before it NTHREADS,
# elem_t, the switch ASYNC, the solution's load_tile_async, and at<W>(row, col): the element offset of
# (row, col) in a [rows][W] tile of shared memory, any col (swizzled or not).
PLAIN_LOADS = r"""
// Rows [row0, row0 + ROWS) of a [n_rows][D] matrix -> a [ROWS][D] tile, 16 bytes per thread and step,
// zeros past n_rows: by cp.async (the solution's load_tile_async: not waited for here), or by plain
// loads and stores (visible to the block after a __syncthreads).
template <int ROWS, int D>
__device__ __forceinline__ void load_tile(elem_t* tile, const elem_t* src, int row0, int n_rows, int tid)
{
#if ASYNC
    load_tile_async<ROWS, D>(tile, src, row0, n_rows, tid);
#else
    constexpr int CHUNKS = D / 8;
    constexpr int ROW_STEP = NTHREADS / CHUNKS;
    static_assert(NTHREADS % CHUNKS == 0 && ROWS % ROW_STEP == 0, "the block copies whole rows");
    const int r = tid / CHUNKS, c = (tid % CHUNKS) * 8;
    #pragma unroll
    for (int n = 0; n < ROWS / ROW_STEP; ++n) {
        const int row = r + n * ROW_STEP;
        uint4 x = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + row < n_rows) x = *reinterpret_cast<const uint4*>(src + (size_t)(row0 + row) * D + c);
        *reinterpret_cast<uint4*>(tile + at<D>(row, c)) = x;
    }
#endif
}

// Without ldmatrix: the registers ldmatrix_x4 gives for the 16 × 16 block (rows 16 r16 .., cols 16 c16
// ..) of a [rows][W] tile, read element by element of the documented fragment layout (lane l: g = l / 4,
// t = l % 4): r[i] = matrix i (rows 8 (i % 2) .., cols 8 (i / 2) ..), row g, cols 2t, 2t + 1, one 32-bit
// load per register.
template <int W>
__device__ __forceinline__ void frag_by_loads(unsigned r[4], const elem_t* tile, int r16, int c16, int lane)
{
    const int g = lane / 4, t = lane % 4;
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        r[i] = *reinterpret_cast<const unsigned*>(tile + at<W>(r16 * 16 + 8 * (i % 2) + g, c16 * 16 + 8 * (i / 2) + 2 * t));
}

// The same block as ldmatrix_x4_trans gives it, each 8 × 8 matrix transposed: r[i] = rows 2t, 2t + 1 of
// column g of matrix i. The two elements of a register sit in two rows of the tile: two 16-bit loads.
template <int W>
__device__ __forceinline__ void frag_trans_by_loads(unsigned r[4], const elem_t* tile, int r16, int c16, int lane)
{
    const int g = lane / 4, t = lane % 4;
    const unsigned short* bits = reinterpret_cast<const unsigned short*>(tile);
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = r16 * 16 + 8 * (i % 2) + 2 * t, col = c16 * 16 + 8 * (i / 2) + g;
        r[i] = (unsigned)bits[at<W>(row, col)] | ((unsigned)bits[at<W>(row + 1, col)] << 16);
    }
}"""
