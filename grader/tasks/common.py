"""What the tasks share: cases, input generators and the tolerances of float32 kernels."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# float32 accumulation over a few hundred terms lands near 1e-6 relative error; 2e-5 leaves room for
# exp2/__expf tricks while anything structurally wrong (a missed rescale, a wrong mask) is far above.
F32_REL = 2e-5
F32_ABS = 2e-4


@dataclass(frozen=True)
class Case:
    name: str
    params: dict = field(default_factory=dict)

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.params.items())


def attention_inputs(p: dict, rng: np.random.Generator) -> dict:
    """q [B, H, Nq, d], k and v [B, Hkv, Nk, d], float32, never zeros.

    p["logit"] (optional) scales q and k so the scaled scores reach about ±logit: large logits
    expose a softmax that forgets to subtract the max.
    """
    B, H, Hkv, n_q, n_k, d = (p[key] for key in ("B", "H", "Hkv", "Nq", "Nk", "d"))
    q = rng.standard_normal((B, H, n_q, d))
    k = rng.standard_normal((B, Hkv, n_k, d))
    v = rng.standard_normal((B, Hkv, n_k, d))
    if p.get("logit"):
        # q·k/sqrt(d) has standard deviation 1; stretch both by sqrt(logit / 3) to reach ±logit.
        stretch = np.sqrt(p["logit"] / 3.0)
        q, k = q * stretch, k * stretch
    scale = 1.0 / np.sqrt(d)
    return {"q": q.astype(np.float32), "k": k.astype(np.float32), "v": v.astype(np.float32),
            "scale": float(scale)}


def attention_shapes(*, d_list=(32, 64, 96, 128)) -> list[Case]:
    """DESIGN.md's edge cases for prefill attention, small to large."""
    raw = [
        ("one_query_one_key", dict(B=1, H=1, Hkv=1, Nq=1, Nk=1, d=32)),
        ("tiny", dict(B=1, H=1, Hkv=1, Nq=3, Nk=5, d=32)),
        ("below_tile", dict(B=1, H=2, Hkv=2, Nq=17, Nk=19, d=64)),
        ("tile_minus_1", dict(B=1, H=1, Hkv=1, Nq=63, Nk=63, d=64)),
        ("tile_exact", dict(B=1, H=1, Hkv=1, Nq=64, Nk=64, d=64)),
        ("tile_plus_1", dict(B=1, H=1, Hkv=1, Nq=65, Nk=65, d=64)),
        ("primes", dict(B=2, H=3, Hkv=3, Nq=37, Nk=101, d=32)),
        ("more_queries_than_keys", dict(B=1, H=2, Hkv=1, Nq=70, Nk=13, d=64)),
        ("gqa_4_to_1", dict(B=1, H=8, Hkv=2, Nq=33, Nk=47, d=64)),
        ("gqa_8_to_1", dict(B=2, H=8, Hkv=1, Nq=20, Nk=29, d=32)),
        ("large_logits", dict(B=1, H=2, Hkv=2, Nq=40, Nk=77, d=64, logit=50.0)),
        ("head_dim_96", dict(B=1, H=2, Hkv=1, Nq=50, Nk=90, d=96)),
        ("head_dim_128", dict(B=1, H=2, Hkv=2, Nq=70, Nk=130, d=128)),
        ("long", dict(B=1, H=2, Hkv=1, Nq=129, Nk=257, d=64)),
    ]
    return [Case(name, p) for name, p in raw if p["d"] in d_list]


# ---- what every prefill task (00, 02, 03) shares: fn(rt, q, k, v, scale) -> (o, lse) -----------

def attention_reference(inputs: dict, causal: bool = False) -> dict:
    from .. import references as R
    o, lse = R.attention(inputs["q"], inputs["k"], inputs["v"], inputs["scale"], causal=causal)
    return {"o": o, "lse": lse}


def attention_call(fn, rt, inputs: dict, p: dict) -> dict:
    o, lse = fn(rt, inputs["q"], inputs["k"], inputs["v"], inputs["scale"])
    return {"o": o, "lse": lse}
