// emu/launch.h: the glue between a kernel and cudaemu_launch. The build appends, for each
// kernel, a C wrapper that unpacks an array of argument pointers (as cuLaunchKernel takes them)
// and a description of the parameter types, so that a launch can be checked even for template
// kernels.
#pragma once

#include "half.h"
#include "vector_types.h"

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
__CUDAEMU_TNAME(__nv_bfloat162, "__nv_bfloat162")
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
