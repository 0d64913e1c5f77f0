// emu/cooperative_groups.h: cooperative_groups' thread_block and thread_block_tile<N>. Grid
// and cluster groups are refused before compiling (the emulator runs blocks one after another).
#pragma once

#include "sync.h"

namespace cooperative_groups {
struct thread_block {
  void sync() const { __cudaemu_syncthreads("cooperative_groups", 0); }
  unsigned thread_rank() const {
    return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  }
  unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
  unsigned num_threads() const { return size(); }
  dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
  dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
  dim3 group_dim() const { return blockDim; }
  dim3 dim_threads() const { return blockDim; }
};
__CUDAEMU_INLINE thread_block this_thread_block() { return thread_block(); }
__CUDAEMU_INLINE void sync(const thread_block& b) { b.sync(); }

template <unsigned N>
struct thread_block_tile {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tile size must be a power of 2 <= 32");
  unsigned __rank() const { return this_thread_block().thread_rank(); }
  unsigned __mask() const {
    unsigned lane = __rank() & 31u;
    unsigned base = lane & ~(N - 1);
    return N == 32 ? 0xFFFFFFFFu : (((1u << N) - 1u) << base);
  }
  unsigned thread_rank() const { return __rank() & (N - 1); }
  unsigned size() const { return N; }
  unsigned num_threads() const { return N; }
  unsigned meta_group_rank() const { return __rank() / N; }
  unsigned meta_group_size() const { return (this_thread_block().size() + N - 1) / N; }
  void sync() const { __cudaemu_vote("cooperative_groups", 0, __CUDAEMU_SYNCWARP, __mask(), 0); }
  template <class T> T shfl(T v, int src) const {
    return __cudaemu_shfl("cooperative_groups", 0, __CUDAEMU_SHFL_IDX, __mask(), v, src, (int)N);
  }
  template <class T> T shfl_down(T v, unsigned d) const {
    return __cudaemu_shfl("cooperative_groups", 0, __CUDAEMU_SHFL_DOWN, __mask(), v, (int)d, (int)N);
  }
  template <class T> T shfl_up(T v, unsigned d) const {
    return __cudaemu_shfl("cooperative_groups", 0, __CUDAEMU_SHFL_UP, __mask(), v, (int)d, (int)N);
  }
  template <class T> T shfl_xor(T v, unsigned m) const {
    return __cudaemu_shfl("cooperative_groups", 0, __CUDAEMU_SHFL_XOR, __mask(), v, (int)m, (int)N);
  }
  int any(int p) const { return (int)__cudaemu_vote("cooperative_groups", 0, __CUDAEMU_ANY, __mask(), p != 0); }
  int all(int p) const { return (int)__cudaemu_vote("cooperative_groups", 0, __CUDAEMU_ALL, __mask(), p != 0); }
  unsigned ballot(int p) const {
    unsigned b = (unsigned)__cudaemu_vote("cooperative_groups", 0, __CUDAEMU_BALLOT, __mask(), p != 0);
    return N == 32 ? b : (b >> ((__rank() & 31u) & ~(N - 1))) & ((1u << N) - 1u);
  }
};
template <unsigned N>
__CUDAEMU_INLINE thread_block_tile<N> tiled_partition(const thread_block&) { return {}; }
}  // namespace cooperative_groups
