// The cpu GEMM layer (ops/kernels/cpu/gemm.hpp), both serial kernels (BLIS when built with it,
// Eigen's): every storage order of A, B and C, accumulation, empty depth, tile edges; against a
// plain triple loop in long double (the oracle); the same bits at 1, 2 and 16 threads; the tile
// policy's promises.
#include <gtest/gtest.h>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "ops/kernels/cpu/gemm.hpp"
#if KTAPE_BLIS
#include "ops/kernels/cpu/gemm_blis.hpp"
#endif

namespace {

using ktape::kernels::GemmLibrary;
using ktape::kernels::MatRef;

std::vector<GemmLibrary> libraries() {
  std::vector<GemmLibrary> libs{GemmLibrary::eigen};
  const GemmLibrary saved = ktape::kernels::gemm_library();
  if (ktape::kernels::set_gemm_library(GemmLibrary::blis)) libs.push_back(GemmLibrary::blis);
  if (ktape::kernels::set_gemm_library(GemmLibrary::xsmm)) libs.push_back(GemmLibrary::xsmm);
  ktape::kernels::set_gemm_library(saved);
  return libs;
}

// Restores the build's default kernel when a test ends.
struct UseLibrary {
  GemmLibrary saved = ktape::kernels::gemm_library();
  explicit UseLibrary(GemmLibrary lib) { EXPECT_TRUE(ktape::kernels::set_gemm_library(lib)); }
  ~UseLibrary() { ktape::kernels::set_gemm_library(saved); }
};

// A (rows x cols) matrix stored row- or column-major in a buffer with a padded leading
// dimension (ld = extent + 3), so that strides are not the dense ones.
template <class T>
struct Stored {
  std::int64_t rows, cols;
  bool col_major;
  std::vector<T> buf;
  std::int64_t ld() const { return (col_major ? rows : cols) + 3; }
  Stored(std::int64_t r, std::int64_t c, bool cm, std::mt19937& rng)
      : rows(r), cols(c), col_major(cm) {
    buf.resize(static_cast<std::size_t>((col_major ? c : r) * ld() + 1));
    std::uniform_real_distribution<double> u(-1, 1);
    for (auto& v : buf) v = static_cast<T>(u(rng));
  }
  T& at(std::int64_t i, std::int64_t j) {
    return buf[static_cast<std::size_t>(col_major ? j * ld() + i : i * ld() + j)];
  }
  MatRef<T> ref() {
    return col_major ? MatRef<T>{buf.data(), 1, ld()} : MatRef<T>{buf.data(), ld(), 1};
  }
  MatRef<const T> cref() {
    const MatRef<T> r = ref();
    return {r.p, r.rs, r.cs};
  }
};

// `scratch`: parallel_gemm gets a scratch of parallel_gemm_scratch's size, filled with NaN
// (else it allocates its own).
template <class T>
void check_product(GemmLibrary lib, std::int64_t m, std::int64_t n, std::int64_t k, bool acm,
                   bool bcm, bool ccm, bool accumulate, bool parallel, bool scratch = false) {
  const UseLibrary use(lib);
  std::mt19937 rng(static_cast<unsigned>(m * 131 + n * 17 + k));
  Stored<T> a(m, k, acm, rng), b(k, n, bcm, rng), c(m, n, ccm, rng);
  const std::vector<T> before = c.buf;
  // The exact sums (long double) and, per element, the forward error bound of any summation
  // order in T: (k + 1) * eps * (sum |a_ip b_pj| + |c_ij|).
  std::vector<long double> want(static_cast<std::size_t>(m * n));
  std::vector<double> bound(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      long double s = accumulate ? c.at(i, j) : 0.0L;
      long double mag = accumulate ? std::fabs(static_cast<long double>(c.at(i, j))) : 0.0L;
      for (std::int64_t p = 0; p < k; ++p) {
        const long double t = static_cast<long double>(a.at(i, p)) * b.at(p, j);
        s += t;
        mag += std::fabs(t);
      }
      want[static_cast<std::size_t>(i * n + j)] = s;
      bound[static_cast<std::size_t>(i * n + j)] = static_cast<double>(
          static_cast<long double>(k + 1) * std::numeric_limits<T>::epsilon() * mag);
    }
  // After the scratch's bytes, a canary that must stay.
  const std::size_t scratch_elems =
      (ktape::kernels::parallel_gemm_scratch(m, n, k, sizeof(T)) + sizeof(T) - 1) / sizeof(T);
  std::vector<T> space;
  if (scratch) space.assign(scratch_elems + 16, std::numeric_limits<T>::quiet_NaN());
  for (std::size_t q = scratch_elems; q < space.size(); ++q) space[q] = T(-7);
  if (parallel)
    ktape::kernels::parallel_gemm<T>(m, n, k, a.cref(), b.cref(), c.ref(), accumulate,
                                     scratch ? space.data() : nullptr);
  for (std::size_t q = scratch_elems; q < space.size(); ++q)
    ASSERT_EQ(space[q], T(-7)) << "wrote past the scratch at " << q;
  if (!parallel) ktape::kernels::gemm<T>(m, n, k, a.cref(), b.cref(), c.ref(), accumulate);
  const std::string what = std::string(ktape::kernels::gemm_library_name(lib)) + " " +
                           std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) +
                           (acm ? " A col" : " A row") + (bcm ? " B col" : " B row") +
                           (ccm ? " C col" : " C row") + (accumulate ? " +=" : " =");
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      ASSERT_NEAR(static_cast<double>(c.at(i, j)),
                  static_cast<double>(want[static_cast<std::size_t>(i * n + j)]),
                  bound[static_cast<std::size_t>(i * n + j)])
          << what << " at (" << i << ", " << j << ")";
  // Nothing outside C's elements is written (the padding of each leading dimension).
  std::vector<bool> inside(c.buf.size(), false);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      inside[static_cast<std::size_t>(&c.at(i, j) - c.buf.data())] = true;
  for (std::size_t q = 0; q < c.buf.size(); ++q)
    if (!inside[q]) {
      ASSERT_EQ(c.buf[q], before[q]) << what << ": wrote outside C at " << q;
    }
}

TEST(Gemm, EveryStorageOrderAgainstATripleLoop) {
  for (GemmLibrary lib : libraries())
    for (int layout = 0; layout < 8; ++layout)
      for (bool acc : {false, true}) {
        const bool acm = layout & 1, bcm = layout & 2, ccm = layout & 4;
        check_product<float>(lib, 37, 29, 41, acm, bcm, ccm, acc, false);
        check_product<double>(lib, 37, 29, 41, acm, bcm, ccm, acc, false);
        check_product<double>(lib, 1, 5, 3, acm, bcm, ccm, acc, false);
        check_product<float>(lib, 6, 1, 700, acm, bcm, ccm, acc, false);
      }
}

TEST(Gemm, ParallelTilesMatchTheOracleAtTheirEdges) {
  // Shapes whose tiles end inside a tile (not multiples of 64) in both dimensions, and ones
  // with a single tile.
  for (GemmLibrary lib : libraries())
    for (bool acc : {false, true}) {
      check_product<float>(lib, 200, 333, 130, false, false, false, acc, true);
      check_product<float>(lib, 130, 200, 257, true, false, false, acc, true);
      check_product<double>(lib, 129, 300, 97, false, true, true, acc, true);
      check_product<float>(lib, 3, 4, 5, false, false, false, acc, true);
    }
}

TEST(Gemm, ParallelProductsInEveryLayoutAndDepthBlocks) {
  // The parallel product in every storage order, over several depth blocks (BLIS's KC is 256 or
  // 384) with edge micro-tiles both ways; thin outputs that the blocked product turns to keep
  // their long side along the micro-kernel's rows; and packs that do not all fit the budget
  // (several parallel regions, one or two depth blocks each).
  for (GemmLibrary lib : libraries()) {
    for (int layout = 0; layout < 8; ++layout)
      for (bool acc : {false, true}) {
        const bool acm = layout & 1, bcm = layout & 2, ccm = layout & 4;
        check_product<float>(lib, 67, 45, 530, acm, bcm, ccm, acc, true);
        check_product<double>(lib, 67, 45, 530, acm, bcm, ccm, acc, true);
        check_product<float>(lib, 128, 10, 128, acm, bcm, ccm, acc, true);
        check_product<double>(lib, 10, 128, 200, acm, bcm, ccm, acc, true);
      }
    ktape::kernels::set_gemm_pack_budget(100 << 10);  // one depth block per region
    check_product<float>(lib, 67, 45, 1900, false, true, false, true, true);
    check_product<double>(lib, 67, 45, 1900, true, false, false, false, true);
    ktape::kernels::set_gemm_pack_budget(2 << 20);
  }
}

TEST(Gemm, SplitDepthMatchesTheOracle) {
  // Deep products whose depth parallel_gemm cuts into slices (gemm_tiles().chunks > 1), with a
  // last slice shorter than the others, tiles that end inside C, and every order of C (the
  // partial sums are added through C's strides).
  ASSERT_GT(ktape::kernels::gemm_tiles(130, 70, 1101).chunks, 1);
  ASSERT_GT(ktape::kernels::gemm_tiles(20, 300, 1100).chunks, 1);
  for (GemmLibrary lib : libraries())
    for (bool acc : {false, true}) {
      check_product<float>(lib, 130, 70, 1101, true, false, false, acc, true);
      check_product<double>(lib, 130, 70, 1101, false, true, true, acc, true);
      check_product<float>(lib, 20, 300, 1100, false, false, true, acc, true);
    }
}

TEST(Gemm, AnOverwriteNeverReadsTheOutputAndScratchMayBeUnaligned) {
  // C = A B over a NaN-filled C (an arena's uninitialized buffer): no NaN may leak in, in the
  // full micro-tiles, the edges or any depth block. The scratch a Function passes is sized by
  // parallel_gemm_scratch and may start anywhere aligned for T.
  for (GemmLibrary lib : libraries()) {
    const UseLibrary use(lib);
    for (const auto& [m, n, k] :
         {std::array<std::int64_t, 3>{70, 130, 1001}, std::array<std::int64_t, 3>{33, 13, 5},
          std::array<std::int64_t, 3>{128, 512, 128}}) {
      std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f);
      std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
      std::vector<std::byte> scratch(ktape::kernels::parallel_gemm_scratch(m, n, k, 4) + 4);
      ktape::kernels::parallel_gemm<float>(m, n, k, {a.data(), k, 1}, {b.data(), n, 1},
                                           {c.data(), n, 1}, false, scratch.data() + 4);
      for (float v : c) ASSERT_EQ(v, 0.125f * static_cast<float>(k)) << m << "x" << k << "x" << n;
    }
  }
}

TEST(Gemm, EmptyDepthZeroesOrKeeps) {
  for (GemmLibrary lib : libraries()) {
    const UseLibrary use(lib);
    std::vector<float> c(6, 7.0f);
    const float dummy = 1.0f;
    ktape::kernels::parallel_gemm<float>(2, 3, 0, {&dummy, 1, 1}, {&dummy, 1, 1}, {c.data(), 3, 1},
                                         true);
    for (float v : c) EXPECT_EQ(v, 7.0f);
    ktape::kernels::parallel_gemm<float>(2, 3, 0, {&dummy, 1, 1}, {&dummy, 1, 1}, {c.data(), 3, 1},
                                         false);
    for (float v : c) EXPECT_EQ(v, 0.0f);
  }
}

TEST(Gemm, SameBitsAtAnyThreadCount) {
  for (GemmLibrary lib : libraries()) {
    const UseLibrary use(lib);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1, 1);
    // Deep enough that the depth is cut into slices too (gemm_tiles().chunks > 1; on LIBXSMM
    // that is the last one, whose tiles are too few), and shallow enough for LIBXSMM's tiles
    // without depth blocks.
    ASSERT_GT(ktape::kernels::gemm_tiles(300, 200, 2500).chunks, 1);
    for (const auto& shape :
         {std::array<std::int64_t, 3>{300, 2500, 200}, std::array<std::int64_t, 3>{300, 700, 200},
          std::array<std::int64_t, 3>{130, 1101, 70}}) {
      const std::int64_t m = shape[0], k = shape[1], n = shape[2];
      std::vector<float> a(m * k), b(k * n);
      for (auto& v : a) v = u(rng);
      for (auto& v : b) v = u(rng);
      std::vector<std::vector<float>> results;
      for (int threads : {1, 2, 16}) {
        // An arena of that many slots: 16 threads run even on a machine with fewer cores.
        const tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                                        static_cast<std::size_t>(threads));
        tbb::task_arena arena(threads);
        std::vector<float> c(m * n);
        arena.execute([&] {
          ktape::kernels::parallel_gemm<float>(m, n, k, {a.data(), k, 1}, {b.data(), n, 1},
                                               {c.data(), n, 1}, false);
        });
        results.push_back(c);
      }
      const std::string what =
          std::string(ktape::kernels::gemm_library_name(lib)) + " k " + std::to_string(k);
      EXPECT_EQ(results[0], results[1]) << what;
      EXPECT_EQ(results[0], results[2]) << what;
    }
  }
}

std::int64_t count_tiles(const ktape::kernels::GemmTiles& t, std::int64_t m, std::int64_t n) {
  return ((m + t.rows - 1) / t.rows) * ((n + t.cols - 1) / t.cols);
}

// LIBXSMM runs the products it takes (a row-major C's B not transposed, a column-major C's A
// not transposed; deep ones in depth blocks, through tiles or through depth slices) and only
// those: the others go to BLIS (or Eigen), which the oracle tests above check in every storage
// order. (A transposed B that is copied is XsmmCopiesATransposedBOnceARun's.)
TEST(Gemm, XsmmRunsTheProductsItTakes) {
  if (!ktape::kernels::set_gemm_library(GemmLibrary::xsmm)) GTEST_SKIP() << "no LIBXSMM here";
  const UseLibrary use(GemmLibrary::xsmm);
  struct Case {
    std::int64_t m, n, k;
    bool acm, bcm, ccm, serial, parallel;  // taken by gemm(), by parallel_gemm()
  };
  // The deep products: tiles and depth slices, A read along its rows and transposed.
  ASSERT_GT(ktape::kernels::xsmm_tiles(130, 70, 1101, true, 4, false).chunks, 1);
  ASSERT_GT(ktape::kernels::xsmm_tiles(256, 256, 1030, true, 4, true).chunks, 1);
  for (const Case& s : {Case{37, 29, 41, false, false, false, true, true},     // X W
                        Case{37, 29, 41, true, false, false, true, true},      // X^T dY
                        Case{37, 29, 41, false, true, false, false, true},     // dY W^T: B copied
                        Case{37, 29, 41, true, true, true, true, true},        // column-major C
                        Case{37, 29, 41, false, false, true, false, false},    // ... A row-major
                        Case{130, 70, 1101, false, false, false, true, true},  // deep
                        Case{256, 256, 1030, true, false, false, true, true},  // deep, X^T dY
                        Case{130, 70, 1101, false, true, false, false, true},  // deep, B copied
                        Case{130, 70, 1101, true, true, true, true, true}}) {  // deep, C col
    for (bool parallel : {false, true}) {
      const std::uint64_t before = ktape::kernels::gemm_xsmm_tiles();
      check_product<float>(GemmLibrary::xsmm, s.m, s.n, s.k, s.acm, s.bcm, s.ccm, false, parallel);
      if (s.k >= 1024 && parallel) {  // the slices' partial sums in a given scratch, and added
        check_product<float>(GemmLibrary::xsmm, s.m, s.n, s.k, s.acm, s.bcm, s.ccm, true, true,
                             true);
        check_product<float>(GemmLibrary::xsmm, s.m, s.n, s.k, s.acm, s.bcm, s.ccm, false, true,
                             true);
      }
      if (s.k < 1024)  // (the deep ones in float only: the oracle's time)
        check_product<double>(GemmLibrary::xsmm, s.m, s.n, s.k, s.acm, s.bcm, s.ccm, true,
                              parallel);
      EXPECT_EQ(ktape::kernels::gemm_xsmm_tiles() > before, parallel ? s.parallel : s.serial)
          << s.m << "x" << s.k << "x" << s.n << (s.acm ? " A col" : " A row")
          << (s.bcm ? " B col" : " B row") << (s.ccm ? " C col" : " C row")
          << (parallel ? " parallel" : " serial");
    }
  }
}

// dY W^T: a row-major product whose B is stored transposed goes to LIBXSMM after B is copied
// row-major, into the scratch, or into a loop's kept cache, where the copy serves the whole run
// (a changed B within one run is not seen: the loop's static does not change) and is made again
// for a new run, and never mistaken for BLIS's packs in the same cache, nor they for it.
// In float and double, with B^T's rows padded (a leading dimension past k).
template <class T>
void check_transposed_b_copy(std::int64_t k = 130) {  // 1101: deep, cut into depth slices
  const std::int64_t m = 70, n = 90, ld = k + 3;
  const std::string type = sizeof(T) == 4 ? "float" : "double";
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> a(m * k), bt(n * ld);  // B = bt^T, bt row-major (n x k, row stride ld)
  for (auto& v : a) v = static_cast<T>(u(rng));
  for (auto& v : bt) v = static_cast<T>(u(rng));
  // The oracle in long double; T's error bound as check_product's.
  auto check = [&](const std::vector<T>& c, const std::string& what) {
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        long double s = 0, mag = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          const long double t = static_cast<long double>(a[i * k + p]) * bt[j * ld + p];
          s += t;
          mag += std::fabs(t);
        }
        ASSERT_NEAR(static_cast<double>(c[i * n + j]), static_cast<double>(s),
                    static_cast<double>((k + 1) * std::numeric_limits<T>::epsilon() * mag))
            << type << " " << what << " (" << i << ", " << j << ")";
      }
  };
  std::vector<std::byte> scratch(ktape::kernels::parallel_gemm_scratch(m, n, k, sizeof(T)));
  auto product = [&](const ktape::kernels::GemmKeep* keep) {
    std::vector<T> c(m * n, std::numeric_limits<T>::quiet_NaN());
    ktape::kernels::parallel_gemm<T>(m, n, k, {a.data(), k, 1}, {bt.data(), 1, ld},
                                     {c.data(), n, 1}, false, scratch.data(), keep);
    return c;
  };
  std::uint64_t tiles = ktape::kernels::gemm_xsmm_tiles();
  check(product(nullptr), "scratch");
  EXPECT_GT(ktape::kernels::gemm_xsmm_tiles(), tiles) << type << ": not run on LIBXSMM";
  ktape::kernels::GemmPackCache cache = ktape::kernels::make_gemm_pack_cache(
      ktape::kernels::gemm_pack_cache_bytes(m, n, k, sizeof(T), 1));
  ktape::kernels::GemmKeep keep{nullptr, &cache, 1};
  const std::vector<T> first = product(&keep);
  check(first, "kept, run 1");
  for (auto& v : bt) v = -v;
  tiles = ktape::kernels::gemm_xsmm_tiles();
  EXPECT_EQ(product(&keep), first) << type << " run 1 again: the kept copy of the old B";
  EXPECT_GT(ktape::kernels::gemm_xsmm_tiles(), tiles) << type << ": not run on LIBXSMM";
  keep.run = 2;
  check(product(&keep), "kept, run 2");
  for (auto& v : bt) v = -v;
  for (std::uint64_t run = 3; run <= 4; ++run) {  // BLIS then LIBXSMM in one run, and back
    keep.run = run;
    for (const GemmLibrary lib : run == 3 ? std::array{GemmLibrary::blis, GemmLibrary::xsmm}
                                          : std::array{GemmLibrary::xsmm, GemmLibrary::blis}) {
      if (!ktape::kernels::set_gemm_library(lib)) continue;
      check(product(&keep), ktape::kernels::gemm_library_name(lib));
    }
    for (auto& v : bt) v = -v;
  }
  ktape::kernels::set_gemm_library(GemmLibrary::xsmm);
}

TEST(Gemm, XsmmCopiesATransposedBOnceARun) {
  if (!ktape::kernels::set_gemm_library(GemmLibrary::xsmm)) GTEST_SKIP() << "no LIBXSMM here";
  const UseLibrary use(GemmLibrary::xsmm);
  check_transposed_b_copy<float>();
  check_transposed_b_copy<double>();
  check_transposed_b_copy<float>(1101);
}

TEST(Gemm, XsmmTilesFeedManyCoresAndKeepTheirPanelsInL2) {
  // Depth blocks: the whole depth below 1024, else equal blocks of at most 256.
  for (const auto& [k, depth] : {std::pair<std::int64_t, std::int64_t>{1, 1},
                                 {784, 784},
                                 {1023, 1023},
                                 {1024, 256},
                                 {1100, 220},
                                 {3584, 256},
                                 {100352, 256},
                                 {1537, 220}}) {
    EXPECT_EQ(ktape::kernels::xsmm_depth(k), depth) << k;
  }
  struct Case {
    std::int64_t m, n, k;
  };
  for (const Case& s :
       {Case{128, 256, 784}, Case{128, 128, 256}, Case{128, 512, 128}, Case{32, 512, 128},
        Case{3584, 512, 28}, Case{1, 1, 1}, Case{5000, 5000, 500}, Case{128, 10, 128},
        Case{64, 4096, 1000}, Case{128, 512, 3584}, Case{784, 256, 100352}}) {
    for (bool unit_cols : {true, false})
      for (std::size_t elem : {std::size_t{4}, std::size_t{8}})
        for (bool transposed : {false, true}) {
          const std::int64_t floor = transposed ? 64 : 32;
          const auto t = ktape::kernels::xsmm_tiles(s.m, s.n, s.k, unit_cols, elem, transposed);
          const std::int64_t tiles = count_tiles(t, s.m, s.n);
          const std::string what = std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
                                   std::to_string(s.n) + (unit_cols ? " row-major" : " col-major") +
                                   " " + std::to_string(elem) +
                                   (transposed ? " B, transposed" : " B") + ": tiles " +
                                   std::to_string(t.rows) + "x" + std::to_string(t.cols);
          // Depth slices only in a deep product: whole blocks, at least two each but the last,
          // none empty, their partial sums at most 4 MiB.
          const std::int64_t depth = ktape::kernels::xsmm_depth(s.k);
          const std::int64_t blocks = (s.k + depth - 1) / depth;
          const std::int64_t per = (blocks + t.chunks - 1) / t.chunks;
          EXPECT_GE(t.chunks, 1) << what;
          if (s.k < 1024) {
            EXPECT_EQ(t.chunks, 1) << what;
          } else {
            EXPECT_GE(per, 2) << what;
            EXPECT_LT((t.chunks - 1) * per, blocks) << what;
            EXPECT_LE(double(t.chunks - 1) * double(s.m) * double(s.n) * double(elem),
                      4.0 * (1 << 20))
                << what;
            EXPECT_GE(tiles * t.chunks, 8) << what;
          }
          EXPECT_TRUE(t.rows >= floor || t.rows == s.m) << what;
          EXPECT_TRUE(t.cols >= floor || t.cols == s.n) << what;
          EXPECT_LE(t.rows, s.m) << what;
          EXPECT_LE(t.cols, s.n) << what;
          const std::int64_t along = unit_cols ? t.cols : t.rows;
          if (along > floor) {
            EXPECT_LE(double(along) * double(ktape::kernels::xsmm_depth(s.k)) * double(elem),
                      256.0 * 1024)
                << what;
          }
          // A task of at least ~1 MFLOP, unless only the panel's fit or a deep product's width
          // cut it.
          if (tiles > 1 && (unit_cols ? t.rows < s.m : t.cols < s.n) &&
              (s.k < 1024 || std::min(t.rows, t.cols) < 128)) {
            EXPECT_GE(2.0 * double(t.rows) * double(t.cols) * double(per * depth), double(1 << 20))
                << what;
          }
          EXPECT_LE(tiles, 256) << what;
          if (s.m == 5000) {
            EXPECT_GE(tiles, 64) << what;
          }
          if (s.m == 128 && s.n == 512 && s.k < 1024) {
            EXPECT_GE(tiles, 16) << what;  // the LSTM's per-step product
          }
          if (s.m == 128 && s.n == 512 && s.k == 3584 && unit_cols && elem == 4) {
            // A loop's hoisted weight gradient dU = h^T dZ: wide tiles, seven slices.
            EXPECT_EQ(t.rows, 128) << what;
            EXPECT_EQ(t.cols, 256) << what;
            EXPECT_EQ(t.chunks, 7) << what;
          }
          if (s.m == 128 && s.n == 128 && s.k == 256) {
            EXPECT_GE(tiles, 4) << what;  // the MLP's second layer: both of two cores
          }
        }
  }
}

TEST(Gemm, TilesFeedManyCoresWithoutGettingSmall) {
  struct Case {
    std::int64_t m, n, k;
  };
  for (const Case& s :
       {Case{128, 256, 784}, Case{128, 512, 128}, Case{32, 512, 128}, Case{3584, 512, 28},
        Case{1, 1, 1}, Case{5000, 5000, 5000}, Case{64, 64, 64}, Case{100, 3, 100000},
        Case{128, 512, 3584}, Case{28, 512, 3584}, Case{9, 32, 100352}, Case{128, 128, 1023}}) {
    const auto t = ktape::kernels::gemm_tiles(s.m, s.n, s.k);
    const std::int64_t depth = (s.k + t.chunks - 1) / t.chunks;
    const std::int64_t tiles =
        ((s.m + t.rows - 1) / t.rows) * ((s.n + t.cols - 1) / t.cols) * t.chunks;
    const std::string what = std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
                             std::to_string(s.n) + ": tiles " + std::to_string(t.rows) + "x" +
                             std::to_string(t.cols) + " x " + std::to_string(t.chunks) + " slices";
    // The depth is cut only in deep products, into slices of at least 512, a power of two.
    EXPECT_GE(t.chunks, 1) << what;
    EXPECT_EQ(t.chunks & (t.chunks - 1), 0) << what;
    if (s.k < 1024) {
      EXPECT_EQ(t.chunks, 1) << what;
    }
    EXPECT_GE(depth, std::min<std::int64_t>(s.k, 512)) << what;
    EXPECT_TRUE(t.rows >= 64 || t.rows == s.m) << what;
    EXPECT_TRUE(t.cols >= 64 || t.cols == s.n) << what;
    EXPECT_LE(t.rows, s.m) << what;
    EXPECT_LE(t.cols, s.n) << what;
    if (tiles > 1) {
      EXPECT_GE(2.0 * t.rows * t.cols * depth, double(1 << 20)) << what;
    }
    // Splitting stops at 64 tiles (one more halving may reach up to 4x that).
    EXPECT_LE(tiles, 256) << what;
    if (s.m == 5000) {
      EXPECT_GE(tiles, 64) << what;
    }
    if (s.m == 128 && s.n == 512) {
      EXPECT_GE(tiles, 16) << what;  // the LSTM's per-step product, and its hoisted dU
    }
    if (s.k == 3584) {
      // A loop's hoisted weight gradient keeps tiles of 128 rows or all of them (64-row tiles
      // re-pack the long panels) and gets its tasks from the depth.
      EXPECT_TRUE(t.rows >= 128 || t.rows == s.m) << what;
      EXPECT_GE(tiles, 16) << what;
    }
    if (s.k == 100352) {
      EXPECT_GE(tiles, 32) << what;  // a thin product over a long batch still feeds many cores
    }
  }
}

// BLIS 0.9 falls back to its reference kernels ("generic") on a CPU model it does not know, such
// as AMD Zen 5, and they run at a sixth of the core's peak: with AVX2 and FMA, neither the default
// kernel nor BLIS when chosen may be those. The name is what benchmark labels show.
TEST(Gemm, TheDefaultKernelIsNeverBlisReferenceCode) {
  const GemmLibrary lib = ktape::kernels::gemm_library();
  const std::string name = ktape::kernels::gemm_kernel_name(lib);
  EXPECT_EQ(name.find("generic"), std::string::npos) << name;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    ktape::kernels::set_gemm_library(GemmLibrary::blis);  // false without BLIS: eigen stays
    const std::string blis = ktape::kernels::gemm_kernel_name(ktape::kernels::gemm_library());
    ktape::kernels::set_gemm_library(lib);
    EXPECT_EQ(blis.find("generic"), std::string::npos) << blis;
  }
#endif
  EXPECT_EQ(ktape::kernels::gemm_kernel_name(GemmLibrary::eigen), "eigen");
}

#if KTAPE_BLIS
// Where BLIS 0.9 says haswell on a CPU with AVX-512, ktape takes BLIS's skx kernels unless the
// brand string names a part with one FMA unit (where AVX-512 adds no FMAs).
TEST(Gemm, BlisHaswellKernelsStayOnlyOnOneFmaUnitParts) {
  using ktape::kernels::blis::one_fma_unit;
  for (const char* one :
       {"Intel(R) Xeon(R) Silver 4210R CPU @ 2.40GHz", "Intel(R) Xeon(R) Bronze 3106 CPU @ 1.70GHz",
        "Intel(R) Xeon(R) Gold 5120 CPU @ 2.20GHz", "Intel(R) Xeon(R) Gold 5220R CPU @ 2.20GHz",
        "Intel(R) Xeon(R) D-2146NT CPU @ 2.30GHz", "Intel(R) Xeon(R) E-2388G CPU @ 3.20GHz",
        "Intel(R) Xeon(R) W-2104 CPU @ 3.20GHz"})
    EXPECT_TRUE(one_fma_unit(one)) << one;
  for (const char* two :
       {"Intel(R) Xeon(R) Processor",  // a cloud VM's name (this one: Emerald Rapids)
        "Intel(R) Xeon(R) Gold 5122 CPU @ 3.60GHz", "Intel(R) Xeon(R) Gold 5222 CPU @ 3.80GHz",
        "Intel(R) Xeon(R) Gold 6430", "Intel(R) Xeon(R) W-2145 CPU @ 3.70GHz",
        "Intel(R) Xeon(R) Gold 5318Y CPU @ 2.10GHz", "Intel(R) Xeon(R) Platinum 8480+",
        "Intel(R) Core(TM) i9-10900X CPU @ 3.70GHz", "AMD EPYC 9754 128-Core Processor", ""})
    EXPECT_FALSE(one_fma_unit(two)) << two;
}
#endif

}  // namespace

namespace {

TEST(Gemm, KtapeGemmEnvironmentPicksTheLibrary) {
  const GemmLibrary saved = ktape::kernels::gemm_library();
  ::setenv("KTAPE_GEMM", "eigen", 1);
  ktape::kernels::apply_gemm_environment();
  EXPECT_EQ(ktape::kernels::gemm_library(), GemmLibrary::eigen);
  ::setenv("KTAPE_GEMM", "mkl", 1);
  try {
    ktape::kernels::apply_gemm_environment();
    ADD_FAILURE() << "KTAPE_GEMM=mkl was accepted";
  } catch (const ktape::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("KTAPE_GEMM must be 'xsmm', 'blis' or 'eigen'"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("'mkl'"), std::string::npos) << e.what();
  }
  const std::vector<GemmLibrary> libs = libraries();
  for (const GemmLibrary lib : {GemmLibrary::blis, GemmLibrary::xsmm}) {
    ::setenv("KTAPE_GEMM", ktape::kernels::gemm_library_name(lib), 1);
    if (std::find(libs.begin(), libs.end(), lib) != libs.end()) {
      ktape::kernels::apply_gemm_environment();
      EXPECT_EQ(ktape::kernels::gemm_library(), lib);
    } else {
      EXPECT_THROW(ktape::kernels::apply_gemm_environment(), ktape::ValueError);
    }
  }
  ::unsetenv("KTAPE_GEMM");
  ktape::kernels::set_gemm_library(saved);
}

}  // namespace

namespace {

// Scratch sizes do not shrink with the shape: a product with fewer rows may keep more depth
// blocks' packs at once (the pack budget divided by smaller blocks). gemm() given fewer bytes
// than its shape needs (a buffer sized for a bigger product: a conv's full tile) must run the
// library's own product rather than write past them; the bytes after the buffer stay untouched.
TEST(Gemm, AScratchTooSmallForTheShapeIsNotOverrun) {
  // (With skx's kernels and the default budget: 7 x 2304 x 256 needs 2,058,605 bytes, 21 x 2304
  // x 256 1,819,036: a 3x3 256-channel conv's last and full tiles on a 14 x 14 image.)
  std::int64_t small = 0, full = 0, n = 0, k = 0;
  for (std::int64_t nn : {64, 256})
    for (std::int64_t kk : {700, 2304})
      for (std::int64_t f = 8; f <= 96 && small == 0; ++f)
        for (std::int64_t s = 1; s < f && small == 0; ++s)
          if (ktape::kernels::gemm_scratch(s, nn, kk, 4) >
              ktape::kernels::gemm_scratch(f, nn, kk, 4))
            small = s, full = f, n = nn, k = kk;
  if (small == 0) {
    GTEST_SKIP() << "no product here needs more scratch than a bigger one (no BLIS kernels?)";
  }
  const std::size_t cap = ktape::kernels::gemm_scratch(full, n, k, 4);
  std::vector<std::byte> buf(cap + 4096, std::byte{0x5a});
  std::vector<float> a(small * k, 0.5f), b(k * n, 0.25f), c(small * n, -1.0f);
  for (GemmLibrary lib : libraries()) {
    const UseLibrary use(lib);
    ktape::kernels::gemm<float>(small, n, k, {a.data(), k, 1}, {b.data(), n, 1}, {c.data(), n, 1},
                                false, buf.data(), cap);
    for (float v : c) ASSERT_EQ(v, 0.125f * static_cast<float>(k)) << small << "x" << k << "x" << n;
    for (std::size_t i = cap; i < buf.size(); ++i)
      ASSERT_EQ(buf[i], std::byte{0x5a}) << "byte " << i - cap << " past the scratch";
  }
}

}  // namespace

namespace {

// C_i = A_i B for products sharing B (parallel_gemm_shared_b): each C_i against the long-double
// oracle, over a NaN-filled C (an overwrite never reads it), with nothing written outside the
// C_i's elements. Parts whose rows end inside a micro-panel; C_i stored alike or (mixed) every
// other one in the other order.
template <class T>
void check_shared_b(GemmLibrary lib, const std::vector<std::int64_t>& ms, std::int64_t n,
                    std::int64_t k, bool acm, bool bcm, bool ccm, bool mixed) {
  const UseLibrary use(lib);
  std::mt19937 rng(static_cast<unsigned>(n * 7 + k));
  Stored<T> b(k, n, bcm, rng);
  std::vector<Stored<T>> as, cs;
  std::vector<ktape::kernels::GemmPart<T>> parts;
  for (std::size_t s = 0; s < ms.size(); ++s) {
    as.emplace_back(ms[s], k, acm, rng);
    cs.emplace_back(ms[s], n, ccm != (mixed && s % 2 == 1), rng);
  }
  std::vector<std::vector<T>> before;
  for (std::size_t s = 0; s < ms.size(); ++s) {
    for (std::int64_t i = 0; i < ms[s]; ++i)
      for (std::int64_t j = 0; j < n; ++j) cs[s].at(i, j) = std::numeric_limits<T>::quiet_NaN();
    before.push_back(cs[s].buf);
    parts.push_back({ms[s], as[s].cref(), cs[s].ref()});
  }
  std::vector<std::byte> scratch(ktape::kernels::parallel_gemm_shared_b_scratch(
                                     ms.data(), static_cast<int>(ms.size()), n, k, sizeof(T)) +
                                 sizeof(T));
  ktape::kernels::parallel_gemm_shared_b<T>(parts.data(), static_cast<int>(parts.size()), n, k,
                                            b.cref(), scratch.data() + sizeof(T));
  for (std::size_t s = 0; s < ms.size(); ++s) {
    const std::string what =
        std::string(ktape::kernels::gemm_library_name(lib)) + " part " + std::to_string(s) +
        " of " + std::to_string(ms.size()) + ", " + std::to_string(ms[s]) + "x" +
        std::to_string(k) + "x" + std::to_string(n) + (acm ? " A col" : " A row") +
        (bcm ? " B col" : " B row") + (ccm ? " C col" : " C row") + (mixed ? " mixed" : "");
    for (std::int64_t i = 0; i < ms[s]; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        long double want = 0, mag = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          const long double t = static_cast<long double>(as[s].at(i, p)) * b.at(p, j);
          want += t;
          mag += std::fabs(t);
        }
        ASSERT_NEAR(static_cast<double>(cs[s].at(i, j)), static_cast<double>(want),
                    static_cast<double>((k + 1) * std::numeric_limits<T>::epsilon() * mag))
            << what << " at (" << i << ", " << j << ")";
      }
    std::vector<bool> inside(cs[s].buf.size(), false);
    for (std::int64_t i = 0; i < ms[s]; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        inside[static_cast<std::size_t>(&cs[s].at(i, j) - cs[s].buf.data())] = true;
    for (std::size_t q = 0; q < cs[s].buf.size(); ++q)
      if (!inside[q]) {
        ASSERT_EQ(cs[s].buf[q], before[s][q]) << what << ": wrote outside C at " << q;
      }
  }
}

// One micro-panel packed as the blocked product packs it, against its definition: every panel
// width the micro-kernels use (and odd ones), full and partial panels, depths around the
// transposes' blocks, a panel's rows or its columns contiguous or neither; padding rows zeroed,
// nothing written past `fill`.
template <class T>
void check_pack(std::int64_t packw, std::int64_t rows, std::int64_t fill, std::int64_t kc,
                int layout) {
  const std::int64_t ld = rows + kc + 3;  // the source's other stride
  const std::int64_t rs = layout == 0   ? 1
                          : layout == 1 ? ld
                                        : 2,
                     cs = layout == 0   ? ld
                          : layout == 1 ? 1
                                        : 2 * ld;
  // Exactly the elements the panel reads: an over-read is an ASan error (scripts/sanitize.sh).
  std::vector<T> src(static_cast<std::size_t>((rows - 1) * rs + (kc - 1) * cs + 1));
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<T>(i % 1013) + T(0.25);
  const T untouched = T(-777);
  std::vector<T> dst(static_cast<std::size_t>(packw * kc + packw), untouched);
  ktape::kernels::pack_micro_panel<T>(src.data(), rs, cs, rows, kc, packw, fill, dst.data());
  for (std::int64_t p = 0; p < kc; ++p)
    for (std::int64_t r = 0; r < packw; ++r) {
      const T want = r < rows   ? src[static_cast<std::size_t>(r * rs + p * cs)]
                     : r < fill ? T(0)
                                : untouched;
      ASSERT_EQ(dst[static_cast<std::size_t>(p * packw + r)], want)
          << sizeof(T) << "-byte panel " << packw << " wide, rows " << rows << ", fill " << fill
          << ", depth " << kc << ", layout " << layout << ": element (" << r << ", " << p << ")";
    }
  for (std::size_t i = static_cast<std::size_t>(packw * kc); i < dst.size(); ++i)
    ASSERT_EQ(dst[i], untouched) << "wrote past the panel";
}

TEST(Gemm, PackedPanelsMatchTheirDefinition) {
  for (std::int64_t packw : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 14, 16, 24, 32})
    for (std::int64_t kc : {1, 3, 4, 8, 9, 16, 31, 64})
      for (int layout = 0; layout < 3; ++layout)
        for (std::int64_t rows : {packw, packw - 1, std::int64_t{1}, packw / 2 + 1}) {
          if (rows < 1) continue;
          for (std::int64_t fill : {packw, rows, std::min(packw, rows + 1)}) {
            check_pack<float>(packw, rows, fill, kc, layout);
            check_pack<double>(packw, rows, fill, kc, layout);
          }
        }
}

// parallel_transpose (LIBXSMM's copies of a transposed operand) against its definition: sides
// around the 16 x 16, 8 x 8 and 4 x 8 blocks and the tasks' column chunks, padded strides;
// nothing written outside the rows' first `rows` elements.
template <class T>
void check_transpose(std::int64_t rows, std::int64_t cols) {
  const std::int64_t rs = cols + 3, ld = rows + 5;
  std::vector<T> src(static_cast<std::size_t>(rows * rs));
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<T>(i % 4099) + T(0.5);
  const T untouched = T(-777);
  std::vector<T> dst(static_cast<std::size_t>(cols * ld), untouched);
  ktape::kernels::parallel_transpose<T>(src.data(), rs, rows, cols, dst.data(), ld);
  for (std::int64_t p = 0; p < cols; ++p)
    for (std::int64_t r = 0; r < ld; ++r)
      ASSERT_EQ(dst[static_cast<std::size_t>(p * ld + r)],
                r < rows ? src[static_cast<std::size_t>(r * rs + p)] : untouched)
          << sizeof(T) << "-byte " << rows << " x " << cols << ": element (" << p << ", " << r
          << ")";
}

TEST(Gemm, TransposeMatchesItsDefinition) {
  for (std::int64_t rows : {1, 4, 7, 8, 12, 15, 16, 17, 31, 33, 48, 256})
    for (std::int64_t cols : {1, 5, 8, 15, 16, 17, 40, 128}) {
      check_transpose<float>(rows, cols);
      check_transpose<double>(rows, cols);
    }
  check_transpose<float>(1600, 131);  // several tasks
  check_transpose<double>(700, 130);
}

TEST(Gemm, ProductsSharingAnOperandMatchTheOracle) {
  for (GemmLibrary lib : libraries()) {
    for (int layout = 0; layout < 8; ++layout) {
      const bool acm = layout & 1, bcm = layout & 2, ccm = layout & 4;
      // An LSTM's h^T dZ and x^T dZ (hidden 24, features 7) over several depth blocks.
      check_shared_b<float>(lib, {24, 7}, 96, 530, acm, bcm, ccm, false);
      check_shared_b<double>(lib, {24, 7}, 96, 530, acm, bcm, ccm, false);
      // Parts of every size against the micro-panels, an empty one among them; thin outputs.
      check_shared_b<float>(lib, {33, 0, 1, 40}, 13, 70, acm, bcm, ccm, true);
      check_shared_b<double>(lib, {5, 17, 3}, 130, 41, acm, bcm, ccm, true);
      check_shared_b<float>(lib, {130, 70}, 10, 300, acm, bcm, ccm, false);
    }
    // Deep parts on LIBXSMM (B row-major): each cut into depth slices, run part after part;
    // an empty part among them.
    check_shared_b<float>(lib, {130, 0, 28}, 64, 1101, true, false, false, false);
    ktape::kernels::set_gemm_pack_budget(100 << 10);  // one depth block per region
    check_shared_b<float>(lib, {67, 30}, 45, 1900, false, true, false, true);
    ktape::kernels::set_gemm_pack_budget(2 << 20);
  }
}

// Deep parts cut alike on LIBXSMM (an LSTM's h^T dZ and x^T dZ: each part's rows one tile, the
// same column tiles and depth slices) run side by side, each task taking its tile and slice for
// every part: against the oracle (an empty part among them; 64-column tiles in two slices), and
// each C_i the same bits as parallel_gemm gives that part alone, at 1, 2 and 16 threads (hidden
// 128, batch 128 over 12 steps: 128-column tiles in three slices). The shapes are first checked
// to be cut alike, so that the test keeps reaching that path.
TEST(Gemm, DeepPartsCutAlikeGiveEachPartsOwnBits) {
  const std::vector<GemmLibrary> libs = libraries();
  if (std::find(libs.begin(), libs.end(), GemmLibrary::xsmm) == libs.end())
    GTEST_SKIP() << "built without LIBXSMM's kernels for this CPU";
  auto expect_alike = [](std::int64_t m0, std::int64_t m1, std::int64_t n, std::int64_t k,
                         std::size_t elem_size) {
    const ktape::kernels::GemmTiles t0 =
        ktape::kernels::xsmm_tiles(m0, n, k, true, elem_size, true);
    const ktape::kernels::GemmTiles t1 =
        ktape::kernels::xsmm_tiles(m1, n, k, true, elem_size, true);
    EXPECT_GE(t0.rows, m0);
    EXPECT_GE(t1.rows, m1);
    EXPECT_EQ(t0.cols, t1.cols);
    EXPECT_EQ(t0.chunks, t1.chunks);
    EXPECT_GT(t0.chunks, 1);
  };
  expect_alike(64, 28, 256, 1101, sizeof(float));
  expect_alike(64, 28, 256, 1101, sizeof(double));
  expect_alike(128, 28, 512, 1536, sizeof(float));
  expect_alike(128, 28, 512, 28 * 128, sizeof(float));  // BM_LstmStep's at batch 128
  check_shared_b<float>(GemmLibrary::xsmm, {64, 0, 28}, 256, 1101, true, false, false, false);
  check_shared_b<double>(GemmLibrary::xsmm, {64, 0, 28}, 256, 1101, true, false, false, false);
  const UseLibrary use(GemmLibrary::xsmm);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  const std::int64_t m0 = 128, m1 = 28, n = 512, k = 1536;
  std::vector<float> a0(k * m0), a1(k * m1), b(k * n);  // A^T stored (k x m), as a loop stacks h
  for (auto* v : {&a0, &a1, &b})
    for (auto& x : *v) x = u(rng);
  for (int threads : {1, 2, 16}) {
    const tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                                    static_cast<std::size_t>(threads));
    tbb::task_arena arena(threads);
    std::vector<float> c0(m0 * n), c1(m1 * n), alone0(m0 * n), alone1(m1 * n);
    const ktape::kernels::GemmPart<float> parts[] = {{m0, {a0.data(), 1, m0}, {c0.data(), n, 1}},
                                                     {m1, {a1.data(), 1, m1}, {c1.data(), n, 1}}};
    arena.execute([&] {
      ktape::kernels::parallel_gemm_shared_b<float>(parts, 2, n, k, {b.data(), n, 1});
      ktape::kernels::parallel_gemm<float>(m0, n, k, {a0.data(), 1, m0}, {b.data(), n, 1},
                                           {alone0.data(), n, 1}, false);
      ktape::kernels::parallel_gemm<float>(m1, n, k, {a1.data(), 1, m1}, {b.data(), n, 1},
                                           {alone1.data(), n, 1}, false);
    });
    EXPECT_EQ(c0, alone0) << threads << " threads";
    EXPECT_EQ(c1, alone1) << threads << " threads";
  }
}

TEST(Gemm, TasksTakingEachOthersUnitsRunEveryUnitOnce) {
  // Products of one depth block (k <= 200 is one block for every BLIS kernel set), whose tasks
  // take the last units of other tasks' cells once their own are done: at thread counts that
  // give uneven cells, and more tasks than cores (a task gets 1 MFLOP or more, so 16 threads
  // run 12 to 16 tasks here, on this machine's 2 cores: tasks start late and run out at
  // different times). Accumulating, so that a unit run twice or skipped shows in C.
  // (BLIS's blocked product only: Eigen's tiles never steal.)
  const GemmLibrary lib = GemmLibrary::blis;
  const std::vector<GemmLibrary> libs = libraries();
  if (std::find(libs.begin(), libs.end(), lib) == libs.end()) GTEST_SKIP() << "built without BLIS";
  const std::uint64_t taken = ktape::kernels::gemm_units_taken();
  for (int threads : {2, 3, 5, 16}) {
    const tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                                    static_cast<std::size_t>(threads));
    tbb::task_arena arena(threads);
    arena.execute([&] {
      for (bool acc : {false, true}) {
        check_product<float>(lib, 256, 256, 200, false, false, false, acc, true);
        check_product<float>(lib, 200, 300, 150, true, false, false, acc, true);
        check_product<double>(lib, 260, 200, 120, false, true, false, acc, true);
        check_product<float>(lib, 600, 300, 28, false, false, true, acc, true);
      }
    });
  }
  // Some task did take units (else the test proved nothing): 16 tasks on this machine's 2 cores
  // run out at different times; more calls until one does, should these not have.
  const tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 16);
  tbb::task_arena arena(16);
  for (int call = 0; call < 200 && ktape::kernels::gemm_units_taken() == taken; ++call)
    arena.execute(
        [&] { check_product<float>(lib, 256, 256, 200, false, false, false, true, true); });
  EXPECT_GT(ktape::kernels::gemm_units_taken(), taken);
}

// A plain product C = A B (A row-major) and two products sharing B (A^T stored, k x m: the
// layout of a loop's stacked h and x; one blocked product) at 1, 2, 3 and 16 threads: the same
// bits at every count.
void expect_same_bits_at_any_thread_count(std::int64_t k) {
  for (GemmLibrary lib : libraries()) {
    const UseLibrary use(lib);
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-1, 1);
    const std::int64_t m0 = 128, m1 = 28, n = 512;
    std::vector<float> a0(m0 * k), a1(m1 * k), b(k * n);
    for (auto* v : {&a0, &a1, &b})
      for (auto& x : *v) x = u(rng);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3, 16}) {
      const tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                                      static_cast<std::size_t>(threads));
      tbb::task_arena arena(threads);
      std::vector<float> c((m0 + m1) * n), plain(m0 * n);
      const ktape::kernels::GemmPart<float> parts[] = {
          {m0, {a0.data(), 1, m0}, {c.data(), n, 1}},
          {m1, {a1.data(), 1, m1}, {c.data() + m0 * n, n, 1}}};
      arena.execute([&] {
        ktape::kernels::parallel_gemm_shared_b<float>(parts, 2, n, k, {b.data(), n, 1});
        ktape::kernels::parallel_gemm<float>(m0, n, k, {a0.data(), k, 1}, {b.data(), n, 1},
                                             {plain.data(), n, 1}, false);
      });
      c.insert(c.end(), plain.begin(), plain.end());
      results.push_back(c);
    }
    for (std::size_t r = 1; r < results.size(); ++r)
      EXPECT_EQ(results[0], results[r]) << ktape::kernels::gemm_library_name(lib) << " " << r;
  }
}

// Several depth blocks.
TEST(Gemm, ProductsSharingAnOperandSameBitsAtAnyThreadCount) {
  expect_same_bits_at_any_thread_count(1500);
}

// One depth block: a unit computes its tiles alike whichever task runs it.
TEST(Gemm, OneDepthBlockSameBitsAtAnyThreadCount) { expect_same_bits_at_any_thread_count(200); }

}  // namespace
