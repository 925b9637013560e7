// cpu MatMul: Eigen's GEMM, single-threaded inside oneTBB tasks that split the output rows
// (or columns) into fixed blocks.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include "engine/backend.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/cpu/cpu.hpp"
#include "ops/kernels/cpu/gemm.hpp"

namespace ktape::kernels {

namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
void matmul_kernel(const KernelCall& c) {
  const auto matmul_attrs = attrs::MatMul::of(*c.attrs);
  const auto ta = matmul_attrs.ta;
  const auto tb = matmul_attrs.tb;
  const ArrayRef& a = c.in[0];
  const ArrayRef& b = c.in[1];
  // Operands of rank > 2 are stacks of rows (see ops/layout.cpp).
  const std::int64_t n = c.out.dims[c.out.ndim - 1], m = leading_rows(c.out);
  const std::int64_t k = ta ? leading_rows(a) : a.dims[a.ndim - 1];
  Eigen::Map<const RowMat<T>> A(ptr<T>(a), leading_rows(a), a.dims[a.ndim - 1]);
  Eigen::Map<const RowMat<T>> B(ptr<T>(b), leading_rows(b), b.dims[b.ndim - 1]);
  Eigen::Map<RowMat<T>> C(ptr<T>(c.out), m, n);
  if (k == 0) {
    C.setZero();
    return;
  }
  // Blocks of 64 rows (or columns, when splitting them re-packs less: rows re-pack B (k x n)
  // in every block, columns re-pack A (m x k)), each one GEMM. The block size is fixed, never
  // derived from the thread count: Eigen's blocking (and so the order of every sum) depends on
  // a call's sizes, and the same inputs must give the same bits at any thread count.
  const bool by_cols = m < n && n >= 32;
  const std::int64_t extent = by_cols ? n : m;
  const double cost_per_item = 2.0 * static_cast<double>(by_cols ? m : n) * static_cast<double>(k);
  constexpr std::int64_t block = 64;
  parallel_for(
      extent, cost_per_item / 4.0,
      [&](std::int64_t i0, std::int64_t i1) {
        const std::int64_t len = i1 - i0;
        if (by_cols) {
          auto out = C.middleCols(i0, len);
          if (!ta && !tb)
            gemm_panels(out, A, B.middleCols(i0, len), false);
          else if (!ta && tb)
            gemm_panels(out, A, B.middleRows(i0, len).transpose(), false);
          else if (ta && !tb)
            gemm_panels(out, A.transpose(), B.middleCols(i0, len), false);
          else
            gemm_panels(out, A.transpose(), B.middleRows(i0, len).transpose(), false);
          return;
        }
        auto out = C.middleRows(i0, len);
        if (!ta && !tb)
          gemm_panels(out, A.middleRows(i0, len), B, false);
        else if (!ta && tb)
          gemm_panels(out, A.middleRows(i0, len), B.transpose(), false);
        else if (ta && !tb)
          gemm_panels(out, A.middleCols(i0, len).transpose(), B, false);
        else
          gemm_panels(out, A.middleCols(i0, len).transpose(), B.transpose(), false);
      },
      block);
}

}  // namespace

void register_cpu_matmul(Backend& b) {
  b.set(Op::MatMul, DType::float32, &matmul_kernel<float>);
  b.set(Op::MatMul, DType::float64, &matmul_kernel<double>);
}

}  // namespace ktape::kernels
