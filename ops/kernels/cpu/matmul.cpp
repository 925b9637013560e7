// cpu MatMul: Eigen's GEMM, single-threaded inside oneTBB tasks that split the output rows.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include "engine/backend.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/cpu/cpu.hpp"

namespace ktape::kernels {

namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
void matmul_kernel(const KernelCall& c) {
  const bool ta = c.attrs->ints[0] != 0, tb = c.attrs->ints[1] != 0;
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
  const double cost_per_row = 2.0 * static_cast<double>(n) * static_cast<double>(k);
  // Few large row blocks (one GEMM each) rather than many GEMV-like slivers.
  const std::int64_t block = std::max<std::int64_t>(16, (m + 3) / 4);
  parallel_for(
      m, cost_per_row / 4.0,
      [&](std::int64_t r0, std::int64_t r1) {
        const std::int64_t rows = r1 - r0;
        auto out = C.middleRows(r0, rows);
        if (!ta && !tb)
          out.noalias() = A.middleRows(r0, rows) * B;
        else if (!ta && tb)
          out.noalias() = A.middleRows(r0, rows) * B.transpose();
        else if (ta && !tb)
          out.noalias() = A.middleCols(r0, rows).transpose() * B;
        else
          out.noalias() = A.middleCols(r0, rows).transpose() * B.transpose();
      },
      block);
}

}  // namespace

void register_cpu_matmul(Backend& b) {
  b.set(Op::MatMul, DType::float32, &matmul_kernel<float>);
  b.set(Op::MatMul, DType::float64, &matmul_kernel<double>);
}

}  // namespace ktape::kernels
