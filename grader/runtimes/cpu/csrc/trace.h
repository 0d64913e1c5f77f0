// Tracing: which elements of each array argument every block reads and writes, for the grader's
// first-divergence report (grader/runtimes/cpu/trace.py). Included after counters.h, whose counting
// build calls trace_global for every load and store of an array argument; the runtime's own copies
// (cp.async) call trace_copy with the student's line. Stores to shared memory are traced too (arg
// -1, their offset in the block's shared window: static, then dynamic; a copy's with its line), and at every __syncthreads
// the block's shared memory is copied (a snapshot), so that the grader can find the first barrier
// where a tile differs and the last store into it. Off unless cudaemu_trace_begin turned it on.

struct TraceRec {
  uint64_t off;      // byte offset in the array
  uint32_t block;    // linear block id (x fastest)
  uint32_t where;    // counters row of the instruction, or TRACE_LINE | source line
  uint16_t size;
  int8_t arg;        // index into array_args
  uint8_t write;
  uint16_t thread;   // linear thread id in the block
  uint16_t epoch;    // __syncthreads the block had passed when the access was made
};

struct SnapRec {     // shared memory at one __syncthreads of one block
  uint64_t offset;   // into snap_data
  uint64_t bytes;    // static bytes + dynamic bytes
  uint32_t block;
  uint32_t index;    // the block's barrier count (1: its first __syncthreads)
  int32_t line;
  uint32_t static_bytes;
};

static const uint32_t TRACE_LINE = 0x80000000u;
static const size_t TRACE_LIMIT = (size_t)1 << 24;   // records at most (384 MB): beyond, marked cut
// tracing: declared in counters.h
static TraceRec* trace_log;
static size_t trace_n, trace_cap;
static int trace_cut;

static uint32_t trace_epoch;   // __syncthreads the current block has passed
static SnapRec* snaps;
static size_t snap_n, snap_cap;
static char* snap_data;
static size_t snap_used, snap_data_cap;
static const size_t SNAP_LIMIT = (size_t)256 << 20;   // bytes of snapshots at most: beyond, marked cut

static void trace_add(int arg, uintptr_t addr, unsigned size, int write, uint32_t where) {
  if (trace_n == trace_cap) {
    size_t ncap = trace_cap ? trace_cap * 2 : (size_t)1 << 16;
    if (ncap > TRACE_LIMIT) { trace_cut = 1; return; }
    TraceRec* n = (TraceRec*)realloc(trace_log, sizeof(TraceRec) * ncap);
    if (!n) { trace_cut = 1; return; }
    trace_log = n;
    trace_cap = ncap;
  }
  uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  uintptr_t base = arg >= 0 ? array_args[arg].lo : 0;
  trace_log[trace_n++] = {(uint64_t)(addr - base), block, where, (uint16_t)size, (int8_t)arg,
                          (uint8_t)write, (uint16_t)(cur ? cur->linear : 0), (uint16_t)trace_epoch};
}

static void trace_global(int row, int arg, uintptr_t addr, unsigned size, int write) {
  if (!tracing || row < 0) return;
  trace_add(arg, addr, size, write, (uint32_t)row);
}

// An access just outside an array argument (an out-of-bounds index, about to fault in the guard
// pages): traced against the nearest array, its offset below 0 or past the end.
static void trace_outside(int row, uintptr_t addr, unsigned size, int write) {
  if (!tracing || row < 0 || !cur) return;
  const uintptr_t near = (uintptr_t)1 << 16;
  for (int i = 0; i < n_array_args && i < 64; ++i)
    if (addr + near >= array_args[i].lo && addr < array_args[i].hi + near) {
      trace_add(i, addr, size, write, (uint32_t)row);
      return;
    }
}

// A write into shared memory: its offset in the window (static bytes first, then dynamic).
static void trace_shared_at(uint32_t where, const char* c, unsigned size) {
  size_t static_bytes = static_shared_bytes();
  uintptr_t off = in_static(c, size) ? (uintptr_t)(c - __start_cuda_shared)
                                     : (uintptr_t)static_bytes + (uintptr_t)(c - smem_dyn);
  trace_add(-1, off, size, 1, where);
}

// A store to shared memory.
static void trace_shared_write(int row, const char* c, unsigned size) {
  if (!tracing || row < 0 || !cur) return;
  trace_shared_at((uint32_t)row, c, size);
}

static void trace_block_start() { trace_epoch = 0; }

// A __syncthreads every thread of the block reached: copy the block's shared memory.
static void trace_barrier(int line) {
  if (!tracing) return;
  ++trace_epoch;
  size_t static_bytes = static_shared_bytes();
  size_t bytes = static_bytes + (smem_dyn ? smem_dyn_bytes : 0);
  if (trace_cut || snap_used + bytes > SNAP_LIMIT) { trace_cut = 1; return; }
  if (snap_n == snap_cap) {
    size_t ncap = snap_cap ? snap_cap * 2 : 256;
    SnapRec* n = (SnapRec*)realloc(snaps, sizeof(SnapRec) * ncap);
    if (!n) { trace_cut = 1; return; }
    snaps = n;
    snap_cap = ncap;
  }
  if (snap_used + bytes > snap_data_cap) {
    size_t ncap = snap_data_cap ? snap_data_cap : (size_t)1 << 20;
    while (ncap < snap_used + bytes) ncap *= 2;
    char* n = (char*)realloc(snap_data, ncap);
    if (!n) { trace_cut = 1; return; }
    snap_data = n;
    snap_data_cap = ncap;
  }
  if (static_bytes) memcpy(snap_data + snap_used, __start_cuda_shared, static_bytes);
  if (smem_dyn && smem_dyn_bytes) memcpy(snap_data + snap_used + static_bytes, smem_dyn, smem_dyn_bytes);
  uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  snaps[snap_n++] = {(uint64_t)snap_used, (uint64_t)bytes, block, trace_epoch, line, (uint32_t)static_bytes};
  snap_used += bytes;
}

// A copy into shared memory (cp.async, cp.async.bulk) of `size` bytes from src (none: zeros) to dst,
// `dst_size` bytes: the read of src, then the write of dst with the same line, right after it (so
// that a barrier's snapshot names the copy, and the element it came from).
static void trace_copy(const void* src, unsigned size, const char* dst, unsigned dst_size, int line) {
  if (!tracing || !cur) return;
  const uint32_t where = TRACE_LINE | (uint32_t)(line > 0 ? line : 0);
  uintptr_t c = (uintptr_t)src;
  for (int i = 0; size && i < n_array_args && i < 64; ++i)
    if (c >= array_args[i].lo && c + size <= array_args[i].hi) {
      trace_add(i, c, size, 0, where);
      break;
    }
  if (dst && dst_size) trace_shared_at(where, dst, dst_size);
}

// Global bytes a TMA copy (cp.async.bulk.tensor) read through a tensor map: arg -2, `off` the
// address itself (trace.py finds the map, a kernel parameter, whose tensor holds it).
static void trace_tma(uint64_t addr, unsigned size, int line) {
  if (!tracing || !cur || !size) return;
  trace_add(-2, (uintptr_t)addr, size, 0, TRACE_LINE | (uint32_t)(line > 0 ? line : 0));
}

EXPORT void cudaemu_trace_begin() { tracing = 1; trace_n = 0; trace_cut = 0; snap_n = 0; snap_used = 0; }
EXPORT uint64_t cudaemu_trace_snap_count() { return snap_n; }
EXPORT uint64_t cudaemu_trace_snap_bytes() { return snap_used; }
EXPORT uint64_t cudaemu_trace_snap_record_size() { return sizeof(SnapRec); }
EXPORT void cudaemu_trace_snap_take(SnapRec* recs, char* data) {
  memcpy(recs, snaps, sizeof(SnapRec) * snap_n);
  memcpy(data, snap_data, snap_used);
}
EXPORT void cudaemu_trace_end() { tracing = 0; }
EXPORT uint64_t cudaemu_trace_count() { return trace_n; }
EXPORT int cudaemu_trace_cut() { return trace_cut; }
EXPORT uint64_t cudaemu_trace_record_size() { return sizeof(TraceRec); }
// Copies the records into `out` (room for `cap`); returns how many.
EXPORT uint64_t cudaemu_trace_take(TraceRec* out, uint64_t cap) {
  uint64_t n = trace_n < cap ? trace_n : cap;
  memcpy(out, trace_log, sizeof(TraceRec) * n);
  return n;
}
// The address of counters row `r`'s instruction, as an offset in the library (for addr2line).
EXPORT uint64_t cudaemu_trace_row_pc(int r) { return r >= 0 && r < n_rows ? rows[r].pc : 0; }
