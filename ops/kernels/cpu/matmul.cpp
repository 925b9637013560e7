// cpu MatMul: the project's GEMM (gemm.hpp) over 2-D tiles of the output. SparseDenseMatMul:
// the output's columns split by the grain policy (each task reads every entry).
#include "engine/backend.hpp"
#include "engine/parallel.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/cpu/cpu.hpp"
#include "ops/kernels/cpu/gemm.hpp"
#include "ops/kernels/sparse.hpp"

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
  GemmKeep keep;
  if (c.ctx) {
    auto* mk =
        static_cast<MatMulKeep*>(const_cast<void*>(c.ctx));  // the plan's; one call at a time
    keep = {mk->a.data ? &mk->a : nullptr, mk->b.data ? &mk->b : nullptr, *mk->loop_run};
  }
  parallel_gemm<T>(m, n, k, A, B, row_major(ptr<T>(c.out), n), false, c.scratch,
                   c.ctx ? &keep : nullptr);
}

// Two MatMul nodes with the same attributes and right operand (see matmul_shared_b_kernel).
template <class T>
void matmul_shared_b(const KernelCall& c) {
  const auto matmul_attrs = attrs::MatMul::of(*c.attrs);
  const ArrayRef& b = c.in[1];
  const std::int64_t b_cols = b.dims[b.ndim - 1];
  MatRef<const T> B = row_major<const T>(ptr<T>(b), b_cols);
  if (matmul_attrs.tb) B = B.t();
  GemmPart<T> parts[2];
  std::int64_t n = 0, k = 0;
  for (int i = 0; i < 2; ++i) {
    const ArrayRef& a = c.in[2 * i];
    const ArrayRef& out = i == 0 ? c.out : c.in[4];
    n = out.dims[out.ndim - 1];
    const std::int64_t a_cols = a.dims[a.ndim - 1];
    k = matmul_attrs.ta ? leading_rows(a) : a_cols;
    MatRef<const T> A = row_major<const T>(ptr<T>(a), a_cols);
    if (matmul_attrs.ta) A = A.t();
    parts[i] = {leading_rows(out), A, row_major(static_cast<T*>(out.data), n)};
  }
  parallel_gemm_shared_b<T>(parts, 2, n, k, B, c.scratch);
}

template <class T>
void sparse_matmul_kernel(const KernelCall& c) {
  const double per_column = static_cast<double>(c.in[1].size + c.out.dims[0]);
  parallel_for(
      c.out.dims[1], per_column,
      [&](std::int64_t j0, std::int64_t j1) { sparse_matmul_columns<T>(c, j0, j1); }, 16);
}

}  // namespace

KernelFn matmul_shared_b_kernel(DType dtype) {
  return dtype == DType::float32   ? &matmul_shared_b<float>
         : dtype == DType::float64 ? &matmul_shared_b<double>
                                   : nullptr;
}

void register_cpu_matmul(Backend& b) {
  b.set(Op::MatMul, DType::float32, &matmul_kernel<float>);
  b.set(Op::MatMul, DType::float64, &matmul_kernel<double>);
  b.set(Op::SparseDenseMatMul, DType::float32, &sparse_matmul_kernel<float>);
  b.set(Op::SparseDenseMatMul, DType::float64, &sparse_matmul_kernel<double>);
}

}  // namespace ktape::kernels
