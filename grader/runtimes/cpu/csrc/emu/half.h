// emu/half.h: __half, __half2, __nv_bfloat16 and __nv_bfloat162 with their conversions and
// arithmetic, what cuda_fp16.h and cuda_bf16.h declare. The pair types are 4 bytes, 4-aligned,
// low element first, so they reinterpret as the uint32_t of a PTX .f16x2 / .bf16x2 register.
#pragma once

#include "math_functions.h"
#include "vector_types.h"

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
__CUDAEMU_INLINE __half2 __hmax2(__half2 a, __half2 b) { return {__hmax(a.x, b.x), __hmax(a.y, b.y)}; }
__CUDAEMU_INLINE __half2 __hmin2(__half2 a, __half2 b) { return {__hmin(a.x, b.x), __hmin(a.y, b.y)}; }
__CUDAEMU_INLINE __half2 __hneg2(__half2 a) { return {-a.x, -a.y}; }
__CUDAEMU_INLINE __half2 operator+(__half2 a, __half2 b) { return __hadd2(a, b); }
__CUDAEMU_INLINE __half2 operator-(__half2 a, __half2 b) { return __hsub2(a, b); }
__CUDAEMU_INLINE __half2 operator*(__half2 a, __half2 b) { return __hmul2(a, b); }
__CUDAEMU_INLINE __half2& operator+=(__half2& a, __half2 b) { return a = __hadd2(a, b); }
__CUDAEMU_INLINE __half2& operator*=(__half2& a, __half2 b) { return a = __hmul2(a, b); }
__CUDAEMU_INLINE __half2 __float22half2_rn(float2 f) { return {__half(f.x), __half(f.y)}; }
__CUDAEMU_INLINE __half2 __half2half2(__half a) { return {a, a}; }
__CUDAEMU_INLINE __half2 __lowhigh2highlow(__half2 h) { return {h.y, h.x}; }
__CUDAEMU_INLINE __half2 __lows2half2(__half2 a, __half2 b) { return {a.x, b.x}; }
__CUDAEMU_INLINE __half2 __highs2half2(__half2 a, __half2 b) { return {a.y, b.y}; }
__CUDAEMU_INLINE __half __float2half_rz(float f) {
  __half h = __half(f);  // round to nearest, then step toward zero if that rounded away
  if (fabsf(__half2float(h)) > fabsf(f) && !(f != f)) h.__x = (unsigned short)(h.__x - 1u);
  return h;
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
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;
struct __nv_bfloat16_raw { unsigned short x; };
__CUDAEMU_INLINE unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
__CUDAEMU_INLINE short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
__CUDAEMU_INLINE __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) {
  __nv_bfloat16 h; h.__x = x; return h;
}
__CUDAEMU_INLINE __nv_bfloat16 __short_as_bfloat16(short x) {
  __nv_bfloat16 h; h.__x = (unsigned short)x; return h;
}
__CUDAEMU_INLINE __nv_bfloat16 __int2bfloat16_rn(int i) { return __nv_bfloat16((float)i); }
__CUDAEMU_INLINE __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return {__nv_bfloat16(a), __nv_bfloat16(b)};
}
__CUDAEMU_INLINE __nv_bfloat162 __float22bfloat162_rn(float2 f) {
  return {__nv_bfloat16(f.x), __nv_bfloat16(f.y)};
}
__CUDAEMU_INLINE __nv_bfloat162 __float2bfloat162_rn(float a) {
  return {__nv_bfloat16(a), __nv_bfloat16(a)};
}
__CUDAEMU_INLINE float2 __bfloat1622float2(__nv_bfloat162 h) { return {(float)h.x, (float)h.y}; }
__CUDAEMU_INLINE float __low2float(__nv_bfloat162 h) { return (float)h.x; }
__CUDAEMU_INLINE float __high2float(__nv_bfloat162 h) { return (float)h.y; }
__CUDAEMU_INLINE __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
__CUDAEMU_INLINE __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
__CUDAEMU_INLINE __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
__CUDAEMU_INLINE __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return {a, a}; }
__CUDAEMU_INLINE __nv_bfloat162 __lowhigh2highlow(__nv_bfloat162 h) { return {h.y, h.x}; }
#define __CUDAEMU_BOP(name, op)                                                                \
  __CUDAEMU_INLINE __nv_bfloat16 name(__nv_bfloat16 a, __nv_bfloat16 b) {                      \
    return __nv_bfloat16((float)a op (float)b);                                                \
  }                                                                                            \
  __CUDAEMU_INLINE __nv_bfloat16 operator op(__nv_bfloat16 a, __nv_bfloat16 b) { return name(a, b); } \
  __CUDAEMU_INLINE __nv_bfloat16& operator op##=(__nv_bfloat16& a, __nv_bfloat16 b) { return a = name(a, b); }
__CUDAEMU_BOP(__hadd, +)
__CUDAEMU_BOP(__hsub, -)
__CUDAEMU_BOP(__hmul, *)
__CUDAEMU_BOP(__hdiv, /)
#undef __CUDAEMU_BOP
__CUDAEMU_INLINE __nv_bfloat16 operator-(__nv_bfloat16 a) { a.__x ^= 0x8000u; return a; }
__CUDAEMU_INLINE __nv_bfloat16 __hneg(__nv_bfloat16 a) { return -a; }
__CUDAEMU_INLINE __nv_bfloat16 __habs(__nv_bfloat16 a) { a.__x &= 0x7FFFu; return a; }
__CUDAEMU_INLINE __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
  return __nv_bfloat16(fmaf((float)a, (float)b, (float)c));
}
__CUDAEMU_INLINE __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(fmaxf(a, b)); }
__CUDAEMU_INLINE __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(fminf(a, b)); }
__CUDAEMU_INLINE bool __hisnan(__nv_bfloat16 a) { return (a.__x & 0x7FFFu) > 0x7F80u; }
__CUDAEMU_INLINE __nv_bfloat162 __hadd2(__nv_bfloat162 a, __nv_bfloat162 b) { return {a.x + b.x, a.y + b.y}; }
__CUDAEMU_INLINE __nv_bfloat162 __hsub2(__nv_bfloat162 a, __nv_bfloat162 b) { return {a.x - b.x, a.y - b.y}; }
__CUDAEMU_INLINE __nv_bfloat162 __hmul2(__nv_bfloat162 a, __nv_bfloat162 b) { return {a.x * b.x, a.y * b.y}; }
__CUDAEMU_INLINE __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
  return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)};
}
__CUDAEMU_INLINE __nv_bfloat162 operator+(__nv_bfloat162 a, __nv_bfloat162 b) { return __hadd2(a, b); }
__CUDAEMU_INLINE __nv_bfloat162 operator-(__nv_bfloat162 a, __nv_bfloat162 b) { return __hsub2(a, b); }
__CUDAEMU_INLINE __nv_bfloat162 operator*(__nv_bfloat162 a, __nv_bfloat162 b) { return __hmul2(a, b); }
static_assert(sizeof(__half) == 2 && sizeof(__half2) == 4 && alignof(__half2) == 4,
              "__half2 must reinterpret as a 32-bit register");
static_assert(sizeof(__nv_bfloat16) == 2 && sizeof(__nv_bfloat162) == 4 &&
              alignof(__nv_bfloat162) == 4, "__nv_bfloat162 must reinterpret as a 32-bit register");
static_assert(std::is_trivially_copyable<__half2>::value &&
              std::is_trivially_copyable<__nv_bfloat162>::value, "fp16 pairs are plain bits");
