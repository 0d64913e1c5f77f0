"""Benchmark for 13_decode_tensor_cores: bfloat16, d = 128, H = 64, Hkv = 8, page size 16, against a
device copy of the same bytes (in the same run), module 05's float32 kernel on the same values, and
torch SDPA's FlashAttention-2 and cuDNN backends on the same cache gathered into a dense one."""
from ...attention.baselines import copy_bandwidth, kv_bytes, torch_sdpa_dense
from ...spec import BenchCase, BenchContext

_float32: dict = {}


def paged_float32(b: BenchContext):
    """Module 05's solution on the same values widened to float32 (twice the bytes), one token only."""
    i, xp = b.inputs, b.rt.xp
    if b.params["T"] != 1:
        raise ValueError("module 05 decodes one token per sequence")
    key = id(i["k_pages"])
    if key not in _float32:                   # widened once per case, untimed
        _float32.clear()
        widen = lambda x: (x.view(xp.uint16).astype(xp.uint32) << 16).view(xp.float32)   # noqa: E731
        _float32[key] = (widen(i["q"][:, 0]), widen(i["k_pages"]), widen(i["v_pages"]))
    q, k, v = _float32[key]
    fn = b.solution("05_paged_decode").paged_decode
    return fn(b.rt, q, k, v, i["block_table"], i["context_lens"], i["scale"])


def _case(B, ctx, T):
    p = dict(B=B, T=T, H=64, Hkv=8, d=128, ctx=ctx, page_size=16, dtype="bfloat16", tiled=True)
    name = f"batch {B}, {ctx // 1024}k, {T} token{'s' if T > 1 else ''}"
    baselines = {"copy bandwidth": copy_bandwidth}
    if T == 1:
        baselines["05 solution, float32"] = paged_float32
    baselines.update({"torch FlashAttention-2": torch_sdpa_dense("FLASH_ATTENTION"),
                      "torch cuDNN": torch_sdpa_dense("CUDNN_ATTENTION")})
    return BenchCase(name, p, bytes=kv_bytes(p), baselines=baselines)


BENCH = [_case(B, ctx, T) for B, ctx in ((1, 32768), (1, 131072), (1, 524288), (64, 2048), (64, 8192), (256, 1024))
         for T in (1, 4)]

# What `grader bench --backend cpu` counts on the emulator.
COUNTER_CASE = BenchCase("counters: batch 4, context 2048", dict(B=4, T=1, H=8, Hkv=1, d=128, ctx=2048,
                                                                  page_size=16, dtype="bfloat16"),
                         bytes=kv_bytes(dict(B=4, Hkv=1, ctx=2048, d=128, dtype="bfloat16")))


# What the work check counts (engine/work.py): one sequence, whose splits fill the GPU (blocks), each
# block reading the pages of its context once per GQA group (reads), not the table's spare columns.
# 4 new tokens of a group of 8: 32 rows, the two MMA tiles of one block (a block per 16 rows reads
# every page twice).
WORK_CASE = BenchCase("work_gqa_8_tokens_4_context_3000", dict(B=1, T=4, H=16, Hkv=2, d=64, page_size=16,
                                                              dtype="float16", lens="3000", max_pages=256))
