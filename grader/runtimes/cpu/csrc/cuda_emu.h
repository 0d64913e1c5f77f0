// cuda_emu.h: just enough of CUDA for the host C++ compiler to build a kernel for the CPU emulator.
//
// Written for this course; it is not NVIDIA's header and does not try to be complete. Kernels are
// first compiled by NVRTC (when installed), so this header may accept a little more than CUDA
// does; it must never accept something with a different meaning. Everything a thread does that
// involves other threads (barriers, warp collectives) calls into emu_runtime.cpp, which switches
// fibers.
#pragma once
#define __CUDA_EMULATOR__ 1
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 900
#endif

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <type_traits>
#include <utility>

#define __CUDAEMU_HIDDEN __attribute__((visibility("hidden")))
#define __CUDAEMU_INLINE static inline __attribute__((always_inline))

// ---------------------------------------------------------------------------------------------
// Qualifiers. A kernel is an ordinary function here; the runtime calls it once per thread.

#define __global__
#define __device__
#define __host__
#define __noinline__ __attribute__((noinline))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __constant__
#define __managed__
#define __align__(n) __attribute__((aligned(n)))
#define __builtin_align__(n) __attribute__((aligned(n)))
#define __cudart_builtin__
// One copy per block, shared by the block's fibers: a static, placed in a section of its own so
// that the runtime can poison all of it at the start of every block. (Blocks run one at a time.)
#define __shared__ __attribute__((section("cuda_shared"))) static

// ---------------------------------------------------------------------------------------------
// Vector types and built-in variables.

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
}

static constexpr int warpSize = 32;

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
// Half and bfloat16, stored as bits; arithmetic goes through float (exact for + - * /, since a
// float holds every half product and sum to more than twice half's precision).

__CUDAEMU_INLINE unsigned short __cudaemu_f2h(float f) {
  unsigned x = __float_as_uint(f);
  unsigned sign = (x >> 16) & 0x8000u;
  unsigned mag = x & 0x7FFFFFFFu;
  if (mag >= 0x7F800000u) return (unsigned short)(sign | 0x7C00u | (mag > 0x7F800000u ? 0x200u : 0u));
  if (mag >= 0x477FF000u) return (unsigned short)(sign | 0x7C00u);  // rounds to infinity
  if (mag < 0x38800000u) {  // a half subnormal (or zero): scale so the float adder rounds it
    float r = __uint_as_float(mag) + 0.5f;  // 0.5 = 2^-1: ulp 2^-24 is half's subnormal step
    return (unsigned short)(sign | (__float_as_uint(r) - 0x3F000000u));
  }
  unsigned odd = (mag >> 13) & 1u;
  mag += 0xC8000FFFu + odd;  // rebias exponent (-112 << 23) and round to nearest even
  return (unsigned short)(sign | (mag >> 13));
}
__CUDAEMU_INLINE float __cudaemu_h2f(unsigned short h) {
  unsigned sign = (unsigned)(h & 0x8000u) << 16;
  unsigned e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return __uint_as_float(sign | 0x7F800000u | (m << 13));
  if (e == 0) return (sign ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f;  // m * 2^-24
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

struct __half {
  unsigned short __x;
  __half() = default;
  __half(float f) : __x(__cudaemu_f2h(f)) {}
  __half(double f) : __x(__cudaemu_f2h((float)f)) {}
  __half(int i) : __x(__cudaemu_f2h((float)i)) {}
  operator float() const { return __cudaemu_h2f(__x); }
};
struct __align__(4) __half2 { __half x, y; };
typedef __half half;
typedef __half2 half2;
struct __half_raw { unsigned short x; };

__CUDAEMU_INLINE __half __float2half(float f) { return __half(f); }
__CUDAEMU_INLINE __half __float2half_rn(float f) { return __half(f); }
__CUDAEMU_INLINE float __half2float(__half h) { return __cudaemu_h2f(h.__x); }
__CUDAEMU_INLINE float __low2float(__half2 h) { return __half2float(h.x); }
__CUDAEMU_INLINE float __high2float(__half2 h) { return __half2float(h.y); }
__CUDAEMU_INLINE __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
__CUDAEMU_INLINE __half2 __float2half2_rn(float a) { return {__half(a), __half(a)}; }
__CUDAEMU_INLINE float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
__CUDAEMU_INLINE __half2 __halves2half2(__half a, __half b) { return {a, b}; }
__CUDAEMU_INLINE __half __low2half(__half2 h) { return h.x; }
__CUDAEMU_INLINE __half __high2half(__half2 h) { return h.y; }
__CUDAEMU_INLINE __half __int2half_rn(int i) { return __half((float)i); }
__CUDAEMU_INLINE int __half2int_rn(__half h) { return (int)nearbyintf(__half2float(h)); }
__CUDAEMU_INLINE int __half2int_rz(__half h) { return (int)__half2float(h); }
__CUDAEMU_INLINE unsigned short __half_as_ushort(__half h) { return h.__x; }
__CUDAEMU_INLINE short __half_as_short(__half h) { return (short)h.__x; }
__CUDAEMU_INLINE __half __ushort_as_half(unsigned short x) { __half h; h.__x = x; return h; }
__CUDAEMU_INLINE __half __short_as_half(short x) { __half h; h.__x = (unsigned short)x; return h; }
#define __CUDAEMU_HOP(name, op)                                                               \
  __CUDAEMU_INLINE __half name(__half a, __half b) { return __half(__half2float(a) op __half2float(b)); } \
  __CUDAEMU_INLINE __half operator op(__half a, __half b) { return name(a, b); }                \
  __CUDAEMU_INLINE __half& operator op##=(__half& a, __half b) { return a = name(a, b); }
__CUDAEMU_HOP(__hadd, +)
__CUDAEMU_HOP(__hsub, -)
__CUDAEMU_HOP(__hmul, *)
__CUDAEMU_HOP(__hdiv, /)
#undef __CUDAEMU_HOP
__CUDAEMU_INLINE __half operator-(__half a) { a.__x ^= 0x8000u; return a; }
__CUDAEMU_INLINE __half __hneg(__half a) { return -a; }
__CUDAEMU_INLINE __half __habs(__half a) { a.__x &= 0x7FFFu; return a; }
__CUDAEMU_INLINE __half __hfma(__half a, __half b, __half c) {
  return __half(fmaf(__half2float(a), __half2float(b), __half2float(c)));
}
__CUDAEMU_INLINE __half __hmax(__half a, __half b) { return __half(fmaxf(a, b)); }
__CUDAEMU_INLINE __half __hmin(__half a, __half b) { return __half(fminf(a, b)); }
__CUDAEMU_INLINE bool __hlt(__half a, __half b) { return (float)a < (float)b; }
__CUDAEMU_INLINE bool __hle(__half a, __half b) { return (float)a <= (float)b; }
__CUDAEMU_INLINE bool __hgt(__half a, __half b) { return (float)a > (float)b; }
__CUDAEMU_INLINE bool __hge(__half a, __half b) { return (float)a >= (float)b; }
__CUDAEMU_INLINE bool __heq(__half a, __half b) { return (float)a == (float)b; }
__CUDAEMU_INLINE bool __hne(__half a, __half b) { return (float)a != (float)b; }
__CUDAEMU_INLINE bool __hisnan(__half a) { return (a.__x & 0x7FFFu) > 0x7C00u; }
__CUDAEMU_INLINE bool __hisinf(__half a) { return (a.__x & 0x7FFFu) == 0x7C00u; }
__CUDAEMU_INLINE __half hexp(__half a) { return __half(expf(a)); }
__CUDAEMU_INLINE __half hexp2(__half a) { return __half(exp2f(a)); }
__CUDAEMU_INLINE __half hlog(__half a) { return __half(logf(a)); }
__CUDAEMU_INLINE __half hsqrt(__half a) { return __half(sqrtf(a)); }
__CUDAEMU_INLINE __half hrsqrt(__half a) { return __half(1.0f / sqrtf(a)); }
__CUDAEMU_INLINE __half2 __hadd2(__half2 a, __half2 b) { return {a.x + b.x, a.y + b.y}; }
__CUDAEMU_INLINE __half2 __hmul2(__half2 a, __half2 b) { return {a.x * b.x, a.y * b.y}; }
__CUDAEMU_INLINE __half2 __hsub2(__half2 a, __half2 b) { return {a.x - b.x, a.y - b.y}; }
__CUDAEMU_INLINE __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)};
}

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) __x = (unsigned short)((u >> 16) | 0x40u);
    else __x = (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  operator float() const { return __uint_as_float((unsigned)__x << 16); }
};
struct __align__(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
__CUDAEMU_INLINE __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
__CUDAEMU_INLINE __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
__CUDAEMU_INLINE float __bfloat162float(__nv_bfloat16 h) { return (float)h; }

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
__CUDAEMU_INLINE unsigned __activemask() { return __cudaemu_activemask(); }
template <class T> __CUDAEMU_INLINE bool __isShared(const T*) { return false; }
template <class T> __CUDAEMU_INLINE bool __isGlobal(const T*) { return true; }

// ---------------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------------
// Barriers and warp collectives: each call may switch to another fiber. The macros capture the
// caller's line so that a mismatch is reported where the student wrote it.

enum { __CUDAEMU_SHFL_IDX, __CUDAEMU_SHFL_UP, __CUDAEMU_SHFL_DOWN, __CUDAEMU_SHFL_XOR,
       __CUDAEMU_BALLOT, __CUDAEMU_ANY, __CUDAEMU_ALL, __CUDAEMU_SYNCWARP,
       __CUDAEMU_REDUCE_ADD, __CUDAEMU_REDUCE_MIN, __CUDAEMU_REDUCE_MAX, __CUDAEMU_REDUCE_UMIN,
       __CUDAEMU_REDUCE_UMAX, __CUDAEMU_REDUCE_AND, __CUDAEMU_REDUCE_OR, __CUDAEMU_REDUCE_XOR,
       __CUDAEMU_MATCH_ANY };

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
#define __syncthreads_count(p) __cudaemu_syncthreads_op(1, (p), __FILE__, __LINE__)
#define __syncthreads_and(p) __cudaemu_syncthreads_op(2, (p), __FILE__, __LINE__)
#define __syncthreads_or(p) __cudaemu_syncthreads_op(3, (p), __FILE__, __LINE__)
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

// A kernel's own checks stop the launch with a message instead of killing the process.
#ifdef assert
#undef assert
#endif
#define assert(c) ((c) ? (void)0 : __cudaemu_fault(8, "assertion failed: " #c, __FILE__, __LINE__))
#define __trap() __cudaemu_fault(8, "the kernel called __trap()", __FILE__, __LINE__)
#define __brkpt() ((void)0)
#define printf(...) __cudaemu_printf(__VA_ARGS__)

// ---------------------------------------------------------------------------------------------
// Cooperative groups: the thread block and warp tiles. Grid and cluster groups are refused
// before compiling (the emulator runs blocks one after another).

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

// ---------------------------------------------------------------------------------------------
// Kernel entry points. The build appends, for each kernel, a C wrapper that unpacks an array of
// argument pointers (as cuLaunchKernel takes them) and a description of the parameter types so
// that a launch can be checked even for template kernels.

namespace __cudaemu {
template <class T> struct tname { static const char* get() { return "?"; } };
#define __CUDAEMU_TNAME(T, s) template <> struct tname<T> { static const char* get() { return s; } };
__CUDAEMU_TNAME(int, "int")
__CUDAEMU_TNAME(unsigned int, "unsigned int")
__CUDAEMU_TNAME(long long, "long long")
__CUDAEMU_TNAME(unsigned long long, "unsigned long long")
__CUDAEMU_TNAME(long, "int64_t")
__CUDAEMU_TNAME(unsigned long, "uint64_t")
__CUDAEMU_TNAME(float, "float")
__CUDAEMU_TNAME(double, "double")
__CUDAEMU_TNAME(bool, "bool")
__CUDAEMU_TNAME(short, "short")
__CUDAEMU_TNAME(unsigned short, "unsigned short")
__CUDAEMU_TNAME(char, "char")
__CUDAEMU_TNAME(signed char, "char")
__CUDAEMU_TNAME(unsigned char, "unsigned char")
__CUDAEMU_TNAME(__half, "__half")
__CUDAEMU_TNAME(__nv_bfloat16, "__nv_bfloat16")
__CUDAEMU_TNAME(float2, "float2")
__CUDAEMU_TNAME(float4, "float4")
__CUDAEMU_TNAME(int2, "int2")
__CUDAEMU_TNAME(int4, "int4")
__CUDAEMU_TNAME(__half2, "__half2")
__CUDAEMU_TNAME(void, "void")
#undef __CUDAEMU_TNAME
template <class T> struct tdesc {
  static const char* get() { return tname<typename std::remove_cv<T>::type>::get(); }
};
template <class T> struct tdesc<T*> {
  static const char* get() {
    static char buf[64];
    snprintf(buf, sizeof buf, "%s*", tname<typename std::remove_cv<T>::type>::get());
    return buf;
  }
};

template <class... A> struct entry {
  template <size_t... I>
  static void call(void (*f)(A...), void** args, std::index_sequence<I...>) {
    f(*static_cast<typename std::remove_reference<A>::type*>(args[I])...);
  }
  static void invoke(void (*f)(A...), void** args) {
    call(f, args, std::index_sequence_for<A...>{});
  }
  static int nparams() { return (int)sizeof...(A); }
  static const char* param(int i) {
    static const char* const names[] = {tdesc<typename std::decay<A>::type>::get()..., nullptr};
    return i >= 0 && i < (int)sizeof...(A) ? names[i] : nullptr;
  }
  static size_t param_size(int i) {
    static const size_t sizes[] = {sizeof(typename std::decay<A>::type)..., 0};
    return i >= 0 && i < (int)sizeof...(A) ? sizes[i] : 0;
  }
};
template <class... A> entry<A...> entry_of(void (*)(A...)) { return {}; }
}  // namespace __cudaemu
