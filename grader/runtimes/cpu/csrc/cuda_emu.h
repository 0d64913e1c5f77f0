// cuda_emu.h: just enough of CUDA for the host C++ compiler to build a kernel for the CPU emulator.
//
// Written for this course; it is not NVIDIA's header and does not try to be complete. Kernels are
// first compiled by NVRTC (when installed), so these headers may accept a little more than CUDA
// does; they must never accept something with a different meaning. Everything a thread does that
// involves other threads (barriers, warp collectives) calls into emu_runtime.cpp, which switches
// fibers.
//
// The build force-includes this umbrella before the student's code; the content lives in emu/,
// one header per topic, each including what it needs. A new topic goes beside them and is listed
// here. The student's own #include <cuda_fp16.h> ... find the empty stand-ins in include/, except
// <mma.h>, whose stand-in brings in emu/wmma.h (the WMMA API), as only such kernels see it in CUDA.
#pragma once

#include "emu/core.h"                // system headers, helper macros, qualifiers
#include "emu/vector_types.h"        // dim3, float2 ... make_float2 ...
#include "emu/builtins.h"            // threadIdx ..., warpSize, the calls into the runtime
#include "emu/intrinsics.h"          // bit casts, __popc ..., __ldg ..., fences, clock64
#include "emu/math_functions.h"      // min/max, __expf ..., conversions
#include "emu/half.h"                // __half, __half2, __nv_bfloat16
#include "emu/atomics.h"             // atomicAdd, atomicCAS ...
#include "emu/sync.h"                // __syncthreads, shuffles, votes, reductions
#include "emu/checks.h"              // assert, __trap, printf (after every system header)
#include "emu/cooperative_groups.h"  // thread_block, thread_block_tile<N>
#include "emu/ptx.h"                 // inline PTX: operands, shared addresses, conversions
#include "emu/mma.h"                 // inline PTX: mma.sync, ldmatrix
#include "emu/async_copy.h"          // inline PTX: cp.async and its groups
#include "emu/hopper.h"              // inline PTX: wgmma, mbarriers, TMA, named barriers (sm_90a)
#include "emu/launch.h"              // the entry points the build appends for each kernel
