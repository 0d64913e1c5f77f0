// emu/sync.h: block barriers (__syncthreads and its _count/_and/_or forms) and the warp
// collectives: shuffles, votes, reductions, match, __syncwarp, __activemask.
#pragma once

#include "builtins.h"

// Each call may switch to another fiber. The macros capture the caller's line so that a mismatch
// is reported where the student wrote it.

// The operation codes emu_runtime.cpp expects (cudaemu_abi.h): __CUDAEMU_SHFL_IDX ... for warp
// collectives, __CUDAEMU_BAR_SYNC ... for barriers.
#define __CUDAEMU_X(name, cuda_name) __CUDAEMU_##name,
enum { CUDAEMU_WARP_OPS(__CUDAEMU_X) };
#undef __CUDAEMU_X
#define __CUDAEMU_X(name, cuda_name) __CUDAEMU_BAR_##name,
enum { CUDAEMU_BARRIER_OPS(__CUDAEMU_X) };
#undef __CUDAEMU_X

template <class T>
__CUDAEMU_INLINE T __cudaemu_shfl(const char* file, int line, int op, unsigned mask, T var,
                                  int param, int width = 32) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "warp shuffles move values of at most 8 bytes");
  unsigned long long bits = 0;
  memcpy(&bits, &var, sizeof(T));
  bits = __cudaemu_warp(op, mask, bits, param, width, file, line);
  T r;
  memcpy(&r, &bits, sizeof(T));
  return r;
}
__CUDAEMU_INLINE unsigned long long __cudaemu_vote(const char* file, int line, int op,
                                                   unsigned mask, unsigned long long v) {
  return __cudaemu_warp(op, mask, v, 0, 32, file, line);
}
template <class T>
__CUDAEMU_INLINE unsigned __cudaemu_match_any(const char* file, int line, unsigned mask, T v) {
  unsigned long long bits = 0;
  memcpy(&bits, &v, sizeof(T));
  return (unsigned)__cudaemu_warp(__CUDAEMU_MATCH_ANY, mask, bits, 0, 32, file, line);
}
__CUDAEMU_INLINE int __cudaemu_reduce(const char* file, int line, int op, unsigned mask, int v) {
  return (int)(unsigned)__cudaemu_warp(op, mask, (unsigned)v, 0, 32, file, line);
}
__CUDAEMU_INLINE unsigned __cudaemu_reduce(const char* file, int line, int op, unsigned mask,
                                           unsigned v) {
  int uop = op == __CUDAEMU_REDUCE_MIN ? __CUDAEMU_REDUCE_UMIN
          : op == __CUDAEMU_REDUCE_MAX ? __CUDAEMU_REDUCE_UMAX : op;
  return (unsigned)__cudaemu_warp(uop, mask, v, 0, 32, file, line);
}
__CUDAEMU_INLINE void __cudaemu_sync(const char* file, int line) {
  __asm__ __volatile__("" ::: "memory");
  __cudaemu_syncthreads(file, line);
  __asm__ __volatile__("" ::: "memory");
}

#define __syncthreads() __cudaemu_sync(__FILE__, __LINE__)
#define __syncthreads_count(p) __cudaemu_syncthreads_op(__CUDAEMU_BAR_COUNT, (p), __FILE__, __LINE__)
#define __syncthreads_and(p) __cudaemu_syncthreads_op(__CUDAEMU_BAR_AND, (p), __FILE__, __LINE__)
#define __syncthreads_or(p) __cudaemu_syncthreads_op(__CUDAEMU_BAR_OR, (p), __FILE__, __LINE__)
#define __syncwarp(...) \
  ((void)__cudaemu_vote(__FILE__, __LINE__, __CUDAEMU_SYNCWARP, __cudaemu_mask(__VA_ARGS__), 0))
__CUDAEMU_INLINE unsigned __cudaemu_mask(unsigned m = 0xFFFFFFFFu) { return m; }
#define __shfl_sync(...) __cudaemu_shfl(__FILE__, __LINE__, __CUDAEMU_SHFL_IDX, __VA_ARGS__)
#define __shfl_up_sync(...) __cudaemu_shfl(__FILE__, __LINE__, __CUDAEMU_SHFL_UP, __VA_ARGS__)
#define __shfl_down_sync(...) __cudaemu_shfl(__FILE__, __LINE__, __CUDAEMU_SHFL_DOWN, __VA_ARGS__)
#define __shfl_xor_sync(...) __cudaemu_shfl(__FILE__, __LINE__, __CUDAEMU_SHFL_XOR, __VA_ARGS__)
#define __ballot_sync(mask, pred) \
  ((unsigned)__cudaemu_vote(__FILE__, __LINE__, __CUDAEMU_BALLOT, (mask), (pred) ? 1 : 0))
#define __any_sync(mask, pred) \
  ((int)__cudaemu_vote(__FILE__, __LINE__, __CUDAEMU_ANY, (mask), (pred) ? 1 : 0))
#define __all_sync(mask, pred) \
  ((int)__cudaemu_vote(__FILE__, __LINE__, __CUDAEMU_ALL, (mask), (pred) ? 1 : 0))
#define __uni_sync(mask, pred) __all_sync(mask, pred)
#define __match_any_sync(mask, v) __cudaemu_match_any(__FILE__, __LINE__, (mask), (v))
#define __reduce_add_sync(mask, v) __cudaemu_reduce(__FILE__, __LINE__, __CUDAEMU_REDUCE_ADD, (mask), (v))
#define __reduce_min_sync(mask, v) __cudaemu_reduce(__FILE__, __LINE__, __CUDAEMU_REDUCE_MIN, (mask), (v))
#define __reduce_max_sync(mask, v) __cudaemu_reduce(__FILE__, __LINE__, __CUDAEMU_REDUCE_MAX, (mask), (v))
#define __reduce_and_sync(mask, v) __cudaemu_reduce(__FILE__, __LINE__, __CUDAEMU_REDUCE_AND, (mask), (unsigned)(v))
#define __reduce_or_sync(mask, v) __cudaemu_reduce(__FILE__, __LINE__, __CUDAEMU_REDUCE_OR, (mask), (unsigned)(v))
#define __reduce_xor_sync(mask, v) __cudaemu_reduce(__FILE__, __LINE__, __CUDAEMU_REDUCE_XOR, (mask), (unsigned)(v))

// The lanes of the caller's warp that have not returned.
__CUDAEMU_INLINE unsigned __activemask() { return __cudaemu_activemask(); }
