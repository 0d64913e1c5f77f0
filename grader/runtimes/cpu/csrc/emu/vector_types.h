// emu/vector_types.h: dim3 and the vector types (float2, int4, uint3 ...) with their make_*
// functions, as CUDA's vector_types.h and vector_functions.h declare them.
#pragma once

#include "core.h"

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
};

#define __CUDAEMU_VEC(T, name, align)                                              \
  struct __attribute__((aligned(align))) name##1 { T x; };                         \
  struct __attribute__((aligned(align * 2))) name##2 { T x, y; };                  \
  struct name##3 { T x, y, z; };                                                   \
  struct __attribute__((aligned(align * 4 > 16 ? 16 : align * 4))) name##4 { T x, y, z, w; }; \
  __CUDAEMU_INLINE name##1 make_##name##1(T x) { return {x}; }                     \
  __CUDAEMU_INLINE name##2 make_##name##2(T x, T y) { return {x, y}; }             \
  __CUDAEMU_INLINE name##3 make_##name##3(T x, T y, T z) { return {x, y, z}; }     \
  __CUDAEMU_INLINE name##4 make_##name##4(T x, T y, T z, T w) { return {x, y, z, w}; }

__CUDAEMU_VEC(float, float, 4)
__CUDAEMU_VEC(int, int, 4)
__CUDAEMU_VEC(unsigned int, uint, 4)
__CUDAEMU_VEC(short, short, 2)
__CUDAEMU_VEC(unsigned short, ushort, 2)
__CUDAEMU_VEC(signed char, char, 1)
__CUDAEMU_VEC(unsigned char, uchar, 1)
__CUDAEMU_VEC(long long, longlong, 8)
__CUDAEMU_VEC(unsigned long long, ulonglong, 8)
__CUDAEMU_VEC(double, double, 8)
#undef __CUDAEMU_VEC
