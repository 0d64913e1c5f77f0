#!/usr/bin/env python3
"""Write notebooks/04_splitkv_decode.ipynb and notebooks/05_paged_decode.ipynb (without outputs).

    python scripts/make_decode_notebooks.py
"""
from pathlib import Path

import nbformat as nbf

ROOT = Path(__file__).resolve().parent.parent
md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell

NB04 = [
    md("# 04 · Split-KV decode\n\nOne new token per sequence attends to a long KV cache. This notebook "
       "runs the module's solution on the GPU (or the CPU emulator), shows how the split partials "
       "combine, and measures time against the number of splits. Lesson: `modules/04_splitkv_decode.md`."),
    code("""import time
import numpy as np
import matplotlib.pyplot as plt
from grader.course import load, runtime
from grader import references as R

rt = runtime()
sol = load("04_splitkv_decode")
ON_GPU = rt.name == "gpu"
rng = np.random.default_rng(0)"""),
    md("## A batch of decode steps, checked against the float64 reference\n\nContexts of different "
       "lengths in one batch, including 0 and 1, and GQA with 4 query heads per kv head."),
    code("""B, H, Hkv, d = 4, 8, 2, 64
lens = np.array([0, 1, 57, 300], dtype=np.int32)
max_len = int(lens.max())
q = rng.standard_normal((B, H, d), dtype=np.float32)
k = rng.standard_normal((B, Hkv, max_len, d), dtype=np.float32)
v = rng.standard_normal((B, Hkv, max_len, d), dtype=np.float32)
scale = 1 / np.sqrt(d)

o, lse = sol.splitkv_decode(rt, rt.asarray(q), rt.asarray(k), rt.asarray(v), rt.asarray(lens), scale, num_splits=4)
o, lse = rt.to_numpy(o), rt.to_numpy(lse)
o_ref, lse_ref = R.decode_attention(q, k, v, lens, scale)
print("max |o - ref|   :", np.abs(o - o_ref).max())
print("lse of sequence 0 (empty context):", lse[0])
print("o of sequence 0 is all zeros:", not o[0].any())"""),
    md("## How the split partials combine\n\nEach split $s$ gives a normalised $o_s$ and its $\\text{lse}_s$. "
       "The combine weighs split $s$ by $w_s = e^{\\text{lse}_s - \\text{lse}_{\\max}}$. Below: one head of the "
       "300-token sequence cut into 8 splits (the float64 reference of the two halves, "
       "`references.decode_partials` and `combine_partials`)."),
    code("""chunk = -(-max_len // 8)
o_part, lse_part = R.decode_partials(q, k, v, lens, chunk, scale)
b, h = 3, 5
w = np.exp(lse_part[b, h] - lse_part[b, h].max())
o_comb, lse_comb = R.combine_partials(o_part, lse_part)

fig, ax = plt.subplots(1, 3, figsize=(14, 3.2))
ax[0].bar(range(len(w)), lse_part[b, h]); ax[0].set_title("lse_s per split"); ax[0].set_xlabel("split s")
ax[1].bar(range(len(w)), w / w.sum(), color="C1"); ax[1].set_title("weight of each split  w_s / Σw"); ax[1].set_xlabel("split s")
# the output estimate as the splits are merged one by one (feature 0..7)
running = [(w[:i + 1, None] * o_part[b, h, :i + 1]).sum(0) / w[:i + 1].sum() for i in range(len(w))]
for c in range(8):
    ax[2].plot([r[c] for r in running], marker=".")
ax[2].set_title("o[0:8] after merging splits 0..s"); ax[2].set_xlabel("splits merged")
plt.tight_layout(); plt.show()
print("combined == direct reference:", np.allclose(o_comb, o_ref), np.allclose(lse_comb, lse_ref))"""),
    md("## Why the max must be subtracted\n\nScores near 120 make every $\\text{lse}_s$ about 120: "
       "$e^{120}$ is `inf` in float32, while $e^{\\text{lse}_s - \\text{lse}_{\\max}} \\le 1$ is always safe."),
    code("""big = lse_part[b, h] + 120.0
with np.errstate(over="ignore", invalid="ignore"):
    naive = np.exp(big.astype(np.float32))
print("exp(lse_s) in float32           :", naive[:4], "...")
print("exp(lse_s - lse_max) in float32 :", np.exp((big - big.max()).astype(np.float32))[:4], "...")"""),
    md("## Time against the number of splits\n\nOn the GPU: batch 1, 32 query heads, 8 kv heads, "
       "d = 128, one long context. One split means one block per (sequence, kv head): 8 blocks for the whole "
       "GPU. On the CPU emulator the timing means nothing, so we plot the number of blocks instead."),
    code("""from grader.bench import time_gpu
Hb, Hkvb, db = 32, 8, 128
n = 65536 if ON_GPU else 512
splits = [1, 2, 4, 8, 16, 32, 64, 128, 256] if ON_GPU else [1, 2, 4]
auto = sol.choose_num_splits(rt, 1, Hkvb, n)
print("SMs:", rt.multiprocessor_count, " heuristic n_splits:", auto)
if ON_GPU:
    xp = rt.xp
    qb = xp.random.standard_normal((1, Hb, db), dtype=xp.float32)
    kb = xp.random.standard_normal((1, Hkvb, n, db), dtype=xp.float32)
    vb = xp.random.standard_normal((1, Hkvb, n, db), dtype=xp.float32)
    lb = xp.full((1,), n, dtype=xp.int32)
    nbytes = 2 * Hkvb * n * db * 4
    src, dst = xp.ones(nbytes // 8, xp.float32), xp.empty(nbytes // 8, xp.float32)
    def copy(): dst[...] = src
    copy_gbs = nbytes / (np.median(time_gpu(copy, rt)) * 1e-3) / 1e9
    gbs = []
    for s in splits:
        t = np.median(time_gpu(lambda: sol.splitkv_decode(rt, qb, kb, vb, lb, 1 / np.sqrt(db), num_splits=s), rt))
        gbs.append(nbytes / (t * 1e-3) / 1e9)
    plt.figure(figsize=(6, 3.5))
    plt.semilogx(splits, gbs, marker="o", base=2, label="split-KV decode")
    plt.axhline(copy_gbs, color="gray", ls="--", label="device copy")
    plt.axvline(auto, color="C2", ls=":", label="heuristic")
    plt.xlabel("n_splits"); plt.ylabel("GB/s (K and V read once)"); plt.legend(); plt.title(rt.device_name)
    plt.show()
else:
    blocks = [s * Hkvb for s in [1, 2, 4, 8, 16, 32, 64, 128]]
    plt.figure(figsize=(6, 3.5))
    plt.semilogx([1, 2, 4, 8, 16, 32, 64, 128], blocks, marker="o", base=2, label="blocks at B=1, Hkv=8")
    plt.axhline(132 * 4, color="gray", ls="--", label="4 blocks × 132 SMs (H100)")
    plt.xlabel("n_splits"); plt.ylabel("blocks in the grid"); plt.legend(); plt.show()"""),
]

NB05 = [
    md("# 05 · Paged decode\n\nModule 04's split-KV decode over a paged cache: the keys of a sequence "
       "live in fixed-size pages scattered in one pool, found through a block table. "
       "Lesson: `modules/05_paged_decode.md`."),
    code("""import numpy as np
import matplotlib.pyplot as plt
from grader.course import load, runtime
from grader import references as R
from grader.tasks import paged_decode as task

rt = runtime()
sol5, sol4 = load("05_paged_decode"), load("04_splitkv_decode")
ON_GPU = rt.name == "gpu"
rng = np.random.default_rng(0)"""),
    md("## A paged cache\n\nFour sequences, page size 8, pages shuffled; sequence 1 shares its first 3 pages "
       "with sequence 0 (a common prefix), and a few spare pages belong to nobody. `-1` marks unused table "
       "entries."),
    code("""p = dict(B=4, H=8, Hkv=2, d=64, lens="45/37/1/0", page_size=8, shared_prefix=3)
x = task.make_inputs(p, rng)
bt, lens = x["block_table"], x["context_lens"]
print("context_lens:", lens)
print("block_table:\\n", bt)"""),
    code("""num_pages = x["k_pages"].shape[0]
owner = np.full(num_pages, -1)
for b in range(p["B"]):
    for pg in bt[b][bt[b] >= 0]:
        owner[pg] = b if owner[pg] == -1 else 9          # 9: shared by two sequences
fig, ax = plt.subplots(2, 1, figsize=(12, 3.6), gridspec_kw=dict(height_ratios=[3, 1]))
ax[0].imshow(np.where(bt >= 0, bt, np.nan), cmap="viridis", aspect="auto")
for (b, i), pg in np.ndenumerate(bt):
    ax[0].text(i, b, str(pg) if pg >= 0 else "-", ha="center", va="center", color="w" if pg >= 0 else "k")
ax[0].set_ylabel("sequence b"); ax[0].set_xlabel("logical page j / page_size"); ax[0].set_title("block_table")
ax[1].imshow(owner[None, :], cmap="tab10", vmin=-1, vmax=9, aspect="auto")
for pg in range(num_pages):
    ax[1].text(pg, 0, {-1: "·", 9: "sh"}.get(owner[pg], str(owner[pg])), ha="center", va="center")
ax[1].set_yticks([]); ax[1].set_xlabel("physical page (owner: sequence, sh = shared, · = free)")
plt.tight_layout(); plt.show()"""),
    md("## The paged kernel against the reference, and against module 04 on the same data"),
    code("""dev = {k: rt.asarray(v) if isinstance(v, np.ndarray) else v for k, v in x.items()}
o5, lse5 = sol5.paged_decode(rt, dev["q"], dev["k_pages"], dev["v_pages"], dev["block_table"], dev["context_lens"], x["scale"])
o_ref, lse_ref = R.paged_decode_attention(x["q"], x["k_pages"], x["v_pages"], bt, lens, x["scale"])
k_cont = R.gather_pages(x["k_pages"], bt, lens); v_cont = R.gather_pages(x["v_pages"], bt, lens)
o4, lse4 = sol4.splitkv_decode(rt, rt.asarray(x["q"]), rt.asarray(k_cont), rt.asarray(v_cont), dev["context_lens"], x["scale"])
print("max |o5 - ref|:", np.abs(rt.to_numpy(o5) - o_ref).max())
print("max |o5 - o4| :", np.abs(rt.to_numpy(o5) - rt.to_numpy(o4)).max())
print("lse of the empty sequence:", rt.to_numpy(lse5)[3])"""),
    md("## What the logical-as-physical bug reads\n\nUsing `j / page_size` as the page id reads whatever "
       "happens to lie in page 0, 1, 2 ... of the pool. Here is the error per sequence."),
    code("""logical = np.tile(np.arange(bt.shape[1], dtype=np.int32), (p["B"], 1))
o_bug, _ = R.paged_decode_attention(x["q"], x["k_pages"], x["v_pages"], logical, lens, x["scale"])
err = np.abs(o_bug - o_ref).max(axis=(1, 2))
plt.figure(figsize=(5, 3)); plt.bar(range(p["B"]), err); plt.xlabel("sequence b"); plt.ylabel("max |error|")
plt.title("page = j / page_size instead of block_table"); plt.show()"""),
    md("## Speed: paged against contiguous, and the page size (GPU only)"),
    code("""from grader.bench import time_gpu
if ON_GPU:
    rows = []
    for ps in (8, 16, 32):
        pb = dict(B=1, H=32, Hkv=8, d=128, ctx=65536, page_size=ps, contiguous_copy=(ps == 16))
        xb = task.make_inputs(pb, np.random.default_rng(1))
        db = {k: rt.asarray(v) if isinstance(v, np.ndarray) else v for k, v in xb.items()}
        nbytes = 2 * 8 * 65536 * 128 * 4
        t = np.median(time_gpu(lambda: task.call(sol5.paged_decode, rt, db, pb), rt))
        rows.append((f"paged, page_size {ps}", nbytes / (t * 1e-3) / 1e9))
        if ps == 16:
            t4 = np.median(time_gpu(lambda: sol4.splitkv_decode(rt, db["q"], db["k_cache"], db["v_cache"], db["context_lens"], db["scale"]), rt))
            rows.append(("contiguous (04)", nbytes / (t4 * 1e-3) / 1e9))
        del xb, db
        rt.xp.get_default_memory_pool().free_all_blocks()
    plt.figure(figsize=(6, 3)); plt.barh([r[0] for r in rows], [r[1] for r in rows])
    plt.xlabel("GB/s (K and V read once), B=1, context 65536"); plt.title(rt.device_name); plt.show()
else:
    print("timing needs a GPU; on the CPU emulator the numbers would mean nothing")"""),
]


def write(name, cells):
    nb = nbf.v4.new_notebook()
    nb.cells = cells
    for i, cell in enumerate(nb.cells):                # stable ids: regenerating changes nothing
        cell.id = f"{name[:2]}-{i:02d}"
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbf.write(nb, ROOT / "notebooks" / name)
    print("wrote notebooks/" + name)


if __name__ == "__main__":
    write("04_splitkv_decode.ipynb", NB04)
    write("05_paged_decode.ipynb", NB05)
