// Internal helpers shared by the kernel files: typed views of ArrayRef, the parallel split
// (engine/parallel.hpp) and broadcasting index arithmetic. Not a public header.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "engine/dtype.hpp"
#include "engine/kernel_abi.hpp"
#include "engine/parallel.hpp"
#include "engine/shape.hpp"

namespace ktape::kernels {

template <class T>
inline T* ptr(const ArrayRef& a) {
  return static_cast<T*>(a.data);
}

using ktape::parallel_for;  // engine/parallel.hpp: the one grain policy

// Strides (in elements) of `in` broadcast to an output of rank `rank`; 0 on broadcast axes.
inline void broadcast_strides(const ArrayRef& in, int rank, const std::int64_t* out_dims,
                              std::int64_t* strides) {
  std::int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    const int k = d - (rank - in.ndim);
    if (k < 0) {
      strides[d] = 0;
      continue;
    }
    strides[d] = (in.dims[k] == 1 && out_dims[d] != 1) ? 0 : s;
    s *= in.dims[k];
  }
}

using ktape::kMaxRank;  // ranks above it are refused when a node is built

// Runs `kernel` on a part of call c: its one input's elements from in_at on, seen with dims
// in_dims, and its output's from out_at on, seen with out_dims (the sizes their products), with
// `attrs` in place of c's when given. The cpu backend runs the reference's line kernels (arg
// ops, running sums, one_hot, casts) on ranges this way.
inline void run_part(KernelFn kernel, const KernelCall& c, std::int64_t in_at,
                     const std::int64_t* in_dims, int in_ndim, std::int64_t out_at,
                     const std::int64_t* out_dims, int out_ndim, const Attrs* attrs = nullptr) {
  auto product = [](const std::int64_t* d, int n) {
    std::int64_t p = 1;
    for (int i = 0; i < n; ++i) p *= d[i];
    return p;
  };
  ArrayRef part = c.in[0];
  part.data =
      static_cast<char*>(part.data) + static_cast<std::size_t>(in_at) * dtype_size(part.dtype);
  part.dims = in_dims;
  part.ndim = in_ndim;
  part.size = product(in_dims, in_ndim);
  KernelCall call = c;
  call.in = &part;
  call.n_in = 1;
  call.out.data =
      static_cast<char*>(c.out.data) + static_cast<std::size_t>(out_at) * dtype_size(c.out.dtype);
  call.out.dims = out_dims;
  call.out.ndim = out_ndim;
  call.out.size = product(out_dims, out_ndim);
  if (attrs) call.attrs = attrs;
  kernel(call);
}

// Product of every dim but the last: the row count of an array seen as a stack of rows.
inline std::int64_t leading_rows(const ArrayRef& x) {
  std::int64_t r = 1;
  for (int d = 0; d + 1 < x.ndim; ++d) r *= x.dims[d];
  return r;
}

// The N-d index walk the strided kernels share: visits the n indices of `dims` (rank r) in
// row-major order and calls f(i, off), where off[k] is operand k's flat offset: its start in
// `off` plus the index dotted with strides[k] (0 on broadcast axes).
template <std::size_t K, class F>
inline void strided_walk(const std::int64_t* dims, int r, std::int64_t n,
                         const std::array<const std::int64_t*, K>& strides,
                         std::array<std::int64_t, K> off, F&& f) {
  std::int64_t idx[kMaxRank] = {};
  for (std::int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (int d = r - 1; d >= 0; --d) {
      ++idx[d];
      for (std::size_t k = 0; k < K; ++k) off[k] += strides[k][d];
      if (idx[d] < dims[d]) break;
      for (std::size_t k = 0; k < K; ++k) off[k] -= strides[k][d] * dims[d];
      idx[d] = 0;
    }
  }
}

// Row-major strides of a shape.
inline void contiguous_strides(const std::int64_t* dims, int ndim, std::int64_t* strides) {
  std::int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    strides[d] = s;
    s *= dims[d];
  }
}

// Splits a shape around axis: outer * n * inner.
inline void split_axis(const std::int64_t* dims, int ndim, int axis, std::int64_t& outer,
                       std::int64_t& n, std::int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int d = 0; d < axis; ++d) outer *= dims[d];
  n = dims[axis];
  for (int d = axis + 1; d < ndim; ++d) inner *= dims[d];
}

}  // namespace ktape::kernels
