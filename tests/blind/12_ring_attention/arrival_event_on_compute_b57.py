# BLIND: In pass_on (TODO 4) the arrival event is recorded on the compute stream, 'return coming, ring.compute.record()', instead of on the transfer stream after the exchange ('ring.transfer.record()'), so take_over's 'ring.compute.wait_event(arrived)' waits for nothing and the next step's attention may read the k/v slot before the receive has landed: wrong o and lse (and the backward's k/v) with 2 or more ranks, e.g. P=2, B=H=1, N=64, d=64.
"""12 · Ring attention: one sequence over several GPUs. Read modules/12_ring_attention.md, then fill in each TODO.

The sequence is cut into 2P chunks; rank r holds chunks r and 2P-1-r of q, k, v (zig-zag). Each rank
keeps its queries. The key/value slices travel around the ring 0 -> 1 -> ... -> P-1 -> 0: at step s,
rank r holds the slice of rank (r - s) mod P, attends to it with the local attention (a library call of
the course's finished kernels) while it passes the slice on, and merges the partial result into its
running one by the log-sum-exp (module 04's combine). In the backward pass dQ stays home; dK and dV
travel with their slice, collect every rank's part, and come home at the end.

    forward, rank r:   for s in 0 .. P-1:    src = (r - s) mod P
                           send the held k, v to r + 1 and receive the next from r - 1   (transfer stream)
                           for each (query chunk, key chunk of src) that the mask does not skip:
                               o_p, lse_p = local attention                            (compute stream)
                               (o, lse) = merge((o, lse), (o_p, lse_p))
    backward, rank r:  for s in 0 .. P-1:    the same slices; dK, dV of src arrive from r - 1,
                           take this rank's part, and go on to r + 1: after the last step, home.

The calls between ranks are NCCL's (comm.send, comm.recv, comm.group), on a stream of their own, so that
a transfer overlaps the computation; events order the two streams where one reads what the other writes.
"""
import functools

import numpy as np

KERNEL = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// USE_BF16 comes from the launch code (-DUSE_BF16=0 or 1): the element type of q, k, v, o and dO.
#if USE_BF16
typedef __nv_bfloat16 elem_t;
__device__ __forceinline__ float to_float(elem_t x) { return __bfloat162float(x); }
__device__ __forceinline__ elem_t to_elem(float x) { return __float2bfloat16(x); }
#else
typedef __half elem_t;
__device__ __forceinline__ float to_float(elem_t x) { return __half2float(x); }
__device__ __forceinline__ elem_t to_elem(float x) { return __float2half(x); }
#endif

// A rank's array [B, H, n, width] is B·H runs of n rows. A chunk of it is rows [first, first + n_chunk)
// of every run, kept as its own contiguous array [B, H, n_chunk, width]. Within one run both are
// contiguous: the chunk's run is n_chunk · width elements, starting at row first of the array's run. So
// each kernel below takes one run per row of its grid (blockIdx.y) and a flat loop over that run.

// chunk <- the chunk's rows of x (q, o, dO and the key/value slices: float16 or bfloat16; lse: float).
template <typename T>
__global__ void take_rows(const T* __restrict__ x, T* __restrict__ chunk, int n, int first, int n_chunk, int width)
{
    const size_t len = (size_t)n_chunk * width;
    const T* src = x + ((size_t)blockIdx.y * n + first) * width;
    T* dst = chunk + blockIdx.y * len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

// acc (float32, the rank's layout) += a chunk's gradient (the element type): dQ at home, and dK, dV
// on their way around the ring.
extern "C" __global__ void add_rows(float* __restrict__ acc, const elem_t* __restrict__ chunk, int n, int first,
                                    int n_chunk, int width)
{
    const size_t len = (size_t)n_chunk * width;
    float* dst = acc + ((size_t)blockIdx.y * n + first) * width;
    const elem_t* src = chunk + blockIdx.y * len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len; i += (size_t)gridDim.x * blockDim.x)
        dst[i] += to_float(src[i]);
}

// y <- x rounded to the element type (the outputs, once every part has been added).
extern "C" __global__ void round_to_elem(const float* __restrict__ x, elem_t* __restrict__ y, long long count)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count; i += (long long)gridDim.x * blockDim.x)
        y[i] = to_elem(x[i]);
}

// The running result of a query chunk, (o, lse) over the keys seen so far, merged with the local
// attention's (o_part, lse_part) over one more key chunk: module 04's combine of two parts.
//   lse = log(e^lse + e^lse_part),   o = (e^lse · o + e^lse_part · o_part) / e^lse_new
// o and lse are float32 in the rank's layout ([B, H, n, d] and [B, H, n]); o_part [B, H, n_chunk, d] in the
// element type and lse_part [B, H, n_chunk] float32 are the chunk's. One run per row of the grid, one
// warp per row of the chunk; the lanes share its d features.
extern "C" __global__ void merge_partial(float* __restrict__ o, float* __restrict__ lse,
                                         const elem_t* __restrict__ o_part, const float* __restrict__ lse_part,
                                         int n, int first, int n_chunk, int d)
{
    const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (int i = blockIdx.x * warps + threadIdx.x / 32; i < n_chunk; i += gridDim.x * warps) {
        const size_t row = (size_t)blockIdx.y * n + first + i;     // the row in the rank's o and lse
        const size_t r = (size_t)blockIdx.y * n_chunk + i;         // the same row in the part
        // BEGIN SOLUTION TODO(3): merge row r of the part into `row` of the running result, the larger lse subtracted before exp; a row whose two lse are both -inf stays as it is
        const float lse_old = lse[row], lse_new_part = lse_part[r];
        const float m = fmaxf(lse_old, lse_new_part);
        if (m == -INFINITY) continue;                 // no key seen in either: nothing to merge yet
        const float w_old = expf(lse_old - m), w_part = expf(lse_new_part - m);   // exp(-inf) = 0
        const float inv = 1.0f / (w_old + w_part);
        for (int c = lane; c < d; c += 32)
            o[row * d + c] = (w_old * o[row * d + c] + w_part * to_float(o_part[r * d + c])) * inv;
        __syncwarp();                                 // every lane has read lse[row] before lane 0 writes it
        if (lane == 0) lse[row] = m + logf(w_old + w_part);
        // END SOLUTION
    }
}
"""

CONFIG = dict(THREADS=256,          # threads per block of the small kernels above
              MAX_BLOCKS=1024)      # their grid-stride loops cover the rest
MAX_GRID_Y = 65535                  # CUDA's limit on a grid's rows (blockIdx.y): one per run of B·H

FULL, DIAGONAL, SKIP = "full", "diagonal", "skip"     # how a query chunk sees a key chunk


def cdiv(a, b):
    return (a + b - 1) // b


# ---- the placement (the lesson's, and the grader's) ------------------------------------------------

def chunk_bounds(n_tokens, ranks):
    """The 2P chunks of the sequence as [start, end): as even as possible, the first n_tokens mod 2P one
    token longer."""
    base, extra = divmod(n_tokens, 2 * ranks)
    ends = np.cumsum([base + (c < extra) for c in range(2 * ranks)])
    return [(int(e - base - (c < extra)), int(e)) for c, e in enumerate(ends)]


def chunks_of(rank, ranks):
    """The chunks a rank holds, in the order its arrays hold them: an early one and a late one."""
    return rank, 2 * ranks - 1 - rank


# ---- the schedule ----------------------------------------------------------------------------------

def held_at(rank, step, ranks):
    """The rank whose k and v slice `rank` holds at `step`: each step, every slice moves one rank on."""
    # BEGIN SOLUTION TODO(1): whose slice this rank holds at this step, when every slice moves one rank on (to rank + 1) at every step
    return (rank - step) % ranks
    # STUB: raise NotImplementedError("TODO(1): held_at, whose slice a rank holds at a step")
    # END SOLUTION


def pair_kind(q_chunk, k_chunk, causal):
    """How the queries of chunk q_chunk see the keys of chunk k_chunk (chunks numbered in sequence
    order). FULL: every query sees every key; DIAGONAL: the same chunk, so the causal mask of a square
    block; SKIP: every key comes after every query, so the mask hides them all."""
    # BEGIN SOLUTION TODO(2): FULL, DIAGONAL or SKIP, from the two chunks' places in the sequence
    if not causal or k_chunk < q_chunk:
        return FULL
    return DIAGONAL if k_chunk == q_chunk else SKIP
    # STUB: raise NotImplementedError("TODO(2): pair_kind, how a query chunk sees a key chunk")
    # END SOLUTION


# ---- the kernels above, and the pieces of a rank's arrays ------------------------------------------

@functools.lru_cache(maxsize=None)
def _module(rt, elem):
    options = (f"-DUSE_BF16={int(elem == 'bfloat16')}",)
    return rt.compile(KERNEL, options=options, name_expressions=["take_rows<elem_t>", "take_rows<float>"])


class Rows:
    """The small kernels, launched on the current stream, one grid-stride launch each."""

    def __init__(self, rt, elem):
        self.rt, self.module = rt, _module(rt, elem)

    def _launch(self, name, per_run, runs, args):
        """One grid row per run (B·H of them), each a grid-stride loop over the run's per_run items."""
        if runs > MAX_GRID_Y:
            raise ValueError(f"B·H = {runs} runs, more than a grid's {MAX_GRID_Y} rows")
        across = max(1, min(cdiv(per_run, CONFIG["THREADS"]), cdiv(CONFIG["MAX_BLOCKS"], runs)))
        self.module.get_function(name)((across, runs), (CONFIG["THREADS"],), args)

    def take(self, x, first, n_chunk):
        """The chunk [first, first + n_chunk) of x's rows (x [B, H, n, ...]), as a contiguous array."""
        B, H, n = x.shape[:3]
        width = int(np.prod(x.shape[3:], dtype=np.int64))
        chunk = self.rt.empty((B, H, n_chunk) + tuple(x.shape[3:]), x.dtype)
        kind = "take_rows<float>" if x.dtype == np.float32 else "take_rows<elem_t>"
        rt = self.rt
        self._launch(kind, n_chunk * width, B * H, (x, chunk, rt.int32(n), rt.int32(first), rt.int32(n_chunk),
                                                     rt.int32(width)))
        return chunk

    def add(self, acc, part, first):
        """acc's rows [first, first + n_chunk) += part (float32 += the element type)."""
        B, H, n, d = acc.shape
        rt = self.rt
        self._launch("add_rows", part.shape[2] * d, B * H, (acc, part, rt.int32(n), rt.int32(first),
                                                            rt.int32(part.shape[2]), rt.int32(d)))

    def merge(self, o, lse, o_part, lse_part, first):
        B, H, n, d = o.shape
        rt = self.rt
        self._launch("merge_partial", o_part.shape[2] * 32, B * H, (
            o, lse, o_part, lse_part, rt.int32(n), rt.int32(first), rt.int32(o_part.shape[2]), rt.int32(d)))

    def rounded(self, x, dtype):
        y = self.rt.empty(x.shape, dtype)
        self._launch("round_to_elem", x.size, 1, (x, y, self.rt.int64(x.size)))
        return y


class Ring:
    """One rank's view of the ring: its neighbours, its chunks, the slices' shapes, its two streams."""

    def __init__(self, rt, comm, attn, n_tokens, kv_shape):
        self.rt, self.comm, self.attn = rt, comm, attn
        self.P, self.me = comm.size, comm.rank
        self.next, self.prev = (self.me + 1) % self.P, (self.me - 1) % self.P
        self.bounds = chunk_bounds(n_tokens, self.P)
        self.B, self.H_kv, _, self.d = kv_shape
        self.rows = Rows(rt, attn.dtype)
        self.compute, self.transfer = rt.stream(), rt.stream()

    def chunks(self, rank):
        """[(chunk, its first row in rank's arrays, its length)] for rank's two chunks."""
        out, first = [], 0
        for c in chunks_of(rank, self.P):
            length = self.bounds[c][1] - self.bounds[c][0]
            out.append((c, first, length))
            first += length
        return out

    def slice_rows(self, rank):
        return sum(length for _, _, length in self.chunks(rank))

    def slots(self, dtype):
        """Two buffers, each with room for the longest slice: one is read while the other receives."""
        longest = max(self.slice_rows(r) for r in range(self.P))
        return [self.rt.empty(self.B * self.H_kv * longest * self.d, dtype) for _ in range(2)]

    def slice_in(self, slot, rank):
        """rank's slice [B, Hkv, n_rank, d] in a slot (its first elements: a contiguous view)."""
        shape = (self.B, self.H_kv, self.slice_rows(rank), self.d)
        return slot[:int(np.prod(shape))].reshape(shape)

    def exchange(self, sending, receiving):
        """Send `sending` to the next rank and receive `receiving` from the previous one, together, on the
        transfer stream (one group: neither call waits for the other)."""
        with self.comm.group():
            for x in sending:
                self.comm.send(x, self.next, self.transfer)
            for x in receiving:
                self.comm.recv(x, self.prev, self.transfer)

    def rows_of(self, x, span):
        """x's rows span = (first, length) as a contiguous array: x itself when the span is all of it."""
        first, length = span
        return x if (first, length) == (0, x.shape[2]) else self.rows.take(x, first, length)

    def blocks(self, src, causal):
        """The local attention calls of the step that holds src's slice: [(q_span, k_span, kind)], spans of
        rows (first, length) of this rank's arrays and of src's slice. The 2 × 2 (query chunk, key chunk)
        pairs are one call where they form one rectangle under one mask, so that the calls are few and
        large: without the mask, always; with it, a rank's own slice is one causal block (its two chunks
        keep their order in the sequence), and another rank's is one row or one column of blocks."""
        mine, theirs = self.chunks(self.me), self.chunks(src)
        kinds = [[pair_kind(qc, kc, causal) for kc, _, _ in theirs] for qc, _, _ in mine]
        span = lambda chunk: chunk[1:]                                              # noqa: E731
        every_q, every_k = (0, self.slice_rows(self.me)), (0, self.slice_rows(src))
        if kinds in ([[FULL, FULL], [FULL, FULL]], [[DIAGONAL, SKIP], [FULL, DIAGONAL]]):
            return [(every_q, every_k, kinds[1][1])]
        for j in (0, 1):                                       # one column of FULL blocks, the other skipped
            if [row[j] for row in kinds] == [FULL, FULL] and [row[1 - j] for row in kinds] == [SKIP, SKIP]:
                return [(every_q, span(theirs[j]), FULL)]
        for i in (0, 1):                                       # one row of FULL blocks, the other skipped
            if kinds[i] == [FULL, FULL] and kinds[1 - i] == [SKIP, SKIP]:
                return [(span(mine[i]), every_k, FULL)]
        return [(span(mine[i]), span(theirs[j]), kind) for i in (0, 1) for j in (0, 1)
                if (kind := kinds[i][j]) != SKIP]


def pass_on(ring, step, held, slots):
    """Start the transfer of step `step` on the transfer stream: the held slice goes to the next rank, and
    the next step's slice comes from the previous one into the slot of this step's parity. Returns (the
    buffers it arrives in, an event recorded after the exchange), or (None, None) at the last step."""
    # BEGIN SOLUTION TODO(4): before the last step: the next slice's buffers in slot step % 2 of each array's slots; the transfer stream waits for an event of the compute stream (the held slice is complete, and the slot about to receive has been read for the last time); the exchange; an event after it
    if step + 1 == ring.P:
        return None, None
    nxt = held_at(ring.me, step + 1, ring.P)
    coming = tuple(ring.slice_in(slot[step % 2], nxt) for slot in slots)
    # Recorded after every launch so far on the compute stream: the held slice is complete, and the slot
    # about to receive (held two steps ago) has been read for the last time.
    ring.transfer.wait_event(ring.compute.record())
    ring.exchange(held, coming)
    return coming, ring.compute.record()
    # STUB: return None, None
    # END SOLUTION


def take_over(ring, held, coming, arrived):
    """After a step's launches: the slice that arrived becomes the held one (the same at the last step)."""
    if coming is None:
        return held
    # BEGIN SOLUTION TODO(5): the compute stream may read the new slice only once its receive has landed
    ring.compute.wait_event(arrived)
    return coming
    # STUB: return held
    # END SOLUTION


def forward(ring, q, k, v, scale, causal):
    rt, rows, P = ring.rt, ring.rows, ring.P
    with ring.compute:
        o = rt.zeros(q.shape, "float32")
        lse = rt.full(q.shape[:3], -np.inf, "float32")
    slots = (ring.slots(k.dtype), ring.slots(v.dtype))
    held = (k, v)
    for step in range(P):
        src = held_at(ring.me, step, P)
        coming, arrived = pass_on(ring, step, held, slots)          # overlaps the launches below
        with ring.compute:
            for q_span, k_span, kind in ring.blocks(src, causal):
                o_part, lse_part = ring.attn.forward(ring.rows_of(q, q_span), ring.rows_of(held[0], k_span),
                                                     ring.rows_of(held[1], k_span), scale, kind == DIAGONAL)
                rows.merge(o, lse, o_part, lse_part, q_span[0])
        held = take_over(ring, held, coming, arrived)
    with ring.compute:
        return rows.rounded(o, q.dtype), lse


def backward(ring, q, k, v, o, lse, do, scale, causal):
    rt, rows, P = ring.rt, ring.rows, ring.P
    slots = (ring.slots(k.dtype), ring.slots(v.dtype))
    grad_slots = (ring.slots("float32"), ring.slots("float32"))
    with ring.compute:
        dq = rt.zeros(q.shape, "float32")
        dk, dv = rt.zeros(k.shape, "float32"), rt.zeros(k.shape, "float32")   # the held slice's dK and dV
    landed = None                                                   # the event that dk, dv have arrived
    held = (k, v)
    for step in range(P):
        src = held_at(ring.me, step, P)
        coming, arrived = pass_on(ring, step, held, slots)          # the next slice's k and v, as in the forward
        with ring.compute:
            parts = []
            for q_span, k_span, kind in ring.blocks(src, causal):
                q_c, o_c, lse_c, do_c = (ring.rows_of(x, q_span) for x in (q, o, lse, do))
                dq_p, dk_p, dv_p = ring.attn.backward(q_c, ring.rows_of(held[0], k_span), ring.rows_of(held[1], k_span),
                                                      o_c, lse_c, do_c, scale, kind == DIAGONAL)
                rows.add(dq, dq_p, q_span[0])
                parts.append((k_span[0], dk_p, dv_p))
            # The local attention reads k and v, not dk and dv: only their sums wait for them to arrive,
            # so that their transfer runs under this step's attention.
            if landed is not None:
                ring.compute.wait_event(landed)
            for first, dk_p, dv_p in parts:
                rows.add(dk, dk_p, first)
                rows.add(dv, dv_p, first)
        # BEGIN SOLUTION TODO(6): this rank's part of the held slice's dK and dV is in: send them on with the slice (after the last step, that is home) and receive the next slice's from the previous rank into slot step % 2 of the grad slots, the transfer stream first waiting for an event recorded now on the compute stream (the sums are done); landed = the event that they have arrived; then dk, dv = the buffers they arrived in (lesson, section 6)
        to = held_at(ring.me, step + 1, P)                      # whose slice comes next; after the last step, ours
        incoming = tuple(ring.slice_in(slot[step % 2], to) for slot in grad_slots)
        ring.transfer.wait_event(ring.compute.record())         # every part is added before they leave
        ring.exchange((dk, dv), incoming)
        landed = ring.transfer.record()
        dk, dv = incoming
        # END SOLUTION
        held = take_over(ring, held, coming, arrived)
    with ring.compute:
        if landed is not None:
            ring.compute.wait_event(landed)                     # this rank's own dK and dV are home
        return tuple(rows.rounded(g, q.dtype) for g in (dq, dk, dv))


def ring_attention(rt, comm, attn, q, k, v, n_tokens, scale, causal=False, do=None):
    """One rank's part of attention over a sequence of n_tokens tokens placed over comm.size ranks (2P
    chunks, rank r holding chunks r and 2P-1-r). q [B, H, n_r, d], k and v [B, Hkv, n_r, d] are this
    rank's rows (float16, or bfloat16 as uint16 bits: attn.dtype says which); attn.forward and
    attn.backward are the local attention. Returns (o, lse) for this rank's queries, and with do (the
    gradient of o, [B, H, n_r, d]) also (dq, dk, dv) for this rank's rows."""
    ring = Ring(rt, comm, attn, n_tokens, k.shape)
    o, lse = forward(ring, q, k, v, scale, causal)
    if do is None:
        return o, lse
    return (o, lse) + backward(ring, q, k, v, o, lse, do, scale, causal)
