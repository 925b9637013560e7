// The cpu backend's GEMM: C = A B (or C += A B) on strided matrices, for float and double.
// The serial kernels are LIBXSMM's (Debian's libxsmm-dev, built with KTAPE_XSMM) for the
// products they take, and BLIS's (libblis-serial, KTAPE_BLIS) or Eigen's for the rest (see
// GemmLibrary); oneTBB is the only thread pool. gemm() runs on the calling thread; parallel_gemm()
// splits the work as xsmm_tiles (LIBXSMM's) or gemm_tiles (the rest) says. Every matrix is
// (pointer, row stride, column stride); one of the two strides must be 1, so a transpose is a swap
// of strides. Internal to the cpu kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/dtype.hpp"
#include "engine/kernel_abi.hpp"

namespace ktape::kernels {

template <class T>
struct MatRef {
  T* p;
  std::int64_t rs, cs;
  MatRef<T> t() const { return {p, cs, rs}; }  // the transpose
};

// Row-major (rows x cols) storage with row stride ld (>= cols).
template <class T>
MatRef<T> row_major(T* p, std::int64_t ld) {
  return {p, ld, 1};
}

// c (m x n) = a (m x k) * b (k x n), or c += a * b when accumulate. k == 0 zeroes c (or keeps
// it). On the calling thread. A product LIBXSMM takes runs on its kernels, tile by tile of
// xsmm_tiles (a kernel is generated at a shape's first call and kept). Otherwise, with BLIS's
// kernels and `scratch_bytes` of `scratch` (at least
// gemm_scratch(m, n, k, sizeof(T)), e.g. a conv slot's piece of the arena): ktape's blocked
// product in one task, its packs in the scratch. Otherwise (no scratch, or too little) the
// library's own product; steady state allocates nothing there either: Eigen packs on the stack,
// and BLIS takes its packing buffers from a pool that only grows when more calls run at once
// than ever before.
template <class T>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a, MatRef<const T> b,
          MatRef<T> c, bool accumulate, void* scratch = nullptr, std::size_t scratch_bytes = 0);
// The scratch gemm() can use for an m x n x k product (0: none, the library's own product runs).
// Not monotonic in the shape (a smaller product may keep more depth blocks at once): size a
// buffer for every shape it serves.
std::size_t gemm_scratch(std::int64_t m, std::int64_t n, std::int64_t k, std::size_t elem_size);

// The same product, over oneTBB tasks. On LIBXSMM's kernels: one task per tile of xsmm_tiles
// (per tile and depth slice in a deep product, whose slices' partial sums are then added).
// With BLIS's kernels: ktape's blocked product around
// BLIS's micro-kernel (gemm_blis.hpp: operands packed once per depth block by all threads and
// shared, the output's micro-tiles split into as many tasks as the work and the thread count
// give, which even out their ends by taking each other's last units where the depth is one
// block; the same bits at any split). With Eigen's, and for a deep product with too few
// micro-tiles to feed the threads: tiles and depth slices as gemm_tiles says. `scratch` holds
// parallel_gemm_scratch(m, n, k, sizeof(T)) bytes aligned for T (a Function's arena: packed
// panels or partial sums), or is null and the call allocates them.
// The packed panels of an operand that stays unchanged for a while (a loop's weight over one
// run of the loop): the blocked product packs it once into `data` and reuses it while the
// operand's data pointer and `run` are those it was packed for (and `format` says BLIS's packs;
// LIBXSMM's path keeps a row-major copy of a transposed B there, format 1, the same way). Owned by
// a step's context, sized at compile by gemm_pack_cache_bytes (too small: not used).
struct GemmPackCache {
  std::shared_ptr<std::byte[]> storage;
  void* data = nullptr;  // 64-byte aligned, in storage
  std::size_t bytes = 0;
  const void* source = nullptr;
  std::uint64_t run = ~std::uint64_t{0};
  int format = 0;  // what data holds: 0 BLIS's packs, 1 a transposed copy (LIBXSMM's path)
};
// Bytes of packs for operand `which` (0: a, 1: b) of an m x n x k product into a row-major C.
std::size_t gemm_pack_cache_bytes(std::int64_t m, std::int64_t n, std::int64_t k,
                                  std::size_t elem_size, int which);
GemmPackCache make_gemm_pack_cache(std::size_t bytes);
// The caches parallel_gemm may use for a and for b (null: none), and the current run.
struct GemmKeep {
  GemmPackCache* a = nullptr;
  GemmPackCache* b = nullptr;
  std::uint64_t run = 0;
};

// The context of a MatMul step in a loop body with a static operand (ops/layout.cpp).
struct MatMulKeep {
  GemmPackCache a, b;
  const std::uint64_t* loop_run = nullptr;
};

// Called once for each region of C that is final (rows [i0, i1) x columns [j0, j1); together
// they tile C), on the thread that finished it, while it is in that core's cache: a MatMul's
// epilogue (engine/fusion.hpp MatMulEpilogue). That is each tile on one thread, and on several
// only where the tiles are whole rows of C (a band finished by several cores' tiles would be
// read across cores; on two threads of a Xeon VM BM_MlpStep/32/0/2 took 0.367 ms this way against
// 0.388 for /32/7/2, every epilogue after its product: medians of 20 interleaved repetitions).
// Otherwise
// (and on the blocked product, which has no such regions) after the product, over row bands
// split by the grain policy.
struct GemmDone {
  void* obj;
  void (*call)(void*, std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1);
  double cost_per_element;  // of the call's work, in engine/parallel.hpp's units
  void operator()(std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) const {
    call(obj, i0, i1, j0, j1);
  }
};

template <class T>
void parallel_gemm(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a,
                   MatRef<const T> b, MatRef<T> c, bool accumulate, void* scratch = nullptr,
                   const GemmKeep* keep = nullptr, const GemmDone* done = nullptr);

// Products that share their right operand, C_i = A_i B (C_i m_i x n, A_i m_i x k; up to
// kMaxGemmParts): the weight gradients a loop hoists over one stacked gradient (h^T dZ and
// x^T dZ). With BLIS's kernels, one blocked product whose packs of B serve every part (B is
// read and packed once, not once per product). On LIBXSMM's: parts one slice deep, every
// part's tiles in one parallel region; deep parts cut alike (each part's rows one tile, the same
// columns and depth slices), each task's tile and slice for every part in turn, so that the
// first part brings B's panel into cache for the others; other deep parts one after the other.
// Otherwise each as parallel_gemm runs it. Every C_i is the same bits as parallel_gemm gives it,
// at any thread count. `scratch` holds parallel_gemm_shared_b_scratch(...) bytes aligned for T,
// or is null and the call allocates.
constexpr int kMaxGemmParts = 4;
template <class T>
struct GemmPart {
  std::int64_t m;
  MatRef<const T> a;
  MatRef<T> c;
};
template <class T>
void parallel_gemm_shared_b(const GemmPart<T>* parts, int count, std::int64_t n, std::int64_t k,
                            MatRef<const T> b, void* scratch = nullptr);
std::size_t parallel_gemm_shared_b_scratch(const std::int64_t* ms, int count, std::int64_t n,
                                           std::int64_t k, std::size_t elem_size);
// The cpu kernel of two MatMul nodes sharing their right operand (OpDef::pair): in = the first
// node's (a0, b), the second's (a1, b), then its output; out = the first's output. Null for a
// dtype without one.
KernelFn matmul_shared_b_kernel(DType dtype);
// The cpu kernel of a MatMul with an epilogue (Backend::matmul_epilogue); null for a dtype
// without one.
KernelFn matmul_epilogue_kernel(DType dtype);

// The tiled split of parallel_gemm, a function of the shape alone (never of the thread count: a
// tile's sums depend on its extent in both libraries, so the same inputs give the same bits at
// any thread count). Tiles of C are at least 64 x 64 (or the whole dimension) and ~1 MFLOP, as
// many as it takes to reach 64 tasks, so that 16 to 64 cores have work. A deep product
// (k >= 1024: a weight gradient summed over a long batch, a loop's hoisted weight gradient)
// keeps its tiles at least 128 x 128 and cuts its depth into `chunks` slices of at least 512
// (a power of two) instead; it goes down to 64-wide tiles only while it has fewer than 16 tasks.
// 64-row tiles of such a product re-pack the long panels of the other operand: 10-18 % slower
// at 128x3584x512 on 1 and 2 threads. The slices' products are summed into C in slice order.
// Tasks take the tiles column block by column block when `by_columns` (each thread's run of
// consecutive tasks then shares panels of B), else row band by row band (panels of A): see
// tiles_by_columns.
struct GemmTiles {
  std::int64_t rows, cols, chunks = 1;
  bool by_columns = false;
};
// Whether an m x n x k product's tasks take its tiles by columns: when B is larger than A and C
// together (k n > m (k + n)), as in an MLP's first layer, x W with W 784 x 256; a thread's
// consecutive tasks then read fewer of B's lines, which on several threads are often last
// written by another core (the weight's update). Otherwise by rows, so that C's row bands
// (which the next elementwise pass splits by) stay with the thread that wrote them, as an
// LSTM's gate sums h U at batch 128 do for the cell pass. The order never changes a bit. Measured
// on two threads of a Xeon VM: BM_MlpStep/128/0/2 against /128/6/2 (every product by rows), 20
// repetitions interleaved, 0.870 ms against 0.931 (median); per call (a per-step timer) x W1 330
// us by columns against 422 by rows. Unchanged: one thread, the MLP at batch 32, the LSTM's step
// at batch 128 (h U by columns was no faster) and at 32 (where h U and dZ U^T go by columns). On
// one thread a band of C's rows then finishes with the last column block (MatMul epilogues run
// band by band there).
bool tiles_by_columns(std::int64_t m, std::int64_t n, std::int64_t k);
// For benchmarks that compare against the earlier schedules (BM_MlpStep's variants 6 and 7,
// BM_LstmStep's 2): with `by_columns` false every product takes its tiles by rows; with
// `whole_rows` false an epilogue on several threads always runs after its product (see
// GemmDone); with `parts_together` false deep products sharing B run one after the other (see
// parallel_gemm_shared_b). All default to true. None changes a bit; set them while no product
// runs.
void set_gemm_schedule(bool by_columns, bool whole_rows, bool parts_together = true);
GemmTiles gemm_tiles(std::int64_t m, std::int64_t n, std::int64_t k);
std::size_t parallel_gemm_scratch(std::int64_t m, std::int64_t n, std::int64_t k,
                                  std::size_t elem_size);

// The most bytes of packed operands the blocked product keeps at once, so that one parallel region
// runs several depth blocks (default 2 MiB). Scratch sizes follow it: change it only before any
// Function is compiled (tests do, to reach several regions with small products).
void set_gemm_pack_budget(std::int64_t bytes);
// How many units of work (a row block against a column panel) the blocked product's tasks have
// taken from other tasks, since the start; 0 without BLIS. For tests.
std::uint64_t gemm_units_taken();

// The serial kernels. xsmm: LIBXSMM's (Debian's libxsmm-dev, built with KTAPE_XSMM) for every
// product it takes (the operand read along C's unit stride laid out that way: a row-major
// product's right operand not transposed, or copied so when it is and fits 4 MiB), in tiles
// from xsmm_tiles; BLIS or Eigen, as below, for the rest. blis: BLIS when the build has it
// (KTAPE_BLIS) and BLIS has kernels for this CPU (its own choice, or skx / haswell by the CPU's
// instruction sets where BLIS 0.9 does not know the model, see gemm_blis.cpp), else Eigen's. eigen:
// Eigen's. The default is the first of the three that this build and CPU have (LIBXSMM needs AVX2).
// Benchmarks and tests switch between them; a switch while kernels run is not supported. false =
// not built in (or, for xsmm, no vector kernels for this CPU).
enum class GemmLibrary { blis, eigen, xsmm };
GemmLibrary gemm_library();
bool set_gemm_library(GemmLibrary lib);
const char* gemm_library_name(GemmLibrary lib);
// Applies KTAPE_GEMM ('xsmm', 'blis' or 'eigen'; empty or unset: the default) as
// set_gemm_library would; another value, or a library this build or CPU lacks, is a ValueError
// naming it. The cpu backend calls this when it is first used.
void apply_gemm_environment();
// The library and its kernel set: "xsmm cpx, blis skx", "blis skx", "blis skx (by ktape)",
// "eigen".
std::string gemm_kernel_name(GemmLibrary lib);

// LIBXSMM's split of an m x n x k product into tiles of C, a function of the shape alone (so
// the bits do not depend on the thread count): the tile's extent along C's unit stride
// (`unit_cols`: a row-major C) is halved until that many rows of the operand read along it, one
// depth block deep (xsmm_depth), fit 256 KiB (the kernel reads them once per few lines of the
// other side), then the larger side is halved (to multiples of 16, not below 32, or 64 where
// LIBXSMM reads the operand across C's unit stride `transposed`: its kernels for that slow down
// below 64, 151 against 231 GFLOP/s at 32 x 32; each tile at least ~1 MFLOP) until there are 64
// tiles, so that 16 to 64 cores have work. A deep product (k >= 1024: a weight gradient over a
// long batch, a loop's hoisted weight gradient) keeps wide tiles instead (the other side at
// most 128) and cuts its depth into `chunks` slices of whole depth blocks, at least two each but
// the last, none empty, towards 64 tasks (their partial sums at most 4 MiB); its tiles are
// halved only while it has fewer than 8 tasks. At
// 128x3584x512 with A transposed (an LSTM's dU = h^T dZ), 64 x 64 tiles in blocks of 512 ran at
// 91 GFLOP/s on one core of a Xeon (Emerald Rapids), 128 x 256 tiles in blocks of 256, in seven
// slices, at 122. parallel_gemm adds the slices' partial sums into C in slice order; gemm(), on
// one thread, sums each tile's whole depth into C.
GemmTiles xsmm_tiles(std::int64_t m, std::int64_t n, std::int64_t k, bool unit_cols,
                     std::size_t elem_size, bool transposed);
// The depth of a LIBXSMM tile's blocks (run in order, each added into C): k below 1024, else
// about 256 (equal blocks), so that the panels a kernel reads across the depth stay in L2.
std::int64_t xsmm_depth(std::int64_t k);
// How many tiles (a deep product's tile-and-slice tasks) LIBXSMM's kernels have computed,
// since the start; 0 without it. For tests.
std::uint64_t gemm_xsmm_tiles();

// dst (cols x rows, row-major with row stride ld) = the transpose of src (rows x cols,
// row-major with row stride rs): over oneTBB tasks of whole rows of dst (the grain policy), in
// blocks transposed in registers.
template <class T>
void parallel_transpose(const T* src, std::int64_t rs, std::int64_t rows, std::int64_t cols, T* dst,
                        std::int64_t ld);

// The blocked product's packing of one micro-panel (gemm_pack.hpp), compiled as the kernels
// are; for tests. Element (r, p) of the source, at src[r * rs + p * cs] for r < rows and p < kc,
// goes to dst[p * packw + r]; rows [rows, fill) of each depth are zeroed, the rest untouched.
template <class T>
void pack_micro_panel(const T* src, std::int64_t rs, std::int64_t cs, std::int64_t rows,
                      std::int64_t kc, std::int64_t packw, std::int64_t fill, T* dst);

}  // namespace ktape::kernels
