// emu/wmma.h: CUDA's WMMA API (<mma.h>, namespace nvcuda::wmma) for the CPU emulator, at the
// shape tensor-core kernels of this course use: m16n16k16 with __half or __nv_bfloat16 inputs and
// float accumulators. A kernel gets it as on a GPU, with `#include <mma.h>` (include/mma.h).
//
//   fragment<matrix_a | matrix_b, 16, 16, 16, __half | __nv_bfloat16, row_major | col_major>
//   fragment<accumulator, 16, 16, 16, float>
//   fill_fragment(f, v)                         every element of this lane's fragment
//   load_matrix_sync(a_or_b, p, ldm)            load_matrix_sync(acc, p, ldm, mem_row_major | mem_col_major)
//   mma_sync(d, a, b, c)                        d = a * b + c
//   store_matrix_sync(p, acc, ldm, mem_row_major | mem_col_major)
//   f.num_elements, f.x[i]                      elementwise access (an accumulator's scaling ...)
//
// Anything else (other shapes, tf32, int8, 4-bit, 1-bit, double, __half accumulators) fails to
// build with a static_assert that build.py turns into a message naming the line.
//
// load_matrix_sync, store_matrix_sync and mma_sync are warp collectives, as on a GPU: the 32
// lanes must all reach the same call (a lane that returned or took another branch is a fault
// naming the line; emu_runtime.cpp's __cudaemu_warp_gather, as for mma.sync). The last lane to
// arrive does the work for all of them. The pointer, ldm and layout must be the same in every
// lane; the pointer may be global or shared but the whole tile (15 * ldm + 16 elements) must lie
// inside one array argument, the block's shared memory or a __device__ variable; ldm must be a
// multiple of 8 for 16-bit elements and of 4 for float (16 bytes). A load of shared memory that a
// cp.async has not yet delivered is a fault naming both lines. (CUDA also asks for a 256-bit
// aligned pointer; the emulator does not check it, since it places arrays differently.)
//
// Arithmetic (mma_sync): the 16-bit inputs are converted to float exactly, each product a * b is
// exact in float (11 + 11 significant bits for __half, 8 + 8 for bf16), and d[i][j] = c[i][j] +
// a[i][0] b[0][j] + a[i][1] b[1][j] + ... + a[i][15] b[15][j] is summed in float32, rounding to
// nearest after each addition, in k order. A tensor core also multiplies exactly but adds in its
// own order and internal precision (it aligns several products at once and may truncate), so a
// GPU's result can differ in the last bits; tests/test_gpu_mma.py compares the two.
//
// Fragment layout. CUDA leaves the mapping of fragment elements to matrix positions unspecified;
// this one is fixed and follows mma.sync.m16n8k16's registers. Lane l is thread t = l % 4 of group
// g = l / 4; element e:
//   accumulator (row, col) and matrix_a (row, k):  (g + 8 ((e >> 1) & 1),  2t + (e & 1) + 8 (e >> 2))
//   matrix_b (k, col):                              (2t + (e & 1) + 8 ((e >> 1) & 1),  g + 8 (e >> 2))
// (accumulator elements 0-3 and 4-7 are the C registers of two m16n8 tiles, columns 0-7 and
// 8-15). bf16 a/b fragments have 8 elements, like the accumulator; __half ones have 16, as CUDA
// declares them: 32 lanes x 16 elements hold each of the 256 values twice, element e + 8 repeating
// element e. A kernel that changes x[e] and not x[e + 8] relies on the unspecified mapping;
// mma_sync reports it. A fragment starts filled with CUDAEMU_ASYNC_POISON32's bits (NaN as half,
// bf16 and float), so one used before it is loaded or filled shows as NaN.
#pragma once

#include "ptx.h"

namespace nvcuda {
namespace wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;
namespace precision {
struct tf32;
}
namespace experimental {
namespace precision {
struct u4;
struct s4;
struct b1;
}  // namespace precision
enum bmmaBitOp { bmmaBitOpXOR = 1, bmmaBitOpAND = 2 };
enum bmmaAccumulateOp { bmmaAccumulateOpPOPC = 1 };
}  // namespace experimental

enum layout_t { mem_row_major, mem_col_major };

template <typename T>
struct helper_traits {
  typedef T element_type;
  typedef T storage_element_type;
  typedef T fill_argument_type;
};

template <typename T, int size, int packed_size = size>
struct __align__(8) __frag_base {
  enum { num_elements = size };
  enum { num_storage_elements = packed_size };
  typedef T element_type;
  typedef typename helper_traits<T>::storage_element_type storage_element_type;
  storage_element_type x[num_storage_elements];
  // Not trivial, unlike CUDA's: an unfilled fragment reads as NaN instead of stack garbage.
  __frag_base() {
    for (int i = 0; i < num_storage_elements; ++i)
      for (size_t b = 0; b < sizeof(storage_element_type); b += 2)
        memcpy((char*)&x[i] + b, "\xA5\x7F", 2);
  }
};

template <typename FragEleType, int size, int packed_size>
inline void fill_fragment(__frag_base<FragEleType, size, packed_size>& f,
                          const typename helper_traits<FragEleType>::fill_argument_type& in) {
  for (int i = 0; i < f.num_storage_elements; i++) f.x[i] = in;
}
}  // namespace wmma
}  // namespace nvcuda

namespace __cudaemu_wmma {
namespace w = nvcuda::wmma;
using __cudaemu_ptx::u64;

template <class...>
struct always_false : std::false_type {};

template <class T>
struct is_16bit : std::integral_constant<bool, std::is_same<T, __half>::value ||
                                                   std::is_same<T, __nv_bfloat16>::value> {};

// What the emulator runs, and how many elements a lane holds.
template <class Use, int m, int n, int k, class T, class Layout>
struct spec {
  static constexpr bool shape = m == 16 && n == 16 && k == 16;
  static constexpr bool ab = std::is_same<Use, w::matrix_a>::value ||
                             std::is_same<Use, w::matrix_b>::value;
  static constexpr bool acc = std::is_same<Use, w::accumulator>::value;
  static constexpr bool type = (ab && is_16bit<T>::value) || (acc && std::is_same<T, float>::value);
  static constexpr bool layout = ab ? (std::is_same<Layout, w::row_major>::value ||
                                       std::is_same<Layout, w::col_major>::value)
                                    : std::is_same<Layout, void>::value;
  static constexpr bool ok = shape && type && layout;
  static constexpr int elements = !ok ? 1 : (ab && std::is_same<T, __half>::value) ? 16 : 8;
};

template <class Use, int m, int n, int k, class T, class Layout, bool ok = spec<Use, m, n, k, T, Layout>::ok>
struct base_for {
  typedef w::__frag_base<T, spec<Use, m, n, k, T, Layout>::elements> type;
};
template <class Use, int m, int n, int k, class T, class Layout>
struct base_for<Use, m, n, k, T, Layout, false> {  // refused below: a placeholder, no cascade
  typedef w::__frag_base<char, 1> type;
};

// The fragment-to-matrix mapping (see the top of this file): element e of lane l, e < 8.
__CUDAEMU_INLINE void pos_ac(int l, int e, int* r, int* c) {  // accumulator, matrix_a
  *r = (l >> 2) + 8 * ((e >> 1) & 1);
  *c = 2 * (l & 3) + (e & 1) + 8 * (e >> 2);
}
__CUDAEMU_INLINE void pos_b(int l, int e, int* r, int* c) {   // matrix_b: (k, n)
  *r = 2 * (l & 3) + (e & 1) + 8 * ((e >> 1) & 1);
  *c = (l >> 2) + 8 * (e >> 2);
}

enum { KIND_A = 0, KIND_B = 1, KIND_C = 2, KIND_STORE = 3, KIND_MMA = 4, KIND_MASK = 7,
       BF16 = 8, HALF = 16 /* 16 elements per a/b fragment */ };

struct lane {
  const void* p;       // load / store: the tile in memory
  unsigned ldm;
  int col;             // column-major (col_major, mem_col_major)
  void* frag;          // load / store: this lane's x[]; mma_sync: d
  const void* a;       // mma_sync
  const void* b;
  const void* c;
};

static const char* const WHAT[] = {"wmma::load_matrix_sync (matrix_a)",
                                   "wmma::load_matrix_sync (matrix_b)",
                                   "wmma::load_matrix_sync (accumulator)",
                                   "wmma::store_matrix_sync", "wmma::mma_sync"};

static __attribute__((noreturn, format(printf, 3, 4))) void fail(const char* file, int line,
                                                                 const char* fmt, ...) {
  char msg[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  __cudaemu_fault(__CUDAEMU_F_PTX, msg, file, line);
}

// The tile at p (16 rows or columns of 16 elements, `ldm` apart) must lie in one buffer.
static inline void check_tile(const lane* me, int kind, int esize, bool store, const char* file,
                              int line) {
  const char* what = WHAT[kind];
  const unsigned mult = esize == 2 ? 8u : 4u;
  if (me->ldm % mult)
    fail(file, line,
         "%s: ldm = %u is not a multiple of %u. CUDA requires the leading dimension of a WMMA "
         "tile to be a multiple of 16 bytes: of 8 elements for __half / __nv_bfloat16, of 4 for "
         "float. Pad the rows of the array (or the shared tile) to such a length.",
         what, me->ldm, mult);
  const unsigned long long n = (15ull * me->ldm + 16ull) * (unsigned)esize;
  const char* p = (const char*)me->p;
  if ((uintptr_t)p % (unsigned)esize)
    fail(file, line, "%s: the pointer is %u bytes past a multiple of its %d-byte elements.", what,
         (unsigned)((uintptr_t)p % (unsigned)esize), esize);
  int arg;
  long long off;
  unsigned long long size;
  const int where = __cudaemu_locate(p, n, &arg, &off, &size);
  const char* layout = me->col ? "column" : "row";
  switch (where) {
    case __CUDAEMU_MEM_SHARED:
      if (!store)
        for (int s = 0; s < 16; ++s)
        {
          __cudaemu_check_async_pending(p + (size_t)s * me->ldm * esize, 16u * esize, what, file,
                                        line);
          __cudaemu_check_landed(p + (size_t)s * me->ldm * esize, 16u * esize, what, file, line);
        }
      return;
    case __CUDAEMU_MEM_ARRAY:
    case __CUDAEMU_MEM_LIBRARY:
      return;
    case __CUDAEMU_MEM_OVERRUN: {
      char buf[160];
      if (arg)
        snprintf(buf, sizeof buf, "array argument %d (%llu bytes)", arg, size);
      else
        snprintf(buf, sizeof buf, "the block's shared memory (%llu bytes there)", size);
      const long long el = (long long)esize, count = (long long)(n / (unsigned)esize);
      if (off < 0)
        fail(file, line,
             "%s: the 16x16 tile (ldm %u, %s-major: %lld elements from its first) starts %lld "
             "element(s) before %s. Check the tile's row/column offset.",
             what, me->ldm, layout, count, -off / el, buf);
      fail(file, line,
           "%s: the 16x16 tile (ldm %u, %s-major: %lld elements from its first) starts at "
           "element %lld of %s and reaches %lld element(s) past its end. The tile's 16 %ss of "
           "16 elements, ldm elements apart, must all be inside the array: check the offset and "
           "ldm, and pad or guard the last partial tile.",
           what, me->ldm, layout, count, off / el, buf,
           (off + (long long)n - (long long)size) / el, layout);
    }
    case __CUDAEMU_MEM_LOCAL:
      fail(file, line,
           "%s: the pointer is a thread's local variable. WMMA loads and stores tiles of "
           "global memory (an array argument) or shared memory, the same tile for the whole "
           "warp.",
           what);
    default:
      fail(file, line,
           "%s: the pointer (a 16x16 tile, ldm %u) is in none of the launch's array "
           "arguments, nor in the block's shared memory: a wild pointer.",
           what, me->ldm);
  }
}

// Every lane must give the same pointer, ldm and layout.
static inline void check_same(void* const* lanes, int kind, const char* file, int line) {
  const lane* l0 = (const lane*)lanes[0];
  for (int l = 1; l < 32; ++l) {
    const lane* o = (const lane*)lanes[l];
    if (o->p == l0->p && o->ldm == l0->ldm && o->col == l0->col) continue;
    int arg;
    long long off;
    unsigned long long size;
    if (__cudaemu_locate(l0->p, 1, &arg, &off, &size) == __CUDAEMU_MEM_LOCAL)
      fail(file, line,
           "%s: the pointer is a local variable of each thread (lanes 0 and %d give different "
           "ones). WMMA loads and stores one tile of global memory (an array argument) or shared "
           "memory, the same for the whole warp.",
           WHAT[kind], l);
    fail(file, line,
           "%s: lane 0 gives a pointer, ldm %u, %s-major, and lane %d %s, ldm %u, %s-major. "
           "WMMA loads and stores one tile for the whole warp: every lane passes the same "
           "pointer, ldm and layout (the fragments divide the tile among the lanes).",
           WHAT[kind], l0->ldm, l0->col ? "column" : "row", l,
           o->p == l0->p ? "the same pointer" : (o->p > l0->p ? "a pointer further on" : "a pointer before it"),
           o->ldm, o->col ? "column" : "row");
  }
}

template <int ESIZE>
static void move_complete(void* const* lanes, int param, const char* file, int line) {
  const int kind = param & KIND_MASK;
  const bool store = kind == KIND_STORE;
  const int elems = (param & HALF) ? 16 : 8;
  check_same(lanes, kind, file, line);
  const lane* l0 = (const lane*)lanes[0];
  check_tile(l0, kind, ESIZE, store, file, line);
  char* base = (char*)l0->p;
  for (int l = 0; l < 32; ++l) {
    char* frag = (char*)((const lane*)lanes[l])->frag;
    for (int e = 0; e < elems; ++e) {
      int r, c;
      if (kind == KIND_B) pos_b(l, e & 7, &r, &c);
      else pos_ac(l, e & 7, &r, &c);
      char* at = base + ((size_t)(l0->col ? c : r) * l0->ldm + (l0->col ? r : c)) * ESIZE;
      if (store) memcpy(at, frag + e * ESIZE, ESIZE);
      else memcpy(frag + e * ESIZE, at, ESIZE);
    }
  }
}

__CUDAEMU_INLINE float value16(const unsigned short* x, bool bf16) {
  return bf16 ? __cudaemu_ptx::f32((u64)x[0] << 16) : __cudaemu_h2f(x[0]);
}

// A (row, k) or B (k, col) from the 32 lanes' fragments, checking __half's two copies.
static inline void gather16(void* const* lanes, int which, int param, float M[16][16],
                            const char* file, int line) {
  const bool bf16 = param & BF16;
  const int elems = (param & HALF) ? 16 : 8;
  for (int l = 0; l < 32; ++l) {
    const lane* me = (const lane*)lanes[l];
    const unsigned short* x = (const unsigned short*)(which ? me->b : me->a);
    for (int e = 0; e < 8; ++e) {
      int r, c;
      if (which) pos_b(l, e, &r, &c);
      else pos_ac(l, e, &r, &c);
      M[r][c] = value16(&x[e], bf16);
    }
    for (int e = 8; e < elems; ++e)
      if (x[e] != x[e - 8])
        fail(file, line,
             "wmma::mma_sync: lane %d's %s fragment holds 0x%04x in element %d but 0x%04x in "
             "element %d. A 16x16x16 __half fragment holds each of its 256 values twice (32 "
             "lanes x 16 elements), and in the emulator elements e and e + 8 are the same matrix "
             "position. Which element is which position is unspecified in CUDA: change all "
             "num_elements elements alike (fill_fragment, or a loop over all of x[]), not some.",
             l, which ? "matrix_b" : "matrix_a", x[e - 8], e - 8, x[e], e);
  }
}

static void mma_complete(void* const* lanes, int param, const char* file, int line) {
  float A[16][16], B[16][16], C[16][16];
  gather16(lanes, 0, param, A, file, line);
  gather16(lanes, 1, param, B, file, line);
  for (int l = 0; l < 32; ++l) {
    const float* c = (const float*)((const lane*)lanes[l])->c;
    for (int e = 0; e < 8; ++e) {
      int r, col;
      pos_ac(l, e, &r, &col);
      C[r][col] = c[e];
    }
  }
  // Exact products, summed in float32 in k order (a tensor core may differ in the last bits).
  float D[16][16];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float acc = C[i][j];
      for (int k = 0; k < 16; ++k) acc += A[i][k] * B[k][j];
      D[i][j] = acc;
    }
  for (int l = 0; l < 32; ++l) {
    float* d = (float*)((const lane*)lanes[l])->frag;
    for (int e = 0; e < 8; ++e) {
      int r, col;
      pos_ac(l, e, &r, &col);
      d[e] = D[r][col];
    }
  }
}

template <class T>
__CUDAEMU_INLINE int type_bits() {
  return std::is_same<T, __nv_bfloat16>::value ? BF16 : std::is_same<T, __half>::value ? HALF : 0;
}

template <class L>
__CUDAEMU_INLINE int col_of() {
  return std::is_same<L, w::col_major>::value ? 1 : 0;
}

template <int ESIZE>
__CUDAEMU_INLINE void move(int op, int param, const void* p, unsigned ldm, int col, void* frag,
                           const char* file, int line) {
  lane me = {p, ldm, col, frag, nullptr, nullptr, nullptr};
  __cudaemu_warp_gather(op, param, &me, move_complete<ESIZE>, file, line);
}
}  // namespace __cudaemu_wmma

namespace nvcuda {
namespace wmma {

template <typename Use, int m, int n, int k, typename T, typename Layout = void>
class fragment : public __cudaemu_wmma::base_for<Use, m, n, k, T, Layout>::type {
  typedef __cudaemu_wmma::spec<Use, m, n, k, T, Layout> S;
  static_assert(S::shape,
                "CPU emulator: WMMA runs only at the shape m16n16k16 here (fragment<..., 16, 16, "
                "16, ...>); m32n8k16, m8n32k16, m16n16k8 (tf32), m8n8k4 (double) and the sub-byte "
                "shapes need a GPU (--backend gpu), or write the tile product with mma.sync in "
                "inline PTX or with loops.");
  static_assert(!S::shape || S::type,
                "CPU emulator: WMMA fragments here hold __half or __nv_bfloat16 (matrix_a, "
                "matrix_b) and float (accumulator); precision::tf32, signed/unsigned char, int, "
                "double, the experimental sub-byte types and __half accumulators need a GPU "
                "(--backend gpu).");
  static_assert(!S::shape || !S::type || S::layout,
                "CPU emulator: a WMMA matrix_a or matrix_b fragment takes a layout (row_major or "
                "col_major) and an accumulator none (load_matrix_sync and store_matrix_sync take "
                "its mem_row_major / mem_col_major), as in CUDA's <mma.h>.");
};

template <typename T, typename L>
inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, L>& a,
                             const typename helper_traits<T>::element_type* p, unsigned ldm,
                             const char* __file = __builtin_FILE(), int __line = __builtin_LINE()) {
  __cudaemu_wmma::move<2>(__CUDAEMU_WMMA_LOAD,
                          __cudaemu_wmma::KIND_A | __cudaemu_wmma::type_bits<T>(), p, ldm,
                          __cudaemu_wmma::col_of<L>(), a.x, __file, __line);
}

template <typename T, typename L>
inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, L>& b,
                             const typename helper_traits<T>::element_type* p, unsigned ldm,
                             const char* __file = __builtin_FILE(), int __line = __builtin_LINE()) {
  __cudaemu_wmma::move<2>(__CUDAEMU_WMMA_LOAD,
                          __cudaemu_wmma::KIND_B | __cudaemu_wmma::type_bits<T>(), p, ldm,
                          __cudaemu_wmma::col_of<L>(), b.x, __file, __line);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& c, const float* p,
                             unsigned ldm, layout_t layout, const char* __file = __builtin_FILE(),
                             int __line = __builtin_LINE()) {
  __cudaemu_wmma::move<4>(__CUDAEMU_WMMA_LOAD, __cudaemu_wmma::KIND_C, p, ldm,
                          layout == mem_col_major ? 1 : 0, c.x, __file, __line);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& c,
                              unsigned ldm, layout_t layout, const char* __file = __builtin_FILE(),
                              int __line = __builtin_LINE()) {
  __cudaemu_wmma::move<4>(__CUDAEMU_WMMA_STORE, __cudaemu_wmma::KIND_STORE, p, ldm,
                          layout == mem_col_major ? 1 : 0, (void*)c.x, __file, __line);
}

template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                     const fragment<matrix_a, 16, 16, 16, T, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c,
                     const char* __file = __builtin_FILE(), int __line = __builtin_LINE()) {
  __cudaemu_wmma::lane me = {nullptr, 0u, 0, d.x, a.x, b.x, c.x};
  __cudaemu_warp_gather(__CUDAEMU_WMMA_MMA,
                        __cudaemu_wmma::KIND_MMA | __cudaemu_wmma::type_bits<T>(), &me,
                        __cudaemu_wmma::mma_complete, __file, __line);
}

// Valid CUDA that the emulator does not run: refused where it is used.
template <typename T = void>
inline float __float_to_tf32(float in) {
  static_assert(__cudaemu_wmma::always_false<T>::value,
                "CPU emulator: WMMA's precision::tf32 (and __float_to_tf32) needs a GPU "
                "(--backend gpu).");
  return in;
}
template <typename... A>
inline void bmma_sync(A&&...) {
  static_assert(__cudaemu_wmma::always_false<A...>::value,
                "CPU emulator: bmma_sync (1-bit WMMA) needs a GPU (--backend gpu).");
}
}  // namespace wmma
}  // namespace nvcuda
