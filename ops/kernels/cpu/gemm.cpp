// The cpu GEMM (see gemm.hpp). LIBXSMM's kernels for the products they take when built with
// KTAPE_XSMM and it has vector code for this CPU: no packing, 1.13-1.85x BLIS's speed at the
// MLP's and LSTM's shapes on one thread (bench BM_Gemm/.../<0 default, 2 BLIS>). BLIS serial
// for the rest when built with KTAPE_BLIS and it has kernels for this CPU: 10-30 % faster than
// Eigen's kernel on an AVX2 machine's shapes, 1.3x on an AVX-512 one, and 2x on a first conv
// layer's thin products. Eigen's otherwise, or when switched to.
#define EIGEN_DONT_PARALLELIZE
#include "ops/kernels/cpu/gemm.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "engine/errors.hpp"
#include "engine/parallel.hpp"

#include <Eigen/Core>
#if KTAPE_BLIS
#include "ops/kernels/cpu/gemm_blis.hpp"
#endif
#if KTAPE_XSMM
#include "ops/kernels/cpu/gemm_xsmm.hpp"
#endif
#include "ops/kernels/cpu/gemm_pack.hpp"

namespace ktape::kernels {

namespace {

// Eigen's packing buffers (a panel x kc block of each operand, kc <= ~320) stay below
// EIGEN_STACK_ALLOCATION_LIMIT when the output is cut into panels of this many rows and
// columns: on the stack, never a heap allocation per call, whatever the layer's width.
template <class T>
std::int64_t panel(std::int64_t depth) {
  const std::int64_t kc = std::clamp<std::int64_t>(depth, 1, 320);
  const auto p = static_cast<std::int64_t>(256 * 1024 / sizeof(T)) / kc;
  return std::max<std::int64_t>(8, p / 8 * 8);
}

template <class T, int Order>
using Map =
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, 0, Eigen::OuterStride<>>;

template <class T, int Order>
auto map(MatRef<T> x, std::int64_t rows, std::int64_t cols) {
  using M = Map<std::remove_const_t<T>, Order>;
  using Mapped = std::conditional_t<std::is_const_v<T>, const M, M>;
  return Mapped(const_cast<std::remove_const_t<T>*>(x.p), rows, cols,
                Eigen::OuterStride<>(Order == Eigen::RowMajor ? x.rs : x.cs));
}

template <class T, int OA, int OB, int OC>
void eigen_gemm(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a,
                MatRef<const T> b, MatRef<T> c, bool acc) {
  const auto A = map<const T, OA>(a, m, k);
  const auto B = map<const T, OB>(b, k, n);
  auto C = map<T, OC>(c, m, n);
  const std::int64_t p = panel<T>(k);
  for (std::int64_t i0 = 0; i0 < m; i0 += p)
    for (std::int64_t j0 = 0; j0 < n; j0 += p) {
      const std::int64_t mi = std::min(p, m - i0), nj = std::min(p, n - j0);
      auto d = C.block(i0, j0, mi, nj);
      if (acc)
        d.noalias() += A.middleRows(i0, mi) * B.middleCols(j0, nj);
      else
        d.noalias() = A.middleRows(i0, mi) * B.middleCols(j0, nj);
    }
}

template <class T>
constexpr int order(MatRef<T> x) {
  return x.cs == 1 ? Eigen::RowMajor : Eigen::ColMajor;
}

template <class T>
void eigen(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a, MatRef<const T> b,
           MatRef<T> c, bool acc) {
  constexpr int R = Eigen::RowMajor, C = Eigen::ColMajor;
  const int oa = order(a), ob = order(b), oc = order(c);
  if (oa == R && ob == R && oc == R) return eigen_gemm<T, R, R, R>(m, n, k, a, b, c, acc);
  if (oa == R && ob == C && oc == R) return eigen_gemm<T, R, C, R>(m, n, k, a, b, c, acc);
  if (oa == C && ob == R && oc == R) return eigen_gemm<T, C, R, R>(m, n, k, a, b, c, acc);
  if (oa == C && ob == C && oc == R) return eigen_gemm<T, C, C, R>(m, n, k, a, b, c, acc);
  // A column-major C is the transposed product: C^T = B^T A^T, all row-major again.
  return eigen<T>(n, m, k, b.t(), a.t(), c.t(), acc);
}

// The library set by set_gemm_library, or kDefault: LIBXSMM when built with it and it generates
// vector code for this CPU, else BLIS when built with it and it has kernels for this CPU, else
// Eigen.
constexpr int kDefault = -1;
std::atomic<int> g_library{kDefault};

// Whether each library is built in and has kernels for this CPU (asked once).
#if KTAPE_BLIS
bool blis_usable() { return blis::has_kernels(); }
#else
bool blis_usable() { return false; }
#endif
#if KTAPE_XSMM
bool xsmm_usable() { return xsmm::available(); }
#else
bool xsmm_usable() { return false; }
#endif

GemmLibrary default_library() {
  return xsmm_usable() ? GemmLibrary::xsmm : blis_usable() ? GemmLibrary::blis : GemmLibrary::eigen;
}

GemmLibrary current_library() {
  const int lib = g_library.load(std::memory_order_relaxed);
  return lib == kDefault ? default_library() : static_cast<GemmLibrary>(lib);
}

// The library for what LIBXSMM does not take (xsmm_takes): BLIS where it has kernels, else Eigen.
GemmLibrary general_library() {
  const GemmLibrary lib = current_library();
  if (lib != GemmLibrary::xsmm) return lib;
  return blis_usable() ? GemmLibrary::blis : GemmLibrary::eigen;
}

std::atomic<std::uint64_t> g_xsmm_tiles{0};  // gemm_xsmm_tiles()

template <class T>
bool xsmm_takes(MatRef<const T> a, MatRef<const T> b, MatRef<T> c) {
#if KTAPE_XSMM
  return current_library() == GemmLibrary::xsmm && xsmm::takes<T>(a, b, c);
#else
  (void)a, (void)b, (void)c;
  return false;
#endif
}

// Whether LIBXSMM reads the operand across C's unit stride transposed (A of a row-major C,
// stored column-major: X^T dY), where its kernels need tiles of 64 or more (xsmm_tiles).
template <class T>
bool xsmm_transposed(MatRef<const T> a, MatRef<const T> b, MatRef<T> c) {
  return c.rs != 1 ? a.cs != 1 : b.rs != 1;
}

// A product this deep (a weight gradient over a long batch) runs on LIBXSMM in depth blocks of
// about 256 and wide tiles, its depth cut into slices for the tasks (xsmm_tiles).
constexpr std::int64_t kXsmmDeep = 1024;
// The least work of a tile (about 4 us of one core's on LIBXSMM), where there is more.
constexpr double kMinTileFlops = 1 << 20;

// A row-major product whose B is stored transposed (dY W^T: B's columns contiguous), small
// enough for B to be copied row-major first (at most kXsmmCopyBytes), then run as LIBXSMM takes
// it (parallel_gemm).
constexpr std::size_t kXsmmCopyBytes = 4 << 20;

bool xsmm_copy_fits(std::int64_t n, std::int64_t k, std::size_t elem_size) {
  return xsmm_usable() && k > 0 &&
         static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(elem_size) <=
             static_cast<double>(kXsmmCopyBytes);
}

template <class T>
bool xsmm_copies_b(std::int64_t n, std::int64_t k, MatRef<const T> b, MatRef<T> c) {
  return current_library() == GemmLibrary::xsmm && c.cs == 1 && c.rs != 1 && b.rs == 1 &&
         b.cs != 1 && xsmm_copy_fits(n, k, sizeof(T));
}

template <class T>
void check_strides(const char* what, MatRef<T> x) {
  if (x.rs != 1 && x.cs != 1)
    throw Error(std::string("gemm: operand ") + what + " has no unit stride");
}

}  // namespace

namespace {

// The product on the calling thread with BLIS or Eigen (general_library()).
template <class T>
void general_gemm(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a,
                  MatRef<const T> b, MatRef<T> c, bool accumulate, void* scratch,
                  std::size_t scratch_bytes) {
#if KTAPE_BLIS
  if (general_library() == GemmLibrary::blis) {
    const std::size_t need = gemm_scratch(m, n, k, sizeof(T));
    if (scratch != nullptr && need > 0 && need <= scratch_bytes && blis::blocked_available<T>()) {
      std::size_t space = need;
      if (std::align(64, need - 64, scratch, space))
        return blis::blocked<T>(m, n, k, a, b, c, accumulate, scratch, nullptr, true);
    }
    return blis::serial<T>(m, n, k, a, b, c, accumulate);
  }
#else
  (void)scratch, (void)scratch_bytes;
#endif
  eigen<T>(m, n, k, a, b, c, accumulate);
}

std::int64_t tile_count(const GemmTiles& t, std::int64_t m, std::int64_t n) {
  return ((m + t.rows - 1) / t.rows) * ((n + t.cols - 1) / t.cols);
}

// The first row and column of tile `tile` of split t of an m x n product, in t's order.
struct TileAt {
  std::int64_t i0, j0;
};
TileAt tile_at(const GemmTiles& t, std::int64_t tile, std::int64_t m, std::int64_t n) {
  if (t.by_columns) {
    const std::int64_t tiles_m = (m + t.rows - 1) / t.rows;
    return {(tile % tiles_m) * t.rows, (tile / tiles_m) * t.cols};
  }
  const std::int64_t tiles_n = (n + t.cols - 1) / t.cols;
  return {(tile / tiles_n) * t.rows, (tile % tiles_n) * t.cols};
}

// Partial sum s > 0 of a product whose depth is cut into slices: the (s - 1)-th m x n matrix
// in `part`, ordered as C is (row-major unless C is column-major).
template <class T>
MatRef<T> slice_sum(T* part, std::int64_t s, std::int64_t m, std::int64_t n, MatRef<T> c) {
  T* p = part + (s - 1) * m * n;
  return c.cs == 1 ? MatRef<T>{p, n, 1} : MatRef<T>{p, 1, m};
}

// C += the partial sums of slices 1 .. t.chunks - 1, in slice order, one task per tile of t.
template <class T>
void add_slices(const GemmTiles& t, std::int64_t m, std::int64_t n, MatRef<T> c, T* part,
                const GemmDone* done = nullptr) {
  if (t.chunks <= 1) return;
  parallel_slots(tile_count(t, m, n), [&](std::int64_t tile) {
    const auto [i0, j0] = tile_at(t, tile, m, n);
    const std::int64_t i1 = std::min(m, i0 + t.rows), j1 = std::min(n, j0 + t.cols);
    for (std::int64_t s = 1; s < t.chunks; ++s) {
      const MatRef<T> p = slice_sum(part, s, m, n, c);
      if (c.cs == 1) {
        for (std::int64_t i = i0; i < i1; ++i)
          for (std::int64_t j = j0; j < j1; ++j) c.p[i * c.rs + j] += p.p[i * p.rs + j];
      } else {
        for (std::int64_t j = j0; j < j1; ++j)
          for (std::int64_t i = i0; i < i1; ++i) c.p[i * c.rs + j * c.cs] += p.p[i + j * p.cs];
      }
    }
    if (done) (*done)(i0, i1, j0, j1);
  });
}

// The region of C that task `task` of split t finished, when its tile is one slice deep
// (deeper tiles finish in add_slices).
void tile_done(const GemmTiles& t, std::int64_t task, std::int64_t m, std::int64_t n,
               const GemmDone* done) {
  if (!done || t.chunks > 1) return;
  const auto [i0, j0] = tile_at(t, task, m, n);
  (*done)(i0, std::min(m, i0 + t.rows), j0, std::min(n, j0 + t.cols));
}

// Task `task` of xsmm_tiles' split t: slice `task % t.chunks` of the depth of tile
// `task / t.chunks`, by LIBXSMM's kernels (or, where it has none, the general library's
// product), in depth blocks of xsmm_depth(k), in order. Slice 0 goes to C (added when
// `accumulate`), slice s > 0 to partial sum s - 1 in `part` (m x n each, ordered as C is), for
// add_slices.
template <class T>
void xsmm_tile(const GemmTiles& t, std::int64_t task, std::int64_t m, std::int64_t n,
               std::int64_t k, MatRef<const T> a, MatRef<const T> b, MatRef<T> c, bool accumulate,
               T* part = nullptr) {
  const std::int64_t tile = task / t.chunks, s = task % t.chunks;
  const auto [i0, j0] = tile_at(t, tile, m, n);
  const std::int64_t mi = std::min(t.rows, m - i0), nj = std::min(t.cols, n - j0);
  const std::int64_t depth = xsmm_depth(k);
  const std::int64_t per_slice = ((k + depth - 1) / depth + t.chunks - 1) / t.chunks * depth;
  const std::int64_t k0 = std::min(k, s * per_slice), k1 = std::min(k, k0 + per_slice);
  const MatRef<T> to = s == 0 ? c : slice_sum(part, s, m, n, c);
  const MatRef<const T> as{a.p + i0 * a.rs, a.rs, a.cs}, bs{b.p + j0 * b.cs, b.rs, b.cs};
  const MatRef<T> cs{to.p + i0 * to.rs + j0 * to.cs, to.rs, to.cs};
  for (std::int64_t p = k0; p < k1; p += depth) {
    const std::int64_t kp = std::min(depth, k1 - p);
    const MatRef<const T> ap{as.p + p * as.cs, as.rs, as.cs}, bp{bs.p + p * bs.rs, bs.rs, bs.cs};
    const bool acc = (s == 0 && accumulate) || p > k0;
#if KTAPE_XSMM
    if (xsmm::run<T>(mi, nj, kp, ap, bp, cs, acc)) continue;
#endif
    general_gemm<T>(mi, nj, kp, ap, bp, cs, acc, nullptr, 0);
  }
  g_xsmm_tiles.fetch_add(1, std::memory_order_relaxed);
}

// Half of a tile's side, rounded up to a multiple of 16.
std::int64_t half_side(std::int64_t s) { return ((s + 1) / 2 + 15) / 16 * 16; }

// Halves t's larger side (the other where that one cannot go) while tasks() < target: to
// half_side, not below min_side, each tile keeping kMinTileFlops as flops(rows, cols) counts.
template <class Tasks, class Flops>
void halve_sides(GemmTiles& t, std::int64_t min_side, std::int64_t target, Tasks&& tasks,
                 Flops&& flops) {
  while (tasks() < target) {
    const std::int64_t r = half_side(t.rows), c = half_side(t.cols);
    const bool can_r = r >= min_side && r < t.rows && flops(r, t.cols) >= kMinTileFlops;
    const bool can_c = c >= min_side && c < t.cols && flops(t.rows, c) >= kMinTileFlops;
    if (can_r && (t.rows >= t.cols || !can_c))
      t.rows = r;
    else if (can_c)
      t.cols = c;
    else
      break;
  }
}

}  // namespace

namespace {
std::atomic<bool> g_by_columns{true}, g_whole_rows{true}, g_parts_together{true};
}  // namespace

void set_gemm_schedule(bool by_columns, bool whole_rows, bool parts_together) {
  g_by_columns.store(by_columns, std::memory_order_relaxed);
  g_whole_rows.store(whole_rows, std::memory_order_relaxed);
  g_parts_together.store(parts_together, std::memory_order_relaxed);
}

bool tiles_by_columns(std::int64_t m, std::int64_t n, std::int64_t k) {
  const double a = double(m) * double(k), b = double(k) * double(n), c = double(m) * double(n);
  return b > a + c && g_by_columns.load(std::memory_order_relaxed);
}

std::int64_t xsmm_depth(std::int64_t k) {
  constexpr std::int64_t kBlock = 256;
  if (k < kXsmmDeep) return std::max<std::int64_t>(k, 1);
  const std::int64_t blocks = (k + kBlock - 1) / kBlock;
  return (k + blocks - 1) / blocks;
}

GemmTiles xsmm_tiles(std::int64_t m, std::int64_t n, std::int64_t k, bool unit_cols,
                     std::size_t elem_size, bool transposed) {
  constexpr std::int64_t kTargetTasks = 64, kDeepSide = 128, kDeepMinTasks = 8;
  constexpr std::int64_t kMinSliceBlocks = 2;
  constexpr double kSliceBytes = 4 << 20;  // the most the partial sums take
  const std::int64_t kMinSide = transposed ? 64 : 32;
  constexpr double kPanelBytes = 256 * 1024;
  GemmTiles t{std::max<std::int64_t>(m, 1), std::max<std::int64_t>(n, 1)};
  t.by_columns = tiles_by_columns(m, n, k);
  if (m <= 0 || n <= 0) return t;  // no tiles (an empty part of products sharing B)
  std::int64_t& along = unit_cols ? t.cols : t.rows;
  const std::int64_t depth = xsmm_depth(k);
  while (along > kMinSide && double(along) * double(depth) * double(elem_size) > kPanelBytes)
    along = std::max(kMinSide, half_side(along));
  if (k < kXsmmDeep) {
    halve_sides(
        t, kMinSide, kTargetTasks, [&] { return tile_count(t, m, n); },
        [&](std::int64_t r, std::int64_t c) { return 2.0 * double(r) * double(c) * double(k); });
    return t;
  }
  // Deep: wide tiles, and slices of whole depth blocks for the tasks.
  std::int64_t& across = unit_cols ? t.rows : t.cols;
  while (across > kDeepSide) across = half_side(across);
  const std::int64_t blocks = (k + depth - 1) / depth;
  const std::int64_t tiles = tile_count(t, m, n);
  const double sum_bytes =  // one partial sum
      double(std::max<std::int64_t>(m, 1)) * double(std::max<std::int64_t>(n, 1)) *
      double(elem_size);
  const std::int64_t chunks = std::clamp<std::int64_t>(
      std::min<std::int64_t>((kTargetTasks + tiles - 1) / tiles,
                             1 + static_cast<std::int64_t>(kSliceBytes / sum_bytes)),
      1, std::max<std::int64_t>(1, blocks / kMinSliceBlocks));
  // Slices of `per` blocks (the last one shorter), and no empty one: xsmm_tile cuts the same.
  const std::int64_t per = (blocks + chunks - 1) / chunks;
  t.chunks = (blocks + per - 1) / per;
  const double slice = double(per * depth);
  halve_sides(
      t, kMinSide, kDeepMinTasks, [&] { return tile_count(t, m, n) * t.chunks; },
      [&](std::int64_t r, std::int64_t c) { return 2.0 * double(r) * double(c) * slice; });
  return t;
}

template <class T>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a, MatRef<const T> b,
          MatRef<T> c, bool accumulate, void* scratch, std::size_t scratch_bytes) {
  if (m <= 0 || n <= 0) return;
  check_strides("a", a);
  check_strides("b", b);
  check_strides("c", c);
  if (k <= 0) {
    if (!accumulate)
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) c.p[i * c.rs + j * c.cs] = T(0);
    return;
  }
  if (xsmm_takes<T>(a, b, c)) {
    GemmTiles t = xsmm_tiles(m, n, k, c.cs == 1, sizeof(T), xsmm_transposed(a, b, c));
    t.chunks = 1;  // on one thread, each tile sums its whole depth into C
    for (std::int64_t tile = 0, count = tile_count(t, m, n); tile < count; ++tile)
      xsmm_tile<T>(t, tile, m, n, k, a, b, c, accumulate);
    return;
  }
  general_gemm<T>(m, n, k, a, b, c, accumulate, scratch, scratch_bytes);
}

std::size_t gemm_scratch(std::int64_t m, std::int64_t n, std::int64_t k, std::size_t elem_size) {
#if KTAPE_BLIS
  if (m > 0 && n > 0 && k > 0 && blis::has_kernels())
    return 64 + (elem_size == sizeof(float) ? blis::blocked_scratch<float>(m, n, k)
                                            : blis::blocked_scratch<double>(m, n, k));
#endif
  (void)m, (void)n, (void)k, (void)elem_size;
  return 0;
}

GemmTiles gemm_tiles(std::int64_t m, std::int64_t n, std::int64_t k) {
  constexpr std::int64_t kMinSide = 64, kDeepSide = 128, kTargetTasks = 64;
  constexpr std::int64_t kDeep = 1024, kMinChunk = 512, kDeepTasks = 16;
  auto count = [](std::int64_t total, std::int64_t part) { return (total + part - 1) / part; };
  GemmTiles t{std::max<std::int64_t>(m, 1), std::max<std::int64_t>(n, 1)};
  t.by_columns = tiles_by_columns(m, n, k);
  auto flops = [&](std::int64_t r, std::int64_t c, std::int64_t chunks) {
    return 2.0 * static_cast<double>(r) * static_cast<double>(c) *
           static_cast<double>(count(k, chunks));
  };
  auto tasks = [&] { return count(m, t.rows) * count(n, t.cols) * t.chunks; };
  auto halve = [&](std::int64_t min_side, std::int64_t target) {
    halve_sides(t, min_side, target, tasks,
                [&](std::int64_t r, std::int64_t c) { return flops(r, c, t.chunks); });
  };
  if (k < kDeep) {
    halve(kMinSide, kTargetTasks);
    return t;
  }
  halve(kDeepSide, kTargetTasks);
  while (tasks() < kTargetTasks && k / (2 * t.chunks) >= kMinChunk &&
         flops(t.rows, t.cols, 2 * t.chunks) >= kMinTileFlops)
    t.chunks *= 2;
  halve(kMinSide, kDeepTasks);
  return t;
}

namespace {

#if KTAPE_BLIS
// BLIS's kernels run the blocked product (gemm_blis.hpp), unless the output has too few
// micro-tiles to feed many threads and the depth can be cut instead (a conv filter gradient
// over a long batch): that goes to the tiles below, with depth slices.
template <class T>
bool use_blocked(std::int64_t m, std::int64_t n, std::int64_t k) {
  return k > 0 && general_library() == GemmLibrary::blis && blis::blocked_available<T>() &&
         !(k >= 1024 && blis::micro_tiles<T>(m, n) < 16);
}
#endif

}  // namespace

namespace {

// The most LIBXSMM's depth slices of an m x n x k product take, for any strides of the operands.
std::size_t xsmm_slice_bytes(std::int64_t m, std::int64_t n, std::int64_t k,
                             std::size_t elem_size) {
  std::size_t bytes = 0;
  if (m > 0 && n > 0 && xsmm_usable())
    for (const bool unit_cols : {false, true})
      for (const bool transposed : {false, true}) {
        const GemmTiles t = xsmm_tiles(m, n, k, unit_cols, elem_size, transposed);
        bytes = std::max(bytes, static_cast<std::size_t>((t.chunks - 1) * m * n) * elem_size);
      }
  return bytes;
}

}  // namespace

std::size_t parallel_gemm_scratch(std::int64_t m, std::int64_t n, std::int64_t k,
                                  std::size_t elem_size) {
  if (m <= 0 || n <= 0) return 0;
  auto slices = [&](const GemmTiles& t) {
    return static_cast<std::size_t>((t.chunks - 1) * m * n) * elem_size;
  };
  const std::size_t xsmm_slices = xsmm_slice_bytes(m, n, k, elem_size);
  std::size_t bytes = std::max(slices(gemm_tiles(m, n, k)), xsmm_slices);
  if (xsmm_copy_fits(n, k, elem_size))  // B copied row-major (xsmm_copies_b), then the slices
    bytes = std::max(bytes, 64 + static_cast<std::size_t>(n * k) * elem_size + xsmm_slices);
#if KTAPE_BLIS
  // Either path may run (the library can be switched after a plan is compiled).
  if (blis::has_kernels())
    bytes =
        std::max(bytes, 64 + (elem_size == sizeof(float) ? blis::blocked_scratch<float>(m, n, k)
                                                         : blis::blocked_scratch<double>(m, n, k)));
#endif
  return bytes;
}

namespace {

// Whether a call may run on several threads: its arena's and oneTBB's global limit (read under a
// lock: only when the arena has several threads).
bool several_threads() {
  return tbb::this_task_arena::max_concurrency() > 1 &&
         tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism) > 1;
}

// The regions parallel_gemm reports to `done` as they finish: all of them on one thread; on
// several only whole rows (tiles as wide as C), which the thread that computed them takes on
// while they are in its cache. Otherwise null, and rows_after reports C after the product.
const GemmDone* as_finished(const GemmDone* done, const GemmTiles& t, std::int64_t n) {
  const bool whole_rows = t.cols >= n && g_whole_rows.load(std::memory_order_relaxed);
  return done && (whole_rows || !several_threads()) ? done : nullptr;
}

// C's rows in bands split by the grain policy, after the product.
void rows_after(std::int64_t m, std::int64_t n, const GemmDone* done) {
  if (done)
    parallel_for(
        m, static_cast<double>(n) * done->cost_per_element,
        [&](std::int64_t i0, std::int64_t i1) { (*done)(i0, i1, 0, n); }, 1);
}

}  // namespace

template <class T>
void parallel_gemm(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a,
                   MatRef<const T> b, MatRef<T> c, bool accumulate, void* scratch,
                   const GemmKeep* keep, const GemmDone* done) {
  if (m <= 0 || n <= 0) return;
  check_strides("a", a);
  check_strides("b", b);
  check_strides("c", c);
  // The partial sums of depth slices (chunks > 1): after `offset` bytes of the scratch, or
  // allocated when the caller gave none (not a Function's call).
  std::vector<T> own;
  auto slices = [&](const GemmTiles& t, std::size_t offset) -> T* {
    if (t.chunks <= 1) return nullptr;
    if (scratch != nullptr) return reinterpret_cast<T*>(static_cast<char*>(scratch) + offset);
    own.resize(static_cast<std::size_t>((t.chunks - 1) * m * n));
    return own.data();
  };
  const bool xsmm = k > 0 && xsmm_takes<T>(a, b, c);
  if (xsmm) {
    const GemmTiles t = xsmm_tiles(m, n, k, c.cs == 1, sizeof(T), xsmm_transposed(a, b, c));
    T* const part = slices(t, 0);
    const GemmDone* const each = as_finished(done, t, n);
    parallel_slots(tile_count(t, m, n) * t.chunks, [&](std::int64_t task) {
      xsmm_tile<T>(t, task, m, n, k, a, b, c, accumulate, part);
      tile_done(t, task, m, n, each);
    });
    add_slices<T>(t, m, n, c, part, each);
    return rows_after(m, n, each ? nullptr : done);
  }
  if (xsmm_copies_b<T>(n, k, b, c)) {
    // B copied row-major: into the kept copy of a loop's weight (copied on the run's first
    // step), else into the scratch (its first bytes; the partial sums after them).
    T* bt = nullptr;
    bool ready = false;
    const std::size_t need = static_cast<std::size_t>(n * k) * sizeof(T);
    std::size_t after = 0;  // the scratch's bytes the copy takes
    const GemmTiles t = xsmm_tiles(m, n, k, true, sizeof(T), a.cs != 1);  // (C is row-major)
    const std::size_t part_bytes = static_cast<std::size_t>((t.chunks - 1) * m * n) * sizeof(T);
    GemmPackCache* const cache = keep ? keep->b : nullptr;
    if (cache != nullptr && cache->data != nullptr && cache->bytes >= need) {
      bt = static_cast<T*>(cache->data);
      ready = cache->format == 1 && cache->source == b.p && cache->run == keep->run;
    } else if (scratch != nullptr) {
      std::size_t space = parallel_gemm_scratch(m, n, k, sizeof(T));
      void* at = scratch;
      if (space >= need + part_bytes + 64 && std::align(64, need, at, space)) {
        bt = static_cast<T*>(at);
        after =
            static_cast<std::size_t>(static_cast<char*>(at) - static_cast<char*>(scratch)) + need;
      }
    }
    std::vector<T> own_copy;  // no scratch given (not a Function's call): the same path, allocated
    if (bt == nullptr && scratch == nullptr && cache == nullptr) {
      own_copy.resize(static_cast<std::size_t>(n * k));
      bt = own_copy.data();
    }
    if (bt != nullptr) {
      if (!ready) parallel_transpose<T>(b.p, b.cs, n, k, bt, n);  // B^T (n x k) -> B (k x n)
      if (cache != nullptr && bt == cache->data) {
        cache->source = b.p;
        cache->run = keep->run;
        cache->format = 1;
      }
      const MatRef<const T> bc{bt, n, 1};
      T* const part = slices(t, after);
      const GemmDone* const each = as_finished(done, t, n);
      parallel_slots(tile_count(t, m, n) * t.chunks, [&](std::int64_t task) {
        xsmm_tile<T>(t, task, m, n, k, a, bc, c, accumulate, part);
        tile_done(t, task, m, n, each);
      });
      add_slices<T>(t, m, n, c, part, each);
      return rows_after(m, n, each ? nullptr : done);
    }
  }
#if KTAPE_BLIS
  if (!xsmm && use_blocked<T>(m, n, k)) {
    if (scratch != nullptr) {  // 64-byte lines for the packed panels, whatever the arena gave
      std::size_t space = parallel_gemm_scratch(m, n, k, sizeof(T));
      if (space < 64 + blis::blocked_scratch<T>(m, n, k) ||
          !std::align(64, space - 64, scratch, space))
        scratch = nullptr;  // not sized for it: the call allocates
    }
    blis::blocked<T>(m, n, k, a, b, c, accumulate, scratch, keep);
    return rows_after(m, n, done);  // no final regions inside the blocked product
  }
#endif
  const GemmTiles t = gemm_tiles(m, n, k);
  const std::int64_t depth = (k + t.chunks - 1) / t.chunks;
  T* const part = slices(t, 0);
  const GemmDone* const each = as_finished(done, t, n);
  parallel_slots(tile_count(t, m, n) * t.chunks, [&](std::int64_t task) {
    const std::int64_t tile = task / t.chunks, s = task % t.chunks;
    const auto [i0, j0] = tile_at(t, tile, m, n);
    const std::int64_t mi = std::min(t.rows, m - i0), nj = std::min(t.cols, n - j0);
    const std::int64_t k0 = s * depth, kk = std::min(depth, k - k0);
    const MatRef<const T> as{a.p + i0 * a.rs + k0 * a.cs, a.rs, a.cs};
    const MatRef<const T> bs{b.p + k0 * b.rs + j0 * b.cs, b.rs, b.cs};
    const MatRef<T> to = s == 0 ? c : slice_sum(part, s, m, n, c);
    gemm<T>(mi, nj, kk, as, bs, {to.p + i0 * to.rs + j0 * to.cs, to.rs, to.cs},
            s == 0 && accumulate);
    tile_done(t, task, m, n, each);
  });
  add_slices<T>(t, m, n, c, part, each);
  rows_after(m, n, each ? nullptr : done);
}

std::size_t parallel_gemm_shared_b_scratch(const std::int64_t* ms, int count, std::int64_t n,
                                           std::int64_t k, std::size_t elem_size) {
  std::size_t bytes = 0, sums = 0;
  for (int s = 0; s < count; ++s) {
    bytes = std::max(bytes, parallel_gemm_scratch(ms[s], n, k, elem_size));
    sums += xsmm_slice_bytes(ms[s], n, k, elem_size);  // deep parts cut alike, side by side
  }
  bytes = std::max(bytes, sums);
#if KTAPE_BLIS
  if (blis::has_kernels())  // either path may run, as in parallel_gemm_scratch
    bytes = std::max(bytes, 64 + (elem_size == sizeof(float)
                                      ? blis::blocked_parts_scratch<float>(ms, count, n, k)
                                      : blis::blocked_parts_scratch<double>(ms, count, n, k)));
#endif
  return bytes;
}

template <class T>
void parallel_gemm_shared_b(const GemmPart<T>* parts, int count, std::int64_t n, std::int64_t k,
                            MatRef<const T> b, void* scratch) {
  if (count < 1 || count > kMaxGemmParts)
    throw Error("gemm: " + std::to_string(count) + " products sharing an operand (1 to " +
                std::to_string(kMaxGemmParts) + ")");
  check_strides("b", b);
  std::int64_t ms[kMaxGemmParts], m = 0;
  for (int s = 0; s < count; ++s) {
    check_strides("a", parts[s].a);
    check_strides("c", parts[s].c);
    ms[s] = std::max<std::int64_t>(parts[s].m, 0);
    m += ms[s];
  }
  // On LIBXSMM's kernels: every part's tiles in one parallel region (nothing is packed, so the
  // parts share no work), unless a part is deep enough to cut its depth into slices (then deep
  // parts cut alike run side by side, below; others each as parallel_gemm runs it, one after the
  // other, reusing the scratch).
  bool xsmm = n > 0 && k > 0;
  for (int s = 0; s < count; ++s) xsmm = xsmm && xsmm_takes<T>(parts[s].a, b, parts[s].c);
  if (xsmm) {
    GemmTiles t[kMaxGemmParts];
    std::int64_t first[kMaxGemmParts + 1] = {0};
    for (int s = 0; s < count; ++s) {
      t[s] = xsmm_tiles(ms[s], n, k, parts[s].c.cs == 1, sizeof(T),
                        xsmm_transposed(parts[s].a, b, parts[s].c));
      first[s + 1] = first[s] + (ms[s] > 0 ? tile_count(t[s], ms[s], n) : 0);
    }
    bool tiled = true;  // as parallel_gemm would run each part alone (the same bits)
    for (int s = 0; s < count; ++s) tiled = tiled && (ms[s] == 0 || t[s].chunks == 1);
    if (tiled) {
      auto run = [&](std::int64_t tile) {
        int s = 0;
        while (tile >= first[s + 1]) ++s;
        xsmm_tile<T>(t[s], tile - first[s], ms[s], n, k, parts[s].a, b, parts[s].c, false);
      };
      // Small parts have a tile each: below two tasks' worth of work, one task runs them all.
      if (2.0 * double(m) * double(n) * double(k) < 2 * kMinTileFlops) {
        for (std::int64_t tile = 0; tile < first[count]; ++tile) run(tile);
      } else {
        parallel_slots(first[count], run);
      }
      return;
    }
    // Deep parts cut alike (each part's rows one tile; the same columns and depth slices): a
    // task runs its tile's slice for every part, so the panel of B the first part reads from
    // memory is in cache for the others. The same tiles and sums as each part alone.
    int ref = -1;
    for (int s = 0; s < count; ++s)
      if (ms[s] > 0 && ref < 0) ref = s;
    bool alike = ref >= 0 && g_parts_together.load(std::memory_order_relaxed);
    std::size_t sums = 0;  // the parts' partial sums, one after another
    for (int s = 0; s < count && alike; ++s) {
      if (ms[s] == 0) continue;
      alike = t[s].rows >= ms[s] && t[s].cols == t[ref].cols && t[s].chunks == t[ref].chunks &&
              t[s].by_columns == t[ref].by_columns;
      sums += static_cast<std::size_t>((t[s].chunks - 1) * ms[s] * n);
    }
    if (alike) {
      std::vector<T> own;
      T* part = static_cast<T*>(scratch);
      if (part == nullptr) {
        own.resize(sums);
        part = own.data();
      }
      T* parts_sums[kMaxGemmParts];
      std::size_t at = 0;
      for (int s = 0; s < count; ++s) {
        parts_sums[s] = part + at;
        if (ms[s] > 0) at += static_cast<std::size_t>((t[s].chunks - 1) * ms[s] * n);
      }
      const GemmTiles& tr = t[ref];
      parallel_slots(tile_count(tr, ms[ref], n) * tr.chunks, [&](std::int64_t task) {
        for (int s = 0; s < count; ++s)
          if (ms[s] > 0)
            xsmm_tile<T>(t[s], task, ms[s], n, k, parts[s].a, b, parts[s].c, false, parts_sums[s]);
      });
      for (int s = 0; s < count; ++s)
        if (ms[s] > 0) add_slices<T>(t[s], ms[s], n, parts[s].c, parts_sums[s]);
      return;
    }
  }
#if KTAPE_BLIS
  if (!xsmm && count > 1 && n > 0 && use_blocked<T>(m, n, k)) {
    if (scratch != nullptr) {  // 64-byte lines for the packed panels, whatever the arena gave
      std::size_t space = parallel_gemm_shared_b_scratch(ms, count, n, k, sizeof(T));
      if (space < 64 + blis::blocked_parts_scratch<T>(ms, count, n, k) ||
          !std::align(64, space - 64, scratch, space))
        scratch = nullptr;  // not sized for it: the call allocates
    }
    return blis::blocked_parts<T>(parts, count, n, k, b, scratch);
  }
#endif
  (void)m;
  for (int s = 0; s < count; ++s)
    parallel_gemm<T>(parts[s].m, n, k, parts[s].a, b, parts[s].c, false, scratch);
}

GemmLibrary gemm_library() { return current_library(); }

template <class T>
void parallel_transpose(const T* src, std::int64_t rs, std::int64_t rows, std::int64_t cols, T* dst,
                        std::int64_t ld) {
  // Rows [j0, j1) of dst are columns [j0, j1) of src.
  parallel_for(
      cols, kTransposeCost * static_cast<double>(rows),
      [&](std::int64_t j0, std::int64_t j1) {
        blis::detail::transpose_matrix(src + j0, rs, rows, j1 - j0, ld, dst + j0 * ld);
      },
      16);
}

template <class T>
void pack_micro_panel(const T* src, std::int64_t rs, std::int64_t cs, std::int64_t rows,
                      std::int64_t kc, std::int64_t packw, std::int64_t fill, T* dst) {
  blis::detail::pack_panel(src, rs, cs, rows, kc, packw, fill, dst);
}

std::size_t gemm_pack_cache_bytes(std::int64_t m, std::int64_t n, std::int64_t k,
                                  std::size_t elem_size, int which) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  // B's row-major copy (xsmm_copies_b), or BLIS's packs: either may be kept.
  std::size_t bytes = which == 1 && xsmm_copy_fits(n, k, elem_size)
                          ? static_cast<std::size_t>(n * k) * elem_size
                          : 0;
#if KTAPE_BLIS
  if (blis::has_kernels())
    bytes = std::max(bytes, elem_size == sizeof(float) ? blis::kept_bytes<float>(m, n, k, which)
                                                       : blis::kept_bytes<double>(m, n, k, which));
#endif
  return bytes;
}

GemmPackCache make_gemm_pack_cache(std::size_t bytes) {
  GemmPackCache c;
  if (bytes == 0) return c;
  c.storage =
      std::shared_ptr<std::byte[]>(new std::byte[bytes + 64]);  // bytes has kept_bytes' tail
  void* p = c.storage.get();
  std::size_t space = bytes + 64;
  c.data = std::align(64, bytes, p, space);
  c.bytes = bytes;
  return c;
}

void apply_gemm_environment() {
  const char* env = std::getenv("KTAPE_GEMM");
  if (env == nullptr || *env == '\0') return;
  const std::string v(env);
  if (v != "xsmm" && v != "blis" && v != "eigen")
    throw ValueError(
        "KTAPE_GEMM must be 'xsmm', 'blis' or 'eigen' (or empty for the default), got '" + v + "'");
  const GemmLibrary lib = v == "xsmm"   ? GemmLibrary::xsmm
                          : v == "blis" ? GemmLibrary::blis
                                        : GemmLibrary::eigen;
  if (!set_gemm_library(lib))
    throw ValueError(
        lib == GemmLibrary::blis
            ? "KTAPE_GEMM=blis, but this build of ktape has no BLIS (configured with "
              "-DKTAPE_BLIS=OFF)"
            : "KTAPE_GEMM=xsmm, but this build of ktape has no LIBXSMM (configured with "
              "-DKTAPE_XSMM=OFF) or LIBXSMM has no vector kernels for this CPU");
}

std::uint64_t gemm_xsmm_tiles() { return g_xsmm_tiles.load(std::memory_order_relaxed); }

std::uint64_t gemm_units_taken() {
#if KTAPE_BLIS
  return blis::units_taken();
#else
  return 0;
#endif
}

void set_gemm_pack_budget(std::int64_t bytes) {
#if KTAPE_BLIS
  blis::set_pack_bytes(bytes);
#else
  (void)bytes;
#endif
}

bool set_gemm_library(GemmLibrary lib) {
  if (lib == GemmLibrary::blis && !KTAPE_BLIS) return false;
  if (lib == GemmLibrary::xsmm && !xsmm_usable()) return false;
  g_library.store(static_cast<int>(lib));
  return true;
}

const char* gemm_library_name(GemmLibrary lib) {
  return lib == GemmLibrary::xsmm ? "xsmm" : lib == GemmLibrary::blis ? "blis" : "eigen";
}

std::string gemm_kernel_name(GemmLibrary lib) {
#if KTAPE_XSMM
  if (lib == GemmLibrary::xsmm)
    return "xsmm " + xsmm::kernel_name() + ", " +
           (blis_usable() ? gemm_kernel_name(GemmLibrary::blis) : std::string("eigen"));
#endif
#if KTAPE_BLIS
  if (lib == GemmLibrary::blis) return "blis " + blis::kernel_name();
#endif
  return gemm_library_name(lib);
}

template void gemm<float>(std::int64_t, std::int64_t, std::int64_t, MatRef<const float>,
                          MatRef<const float>, MatRef<float>, bool, void*, std::size_t);
template void gemm<double>(std::int64_t, std::int64_t, std::int64_t, MatRef<const double>,
                           MatRef<const double>, MatRef<double>, bool, void*, std::size_t);
template void parallel_transpose<float>(const float*, std::int64_t, std::int64_t, std::int64_t,
                                        float*, std::int64_t);
template void parallel_transpose<double>(const double*, std::int64_t, std::int64_t, std::int64_t,
                                         double*, std::int64_t);
template void pack_micro_panel<float>(const float*, std::int64_t, std::int64_t, std::int64_t,
                                      std::int64_t, std::int64_t, std::int64_t, float*);
template void pack_micro_panel<double>(const double*, std::int64_t, std::int64_t, std::int64_t,
                                       std::int64_t, std::int64_t, std::int64_t, double*);
template void parallel_gemm<float>(std::int64_t, std::int64_t, std::int64_t, MatRef<const float>,
                                   MatRef<const float>, MatRef<float>, bool, void*, const GemmKeep*,
                                   const GemmDone*);
template void parallel_gemm<double>(std::int64_t, std::int64_t, std::int64_t, MatRef<const double>,
                                    MatRef<const double>, MatRef<double>, bool, void*,
                                    const GemmKeep*, const GemmDone*);
template void parallel_gemm_shared_b<float>(const GemmPart<float>*, int, std::int64_t, std::int64_t,
                                            MatRef<const float>, void*);
template void parallel_gemm_shared_b<double>(const GemmPart<double>*, int, std::int64_t,
                                             std::int64_t, MatRef<const double>, void*);

}  // namespace ktape::kernels
