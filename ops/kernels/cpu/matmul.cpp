// cpu MatMul: the project's GEMM (gemm.hpp) over 2-D tiles of the output.
#include "engine/backend.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/cpu/cpu.hpp"
#include "ops/kernels/cpu/gemm.hpp"

namespace ktape::kernels {

namespace {

template <class T>
void matmul_kernel(const KernelCall& c) {
  const auto matmul_attrs = attrs::MatMul::of(*c.attrs);
  const ArrayRef& a = c.in[0];
  const ArrayRef& b = c.in[1];
  // Operands of rank > 2 are stacks of rows (see ops/layout.cpp).
  const std::int64_t n = c.out.dims[c.out.ndim - 1], m = leading_rows(c.out);
  const std::int64_t a_cols = a.dims[a.ndim - 1], b_cols = b.dims[b.ndim - 1];
  const std::int64_t k = matmul_attrs.ta ? leading_rows(a) : a_cols;
  MatRef<const T> A = row_major<const T>(ptr<T>(a), a_cols);
  MatRef<const T> B = row_major<const T>(ptr<T>(b), b_cols);
  if (matmul_attrs.ta) A = A.t();
  if (matmul_attrs.tb) B = B.t();
  parallel_gemm<T>(m, n, k, A, B, row_major(ptr<T>(c.out), n), false);
}

}  // namespace

void register_cpu_matmul(Backend& b) {
  b.set(Op::MatMul, DType::float32, &matmul_kernel<float>);
  b.set(Op::MatMul, DType::float64, &matmul_kernel<double>);
}

}  // namespace ktape::kernels
