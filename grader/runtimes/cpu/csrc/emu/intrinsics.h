// emu/intrinsics.h: bit casts, integer intrinsics (__popc, __clz, __mulhi ...), loads and stores
// with cache hints, fences and clock64.
#pragma once

#include "builtins.h"

// Bit casts and integer intrinsics.

template <class To, class From>
__CUDAEMU_INLINE To __cudaemu_bits(const From& v) {
  static_assert(sizeof(To) == sizeof(From), "bit cast between types of different sizes");
  To r;
  memcpy(&r, &v, sizeof r);
  return r;
}

__CUDAEMU_INLINE int __float_as_int(float x) { return __cudaemu_bits<int>(x); }
__CUDAEMU_INLINE unsigned int __float_as_uint(float x) { return __cudaemu_bits<unsigned>(x); }
__CUDAEMU_INLINE float __int_as_float(int x) { return __cudaemu_bits<float>(x); }
__CUDAEMU_INLINE float __uint_as_float(unsigned int x) { return __cudaemu_bits<float>(x); }
__CUDAEMU_INLINE long long __double_as_longlong(double x) { return __cudaemu_bits<long long>(x); }
__CUDAEMU_INLINE double __longlong_as_double(long long x) { return __cudaemu_bits<double>(x); }
__CUDAEMU_INLINE int __double2hiint(double x) { return (int)(__double_as_longlong(x) >> 32); }
__CUDAEMU_INLINE int __double2loint(double x) { return (int)__double_as_longlong(x); }

__CUDAEMU_INLINE int __popc(unsigned int x) { return __builtin_popcount(x); }
__CUDAEMU_INLINE int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
__CUDAEMU_INLINE int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
__CUDAEMU_INLINE int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
__CUDAEMU_INLINE int __ffs(int x) { return __builtin_ffs(x); }
__CUDAEMU_INLINE int __ffsll(long long x) { return __builtin_ffsll(x); }
__CUDAEMU_INLINE unsigned int __brev(unsigned int x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
  return __builtin_bswap32(x);
}
__CUDAEMU_INLINE int __mul24(int a, int b) { return (int)((long long)(a << 8 >> 8) * (b << 8 >> 8)); }
__CUDAEMU_INLINE unsigned __umul24(unsigned a, unsigned b) { return (a & 0xFFFFFFu) * (b & 0xFFFFFFu); }
__CUDAEMU_INLINE int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
__CUDAEMU_INLINE unsigned __umulhi(unsigned a, unsigned b) {
  return (unsigned)(((unsigned long long)a * b) >> 32);
}
__CUDAEMU_INLINE long long __mul64hi(long long a, long long b) {
  return (long long)(((__int128)a * b) >> 64);
}
__CUDAEMU_INLINE unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
__CUDAEMU_INLINE unsigned __sad(int a, int b, unsigned c) { return (unsigned)(a > b ? a - b : b - a) + c; }
__CUDAEMU_INLINE int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
__CUDAEMU_INLINE int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }

// ---------------------------------------------------------------------------------------------
// Memory: loads and stores with cache hints are plain accesses; fences only stop the compiler.

template <class T> __CUDAEMU_INLINE T __ldg(const T* p) { return *p; }
template <class T> __CUDAEMU_INLINE T __ldca(const T* p) { return *p; }
template <class T> __CUDAEMU_INLINE T __ldcg(const T* p) { return *p; }
template <class T> __CUDAEMU_INLINE T __ldcs(const T* p) { return *p; }
template <class T> __CUDAEMU_INLINE T __ldlu(const T* p) { return *p; }
template <class T> __CUDAEMU_INLINE T __ldcv(const T* p) { return *p; }
template <class T> __CUDAEMU_INLINE void __stwb(T* p, T v) { *p = v; }
template <class T> __CUDAEMU_INLINE void __stcg(T* p, T v) { *p = v; }
template <class T> __CUDAEMU_INLINE void __stcs(T* p, T v) { *p = v; }
template <class T> __CUDAEMU_INLINE void __stwt(T* p, T v) { *p = v; }
__CUDAEMU_INLINE void __threadfence() { __asm__ __volatile__("" ::: "memory"); }
__CUDAEMU_INLINE void __threadfence_block() { __asm__ __volatile__("" ::: "memory"); }
__CUDAEMU_INLINE void __threadfence_system() { __asm__ __volatile__("" ::: "memory"); }
__CUDAEMU_INLINE long long clock64() { return (long long)++__cudaemu_clock; }
__CUDAEMU_INLINE void __prof_trigger(int) {}
template <class T> __CUDAEMU_INLINE bool __isShared(const T* p) {
  return __cudaemu_is_shared((const void*)p) != 0;
}
template <class T> __CUDAEMU_INLINE bool __isGlobal(const T* p) {
  return __cudaemu_is_shared((const void*)p) == 0;
}
