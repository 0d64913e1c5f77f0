// cudaemu_abi.h: the numbers and the fault record layout that the emulator's parts must agree on.
//
// Read by three parties: emu_runtime.cpp (the scheduler), the device headers in emu/ (compiled
// into every kernel) and the Python side (cpu/abi.py parses this file with regular expressions
// at import). Each is defined here once; each party generates its own names from the lists, so
// a new fault kind or field is added in one place. Keep to the forms below (one entry per line,
// decimal or hex literals) or cpu/abi.py will refuse to import.
#pragma once

// What went wrong in a launch: FaultRecord.kind. 0 means nothing did.
#define CUDAEMU_FAULT_KINDS(X)                                                                \
  X(SEGV, 1)       /* SIGSEGV: an access outside every mapping (out of bounds, wild pointer) */ \
  X(BUS, 2)        /* SIGBUS */                                                                 \
  X(FPE, 3)        /* SIGFPE: integer division by zero, or the poison under the "invalid" trap */ \
  X(ILL, 4)        /* SIGILL: code the compiler marked unreachable */                          \
  X(BARRIER, 5)    /* threads at different barriers, or returned while others wait */          \
  X(WARP, 6)       /* a warp collective whose lanes disagree or never arrive */                \
  X(DEADLOCK, 7)                                                                                \
  X(TRAP, 8)       /* assert() or __trap() in the kernel */                                     \
  X(LIVELOCK, 9)   /* threads spin on a value no thread of the block will write */             \
  X(INTERRUPT, 10) /* Ctrl-C during the launch */                                              \
  X(STACK, 11)     /* a thread ran past its fiber stack into the guard page */                 \
  X(SETUP, 12)     /* the emulator could not start the launch */                              \
  X(PTX, 13)       /* inline PTX or WMMA misused: bad address or ldm, read before a wait */

// Shared memory starts every block filled with this signalling NaN, so a read of a word that no
// thread wrote becomes a NaN with a payload Python recognises in the outputs. POISON64 is what a
// shuffle from a lane outside the group returns: both halves poisoned, a signalling NaN as a
// double too.
#define CUDAEMU_POISON32 0x7FBAD000u
#define CUDAEMU_POISON64 0x7FF7BAD07FBAD000ull
// What a cp.async destination holds from the copy's issue until the wait that completes it (and
// what an inline-PTX output operand holds before the asm writes it). Every 16-bit half is a NaN
// as __half and as __nv_bfloat16, and the word is a signalling NaN as a float, so a read before
// the wait is visibly wrong whatever the element type.
#define CUDAEMU_ASYNC_POISON32 0x7FA57FA5u

// The fault record cudaemu_launch fills in for Python (ctypes reads it, so it holds no pointers).
// ONE(type, name) is a scalar field, MANY(type, name, count) an array; in this order, with the
// natural alignment of <stdint.h> types. Python builds its ctypes.Structure from these lines and
// still compares sizeof(FaultRecord) with the runtime's at load.
#define CUDAEMU_FAULT_RECORD(ONE, MANY)                                                       \
  ONE(int32_t, kind)          /* one of CUDAEMU_FAULT_KINDS */                                 \
  ONE(int32_t, is_write)      /* 1 write, 0 read, -1 unknown */                                \
  ONE(int32_t, si_code)                                                                        \
  ONE(int32_t, line)          /* for faults detected in a known source line (barriers, asserts) */ \
  ONE(uint64_t, addr)         /* faulting data address */                                      \
  ONE(uint64_t, pc)           /* faulting instruction */                                       \
  MANY(uint64_t, frames, 8)   /* return addresses found by walking frame pointers */           \
  ONE(uint64_t, sp_word)      /* the word at the stack pointer: a leaf's return address */ \
  MANY(uint32_t, block, 3)                                                                     \
  MANY(uint32_t, thread, 3)                                                                    \
  MANY(char, file, 256)                                                                        \
  MANY(char, text, 2048)      /* a ready-made explanation, when the runtime can write one itself */

// Warp collectives, in the order of their codes (0, 1, ...), with the CUDA name messages use.
// Only C++ reads these two lists: the device headers pass the code, the runtime names it.
#define CUDAEMU_WARP_OPS(X)                                                                   \
  X(SHFL_IDX, "__shfl_sync")                                                                   \
  X(SHFL_UP, "__shfl_up_sync")                                                                 \
  X(SHFL_DOWN, "__shfl_down_sync")                                                             \
  X(SHFL_XOR, "__shfl_xor_sync")                                                               \
  X(BALLOT, "__ballot_sync")                                                                   \
  X(ANY, "__any_sync")                                                                         \
  X(ALL, "__all_sync")                                                                         \
  X(SYNCWARP, "__syncwarp")                                                                    \
  X(REDUCE_ADD, "__reduce_add_sync")                                                           \
  X(REDUCE_MIN, "__reduce_min_sync")                                                           \
  X(REDUCE_MAX, "__reduce_max_sync")                                                           \
  X(REDUCE_UMIN, "__reduce_min_sync")   /* the unsigned overloads */                           \
  X(REDUCE_UMAX, "__reduce_max_sync")                                                          \
  X(REDUCE_AND, "__reduce_and_sync")                                                           \
  X(REDUCE_OR, "__reduce_or_sync")                                                             \
  X(REDUCE_XOR, "__reduce_xor_sync")                                                           \
  X(MATCH_ANY, "__match_any_sync")                                                             \
  X(MMA, "mma.sync")          /* inline PTX (emu/mma.h): every lane of the warp, same line */  \
  X(LDMATRIX, "ldmatrix.sync")                                                                 \
  X(WMMA_LOAD, "wmma::load_matrix_sync")   /* <mma.h> (emu/wmma.h): every lane, same line */  \
  X(WMMA_STORE, "wmma::store_matrix_sync")                                                     \
  X(WMMA_MMA, "wmma::mma_sync")

// Block barriers (__cudaemu_syncthreads_op's first argument), codes 0, 1, ...
#define CUDAEMU_BARRIER_OPS(X)                                                                \
  X(SYNC, "__syncthreads")                                                                     \
  X(COUNT, "__syncthreads_count")                                                              \
  X(AND, "__syncthreads_and")                                                                  \
  X(OR, "__syncthreads_or")

// What __cudaemu_locate finds at a pointer (WMMA's loads and stores check a whole tile with it).
#define CUDAEMU_MEM_KINDS(X)                                                                  \
  X(SHARED, 1)     /* inside the block's shared memory (static or dynamic) */                  \
  X(ARRAY, 2)      /* inside one array argument of the launch */                               \
  X(LIBRARY, 3)    /* in the kernel library's own data: a __device__ variable, size unknown */  \
  X(OVERRUN, 4)    /* overlaps an array argument or shared memory without fitting in it */      \
  X(LOCAL, 5)      /* on a thread's stack: a local variable */                                 \
  X(UNKNOWN, 6)
