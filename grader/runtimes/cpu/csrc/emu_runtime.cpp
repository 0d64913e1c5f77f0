// The CPU emulator's runtime: runs one CUDA launch, block after block, each CUDA thread a fiber.
//
// Linked into every kernel library (it is compiled once and cached as an object file). It knows
// nothing of Python; cpu/runtime.py drives it through cudaemu_launch() and reads back a fault
// record when something goes wrong.
//
// Scheduling: the threads of a block are fibers that run one at a time, each until it reaches
// __syncthreads(), a warp collective (shuffle, ballot, __syncwarp ...) or its end. The scheduler
// then picks the next fiber in the launch's order (forward, reverse, a seeded shuffle, or greedy: see greedy_step). When
// nothing can run, either every live thread waits at the same barrier (release them all) or the
// block is stuck, and we say why, naming the source lines. Because fibers never run at the same
// time, atomics are plain read-modify-writes.
//
// Faults: SIGSEGV/SIGBUS/SIGFPE raised by a fiber are caught on an alternate signal stack; the
// handler records the address and program counter, then makes the fiber resume in fault_exit()
// on a fresh stack, which hands control back to the scheduler. No longjmp is involved, so
// _FORTIFY_SOURCE's longjmp checks cannot trip.

#include <dlfcn.h>  // dladdr: is a pointer in the kernel library's own data (__device__ arrays)?
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

// Counters (counters.h, included at the end): hooks the runtime calls.
static void counters_barrier();
static void counters_block_start(int nthreads);
static void counters_block_end(int nthreads);
// Tracing (trace.h, included at the end): the runtime's own copies from global memory.
static void trace_copy(const void* src, unsigned size, const char* dst, unsigned dst_size, int line);
static void trace_tma(uint64_t addr, unsigned size, int line);
static void trace_barrier(int line);
static void trace_block_start();

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
// A cp.async destination holds this from the copy's issue to the wait that completes it.
static const uint32_t ASYNC_POISON32 = CUDAEMU_ASYNC_POISON32;

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

// One cp.async in flight: the source was read at issue (so a bad source faults at its line), the
// destination gets the bytes when a wait of the issuing thread covers the copy's group.
struct AsyncCopy {
  char* dst;
  const char* file;
  int line;
  uintptr_t site;       // its race-finder site (counters.h), 0 when not counting
  uint32_t group;       // the issuing thread's group count at issue: its open group
  uint32_t size;
  unsigned char data[16];
  uint64_t frames[8];   // return addresses at the issue: the kernel lines that called the PTX
};

struct Fiber {
  FiberContext ctx;
  int state;
  int linear;           // threadIdx flattened, x fastest
  int spun;             // yielded from a spin (failed atomicCAS, __nanosleep)
  int idle;             // greedy order: spun since the last progress, so the others go first
  uint3 tid;
  const char* wait_file;
  int wait_line;
  int wait_op;          // which barrier or collective it waits in
  int pred;             // __syncthreads_count/and/or predicate
  char* stack_lo;       // lowest usable byte (a guard page lies below)
  char* stack_hi;       // one past the highest byte
  AsyncCopy* cp;        // this thread's cp.async copies in flight, in issue order
  int cp_n, cp_cap;
  uint32_t cp_groups;   // cp.async.commit_group count; copies issued since are in the open group
  // Its last cp.async.wait_group: N, where, and its callers (a fault on a copy it had not covered
  // names it: the wait whose N left the copy in flight is often the bug).
  long long cpw_n;
  const char* cpw_file;
  int cpw_line;
  uint64_t cpw_frames[8];
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

// A warp-wide instruction of inline PTX (mma.sync, ldmatrix): each lane arrives with a pointer to
// its registers, and the last to arrive calls this with all 32 of them (see emu/mma.h).
typedef void (*GatherFn)(void* const* lanes, int param, const char* file, int line);

#define X(name, value) MEM_##name = value,
enum MemKind { CUDAEMU_MEM_KINDS(X) };
#undef X

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
// Barriers passed: every block barrier (__syncthreads, a named barrier) and, per warp, every
// __syncwarp; block_serial counts the blocks run (check_landed below reads them).
static uint32_t block_serial, block_epoch, warp_epoch[32];
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

static void finish_copies(Fiber* f, uint32_t before_group);
static void hopper_thread_end(Fiber* f);

static void fiber_main() {
  cur_entry(cur_args);
  hopper_thread_end(cur);
  // A GPU completes a thread's cp.async copies even if it never waits for them (no wait to cite).
  cur->cpw_file = nullptr;
  cur->cpw_line = 0;
  finish_copies(cur, UINT32_MAX);
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
  f->cp_n = 0;
  f->cp_groups = 0;
  f->cpw_file = nullptr;
  f->cpw_line = 0;
  context_start(&f->ctx, f->stack_lo, f->stack_hi, fiber_main, trap_invalid);
}

static int ensure_fibers(int n) {
  if (n <= nfibers_alloc) return 0;
  if (stack_region) munmap(stack_region, stack_region_size);
  for (int i = 0; i < nfibers_alloc; ++i) free(fibers[i].cp);
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

// The return addresses on the way to the caller, walking saved frame pointers inside the running
// fiber's stack: when a fault's line is in a helper function (an inline-PTX wrapper, say), Python
// names the kernel line that called it. Inlined, so the walk starts at the caller's frame; a fault
// found later (a TMA copy landing, a hang) keeps the frames captured where it began.
static inline __attribute__((always_inline)) void capture_frames(uint64_t* frames) {
  memset(frames, 0, 8 * sizeof(uint64_t));
  uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
  uintptr_t lo = (uintptr_t)cur->stack_lo, hi = (uintptr_t)cur->stack_hi;
  for (int i = 0; i < 8; ++i) {
    if (fp < lo || fp + 16 > hi || (fp & 7)) break;
    frames[i] = ((uint64_t*)fp)[1];
    uintptr_t next = (uintptr_t)((uint64_t*)fp)[0];
    if (next <= fp) break;
    fp = next;
  }
}

// " @@WAIT_FRAMES a b ...@@": the return addresses captured at a place a fault's text cites, which the
// Python side turns into the student's lines that called it (symbols.name_wait_callers).
static void frames_mark(char* out, size_t size, const uint64_t* frames) {
  size_t k = (size_t)snprintf(out, size, " @@WAIT_FRAMES");
  for (int i = 0; i < 8 && frames[i] && k < size; ++i)
    k += (size_t)snprintf(out + k, size - k, " %llx", (unsigned long long)frames[i]);
  if (k < size) snprintf(out + k, size - k, "@@");
}

// Ends the running fiber with a fault at file:line, its text already set.
static __attribute__((noreturn)) void fault_with_frames(int kind, const char* file, int line,
                                                        const uint64_t* frames) {
  fault->kind = kind;
  note_where(file, line);
  note_thread(cur);
  memcpy(fault->frames, frames, sizeof fault->frames);
  fault_exit();
  __builtin_unreachable();
}

extern "C" HIDDEN __attribute__((noreturn)) void __cudaemu_fault(int kind, const char* what,
                                                                  const char* file, int line) {
  set_text("%s", what);
  uint64_t frames[8];
  capture_frames(frames);
  fault_with_frames(kind, file, line, frames);
}

extern "C" HIDDEN void __cudaemu_syncthreads(const char* file, int line) {
  counters_barrier();
  Fiber* f = cur;
  f->state = AT_BARRIER;
  f->wait_file = file;
  f->wait_line = line;
  f->wait_op = B_SYNC;
  yield_to_scheduler();
}

extern "C" HIDDEN int __cudaemu_syncthreads_op(int op, int pred, const char* file, int line) {
  counters_barrier();
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
  if (op == W_SYNCWARP) ++warp_epoch[(w - warps) & 31];   // orders its lanes' earlier accesses
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
// Inline PTX (emu/ptx.h, emu/mma.h, emu/async_copy.h): shared-window addresses, warp-wide
// instructions and asynchronous copies.

static __attribute__((noreturn, format(printf, 4, 5))) void ptx_fault(int kind, const char* file,
                                                                      int line, const char* fmt,
                                                                      ...) {
  char msg[sizeof fault->text];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  __cudaemu_fault(kind, msg, file, line);
}

// The block's shared window. On a GPU, .shared instructions (ldmatrix, cp.async) take 32-bit
// addresses that __cvta_generic_to_shared() / cvta.to.shared make from a generic pointer. Here
// static __shared__ variables appear from SHARED_STATIC_BASE and dynamic (extern __shared__)
// memory from SHARED_DYN_BASE, with unmapped gaps around both, so an address that leaves either
// faults. The static part keeps the host address modulo 128 and the dynamic part starts at an
// aligned base, so an address has the alignment a GPU would see.
static const uint64_t SHARED_STATIC_BASE = 0x10000;  // 48 KB of static at most: below 0x1C100
static const uint64_t SHARED_DYN_BASE = 0x40000;     // 227 KB of dynamic at most: below 0x79000
static char* smem_static_lo;
static char* smem_static_hi;
static uintptr_t smem_static_origin;                 // smem_static_lo rounded down to 128
static char* smem_dyn;
static size_t smem_dyn_bytes;
static int block_threads;

static bool in_static(const char* p, size_t n) {
  return smem_static_lo && p >= smem_static_lo && p + n <= smem_static_hi;
}
static bool in_dynamic(const char* p, size_t n) {
  return smem_dyn && p >= smem_dyn && p + n <= smem_dyn + smem_dyn_bytes;
}

// __shared__ variables of template functions. GCC ignores the section attribute of a static local
// in a template instantiation (it lands in .bss), so build.py rewrites each such declaration into a
// reference to a slot of this arena: it lies in the section like every other __shared__ variable
// (poisoned at the start of each block, in the shared window of inline PTX, watched for races). A
// slot is given to each (instantiation, declaration) the first time a thread reaches it, and keeps
// it; the arena's unused part is not counted as static shared memory.
static const size_t STATIC_SHARED_LIMIT = 48 * 1024;
// 16-byte aligned (not more), so that the padding before it, which counts as the kernel's static
// shared memory, stays under 16 bytes; a slot that asks for more is aligned by its address.
__attribute__((section("cuda_shared"), aligned(16))) static char template_shared[STATIC_SHARED_LIMIT];
static size_t template_shared_used;
static const int TEMPLATE_SHARED_SLOTS = 256;
struct TemplateSlot { const void* key; size_t at, bytes; const char* name; };
static TemplateSlot template_slots[TEMPLATE_SHARED_SLOTS];
static int template_slots_n;

// Where the block's static shared memory ends: the arena comes last in the section (the kernel's
// object is linked before the runtime's), and only its slots given out so far count.
static bool arena_is_last() {
  // Compared as integers the compiler cannot see through: as pointers to two different objects,
  // GCC folds the comparison to false.
  uintptr_t arena_end = (uintptr_t)(template_shared + STATIC_SHARED_LIMIT);
  uintptr_t section_end = (uintptr_t)__stop_cuda_shared;
  asm volatile("" : "+r"(arena_end), "+r"(section_end));
  return arena_end == section_end;
}

static char* static_shared_end() {
  return arena_is_last() ? template_shared + template_shared_used : __stop_cuda_shared;
}

static size_t static_shared_bytes() {
  return __start_cuda_shared ? (size_t)(static_shared_end() - __start_cuda_shared) : 0;
}

static const char* describe_window(char* buf, size_t n) {
  int k = 0;
  if (smem_static_lo && smem_static_hi > smem_static_lo)
    k = snprintf(buf, n, "static __shared__ variables occupy 0x%llx-0x%llx",
                 (unsigned long long)(SHARED_STATIC_BASE + (uintptr_t)smem_static_lo - smem_static_origin),
                 (unsigned long long)(SHARED_STATIC_BASE + (uintptr_t)smem_static_hi - smem_static_origin));
  else
    k = snprintf(buf, n, "the kernel has no static __shared__ variables");
  if (k < 0 || (size_t)k >= n) return buf;
  if (smem_dyn)
    snprintf(buf + k, n - (size_t)k, ", dynamic shared memory (extern __shared__) 0x%llx-0x%llx "
             "(shared_mem=%zu)", (unsigned long long)SHARED_DYN_BASE,
             (unsigned long long)(SHARED_DYN_BASE + smem_dyn_bytes), smem_dyn_bytes);
  else
    snprintf(buf + k, n - (size_t)k, ", and the launch has no dynamic shared memory (shared_mem=0)");
  return buf;
}

extern "C" HIDDEN int __cudaemu_is_shared(const void* p) {
  return in_static((const char*)p, 1) || in_dynamic((const char*)p, 1);
}

extern "C" HIDDEN uint64_t __cudaemu_shared_addr(const void* p, const char* file, int line) {
  const char* c = (const char*)p;
  if (smem_static_lo && c >= smem_static_lo && c <= smem_static_hi)
    return SHARED_STATIC_BASE + ((uintptr_t)c - smem_static_origin);
  if (smem_dyn && c >= smem_dyn && c <= smem_dyn + smem_dyn_bytes)
    return SHARED_DYN_BASE + (uint64_t)(c - smem_dyn);
  char win[256];
  ptx_fault(F_PTX, file, line,
            "__cvta_generic_to_shared (or cvta.to.shared): lane %d converts a pointer that "
            "does not point into this block's shared memory (%s). Only the address of a __shared__ "
            "variable or of extern __shared__ memory has a shared-window address.",
            cur->linear & 31, describe_window(win, sizeof win));
}

static void poison(void* p, size_t n);
static bool counters_active();   // counters.h

extern "C" HIDDEN void* __cudaemu_template_shared(const void* key, size_t bytes, size_t align,
                                                  const char* name, const char* file, int line) {
  for (int i = 0; i < template_slots_n; ++i)
    if (template_slots[i].key == key) return template_shared + template_slots[i].at;
  uintptr_t base = (uintptr_t)template_shared;
  size_t at = (size_t)((base + template_shared_used + align - 1) / align * align - base);
  size_t before = (size_t)(template_shared - __start_cuda_shared);   // the other static variables
  if (!arena_is_last())
    ptx_fault(F_SETUP, file, line,
              "the arena for the __shared__ variables of templates is not at the end of the "
              "cuda_shared section (the host compiler or linker placed it elsewhere): a bug of the "
              "CPU emulator with this compiler. Run on a GPU (--backend gpu), or declare %s in "
              "extern __shared__ memory.", name);
  if (template_slots_n == TEMPLATE_SHARED_SLOTS || before + at + bytes > STATIC_SHARED_LIMIT)
    ptx_fault(F_PTX, file, line,
              "__shared__ %s takes %zu bytes, and with the static __shared__ variables before it "
              "(%zu bytes) that is over the %zu bytes (48 KB) of static shared memory a block may "
              "have. Use smaller tiles, or dynamic shared memory (extern __shared__, sized at the "
              "launch).", name, bytes, before + template_shared_used, STATIC_SHARED_LIMIT);
  template_slots[template_slots_n++] = {key, at, bytes, name};
  template_shared_used = at + bytes;
  poison(template_shared + at, bytes);                         // as if the block had started with it
  if (smem_static_lo) smem_static_hi = static_shared_end();    // a launch under way sees it at once
  return template_shared + at;
}

// For the race finder (races.py): the variable at byte `off` of the arena, or 0.
EXPORT int cudaemu_template_shared_slot(uint64_t off, uint64_t* at, uint64_t* bytes, const char** name) {
  for (int i = 0; i < template_slots_n; ++i)
    if (off >= template_slots[i].at && off < template_slots[i].at + template_slots[i].bytes) {
      *at = template_slots[i].at;
      *bytes = template_slots[i].bytes;
      *name = template_slots[i].name;
      return 1;
    }
  return 0;
}

static char* shared_host(uint64_t a, size_t n) {
  if (smem_static_lo && a >= SHARED_STATIC_BASE && a - SHARED_STATIC_BASE < (1ull << 24)) {
    char* p = (char*)(smem_static_origin + (uintptr_t)(a - SHARED_STATIC_BASE));
    if (p >= smem_static_lo && p + n <= smem_static_hi) return p;
  }
  if (smem_dyn && a >= SHARED_DYN_BASE && a - SHARED_DYN_BASE + n <= smem_dyn_bytes)
    return smem_dyn + (a - SHARED_DYN_BASE);
  return nullptr;
}

// The host address of `n` bytes at shared address `a`, or a fault naming `what` and the line.
extern "C" HIDDEN void* __cudaemu_shared_ptr(uint64_t a, uint32_t n, uint32_t align,
                                             const char* what, const char* file, int line) {
  char* p = shared_host(a, n);
  if (!p) {
    char win[256];
    ptx_fault(F_PTX, file, line,
              "%s: lane %d gives the shared address 0x%llx (%u bytes from there), which is "
              "outside the block's shared memory: %s.%s",
              what, cur->linear & 31, (unsigned long long)a, n, describe_window(win, sizeof win),
              a > 0xFFFFFFFFull
                  ? " The value looks like a generic pointer: a .shared operand takes the 32-bit "
                    "address that __cvta_generic_to_shared(ptr) returns."
                  : " Check the row/column arithmetic of the address (and that the tile is as "
                    "large as the kernel indexes it).");
  }
  if (align > 1 && a % align) {
    ptx_fault(F_PTX, file, line,
              "%s: lane %d gives the shared address 0x%llx, which is not a multiple of %u bytes, "
              "as this instruction needs (a GPU faults: misaligned address). Pad rows to a "
              "multiple of %u bytes and align the array (__align__(16)).",
              what, cur->linear & 31, (unsigned long long)a, align, align);
  }
  return p;
}

// The same for a generic pointer that must point into shared memory (ldmatrix without .shared).
extern "C" HIDDEN void* __cudaemu_generic_shared_ptr(const void* p, uint32_t n, uint32_t align,
                                                     const char* what, const char* file, int line) {
  const char* c = (const char*)p;
  if (!in_static(c, n) && !in_dynamic(c, n)) {
    char win[256];
    ptx_fault(F_PTX, file, line,
              "%s: lane %d gives a generic address that is not in the block's shared "
              "memory (%s); without .shared the address must still point into shared memory.",
              what, cur->linear & 31, describe_window(win, sizeof win));
  }
  return __cudaemu_shared_ptr(__cudaemu_shared_addr(p, file, line), n, align, what, file, line);
}

// cvta.shared / __cvta_shared_to_generic: a shared address back to a pointer.
extern "C" HIDDEN void* __cudaemu_shared_generic(uint64_t a, const char* file, int line) {
  char* p = shared_host(a, 0);
  if (!p) {
    char win[256];
    ptx_fault(F_PTX, file, line,
              "__cvta_shared_to_generic (or cvta.shared): lane %d converts 0x%llx, which is not "
              "an address in the block's shared memory (%s).",
              cur->linear & 31, (unsigned long long)a, describe_window(win, sizeof win));
  }
  return p;
}

// The launch's array arguments (cpu/runtime.py hands them over before each launch), so that an
// instruction reading a whole tile through one pointer (WMMA's load_matrix_sync and
// store_matrix_sync) can check the tile against the buffer before touching it.
struct ArrayArg {
  uintptr_t lo, hi;  // the guarded copy's bytes
  int arg;           // the (first) argument position it is passed at, from 1
};
static ArrayArg* array_args;
static int n_array_args, cap_array_args;

EXPORT int cudaemu_set_arrays(const uint64_t* addr, const uint64_t* bytes, const int32_t* arg,
                              int n) {
  if (n > cap_array_args) {
    ArrayArg* p = (ArrayArg*)realloc(array_args, sizeof(ArrayArg) * (size_t)n);
    if (!p) return -1;
    array_args = p;
    cap_array_args = n;
  }
  for (int i = 0; i < n; ++i)
    array_args[i] = {(uintptr_t)addr[i], (uintptr_t)(addr[i] + bytes[i]), (int)arg[i]};
  n_array_args = n;
  return 0;
}

// Where the `n` bytes at `p` are (a __CUDAEMU_MEM_* code, cudaemu_abi.h). For OVERRUN, *arg is
// the array argument (0 for shared memory) the range overlaps without fitting in, *offset where
// the range starts relative to that buffer and *size the buffer's bytes.
extern "C" HIDDEN int __cudaemu_locate(const void* p, uint64_t n, int* arg, int64_t* offset,
                                       uint64_t* size) {
  const char* c = (const char*)p;
  *arg = 0;
  *offset = 0;
  *size = 0;
  if (in_static(c, n) || in_dynamic(c, n)) return MEM_SHARED;
  for (int i = 0; i < n_array_args; ++i) {
    const ArrayArg* a = &array_args[i];
    if ((uintptr_t)c >= a->lo && (uintptr_t)c + n <= a->hi) {
      *arg = a->arg;
      return MEM_ARRAY;
    }
  }
  // Overlapping a buffer without fitting in it: past an end (or before a start).
  for (int i = 0; i < n_array_args; ++i) {
    const ArrayArg* a = &array_args[i];
    if ((uintptr_t)c < a->hi && (uintptr_t)c + n > a->lo) {
      *arg = a->arg;
      *offset = (int64_t)((uintptr_t)c - a->lo);
      *size = a->hi - a->lo;
      return MEM_OVERRUN;
    }
  }
  if (smem_dyn && c < smem_dyn + smem_dyn_bytes && c + n > smem_dyn) {
    *offset = (int64_t)(c - smem_dyn);
    *size = smem_dyn_bytes;
    return MEM_OVERRUN;
  }
  if (smem_static_lo && c < smem_static_hi && c + n > smem_static_lo) {
    *offset = (int64_t)(c - smem_static_lo);
    *size = (uint64_t)(smem_static_hi - smem_static_lo);
    return MEM_OVERRUN;
  }
  for (int i = 0; i < block_threads; ++i)
    if (c >= fibers[i].stack_lo && c < fibers[i].stack_hi) return MEM_LOCAL;
  // A __device__ (or __constant__) variable is a global of the kernel library: accepted, though
  // its size is not known here.
  Dl_info mine, theirs;
  if (dladdr((void*)&__cudaemu_locate, &mine) && dladdr(p, &theirs) &&
      mine.dli_fbase == theirs.dli_fbase)
    return MEM_LIBRARY;
  return MEM_UNKNOWN;
}

// Warp-wide instructions: all 32 lanes arrive with their registers; the last one computes.
extern "C" HIDDEN void __cudaemu_warp_gather(int op, int param, void* data, GatherFn fn,
                                             const char* file, int line) {
  Fiber* f = cur;
  int lane = lane_of(f);
  int wi = f->linear / 32;
  Warp* w = &warps[wi];
  if (w->exists != 0xFFFFFFFFu) {
    ptx_fault(F_WARP, file, line,
              "%s is a warp-wide instruction: the 32 lanes of a warp execute it together, but "
              "warp %d of this block has only %d thread(s) (the block has %d). Launch blocks of "
              "a multiple of 32 threads.",
              WARP_OP_NAMES[op], wi, __builtin_popcount(w->exists), block_threads);
  }
  w->mask[lane] = 0xFFFFFFFFu;
  w->op[lane] = op;
  w->param[lane] = param;
  w->width[lane] = 32;
  w->in[lane] = (uint64_t)(uintptr_t)data;
  w->arrived |= 1u << lane;
  f->state = AT_WARP;
  f->wait_file = file;
  f->wait_line = line;
  f->wait_op = op;
  if (w->arrived != 0xFFFFFFFFu) {
    yield_to_scheduler();
    return;
  }
  void* lanes[32];
  for (int l = 0; l < 32; ++l) {
    const Fiber* g = &fibers[wi * 32 + l];
    if (w->op[l] != op || w->mask[l] != 0xFFFFFFFFu) {
      ptx_fault(F_WARP, file, line,
                "lanes of warp %d meet in different warp collectives: lane %d is in %s (mask "
                "0x%08x) at %s:%d while lane %d is in %s here. Every lane of the warp must "
                "execute %s, and execute it together.",
                wi, l, WARP_OP_NAMES[w->op[l]], w->mask[l], g->wait_file ? g->wait_file : "?",
                g->wait_line, lane, WARP_OP_NAMES[op], WARP_OP_NAMES[op]);
    }
    if (w->param[l] != param || g->wait_line != line || !g->wait_file ||
        strcmp(g->wait_file, file) != 0) {
      ptx_fault(F_WARP, file, line,
                "lanes of warp %d execute different %s instructions: lane %d the one at %s:%d, "
                "lane %d this one. %s is .sync.aligned: all 32 lanes must execute the same "
                "instruction together, so it may not sit in a branch that depends on the lane "
                "(threadIdx) or in a loop whose trip count differs between lanes.",
                wi, WARP_OP_NAMES[op], l, g->wait_file ? g->wait_file : "?", g->wait_line, lane,
                WARP_OP_NAMES[op]);
    }
    lanes[l] = (void*)(uintptr_t)w->in[l];
  }
  fn(lanes, param, file, line);
  for (int l = 0; l < 32; ++l) fibers[wi * 32 + l].state = RUNNABLE;
  w->arrived = 0;
}

// cp.async. Each copy reads its source at issue and writes its destination when a wait of the
// issuing thread covers its group (or when the thread ends); until then the destination holds
// ASYNC_POISON32. `pending` counts, per 16-byte granule of shared memory, the copies in flight,
// so that ldmatrix can name a read that comes before the wait.
static uint32_t* pending;
static size_t pending_cap, pending_static_n, pending_n;
static int pending_used;

// Who made each 16-byte granule of shared memory what it holds, when a cp.async landed there: the
// issuing thread, its copy and wait lines, and the barriers its warp and the block had passed then.
// A wait makes a copy visible to the thread that issued it; the other threads may read it only after
// a barrier that follows that wait (__syncwarp for the same warp, a block barrier for another warp).
struct Landed {
  uint32_t block;       // block_serial + 1 when written in this block; anything else: nothing landed
  int by;               // linear thread id of the issuing thread
  uint32_t warp_epoch, block_epoch;
  const char* copy_file;
  const char* wait_file;
  int copy_line, wait_line;
  uint64_t copy_frames[8], wait_frames[8];
};
static Landed* landed;
static size_t landed_cap;

static long pending_slot(const char* p) {
  if (in_static(p, 1)) return (long)(((uintptr_t)p - smem_static_origin) / 16);
  if (in_dynamic(p, 1)) return (long)(pending_static_n + (size_t)(p - smem_dyn) / 16);
  return -1;
}

static uintptr_t race_site_pc(const char* file, int line, int kind);
static void race_log(int t, uintptr_t site, const void* p, unsigned size, int write);

static void finish_copies(Fiber* f, uint32_t before_group) {
  int k = 0;
  for (int i = 0; i < f->cp_n; ++i) {
    AsyncCopy* c = &f->cp[i];
    if (c->group < before_group) {
      memcpy(c->dst, c->data, c->size);
      race_log(f->linear, c->site, c->dst, c->size, 1);   // the copy lands: the issuing thread writes
      long s = pending_slot(c->dst);
      if (s >= 0 && pending[s]) --pending[s];
      if (s >= 0 && (size_t)s < landed_cap) {
        Landed& a = landed[s];
        a = Landed{block_serial + 1, f->linear, warp_epoch[(f->linear / 32) & 31], block_epoch,
                   c->file, f->cpw_file, c->line, f->cpw_line, {}, {}};
        memcpy(a.copy_frames, c->frames, sizeof a.copy_frames);
        if (f->cpw_line > 0) memcpy(a.wait_frames, f->cpw_frames, sizeof a.wait_frames);
      }
    } else {
      f->cp[k++] = *c;
    }
  }
  f->cp_n = k;
}

extern "C" HIDDEN void __cudaemu_cp_async(uint64_t dst, const void* src, int size, int src_size,
                                          int cg, const char* file, int line) {
  const char* what = cg ? "cp.async.cg" : "cp.async.ca";
  if (cg ? size != 16 : (size != 4 && size != 8 && size != 16))
    ptx_fault(F_PTX, file, line, "%s: the copy size must be %s; this one is %d.", what,
              cg ? "16 bytes with .cg (use .ca for 4 or 8)" : "4, 8 or 16 bytes", size);
  if (src_size < 0) src_size = size;  // no src-size operand
  if (src_size > size)
    ptx_fault(F_PTX, file, line,
              "%s: src-size %d is larger than the copy size %d. src-size says how many of the %d "
              "bytes to read from global memory; the rest of the destination is zero-filled.",
              what, src_size, size, size);
  char* d = (char*)__cudaemu_shared_ptr(dst, (uint32_t)size, (uint32_t)size, what, file, line);
  if (src_size > 0 && (uintptr_t)src % (uintptr_t)size)
    ptx_fault(F_PTX, file, line,
              "%s: lane %d copies from a global address %u bytes past a multiple of %d; "
              "a %d-byte cp.async needs both addresses aligned to %d.",
              what, cur->linear & 31, (unsigned)((uintptr_t)src % (uintptr_t)size), size, size, size);
  if (src_size > 0 && __cudaemu_is_shared(src))
    ptx_fault(F_PTX, file, line,
              "%s: lane %d copies from shared memory; cp.async copies from global "
              "memory (a kernel argument) to shared memory.", what, cur->linear & 31);
  // A source far from every array argument (not a __device__ variable either) is named here: near
  // one, the guard pages around the launch's buffers fault, and the fault says which and how far.
  // Not checked in a counting run (races.py hands over only the arrays of 4-byte elements then).
  if (src_size > 0 && !counters_active()) {
    int arg;
    int64_t off;
    uint64_t bytes;
    int where = __cudaemu_locate(src, (uint64_t)src_size, &arg, &off, &bytes);
    bool near = false;
    for (int i = 0; i < n_array_args && where == MEM_UNKNOWN; ++i) {
      uintptr_t c = (uintptr_t)src;
      near |= c + 65536 >= array_args[i].lo && c < array_args[i].hi + 65536;
    }
    if ((where == MEM_UNKNOWN && !near) || where == MEM_LOCAL)
      ptx_fault(F_PTX, file, line,
                "%s: lane %d copies from an address that lies in none of the launch's "
                "arrays%s. Check every value the source address is computed from (an index read "
                "from memory too: shared memory that no thread wrote yet holds garbage on a GPU, "
                "and a signalling-NaN bit pattern here).", what, cur->linear & 31,
                where == MEM_LOCAL ? " (it is on a thread's stack)" : "");
  }
  AsyncCopy c;
  memset(&c, 0, sizeof c);
  if (src_size > 0) memcpy(c.data, src, (size_t)src_size);
  trace_copy(src_size > 0 ? src : nullptr, (unsigned)(src_size > 0 ? src_size : 0), d, (unsigned)size, line);
  c.dst = d;
  c.file = file;
  c.line = line;
  c.size = (uint32_t)size;
  c.site = race_site_pc(file, line, 'c');
  capture_frames(c.frames);
  race_log(cur->linear, c.site, d, (unsigned)size, 1);   // in flight from its issue: written
  Fiber* f = cur;
  c.group = f->cp_groups;
  if (f->cp_n == f->cp_cap) {
    int cap = f->cp_cap ? f->cp_cap * 2 : 16;
    AsyncCopy* p = (AsyncCopy*)realloc(f->cp, sizeof(AsyncCopy) * (size_t)cap);
    if (!p) ptx_fault(F_SETUP, file, line, "out of memory for cp.async copies in flight");
    f->cp = p;
    f->cp_cap = cap;
  }
  f->cp[f->cp_n++] = c;
  for (int i = 0; i < size; i += 4) memcpy(d + i, &ASYNC_POISON32, 4);
  long s = pending_slot(d);
  if (s >= 0) {
    ++pending[s];
    pending_used = 1;
  }
}

extern "C" HIDDEN void __cudaemu_cp_async_commit() { ++cur->cp_groups; }

extern "C" HIDDEN void __cudaemu_cp_async_wait(long long n, const char* file, int line) {
  if (n < 0)
    ptx_fault(F_PTX, file, line, "cp.async.wait_group %lld: N must be 0 or more.", n);
  Fiber* f = cur;
  f->cpw_n = n;
  f->cpw_file = file;
  f->cpw_line = line;
  capture_frames(f->cpw_frames);
  if ((unsigned long long)n < f->cp_groups) finish_copies(f, f->cp_groups - (uint32_t)n);
}

extern "C" HIDDEN void __cudaemu_cp_async_wait_all() {
  Fiber* f = cur;
  f->cpw_file = nullptr;   // a wait_all: its line is not known here
  f->cpw_line = 0;
  ++f->cp_groups;  // wait_all is commit_group; wait_group 0
  finish_copies(f, f->cp_groups);
}

// A read of [p, p + n) in shared memory by `what` (ldmatrix): a fault if a cp.async into it is
// still in flight.
extern "C" HIDDEN void __cudaemu_check_async_pending(const void* p, uint32_t n, const char* what,
                                                     const char* file, int line) {
  if (!pending_used || n == 0) return;
  const char* c = (const char*)p;
  long lo = pending_slot(c), hi = pending_slot(c + n - 1);
  if (lo < 0 || hi < 0) return;
  bool busy = false;
  for (long s = lo; s <= hi && !busy; ++s) busy = pending[s] != 0;
  if (!busy) return;
  for (int i = 0; i < block_threads; ++i) {
    const Fiber* g = &fibers[i];
    for (int k = 0; k < g->cp_n; ++k) {
      const AsyncCopy* a = &g->cp[k];
      if (a->dst >= c + n || a->dst + a->size <= c) continue;
      const char* why = a->group == g->cp_groups
                            ? "that thread has not committed it yet (cp.async.commit_group), let "
                              "alone waited for it"
                            : "that thread has not yet passed a cp.async.wait_group that covers "
                              "it (wait_group N leaves the N most recently committed groups in "
                              "flight)";
      char last[400] = "", mark[200];
      if (g->cpw_line > 0 && a->group != g->cp_groups) {
        frames_mark(mark, sizeof mark, g->cpw_frames);
        snprintf(last, sizeof last,
                 " That thread's last cp.async.wait_group was at %s:%d%s, wait_group %lld: it left the "
                 "%lld newest committed group(s) in flight, this copy's among them.",
                 g->cpw_file ? g->cpw_file : "?", g->cpw_line, mark, g->cpw_n, g->cpw_n);
      }
      ptx_fault(F_PTX, file, line,
                "%s (lane %d) reads shared memory at 0x%llx that a cp.async issued by thread "
                "(%u,%u,%u)%s at %s:%d has not written yet: %s. Until a wait of the issuing "
                "thread covers a copy its destination holds undefined bytes (NaN in the "
                "emulator). Wait (cp.async.wait_group / wait_all) and then __syncthreads() "
                "before reading a tile that other threads copied.%s",
                what, cur->linear & 31,
                (unsigned long long)__cudaemu_shared_addr(a->dst, file, line), g->tid.x,
                g->tid.y, g->tid.z, g == cur ? " (this thread)" : "", a->file ? a->file : "?",
                a->line, why, last);
    }
  }
}

// A warp-wide read of [p, p + n) in shared memory by `what` (ldmatrix, a wmma load): a fault if a
// cp.async of another thread landed there and no barrier ordered that landing before this read: the
// same warp's lanes need a __syncwarp() after the issuing thread's wait, other warps a block barrier.
extern "C" HIDDEN void __cudaemu_check_landed(const void* p, uint32_t n, const char* what,
                                              const char* file, int line) {
  if (!pending_used || n == 0 || !cur) return;
  const char* c = (const char*)p;
  long lo = pending_slot(c), hi = pending_slot(c + n - 1);
  if (lo < 0 || hi < 0) return;
  const int reader = cur->linear / 32;
  for (long s = lo; s <= hi && (size_t)s < landed_cap; ++s) {
    const Landed& a = landed[s];
    if (a.block != block_serial + 1) continue;
    const int writer = a.by / 32;
    const bool same_warp = writer == reader;
    if (a.block_epoch != block_epoch || (same_warp && a.warp_epoch != warp_epoch[reader & 31])) continue;
    const Fiber* g = &fibers[a.by];
    char waited[400] = "", copied[200], mark[200];
    frames_mark(copied, sizeof copied, a.copy_frames);
    if (a.wait_line > 0) {
      frames_mark(mark, sizeof mark, a.wait_frames);
      snprintf(waited, sizeof waited, " (visible to that thread after its cp.async.wait_group at %s:%d%s)",
               a.wait_file ? a.wait_file : "?", a.wait_line, mark);
    }
    ptx_fault(F_PTX, file, line,
              "%s (warp %d) reads shared memory at 0x%llx, which a cp.async issued by thread "
              "(%u,%u,%u) (lane %d of warp %d) at %s:%d%s wrote%s; this warp has passed no %s "
              "since the copy landed. A cp.async.wait_group makes a copy visible only to the thread "
              "that issued it; %s may read it only after a barrier that follows that wait: %s.",
              what, reader, (unsigned long long)__cudaemu_shared_addr(c, file, line), g->tid.x,
              g->tid.y, g->tid.z, a.by % 32, writer, a.copy_file ? a.copy_file : "?", a.copy_line,
              copied, waited, same_warp ? "__syncwarp() or block barrier" : "block barrier (__syncthreads())",
              same_warp ? "the other lanes of its warp" : "another warp",
              same_warp ? "__syncwarp() after the wait (or __syncthreads() for the whole block)"
                        : "__syncthreads() after every thread's wait");
  }
}

#include "hopper.inc"

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
    bool whole = w->op[first] == W_MMA || w->op[first] == W_LDMATRIX ||
                 w->op[first] == W_WMMA_LOAD || w->op[first] == W_WMMA_STORE ||
                 w->op[first] == W_WMMA_MMA;
    if (exited && whole) {
      append_text("have already returned from the kernel. %s is a warp-wide .sync.aligned "
                  "instruction: all 32 lanes of the warp must execute it together. Move the "
                  "early `return` (or the `if` around it) so that every lane gets there; a lane "
                  "with nothing to compute still takes part.", WARP_OP_NAMES[w->op[first]]);
    } else if (exited) {
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
  // Module 10's instructions: TMA copies still to land, warpgroups, mbarriers, named barriers.
  int h = hopper_stuck(nthreads, false);
  if (h != 0) return h;
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
             "loads and stores with an `if` and let every thread reach the barrier. (A "
             "`continue` or `break` that some threads take and others do not splits them "
             "the same way: a decision to skip a tile must be the same for the whole block.)",
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
  trace_barrier(first->wait_line);
  barrier_result = first->wait_op == B_COUNT ? count : first->wait_op == B_AND ? all
                 : first->wait_op == B_OR ? any : 0;
  for (int i = 0; i < nthreads; ++i) fibers[i].state = RUNNABLE;
  ++block_epoch;
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

// One pass of the greedy order: resume the first thread in `perm` that can run and has not spun since
// the last progress; after progress, start again from the first. A warpgroup or warp thus runs ahead
// as far as it can before the later ones move at all: the widest skew a GPU's warps can have, which
// shows a stage released before its reader finished (the producer refills it at once) or a buffer
// rewritten while another warpgroup's product still reads it. Returns 1 after progress, 0 when only
// spinning threads ran, -1 when nothing could run, -2 on a fault or an interrupt.
static int greedy_step(int nthreads, const int* perm) {
  bool ran = false;
  for (int k = 0; k < nthreads; ++k) {
    Fiber* f = &fibers[perm[k]];
    if (f->state != RUNNABLE || f->idle) continue;
    f->spun = 0;
    resume(f);
    ran = true;
    if (f->state == FAULTED) return -2;
    if (interrupted) {
      fault->kind = F_INTERRUPT;
      note_thread(f);
      return -2;
    }
    if (f->spun) { f->idle = 1; continue; }
    for (int i = 0; i < nthreads; ++i) fibers[i].idle = 0;
    return 1;
  }
  for (int i = 0; i < nthreads; ++i) fibers[i].idle = 0;
  return ran ? 0 : -1;
}

static int run_block(int nthreads, const int* perm, bool greedy) {
  block_threads = nthreads;
  hopper_block_start(nthreads);
  if (pending_used) {
    memset(pending, 0, sizeof *pending * pending_n);
    pending_used = 0;
  }
  for (int i = 0; i < nthreads; ++i) start_fiber(&fibers[i]);
  for (int wi = 0; wi < (nthreads + 31) / 32; ++wi) warps[wi].arrived = 0;
  long idle_spins = 0;
  for (int i = 0; i < nthreads; ++i) fibers[i].idle = 0;
  for (;;) {
    bool ran = false, progress = false;
    if (greedy) {
      int g = greedy_step(nthreads, perm);
      if (g == -2) return -1;
      ran = g >= 0;
      progress = g == 1;
    }
    for (int k = 0; k < nthreads && !greedy; ++k) {
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
      // Only spinning threads ran. Waits on mbarriers: land the TMA copies, or name the hang.
      int h = hopper_stuck(nthreads, true);
      if (h < 0) return -1;
      if (h > 0) { idle_spins = 0; continue; }
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
// in order. `order`: 0 forward, 1 reverse, 2 shuffled with `seed`, 3 greedy (forward, the first
// thread that can run always first: greedy_step). Returns 0, or -1 with *out
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
  // The shared window of inline PTX, and a cp.async counter per 16 bytes of it: the whole arena of
  // template __shared__ variables (its slots are given out as the threads reach them).
  size_t static_bytes = __start_cuda_shared ? (size_t)(__stop_cuda_shared - __start_cuda_shared) : 0;
  smem_static_lo = static_bytes ? __start_cuda_shared : nullptr;
  smem_static_hi = static_bytes ? static_shared_end() : nullptr;
  smem_static_origin = (uintptr_t)smem_static_lo & ~(uintptr_t)127;
  smem_dyn = dyn_bytes ? (char*)dyn_smem : nullptr;
  smem_dyn_bytes = dyn_bytes;
  pending_static_n = static_bytes ? ((uintptr_t)__stop_cuda_shared - smem_static_origin + 15) / 16 : 0;
  pending_n = pending_static_n + (dyn_bytes + 15) / 16;
  if (pending_n > pending_cap) {
    free(pending);
    pending = (uint32_t*)calloc(pending_n, sizeof *pending);
    pending_cap = pending ? pending_n : 0;
    if (!pending) {
      out->kind = F_SETUP;
      snprintf(out->text, sizeof out->text, "could not allocate the cp.async bookkeeping");
      remove_signals();
      free(perm);
      return -1;
    }
  } else if (pending_n) {
    memset(pending, 0, sizeof *pending * pending_n);
  }
  if (pending_n > landed_cap) {
    free(landed);
    landed = (Landed*)calloc(pending_n, sizeof *landed);
    landed_cap = landed ? pending_n : 0;
  }
  pending_used = 0;
  int rc = 0;
  for (int64_t b = 0; b < count; ++b) {
    int64_t id = blocks ? blocks[b] : b;
    blockIdx = {(unsigned)(id % grid[0]), (unsigned)((id / grid[0]) % grid[1]),
                (unsigned)(id / ((int64_t)grid[0] * grid[1]))};
    if (static_bytes) poison(__start_cuda_shared, static_shared_bytes());
    if (dyn_bytes) poison(dyn_smem, dyn_bytes);
    if (order == 2) {
      for (int i = nthreads - 1; i > 0; --i) {
        int j = (int)(splitmix(&rng) % (uint64_t)(i + 1));
        int t = perm[i]; perm[i] = perm[j]; perm[j] = t;
      }
    }
    counters_block_start(nthreads);
    trace_block_start();
    ++block_serial;   // what earlier blocks' copies left in landed[] is not this block's
    if (run_block(nthreads, perm, order == 3) != 0) { rc = -1; break; }
    hopper_block_end();
    counters_block_end(nthreads);
  }
  remove_signals();
  free(perm);
  cur = nullptr;
  fault = nullptr;
  return rc;
}

EXPORT uint64_t cudaemu_static_shared_bytes() { return (uint64_t)static_shared_bytes(); }

EXPORT uint64_t cudaemu_float_atomics() { return __cudaemu_float_atomics; }

EXPORT uint64_t cudaemu_fault_record_size() { return sizeof(FaultRecord); }

#include "counters.h"
#include "trace.h"
