"""Benchmark for 07_varlen_prefill: a realistic batch of prompts, packed, against padding it.

64 prompts from 16 to 4096 tokens, log-uniform (most prompts are short, a few are long), causal, as a
serving engine prefills them. The baseline is module 03's solution on the same batch padded to its
longest prompt. Both are credited with the same useful FLOPs: the packed batch's.
"""
import numpy as np

from ...attention.varlen import lengths
from ...spec import BenchCase, BenchContext


def prompt_mix(n=64, shortest=16, longest=4096, seed=7) -> str:
    """`lens` for n prompt lengths drawn log-uniformly from [shortest, longest], the longest included."""
    rng = np.random.default_rng(seed)
    lens = np.exp(rng.uniform(np.log(shortest), np.log(longest), n)).astype(int)
    lens[0] = longest
    return "/".join(str(int(x)) for x in lens)


def useful_flops(p) -> float:
    """4 · n_q · n_k · d · H per sequence, halved for causal (as FlashAttention counts it)."""
    per = sum(4.0 * nq * nk * p["d"] * p["H"] for nq, nk in zip(lengths(p), lengths(p, "lens_k")))
    return per / 2 if p.get("causal") else per


def padded_03(b: BenchContext) -> dict:
    """Module 03's solution on the batch padded to its longest prompt (zeros after each prompt's end:
    with the mask bottom-right and Nq = Nk, a real row never sees a padded key)."""
    i = b.inputs
    o, lse = b.solution("03_flash_causal").flash_causal(b.rt, i["q_padded"], i["k_padded"], i["v_padded"], i["scale"])
    return {"o": o, "lse": lse}


def fitted_grid(b: BenchContext) -> dict:
    """The solution with max_seqlen_q and max_seqlen_k equal to the longest sequence: no idle block."""
    i = b.inputs
    longest = max(lengths(b.params))
    o, lse = b.solution("07_varlen_prefill").varlen_prefill(
        b.rt, i["q"], i["k"], i["v"], i["cu_seqlens_q"], i["cu_seqlens_k"], longest, longest, i["scale"],
        causal=i["causal"])
    return {"o": o, "lse": lse}


def _case(name, **p):
    return BenchCase(name, p, flops=useful_flops(p), baselines={"03 solution, padded": padded_03},
                     baseline_only=("q_padded", "k_padded", "v_padded"))


BENCH = [
    _case("64 prompts, 16 to 4096 tokens, causal", B=64, H=16, Hkv=4, d=128, lens=prompt_mix(), causal=True,
          padded_copy=True),
    # What the simple grid costs: 64 one-token prompts launched over max_seqlen = 4096, so 63 of every
    # 64 blocks find no query and leave at once; against the grid that fits them.
    BenchCase("idle blocks: 64 one-token prompts, max_seqlen 4096", dict(B=64, H=16, Hkv=4, d=128, lens="1",
              max_seqlen=4096), flops=useful_flops(dict(B=64, H=16, d=128, lens="1")), baselines={"solution, grid fitted (1 tile)": fitted_grid}),
]


# What the work check counts (engine/work.py): each sequence's query tiles read its own keys, and causal ones only up to the diagonal.
WORK_CASE = BenchCase("work_causal_lens_200_64_1", dict(B=3, H=2, Hkv=1, d=32, lens="200/64/1", causal=True))
