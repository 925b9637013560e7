// Kernels of the sparse ops (ops/sparse.cpp): SparseDenseMatMul's, shared by the reference
// backend (serial) and the cpu backend (split over output columns), and the checks every sparse
// kernel makes (the cpu backend's others: ops/kernels/cpu/sparse.cpp). Parts of a sparse tensor:
// indices (nnz, rank) int64, values (nnz,), carrier (dense shape..., 0). An entry whose first index
// is kPadding is padding (a fed value's entries padded to a power-of-two count, the positions past
// each length in ctc_label_dense_to_sparse): every kernel skips it, as if it were absent.
#pragma once

#include <cstdint>
#include <string>

#include "engine/errors.hpp"
#include "engine/kernel_abi.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/functors.hpp"

namespace ktape::kernels {

inline constexpr std::int64_t kPadding = -1;

inline bool is_padding(const std::int64_t* idx, std::int64_t k, int rank) {
  return rank > 0 && idx[k * rank] == kPadding;
}

// Position d of entry k, checked against the dense dim (ValueError naming `fn`).
inline std::int64_t sparse_index(const char* fn, const std::int64_t* idx, std::int64_t k, int rank,
                                 int d, std::int64_t dim) {
  const std::int64_t v = idx[k * rank + d];
  if (v < 0 || v >= dim)
    throw ValueError(std::string(fn) + ": index " + std::to_string(v) + " of entry " +
                     std::to_string(k) + " (dim " + std::to_string(d) +
                     ") is out of range for a dense dim of " + std::to_string(dim));
  return v;
}

// SparseDenseMatMul(indices, values, carrier, y) attrs {adjoint}, columns [j0, j1) of the output:
// out[i, :] += v * y[j, :] for each entry (i, j) = (row, col), or out[j, :] += v * y[i, :] when
// adjoint (the transposed sparse operand). Each output element sums its terms in entry order,
// whatever the column split.
template <class T>
void sparse_matmul_columns(const KernelCall& c, std::int64_t j0, std::int64_t j1) {
  using C = Compute<T>;
  const bool adjoint = c.attrs->ints[0] != 0;
  const auto* idx = ptr<const std::int64_t>(c.in[0]);
  const T* val = ptr<const T>(c.in[1]);
  const std::int64_t nnz = c.in[1].size, rows = c.in[2].dims[0], cols = c.in[2].dims[1];
  const T* y = ptr<const T>(c.in[3]);
  const std::int64_t n = c.out.dims[1];
  T* out = ptr<T>(c.out);
  for (std::int64_t i = 0; i < c.out.dims[0]; ++i)
    for (std::int64_t j = j0; j < j1; ++j) out[i * n + j] = T(0);
  for (std::int64_t k = 0; k < nnz; ++k) {
    if (is_padding(idx, k, 2)) continue;
    const std::int64_t r = sparse_index("K::dot (sparse)", idx, k, 2, 0, rows);
    const std::int64_t q = sparse_index("K::dot (sparse)", idx, k, 2, 1, cols);
    const std::int64_t to = adjoint ? q : r, from = adjoint ? r : q;
    const C v = static_cast<C>(val[k]);
    T* o = out + to * n;
    const T* x = y + from * n;
    for (std::int64_t j = j0; j < j1; ++j)
      o[j] = static_cast<T>(wrap_add(static_cast<C>(o[j]), wrap_mul(v, static_cast<C>(x[j]))));
  }
}

}  // namespace ktape::kernels
