"""What `grader bench` times a kernel against, and the counts that turn a time into a rate.

A baseline is a callable (BenchContext) -> outputs, timed exactly like the student's function. The
counts: FLOPs for compute-bound kernels (prefill), bytes for memory-bound ones (softmax, decode).
"""
from __future__ import annotations

from ..spec import BenchContext


def attention_flops(p, causal=False) -> float:
    """FlashAttention's count: 4·Nq·Nk·d per head (two matmuls), halved under a causal mask."""
    f = 4.0 * p["B"] * p["H"] * p["Nq"] * p["Nk"] * p["d"]
    return f / 2 if causal else f


def naive_cublas(b: BenchContext, causal=False) -> dict:
    """Attention as three steps on CuPy, materialising S [B, H, Nq, Nk]: cuBLAS matmul, softmax, matmul."""
    xp = b.rt.xp
    q, k, v, scale = b.inputs["q"], b.inputs["k"], b.inputs["v"], b.inputs["scale"]
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = xp.repeat(k, group, axis=1), xp.repeat(v, group, axis=1)
    s = xp.matmul(q * xp.float32(scale), xp.swapaxes(k, -1, -2))      # the N×N scores in memory
    if causal:
        n_q, n_k = s.shape[-2:]
        hidden = xp.arange(n_k)[None, :] > xp.arange(n_q)[:, None] + (n_k - n_q)
        s += xp.where(hidden, xp.float32(-xp.inf), xp.float32(0.0))   # bottom-right aligned
    m = s.max(axis=-1, keepdims=True)
    xp.exp(s - m, out=s)
    l = s.sum(axis=-1, keepdims=True)
    s /= l
    return {"o": xp.matmul(s, v), "lse": (m + xp.log(l))[..., 0]}


def naive_cublas_causal(b: BenchContext) -> dict:
    return naive_cublas(b, causal=True)


def cupy_softmax(b: BenchContext) -> dict:
    """The same softmax as CuPy array operations: max, exp, sum, divide (several passes over x)."""
    xp = b.rt.xp
    x = b.inputs["x"]
    m = x.max(axis=1, keepdims=True)
    e = xp.exp(x - m)
    l = e.sum(axis=1, keepdims=True)
    return {"y": e / l, "lse": (m + xp.log(l))[:, 0]}


def kv_bytes(p) -> float:
    """Decode reads K and V once: 2 · B · Hkv · context · d · (4 bytes, 2 for float16 and bfloat16)."""
    return 2.0 * p["B"] * p["Hkv"] * p["ctx"] * p["d"] * (2 if p.get("dtype") in ("float16", "bfloat16") else 4)


_copy_buffers: dict = {}


def copy_bandwidth(b: BenchContext):
    """A device-to-device copy moving as many bytes as decode reads: n/2 read + n/2 written."""
    n = int(kv_bytes(b.params)) // 8                   # float32 elements in each of src and dst
    if n not in _copy_buffers:
        _copy_buffers.clear()
        _copy_buffers[n] = (b.rt.xp.ones(n, dtype="float32"), b.rt.xp.empty(n, dtype="float32"))
    src, dst = _copy_buffers[n]
    dst[...] = src
    return dst


# ---- half precision (module 06) -------------------------------------------------------------------

def lowp_naive_cublas(b: BenchContext) -> dict:
    """Naive attention in float16 on cuBLAS: S = Q Kᵀ in float16 (materialised), softmax in float32,
    P rounded to float16, P V. CuPy has no bfloat16 matmul, so a bfloat16 case has no such baseline."""
    if b.params.get("dtype") != "float16":
        raise TypeError("CuPy has no bfloat16 matmul: no cuBLAS baseline for bfloat16")
    xp = b.rt.xp
    q, k, v, scale = b.inputs["q"], b.inputs["k"], b.inputs["v"], b.inputs["scale"]
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = xp.repeat(k, group, axis=1), xp.repeat(v, group, axis=1)
    s = xp.matmul(q, xp.swapaxes(k, -1, -2)).astype(xp.float32) * xp.float32(scale)
    if b.params.get("causal"):
        n_q, n_k = s.shape[-2:]
        s += xp.where(xp.arange(n_k)[None, :] > xp.arange(n_q)[:, None] + (n_k - n_q),
                      xp.float32(-xp.inf), xp.float32(0.0))
    m = s.max(axis=-1, keepdims=True)
    p = xp.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    return {"o": xp.matmul((p / l).astype(xp.float16), v), "lse": (m + xp.log(l))[..., 0]}


_torch_inputs: dict = {}


def torch_sdpa(backend: str):
    """torch.nn.functional.scaled_dot_product_attention with one backend (FLASH_ATTENTION: FlashAttention-2;
    CUDNN_ATTENTION), on the same device memory through DLPack. Raises, and the bench says so, when
    PyTorch is not importable or the backend refuses the case."""
    def run(b: BenchContext) -> dict:
        try:
            import torch
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:
            raise RuntimeError("PyTorch is not importable here: no torch baseline") from None
        key = (id(b.inputs["q"]), b.params.get("dtype"))
        if key not in _torch_inputs:
            _torch_inputs.clear()
            as_type = torch.bfloat16 if b.params.get("dtype") == "bfloat16" else torch.float16
            _torch_inputs[key] = tuple(torch.from_dlpack(b.inputs[x]).view(as_type) for x in ("q", "k", "v"))
        q, k, v = _torch_inputs[key]
        with sdpa_kernel(getattr(SDPBackend, backend)):
            o = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=bool(b.params.get("causal")), scale=b.inputs["scale"],
                enable_gqa=q.shape[1] != k.shape[1])
        return {"o": o}
    run.__name__ = f"torch_{backend.lower()}"
    return run


# ---- the backward pass (module 09) ----------------------------------------------------------------

def backward_flops(p) -> float:
    """FlashAttention's count for the backward pass: 2.5 × the forward's (five matmuls against two),
    halved under a causal mask."""
    return 2.5 * attention_flops(p, causal=bool(p.get("causal")))


def naive_backward(b: BenchContext) -> dict:
    """The backward pass on CuPy, materialising the N × N matrices: S (turned into P in place from lse),
    and dP (turned into dS in place), with cuBLAS matmuls for the five products."""
    xp = b.rt.xp
    i = b.inputs
    q, k, v, o, lse, do, scale = (i[x] for x in ("q", "k", "v", "o", "lse", "do", "scale"))
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = xp.repeat(k, group, axis=1), xp.repeat(v, group, axis=1)
    p = xp.matmul(q * xp.float32(scale), xp.swapaxes(k, -1, -2))      # S [B, H, Nq, Nk]
    if i.get("causal"):
        n_q, n_k = p.shape[-2:]
        p += xp.where(xp.arange(n_k)[None, :] > xp.arange(n_q)[:, None] + (n_k - n_q),
                      xp.float32(-xp.inf), xp.float32(0.0))
    p -= lse[..., None]
    xp.exp(p, out=p)                                                     # P, from the forward's lse
    ds = xp.matmul(do, xp.swapaxes(v, -1, -2))                           # dP [B, H, Nq, Nk]
    ds -= (do * o).sum(axis=-1, keepdims=True)
    ds *= p                                                              # dS = P ∘ (dP - D)
    dv = xp.matmul(xp.swapaxes(p, -1, -2), do)
    dq = xp.matmul(ds, k) * xp.float32(scale)
    dk = xp.matmul(xp.swapaxes(ds, -1, -2), q) * xp.float32(scale)
    if group > 1:                                                        # sum over each group's heads
        B, H, n_k, d = dk.shape
        dk = dk.reshape(B, H // group, group, n_k, d).sum(axis=2)
        dv = dv.reshape(B, H // group, group, n_k, d).sum(axis=2)
    return {"dq": dq, "dk": dk, "dv": dv}


_torch_graph: dict = {}


def torch_sdpa_backward(backend: str):
    """torch's attention backward with one SDPA backend (EFFICIENT_ATTENTION: the memory-efficient
    kernel, float32 too; FLASH_ATTENTION: FlashAttention-2; CUDNN_ATTENTION: cuDNN), on the same device
    memory through DLPack, in the case's dtype (bfloat16 bits viewed as torch.bfloat16). The forward
    runs once, untimed; each call is one backward: torch.autograd.grad of o with dO."""
    def run(b: BenchContext) -> dict:
        try:
            import torch
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:
            raise RuntimeError("PyTorch is not importable here: no torch baseline") from None
        key = (id(b.inputs["q"]), backend)
        if key not in _torch_graph:
            _torch_graph.clear()
            as_type = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(b.params.get("dtype"))

            def tensor(name):
                t = torch.from_dlpack(b.inputs[name])
                return t.view(as_type) if as_type is not None else t
            q, k, v = (tensor(x).detach().requires_grad_() for x in ("q", "k", "v"))
            with sdpa_kernel(getattr(SDPBackend, backend)):
                o = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=bool(b.inputs.get("causal")), scale=b.inputs["scale"],
                    enable_gqa=q.shape[1] != k.shape[1])
            _torch_graph[key] = (q, k, v, o, tensor("do"))
        q, k, v, o, do = _torch_graph[key]
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
        return {"dq": dq, "dk": dk, "dv": dv}
    run.__name__ = f"torch_{backend.lower()}_backward"
    return run


torch_efficient_backward = torch_sdpa_backward("EFFICIENT_ATTENTION")


# ---- counts for the emulator's counters (grader bench --backend cpu) -------------------------------

def key_tiles(p, config, causal=False) -> tuple[int, int]:
    """(key tiles a schedule needs, all key tiles), over every (batch, head, query tile): with causal,
    a key tile is needed when some row of the query tile sees one of its keys (bottom-right)."""
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    n_q, n_k = p["Nq"], p["Nk"]
    tq, tk = -(-n_q // bm), -(-n_k // bn)
    needed = 0
    for a in range(tq):
        last = min((a + 1) * bm, n_q) - 1
        needed += min(tk, max(0, -(-(last + n_k - n_q + 1) // bn))) if causal else tk
    return p["B"] * p["H"] * needed, p["B"] * p["H"] * tq * tk


def prefill_bytes(p, config, causal=False, itemsize=4) -> int:
    """Global bytes a tiled prefill kernel moves, counted by hand: Q read and O written once, lse
    written once, and K and V read once per key tile a query tile runs (rows past Nk not read)."""
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    B, H, n_q, n_k, d = p["B"], p["H"], p["Nq"], p["Nk"], p["d"]
    kv_rows = 0
    for a in range(-(-n_q // bm)):
        last = min((a + 1) * bm, n_q) - 1
        end = min(n_k, last + n_k - n_q + 1) if causal else n_k
        kv_rows += min(n_k, -(-max(end, 0) // bn) * bn)
    return B * H * (2 * n_q * d * itemsize + n_q * 4 + 2 * kv_rows * d * itemsize)


# ---- decode of several tokens over a paged 16-bit cache (module 13) ------------------------------

_dense_cache: dict = {}


def dense_from_pages(b: BenchContext) -> tuple:
    """The bench's paged cache gathered into dense torch tensors, once per case (untimed): q
    [B, H, T, d], k and v [B, Hkv, context, d], in the case's dtype. Every context is the case's ctx."""
    import torch
    key = id(b.inputs["k_pages"])
    if key not in _dense_cache:
        _dense_cache.clear()
        as_type = torch.bfloat16 if b.params["dtype"] == "bfloat16" else torch.float16
        t = lambda x: torch.from_dlpack(b.inputs[x]).view(as_type)                    # noqa: E731
        table = torch.from_dlpack(b.inputs["block_table"]).long()
        n = b.params["ctx"]
        def dense(pages):                       # [B, max_pages, page_size, Hkv, d] -> [B, Hkv, n, d]
            x = pages[table]
            return x.permute(0, 3, 1, 2, 4).reshape(x.shape[0], x.shape[3], -1, x.shape[4])[:, :, :n].contiguous()
        _dense_cache[key] = (t("q").transpose(1, 2).contiguous(), dense(t("k_pages")), dense(t("v_pages")))
    return _dense_cache[key]


def torch_sdpa_dense(backend: str):
    """torch SDPA with one backend (FLASH_ATTENTION, CUDNN_ATTENTION) on the paged cache gathered into
    a dense one (dense_from_pages), q of T tokens, with enable_gqa. No mask: torch's is_causal is
    aligned top-left, and the bottom-right mask hides T - 1 of the context's keys from some tokens,
    which changes the work by less than one part in a thousand."""
    def run(b: BenchContext) -> dict:
        try:
            import torch
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:
            raise RuntimeError("PyTorch is not importable here: no torch baseline") from None
        q, k, v = dense_from_pages(b)
        with sdpa_kernel(getattr(SDPBackend, backend)):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=b.inputs["scale"],
                                                                 enable_gqa=q.shape[1] != k.shape[1])
        return {"o": o}
    run.__name__ = f"torch_{backend.lower()}_dense"
    return run
