// hopper_abi.h: what the device header emu/hopper.h and emu_runtime.cpp (hopper.inc) share for
// module 10's Hopper instructions: a thread's part of a wgmma, the layout of an emulator tensor
// map, and the instruction codes.
#pragma once

#include <stdint.h>

// One thread's operands of wgmma.mma_async (m64nNk16, f32 accumulators): the descriptors, A's
// four registers when A comes from registers, and its N / 2 accumulators with their addresses
// (the results are written there by the wgmma.wait_group that covers the instruction).
struct __cudaemu_wgmma_lane {
  uint64_t desc_a, desc_b;
  uint32_t a[4];
  const void* a_src[4];    // where A's registers live while the wgmma runs (nullptr: not watched)
  uint32_t scale_d;        // 0: D = A B; otherwise D = A B + D
  uint32_t c[128];         // the accumulators' bits at issue
  float* out[128];         // the variables the accumulators live in
};

// wgmma's parameter word: N (8 .. 256), then flags.
#define CUDAEMU_WGMMA_N_MASK 0x1FF
#define CUDAEMU_WGMMA_BF16 (1 << 9)
#define CUDAEMU_WGMMA_A_REGS (1 << 10)
#define CUDAEMU_WGMMA_TRANS_A (1 << 11)
#define CUDAEMU_WGMMA_TRANS_B (1 << 12)
#define CUDAEMU_WGMMA_NEG_A (1 << 13)
#define CUDAEMU_WGMMA_NEG_B (1 << 14)

// The emulator's tensor map: what cuTensorMapEncodeTiled encodes, in the 128 bytes a kernel takes
// by value. cpu/runtime.py (CpuRuntime.tensor_map) writes it; cp.async.bulk.tensor reads it.
#define CUDAEMU_TMAP_MAGIC 0x50414d524f534e45ull   /* "ENSORMAP" */
struct __cudaemu_tensor_map {
  uint64_t magic;
  uint64_t base;           // the global address of element (0, 0, ...)
  uint32_t rank;           // 1 .. 5
  uint32_t elem_bytes;     // 1, 2, 4 or 8
  uint32_t swizzle;        // bytes of the swizzle span: 0 (none), 32, 64 or 128
  uint32_t pad;
  uint64_t dims[5];        // elements per dimension, innermost first
  uint64_t strides[4];     // bytes between consecutive indices of dimensions 1 .. 4 (0: elem_bytes)
  uint32_t box[5];         // the box, in elements per dimension
  uint32_t pad2;
};
static_assert(sizeof(__cudaemu_tensor_map) == 128, "a tensor map is 128 bytes");
