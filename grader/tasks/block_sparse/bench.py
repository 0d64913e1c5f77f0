"""Benchmark for 08_block_sparse: time against density at N = 8192, d = 128, against 02's dense kernel.

Random block masks at the kernel's tile size (64 × 64: one byte per tile), the same inputs for every
contender. FLOPs are the useful work, density × 4·N²·d per head, so a kernel that skips perfectly
keeps its TFLOP/s as the density falls, and its time follows the ideal line density × (time at 100%).
"""
from ...attention import blocksparse
from ...attention.baselines import attention_flops
from ...spec import BenchCase, BenchContext


def dense_02(b: BenchContext) -> dict:
    """The 02 solution (no mask: every tile) on the same q, k, v."""
    fn = b.solution("02_flash_forward").flash_forward
    o, lse = fn(b.rt, b.inputs["q"], b.inputs["k"], b.inputs["v"], b.inputs["scale"])
    return {"o": o, "lse": lse}


DENSITIES = (0.05, 0.10, 0.25, 0.50, 1.00)


def _case(density):
    p = dict(B=1, H=16, Hkv=16, Nq=8192, Nk=8192, d=128, pattern="random" if density < 1 else "full",
             density=density, mb_m=64, mb_n=64)
    return BenchCase(f"density_{int(round(density * 100)):03d}_N8192_d128", p,
                     flops=density * attention_flops(p), baselines={"02 solution (dense)": dense_02})


BENCH = [_case(x) for x in DENSITIES]


# What `grader bench 08 --backend cpu` counts on the emulator: a 25% random mask of 32 x 32 blocks
# (not the tile: partial tiles run with the per-element test), and the key tiles the mask needs.
_COUNT = dict(B=1, H=2, Hkv=2, Nq=512, Nk=512, d=64, pattern="random", density=0.25, mb_m=32, mb_n=32)
COUNTER_CASE = BenchCase("counters_density_025_N512_blocks_32", _COUNT, flops=0.25 * attention_flops(_COUNT))


def tiles(p, config, inputs):
    """Key tiles whose rectangle of mask blocks holds a kept one, over every (batch, head, query tile)."""
    tile = (config["BLOCK_M"], config["BLOCK_N"])
    mask = inputs["block_mask"]
    needed = sum(int((blocksparse.tile_classes(mask[b, h], (p["mb_m"], p["mb_n"]), p["Nq"], p["Nk"], tile,
                                               bool(p.get("causal"))) > 0).sum())
                 for b in range(p["B"]) for h in range(p["H"]))
    every = p["B"] * p["H"] * blocksparse.cdiv(p["Nq"], tile[0]) * blocksparse.cdiv(p["Nk"], tile[1])
    return needed, every


# What the work check counts (engine/work.py): a 25% mask of 64 x 64 blocks, whose empty tiles a kernel
# that skips them never reads.
WORK_CASE = BenchCase("work_density_025_N256_d32", dict(B=1, H=1, Hkv=1, Nq=256, Nk=256, d=32, pattern="random",
                                                       density=0.25, mb_m=64, mb_n=64))
