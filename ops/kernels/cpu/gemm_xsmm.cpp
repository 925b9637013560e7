// LIBXSMM inside the cpu GEMM (see gemm_xsmm.hpp).
#include "ops/kernels/cpu/gemm_xsmm.hpp"

#include <algorithm>
#include <limits>

#include <libxsmm.h>

namespace ktape::kernels::xsmm {

namespace {

bool init() {
  static const bool ok = [] {
    libxsmm_init();
    return libxsmm_get_target_archid() >= LIBXSMM_X86_AVX2;
  }();
  return ok;
}

// LIBXSMM's matrices are column-major: element (i, j) at p[i + j * ld], ld >= rows. A matrix
// with one column (or row) may carry any stride there.
libxsmm_blasint leading(std::int64_t stride, std::int64_t rows, std::int64_t cols) {
  return static_cast<libxsmm_blasint>(cols == 1 ? std::max(stride, rows) : stride);
}

// The product as LIBXSMM sees it: C (m x n, column-major) = A (m x k) op(B), A column-major,
// B column-major (k x n) or, with trans_b, row-major. A row-major C is turned (C^T = B^T A^T).
template <class T>
struct Call {
  libxsmm_blasint m, n, k, lda, ldb, ldc;
  const T *a, *b;
  T* c;
  bool trans_b;
};

template <class T>
bool oriented(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a, MatRef<const T> b,
              MatRef<T> c, Call<T>& r) {
  if (c.rs != 1) {  // a row-major C: C^T = B^T A^T
    std::swap(m, n);
    std::swap(a, b);
    a = a.t();
    b = b.t();
    c = c.t();
  }
  // C is column-major now; A must be too (a single row of it may have any stride).
  if (c.rs != 1 || (a.rs != 1 && m > 1)) return false;
  constexpr std::int64_t kMax = std::numeric_limits<libxsmm_blasint>::max();
  for (const std::int64_t v : {m, n, k, a.cs, b.rs, b.cs, c.cs})
    if (v > kMax) return false;
  r.m = static_cast<libxsmm_blasint>(m);
  r.n = static_cast<libxsmm_blasint>(n);
  r.k = static_cast<libxsmm_blasint>(k);
  r.a = a.p;
  r.b = b.p;
  r.c = c.p;
  r.lda = leading(a.cs, m, k);
  r.ldc = leading(c.cs, m, n);
  r.trans_b = b.rs != 1 && k > 1;  // then b.cs == 1 (gemm checks that one stride is 1)
  r.ldb = r.trans_b ? leading(b.rs, n, k) : leading(b.cs, k, n);
  return r.lda >= r.m && r.ldc >= r.m && r.ldb >= (r.trans_b ? r.n : r.k);
}

}  // namespace

bool available() { return init(); }

std::string kernel_name() {
  init();
  return libxsmm_get_target_arch();
}

template <class T>
bool takes(MatRef<const T> a, MatRef<const T> b, MatRef<T> c) {
  // The operand along C's unit stride (B for a row-major C, which is turned) runs that way too.
  return c.rs != 1 ? b.cs == 1 : a.rs == 1;
}

template <class T>
bool run(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a, MatRef<const T> b,
         MatRef<T> c, bool accumulate) {
  if (m <= 0 || n <= 0 || k <= 0 || !init()) return false;
  Call<T> r;
  if (!oriented<T>(m, n, k, a, b, c, r)) return false;
  const T alpha(1), beta(accumulate ? 1 : 0);
  const int flags = r.trans_b ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
  const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
  if constexpr (sizeof(T) == sizeof(float)) {
    const libxsmm_smmfunction f = libxsmm_smmdispatch(r.m, r.n, r.k, &r.lda, &r.ldb, &r.ldc, &alpha,
                                                      &beta, &flags, &prefetch);
    if (f == nullptr) return false;
    f(r.a, r.b, r.c);
  } else {
    const libxsmm_dmmfunction f = libxsmm_dmmdispatch(r.m, r.n, r.k, &r.lda, &r.ldb, &r.ldc, &alpha,
                                                      &beta, &flags, &prefetch);
    if (f == nullptr) return false;
    f(r.a, r.b, r.c);
  }
  return true;
}

template bool takes<float>(MatRef<const float>, MatRef<const float>, MatRef<float>);
template bool takes<double>(MatRef<const double>, MatRef<const double>, MatRef<double>);
template bool run<float>(std::int64_t, std::int64_t, std::int64_t, MatRef<const float>,
                         MatRef<const float>, MatRef<float>, bool);
template bool run<double>(std::int64_t, std::int64_t, std::int64_t, MatRef<const double>,
                          MatRef<const double>, MatRef<double>, bool);

}  // namespace ktape::kernels::xsmm
