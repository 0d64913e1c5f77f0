"""Replays of mma.sync fragment bugs (module 06), each the reference computation with the bug.

An m16n8k16 operand travels as 8×8 pieces: ldmatrix loads them, and a fragment's registers hold
them in a fixed order (the lesson's figures). Two misplacements are common: the two off-diagonal
pieces of a 16×16 block exchanged (registers paired in the wrong order), and each piece transposed
(ldmatrix where ldmatrix.trans is due, or the reverse). Both are rearrangements of q, k or v, which
the float64 attention then reads. A row's sum l, reduced over the four lanes of a quad with one
shuffle missing, covers only the key columns of two lanes: lane t holds columns 2t, 2t + 1 of each
8 (of S, and of o).
"""
from __future__ import annotations

import numpy as np

from ..spec import Cause
from . import lowp
from .replays import FLOAT32_EXP_FLOOR, attend, matches, scores, streamed, tiles


def _blocks(x, size: int):
    """x [..., N, D] zero-padded to multiples of `size`, and a function that cuts it back."""
    x = np.asarray(x, np.float64)
    n, d = x.shape[-2:]
    pad = [(0, 0)] * (x.ndim - 2) + [(0, -n % size), (0, -d % size)]
    return np.pad(x, pad), lambda y: y[..., :n, :d]


def quadrants_swapped(x) -> np.ndarray:
    """In each 16×16 block, the piece at (rows 0-7, cols 8-15) exchanged with (rows 8-15, cols 0-7)."""
    y, cut = _blocks(x, 16)
    n, d = y.shape[-2:]
    y = y.reshape(y.shape[:-2] + (n // 16, 2, 8, d // 16, 2, 8)).copy()
    upper = y[..., :, 0, :, :, 1, :].copy()
    y[..., :, 0, :, :, 1, :] = y[..., :, 1, :, :, 0, :]
    y[..., :, 1, :, :, 0, :] = upper
    return cut(y.reshape(y.shape[:-6] + (n, d)))


def pieces_transposed(x) -> np.ndarray:
    """Each 8×8 piece transposed in place."""
    y, cut = _blocks(x, 8)
    n, d = y.shape[-2:]
    y = y.reshape(y.shape[:-2] + (n // 8, 8, d // 8, 8))
    y = np.swapaxes(y, -3, -1)
    return cut(np.ascontiguousarray(y).reshape(y.shape[:-4] + (n, d)))


OPERAND_BUGS = (
    ("quadrants", quadrants_swapped,
     "the two off-diagonal 8×8 pieces of each 16×16 block exchanged (the fragment's registers paired in "
     "the wrong order)"),
    ("transposed", pieces_transposed,
     "each 8×8 piece transposed (ldmatrix where ldmatrix.trans is due, or the reverse)"),
)


def operand_causes(ctx, visible=None):
    """q, k or v reaching the mma with its 8×8 pieces misplaced."""
    for name in ("q", "k", "v"):
        for bug, rearrange, what in OPERAND_BUGS:
            alt = dict(ctx.inputs)
            alt[name] = rearrange(ctx.inputs[name])
            if matches(ctx, *attend(*scores(alt), visible)):
                yield Cause(f"fragment:{name}:{bug}", (
                    f"{name} reaches the mma with {what}: the output matches attention over that "
                    f"rearranged {name}. Check the ldmatrix of {name} and the order of the registers "
                    f"handed to mma_16816 against the fragment layout in the lesson."))


def streaming_causes(ctx, s, v, visible=None):
    """P's 8×8 pieces misplaced on their way into the second mma (l sums the right P), and the
    rescale of acc by alpha reaching only its even or its odd columns."""
    dtype = ctx.params.get("dtype")
    into_mma = (lambda p: lowp.rounded(p, dtype)) if dtype else (lambda p: p)
    d = v.shape[-1]
    # P's pieces mix rows, the padding rows past n_q too: their q is 0, so their scores are 0.
    n_q, n_k = s.shape[-2:]
    rows = n_q + -n_q % 16
    s_pad = np.concatenate([s, np.zeros(s.shape[:-2] + (rows - n_q, n_k))], axis=-2)
    vis_pad = None if visible is None else (np.arange(n_k)[None, :] <= np.arange(rows)[:, None] + n_k - n_q)
    for tile in tiles(ctx, "BLOCK_N"):
        for bug, rearrange, what in OPERAND_BUGS:
            o_alt, lse_alt = streamed(s_pad, v, tile, visible=vis_pad, p_for_acc=lambda p: rearrange(into_mma(p)))
            o_alt, lse_alt = o_alt[..., :n_q, :], lse_alt[..., :n_q]
            if matches(ctx, o=o_alt, lse=lse_alt):
                yield Cause(f"fragment:p:{bug}", (
                    f"P reaches the second mma with {what} (the output matches that, with key tiles of "
                    f"{tile}; l sums the right P): check how P's registers are packed into the A fragment "
                    "of P V against the layout in the lesson."))
        for parity, name in ((1, "odd"), (0, "even")):
            cols = np.arange(d) % 2 != parity                    # the columns that are rescaled
            o_alt, lse_alt = streamed(s, v, tile, visible=visible, rescale_acc=cols, p_for_acc=into_mma)
            if matches(ctx, o=o_alt, lse=lse_alt):
                yield Cause(f"rescale:acc_cols:{name}", (
                    f"the rescale of acc by alpha misses its {name} columns (the output matches that, "
                    f"with key tiles of {tile}): those keep earlier tiles' sums at their old scale when the "
                    "max grows. Each accumulator register of the row, both elements of every pair, is "
                    "multiplied by alpha."))
