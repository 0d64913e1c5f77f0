// emu/mma.h: the warp-wide tensor-core instructions of inline PTX, mma.sync (m16n8k16 and
// m16n8k8, f16 or bf16 inputs, f32 accumulators) and ldmatrix (m8n8 .x1/.x2/.x4, .trans), with the
// register layouts of the PTX ISA ("Matrix fragments for mma.m16n8k16", "ldmatrix").
//
// Each lane arrives with its registers; emu_runtime.cpp's __cudaemu_warp_gather waits until the
// 32 lanes of the warp are there (a lane that never comes is a fault naming the line, as for a
// shuffle), checks that they are at the same instruction, and the last to arrive computes for all.
#pragma once

#include "ptx.h"

// The registers of one lane: A (4 .b32, each two 16-bit elements, the lower index in the low
// half), B (2 .b32), C and D (4 .f32 as bits). m16n8k8 uses a[0..1] and b[0].
struct __cudaemu_mma_lane {
  unsigned a[4], b[2], c[4], d[4];
};

namespace __cudaemu_ptx {
enum { MMA_BF16 = 1, MMA_K8 = 2 };

__CUDAEMU_INLINE float elem16(unsigned bits, bool bf16) {
  unsigned short h = (unsigned short)bits;
  return bf16 ? f32((u64)h << 16) : __cudaemu_h2f(h);
}

// Lane l is thread t = l % 4 of group g = l / 4.
//   A 16 x K, row-major: a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
//   B K x 8, "col":      b[0] = (2t..2t+1, g), b[1] = (2t+8..2t+9, g)
//   C, D 16 x 8:         c[0], c[1] = (g, 2t), (g, 2t+1); c[2], c[3] = (g+8, 2t), (g+8, 2t+1)
static inline void mma_complete(void* const* lanes, int variant, const char*, int) {
  const bool bf16 = variant & MMA_BF16;
  const int K = (variant & MMA_K8) ? 8 : 16;
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    const __cudaemu_mma_lane* m = (const __cudaemu_mma_lane*)lanes[l];
    const int g = l >> 2, t = l & 3;
    const int na = K / 4;  // A registers: 4 for k16, 2 for k8
    for (int i = 0; i < na; ++i) {
      const int row = g + ((i & 1) ? 8 : 0), col = 2 * t + ((i & 2) ? 8 : 0);
      A[row][col] = elem16(m->a[i], bf16);
      A[row][col + 1] = elem16(m->a[i] >> 16, bf16);
    }
    for (int i = 0; i < K / 8; ++i) {
      const int k = 2 * t + 8 * i;
      B[k][g] = elem16(m->b[i], bf16);
      B[k + 1][g] = elem16(m->b[i] >> 16, bf16);
    }
    for (int i = 0; i < 4; ++i) C[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)] = f32(m->c[i]);
  }
  // Products of 16-bit values are exact in float; the sum runs in float32, in k order (a GPU
  // may add in another order, so the last bits can differ).
  float D[16][8];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float acc = C[i][j];
      for (int k = 0; k < K; ++k) acc += A[i][k] * B[k][j];
      D[i][j] = acc;
    }
  for (int l = 0; l < 32; ++l) {
    __cudaemu_mma_lane* m = (__cudaemu_mma_lane*)lanes[l];
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; ++i) m->d[i] = (unsigned)f32_bits(D[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)]);
  }
}

__CUDAEMU_INLINE void mma(int variant, __cudaemu_mma_lane* m, const char* file, int line) {
  __cudaemu_warp_gather(__CUDAEMU_MMA, variant, m, mma_complete, file, line);
}

// ldmatrix: lanes 8i .. 8i+7 give the row addresses (16 bytes each) of matrix i; lane l receives,
// in its register i, row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 of matrix i (lower index in
// the low half); with .trans, of the transposed matrix.
struct ldmatrix_lane {
  const unsigned char* row;  // the host address of the row this lane gives, or null
  unsigned r[4];
};

static inline void ldmatrix_complete(void* const* lanes, int param, const char* file, int line) {
  const int num = param & 7;
  const bool trans = param & 8;
  const unsigned char* rows[4][8];
  for (int i = 0; i < num; ++i)
    for (int j = 0; j < 8; ++j) {
      rows[i][j] = ((const ldmatrix_lane*)lanes[8 * i + j])->row;
      __cudaemu_check_async_pending(rows[i][j], 16, "ldmatrix", file, line);
      __cudaemu_check_landed(rows[i][j], 16, "ldmatrix", file, line);
      __cudaemu_race_read(8 * i + j, rows[i][j], 16, file, line);   // lane 8i + j reads its row
    }
  __cudaemu_collective_copy(1);   // the copying below is one lane's, on every lane's behalf
  for (int l = 0; l < 32; ++l) {
    ldmatrix_lane* me = (ldmatrix_lane*)lanes[l];
    const int a = l / 4, b = 2 * (l % 4);
    for (int i = 0; i < num; ++i) {
      unsigned short lo, hi;
      if (!trans) {
        memcpy(&lo, rows[i][a] + 2 * b, 2);
        memcpy(&hi, rows[i][a] + 2 * (b + 1), 2);
      } else {
        memcpy(&lo, rows[i][b] + 2 * a, 2);
        memcpy(&hi, rows[i][b + 1] + 2 * a, 2);
      }
      me->r[i] = (unsigned)lo | ((unsigned)hi << 16);
    }
  }
  __cudaemu_collective_copy(0);
}

// `shared`: the address is in the .shared window (ldmatrix...shared.b16), else generic.
__CUDAEMU_INLINE void ldmatrix(int num, int trans, int shared, u64 addr, unsigned* out,
                               const char* file, int line) {
  ldmatrix_lane me;
  me.row = nullptr;
  if (laneid() < 8 * num) {  // the other lanes' addresses are not used
    me.row = (const unsigned char*)(
        shared ? __cudaemu_shared_ptr(addr, 16, 16, "ldmatrix", file, line)
               : __cudaemu_generic_shared_ptr((const void*)(uintptr_t)addr, 16, 16, "ldmatrix",
                                              file, line));
  }
  __cudaemu_warp_gather(__CUDAEMU_LDMATRIX, num | (trans ? 8 : 0), &me, ldmatrix_complete, file,
                        line);
  for (int i = 0; i < num; ++i) out[i] = me.r[i];
}
}  // namespace __cudaemu_ptx
