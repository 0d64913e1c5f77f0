// emu/async_copy.h: cp.async (global to shared, 4, 8 or 16 bytes, with src-size zero-fill),
// cp.async.commit_group, cp.async.wait_group N and cp.async.wait_all, as inline PTX uses them.
//
// The model (emu_runtime.cpp): a copy reads its source when it is issued, fills its destination
// with CUDAEMU_ASYNC_POISON32 (a NaN as half, bfloat16 and float) and joins the issuing thread's
// open group; commit_group closes the group; wait_group N completes, in order, every copy of the
// thread's groups but the N most recent; wait_all completes all of them. A thread's copies still
// in flight when it ends are completed then. So a kernel that reads a tile before the wait that
// covers it (or, for another thread's copies, before the __syncthreads() after that wait) reads
// NaN, and ldmatrix on such a row is reported with its line.
#pragma once

#include "ptx.h"

namespace __cudaemu_ptx {
// src_size < 0: no src-size operand (the whole copy is read).
__CUDAEMU_INLINE void cp_async(int cg, u64 dst, u64 src, u64 size, long long src_size,
                               const char* file, int line) {
  __cudaemu_cp_async(dst, (const void*)(uintptr_t)src, (int)(long long)size, (int)src_size, cg,
                     file, line);
}
__CUDAEMU_INLINE void cp_async_commit() { __cudaemu_cp_async_commit(); }
__CUDAEMU_INLINE void cp_async_wait(u64 n, const char* file, int line) {
  __cudaemu_cp_async_wait((long long)n, file, line);
}
__CUDAEMU_INLINE void cp_async_wait_all() { __cudaemu_cp_async_wait_all(); }
}  // namespace __cudaemu_ptx
