"""Input generators: fresh random float32 inputs (never zeros), as the tasks' cases describe them."""
from __future__ import annotations

import numpy as np

from ..spec import Case


def attention_inputs(p: dict, rng: np.random.Generator) -> dict:
    """q [B, H, Nq, d], k and v [B, Hkv, Nk, d], float32, never zeros.

    p["logit"] (optional) scales q and k so the scaled scores reach about ±logit: large logits
    expose a softmax that forgets to subtract the max. p["shift"] (optional) moves every score by
    about shift (see shifted). p["hot_key"], p["hot"] (optional): key hot_key of every sequence and
    head scores about hot above the others for every query (as hot_key does for decode). p["flat"]
    (optional) shrinks q so that every score is within about 1e-3 of 0; p["hot_rows"] (optional): query
    row i's own key scores about hot_rows above its others (see hot_rows); p["v_offset"] (optional) is
    added to the first half of v's features. p["scale"] (optional) replaces 1/sqrt(d).
    """
    B, H, Hkv, n_q, n_k, d = (p[key] for key in ("B", "H", "Hkv", "Nq", "Nk", "d"))
    q = rng.standard_normal((B, H, n_q, d))
    k = rng.standard_normal((B, Hkv, n_k, d))
    v = rng.standard_normal((B, Hkv, n_k, d))
    if p.get("logit"):
        # q·k/sqrt(d) has standard deviation 1; stretch both by sqrt(logit / 3) to reach ±logit.
        stretch = np.sqrt(p["logit"] / 3.0)
        q, k = q * stretch, k * stretch
    if p.get("shift"):
        q, k = shifted(q, k, p["shift"], rng)
    if p.get("hot"):              # key hot_key of every batch and kv head
        q, k = hot_key(q, k, [(slice(None), slice(None), p["hot_key"])], p, rng)
    if p.get("hot_rows"):         # each row its own hot key, every column of a 64-key tile someone's
        q, k = hot_rows(q, k, p["hot_rows"], p.get("scale", 1.0 / np.sqrt(d)), rng)
    if p.get("flat"):             # scores within about 1e-3 of each other: P nearly 1 for every key
        q = q * 1e-3
    if p.get("v_offset"):         # added to the first half of the features; the others stay small
        v[..., : d // 2] += p["v_offset"]
    scale = p.get("scale", 1.0 / np.sqrt(d))      # a case may set it: a kernel must use its argument
    return {"q": q.astype(np.float32), "k": k.astype(np.float32), "v": v.astype(np.float32),
            "scale": float(scale)}


def attention_shapes(*, d_list=(32, 64, 96, 128)) -> list[Case]:
    """The edge cases every prefill module is checked on, small to large."""
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
        # Not 1/sqrt(d): a kernel that computes its own scale instead of using the argument fails here.
        ("custom_scale", dict(B=2, H=6, Hkv=2, Nq=33, Nk=47, d=64, scale=0.3)),
        # A negative scale (the softmax then favours the least similar keys): legal for these modules,
        # and it turns a -INFINITY set before the scaling into +inf (masking comes after the scale).
        ("negative_scale", dict(B=1, H=1, Hkv=1, Nq=20, Nk=45, d=32, scale=-0.2)),
        # Every score of every row near -150: exp(s) underflows unless the row's own max is subtracted
        # (a running max seeded at 0 instead of -INFINITY gives 0/0 here and nowhere else).
        ("scores_far_below_zero", dict(B=1, H=2, Hkv=1, Nq=21, Nk=70, d=64, shift=-150.0)),
        # Every score near +150: exp of anything not shifted by the row's max overflows (past 88), so a
        # bug that fails here and below zero alike (a rescale computed as a ratio of exponentials, say)
        # is told apart from the max seeded at 0, which is right here.
        ("scores_far_above_zero", dict(B=1, H=2, Hkv=1, Nq=21, Nk=70, d=64, shift=150.0)),
        # Each row's own key scores about 200 above the rest, a different column of a 64-key tile for
        # each of 64 rows: a key left out of a row's max (one column of a thread's, say) overflows exp.
        ("hot_key_every_column", dict(B=1, H=2, Hkv=1, Nq=64, Nk=128, d=64, hot_rows=200.0)),
    ]
    return [Case(name, p) for name, p in raw if p["d"] in d_list]


# ---- decode (modules 04, 05): parameters are scalars so a shape replays with --shape ------------

def context_lens(p) -> np.ndarray:
    """[B] int32 from `lens` ("a/b/c", cycled over the batch) or `ctx` (the same for all)."""
    vals = [int(x) for x in str(p["lens"]).split("/")] if "lens" in p else [int(p["ctx"])]
    return np.array([vals[b % len(vals)] for b in range(p["B"])], dtype=np.int32)


def block_table(p, lens, rng) -> tuple[np.ndarray, int]:
    """A paged cache's block table [B, max_pages] int32 and its pool's page count (modules 05, 13).

    Each sequence gets ceil(lens[b] / page_size) pages (the last may be partial), drawn from a pool
    shuffled unless p["shuffle"] is False, with p.get("spare_pages", 3) pages no sequence owns;
    entries past a sequence's last page are -1, and the table may have spare columns
    (p["max_pages"]). With p["shared_prefix"] = n, sequence 1 reuses sequence 0's first n pages."""
    B, ps = p["B"], p.get("page_size", 16)
    pages_of = [-(-int(n) // ps) for n in lens]            # ceil: the last page may be partial
    max_pages = max(p.get("max_pages", 0), *pages_of, 1)
    shared = p.get("shared_prefix", 0) if B > 1 else 0
    num_pages = sum(pages_of) - shared + p.get("spare_pages", 3)
    ids = rng.permutation(num_pages) if p.get("shuffle", True) else np.arange(num_pages)
    table = np.full((B, max_pages), -1, dtype=np.int32)
    fresh = iter(ids)
    for b in range(B):
        for i in range(pages_of[b]):
            table[b, i] = table[0, i] if (b == 1 and i < shared) else next(fresh)
    return table, num_pages


def decode_qkv(p, rng, n_keys_shape):
    """q [B, H, d] and keys/values of the given leading shape (..., d), float32, never zeros.

    logit: scores reach about ±logit (softmax close to one-hot).
    shift: every score of a row gets about +shift through a direction shared by q and all keys, so
           lse ≈ shift while the softmax stays spread out: exp(lse) overflows float32 past 88.
    head_shift: the same, +head_shift for even query heads and -head_shift for odd ones.
    """
    B, H, d = p["B"], p["H"], p["d"]
    q = rng.standard_normal((B, H, d), dtype=np.float32)
    k = rng.standard_normal(n_keys_shape + (d,), dtype=np.float32)
    v = rng.standard_normal(n_keys_shape + (d,), dtype=np.float32)
    if p.get("logit"):
        stretch = np.float32(np.sqrt(p["logit"] / 3.0))
        q, k = q * stretch, k * stretch
    if p.get("shift"):
        q, k = shifted(q, k, p["shift"], rng)
    if p.get("head_shift"):
        # Query heads alternately about +head_shift and -head_shift above their scores' usual level: the
        # heads of one group (which share every key) lie far apart, past exp's range of each other.
        u = _shared_direction(d, p["head_shift"], rng)
        sign = np.where(np.arange(H) % 2 == 0, 1.0, -1.0)[None, :, None]
        q, k = q + sign * u, k + u
    return q.astype(np.float32), k.astype(np.float32), v


def hot_rows(q, k, hot: float, scale: float, rng: np.random.Generator):
    """q and k where query row i (of every batch and head) scores about `hot` above its other keys at
    its own key, j = (i % n) · 65 % Nk with n = min(Nq, Nk, d) orthonormal directions, one per hot key:
    with Nk = 128 and n = 64 the hot keys are 64 different keys, one in every column of a 64-key tile.
    With hot past 88.7, exp of the hot key minus a max that left it out overflows: a score left out of
    a row's max anywhere in a tile shows, whichever column it is in."""
    n_q, n_k, d = q.shape[2], k.shape[2], q.shape[3]
    n = min(n_q, n_k, d)
    u = np.linalg.qr(rng.standard_normal((d, d)))[0][:, :n].T     # n orthonormal directions
    a = np.sqrt(hot / abs(scale))                                 # scale · a² = hot
    keys = (np.arange(n) * 65) % n_k
    if len(set(keys.tolist())) < n:           # a shrunk shape: n distinct keys still, in order
        keys = np.arange(n)
    q, k = q.copy(), k.copy()
    q += a * np.sign(scale) * u[np.arange(n_q) % n][None, None]
    k[:, :, keys] += a * u[None, None]
    return q, k


def shifted(q, k, shift: float, rng: np.random.Generator):
    """q and k moved along one shared direction u so that every scaled score (scale 1/sqrt(d)) moves
    by about `shift` while the softmax stays spread out: lse ≈ shift. A large positive shift makes
    exp(lse) overflow float32 (past 88); a large negative one puts every score of a row far below
    zero (exp(s) underflows to 0 past -103), which a max seeded at 0 instead of -INFINITY turns
    into 0/0."""
    u = _shared_direction(q.shape[-1], shift, rng)
    return q + u, k + np.sign(shift) * u


def _shared_direction(d: int, score: float, rng: np.random.Generator) -> np.ndarray:
    """a · u, u a random unit vector and a such that a query and a key both moved by it score about
    |score| more with scale 1/sqrt(d): scale · a² = |score|."""
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    return np.sqrt(abs(score) * np.sqrt(d)) * u


def hot_key(q, k, at, p, rng: np.random.Generator):
    """q and k with the keys at the indices `at` (one per sequence that holds key p["hot_key"]) moved
    along a direction u that every query moves along too, so that each such key scores about
    p["hot"] (scale 1/sqrt(d)) and the others stay spread out: the softmax is nearly one-hot there,
    and the split that holds the key has an lse far above the others'."""
    u = _shared_direction(q.shape[-1], p["hot"], rng).astype(np.float32)
    k = k.copy()
    for index in at:
        k[index] += u
    return (q + u).astype(np.float32), k


def valid_decode_shape(p) -> bool:
    """Shapes the decode kernels accept: d a multiple of 4 up to 128, at most 16 query heads per kv head."""
    return p["d"] % 4 == 0 and p["d"] <= 128 and p["H"] % p["Hkv"] == 0 and p["H"] // p["Hkv"] <= 16
