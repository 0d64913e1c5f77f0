"""The CPU runtime: runs the course's CUDA kernels, unchanged, on a machine without a GPU.

How a kernel gets here (runtime.py, build.py, nvrtc.py):
  1. Unsupported features (inline PTX, cp.async, clusters, grid sync, textures, dynamic
     parallelism, wmma) are refused with the student's line.
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
