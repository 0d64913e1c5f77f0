"""The CPU runtime: runs the course's CUDA kernels, unchanged, on a machine without a GPU.

How a kernel gets here (runtime.py, build.py, nvrtc.py):
  1. Unsupported features (clusters, grid sync, textures, dynamic parallelism,
     __pipeline_* / memcpy_async, inline PTX outside the subset below, WMMA beyond m16n16k16)
     are refused with the student's line. Inline PTX (ptx.py) runs the subset tensor-core kernels
     use: mma.sync m16n8k16 / m16n8k8 (f16, bf16 -> f32), ldmatrix m8n8 x1/x2/x4 (.trans),
     cp.async with commit_group / wait_group / wait_all, cvta.to.shared, and register packing
     (mov.b32, cvt.rn.f16x2.f32 ...); each asm statement becomes calls into csrc/emu/mma.h and
     async_copy.h on the same line. The WMMA API of <mma.h> (csrc/include/mma.h, csrc/emu/wmma.h)
     runs fragment<matrix_a | matrix_b, 16, 16, 16, __half | __nv_bfloat16, row_major | col_major>
     and fragment<accumulator, 16, 16, 16, float> with fill_fragment, load_matrix_sync,
     mma_sync, store_matrix_sync, num_elements and x[]; other shapes and types (m32n8k16,
     m8n32k16, tf32, int8, sub-byte, double, __half accumulators) stop the build at a
     static_assert that build.py reports at the student's line.
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
    guarded buffer; both are filled with a signalling NaN at the start of every block. GCC drops
    the section of a static local in a template instantiation, so inside a template build.py turns
    each __shared__ declaration into references to slots of an arena at the end of that section
    (__cudaemu_template_shared), given out the first time a thread reaches it; the race finder
    names a slot by its variable (races.py).

Tensor-core semantics (csrc/emu/mma.h, wmma.h, async_copy.h, emu_runtime.cpp):
  - mma.sync, ldmatrix and WMMA's load_matrix_sync / mma_sync / store_matrix_sync are warp
    collectives: the 32 lanes must all arrive at the same instruction (a lane that returned or
    took another branch is a fault naming the lines); the last to arrive computes for all, with
    the ISA's fragment layouts for mma.sync and ldmatrix. WMMA's element-to-position mapping,
    unspecified in CUDA, is fixed here and written up in wmma.h (it follows mma.sync's registers;
    a __half a/b fragment holds each value twice, in x[e] and x[e + 8], and mma_sync faults if a
    kernel changed one copy and not the other). Fragments start as NaN, so one used before it is
    filled or loaded shows.
  - Rounding model, for mma.sync and wmma::mma_sync alike: the 16-bit inputs become float32
    exactly, every product a*b is exact in float32 (11 + 11 significant bits for f16, 8 + 8 for
    bf16), and d = c + a0*b0 + a1*b1 + ... is summed in float32, rounded to nearest after each
    addition, in k order (k = 0 .. K-1 of the instruction, starting from the accumulator c).
    A chain of instructions therefore equals one float32 sum in k order, which the tests
    reproduce in NumPy bit for bit. A tensor core also multiplies exactly but adds several
    products at once with its own alignment and internal precision, so a GPU's result may differ
    in the last bits: tests/test_gpu_mma.py bounds the difference by 2^-16 * (|c| + sum |a*b|)
    per element (seen on an H100: at most 2^-21 of that, 36-42% of elements bit-identical).
  - WMMA loads and stores take one pointer, ldm and layout for the whole warp (lanes that differ
    are a fault); ldm must be a multiple of 8 elements for 16-bit types and of 4 for float; the
    whole tile (15 * ldm + 16 elements) must lie in one array argument (cpu/runtime.py hands the
    buffers to cudaemu_set_arrays before each launch), the block's shared memory or a __device__
    variable, else a fault names the line and how far it overruns; a load of shared memory that a
    cp.async has not delivered yet is a fault naming both lines. CUDA's 256-bit pointer
    alignment is not checked (the emulator places arrays differently from a GPU).
  - Shared addresses (__cvta_generic_to_shared, cvta.to.shared) are a window of their own: static
    __shared__ variables from 0x10000 (host address kept modulo 128), dynamic shared memory from
    0x40000, unmapped around both; ldmatrix and cp.async fault with the line on an address outside
    shared memory or misaligned (16 bytes for an ldmatrix row, the copy size for cp.async). The
    static part covers every kernel's __shared__ variables of the module, as they share a section.
  - cp.async reads its source when issued (a bad source faults at its line: near an array, as an
    out-of-bounds read of it; far from every array, as an address in none of them), fills its destination
    with CUDAEMU_ASYNC_POISON32 (NaN as half, bfloat16 and float) and writes it when a wait of the
    issuing thread covers its group: wait_group N completes all but the N most recent committed
    groups, wait_all everything (uncommitted copies too); a thread's leftovers complete when it
    ends. An ldmatrix of a row still in flight is a fault naming both lines. So is an ldmatrix (or a
    wmma load) of a row another thread's copy landed in, with no barrier passed since that thread's
    wait: a __syncwarp() (or block barrier) for a lane of the same warp, a block barrier (or named
    barrier) for another warp.

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
    shuffled order, and the results must not change (CpuRuntime(race_check='full'|'off')); when
    they do, races.py reruns them in the counting build to name the race as racecheck does (both
    lines, threads, the shared array and element, no __syncthreads between them);
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
