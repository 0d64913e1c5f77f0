// emu/math_functions.h: the device math library: CUDA's min/max overloads, float intrinsics
// (__expf, __fdividef, rounding-mode arithmetic ...) and conversions (__float2int_rn ...).
//
// Named after CUDA's own header of that content; not math.h, which it must not hide.
#pragma once

#include "intrinsics.h"

// min/max with CUDA's overload set (the host's std::min is not in scope, as in CUDA C++).

#define __CUDAEMU_MINMAX(A, B, R)                                             \
  __CUDAEMU_INLINE R min(A a, B b) { return (R)a < (R)b ? (R)a : (R)b; }      \
  __CUDAEMU_INLINE R max(A a, B b) { return (R)a > (R)b ? (R)a : (R)b; }
__CUDAEMU_MINMAX(int, int, int)
__CUDAEMU_MINMAX(unsigned int, unsigned int, unsigned int)
__CUDAEMU_MINMAX(int, unsigned int, unsigned int)
__CUDAEMU_MINMAX(unsigned int, int, unsigned int)
__CUDAEMU_MINMAX(long, long, long)
__CUDAEMU_MINMAX(unsigned long, unsigned long, unsigned long)
__CUDAEMU_MINMAX(long, unsigned long, unsigned long)
__CUDAEMU_MINMAX(unsigned long, long, unsigned long)
__CUDAEMU_MINMAX(long long, long long, long long)
__CUDAEMU_MINMAX(unsigned long long, unsigned long long, unsigned long long)
__CUDAEMU_MINMAX(long long, unsigned long long, unsigned long long)
__CUDAEMU_MINMAX(unsigned long long, long long, unsigned long long)
#undef __CUDAEMU_MINMAX
__CUDAEMU_INLINE float min(float a, float b) { return fminf(a, b); }
__CUDAEMU_INLINE float max(float a, float b) { return fmaxf(a, b); }
__CUDAEMU_INLINE double min(double a, double b) { return fmin(a, b); }
__CUDAEMU_INLINE double max(double a, double b) { return fmax(a, b); }
__CUDAEMU_INLINE double min(float a, double b) { return fmin(a, b); }
__CUDAEMU_INLINE double max(float a, double b) { return fmax(a, b); }
__CUDAEMU_INLINE double min(double a, float b) { return fmin(a, b); }
__CUDAEMU_INLINE double max(double a, float b) { return fmax(a, b); }

// ---------------------------------------------------------------------------------------------
// Float math. The host's libm gives correctly rounded or nearly so results; a GPU's intrinsics
// (__expf ...) are approximations, so a kernel can only be more accurate here, never less.

__CUDAEMU_INLINE float rsqrtf(float x) { return 1.0f / sqrtf(x); }
__CUDAEMU_INLINE double rsqrt(double x) { return 1.0 / sqrt(x); }
__CUDAEMU_INLINE float rcbrtf(float x) { return 1.0f / cbrtf(x); }
__CUDAEMU_INLINE float __saturatef(float x) { return x != x ? 0.0f : fminf(fmaxf(x, 0.0f), 1.0f); }
__CUDAEMU_INLINE float saturate(float x) { return __saturatef(x); }
__CUDAEMU_INLINE float fdividef(float a, float b) { return a / b; }
__CUDAEMU_INLINE float __fdividef(float a, float b) { return a / b; }
__CUDAEMU_INLINE float __cudaemu__expf(float x) { return expf(x); }
__CUDAEMU_INLINE float __cudaemu__exp10f(float x) { return powf(10.0f, x); }
__CUDAEMU_INLINE float __cudaemu__logf(float x) { return logf(x); }
__CUDAEMU_INLINE float __cudaemu__log2f(float x) { return log2f(x); }
__CUDAEMU_INLINE float __cudaemu__log10f(float x) { return log10f(x); }
__CUDAEMU_INLINE float __cudaemu__powf(float a, float b) { return powf(a, b); }
__CUDAEMU_INLINE float __cudaemu__sinf(float x) { return sinf(x); }
__CUDAEMU_INLINE float __cudaemu__cosf(float x) { return cosf(x); }
__CUDAEMU_INLINE float __cudaemu__tanf(float x) { return tanf(x); }
__CUDAEMU_INLINE void __cudaemu__sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
// glibc declares some of these names itself (as aliases of expf ...); ours get their own.
#define __expf __cudaemu__expf
#define __exp10f __cudaemu__exp10f
#define __logf __cudaemu__logf
#define __log2f __cudaemu__log2f
#define __log10f __cudaemu__log10f
#define __powf __cudaemu__powf
#define __sinf __cudaemu__sinf
#define __cosf __cudaemu__cosf
#define __tanf __cudaemu__tanf
#define __sincosf __cudaemu__sincosf
__CUDAEMU_INLINE float __frcp_rn(float x) { return 1.0f / x; }
__CUDAEMU_INLINE float __fsqrt_rn(float x) { return sqrtf(x); }
__CUDAEMU_INLINE float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
__CUDAEMU_INLINE double __drcp_rn(double x) { return 1.0 / x; }
__CUDAEMU_INLINE double __dsqrt_rn(double x) { return sqrt(x); }
#define __CUDAEMU_ROUNDED(op, expr)                                                      \
  __CUDAEMU_INLINE float __f##op##_rn(float a, float b) { return expr; }                  \
  __CUDAEMU_INLINE float __f##op##_rz(float a, float b) { return expr; }                  \
  __CUDAEMU_INLINE float __f##op##_ru(float a, float b) { return expr; }                  \
  __CUDAEMU_INLINE float __f##op##_rd(float a, float b) { return expr; }                  \
  __CUDAEMU_INLINE double __d##op##_rn(double a, double b) { return expr; }               \
  __CUDAEMU_INLINE double __d##op##_rz(double a, double b) { return expr; }               \
  __CUDAEMU_INLINE double __d##op##_ru(double a, double b) { return expr; }               \
  __CUDAEMU_INLINE double __d##op##_rd(double a, double b) { return expr; }
__CUDAEMU_ROUNDED(add, a + b)
__CUDAEMU_ROUNDED(sub, a - b)
__CUDAEMU_ROUNDED(mul, a * b)
__CUDAEMU_ROUNDED(div, a / b)
#undef __CUDAEMU_ROUNDED
__CUDAEMU_INLINE float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
__CUDAEMU_INLINE float __fmaf_rz(float a, float b, float c) { return fmaf(a, b, c); }
__CUDAEMU_INLINE float __fmaf_ru(float a, float b, float c) { return fmaf(a, b, c); }
__CUDAEMU_INLINE float __fmaf_rd(float a, float b, float c) { return fmaf(a, b, c); }
__CUDAEMU_INLINE double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
__CUDAEMU_INLINE float normf(int n, const float* a) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * a[i];
  return sqrtf(s);
}

__CUDAEMU_INLINE int __float2int_rn(float x) { return (int)nearbyintf(x); }
__CUDAEMU_INLINE int __float2int_rz(float x) { return (int)x; }
__CUDAEMU_INLINE int __float2int_rd(float x) { return (int)floorf(x); }
__CUDAEMU_INLINE int __float2int_ru(float x) { return (int)ceilf(x); }
__CUDAEMU_INLINE unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
__CUDAEMU_INLINE unsigned __float2uint_rz(float x) { return (unsigned)x; }
__CUDAEMU_INLINE float __int2float_rn(int x) { return (float)x; }
__CUDAEMU_INLINE float __uint2float_rn(unsigned x) { return (float)x; }
__CUDAEMU_INLINE long long __float2ll_rn(float x) { return (long long)nearbyintf(x); }
__CUDAEMU_INLINE int __double2int_rn(double x) { return (int)nearbyint(x); }
__CUDAEMU_INLINE float __double2float_rn(double x) { return (float)x; }
