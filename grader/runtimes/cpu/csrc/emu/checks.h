// emu/checks.h: assert, __trap and printf in kernel code, which report through the runtime.
//
// Included after every other header that includes a system header (core.h includes them all):
// these macros would rewrite a declaration of printf or assert met after them.
#pragma once

#include "builtins.h"

// A kernel's own checks stop the launch with a message instead of killing the process.
#ifdef assert
#undef assert
#endif
#define assert(c) \
  ((c) ? (void)0 : __cudaemu_fault(__CUDAEMU_F_TRAP, "assertion failed: " #c, __FILE__, __LINE__))
#define __trap() __cudaemu_fault(__CUDAEMU_F_TRAP, "the kernel called __trap()", __FILE__, __LINE__)
#define __brkpt() ((void)0)
#define printf(...) __cudaemu_printf(__VA_ARGS__)
