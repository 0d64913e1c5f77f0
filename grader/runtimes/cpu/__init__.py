"""The CPU runtime: runs the course's CUDA kernels, unchanged, on a machine without a GPU.

How a kernel gets here (runtime.py, build.py, nvrtc.py):
  1. Unsupported features (clusters, grid sync, textures, dynamic parallelism, wmma,
     __pipeline_* / memcpy_async, inline PTX outside the subset below) are refused with the
     student's line. Inline PTX (ptx.py) runs the subset tensor-core kernels use: mma.sync
     m16n8k16 / m16n8k8 (f16, bf16 -> f32), ldmatrix m8n8 x1/x2/x4 (.trans), cp.async with
     commit_group / wait_group / wait_all, cvta.to.shared, and register packing (mov.b32, cvt.rn
     .f16x2.f32 ...); each asm statement becomes calls into csrc/emu/mma.h and async_copy.h on the
     same line.
  2. NVRTC, when installed, compiles the exact source a GPU would get, so the student sees the
     real CUDA compiler's errors (`nvrtc_status()` says whether it is there).
  3. The host C++ compiler builds it against csrc/cuda_emu.h, our own stand-in for CUDA's
     built-ins (one header per topic in csrc/emu/), linked with csrc/emu_runtime.cpp; the
     library is cached under $GRADER_CACHE/cpu or ~/.cache/flash-course/cpu by a hash of its
     source and of everything in csrc/.

How a launch runs (csrc/emu_runtime.cpp):
  - Each CUDA thread is a fiber with its own 128 KB stack (a guard page below); blocks run one
    after another on one host thread, so results are deterministic and atomics are trivially
    atomic. A fiber runs until __syncthreads(), a warp collective or its end; the switch is a
    few instructions of x86-64 assembly (csrc/platform/x86_64.h; ucontext elsewhere, or with
    GRADER_CPU_UCONTEXT=1).
  - __shared__ variables are statics in a section of their own, dynamic shared memory is a
    guarded buffer; both are filled with a signalling NaN at the start of every block.

Inline PTX semantics (csrc/emu/mma.h, async_copy.h, emu_runtime.cpp):
  - mma.sync and ldmatrix are warp collectives: the 32 lanes must all arrive at the same
    instruction (a lane that returned or took another branch is a fault naming the lines); the
    last to arrive computes for all with the ISA's fragment layouts. Products are exact and summed
    in float32 in k order (a GPU may round the sum differently in the last bits).
  - Shared addresses (__cvta_generic_to_shared, cvta.to.shared) are a window of their own: static
    __shared__ variables from 0x10000 (host address kept modulo 128), dynamic shared memory from
    0x40000, unmapped around both; ldmatrix and cp.async fault with the line on an address outside
    shared memory or misaligned (16 bytes for an ldmatrix row, the copy size for cp.async). The
    static part covers every kernel's __shared__ variables of the module, as they share a section.
  - cp.async reads its source when issued (a bad source faults at its line), fills its destination
    with CUDAEMU_ASYNC_POISON32 (NaN as half, bfloat16 and float) and writes it when a wait of the
    issuing thread covers its group: wait_group N completes all but the N most recent committed
    groups, wait_all everything (uncommitted copies too); a thread's leftovers complete when it
    ends. An ldmatrix of a row still in flight is a fault naming both lines.

What it finds, each reported as KernelFault with file:line, block and thread (the C side fills
in a fault record whose kinds and fields csrc/cudaemu_abi.h defines for both languages, abi.py
reads it, symbols.py finds the line, faults.py writes the message):
  - barriers reached at different lines, threads that returned while others wait, warp
    collectives whose lanes never arrive, deadlocks and spin loops that cannot end;
  - out-of-bounds reads and writes of any array argument (each is copied between PROT_NONE
    guard pages; SIGSEGV is mapped to argument, index and line via addr2line) and of dynamic
    shared memory past the launch's shared_mem;
  - outputs computed from shared memory nothing wrote (the NaN poison; a rerun with the FP
    "invalid" trap unmasked names the line that first uses it);
  - data races: a few blocks are rerun from the same inputs with their threads in reverse and
    shuffled order, and the results must not change (CpuRuntime(race_check='full'|'off'));
  - launch errors: wrong scalar types (a Python int for `int`), arrays of the wrong dtype or not
    contiguous, more than 1024 threads, shared memory over 48 KB without opt-in or over 227 KB.

Not caught: misaligned vector accesses (a GPU faults, the CPU does not); reads just before an
array's start that stay in its first page, or under 16 bytes past its end when its size is not
a multiple of 16 (writes there are caught after the launch, without a line); races between
blocks; timing. __device__ globals are not reset between the race check's reruns. Linux only:
x86-64 is tested, aarch64 (ucontext switching) is written but untested.
"""
from .runtime import CpuKernel, CpuModule, CpuRuntime, host_compiler_status, nvrtc_status

__all__ = ["CpuRuntime", "CpuModule", "CpuKernel", "nvrtc_status", "host_compiler_status"]
