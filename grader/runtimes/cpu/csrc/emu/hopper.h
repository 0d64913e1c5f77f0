// emu/hopper.h: module 10's inline PTX on Hopper: wgmma (warpgroup matrix multiply-accumulate),
// mbarriers, TMA (cp.async.bulk.tensor), fence.proxy.async, named barriers and setmaxnreg. The
// model lives in the runtime (hopper.inc); these are the calls cpu/ptx.py's rewrite makes.
#pragma once

#include "ptx.h"
#include "../hopper_abi.h"

extern "C" {
__CUDAEMU_HIDDEN void __cudaemu_mbar_init(unsigned long long addr, unsigned long long count,
                                          const char* file, int line);
__CUDAEMU_HIDDEN unsigned long long __cudaemu_mbar_arrive(unsigned long long addr,
                                                          unsigned long long tx, int expect,
                                                          const char* file, int line);
__CUDAEMU_HIDDEN void __cudaemu_mbar_tx(unsigned long long addr, unsigned long long tx,
                                        int complete, const char* file, int line);
__CUDAEMU_HIDDEN int __cudaemu_mbar_try_wait(unsigned long long addr, unsigned long long parity,
                                             const char* file, int line);
__CUDAEMU_HIDDEN void __cudaemu_tma_load(unsigned long long dst, const void* map,
                                         const int32_t* coords, int rank, unsigned long long bar,
                                         const char* file, int line);
__CUDAEMU_HIDDEN void __cudaemu_bulk_load(unsigned long long dst, const void* src,
                                          unsigned long long size, unsigned long long bar,
                                          const char* file, int line);
__CUDAEMU_HIDDEN void __cudaemu_bulk_reduce_add_f32(unsigned long long dst, unsigned long long src,
                                                    unsigned long long size, const char* file,
                                                    int line);
__CUDAEMU_HIDDEN void __cudaemu_bulk_group(long long n, const char* file, int line);
__CUDAEMU_HIDDEN void __cudaemu_fence_proxy_async(void);
__CUDAEMU_HIDDEN void __cudaemu_wgmma(int param, __cudaemu_wgmma_lane* lane, const char* file,
                                      int line);
__CUDAEMU_HIDDEN void __cudaemu_wgmma_sync(int what, long long n, const char* file, int line);
__CUDAEMU_HIDDEN void __cudaemu_named_bar(unsigned long long id, unsigned long long count,
                                          int arrive, const char* file, int line);
}

namespace __cudaemu_ptx {
enum { WG_FENCE = 0, WG_COMMIT, WG_WAIT, WG_MMA, WG_SETMAXNREG };

__CUDAEMU_INLINE void mbar_init(u64 addr, u64 count, const char* file, int line) {
  __cudaemu_mbar_init(addr, count, file, line);
}
__CUDAEMU_INLINE u64 mbar_arrive(u64 addr, u64 tx, int expect, const char* file, int line) {
  return __cudaemu_mbar_arrive(addr, tx, expect, file, line);
}
__CUDAEMU_INLINE void mbar_tx(u64 addr, u64 tx, int complete, const char* file, int line) {
  __cudaemu_mbar_tx(addr, tx, complete, file, line);
}
__CUDAEMU_INLINE u64 mbar_try_wait(u64 addr, u64 parity, const char* file, int line) {
  return (u64)__cudaemu_mbar_try_wait(addr, parity, file, line);
}
__CUDAEMU_INLINE void tma_load(u64 dst, u64 map, int rank, u64 c0, u64 c1, u64 c2, u64 c3, u64 c4,
                               u64 bar, const char* file, int line) {
  const int32_t coords[5] = {(int32_t)c0, (int32_t)c1, (int32_t)c2, (int32_t)c3, (int32_t)c4};
  __cudaemu_tma_load(dst, (const void*)(uintptr_t)map, coords, rank, bar, file, line);
}
__CUDAEMU_INLINE void bulk_load(u64 dst, u64 src, u64 size, u64 bar, const char* file, int line) {
  __cudaemu_bulk_load(dst, (const void*)(uintptr_t)src, size, bar, file, line);
}
__CUDAEMU_INLINE void bulk_reduce_add_f32(u64 dst, u64 src, u64 size, const char* file, int line) {
  __cudaemu_bulk_reduce_add_f32(dst, src, size, file, line);
}
__CUDAEMU_INLINE void bulk_group(long long n, const char* file, int line) {
  __cudaemu_bulk_group(n, file, line);
}
__CUDAEMU_INLINE void fence_proxy_async() { __cudaemu_fence_proxy_async(); }
// The address of a register of wgmma's A, watched until the wait that covers the wgmma (Track: the
// variable outlives the helper that issues it), else nullptr.
template <bool Track, class T>
__CUDAEMU_INLINE const void* a_source(const T* p) {
  return Track && sizeof(T) == 4 ? (const void*)p : nullptr;
}
__CUDAEMU_INLINE void wgmma(int param, __cudaemu_wgmma_lane* lane, const char* file, int line) {
  __cudaemu_wgmma(param, lane, file, line);
}
__CUDAEMU_INLINE void wgmma_sync(int what, u64 n, const char* file, int line) {
  __cudaemu_wgmma_sync(what, (long long)n, file, line);
}
__CUDAEMU_INLINE void named_bar(u64 id, u64 count, int arrive, const char* file, int line) {
  __cudaemu_named_bar(id, count, arrive, file, line);
}
}  // namespace __cudaemu_ptx
