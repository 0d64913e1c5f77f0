// Counters: what a GPU would move, counted from the kernel's own loads and stores.
//
// Included once, at the end of emu_runtime.cpp (it uses the runtime's fibers, shared-memory window
// and array arguments). A kernel library built for counting is compiled with the host compiler's
// ThreadSanitizer instrumentation (-fsanitize=thread) but linked without its runtime: every load
// and store of the kernel then calls one of the __tsan_* functions below, with its address and
// size, and __builtin_return_address gives the instruction. Nothing of ThreadSanitizer's own
// machinery runs.
//
// Each access to a launch's array argument (global memory) or to shared memory is logged with
// its thread, instruction and how many times that thread had executed that instruction before
// (its occurrence). At the end of each block the log is sorted so that the accesses of the 32
// lanes of a warp to one instruction, occurrence k, form one group: a warp-wide request, as the
// hardware issues it. Per instruction we then count
//   global: bytes read and written, requests, 32-byte sectors touched (coalescing);
//   shared: requests, and wavefronts: a request's lanes are served in phases (32 lanes for 4-byte
//           accesses, 16 for 8-byte, 8 for 16-byte), and a phase takes as many wavefronts as the
//           most distinct 4-byte words that fall in one of the 32 banks (an n-way bank conflict);
//   lanes: how many lanes took part, against the warp's lanes (fewer: a divergent branch).
// Per array argument: bytes read and written. Per launch: blocks, and barriers (__syncthreads
// calls of thread 0).
//
// The same log finds data races exactly (cudaemu_counters_race): two threads of a block touching
// one address, at least one writing, with no __syncthreads between them (their barrier epochs are
// equal), whatever order the emulator ran them in. Atomics are not logged, so they never race.
//
// The runtime's own accesses on a thread's behalf join the log for the race finder only (not the
// counts): a cp.async's write of its destination, at its issue and again when a wait of the
// issuing thread completes it, and the 16-byte row each lane of an ldmatrix hands in, read by that
// lane. Their instruction is a "site" (race_site_pc): the PTX's file:line and the return addresses
// above it, which Python turns into the student's lines (cudaemu_counters_site). The bytes ldmatrix
// moves while it computes, on one lane's behalf, are counted but never raced.

struct CountedAccess {
  uint64_t key;     // (warp, instruction index, occurrence, lane), sortable
  uintptr_t addr;
  uint32_t epoch;   // the thread's __syncthreads count when it made the access
  uint16_t size;
  uint8_t write;
  int8_t arg;       // index into array_args, or -1 for shared memory
  uint8_t flags;    // COUNTED: in the counts; RACED: seen by the race finder
};
enum { COUNTED = 1, RACED = 2 };

struct CounterRow {   // one instruction (cudaemu_counters_rows), read by cpu/counters.py
  uint64_t pc;        // offset in the kernel library (for addr2line)
  uint64_t g_read, g_write, g_requests, g_sectors;
  uint64_t s_requests, s_wavefronts, s_ideal;
  uint64_t lanes, groups, partial_groups, warp_lanes;
  uint64_t g_unique;  // distinct bytes per request, summed (lanes reading the same bytes count once)
};

static int counting;
static bool counters_active() { return counting != 0; }
static int tracing;    // trace.h
static void trace_global(int row, int arg, uintptr_t addr, unsigned size, int write);
static void trace_outside(int row, uintptr_t addr, unsigned size, int write);
static void trace_shared_write(int row, const char* c, unsigned size);
static CountedAccess* acc_log;
static size_t acc_n, acc_cap;
static int acc_overflow;
static const size_t ACC_LIMIT = (size_t)1 << 27;   // 4 GB of log at most: beyond, the block is cut short

static CounterRow* rows;
static uintptr_t* row_pc;      // the instruction's address, index = row
static int n_rows, cap_rows;
static int* pc_slots;          // open addressing: pc -> row + 1
static int cap_slots;

static uint32_t* occ_table;    // (thread, row) -> executions so far, this block
static int occ_threads;
static uint32_t* thread_epoch; // __syncthreads calls per thread, this block
static size_t* thread_last;    // the thread's latest entry in acc_log, this block

static uint64_t arg_read[64], arg_write[64];
static uint64_t c_blocks, c_barriers;

struct RaceRecord { uintptr_t addr; uint64_t pc_a, pc_b; int32_t thread_a, thread_b, write_a, write_b, arg; };
static RaceRecord race;
static int race_found;
static int collective_depth;   // > 0 inside a warp collective's own copying (ldmatrix): not raced

// A runtime access's place: file:line of its PTX and the return addresses above it.
struct RaceSite { const char* file; int line; int kind; uint64_t frames[8]; };
static RaceSite* race_sites;
static int n_race_sites, cap_race_sites;
static const uintptr_t SITE_TAG = (uintptr_t)0x0F00000000000000ull;   // not an address: no library's

static int row_of(uintptr_t pc) {
  if (n_rows * 2 >= cap_slots) {
    int ncap = cap_slots ? cap_slots * 2 : 1024;
    int* s = (int*)calloc((size_t)ncap, sizeof(int));
    if (!s) return -1;
    for (int r = 0; r < n_rows; ++r) {
      size_t h = (row_pc[r] * 0x9E3779B97F4A7C15ull) >> 40;
      while (s[h % ncap]) ++h;
      s[h % ncap] = r + 1;
    }
    free(pc_slots);
    pc_slots = s;
    cap_slots = ncap;
  }
  size_t h = (pc * 0x9E3779B97F4A7C15ull) >> 40;
  for (;; ++h) {
    int r = pc_slots[h % cap_slots];
    if (!r) break;
    if (row_pc[r - 1] == pc) return r - 1;
  }
  if (n_rows == cap_rows) {
    int ncap = cap_rows ? cap_rows * 2 : 256;
    CounterRow* nr = (CounterRow*)realloc(rows, sizeof(CounterRow) * (size_t)ncap);
    uintptr_t* np = (uintptr_t*)realloc(row_pc, sizeof(uintptr_t) * (size_t)ncap);
    if (!nr || !np) return -1;
    rows = nr;
    row_pc = np;
    cap_rows = ncap;
  }
  memset(&rows[n_rows], 0, sizeof(CounterRow));
  row_pc[n_rows] = pc;
  Dl_info info;
  rows[n_rows].pc = dladdr((void*)pc, &info) && info.dli_fbase ? pc - (uintptr_t)info.dli_fbase : pc;
  pc_slots[h % cap_slots] = n_rows + 1;
  return n_rows++;
}

static const int MAX_ROWS = 1 << 13;   // instructions that access memory, per kernel library

static void log_access(int t, uintptr_t pc, const void* p, unsigned size, int write, uint8_t flags);

static void count_access(uintptr_t pc, const void* p, unsigned size, int write) {
  if (!counting || !cur || acc_overflow) return;
  log_access(cur->linear, pc, p, size, write, collective_depth ? COUNTED : COUNTED | RACED);
}

static void log_access(int t, uintptr_t pc, const void* p, unsigned size, int write, uint8_t flags) {
  const char* c = (const char*)p;
  int arg;
  if (in_static(c, size) || in_dynamic(c, size)) {
    arg = -1;
    if (tracing && write && (flags & COUNTED)) trace_shared_write(row_of(pc), c, size);
  } else {
    arg = -2;
    for (int i = 0; i < n_array_args && i < 64; ++i)
      if ((uintptr_t)c >= array_args[i].lo && (uintptr_t)c + size <= array_args[i].hi) { arg = i; break; }
    if (arg == -2) {         // a local variable, the emulator's own memory, or just outside an array
      if (tracing && (flags & COUNTED)) trace_outside(row_of(pc), (uintptr_t)c, size, write);
      return;
    }
    if (tracing && (flags & COUNTED)) trace_global(row_of(pc), arg, (uintptr_t)c, size, write);
  }
  if (t >= occ_threads) return;
  // The host compiler may split one vector access (a float4) into scalar ones where a GPU compiler
  // issues one 16-byte instruction: an access that continues this thread's previous one (the next
  // bytes, in the same aligned 16, from an instruction a few bytes on) is counted as part of it.
  size_t last = thread_last[t];
  if (last < acc_n && (flags & COUNTED) && acc_log[last].flags == flags) {
    CountedAccess* prev = &acc_log[last];
    unsigned merged = prev->size + size;
    if (prev->write == write && prev->arg == arg && prev->epoch == thread_epoch[t] &&
        prev->addr + prev->size == (uintptr_t)c && prev->addr % 16 + merged <= 16 &&
        pc - row_pc[(prev->key >> 45) & 0x1FFF] + 64 < 192) {
      prev->size = (uint16_t)merged;
      return;
    }
  }
  int r = row_of(pc);
  if (r < 0 || r >= MAX_ROWS) { acc_overflow = 1; return; }
  uint32_t occ = occ_table[(size_t)t * MAX_ROWS + r]++;
  if (acc_n == acc_cap) {
    size_t ncap = acc_cap ? acc_cap * 2 : 1 << 16;
    if (ncap > ACC_LIMIT) { acc_overflow = 1; return; }
    CountedAccess* n = (CountedAccess*)realloc(acc_log, sizeof(CountedAccess) * ncap);
    if (!n) { acc_overflow = 1; return; }
    acc_log = n;
    acc_cap = ncap;
  }
  uint64_t warp = (uint64_t)(t >> 5), lane = (uint64_t)(t & 31);
  if (flags & COUNTED) thread_last[t] = acc_n;
  acc_log[acc_n++] = {(warp << 58) | ((uint64_t)r << 45) | ((uint64_t)(occ & 0xFFFFFFFFFull) << 5) | lane,
                      (uintptr_t)c, thread_epoch[t], (uint16_t)size, (uint8_t)write, (int8_t)arg, flags};
}

// The site of a runtime access made now by the running thread (kind: 'c' cp.async, 'l' ldmatrix):
// a pseudo instruction address, SITE_TAG + index; 0 when not counting.
static uintptr_t race_site_pc(const char* file, int line, int kind) {
  if (!counting || !cur) return 0;
  RaceSite s;
  s.file = file;
  s.line = line;
  s.kind = kind;
  capture_frames(s.frames);
  for (int i = n_race_sites - 1; i >= 0 && i >= n_race_sites - 64; --i) {
    const RaceSite* o = &race_sites[i];
    if (o->line == line && o->file == file && o->kind == kind && !memcmp(o->frames, s.frames, sizeof s.frames))
      return SITE_TAG + (uintptr_t)i;
  }
  if (n_race_sites == cap_race_sites) {
    int ncap = cap_race_sites ? cap_race_sites * 2 : 64;
    RaceSite* n = (RaceSite*)realloc(race_sites, sizeof(RaceSite) * (size_t)ncap);
    if (!n) return 0;
    race_sites = n;
    cap_race_sites = ncap;
  }
  race_sites[n_race_sites] = s;
  return SITE_TAG + (uintptr_t)n_race_sites++;
}

// A runtime access on thread t's behalf, for the race finder only (shared memory alone).
static void race_log(int t, uintptr_t site, const void* p, unsigned size, int write) {
  if (!counting || !site || acc_overflow) return;
  if (!in_static((const char*)p, size) && !in_dynamic((const char*)p, size)) return;
  log_access(t, site, p, size, write, RACED);
}

static void counters_barrier() {
  if (!counting || !cur) return;
  if (cur->linear < occ_threads) ++thread_epoch[cur->linear];
  if (cur->linear == 0) ++c_barriers;
}

static int cmp_key(const void* a, const void* b) {
  uint64_t x = ((const CountedAccess*)a)->key, y = ((const CountedAccess*)b)->key;
  return x < y ? -1 : x > y;
}

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

// Shared memory: wavefronts for the lanes [i, j) of one request.
static uint64_t wavefronts(const CountedAccess* g, int n) {
  int size = g[0].size < 4 ? 4 : g[0].size;
  int per_phase = 32 / (size / 4 < 1 ? 1 : (size / 4 > 4 ? 4 : size / 4));
  uint64_t total = 0;
  for (int p0 = 0; p0 < 32; p0 += per_phase) {
    uint64_t words[32 * 4];
    int nw = 0;
    for (int k = 0; k < n; ++k) {
      int lane = (int)(g[k].key & 31);
      if (lane < p0 || lane >= p0 + per_phase) continue;
      for (uintptr_t w = g[k].addr >> 2; w <= (g[k].addr + g[k].size - 1) >> 2 && nw < 128; ++w) words[nw++] = w;
    }
    if (!nw) continue;
    qsort(words, (size_t)nw, sizeof words[0], cmp_u64);
    int count[32] = {0}, worst = 0;
    for (int k = 0; k < nw; ++k) {
      if (k && words[k] == words[k - 1]) continue;   // one word, read by many lanes: a broadcast
      int bank = (int)(words[k] & 31);
      if (++count[bank] > worst) worst = count[bank];
    }
    total += (uint64_t)worst;
  }
  return total;
}

static uint64_t phases(const CountedAccess* g, int n) {
  int size = g[0].size < 4 ? 4 : g[0].size;
  int per_phase = 32 / (size / 4 < 1 ? 1 : (size / 4 > 4 ? 4 : size / 4));
  uint32_t seen = 0;
  for (int k = 0; k < n; ++k) seen |= 1u << ((g[k].key & 31) / per_phase);
  return (uint64_t)__builtin_popcount(seen);
}

// Distinct bytes of one request: lanes that read the same bytes (a broadcast) count once.
static uint64_t unique_bytes(const CountedAccess* g, int n) {
  uint64_t b[32 * 2];
  int nb = 0;
  for (int k = 0; k < n && nb < 64; ++k) { b[nb++] = ((uint64_t)g[k].addr << 6) | g[k].size; }
  qsort(b, (size_t)nb, sizeof b[0], cmp_u64);
  uint64_t total = 0, end = 0;
  for (int k = 0; k < nb; ++k) {
    uint64_t lo = b[k] >> 6, hi = lo + (b[k] & 63);
    if (hi <= end) continue;
    total += hi - (lo > end ? lo : end);
    end = hi;
  }
  return total;
}

static uint64_t sectors(const CountedAccess* g, int n) {
  uint64_t s[64];
  int ns = 0;
  for (int k = 0; k < n; ++k)
    for (uintptr_t x = g[k].addr >> 5; x <= (g[k].addr + g[k].size - 1) >> 5 && ns < 64; ++x) s[ns++] = x;
  qsort(s, (size_t)ns, sizeof s[0], cmp_u64);
  uint64_t distinct = 0;
  for (int k = 0; k < ns; ++k) distinct += !k || s[k] != s[k - 1];
  return distinct;
}

struct WordAccess { uintptr_t word; uint32_t epoch; uint16_t thread, row; uint8_t write; int8_t arg; };
static WordAccess* words_buf;
static size_t words_cap;

static int cmp_word(const void* a, const void* b) {
  const WordAccess *x = (const WordAccess*)a, *y = (const WordAccess*)b;
  if (x->word != y->word) return x->word < y->word ? -1 : 1;
  if (x->epoch != y->epoch) return x->epoch < y->epoch ? -1 : 1;
  return x->thread < y->thread ? -1 : x->thread > y->thread;
}

// Every access split into its 4-byte words, sorted by (word, epoch): two threads on one word in one
// barrier interval, one of them writing, is a race whatever order the threads ran in.
static void find_race() {
  size_t n = 0;
  for (size_t i = 0; i < acc_n; ++i)   // the 4-byte words each access spans (unaligned ones: one more)
    if (acc_log[i].flags & RACED) n += ((acc_log[i].addr + acc_log[i].size - 1) >> 2) - (acc_log[i].addr >> 2) + 1;
  if (n > words_cap) {
    WordAccess* w = (WordAccess*)realloc(words_buf, sizeof(WordAccess) * n);
    if (!w) return;
    words_buf = w;
    words_cap = n;
  }
  size_t k = 0;
  for (size_t i = 0; i < acc_n; ++i) {
    const CountedAccess* a = &acc_log[i];
    if (!(a->flags & RACED)) continue;
    uint16_t thread = (uint16_t)(((a->key >> 58) << 5) | (a->key & 31));
    uint16_t row = (uint16_t)((a->key >> 45) & 0x1FFF);
    for (uintptr_t w = a->addr >> 2; w <= (a->addr + a->size - 1) >> 2; ++w)
      words_buf[k++] = {w, a->epoch, thread, row, a->write, a->arg};
  }
  qsort(words_buf, k, sizeof *words_buf, cmp_word);
  // Two threads of different warps first: no warp-level barrier (__syncwarp) can order them, so the
  // grader can name such a pair in a kernel that uses one. Then any two threads.
  for (int cross = 1; cross >= 0 && !race_found; --cross)
    for (size_t i = 0; i < k && !race_found;) {
      size_t j = i;
      while (j < k && words_buf[j].word == words_buf[i].word && words_buf[j].epoch == words_buf[i].epoch) ++j;
      for (size_t a = i; a < j && !race_found; ++a) {
        if (!words_buf[a].write) continue;
        for (size_t b = i; b < j; ++b) {
          if (words_buf[b].thread == words_buf[a].thread) continue;
          if (cross && words_buf[b].thread / 32 == words_buf[a].thread / 32) continue;
          race = {words_buf[a].word << 2, rows[words_buf[a].row].pc, rows[words_buf[b].row].pc,
                  words_buf[a].thread, words_buf[b].thread, 1, words_buf[b].write, words_buf[a].arg};
          race_found = 1;
          break;
        }
      }
      i = j;
    }
}

static void counters_block_start(int nthreads) {
  if (!counting) return;
  if (nthreads > occ_threads) {
    free(occ_table);
    free(thread_epoch);
    free(thread_last);
    occ_table = (uint32_t*)calloc((size_t)nthreads * MAX_ROWS, sizeof(uint32_t));
    thread_epoch = (uint32_t*)calloc((size_t)nthreads, sizeof(uint32_t));
    thread_last = (size_t*)malloc(sizeof(size_t) * (size_t)nthreads);
    occ_threads = occ_table && thread_epoch && thread_last ? nthreads : 0;
  } else {
    memset(occ_table, 0, sizeof(uint32_t) * (size_t)occ_threads * MAX_ROWS);
    memset(thread_epoch, 0, sizeof(uint32_t) * (size_t)occ_threads);
  }
  for (int i = 0; i < occ_threads; ++i) thread_last[i] = (size_t)-1;
  acc_n = 0;
}

static void counters_block_end(int nthreads) {
  if (!counting) return;
  ++c_blocks;
  qsort(acc_log, acc_n, sizeof *acc_log, cmp_key);
  for (size_t i = 0; i < acc_n;) {
    size_t j = i;
    while (j < acc_n && (acc_log[j].key >> 5) == (acc_log[i].key >> 5)) ++j;
    const CountedAccess* g = &acc_log[i];
    int n = (int)(j - i);
    if (!(g[0].flags & COUNTED)) { i = j; continue; }      // a runtime access, for the race finder only
    CounterRow* row = &rows[(acc_log[i].key >> 45) & 0x1FFF];
    int warp = (int)(acc_log[i].key >> 58);
    int lanes = nthreads - warp * 32 < 32 ? nthreads - warp * 32 : 32;
    row->groups += 1;
    row->lanes += (uint64_t)n;
    row->warp_lanes += (uint64_t)lanes;
    row->partial_groups += n < lanes;
    for (int k = 0; k < n; ++k) {
      if (g[k].arg < 0) continue;
      (g[k].write ? arg_write : arg_read)[g[k].arg] += g[k].size;
      (g[k].write ? row->g_write : row->g_read) += g[k].size;
    }
    if (g[0].arg >= 0) {
      row->g_requests += 1;
      row->g_sectors += sectors(g, n);
      row->g_unique += unique_bytes(g, n);
    } else {
      row->s_requests += 1;
      row->s_wavefronts += wavefronts(g, n);
      row->s_ideal += phases(g, n);
    }
    i = j;
  }
  if (!race_found) find_race();
  acc_n = 0;
}

EXPORT void cudaemu_counters_begin() {
  counting = 1;
  acc_overflow = 0;
  race_found = 0;
  memset(arg_read, 0, sizeof arg_read);
  memset(arg_write, 0, sizeof arg_write);
  c_blocks = c_barriers = 0;
  for (int r = 0; r < n_rows; ++r) {
    uint64_t pc = rows[r].pc;
    memset(&rows[r], 0, sizeof(CounterRow));
    rows[r].pc = pc;
  }
}

EXPORT void cudaemu_counters_end() { counting = 0; }

// The instructions' rows (those with accesses in this launch), how many there are.
EXPORT int cudaemu_counters_rows(CounterRow* out, int cap) {
  int k = 0;
  for (int r = 0; r < n_rows; ++r)
    if (rows[r].groups && k < cap) out[k++] = rows[r];
  return k;
}

// Per array argument: bytes read, bytes written (argument positions as in cudaemu_set_arrays).
EXPORT int cudaemu_counters_args(uint64_t* read, uint64_t* write, int32_t* arg, int cap) {
  int n = n_array_args < cap ? n_array_args : cap;
  for (int i = 0; i < n && i < 64; ++i) {
    read[i] = arg_read[i];
    write[i] = arg_write[i];
    arg[i] = array_args[i].arg;
  }
  return n;
}

// blocks, barriers (of thread 0), whether the log overflowed, whether a race was found.
EXPORT void cudaemu_counters_misc(uint64_t* out) {
  out[0] = c_blocks;
  out[1] = c_barriers;
  out[2] = (uint64_t)acc_overflow;
  out[3] = (uint64_t)race_found;
}

EXPORT int cudaemu_counters_race(uint64_t* pcs, int32_t* who, uint64_t* addr) {
  if (!race_found) return 0;
  pcs[0] = race.pc_a;
  pcs[1] = race.pc_b;
  who[0] = race.thread_a;
  who[1] = race.thread_b;
  who[2] = race.write_a;
  who[3] = race.write_b;
  who[4] = race.arg;
  *addr = race.addr;
  return 1;
}

// A race's instruction that is a runtime site (race_site_pc): its file, line, kind and return
// addresses; 0 for an instruction of the library (addr2line names those).
EXPORT int cudaemu_counters_site(uint64_t pc, const char** file, int32_t* line_kind, uint64_t* frames) {
  if (pc < SITE_TAG || pc >= SITE_TAG + (uint64_t)n_race_sites) return 0;
  const RaceSite* s = &race_sites[pc - SITE_TAG];
  *file = s->file;
  line_kind[0] = s->line;
  line_kind[1] = s->kind;
  memcpy(frames, s->frames, sizeof s->frames);
  return 1;
}

// Warp collectives that copy on their lanes' behalf (ldmatrix) bracket that copying with these, so
// that one lane's reads of every lane's rows are counted but not raced.
extern "C" HIDDEN void __cudaemu_collective_copy(int on) { collective_depth += on ? 1 : -1; }

// The row lane `lane` of the running warp hands to ldmatrix: read by that lane, for the race finder.
extern "C" HIDDEN void __cudaemu_race_read(int lane, const void* p, unsigned n, const char* file, int line) {
  if (!counting || !cur) return;
  race_log((cur->linear & ~31) + lane, race_site_pc(file, line, 'l'), p, n, 0);
}

// ---- the ThreadSanitizer entry points a counting build calls ----------------------------------

#define RET_PC ((uintptr_t)__builtin_return_address(0))
#define TSAN_RW(n)                                                                           \
  EXPORT void __tsan_read##n(void* p) { count_access(RET_PC, p, n, 0); }                   \
  EXPORT void __tsan_write##n(void* p) { count_access(RET_PC, p, n, 1); }                  \
  EXPORT void __tsan_unaligned_read##n(void* p) { count_access(RET_PC, p, n, 0); }         \
  EXPORT void __tsan_unaligned_write##n(void* p) { count_access(RET_PC, p, n, 1); }        \
  EXPORT void __tsan_volatile_read##n(void* p) { count_access(RET_PC, p, n, 0); }          \
  EXPORT void __tsan_volatile_write##n(void* p) { count_access(RET_PC, p, n, 1); }
TSAN_RW(1)
TSAN_RW(2)
TSAN_RW(4)
TSAN_RW(8)
TSAN_RW(16)
#undef TSAN_RW
EXPORT void __tsan_read_range(void* p, unsigned long n) { count_access(RET_PC, p, (unsigned)n, 0); }
EXPORT void __tsan_write_range(void* p, unsigned long n) { count_access(RET_PC, p, (unsigned)n, 1); }
EXPORT void __tsan_init() {}
EXPORT void __tsan_func_entry(void*) {}
EXPORT void __tsan_func_exit() {}
EXPORT void __tsan_vptr_update(void**, void*) {}
EXPORT void __tsan_vptr_read(void**) {}
EXPORT void __tsan_atomic_thread_fence(int) {}
EXPORT void __tsan_atomic_signal_fence(int) {}

// Atomics run as they would without instrumentation (fibers never run at the same time), and are
// not logged: an atomic is never a race, and its traffic is the hardware's L2 business.
#define TSAN_ATOMIC(bits, T)                                                                           \
  EXPORT T __tsan_atomic##bits##_load(const volatile T* a, int) { return *a; }                       \
  EXPORT void __tsan_atomic##bits##_store(volatile T* a, T v, int) { *a = v; }                       \
  EXPORT T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) { T o = *a; *a = v; return o; }   \
  EXPORT T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int) { T o = *a; *a = o + v; return o; } \
  EXPORT T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int) { T o = *a; *a = o - v; return o; } \
  EXPORT T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int) { T o = *a; *a = o & v; return o; } \
  EXPORT T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int) { T o = *a; *a = o | v; return o; }  \
  EXPORT T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int) { T o = *a; *a = o ^ v; return o; } \
  EXPORT T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, int) { T o = *a; *a = ~(o & v); return o; } \
  EXPORT int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {     \
    if (*a == *c) { *a = v; return 1; } *c = *a; return 0; }                                         \
  EXPORT int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {       \
    if (*a == *c) { *a = v; return 1; } *c = *a; return 0; }                                         \
  EXPORT T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, int, int) {           \
    T o = *a; if (o == c) *a = v; return o; }
TSAN_ATOMIC(8, uint8_t)
TSAN_ATOMIC(16, uint16_t)
TSAN_ATOMIC(32, uint32_t)
TSAN_ATOMIC(64, uint64_t)
#undef TSAN_ATOMIC
#undef RET_PC
