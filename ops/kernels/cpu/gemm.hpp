// The cpu backend's GEMM: C = A B (or C += A B) on strided matrices, for float and double.
// The serial kernel is BLIS's (Debian's libblis-serial, built with KTAPE_BLIS) or Eigen's;
// oneTBB is the only thread pool. gemm() runs on the calling thread; parallel_gemm() cuts C into
// 2-D tiles whose sizes depend only on the shape (never on the thread count: a tile's sums depend
// on its extent in both libraries, and the same inputs give the same bits at any thread count).
// Every matrix is (pointer, row stride, column stride); one of the two strides must be 1, so a
// transpose is a swap of strides. Internal to the cpu kernels.
#pragma once

#include <cstdint>

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
// it). On the calling thread. Steady state allocates nothing: Eigen packs on the stack, and
// BLIS takes its packing buffers from a pool that only grows when more calls run at once than
// ever before (after the first calls at a given thread count).
template <class T>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a, MatRef<const T> b,
          MatRef<T> c, bool accumulate);

// The same product, over oneTBB tasks (see gemm_tiles).
template <class T>
void parallel_gemm(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a,
                   MatRef<const T> b, MatRef<T> c, bool accumulate);

// The tiles of parallel_gemm: at least 64 x 64 (or the whole dimension), at least ~1 MFLOP,
// and as many as it takes to reach 64 tiles, so that 16 to 64 cores have work.
struct GemmTiles {
  std::int64_t rows, cols;
};
GemmTiles gemm_tiles(std::int64_t m, std::int64_t n, std::int64_t k);

// The serial kernel: BLIS when the build has it (KTAPE_BLIS), else Eigen's. Benchmarks and tests
// switch between the two; a switch while kernels run is not supported. false = not built in.
enum class GemmLibrary { blis, eigen };
GemmLibrary gemm_library();
bool set_gemm_library(GemmLibrary lib);
const char* gemm_library_name(GemmLibrary lib);

}  // namespace ktape::kernels
