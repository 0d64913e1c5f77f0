// emu/builtins.h: the built-in variables (threadIdx, blockIdx, blockDim, gridDim, warpSize) and
// the calls into emu_runtime.cpp that the other headers make.
//
// The variables belong to the runtime, which sets them before it resumes each fiber.
#pragma once

#include "vector_types.h"
#include "../cudaemu_abi.h"

extern "C" {
extern __CUDAEMU_HIDDEN uint3 threadIdx;
extern __CUDAEMU_HIDDEN uint3 blockIdx;
extern __CUDAEMU_HIDDEN dim3 blockDim;
extern __CUDAEMU_HIDDEN dim3 gridDim;
extern __CUDAEMU_HIDDEN void* __cudaemu_dynamic_smem;
extern __CUDAEMU_HIDDEN unsigned long long __cudaemu_float_atomics;
extern __CUDAEMU_HIDDEN unsigned long long __cudaemu_clock;

__CUDAEMU_HIDDEN void __cudaemu_syncthreads(const char* file, int line);
__CUDAEMU_HIDDEN int __cudaemu_syncthreads_op(int op, int pred, const char* file, int line);
__CUDAEMU_HIDDEN unsigned long long __cudaemu_warp(int op, unsigned mask, unsigned long long v,
                                                   int param, int width, const char* file,
                                                   int line);
__CUDAEMU_HIDDEN unsigned __cudaemu_activemask(void);
__CUDAEMU_HIDDEN void __cudaemu_spin_yield(const char* file, int line);
__CUDAEMU_HIDDEN int __cudaemu_printf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
__CUDAEMU_HIDDEN __attribute__((noreturn)) void __cudaemu_fault(int kind, const char* what,
                                                                const char* file, int line);
// A __shared__ variable of a template (build.py rewrites its declaration): its slot in the section.
__CUDAEMU_HIDDEN void* __cudaemu_template_shared(const void* key, size_t bytes, size_t align,
                                                 const char* name, const char* file, int line);

// Inline PTX (ptx.h, mma.h, async_copy.h): the block's shared window, warp-wide instructions,
// asynchronous copies.
__CUDAEMU_HIDDEN int __cudaemu_is_shared(const void* p);
__CUDAEMU_HIDDEN unsigned long long __cudaemu_shared_addr(const void* p, const char* file, int line);
__CUDAEMU_HIDDEN void* __cudaemu_shared_ptr(unsigned long long a, unsigned n, unsigned align,
                                            const char* what, const char* file, int line);
__CUDAEMU_HIDDEN void* __cudaemu_generic_shared_ptr(const void* p, unsigned n, unsigned align,
                                                    const char* what, const char* file, int line);
__CUDAEMU_HIDDEN void* __cudaemu_shared_generic(unsigned long long a, const char* file, int line);
__CUDAEMU_HIDDEN void __cudaemu_warp_gather(int op, int param, void* data,
                                            void (*fn)(void* const* lanes, int param,
                                                       const char* file, int line),
                                            const char* file, int line);
__CUDAEMU_HIDDEN void __cudaemu_cp_async(unsigned long long dst, const void* src, int size,
                                         int src_size, int cg, const char* file, int line);
__CUDAEMU_HIDDEN void __cudaemu_cp_async_commit(void);
__CUDAEMU_HIDDEN void __cudaemu_cp_async_wait(long long n, const char* file, int line);
__CUDAEMU_HIDDEN void __cudaemu_cp_async_wait_all(void);
__CUDAEMU_HIDDEN void __cudaemu_check_async_pending(const void* p, unsigned n, const char* what,
                                                    const char* file, int line);
__CUDAEMU_HIDDEN void __cudaemu_check_landed(const void* p, unsigned n, const char* what,
                                             const char* file, int line);
// The race finder's view of a warp collective's copying (counters.h).
__CUDAEMU_HIDDEN void __cudaemu_collective_copy(int on);
__CUDAEMU_HIDDEN void __cudaemu_race_read(int lane, const void* p, unsigned n, const char* file, int line);
// WMMA (wmma.h): where a tile's bytes are, a __CUDAEMU_MEM_* code.
__CUDAEMU_HIDDEN int __cudaemu_locate(const void* p, unsigned long long n, int* arg,
                                      long long* offset, unsigned long long* size);
}

static constexpr int warpSize = 32;

// Fault kinds, for the kernel's own checks (checks.h): __CUDAEMU_F_TRAP ...
#define __CUDAEMU_X(name, value) __CUDAEMU_F_##name = value,
enum { CUDAEMU_FAULT_KINDS(__CUDAEMU_X) };
#undef __CUDAEMU_X
#define __CUDAEMU_X(name, value) __CUDAEMU_MEM_##name = value,
enum { CUDAEMU_MEM_KINDS(__CUDAEMU_X) };
#undef __CUDAEMU_X
