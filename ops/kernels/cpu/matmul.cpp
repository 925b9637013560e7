// cpu MatMul: the project's GEMM (gemm.hpp) over 2-D tiles of the output, with or without an
// epilogue (a fused pass over the product, engine/fusion.hpp MatMulEpilogue). SparseDenseMatMul:
// the output's columns split by the grain policy (each task reads every entry).

#include "engine/backend.hpp"
#include "engine/fusion.hpp"
#include "engine/parallel.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/cpu/cpu.hpp"
#include "ops/kernels/cpu/gemm.hpp"
#include "ops/kernels/sparse.hpp"

namespace ktape::kernels {

namespace {

// The product of c.in[0] and c.in[1] into c.out; `ctx` is the MatMul's own context (a loop
// body's MatMulKeep) and `done` the epilogue's, if any.
template <class T>
void matmul(const KernelCall& c, const void* ctx, const GemmDone* done) {
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
  if (ctx) {
    auto* mk = static_cast<MatMulKeep*>(const_cast<void*>(ctx));  // the plan's; one call at a time
    keep = {mk->a.data ? &mk->a : nullptr, mk->b.data ? &mk->b : nullptr, *mk->loop_run};
  }
  parallel_gemm<T>(m, n, k, A, B, row_major(ptr<T>(c.out), n), false, c.scratch,
                   ctx ? &keep : nullptr, done);
}

template <class T>
void matmul_kernel(const KernelCall& c) {
  matmul<T>(c, c.ctx, nullptr);
}

// MatMul with an epilogue (engine/fusion.hpp MatMulEpilogue): the fused pass over each band of
// the product's rows as soon as the band is finished, while it is in cache, where parallel_gemm
// reports regions as they finish (gemm.hpp GemmDone: on one thread; on several when the tiles
// are whole rows); otherwise over the product's rows after it, split by the grain policy (a band
// finished by several threads' tiles cost more than a pass of its own on two threads of a Xeon
// VM: timing BM_DenseUpdate's step alone, 394 us against 326 + 49; on one thread 499 against
// 486 + 77). Its inputs follow the product's two.
template <class T>
void matmul_epilogue(const KernelCall& c) {
  auto& e = *static_cast<MatMulEpilogue*>(const_cast<void*>(c.ctx));  // the plan's: one call
  const std::int64_t n = c.out.dims[c.out.ndim - 1];
  // Every band starts uncounted, even after a call that threw halfway through.
  for (std::int64_t i = 0, m = leading_rows(c.out); i < m; ++i)
    e.done_columns[i].store(0, std::memory_order_relaxed);
  struct Region {
    MatMulEpilogue* e;
    const ArrayRef* in;
    std::int64_t n;
  } r{&e, c.in + 2, n};
  const GemmDone done{
      &r,
      [](void* o, std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) {
        const auto& x = *static_cast<const Region*>(o);
        epilogue_region_done(*x.e, x.in, x.n, i0, i1, j0, j1);
      },
      e.pass->elem_cost};
  matmul<T>(c, e.matmul_ctx, &done);
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

KernelFn matmul_epilogue_kernel(DType dtype) {
  return dtype == DType::float32   ? &matmul_epilogue<float>
         : dtype == DType::float64 ? &matmul_epilogue<double>
                                   : nullptr;
}

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
