// platform/x86_64.h: fiber context switching on x86-64, in a few instructions of assembly.
//
// Included once, by emu_runtime.cpp, which picks one file of platform/ (see there). Every such
// file provides the same three things, so another architecture adds its own file beside this one:
//   struct FiberContext                 what a suspended fiber (or the scheduler) needs to resume
//   context_switch(save, load)          suspend here into *save, resume *load
//   context_start(c, lo, hi, fn, trap)  make *c start fn() on the stack [lo, hi), with the
//                                       "invalid" floating-point exception unmasked if trap
// Switching by hand instead of with swapcontext saves a signal-mask system call per switch, and
// a block switches fibers at every barrier and warp collective of every thread.
#pragma once

#include <stdint.h>
#include <string.h>

struct FiberContext {
  void* sp;  // the stack pointer, with the callee-saved registers pushed below it
};

// cudaemu_switch(&save_sp, load_sp): save callee-saved registers (and the SSE/x87 control words,
// which the ABI also preserves) on the current stack, store its pointer, adopt the other stack,
// restore.
extern "C" void cudaemu_switch(void** save_sp, void* load_sp);
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".type cudaemu_switch,@function\n"
    "cudaemu_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  subq $8, %rsp\n"
    "  stmxcsr (%rsp)\n"
    "  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n"
    "  fldcw 4(%rsp)\n"
    "  addq $8, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size cudaemu_switch, .-cudaemu_switch\n");

static inline void context_switch(FiberContext* save, FiberContext* load) {
  cudaemu_switch(&save->sp, load->sp);
}

static void context_start(FiberContext* c, char* stack_lo, char* stack_hi, void (*fn)(),
                          int trap_invalid) {
  (void)stack_lo;
  // Lay out the frame cudaemu_switch pops: control words, six registers, then fn as the return
  // address. The slot above keeps the stack aligned as at a call.
  uint64_t* sp = (uint64_t*)stack_hi;
  *--sp = 0;
  *--sp = (uint64_t)(uintptr_t)fn;
  for (int i = 0; i < 6; ++i) *--sp = 0;
  uint32_t mxcsr;
  uint16_t fpucw;
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  __asm__ volatile("fnstcw %0" : "=m"(fpucw));
  mxcsr &= ~0x3Fu;                   // no stale exception flags
  if (trap_invalid) mxcsr &= ~0x80u;  // unmask "invalid"
  --sp;
  memcpy(sp, &mxcsr, 4);
  memcpy((char*)sp + 4, &fpucw, 2);
  c->sp = sp;
}
