// emu/atomics.h: atomicAdd, atomicCAS ... for every type CUDA offers them for.
#pragma once

#include "half.h"
#include "builtins.h"

// Atomics. Fibers never run at the same time, so a read-modify-write is atomic as it stands.

#define __CUDAEMU_ATOMIC(name, T, expr)                                 \
  __CUDAEMU_INLINE T name(T* p, T v) { T old = *p; *p = (expr); return old; } \
  __CUDAEMU_INLINE T name##_block(T* p, T v) { return name(p, v); }     \
  __CUDAEMU_INLINE T name##_system(T* p, T v) { return name(p, v); }
#define __CUDAEMU_ATOMIC_INTS(name, expr)                               \
  __CUDAEMU_ATOMIC(name, int, expr)                                     \
  __CUDAEMU_ATOMIC(name, unsigned int, expr)                            \
  __CUDAEMU_ATOMIC(name, unsigned long long, expr)
__CUDAEMU_ATOMIC_INTS(atomicAdd, old + v)
__CUDAEMU_ATOMIC(atomicSub, int, old - v)
__CUDAEMU_ATOMIC(atomicSub, unsigned int, old - v)
__CUDAEMU_ATOMIC_INTS(atomicExch, v)
__CUDAEMU_ATOMIC(atomicExch, float, v)
__CUDAEMU_ATOMIC_INTS(atomicMin, v < old ? v : old)
__CUDAEMU_ATOMIC_INTS(atomicMax, v > old ? v : old)
__CUDAEMU_ATOMIC(atomicMin, long long, v < old ? v : old)
__CUDAEMU_ATOMIC(atomicMax, long long, v > old ? v : old)
__CUDAEMU_ATOMIC_INTS(atomicAnd, old & v)
__CUDAEMU_ATOMIC_INTS(atomicOr, old | v)
__CUDAEMU_ATOMIC_INTS(atomicXor, old ^ v)
__CUDAEMU_ATOMIC(atomicInc, unsigned int, old >= v ? 0u : old + 1u)
__CUDAEMU_ATOMIC(atomicDec, unsigned int, (old == 0u || old > v) ? v : old - 1u)
#undef __CUDAEMU_ATOMIC_INTS
#undef __CUDAEMU_ATOMIC
// Float additions in a different order round differently; the race check needs to know.
__CUDAEMU_INLINE float atomicAdd(float* p, float v) {
  ++__cudaemu_float_atomics;
  float old = *p; *p = old + v; return old;
}
__CUDAEMU_INLINE double atomicAdd(double* p, double v) {
  ++__cudaemu_float_atomics;
  double old = *p; *p = old + v; return old;
}
__CUDAEMU_INLINE __half atomicAdd(__half* p, __half v) {
  ++__cudaemu_float_atomics;
  __half old = *p; *p = old + v; return old;
}
// sm_90: two or four floats of global memory in one reduction, each element a float add.
__CUDAEMU_INLINE float2 atomicAdd(float2* p, float2 v) {
  ++__cudaemu_float_atomics;
  float2 old = *p; p->x = old.x + v.x; p->y = old.y + v.y; return old;
}
__CUDAEMU_INLINE float4 atomicAdd(float4* p, float4 v) {
  ++__cudaemu_float_atomics;
  float4 old = *p;
  p->x = old.x + v.x; p->y = old.y + v.y; p->z = old.z + v.z; p->w = old.w + v.w;
  return old;
}
__CUDAEMU_INLINE float atomicAdd_block(float* p, float v) { return atomicAdd(p, v); }
__CUDAEMU_INLINE float atomicAdd_system(float* p, float v) { return atomicAdd(p, v); }
__CUDAEMU_INLINE double atomicAdd_block(double* p, double v) { return atomicAdd(p, v); }

// A failed compare-and-swap is how spin locks wait: let the other fibers run.
template <class T>
__CUDAEMU_INLINE T __cudaemu_atomicCAS(const char* file, int line, T* p, T compare, T val) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "atomicCAS on this type");
  T old = *p;
  if (memcmp(&old, &compare, sizeof(T)) == 0) *p = val;
  else __cudaemu_spin_yield(file, line);
  return old;
}
#define atomicCAS(...) __cudaemu_atomicCAS(__FILE__, __LINE__, __VA_ARGS__)
#define atomicCAS_block(...) __cudaemu_atomicCAS(__FILE__, __LINE__, __VA_ARGS__)
#define atomicCAS_system(...) __cudaemu_atomicCAS(__FILE__, __LINE__, __VA_ARGS__)
#define __nanosleep(ns) __cudaemu_spin_yield(__FILE__, __LINE__)
