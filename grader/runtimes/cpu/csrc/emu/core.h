// emu/core.h: the ground every other emu/ header stands on: the C and C++ headers the emulator
// needs, its helper macros, and CUDA's function and variable qualifiers.
//
// All system headers are included here, first: printf and assert become macros later (see
// checks.h), and a system header included after that would be rewritten by them.
#pragma once

#define __CUDA_EMULATOR__ 1
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 900
#endif

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
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
