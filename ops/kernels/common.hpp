// Internal helpers shared by the kernel files: typed views of ArrayRef, a deterministic
// parallel_for over oneTBB, and broadcasting index arithmetic. Not a public header.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/dtype.hpp"
#include "engine/kernel_abi.hpp"
#include "engine/shape.hpp"

namespace ktape::kernels {

template <class T>
inline T* ptr(const ArrayRef& a) {
  return static_cast<T*>(a.data);
}

// Runs f(begin, end) over [0, n) in fixed chunks of `grain` items, a multiple of 64, so results
// never depend on thread timing and vectorized loops see the same packet boundaries as a serial
// run (Eigen's packet math and its scalar tail may differ in the last bit). Splits only when
// n * cost_per_item is worth it (~20 us of work on 2 cores).
template <class F>
inline void parallel_for(std::int64_t n, double cost_per_item, F&& f, std::int64_t min_grain = 1) {
  constexpr double kMinWorkPerChunk = 40000.0;  // ~ a few tens of microseconds
  const double total = static_cast<double>(n) * cost_per_item;
  if (n <= 1 || total < 2 * kMinWorkPerChunk) {
    if (n > 0) f(std::int64_t{0}, n);
    return;
  }
  std::int64_t grain = static_cast<std::int64_t>(kMinWorkPerChunk / std::max(cost_per_item, 1e-9));
  grain = (std::max<std::int64_t>(grain, min_grain) + 63) / 64 * 64;
  const std::int64_t chunks = (n + grain - 1) / grain;
  if (chunks < 2) {
    f(std::int64_t{0}, n);
    return;
  }
  tbb::parallel_for(
      tbb::blocked_range<std::int64_t>(0, chunks, 1),
      [&](const tbb::blocked_range<std::int64_t>& r) {
        for (std::int64_t ch = r.begin(); ch != r.end(); ++ch)
          f(ch * grain, std::min(n, (ch + 1) * grain));
      },
      tbb::simple_partitioner());
}

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

// Product of every dim but the last: the row count of an array seen as a stack of rows.
inline std::int64_t leading_rows(const ArrayRef& x) {
  std::int64_t r = 1;
  for (int d = 0; d + 1 < x.ndim; ++d) r *= x.dims[d];
  return r;
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
