#!/usr/bin/env python3
"""Write notebooks/02_flash_forward.ipynb and notebooks/03_flash_causal.ipynb (without outputs).

    python scripts/make_flash_notebooks.py
    python scripts/run_notebook.py notebooks/02_flash_forward.ipynb
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def nb(cells):
    out = []
    for n, (kind, src) in enumerate(cells):
        src = src.strip("\n")
        cell = {"cell_type": kind, "id": f"cell-{n:02d}", "metadata": {},
                "source": src.splitlines(keepends=True)}
        if kind == "code":
            cell.update(outputs=[], execution_count=None)
        out.append(cell)
    return {"cells": out, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                       "name": "python3"},
                                       "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


SETUP = r'''
import time
import numpy as np
import matplotlib.pyplot as plt
from grader.course import load, runtime
from grader import references as R
from grader.tasks import flash_forward as F

rt = runtime()
ON_GPU = rt.name == "gpu"
flash = load("02_flash_forward")
causal = load("03_flash_causal")
BLOCK_M, BLOCK_N = flash.BLOCK_M, flash.BLOCK_N
print(f"BLOCK_M = {BLOCK_M}, BLOCK_N = {BLOCK_N}, {flash.NTHREADS} threads per block")

def inputs(B, H, Hkv, n_q, n_k, d, seed=0):
    x = F.attention_inputs(dict(B=B, H=H, Hkv=Hkv, Nq=n_q, Nk=n_k, d=d), np.random.default_rng(seed))
    return x, {k: rt.asarray(v) if isinstance(v, np.ndarray) else v for k, v in x.items()}

def timed(fn, reps=5):
    """Median milliseconds of fn(): CUDA events on the GPU, wall clock on the CPU emulator."""
    if ON_GPU:
        from grader.bench import time_gpu
        return float(np.median(time_gpu(fn, rt, warmup=2, reps=reps)))
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); ts.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts))
'''

NB02 = [
    ("markdown", r'''
# 02 · FlashAttention forward — in class

The solution of `solutions/02_flash_forward.py`, run on this machine's runtime (the GPU if CuPy sees
one, else the CPU emulator running the very same CUDA source). Three pictures:

1. the **tile schedule**: which block does what, and in which order it walks over K/V;
2. the **running max and sum** of one query row, tile by tile, and the rescale factor;
3. **memory and time against N**, naive (materialised scores) versus flash.
'''),
    ("code", SETUP),
    ("markdown", r'''
## It is right

Against the float64 reference, on a shape that is not a multiple of any tile, with GQA.
'''),
    ("code", r'''
x, dx = inputs(B=2, H=4, Hkv=2, n_q=100, n_k=150, d=64)
o, lse = flash.flash_forward(rt, dx["q"], dx["k"], dx["v"], dx["scale"])
want_o, want_lse = R.attention(x["q"], x["k"], x["v"], x["scale"])
o, lse = rt.to_numpy(o), rt.to_numpy(lse)
print("relative error of o  :", np.linalg.norm(o - want_o) / np.linalg.norm(want_o))
print("relative error of lse:", np.linalg.norm(lse - want_lse) / np.linalg.norm(want_lse))
'''),
    ("markdown", r'''
## 1. The tile schedule

The grid is `(ceil(Nq / BLOCK_M), H, B)`: one block per query tile (and head, and batch). Every block
walks over **all** key tiles, in order, keeping its rows' m, l and acc in registers. Below, for one
(batch, head) with Nq = Nk = 300: row = query tile (= block), column = key tile, the number = the
step at which that block processes that key tile. All blocks run at the same time (as many as fit on
the GPU); the steps run one after the other inside a block.
'''),
    ("code", r'''
n_q = n_k = 300
tiles_q, tiles_k = -(-n_q // BLOCK_M), -(-n_k // BLOCK_N)
step = np.tile(np.arange(tiles_k), (tiles_q, 1))
fig, ax = plt.subplots(figsize=(6, 4))
ax.imshow(step, cmap="viridis")
for (i, j), s in np.ndenumerate(step):
    ax.text(j, i, s, ha="center", va="center", color="w")
ax.set_xlabel(f"key tile ({BLOCK_N} keys; the last one partial: {n_k % BLOCK_N} keys, the rest masked)")
ax.set_ylabel(f"query tile = block ({BLOCK_M} rows)")
ax.set_title("step at which each block handles each K/V tile")
plt.show()
print(f"{tiles_q} blocks per (batch, head); each loads {tiles_k} K/V tiles; "
      f"bytes of K/V read per block: {2 * n_k * 64 * 4 / 1024:.0f} KB (d = 64)")
'''),
    ("markdown", r'''
## 2. m and l, tile by tile, for one row

The kernel never sees a whole row of scores. Here is what one row's state looks like after each key
tile: the running max `m` (only ever grows), the running sum `l` (relative to the current `m`), and
the factor `alpha = exp(m_old - m_new)` that rescales `l` and `acc` whenever the max grows. The scores
are given a drift so the max grows often; the dashed lines are the true row max and sum.
'''),
    ("code", r'''
rng = np.random.default_rng(1)
n_k = 12 * BLOCK_N
s_row = rng.standard_normal(n_k) * 2 + np.linspace(0, 6, n_k)      # scores that tend to grow
m, l = -np.inf, 0.0
ms, ls, alphas = [], [], []
for start in range(0, n_k, BLOCK_N):
    tile = s_row[start:start + BLOCK_N]
    m_new = max(m, tile.max())
    alpha = np.exp(m - m_new)
    l = l * alpha + np.exp(tile - m_new).sum()
    m = m_new
    ms.append(m); ls.append(l); alphas.append(alpha)
fig, axs = plt.subplots(1, 3, figsize=(13, 3.2))
t = np.arange(1, len(ms) + 1)
axs[0].plot(t, ms, "o-"); axs[0].axhline(s_row.max(), ls="--", c="k"); axs[0].set_title("running max m")
axs[1].plot(t, ls, "o-"); axs[1].axhline(np.exp(s_row - s_row.max()).sum(), ls="--", c="k")
axs[1].set_title("running sum l (relative to m)")
axs[2].bar(t, alphas); axs[2].set_title("alpha = exp(m_old - m_new)")
for ax in axs: ax.set_xlabel("key tiles seen")
plt.tight_layout(); plt.show()
print("lse from the stream:", m + np.log(l), " direct:", np.log(np.exp(s_row).sum()))
'''),
    ("markdown", r'''
What if the kernel forgot to rescale `acc`? Replay it in float64 with the grader's own model of the
loop (`streamed` in `grader/tasks/flash_forward.py`): the error grows with the number of key tiles,
and a single tile is always right — which is why small tests pass.
'''),
    ("code", r'''
errs = []
n_list = [BLOCK_N // 2, BLOCK_N, 2 * BLOCK_N, 4 * BLOCK_N, 8 * BLOCK_N]
for n in n_list:
    x, _ = inputs(1, 1, 1, 32, n, 64, seed=n)
    s, v = F.scores(x)
    o_ref, _ = F.attend(s, v)
    o_bad, _ = F.streamed(s, v, BLOCK_N, rescale_acc=False)
    errs.append(np.linalg.norm(o_bad - o_ref) / np.linalg.norm(o_ref))
plt.figure(figsize=(5, 3)); plt.semilogy(np.array(n_list) / BLOCK_N, np.maximum(errs, 1e-17), "o-")
plt.xlabel("key tiles"); plt.ylabel("relative error"); plt.title("no rescale of acc"); plt.show()
'''),
    ("markdown", r'''
## 3. Memory and time against N

Naive attention materialises the scores: $B \cdot H \cdot N^2$ floats. Flash keeps Q, K, V and O
plus one float of lse per row. On the GPU the naive side is CuPy's cuBLAS matmul, a softmax of CuPy
operations, and a second matmul (the bench baseline); on the CPU the same code runs on NumPy and
the flash kernel on the emulator, so the times only show how each grows with N.
'''),
    ("code", r'''
B, H, d = (2, 16, 128) if ON_GPU else (1, 2, 64)
Ns = [512, 1024, 2048, 4096, 8192] if ON_GPU else [64, 128, 256]
mem_naive = [B * H * n * n * 4 / 2**20 for n in Ns]
mem_flash = [(4 * B * H * n * d + B * H * n) * 4 / 2**20 for n in Ns]
t_naive, t_flash = [], []
for n in Ns:
    x, dx = inputs(B, H, H, n, n, d, seed=n)
    p = dict(B=B, H=H, Hkv=H, Nq=n, Nk=n, d=d)
    t_flash.append(timed(lambda: flash.flash_forward(rt, dx["q"], dx["k"], dx["v"], dx["scale"])))
    t_naive.append(timed(lambda: F.naive_cublas(rt, dx, p)))
    if ON_GPU:
        rt.xp.get_default_memory_pool().free_all_blocks()
fig, axs = plt.subplots(1, 2, figsize=(11, 3.5))
axs[0].loglog(Ns, mem_naive, "o-", label="naive: S in memory"); axs[0].loglog(Ns, mem_flash, "o-", label="flash: Q, K, V, O, lse")
axs[0].set_xlabel("N"); axs[0].set_ylabel("MiB"); axs[0].legend(); axs[0].set_title(f"memory, B={B} H={H} d={d}")
axs[1].loglog(Ns, t_naive, "o-", label="naive (matmul, softmax, matmul)"); axs[1].loglog(Ns, t_flash, "o-", label="flash (this module)")
axs[1].set_xlabel("N"); axs[1].set_ylabel("ms"); axs[1].legend(); axs[1].set_title(f"time on {rt.name}")
plt.tight_layout(); plt.show()
for n, a, b in zip(Ns, t_naive, t_flash):
    tf = F.attention_flops(dict(B=B, H=H, Nq=n, Nk=n, d=d)) / (b * 1e-3) / 1e12
    print(f"N={n:5d}  naive {a:9.3f} ms   flash {b:9.3f} ms   flash {tf:6.2f} TFLOP/s   naive/flash {a / b:5.2f}")
'''),
]

NB03 = [
    ("markdown", r'''
# 03 · Causal FlashAttention — in class

The causal mask aligned **bottom-right**: query $i$ sees key $j$ iff $j \le i + (N_k - N_q)$. This
notebook shows which (query tile, key tile) pairs the kernel runs, skips or masks element by element,
what happens to rows that see no key, and how much time skipping saves.
'''),
    ("code", SETUP),
    ("markdown", r'''
## It is right — for square, chunked-prefill and more-queries-than-keys shapes
'''),
    ("code", r'''
for n_q, n_k in [(100, 100), (40, 170), (150, 60)]:
    x, dx = inputs(1, 4, 2, n_q, n_k, 64, seed=n_q)
    o, lse = causal.flash_causal(rt, dx["q"], dx["k"], dx["v"], dx["scale"])
    want_o, want_lse = R.attention(x["q"], x["k"], x["v"], x["scale"], causal=True)
    o, lse = rt.to_numpy(o), rt.to_numpy(lse)
    fin = np.isfinite(want_lse)
    print(f"Nq={n_q:4d} Nk={n_k:4d}  rel err o {np.linalg.norm(o - want_o) / np.linalg.norm(want_o):.1e}"
          f"  lse -inf rows {int((~fin).sum())} (kernel: {int(np.isneginf(lse).sum())}), NaN: {int(np.isnan(o).sum())}")
'''),
    ("markdown", r'''
## 1. Which tiles run

For each query tile $[q_0, q_0 + \text{BLOCK\_M})$ and key tile $[k_0, k_0 + \text{BLOCK\_N})$, with
`offset = Nk - Nq`:

- **skipped** if $k_0 > q_{\text{last}} + \text{offset}$ — no row of the tile sees any of its keys;
- **fully visible** if $k_0 + \text{BLOCK\_N} - 1 \le q_0 + \text{offset}$ — every row sees every key;
- **diagonal** otherwise — the per-element test $j \le i + \text{offset}$ runs.

The element mask is drawn underneath in grey.
'''),
    ("code", r'''
def classify(n_q, n_k):
    off = n_k - n_q
    tq, tk = -(-n_q // BLOCK_M), -(-n_k // BLOCK_N)
    cls = np.zeros((tq, tk), int)          # 0 skipped, 1 diagonal, 2 fully visible
    for a in range(tq):
        q0, q_last = a * BLOCK_M, min((a + 1) * BLOCK_M, n_q) - 1
        for b in range(tk):
            k0 = b * BLOCK_N
            if k0 > q_last + off:
                cls[a, b] = 0
            elif k0 + BLOCK_N - 1 <= q0 + off and k0 + BLOCK_N <= n_k:
                cls[a, b] = 2
            else:
                cls[a, b] = 1
    return cls

from matplotlib.colors import ListedColormap
fig, axs = plt.subplots(1, 3, figsize=(15, 4.2))
for ax, (n_q, n_k, title) in zip(axs, [(512, 512, "Nq = Nk (prefill)"), (192, 512, "Nq < Nk (chunked prefill)"),
                                       (512, 200, "Nq > Nk (rows with no key)")]):
    cls = classify(n_q, n_k)
    ax.imshow(R.causal_mask(n_q, n_k), cmap="Greys", alpha=0.35, extent=(0, n_k, n_q, 0), aspect="auto")
    cmap = ListedColormap(["white", "tab:orange", "tab:green"])
    ax.imshow(cls, cmap=cmap, vmin=0, vmax=2, alpha=0.55, extent=(0, cls.shape[1] * BLOCK_N, cls.shape[0] * BLOCK_M, 0),
              aspect="auto")
    ax.set_xlim(0, n_k); ax.set_ylim(n_q, 0)
    run = (cls > 0).sum()
    ax.set_title(f"{title}\n{run} of {cls.size} tiles run, {(cls == 1).sum()} diagonal")
    ax.set_xlabel("key j"); ax.set_ylabel("query i")
plt.tight_layout(); plt.show()
print("green: fully visible, orange: diagonal (per-element mask), white: skipped, grey: visible elements")
'''),
    ("markdown", r'''
The fraction of tiles that run tends to one half as N grows (the diagonal tiles are the excess):
'''),
    ("code", r'''
Ns = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
frac = [(classify(n, n) > 0).mean() for n in Ns]
plt.figure(figsize=(5, 3)); plt.semilogx(Ns, frac, "o-"); plt.axhline(0.5, ls="--", c="k")
plt.xlabel("N"); plt.ylabel("tiles run / all tiles"); plt.title("causal work fraction"); plt.show()
print({n: round(f, 3) for n, f in zip(Ns, frac)})
'''),
    ("markdown", r'''
## 2. Time saved

The same inputs through the 02 kernel (no mask, every tile) and the 03 kernel (causal, about half the
tiles). FLOPs for causal are counted as half of $4N^2d$ per head, as FlashAttention reports them.
'''),
    ("code", r'''
B, H, d = (2, 16, 128) if ON_GPU else (1, 2, 64)
Ns = [512, 1024, 2048, 4096, 8192] if ON_GPU else [64, 128, 256]
t_full, t_causal = [], []
for n in Ns:
    x, dx = inputs(B, H, H, n, n, d, seed=n)
    t_full.append(timed(lambda: flash.flash_forward(rt, dx["q"], dx["k"], dx["v"], dx["scale"])))
    t_causal.append(timed(lambda: causal.flash_causal(rt, dx["q"], dx["k"], dx["v"], dx["scale"])))
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.loglog(Ns, t_full, "o-", label="02: no mask, all tiles"); ax.loglog(Ns, t_causal, "o-", label="03: causal, tiles skipped")
ax.set_xlabel("N"); ax.set_ylabel("ms"); ax.legend(); ax.set_title(f"B={B} H={H} d={d} on {rt.name}")
plt.show()
for n, a, b in zip(Ns, t_full, t_causal):
    fl = F.attention_flops(dict(B=B, H=H, Nq=n, Nk=n, d=d))
    print(f"N={n:5d}  02 {a:9.3f} ms ({fl / a / 1e9:6.2f} TFLOP/s)   03 {b:9.3f} ms ({fl / 2 / b / 1e9:6.2f} TFLOP/s)"
          f"   speed-up {a / b:4.2f}x   tiles run {(classify(n, n) > 0).mean():.2f}")
'''),
    ("markdown", r'''
## 3. Rows that see no key

With Nq > Nk the first Nq − Nk queries come "before" every key. Their running max stays $-\infty$;
without a guard, $\exp(-\infty - (-\infty))$ is NaN and $0/0$ is NaN. The solution writes 0 and
$\text{lse} = -\infty$:
'''),
    ("code", r'''
x, dx = inputs(1, 1, 1, 12, 4, 32, seed=5)
o, lse = causal.flash_causal(rt, dx["q"], dx["k"], dx["v"], dx["scale"])
o, lse = rt.to_numpy(o), rt.to_numpy(lse)
for i in range(12):
    last = i + 4 - 12                                   # i + (Nk - Nq)
    sees = f"keys 0..{last}" if last >= 0 else "no key"
    print(f"query {i:2d}  sees {sees:10s}  lse = {lse[0, 0, i]:8.4f}   sum |o| = {np.abs(o[0, 0, i]).sum():.4f}")
'''),
]


def main():
    for name, cells in (("02_flash_forward", NB02), ("03_flash_causal", NB03)):
        path = ROOT / "notebooks" / f"{name}.ipynb"
        path.write_text(json.dumps(nb(cells), indent=1, ensure_ascii=False) + "\n")
        print("wrote", path.relative_to(ROOT))


if __name__ == "__main__":
    main()
