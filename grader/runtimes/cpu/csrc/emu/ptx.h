// emu/ptx.h: what the inline-PTX subset needs besides the instructions themselves (mma.h,
// async_copy.h): the operands of a rewritten `asm` statement, shared-window addresses, and the
// register conversions (cvt.rn.f16x2.f32 ...).
//
// The build (cpu/ptx.py) turns each supported `asm(...)` statement into a block on the same line:
// every operand becomes a 64-bit local holding the register's bits (the "r", "f", "l", "h", "d",
// "n" helpers below), the instructions run on those locals, and the outputs are stored back with
// __cudaemu_ptx::store<bytes>(&(lvalue), bits). Anything else in an asm is refused at compile
// time with its line.
#pragma once

#include "half.h"
#include "sync.h"

namespace __cudaemu_ptx {
typedef unsigned long long u64;

template <class T>
__CUDAEMU_INLINE u64 r(const T& v) {   // "r": a 32-bit register
  if constexpr (std::is_integral<T>::value || std::is_enum<T>::value) {
    return (u64)(unsigned)(u64)v;
  } else {
    static_assert(sizeof(T) == 4 && std::is_trivially_copyable<T>::value,
                  "an \"r\" asm operand is a 32-bit register: pass a 32-bit integer (a pointer "
                  "needs \"l\", or __cvta_generic_to_shared for a .shared address)");
    unsigned u;
    memcpy(&u, &v, 4);
    return u;
  }
}
template <class T>
__CUDAEMU_INLINE u64 f(const T& v) {   // "f": a .f32 register, the value converted to float
  float x = (float)v;
  unsigned u;
  memcpy(&u, &x, 4);
  return u;
}
template <class T>
__CUDAEMU_INLINE u64 d(const T& v) {   // "d": a .f64 register
  double x = (double)v;
  u64 u;
  memcpy(&u, &x, 8);
  return u;
}
template <class T>
__CUDAEMU_INLINE u64 l(const T& v) {   // "l": a 64-bit register (pointers, size_t)
  if constexpr (std::is_pointer<T>::value) {
    return (u64)(uintptr_t)v;
  } else if constexpr (std::is_integral<T>::value || std::is_enum<T>::value) {
    return (u64)v;
  } else {
    static_assert(sizeof(T) == 8 && std::is_trivially_copyable<T>::value,
                  "an \"l\" asm operand is a 64-bit register");
    u64 u;
    memcpy(&u, &v, 8);
    return u;
  }
}
template <class T>
__CUDAEMU_INLINE u64 h(const T& v) {   // "h": a 16-bit register
  if constexpr (std::is_integral<T>::value) {
    return (u64)(unsigned short)v;
  } else {
    static_assert(sizeof(T) == 2 && std::is_trivially_copyable<T>::value,
                  "an \"h\" asm operand is a 16-bit register (unsigned short, __half)");
    unsigned short u;
    memcpy(&u, &v, 2);
    return u;
  }
}
template <class T>
__CUDAEMU_INLINE u64 n(const T& v) {   // "n": an immediate
  return (u64)(long long)v;
}
// An output operand: the low `Bytes` bytes of the register into the variable.
template <int Bytes, class T>
__CUDAEMU_INLINE void store(T* p, u64 bits) {
  static_assert(!std::is_const<T>::value, "an asm output operand must be a modifiable lvalue");
  static_assert(sizeof(T) == Bytes,
                "an asm output operand's variable must have the register's size: 4 bytes for "
                "\"=r\" and \"=f\", 8 for \"=l\" and \"=d\", 2 for \"=h\"");
  memcpy((void*)p, &bits, Bytes);
}
// What an output operand holds before the asm writes it (reading it first is undefined).
static constexpr u64 UNSET = ((u64)CUDAEMU_ASYNC_POISON32 << 32) | CUDAEMU_ASYNC_POISON32;

__CUDAEMU_INLINE int laneid() {
  return (int)(((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x) & 31u);
}

// Conversions between f32 and 16-bit registers, rounding to nearest even (.rn).
__CUDAEMU_INLINE float f32(u64 bits) {
  unsigned u = (unsigned)bits;
  float x;
  memcpy(&x, &u, 4);
  return x;
}
__CUDAEMU_INLINE u64 f32_bits(float x) {
  unsigned u;
  memcpy(&u, &x, 4);
  return u;
}
__CUDAEMU_INLINE u64 to_f16(u64 a) { return __cudaemu_f2h(f32(a)); }
__CUDAEMU_INLINE u64 to_bf16(u64 a) { return __nv_bfloat16(f32(a)).__x; }
__CUDAEMU_INLINE u64 from_f16(u64 a) { return f32_bits(__cudaemu_h2f((unsigned short)a)); }
__CUDAEMU_INLINE u64 from_bf16(u64 a) { return (u64)((unsigned)(unsigned short)a << 16); }
// cvt.rn.f16x2.f32 d, a, b: a goes to the upper half, b to the lower.
__CUDAEMU_INLINE u64 f16x2(u64 a, u64 b) { return (to_f16(a) << 16) | to_f16(b); }
__CUDAEMU_INLINE u64 bf16x2(u64 a, u64 b) { return (to_bf16(a) << 16) | to_bf16(b); }

// An asm template built with a macro (`"mma...f32." TYPES ".f32 ..."`): the build compiled one
// translation per definition of TYPES in the kernel; `same` picks the one in force.
constexpr bool same(const char* a, const char* b) {
  while (*a && *a == *b) { ++a; ++b; }
  return *a == *b;
}
static inline void template_macro(const char* names, const char* file, int line) {
  char msg[512];
  snprintf(msg, sizeof msg, "this asm template uses %s, whose value here is none of the "
           "definitions in the kernel source (was it given with -D?); the emulator translates "
           "the template for the definitions it sees.", names);
  __cudaemu_fault(__CUDAEMU_F_PTX, msg, file, line);
}

// cvta.to.shared / cvta.shared.
__CUDAEMU_INLINE u64 cvta_to_shared(u64 generic, const char* file, int line) {
  return __cudaemu_shared_addr((const void*)(uintptr_t)generic, file, line);
}
__CUDAEMU_INLINE u64 cvta_shared(u64 shared, const char* file, int line) {
  return (u64)(uintptr_t)__cudaemu_shared_generic(shared, file, line);
}
}  // namespace __cudaemu_ptx

// The CUDA intrinsics for the same conversions; macros, to report the caller's line.
#define __cvta_generic_to_shared(p) \
  ((size_t)__cudaemu_shared_addr((const void*)(p), __FILE__, __LINE__))
#define __cvta_shared_to_generic(a) \
  ((void*)__cudaemu_shared_generic((unsigned long long)(a), __FILE__, __LINE__))
// Global addresses are the generic ones (as on a GPU, where the windows coincide).
#define __cvta_generic_to_global(p) ((size_t)(uintptr_t)(const void*)(p))
#define __cvta_global_to_generic(a) ((void*)(uintptr_t)(a))
