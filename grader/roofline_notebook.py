"""The cells of notebooks/roofline.ipynb, the course's one notebook that spans every module (generated
by `grader notebooks`; edit here, not there)."""
from .notebooks import code, md

CELLS = [
md(r'''
# Every module on one roofline

Each module's benchmark, `grader bench ID`, ends its table with a share of the **roofline**: the
fastest the GPU could do that work. This notebook puts every module's solution on one chart, next to
the kernels a user would pick instead (cuBLAS, PyTorch's FlashAttention-2 and cuDNN backends).

A kernel does $F$ floating-point operations and must move at least $M$ bytes between DRAM and the
chip (read each input once, write each output once). It cannot finish before

$$t_{\min} = \max\left(\frac{F}{\text{peak FLOP/s}},\ \frac{M}{\text{DRAM bandwidth}}\right).$$

Its **arithmetic intensity** $I = F / M$ says which term wins: below the ridge point
$I^* = \text{peak} / \text{bandwidth}$ the kernel is memory-bound, above it compute-bound. The peak is
the one of the units the kernel uses: FP32 on the CUDA cores for the float32 modules, dense FP16 on
the tensor cores for module 06. On the chart, x is $I$ and y the FLOP/s the kernel reached; the roofs
are the best any kernel of that intensity can reach. A solution point that would hide another module's
(04 and 05 do the same decode work, for one) is drawn hollow and larger, so that both show.

The figures are the ones `grader bench ID --solution` measured for the lessons (the file
`grader/data/h100_bench.json`), so the chart is the same on every machine. On a GPU, run
`grader bench ID` to place your own kernel.
'''),

code(r'''
import numpy as np
import matplotlib.pyplot as plt
from grader import measured

m = measured.measured()
peaks = m["peaks"]
BW, FP32, TENSOR = peaks["dram_bytes_per_s"], peaks["fp32_flops"], peaks["tensor_flops"]
print(measured.label())
print(f"DRAM {BW / 1e12:.2f} TB/s, FP32 {FP32 / 1e12:.1f} TFLOP/s, tensor FP16 {TENSOR / 1e12:.0f} TFLOP/s")
print(f"  ({peaks['source']})")
print(f"ridge points: FP32 at {FP32 / BW:.0f} FLOP/byte, tensor cores at {TENSOR / BW:.0f} FLOP/byte")
'''),

md(r'''
## The points

`grader bench` counts FLOPs for the attention kernels ($4 N_q N_k d$ per head, halved under a causal
mask, 2.5 times that for the backward pass) and bytes for the memory-bound ones. To place those on
the same axes we count their FLOPs here: decode does $4 \cdot \text{ctx} \cdot d$ per query head (a dot
product with each key, a multiply-add with each value), the softmax of module 01 about 5 per element
(max, subtract, exp, add, divide).
'''),

code(r'''
def flops_of(ex_id, c):
    """The case's FLOPs: the benchmark's count, or ours for the modules that count bytes."""
    f, p = c["roofline"]["flops"], c["params"]
    if f:
        return f
    if ex_id.startswith("01"):
        return 5.0 * p["R"] * p["n"]
    return 4.0 * p["B"] * p["H"] * p["ctx"] * p["d"]          # 04 and 05: one query per sequence

# The peers a user would pick instead, when the benchmark times them.
PEERS = ("torch cuDNN", "torch FlashAttention-2", "torch efficient backward", "naive (cuBLAS)",
         "CuPy + cuBLAS (same three steps)", "CuPy (max, exp, sum, divide)", "copy bandwidth")
points = []        # (module, case, contender, intensity, FLOP/s, share of roofline, limit)
for ex_id, cases in m["modules"].items():
    if ex_id in m.get("devices", {}):      # measured on another GPU, against its own peaks
        continue
    for c in cases:
        f, moved = flops_of(ex_id, c), c["roofline"]["bytes"]
        for name, r in c["results"].items():
            if "median_ms" in r and (name == "yours" or name in PEERS):
                points.append((ex_id[:2], c["case"], "solution" if name == "yours" else name, f / moved,
                               f / (r["median_ms"] * 1e-3), r["roofline_pct"], c["roofline"]["limit"]))
print(f"{len(points)} points from {len(m['modules']) - len(m.get('devices', {}))} modules")
for ex_id, dev in m.get("devices", {}).items():
    print(f"left out: {ex_id}, measured on an {dev['gpu']} (its lesson has its roofline)")
'''),

code(r'''
x = np.logspace(-1, 4, 200)
fig, ax = plt.subplots(figsize=(10, 6.5))
ax.loglog(x, np.minimum(FP32, x * BW) / 1e12, "k-", lw=1.5, label="roof: FP32 on CUDA cores")
ax.loglog(x, np.minimum(TENSOR, x * BW) / 1e12, "k--", lw=1.5, label="roof: FP16 on tensor cores")
colors = plt.cm.tab20(np.arange(20) % 20)        # one colour per module (up to 20)
seen = set()
placed = []        # (intensity, FLOP/s, module) of the solution points drawn so far
for mod, case, who, ai, fl, pct, limit in points:
    mine = who == "solution"
    label = f"{mod} solution" if mine and mod not in seen else None
    if mine:
        seen.add(mod)
        # A point that would hide another module's (within 5% on both axes) is drawn hollow and larger.
        hollow = any(m != mod and abs(np.log(ai / a)) < 0.05 and abs(np.log(fl / f)) < 0.05 for a, f, m in placed)
        placed.append((ai, fl, mod))
        ax.scatter(ai, fl / 1e12, s=110 if hollow else 60, marker="o", facecolors="none" if hollow else colors[int(mod)],
                   edgecolors=colors[int(mod)], linewidths=1.8, label=label, zorder=4 if hollow else 3)
        continue
    ax.scatter(ai, fl / 1e12, s=35, marker="x", color=colors[int(mod)], label=label, zorder=3)
    if not mine and who.startswith("torch") and (mod, who) not in seen:      # name each peer once
        seen.add((mod, who))
        ax.annotate(who.replace("torch ", ""), (ai, fl / 1e12), fontsize=7, xytext=(5, -3), textcoords="offset points")
ax.scatter([], [], marker="x", color="grey", label="what a user would pick instead")
ax.set_xlabel("arithmetic intensity (FLOP per byte that must move)")
ax.set_ylabel("TFLOP/s reached")
ax.set_title(f"every module on the roofline: {measured.label()}", fontsize=9)
ax.legend(fontsize=8, ncol=2, loc="lower right")
ax.set_ylim(5e-4, 2e3)
plt.tight_layout(); plt.show()
'''),

md(r'''
## How close each module comes

The same points as shares of their roofline (100 % is the device's limit). The memory-bound kernels
(01, 04, 05) are judged by bandwidth, the attention kernels by FP32 or tensor-core FLOP/s. A share
well below the others points at the lesson's section on speed: what holds the kernel back and what
the next module changes.
'''),

code(r'''
best = {}
for mod, case, who, ai, fl, pct, limit in points:
    if who == "solution" and pct > best.get(mod, (0,))[0]:
        best[mod] = (pct, case, limit)
mods = sorted(best)
fig, ax = plt.subplots(figsize=(9, 3.5))
bars = ax.bar(mods, [best[k][0] for k in mods],
              color=["tab:blue" if best[k][2] == "memory" else "tab:orange" if best[k][2] == "FP32" else "tab:green"
                     for k in mods])
from matplotlib.patches import Patch
ax.legend(handles=[Patch(color="tab:blue", label="memory-bound: share of DRAM bandwidth"),
                   Patch(color="tab:orange", label="FP32-bound: share of FP32 FLOP/s"),
                   Patch(color="tab:green", label="tensor-bound: share of tensor FLOP/s")], fontsize=8)
ax.set_ylabel("% of roofline"); ax.set_xlabel("module (its best benchmark case)"); ax.set_ylim(0, 100)
ax.set_title(measured.label(), fontsize=9); plt.show()
for k in mods:
    pct, case, limit = best[k]
    print(f"{k}  {pct:5.1f}% of roofline  ({limit}-bound, case {case})")
'''),
]
