"""Checks for 08_block_sparse: attention under a block mask, optionally composed with causal.

block_mask [B, H, ceil(Nq / mb_m), ceil(Nk / mb_n)] uint8: query i sees key j iff the byte of its block
(i // mb_m, j // mb_n) is nonzero (and j <= i + Nk - Nq when causal). The cases go from masks whose
blocks are the kernel's 64 × 64 tiles (one byte per tile) to blocks that do not line up with the tiles
(partial tiles, the per-element test), then causal, GQA, d = 128 and large logits. Case parameters are
scalars, so `--shape` replays any of them: pattern, density, mb_m, mb_n, causal (and window, stride).
The diagnosis (grader/attention/blocksparse.py) replays the mask read transposed, with tile
coordinates, partial tiles run whole or skipped, the causal composition broken, and names single blocks
computed though masked or skipped though kept.
"""
from __future__ import annotations

from ...attention import blocksparse
from ...spec import F32, Case


def _case(name, B, H, Hkv, Nq, Nk, d, pattern, mb_m=64, mb_n=64, **extra):
    return Case(name, dict(B=B, H=H, Hkv=Hkv, Nq=Nq, Nk=Nk, d=d, pattern=pattern, mb_m=mb_m, mb_n=mb_n, **extra))


CASES = [
    # Mask blocks = the kernel's tiles: one byte decides a whole tile.
    _case("tiny", 1, 1, 1, 3, 5, 32, "full"),
    _case("empty_rows", 1, 2, 2, 200, 128, 32, "empty_rows", density=0.6),
    _case("full_mask", 1, 2, 1, 100, 130, 64, "full"),
    _case("single_block_per_row", 1, 2, 2, 130, 200, 32, "single"),
    _case("random_30", 2, 2, 2, 192, 256, 32, "random", density=0.3),
    _case("random_60", 1, 3, 3, 200, 180, 64, "random", density=0.6),
    _case("local_window", 1, 2, 2, 256, 256, 32, "local", window=64),
    _case("strided_global", 1, 3, 1, 150, 320, 32, "strided", stride=3),      # a group of 3 heads
    # Mask blocks that are not the tiles: partial tiles and the per-element test.
    _case("blocks_32x32", 1, 2, 2, 128, 160, 32, "random", mb_m=32, mb_n=32, density=0.4),
    _case("blocks_16x48", 1, 1, 1, 96, 150, 32, "random", mb_m=16, mb_n=48, density=0.5),
    _case("blocks_128x128", 1, 2, 2, 300, 260, 32, "random", mb_m=128, mb_n=128, density=0.5),
    _case("blocks_48x80", 1, 2, 2, 150, 230, 32, "random", mb_m=48, mb_n=80, density=0.5),
    # 101 rows: a mask-row boundary inside a tile, a warp and a thread's rows alike (no power of two).
    _case("blocks_101x30", 2, 1, 1, 210, 150, 64, "random", mb_m=101, mb_n=30, density=0.5),
    # Mask blocks of 4 x 4 under a window: 256 of them in one tile, all kept near the diagonal (a count
    # of a tile's blocks reaches 256 and more).
    _case("blocks_4x4_local", 1, 1, 1, 160, 160, 32, "local", mb_m=4, mb_n=4, window=96),
    # Mask blocks of 4 x 4, all kept but every other one of the last block row of each 64 rows: a tile's
    # dropped blocks are the last of its 256 (a count that stops early calls the tile fully kept).
    _case("blocks_4x4_late_holes", 1, 1, 1, 128, 128, 32, "late_holes", mb_m=4, mb_n=4),
    # ... and the opposite, only those kept: a count that stops early finds none and skips the tile.
    _case("blocks_4x4_late_only", 1, 1, 1, 128, 128, 32, "late_only", mb_m=4, mb_n=4),
    # Composed with causal (bottom-right).
    _case("causal_local", 1, 2, 2, 256, 256, 32, "local", window=100, causal=True),
    _case("causal_blocks", 1, 1, 1, 200, 200, 32, "causal_blocks", mb_m=32, mb_n=32, causal=True),
    _case("causal_random_chunk", 1, 2, 2, 100, 230, 32, "random", mb_m=32, mb_n=48, density=0.6, causal=True),
    _case("causal_queries_past_keys", 1, 2, 2, 150, 60, 32, "random", mb_m=32, mb_n=16, density=0.6,
          causal=True),
    # GQA, head_dim 128, large logits.
    _case("gqa_4_to_1", 2, 8, 2, 70, 140, 64, "random", mb_m=32, mb_n=32, density=0.5),
    _case("head_dim_128", 1, 2, 2, 200, 200, 128, "local", window=80),
    _case("large_logits", 1, 2, 2, 130, 130, 64, "random", mb_m=64, mb_n=32, density=0.5, logit=50.0),
    # Every score of every row near -150: below exp's range unless the row's own max is subtracted, so
    # only m == -INFINITY may mean "no visible key yet" (a threshold such as m < -126 is wrong here).
    _case("scores_far_below_zero", 1, 2, 1, 70, 100, 64, "random", mb_m=32, mb_n=32, density=0.6, shift=-150.0),
]
TOLERANCES = {"o": F32, "lse": F32}
# Shrinking keeps the pattern and the mask's block size: a bug of a block size stays visible.
SHRINK_KEYS = ("B", "H", "Hkv", "Nq", "Nk", "d")

make_inputs = blocksparse.inputs
reference = blocksparse.reference
diagnose = blocksparse.diagnose


def valid(p) -> bool:
    return p["d"] in (32, 64, 96, 128) and p["H"] % p["Hkv"] == 0 and p["mb_m"] >= 1 and p["mb_n"] >= 1


def call(fn, rt, inputs, p):
    o, lse = fn(rt, inputs["q"], inputs["k"], inputs["v"], inputs["scale"], inputs["block_mask"],
                (p["mb_m"], p["mb_n"]), causal=bool(p.get("causal")))
    return {"o": o, "lse": lse}
