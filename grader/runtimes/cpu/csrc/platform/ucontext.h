// platform/ucontext.h: fiber context switching with POSIX ucontext, for any architecture glibc's
// makecontext supports.
//
// The fallback of emu_runtime.cpp where no hand-written switch exists (or GRADER_CPU_UCONTEXT=1
// asks for this one, to rule the assembly out). Same interface as platform/x86_64.h, which says
// what each part does. Slower: swapcontext saves and restores the signal mask, a system call.
#pragma once

#include <stddef.h>
#include <ucontext.h>

struct FiberContext {
  ucontext_t uc;
};

static inline void context_switch(FiberContext* save, FiberContext* load) {
  swapcontext(&save->uc, &load->uc);
}

static void context_start(FiberContext* c, char* stack_lo, char* stack_hi, void (*fn)(),
                          int trap_invalid) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack_lo;
  c->uc.uc_stack.ss_size = (size_t)(stack_hi - stack_lo);
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, fn, 0);
#if defined(__x86_64__) && defined(__linux__)
  c->uc.uc_mcontext.fpregs->mxcsr &= ~0x3Fu;                  // no stale exception flags
  if (trap_invalid) c->uc.uc_mcontext.fpregs->mxcsr &= ~0x80u;  // unmask "invalid"
#else
  (void)trap_invalid;  // not trapped here: a poisoned output's line stays unknown
#endif
}
