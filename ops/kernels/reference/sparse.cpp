// Reference kernels of the sparse ops (ops/sparse.cpp), serial; the cpu backend's split over
// threads (ops/kernels/cpu/sparse.cpp, and SparseDenseMatMul in ops/kernels/cpu/matmul.cpp).
// SparseTensor, SparseToDense(indices, values, carrier): the dense value, entries summed.
// SparseConcatIndices(indices_0..n-1, carrier_0..n-1) attrs {axis}: the indices of the parts,
// stacked, each shifted along `axis` by the dims of the parts before it (padding stays padding).
// SparseGather(indices, x): x at each entry's position (the gradient of the values).
// DenseIndices(x): every position of x's shape in row-major order, (size, rank) int64.
// ShapeCarrier(x): the zero-size (x.shape..., 0) array; nothing to compute.
#include <algorithm>
#include <cstdint>

#include "engine/backend.hpp"
#include "ops/kernels/reference/reference.hpp"
#include "ops/kernels/sparse.hpp"

namespace ktape::kernels {

namespace {

template <class T>
void densify_kernel(const KernelCall& c) {
  using C = Compute<T>;
  const auto* idx = ptr<const std::int64_t>(c.in[0]);
  const T* val = ptr<const T>(c.in[1]);
  const int rank = c.out.ndim;
  T* out = ptr<T>(c.out);
  std::fill(out, out + c.out.size, T(0));
  for (std::int64_t k = 0; k < c.in[1].size; ++k) {
    if (is_padding(idx, k, rank)) continue;
    std::int64_t off = 0;
    for (int d = 0; d < rank; ++d)
      off = off * c.out.dims[d] + sparse_index("K::to_dense", idx, k, rank, d, c.out.dims[d]);
    if constexpr (std::is_same_v<T, bool>)
      out[off] = out[off] || val[k];
    else
      out[off] = static_cast<T>(wrap_add(static_cast<C>(out[off]), static_cast<C>(val[k])));
  }
}

// SparseGather(indices, x): x at each entry's position.
template <class T>
void sparse_gather_kernel(const KernelCall& c) {
  const auto* idx = ptr<const std::int64_t>(c.in[0]);
  const ArrayRef& x = c.in[1];
  const T* px = ptr<const T>(x);
  T* out = ptr<T>(c.out);
  for (std::int64_t k = 0; k < c.out.size; ++k) {
    if (is_padding(idx, k, x.ndim)) {
      out[k] = T(0);
      continue;
    }
    std::int64_t off = 0;
    for (int d = 0; d < x.ndim; ++d)
      off = off * x.dims[d] + sparse_index("K::gradients (sparse)", idx, k, x.ndim, d, x.dims[d]);
    out[k] = px[off];
  }
}

template <class T>
void sparse_matmul_kernel(const KernelCall& c) {
  sparse_matmul_columns<T>(c, 0, c.out.dims[1]);
}

void concat_indices_kernel(const KernelCall& c) {
  const int axis = static_cast<int>(c.attrs->ints[0]);
  const int parts = c.n_in / 2;
  const int rank = static_cast<int>(c.out.dims[1]);
  auto* out = ptr<std::int64_t>(c.out);
  std::int64_t shift = 0;
  for (int p = 0; p < parts; ++p) {
    const auto* in = ptr<const std::int64_t>(c.in[p]);
    const std::int64_t n = c.in[p].size;
    for (std::int64_t e = 0; e < n; ++e)
      out[e] = in[e] + (e % rank == axis && in[e - e % rank] != kPadding ? shift : 0);
    out += n;
    shift += c.in[parts + p].dims[axis];
  }
}

void dense_indices_kernel(const KernelCall& c) {
  const ArrayRef& x = c.in[0];
  auto* out = ptr<std::int64_t>(c.out);
  std::int64_t pos[kMaxRank] = {};
  for (std::int64_t k = 0; k < x.size; ++k) {
    for (int d = 0; d < x.ndim; ++d) out[k * x.ndim + d] = pos[d];
    for (int d = x.ndim - 1; d >= 0 && ++pos[d] == x.dims[d]; --d) pos[d] = 0;
  }
}

void carrier_kernel(const KernelCall&) {}

template <class... Ts>
struct TypeList {};

template <class... Ts>
void reg_numeric(Backend& b, TypeList<Ts...>) {
  (b.set(Op::SparseDenseMatMul, dtype_of<Ts>, &sparse_matmul_kernel<Ts>), ...);
}
template <class... Ts>
void reg_all(Backend& b, TypeList<Ts...>) {
  (b.set(Op::SparseTensor, dtype_of<Ts>, &densify_kernel<Ts>), ...);
  (b.set(Op::SparseToDense, dtype_of<Ts>, &densify_kernel<Ts>), ...);
  (b.set(Op::SparseGather, dtype_of<Ts>, &sparse_gather_kernel<Ts>), ...);
  (b.set(Op::ShapeCarrier, dtype_of<Ts>, &carrier_kernel), ...);
}

}  // namespace

void register_reference_sparse(Backend& b) {
  reg_numeric(b, TypeList<Half, float, double, std::int32_t, std::int64_t>{});
  reg_all(b, TypeList<Half, float, double, std::int8_t, std::int16_t, std::int32_t, std::int64_t,
                      std::uint8_t, bool>{});
  b.set(Op::SparseConcatIndices, DType::int64, &concat_indices_kernel);
  b.set(Op::DenseIndices, DType::int64, &dense_indices_kernel);
}

}  // namespace ktape::kernels
