// The CPU emulator's runtime: runs one CUDA launch, block after block, each CUDA thread a fiber.
//
// Linked into every kernel library (it is compiled once and cached as an object file). It knows
// nothing of Python; cpu/runtime.py drives it through cudaemu_launch() and reads back a fault
// record when something goes wrong.
//
// Scheduling: the threads of a block are fibers that run one at a time, each until it reaches
// __syncthreads(), a warp collective (shuffle, ballot, __syncwarp ...) or its end. The scheduler
// then picks the next fiber in the launch's order (forward, reverse or a seeded shuffle). When
// nothing can run, either every live thread waits at the same barrier (release them all) or the
// block is stuck, and we say why, naming the source lines. Because fibers never run at the same
// time, atomics are plain read-modify-writes.
//
// Faults: SIGSEGV/SIGBUS/SIGFPE raised by a fiber are caught on an alternate signal stack; the
// handler records the address and program counter, then makes the fiber resume in fault_exit()
// on a fresh stack, which hands control back to the scheduler. No longjmp is involved, so
// _FORTIFY_SOURCE's longjmp checks cannot trip.

#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>  // for the signal handler's mcontext
#include <unistd.h>

#include "cudaemu_abi.h"

// Fiber context switching, one file per platform (each says what it must provide).
#if defined(__x86_64__) && !defined(CUDAEMU_UCONTEXT)
#include "platform/x86_64.h"
#else
#include "platform/ucontext.h"
#endif

#define HIDDEN __attribute__((visibility("hidden")))
#define EXPORT extern "C" __attribute__((visibility("default")))

struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };

extern "C" {
HIDDEN uint3 threadIdx;
HIDDEN uint3 blockIdx;
HIDDEN dim3 blockDim;
HIDDEN dim3 gridDim;
HIDDEN void* __cudaemu_dynamic_smem;
HIDDEN unsigned long long __cudaemu_float_atomics;
HIDDEN unsigned long long __cudaemu_clock;
// Static __shared__ variables live in this section (see cuda_emu.h); the linker names its ends.
extern char __start_cuda_shared[] __attribute__((weak, visibility("hidden")));
extern char __stop_cuda_shared[] __attribute__((weak, visibility("hidden")));
}

// Shared memory starts every block filled with this signalling NaN (see cudaemu_abi.h).
static const uint32_t POISON32 = CUDAEMU_POISON32;
static const uint64_t POISON64 = CUDAEMU_POISON64;

// ---------------------------------------------------------------------------------------------
// What went wrong, for Python. Kept plain (no pointers into freed memory) so ctypes can read it;
// the kinds and the fields are listed in cudaemu_abi.h, which Python reads too.

#define X(name, value) F_##name = value,
enum FaultKind { F_NONE = 0, CUDAEMU_FAULT_KINDS(X) };
#undef X

#define ONE(type, name) type name;
#define MANY(type, name, count) type name[count];
struct FaultRecord { CUDAEMU_FAULT_RECORD(ONE, MANY) };
#undef ONE
#undef MANY

// ---------------------------------------------------------------------------------------------
// Fibers, warps and the scheduler's state.

enum FiberState { RUNNABLE = 0, AT_BARRIER = 1, AT_WARP = 2, EXITED = 3, FAULTED = 4 };

struct Fiber {
  FiberContext ctx;
  int state;
  int linear;           // threadIdx flattened, x fastest
  int spun;             // yielded from a spin (failed atomicCAS, __nanosleep)
  uint3 tid;
  const char* wait_file;
  int wait_line;
  int wait_op;          // which barrier or collective it waits in
  int pred;             // __syncthreads_count/and/or predicate
  char* stack_lo;       // lowest usable byte (a guard page lies below)
  char* stack_hi;       // one past the highest byte
};

// The codes the device headers pass in (cudaemu_abi.h), and the names messages use.
#define X(name, cuda_name) W_##name,
enum WarpOp { CUDAEMU_WARP_OPS(X) W_NOPS };
#undef X
#define X(name, cuda_name) cuda_name,
static const char* const WARP_OP_NAMES[W_NOPS] = {CUDAEMU_WARP_OPS(X)};
#undef X

struct Warp {
  uint32_t exists;      // lanes that are threads of this block
  uint32_t arrived;     // lanes waiting in a collective
  uint32_t mask[32];
  int op[32];
  int param[32];
  int width[32];
  uint64_t in[32];
  uint64_t out[32];
};

#define X(name, cuda_name) B_##name,
enum BarrierOp { CUDAEMU_BARRIER_OPS(X) B_NOPS };
#undef X
#define X(name, cuda_name) cuda_name,
static const char* const BARRIER_NAMES[B_NOPS] = {CUDAEMU_BARRIER_OPS(X)};
#undef X

// One launch at a time per process: the Python side holds a lock around cudaemu_launch.
static Fiber* fibers;
static int nfibers_alloc;
static char* stack_region;
static size_t stack_region_size;
static size_t stack_size = 128 * 1024;
static Warp* warps;
static int nwarps_alloc;
static Fiber* cur;
static FiberContext sched_ctx;
static volatile sig_atomic_t in_fiber;
static volatile sig_atomic_t interrupted;
// Diagnosis of reads of unwritten shared memory: fibers run with the "invalid operation"
// floating-point exception unmasked, so the first arithmetic on the signalling-NaN poison traps.
static int trap_invalid;
static void (*cur_entry)(void**);
static void** cur_args;
static int barrier_result;
static FaultRecord* fault;
static char* altstack;
static const size_t ALTSTACK_SIZE = 64 * 1024;

static const size_t PAGE = 4096;

static void set_text(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_text(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fault->text, sizeof fault->text, fmt, ap);
  va_end(ap);
}

static void append_text(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void append_text(const char* fmt, ...) {
  size_t n = strlen(fault->text);
  if (n + 1 >= sizeof fault->text) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fault->text + n, sizeof fault->text - n, fmt, ap);
  va_end(ap);
}

static void note_thread(const Fiber* f) {
  fault->thread[0] = f->tid.x; fault->thread[1] = f->tid.y; fault->thread[2] = f->tid.z;
  fault->block[0] = blockIdx.x; fault->block[1] = blockIdx.y; fault->block[2] = blockIdx.z;
}

static void note_where(const char* file, int line) {
  fault->line = line;
  snprintf(fault->file, sizeof fault->file, "%s", file ? file : "?");
}

// ---------------------------------------------------------------------------------------------
// Fiber plumbing.

static void yield_to_scheduler() {
  context_switch(&cur->ctx, &sched_ctx);
}

static void fiber_main() {
  cur_entry(cur_args);
  cur->state = EXITED;
  yield_to_scheduler();
  abort();  // an exited fiber is never resumed
}

// Where a faulting fiber continues (on a fresh stack) after the signal handler returns.
static void fault_exit() {
  cur->state = FAULTED;
  yield_to_scheduler();
  abort();
}

static void resume(Fiber* f) {
  cur = f;
  threadIdx = f->tid;
  in_fiber = 1;
  context_switch(&sched_ctx, &f->ctx);
  in_fiber = 0;
}

static void start_fiber(Fiber* f) {
  f->state = RUNNABLE;
  f->spun = 0;
  f->wait_file = nullptr;
  f->wait_line = 0;
  context_start(&f->ctx, f->stack_lo, f->stack_hi, fiber_main, trap_invalid);
}

static int ensure_fibers(int n) {
  if (n <= nfibers_alloc) return 0;
  if (stack_region) munmap(stack_region, stack_region_size);
  free(fibers);
  free(warps);
  const char* env = getenv("GRADER_CPU_STACK_KB");
  if (env && atoi(env) >= 16) stack_size = (size_t)atoi(env) * 1024;
  size_t per = stack_size + PAGE;  // a guard page below each stack catches an overflow
  stack_region_size = per * (size_t)n;
  void* p = mmap(nullptr, stack_region_size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) { stack_region = nullptr; nfibers_alloc = 0; return -1; }
  stack_region = (char*)p;
  fibers = (Fiber*)calloc((size_t)n, sizeof(Fiber));
  int nw = (n + 31) / 32;
  warps = (Warp*)calloc((size_t)nw, sizeof(Warp));
  for (int i = 0; i < n; ++i) {
    char* base = stack_region + per * (size_t)i;
    mprotect(base, PAGE, PROT_NONE);
    fibers[i].stack_lo = base + PAGE;
    fibers[i].stack_hi = base + per;
  }
  nfibers_alloc = n;
  nwarps_alloc = nw;
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Signals.

static struct sigaction old_segv, old_bus, old_fpe, old_ill, old_int, old_trap;
static stack_t old_altstack;

static bool addr_in_stack_guard(uintptr_t a, const Fiber** who) {
  for (int i = 0; i < nfibers_alloc; ++i) {
    uintptr_t lo = (uintptr_t)fibers[i].stack_lo;
    if (a >= lo - PAGE && a < lo) { *who = &fibers[i]; return true; }
  }
  // Just below the running fiber's stack (a frame larger than the guard): an overflow too.
  uintptr_t lo = (uintptr_t)cur->stack_lo;
  if (a < lo && a + (64u << 20) >= lo) { *who = cur; return true; }
  return false;
}

static void restore_handler(int sig) {
  struct sigaction* old = sig == SIGSEGV ? &old_segv : sig == SIGBUS ? &old_bus
                        : sig == SIGFPE ? &old_fpe : sig == SIGILL ? &old_ill
                        : sig == SIGTRAP ? &old_trap : &old_int;
  sigaction(sig, old, nullptr);
}

static void on_signal(int sig, siginfo_t* si, void* ucv) {
  ucontext_t* uc = (ucontext_t*)ucv;
  if (sig == SIGINT) {
    interrupted = 1;
    if (!in_fiber) return;  // the scheduler checks the flag between fibers
  } else if (!in_fiber || cur == nullptr || fault == nullptr) {
    // Not the kernel's fault: let whoever handled it before us (Python's faulthandler) see it.
    restore_handler(sig);
    return;
  }
#if defined(__x86_64__)
  uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
  uintptr_t fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];
  uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
  fault->is_write = sig == SIGSEGV ? (int)((uc->uc_mcontext.gregs[REG_ERR] >> 1) & 1) : -1;
#elif defined(__aarch64__)
  uintptr_t pc = (uintptr_t)uc->uc_mcontext.pc;
  uintptr_t fp = (uintptr_t)uc->uc_mcontext.regs[29];
  uintptr_t sp = 0;
  fault->is_write = -1;
#else
  uintptr_t pc = 0, fp = 0, sp = 0;
  fault->is_write = -1;
#endif
  fault->kind = sig == SIGSEGV ? F_SEGV : sig == SIGBUS ? F_BUS : sig == SIGFPE ? F_FPE
              : sig == SIGINT ? F_INTERRUPT : F_ILL;
  fault->si_code = si->si_code;
  fault->addr = (uint64_t)(uintptr_t)si->si_addr;
  fault->pc = pc;
  const Fiber* who = nullptr;
  if ((sig == SIGSEGV || sig == SIGBUS) && addr_in_stack_guard((uintptr_t)si->si_addr, &who))
    fault->kind = F_STACK;
  // Walk saved frame pointers, staying inside this fiber's stack, so a fault inside a library
  // function (expf, memcpy) can still be traced to the kernel line that called it.
  uintptr_t lo = (uintptr_t)cur->stack_lo, hi = (uintptr_t)cur->stack_hi;
  if (sp >= lo && sp + 8 <= hi && !(sp & 7)) fault->sp_word = *(uint64_t*)sp;
  for (int i = 0; i < 8; ++i) {
    if (fp < lo || fp + 16 > hi || (fp & 7)) break;
    fault->frames[i] = ((uint64_t*)fp)[1];
    uintptr_t next = (uintptr_t)((uint64_t*)fp)[0];
    if (next <= fp) break;
    fp = next;
  }
  note_thread(cur);
  // Resume the fiber in fault_exit on the top of its own stack: it never runs its kernel again.
  uintptr_t top = (uintptr_t)cur->stack_hi - 64;
#if defined(__x86_64__)
  uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)fault_exit;
  uc->uc_mcontext.gregs[REG_RSP] = (greg_t)(top - 8);  // as right after a call
#elif defined(__aarch64__)
  uc->uc_mcontext.pc = (uintptr_t)fault_exit;
  uc->uc_mcontext.sp = top;
#else
  restore_handler(sig);
#endif
}

static int install_signals() {
  if (!altstack) {
    altstack = (char*)mmap(nullptr, ALTSTACK_SIZE, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (altstack == MAP_FAILED) { altstack = nullptr; return -1; }
  }
  stack_t ss;
  ss.ss_sp = altstack;
  ss.ss_size = ALTSTACK_SIZE;
  ss.ss_flags = 0;
  if (sigaltstack(&ss, &old_altstack) != 0) return -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &old_segv);
  sigaction(SIGBUS, &sa, &old_bus);
  sigaction(SIGFPE, &sa, &old_fpe);
  sigaction(SIGILL, &sa, &old_ill);
  sigaction(SIGTRAP, &sa, &old_trap);
  sigaction(SIGINT, &sa, &old_int);
  return 0;
}

static void remove_signals() {
  sigaction(SIGSEGV, &old_segv, nullptr);
  sigaction(SIGBUS, &old_bus, nullptr);
  sigaction(SIGFPE, &old_fpe, nullptr);
  sigaction(SIGILL, &old_ill, nullptr);
  sigaction(SIGTRAP, &old_trap, nullptr);
  sigaction(SIGINT, &old_int, nullptr);
  // Only restore an alternate stack that was really there; SS_DISABLE otherwise.
  sigaltstack(&old_altstack, nullptr);
}

// ---------------------------------------------------------------------------------------------
// Called from kernel code (declared in cuda_emu.h).

// Device printf goes to a buffer that Python prints through sys.stdout (so it shows in Jupyter
// and pytest's capture), and is dropped while the race check reruns blocks.
static char* out_buf;
static size_t out_len, out_cap;
static int out_quiet;
static const size_t OUT_LIMIT = 1 << 20;

extern "C" HIDDEN int __cudaemu_printf(const char* fmt, ...) {
  if (out_quiet) return 0;
  char small[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n <= 0 || out_len >= OUT_LIMIT) return n;
  size_t need = out_len + (size_t)n + 1;
  if (need > out_cap) {
    size_t cap = out_cap ? out_cap : 4096;
    while (cap < need) cap *= 2;
    char* p = (char*)realloc(out_buf, cap);
    if (!p) return n;
    out_buf = p;
    out_cap = cap;
  }
  if ((size_t)n < sizeof small) {
    memcpy(out_buf + out_len, small, (size_t)n);
  } else {
    va_start(ap, fmt);
    vsnprintf(out_buf + out_len, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  out_len += (size_t)n;
  return n;
}

EXPORT void cudaemu_set_quiet(int quiet) { out_quiet = quiet; }

EXPORT void cudaemu_set_trap_invalid(int on) { trap_invalid = on; }

// Hands the printed text to Python and empties the buffer.
EXPORT uint64_t cudaemu_take_output(char* dst, uint64_t cap) {
  if (!dst) return out_len;
  uint64_t n = out_len < cap ? out_len : cap;
  memcpy(dst, out_buf, n);
  out_len = 0;
  return n;
}

extern "C" HIDDEN __attribute__((noreturn)) void __cudaemu_fault(int kind, const char* what,
                                                                  const char* file, int line) {
  fault->kind = kind;
  note_where(file, line);
  note_thread(cur);
  set_text("%s", what);
  fault_exit();
  __builtin_unreachable();
}

extern "C" HIDDEN void __cudaemu_syncthreads(const char* file, int line) {
  Fiber* f = cur;
  f->state = AT_BARRIER;
  f->wait_file = file;
  f->wait_line = line;
  f->wait_op = B_SYNC;
  yield_to_scheduler();
}

extern "C" HIDDEN int __cudaemu_syncthreads_op(int op, int pred, const char* file, int line) {
  Fiber* f = cur;
  f->state = AT_BARRIER;
  f->wait_file = file;
  f->wait_line = line;
  f->wait_op = op;
  f->pred = pred != 0;
  yield_to_scheduler();
  // Everyone released by one barrier reads the result before anyone can reach the next one.
  return barrier_result;
}

extern "C" HIDDEN void __cudaemu_spin_yield(const char* file, int line) {
  Fiber* f = cur;
  f->spun = 1;
  f->wait_file = file;
  f->wait_line = line;
  yield_to_scheduler();
}

static int lane_of(const Fiber* f) { return f->linear & 31; }

static bool shfl_source(int op, int lane, int param, int width, int* src) {
  int seg = lane & ~(width - 1);
  int in_seg = lane - seg;
  switch (op) {
    case W_SHFL_IDX: *src = seg + (param & (width - 1)); return true;
    case W_SHFL_UP: *src = in_seg - param < 0 ? lane : lane - param; return true;
    case W_SHFL_DOWN: *src = in_seg + param >= width ? lane : lane + param; return true;
    case W_SHFL_XOR: {
      int s = lane ^ param;
      *src = s >= seg + width ? lane : s;  // a later segment is out of reach: keep your own
      return true;
    }
  }
  return false;
}

// The last lane of a group to arrive does the exchange for all of them.
static void complete_warp_group(Warp* w, uint32_t group, int op) {
  int64_t sum = 0;
  uint64_t ballot = 0, band = ~0ull, bor = 0, bxor = 0;
  int64_t smin = INT64_MAX, smax = INT64_MIN;
  uint64_t umin = UINT64_MAX, umax = 0;
  for (int l = 0; l < 32; ++l) {
    if (!(group >> l & 1)) continue;
    uint64_t v = w->in[l];
    if (v) ballot |= 1ull << l;
    sum += (int32_t)(uint32_t)v;
    smin = (int64_t)(int32_t)v < smin ? (int32_t)v : smin;
    smax = (int64_t)(int32_t)v > smax ? (int32_t)v : smax;
    umin = (uint32_t)v < umin ? (uint32_t)v : umin;
    umax = (uint32_t)v > umax ? (uint32_t)v : umax;
    band &= v; bor |= v; bxor ^= v;
  }
  for (int l = 0; l < 32; ++l) {
    if (!(group >> l & 1)) continue;
    uint64_t r = 0;
    switch (op) {
      case W_SHFL_IDX: case W_SHFL_UP: case W_SHFL_DOWN: case W_SHFL_XOR: {
        int src;
        shfl_source(op, l, w->param[l], w->width[l], &src);
        // Reading a lane outside the group is undefined on a GPU; make it visibly wrong.
        r = (src >= 0 && src < 32 && (group >> src & 1)) ? w->in[src] : POISON64;
        break;
      }
      case W_BALLOT: r = ballot; break;
      case W_ANY: r = ballot != 0; break;
      case W_ALL: r = ballot == group; break;
      case W_SYNCWARP: r = 0; break;
      case W_REDUCE_ADD: r = (uint32_t)sum; break;
      case W_REDUCE_MIN: r = (uint32_t)(int32_t)smin; break;
      case W_REDUCE_MAX: r = (uint32_t)(int32_t)smax; break;
      case W_REDUCE_UMIN: r = umin; break;
      case W_REDUCE_UMAX: r = umax; break;
      case W_REDUCE_AND: r = (uint32_t)band; break;
      case W_REDUCE_OR: r = (uint32_t)bor; break;
      case W_REDUCE_XOR: r = (uint32_t)bxor; break;
      case W_MATCH_ANY: {
        uint32_t m = 0;
        for (int k = 0; k < 32; ++k)
          if ((group >> k & 1) && w->in[k] == w->in[l]) m |= 1u << k;
        r = m;
        break;
      }
    }
    w->out[l] = r;
  }
  for (int l = 0; l < 32; ++l) {
    if (!(group >> l & 1)) continue;
    Fiber* g = &fibers[(int)(w - warps) * 32 + l];
    g->state = RUNNABLE;
  }
  w->arrived &= ~group;
}

static const char* lane_list(uint32_t m, char* buf, size_t n) {
  // "3, 5-9, 31": lanes are easier to read as ranges.
  size_t used = 0;
  buf[0] = 0;
  for (int l = 0; l < 32;) {
    if (!(m >> l & 1)) { ++l; continue; }
    int e = l;
    while (e + 1 < 32 && (m >> (e + 1) & 1)) ++e;
    int k = e > l ? snprintf(buf + used, n - used, "%s%d-%d", used ? ", " : "", l, e)
                  : snprintf(buf + used, n - used, "%s%d", used ? ", " : "", l);
    if (k < 0 || (size_t)k >= n - used) break;
    used += (size_t)k;
    l = e + 1;
  }
  return buf;
}

extern "C" HIDDEN uint64_t __cudaemu_warp(int op, unsigned mask, uint64_t value, int param,
                                          int width, const char* file, int line) {
  Fiber* f = cur;
  int lane = lane_of(f);
  Warp* w = &warps[f->linear / 32];
  if (!(mask >> lane & 1)) {
    char msg[512];
    snprintf(msg, sizeof msg,
             "%s: lane %d calls it with mask 0x%08x, which does not include the lane itself. "
             "The mask names the lanes that take part, and the calling lane must be one of them.",
             WARP_OP_NAMES[op], lane, mask);
    __cudaemu_fault(F_WARP, msg, file, line);
  }
  if (op <= W_SHFL_XOR && (width < 1 || width > 32 || (width & (width - 1)))) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s: width %d must be a power of 2 from 1 to 32.",
             WARP_OP_NAMES[op], width);
    __cudaemu_fault(F_WARP, msg, file, line);
  }
  w->mask[lane] = mask;
  w->op[lane] = op;
  w->param[lane] = param;
  w->width[lane] = width;
  w->in[lane] = value;
  w->arrived |= 1u << lane;
  f->state = AT_WARP;
  f->wait_file = file;
  f->wait_line = line;
  f->wait_op = op;
  uint32_t group = mask & w->exists;
  if ((w->arrived & group) == group) {
    for (int l = 0; l < 32; ++l) {
      if (!(group >> l & 1)) continue;
      const Fiber* g = &fibers[(int)(w - warps) * 32 + l];
      if (w->mask[l] != mask || w->op[l] != op) {
        char msg[1024];
        snprintf(msg, sizeof msg,
                 "lanes of warp %d meet in different warp collectives: lane %d is in %s "
                 "(mask 0x%08x) at %s:%d while lane %d is in %s (mask 0x%08x) here. All lanes "
                 "named in a mask must call the same collective with the same mask.",
                 f->linear / 32, l, WARP_OP_NAMES[w->op[l]], w->mask[l],
                 g->wait_file ? g->wait_file : "?", g->wait_line, lane, WARP_OP_NAMES[op], mask);
        __cudaemu_fault(F_WARP, msg, file, line);
      }
    }
    complete_warp_group(w, group, op);
    // Finish our own part: the scheduler will resume the others.
    return w->out[lane];
  }
  yield_to_scheduler();
  return w->out[lane];
}

extern "C" HIDDEN unsigned __cudaemu_activemask() {
  Fiber* f = cur;
  Warp* w = &warps[f->linear / 32];
  unsigned m = 0;
  for (int l = 0; l < 32; ++l) {
    if (!(w->exists >> l & 1)) continue;
    if (fibers[(f->linear & ~31) + l].state != EXITED) m |= 1u << l;
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// When no fiber can run: release a barrier, or explain why the block is stuck.

static int describe_stuck(int nthreads) {
  char lanes[160], lanes2[160];
  // 1. A warp collective waiting for lanes that will never come.
  for (int wi = 0; wi < (nthreads + 31) / 32; ++wi) {
    Warp* w = &warps[wi];
    if (!w->arrived) continue;
    int first = __builtin_ctz(w->arrived);
    const Fiber* a = &fibers[wi * 32 + first];
    uint32_t group = w->mask[first] & w->exists;
    uint32_t missing = group & ~w->arrived;
    uint32_t exited = 0, at_bar = 0, other = 0;
    const Fiber* example = nullptr;
    for (int l = 0; l < 32; ++l) {
      if (!(missing >> l & 1)) continue;
      const Fiber* g = &fibers[wi * 32 + l];
      if (g->state == EXITED) exited |= 1u << l;
      else if (g->state == AT_BARRIER) { at_bar |= 1u << l; if (!example) example = g; }
      else other |= 1u << l;
    }
    fault->kind = F_WARP;
    note_thread(a);
    note_where(a->wait_file, a->wait_line);
    set_text("lanes %s of warp %d wait in %s (mask 0x%08x) for lanes %s, which ",
             lane_list(w->arrived & group, lanes, sizeof lanes), wi,
             WARP_OP_NAMES[w->op[first]], w->mask[first],
             lane_list(missing, lanes2, sizeof lanes2));
    if (exited) {
      append_text("have already returned from the kernel. Every lane named in the mask must "
                  "reach the collective: move an early `return` (or an `if` around the call) "
                  "so that all lanes get there, or pass a mask of only the lanes that do.");
    } else if (example) {
      append_text("wait at %s at %s:%d instead: the lanes took different paths through an "
                  "`if`. On a GPU this hangs.", BARRIER_NAMES[example->wait_op],
                  example->wait_file ? example->wait_file : "?", example->wait_line);
    } else {
      append_text("are waiting in another collective with a different mask.");
    }
    return -1;
  }
  // 2. A block barrier.
  const Fiber* first = nullptr;
  int waiting = 0, exited = 0;
  const Fiber* gone = nullptr;
  for (int i = 0; i < nthreads; ++i) {
    const Fiber* g = &fibers[i];
    if (g->state == AT_BARRIER) { ++waiting; if (!first) first = g; }
    else if (g->state == EXITED) { ++exited; if (!gone) gone = g; }
  }
  if (!first) return 0;  // everyone has exited
  for (int i = 0; i < nthreads; ++i) {
    const Fiber* g = &fibers[i];
    if (g->state != AT_BARRIER) continue;
    if (g->wait_line != first->wait_line || g->wait_file != first->wait_file ||
        g->wait_op != first->wait_op) {
      fault->kind = F_BARRIER;
      note_thread(g);
      note_where(g->wait_file, g->wait_line);
      set_text("threads wait at different barriers: thread (%u,%u,%u) waits at %s at %s:%d "
               "while thread (%u,%u,%u) waits at %s at %s:%d. Every thread of a block must "
               "reach the same __syncthreads(): a barrier inside an `if` (or a loop whose "
               "trip count differs between threads) hangs or corrupts data on a GPU. Move "
               "the barrier out of the branch.",
               first->tid.x, first->tid.y, first->tid.z, BARRIER_NAMES[first->wait_op],
               first->wait_file ? first->wait_file : "?", first->wait_line,
               g->tid.x, g->tid.y, g->tid.z, BARRIER_NAMES[g->wait_op],
               g->wait_file ? g->wait_file : "?", g->wait_line);
      return -1;
    }
  }
  if (exited) {
    fault->kind = F_BARRIER;
    note_thread(first);
    note_where(first->wait_file, first->wait_line);
    set_text("%d thread(s) of the block, e.g. thread (%u,%u,%u), returned from the kernel while "
             "%d others wait at %s at %s:%d. Every thread of a block must reach each "
             "barrier: instead of an early `return` for threads past the end, guard the "
             "loads and stores with an `if` and let every thread reach the barrier.",
             exited, gone->tid.x, gone->tid.y, gone->tid.z, waiting,
             BARRIER_NAMES[first->wait_op], first->wait_file ? first->wait_file : "?",
             first->wait_line);
    return -1;
  }
  // Release: compute the barrier's reduction for the _count/_and/_or forms.
  int count = 0, all = 1, any = 0;
  for (int i = 0; i < nthreads; ++i) {
    count += fibers[i].pred;
    all &= fibers[i].pred;
    any |= fibers[i].pred;
  }
  barrier_result = first->wait_op == B_COUNT ? count : first->wait_op == B_AND ? all
                 : first->wait_op == B_OR ? any : 0;
  for (int i = 0; i < nthreads; ++i) fibers[i].state = RUNNABLE;
  return 1;
}

// ---------------------------------------------------------------------------------------------
// The launch.

static void poison(void* p, size_t n) {
  uint32_t* w = (uint32_t*)p;
  size_t k = n / 4;
  for (size_t i = 0; i < k; ++i) w[i] = POISON32;
  memset((char*)p + k * 4, 0xFF, n - k * 4);
}

static uint64_t splitmix(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int run_block(int nthreads, const int* perm) {
  for (int i = 0; i < nthreads; ++i) start_fiber(&fibers[i]);
  for (int wi = 0; wi < (nthreads + 31) / 32; ++wi) warps[wi].arrived = 0;
  long idle_spins = 0;
  for (;;) {
    bool ran = false, progress = false;
    for (int k = 0; k < nthreads; ++k) {
      Fiber* f = &fibers[perm[k]];
      if (f->state != RUNNABLE) continue;
      f->spun = 0;
      resume(f);
      ran = true;
      if (f->state == FAULTED) return -1;
      if (!f->spun) progress = true;
      if (interrupted) {
        fault->kind = F_INTERRUPT;
        note_thread(f);
        return -1;
      }
    }
    if (!ran) {
      int r = describe_stuck(nthreads);
      if (r < 0) return -1;
      if (r == 0) return 0;  // all exited
      idle_spins = 0;
    } else if (!progress) {
      // Only spinning threads ran: they wait for something no thread of this block will do.
      if (++idle_spins > 200000) {
        const Fiber* s = nullptr;
        for (int i = 0; i < nthreads && !s; ++i)
          if (fibers[i].state == RUNNABLE) s = &fibers[i];
        fault->kind = F_LIVELOCK;
        if (s) { note_thread(s); note_where(s->wait_file, s->wait_line); }
        set_text("threads spin (atomicCAS that keeps failing, or __nanosleep in a loop) waiting "
                 "for a value that no running thread will write. Blocks run one after another "
                 "in the emulator, and a GPU does not promise that blocks run at the same time "
                 "either: a block must not wait for another block.");
        return -1;
      }
    } else {
      idle_spins = 0;
    }
  }
}

// Runs blocks of a launch. `blocks` lists linear block ids (x fastest), or NULL for all of them
// in order. `order`: 0 forward, 1 reverse, 2 shuffled with `seed`. Returns 0, or -1 with *out
// filled in.
EXPORT int cudaemu_launch(void (*entry)(void**), void** args, const uint32_t* grid,
                          const uint32_t* block, void* dyn_smem, uint64_t dyn_bytes,
                          const int64_t* blocks, int64_t nblocks, int order, uint64_t seed,
                          FaultRecord* out) {
  memset(out, 0, sizeof *out);
  fault = out;
  int nthreads = (int)(block[0] * block[1] * block[2]);
  if (ensure_fibers(nthreads) != 0) {
    out->kind = F_SETUP;
    snprintf(out->text, sizeof out->text, "could not allocate %d fiber stacks (%s)", nthreads,
             strerror(errno));
    return -1;
  }
  blockDim = {block[0], block[1], block[2]};
  gridDim = {grid[0], grid[1], grid[2]};
  cur_entry = entry;
  cur_args = args;
  __cudaemu_dynamic_smem = dyn_smem;
  int n = 0;
  for (unsigned z = 0; z < block[2]; ++z)
    for (unsigned y = 0; y < block[1]; ++y)
      for (unsigned x = 0; x < block[0]; ++x, ++n) {
        fibers[n].tid = {x, y, z};
        fibers[n].linear = n;
      }
  for (int wi = 0; wi < (nthreads + 31) / 32; ++wi) {
    int lanes = nthreads - wi * 32 < 32 ? nthreads - wi * 32 : 32;
    warps[wi].exists = lanes == 32 ? 0xFFFFFFFFu : ((1u << lanes) - 1);
  }
  int* perm = (int*)malloc(sizeof(int) * (size_t)nthreads);
  for (int i = 0; i < nthreads; ++i) perm[i] = order == 1 ? nthreads - 1 - i : i;
  uint64_t rng = seed;
  int64_t total = (int64_t)grid[0] * grid[1] * grid[2];
  int64_t count = blocks ? nblocks : total;
  interrupted = 0;
  if (install_signals() != 0) {
    out->kind = F_SETUP;
    snprintf(out->text, sizeof out->text, "could not install signal handlers (%s)",
             strerror(errno));
    free(perm);
    return -1;
  }
  size_t static_bytes = (size_t)(__stop_cuda_shared - __start_cuda_shared);
  int rc = 0;
  for (int64_t b = 0; b < count; ++b) {
    int64_t id = blocks ? blocks[b] : b;
    blockIdx = {(unsigned)(id % grid[0]), (unsigned)((id / grid[0]) % grid[1]),
                (unsigned)(id / ((int64_t)grid[0] * grid[1]))};
    if (static_bytes) poison(__start_cuda_shared, static_bytes);
    if (dyn_bytes) poison(dyn_smem, dyn_bytes);
    if (order == 2) {
      for (int i = nthreads - 1; i > 0; --i) {
        int j = (int)(splitmix(&rng) % (uint64_t)(i + 1));
        int t = perm[i]; perm[i] = perm[j]; perm[j] = t;
      }
    }
    if (run_block(nthreads, perm) != 0) { rc = -1; break; }
  }
  remove_signals();
  free(perm);
  cur = nullptr;
  fault = nullptr;
  return rc;
}

EXPORT uint64_t cudaemu_static_shared_bytes() {
  return (uint64_t)(__stop_cuda_shared - __start_cuda_shared);
}

EXPORT uint64_t cudaemu_float_atomics() { return __cudaemu_float_atomics; }

EXPORT uint64_t cudaemu_fault_record_size() { return sizeof(FaultRecord); }
