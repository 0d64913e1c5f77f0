// Tracing: which elements of each array argument every block reads and writes, for the grader's
// first-divergence report (grader/runtimes/cpu/trace.py). Included after counters.h, whose counting
// build calls trace_global for every load and store of an array argument; the runtime's own copies
// (cp.async) call trace_copy with the student's line. Off unless cudaemu_trace_begin turned it on.

struct TraceRec {
  uint64_t off;      // byte offset in the array
  uint32_t block;    // linear block id (x fastest)
  uint32_t where;    // counters row of the instruction, or TRACE_LINE | source line
  uint16_t size;
  int8_t arg;        // index into array_args
  uint8_t write;
  uint16_t thread;   // linear thread id in the block
  uint16_t pad;
};

static const uint32_t TRACE_LINE = 0x80000000u;
static const size_t TRACE_LIMIT = (size_t)1 << 24;   // records at most (384 MB): beyond, marked cut
// tracing: declared in counters.h
static TraceRec* trace_log;
static size_t trace_n, trace_cap;
static int trace_cut;

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
  trace_log[trace_n++] = {(uint64_t)(addr - array_args[arg].lo), block, where, (uint16_t)size, (int8_t)arg,
                          (uint8_t)write, (uint16_t)(cur ? cur->linear : 0), 0};
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

static void trace_copy(const void* src, unsigned size, int line) {
  if (!tracing || !cur || !size) return;
  uintptr_t c = (uintptr_t)src;
  for (int i = 0; i < n_array_args && i < 64; ++i)
    if (c >= array_args[i].lo && c + size <= array_args[i].hi) {
      trace_add(i, c, size, 0, TRACE_LINE | (uint32_t)(line > 0 ? line : 0));
      return;
    }
}

EXPORT void cudaemu_trace_begin() { tracing = 1; trace_n = 0; trace_cut = 0; }
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
