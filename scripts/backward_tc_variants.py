#!/usr/bin/env python3
"""Module 11's backward, in the variants its lesson compares: dQ by float32 atomics (the solution)
against a separate dQ pass, and other tile configurations; checked on the emulator, compiled with
nvcc, or checked and timed on a GPU next to PyTorch's FlashAttention-2 and cuDNN backward.

    python scripts/backward_tc_variants.py --check     # module 11's cases on the CPU emulator, every variant
    python scripts/backward_tc_variants.py --nvcc      # ptxas's registers and spills, every variant (sm_90)
    python scripts/backward_tc_variants.py [--out F]   # on a GPU: check, then time (B=2, H=16, N=4096)

The separate dQ pass: the solution's kernel with its dQ step cut out (the text between two of its
comments, not a copy), and a second kernel, one block per query tile, that owns its rows of dQ and
writes them once. It recomputes S, P, dP and dS per (query tile, key tile) and needs no atomic: 7
products instead of 5. It is built from the solution's own helpers with the roles of the tiles
swapped: compiled with BLOCK_N = its query rows (16 per warp) and BLOCK_M = the keys of a step,
product_t gives S = Q Kᵀ and dP = dO Vᵀ for a warp's 16 query rows, and add_product dQ += dS K.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
spec = importlib.util.spec_from_file_location("solution_11", ROOT / "solutions" / "11_backward_tensor_cores.py")
SOL = importlib.util.module_from_spec(spec)
spec.loader.exec_module(SOL)

SEED = 0
CHECK_CASES = ("tiny", "tile_plus_1", "gqa_4_to_1", "scores_far_below_zero", "causal_queries_past_key_tiles",
               "bf16_gqa_causal_d128")
DQ_TILES = dict(DQ_ROWS=128, DQ_KEYS=64)      # the dQ kernel: query rows per block, keys per step

# ---- the separate dQ pass ---------------------------------------------------------------------------

DQ_KERNEL = r"""
// One block per (query tile of BLOCK_N rows, query head, batch): dQ of its rows, written once. Compiled
// with BLOCK_N = the query rows (warp w: rows 16 w ..) and BLOCK_M = the keys of a step.
template <int D>
__global__ void __launch_bounds__(NTHREADS)
flash_backward_dq(const elem_t* __restrict__ q, const elem_t* __restrict__ k, const elem_t* __restrict__ v,
                  const elem_t* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
                  elem_t* __restrict__ dq, int H, int H_kv, int n_q, int n_k, float scale, int causal)
{
    constexpr int DT = D / 8;
    constexpr int STAGE = 2 * BLOCK_M * D;                // a K tile and a V tile
    extern __shared__ uint4 smem_u4[];
    elem_t* q_s = reinterpret_cast<elem_t*>(smem_u4);    // [BLOCK_N][D]
    elem_t* do_s = q_s + BLOCK_N * D;                    // [BLOCK_N][D]
    elem_t* stages = do_s + BLOCK_N * D;                 // two stages of [K tile | V tile]
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int q_start = (gridDim.x - 1 - blockIdx.x) * BLOCK_N;      // the longest rows first
    const int h = blockIdx.y, b = blockIdx.z, h_kv = h / (H / H_kv);
    const size_t bh = (size_t)(b * H + h) * n_q;
    const elem_t* k_b = k + (size_t)(b * H_kv + h_kv) * n_k * D;
    const elem_t* v_b = v + (size_t)(b * H_kv + h_kv) * n_k * D;
    const float scale_log2 = scale * M_LOG2E_F;
    const int offset = n_k - n_q;
    const int q_last = min(q_start + BLOCK_N, n_q) - 1;
    const int kv_end = causal ? min(n_k, q_last + offset + 1) : n_k;
    const int n_tiles = kv_end > 0 ? (kv_end + BLOCK_M - 1) / BLOCK_M : 0;

    load_tile_async<BLOCK_N, D>(q_s, q + bh * D, q_start, n_q, tid);
    load_tile_async<BLOCK_N, D>(do_s, dout + bh * D, q_start, n_q, tid);
    cp_async_commit();
    if (n_tiles > 0) {
        load_tile_async<BLOCK_M, D>(stages, k_b, 0, n_k, tid);
        load_tile_async<BLOCK_M, D>(stages + BLOCK_M * D, v_b, 0, n_k, tid);
    }
    cp_async_commit();
    float lse_r[2], d_r[2];                              // the lane's rows g and g + 8
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = q_start + warp * 16 + g + 8 * r;
        lse_r[r] = i < n_q ? lse[bh + i] * M_LOG2E_F : 0.0f;
        d_r[r] = i < n_q ? delta[bh + i] : 0.0f;
    }
    float acc[DT][4];
    #pragma unroll
    for (int dt = 0; dt < DT; ++dt)
        #pragma unroll
        for (int e = 0; e < 4; ++e) acc[dt][e] = 0.0f;

    for (int it = 0; it < n_tiles; ++it) {
        const int kv_start = it * BLOCK_M;
        const elem_t* k_t = stages + (it % 2) * STAGE;
        const elem_t* v_t = k_t + BLOCK_M * D;
        cp_async_wait<0>();
        __syncthreads();
        if (it + 1 < n_tiles) {
            elem_t* next = stages + ((it + 1) % 2) * STAGE;
            load_tile_async<BLOCK_M, D>(next, k_b, kv_start + BLOCK_M, n_k, tid);
            load_tile_async<BLOCK_M, D>(next + BLOCK_M * D, v_b, kv_start + BLOCK_M, n_k, tid);
        }
        cp_async_commit();
        const bool masked = (causal && kv_start + BLOCK_M - 1 > q_start + offset)
                            || kv_start + BLOCK_M > n_k || q_start + BLOCK_N > n_q;
        float p[NT][4], ds[NT][4];
        product_t<D>(p, q_s, k_t, warp, lane);           // S = Q Kᵀ: rows are queries here
        product_t<D>(ds, do_s, v_t, warp, lane);         // dP = dO Vᵀ
        #pragma unroll
        for (int nt = 0; nt < NT; ++nt)
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = q_start + warp * 16 + g + 8 * (e / 2), j = kv_start + nt * 8 + 2 * t + e % 2;
                const bool visible = !masked || (j < n_k && i < n_q && (!causal || j <= i + offset));
                const float pe = visible ? exp2f(fmaf(p[nt][e], scale_log2, -lse_r[e / 2])) : 0.0f;
                ds[nt][e] = pe * (ds[nt][e] - d_r[e / 2]);
            }
        unsigned a[QSTEPS][4];
        to_a_fragments(a, ds);
        add_product<D>(acc, a, k_t, lane);               // dQ += dS K
    }
    cp_async_wait<0>();
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = q_start + warp * 16 + g + 8 * r;
        if (i < n_q) {
            #pragma unroll
            for (int dt = 0; dt < DT; ++dt)
                *reinterpret_cast<elem2_t*>(dq + (bh + i) * D + dt * 8 + 2 * t) =
                    to_elem2(scale * acc[dt][2 * r], scale * acc[dt][2 * r + 1]);
        }
    }
}
"""


def cut(text: str, start: str, end: str) -> str:
    """text without [start, end): both must occur once (the solution's comments)."""
    assert text.count(start) == 1 and text.count(end) == 1, (start, end)
    a, b = text.index(start), text.index(end)
    return text[:a] + text[b:]


@functools.lru_cache(maxsize=None)
def dq_pass_source() -> str:
    """The solution's kernel without its dQ step (nor dSᵀ's stores to ds_s), then the dQ kernel."""
    text = cut(SOL.KERNEL, "        // Register x of a[kk] holds key warp_key", "        // END SOLUTION\n        __syncthreads();")
    text = cut(text, "        __syncthreads();                     // every warp's keys of dSᵀ are in ds_s",
               "    }\n    cp_async_wait<0>();                      // no copy outlives the block")
    return text + DQ_KERNEL


def _options(config, elem):
    return tuple(f"-D{key}={int(val)}" for key, val in config) + (f"-DUSE_BF16={int(elem == 'bfloat16')}", "-ftz=true")


@functools.lru_cache(maxsize=None)
def _modules(rt, elem, config):
    cfg = dict(config)
    main = rt.compile(dq_pass_source(), options=_options(config, elem),
                      name_expressions=[f"flash_backward_tc<{d}>" for d in SOL.HEAD_DIMS])
    swapped = (("BLOCK_M", DQ_TILES["DQ_KEYS"]), ("BLOCK_N", DQ_TILES["DQ_ROWS"]))
    dq = rt.compile(dq_pass_source(), options=_options(swapped, elem),
                    name_expressions=[f"flash_backward_dq<{d}>" for d in SOL.HEAD_DIMS])
    return main, dq, cfg


def dq_pass_shared_bytes(d):
    return SOL.ELEMENT_BYTES * d * (2 * DQ_TILES["DQ_ROWS"] + 4 * DQ_TILES["DQ_KEYS"])


def dq_pass_backward(rt, q, k, v, o, lse, do, scale, causal=False, dtype=None):
    """The solution's interface; dK and dV from its kernel less the dQ step, dQ from flash_backward_dq."""
    B, H, n_q, d = q.shape
    H_kv, n_k = k.shape[1], k.shape[2]
    elem = SOL.element_type((q, k, v, o, do), dtype)
    main, dq_mod, cfg = _modules(rt, elem, tuple(SOL.CONFIG[d].items()))
    dq, dk, dv = rt.empty(q.shape, q.dtype), rt.empty(k.shape, q.dtype), rt.empty(k.shape, q.dtype)
    scratch, delta = rt.empty(q.shape, "float32"), rt.empty((B, H, n_q), "float32")
    rows = B * H * n_q
    args = (rt.int32(H), rt.int32(H_kv), rt.int32(n_q), rt.int32(n_k), rt.float32(scale), rt.int32(int(bool(causal))))
    main.get_function("backward_preprocess")((SOL.cdiv(rows, SOL.PREPROCESS_WARPS),), (32 * SOL.PREPROCESS_WARPS,),
                                             (o, do, delta, scratch, rt.int32(rows), rt.int32(d)))
    kernel = main.get_function(f"flash_backward_tc<{d}>")
    smem = SOL.shared_bytes(d)
    if smem > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = smem
    kernel((SOL.cdiv(n_k, cfg["BLOCK_N"]), H_kv, B), (SOL.nthreads(d),),
           (q, k, v, do, lse, delta, scratch, dk, dv) + args, shared_mem=smem)
    kernel = dq_mod.get_function(f"flash_backward_dq<{d}>")
    smem = dq_pass_shared_bytes(d)
    if smem > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = smem
    kernel((SOL.cdiv(n_q, DQ_TILES["DQ_ROWS"]), H, B), (DQ_TILES["DQ_ROWS"] // 16 * 32,),
           (q, k, v, do, lse, delta, dq) + args, shared_mem=smem)
    return dq, dk, dv


def with_config(d, **tiles):
    """The solution with CONFIG[d] changed (tuning scripts set CONFIG rather than rewrite the text)."""
    def run(rt, *args, **kw):
        saved = SOL.CONFIG
        SOL.CONFIG = {**saved, d: dict(saved[d], **tiles)}
        try:
            return SOL.flash_backward_tc(rt, *args, **kw)
        finally:
            SOL.CONFIG = saved
    return run


VARIANTS = [
    ("atomics (the solution)", SOL.flash_backward_tc),
    ("separate dQ pass", dq_pass_backward),
    ("atomics, d=128 BLOCK_M=64", with_config(128, BLOCK_M=64)),
]

# ---- checks -------------------------------------------------------------------------------------------


def run_checks(rt, names=CHECK_CASES) -> int:
    from grader.catalogue import resolve
    from grader.engine.runner import run_case
    from grader.tasks import load_task
    ex = resolve("11_backward_tensor_cores")
    cases = {c.name: c for c in load_task(ex).CASES}
    failures = 0
    for label, fn in VARIANTS:
        for name in names:
            t0 = time.time()
            res = run_case(ex, cases[name], fn, rt, SEED, Path(__file__))
            failures += not res.passed
            err = f"rel err {res.rel_err:.2e}" if res.rel_err is not None else ""
            print(f"  {'ok  ' if res.passed else 'FAIL'} {label:28} {name:32} {err}  ({time.time() - t0:.1f} s)",
                  flush=True)
            if not res.passed:
                print("       " + res.message.replace("\n", "\n       "), flush=True)
    return failures


def ptxas_report(log: str, name: str) -> str:
    """The registers and spills ptxas reports for the kernel whose (mangled) name holds `name`."""
    out, current = [], None
    for line in log.splitlines():
        if "Compiling entry function" in line:
            current = name in line
        elif current and ("spill" in line or "registers" in line):
            out.append(line.split(":", 1)[-1].strip())
    return " | ".join(out)


def nvcc_compile() -> int:
    """ptxas -v of every variant's kernels at d = 64 and 128, float16, for sm_90."""
    prelude = "#define M_LOG2E_F 1.4426950408889634f\n#define M_LN2_F 0.6931471805599453f\n"
    builds = []
    for d in SOL.HEAD_DIMS:
        builds.append((f"solution d={d}", SOL.KERNEL, "flash_backward_tc", d, SOL.CONFIG[d]))
        builds.append((f"dQ pass: main d={d}", dq_pass_source(), "flash_backward_tc", d, SOL.CONFIG[d]))
        builds.append((f"dQ pass: dQ kernel d={d}", dq_pass_source(), "flash_backward_dq", d,
                       dict(BLOCK_M=DQ_TILES["DQ_KEYS"], BLOCK_N=DQ_TILES["DQ_ROWS"])))
    builds.append(("solution d=128 BLOCK_M=64", SOL.KERNEL, "flash_backward_tc", 128, dict(SOL.CONFIG[128], BLOCK_M=64)))
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, text, name, d, cfg in builds:
            src = Path(tmp) / "k.cu"
            src.write_text(prelude + text + f"\nstatic void* const instantiate = (void*){name}<{d}>;\n")
            cmd = ["nvcc", "-arch=sm_90", "-cubin", "-o", str(Path(tmp) / "k.cubin"), "-Xptxas", "-v", "-ftz=true",
                   *(f"-D{key}={val}" for key, val in cfg.items()), "-DUSE_BF16=0", str(src)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            failed += p.returncode != 0
            print(f"{label:30} " + (ptxas_report(p.stderr, name) if p.returncode == 0 else p.stderr[-300:]))
    return failed


# ---- timing on a GPU ----------------------------------------------------------------------------------


def gpu_main(out_path: str | None) -> int:
    import numpy as np
    from grader.attention.baselines import backward_flops, torch_sdpa_backward
    from grader.bench import time_gpu
    from grader.runtimes import get_runtime
    from grader.spec import BenchContext
    rt = get_runtime("gpu")
    cp = rt.xp
    print(f"# {rt.device_name}, CuPy {cp.__version__}\n\n## Correctness: module 11's cases on the GPU, every variant")
    if run_checks(rt):
        print("\ncheck(s) FAILED: no timing")
        return 1
    sol06 = importlib.util.spec_from_file_location("solution_06", ROOT / "solutions" / "06_flash_tensor_cores.py")
    fwd = importlib.util.module_from_spec(sol06)
    sol06.loader.exec_module(fwd)
    rows = []
    for d in (128, 64):
        for dtype in ("float16", "bfloat16"):
            for causal in (False, True):
                p = dict(B=2, H=16, Hkv=16, Nq=4096, Nk=4096, d=d, dtype=dtype, causal=causal)
                rng = np.random.default_rng(d)
                x = {n: rng.standard_normal((2, 16, 4096, d)).astype(np.float32) for n in ("q", "k", "v", "do")}
                if dtype == "float16":
                    dev = {n: cp.asarray(a.astype(np.float16)) for n, a in x.items()}
                else:
                    from grader.attention.lowp import bf16_bits
                    dev = {n: cp.asarray(bf16_bits(a)) for n, a in x.items()}
                kw = dict(causal=causal, dtype=dtype if dtype == "bfloat16" else None)
                dev["scale"], dev["causal"] = d ** -0.5, causal
                dev["o"], dev["lse"] = fwd.flash_tc(rt, dev["q"], dev["k"], dev["v"], dev["scale"], **kw)
                ctx = BenchContext(rt, dev, p, None)
                contenders = [(label, (lambda fn=fn: fn(rt, dev["q"], dev["k"], dev["v"], dev["o"], dev["lse"],
                                                         dev["do"], dev["scale"], **kw))) for label, fn in VARIANTS]
                contenders += [(f"torch {name}", (lambda run=torch_sdpa_backward(backend): run(ctx)))
                               for name, backend in (("FA2", "FLASH_ATTENTION"), ("cuDNN", "CUDNN_ATTENTION"))]
                for label, fn in contenders:
                    try:
                        ms = float(np.median(time_gpu(fn, rt, warmup=3, reps=20)))
                    except Exception as e:
                        print(f"  {label}: not timed ({type(e).__name__}: {str(e).splitlines()[0]})")
                        continue
                    rows.append(dict(variant=label, d=d, dtype=dtype, causal=causal, ms=ms,
                                     tflops=backward_flops(p) / (ms * 1e-3) / 1e12))
                    print(f"  {dtype:8} d={d:<3} {'causal' if causal else 'full  '} {label:28} {ms:8.3f} ms "
                          f"{rows[-1]['tflops']:6.1f} TFLOP/s", flush=True)
    fa2 = {(r["d"], r["dtype"], r["causal"]): r["ms"] for r in rows if r["variant"] == "torch FA2"}
    print("\n| variant | dtype | d | mask | ms | TFLOP/s | × FA2 |\n|---|---|---|---|---|---|---|")
    for r in rows:
        key = (r["d"], r["dtype"], r["causal"])
        x = f"{fa2[key] / r['ms']:.2f}×" if key in fa2 else "—"
        print(f"| {r['variant']} | {r['dtype']} | {r['d']} | {'causal' if r['causal'] else 'full'} | "
              f"{r['ms']:.3f} | {r['tflops']:.0f} | {x} |")
    if out_path:
        Path(out_path).write_text(json.dumps(dict(gpu=rt.device_name, date=datetime.date.today().isoformat(),
                                                  script="scripts/backward_tc_variants.py", rows=rows), indent=1) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="check every variant on the CPU emulator only")
    mode.add_argument("--nvcc", action="store_true", help="compile every variant with the local nvcc for sm_90")
    ap.add_argument("--out", help="GPU mode: also write the figures to this JSON file")
    args = ap.parse_args()
    if args.check:
        from grader.runtimes import get_runtime
        return 1 if run_checks(get_runtime("cpu")) else 0
    if args.nvcc:
        return 1 if nvcc_compile() else 0
    return gpu_main(args.out)


if __name__ == "__main__":
    sys.exit(main())
