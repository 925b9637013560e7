// cpu layout kernels: Slice and SlicePad as row copies (memcpy of the contiguous inner run),
// and Transpose split over output rows by the grain policy, for every dtype (they only move
// bytes). Attrs as in ops/layout.cpp.
#include <cstring>

#include "engine/backend.hpp"
#include "engine/parallel.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/cpu/cpu.hpp"

namespace ktape::kernels {

namespace {

// Calls f(full offset, part offset, run length) for every contiguous run of the slice, in
// elements. Trailing axes the slice covers whole are merged into one run.
template <class F>
void for_runs(const ArrayRef& full, const ArrayRef& part, const std::int64_t* start, F f) {
  const int r = full.ndim;
  if (r == 0) {
    f(0, 0, part.size);
    return;
  }
  int inner = r - 1;  // first axis of the contiguous run
  std::int64_t run = part.dims[r - 1];
  while (inner > 0 && part.dims[inner] == full.dims[inner]) {
    --inner;
    run *= part.dims[inner];
  }
  std::int64_t strides[kMaxRank];
  contiguous_strides(full.dims, r, strides);
  std::int64_t base = 0;
  for (int d = 0; d < r; ++d) base += start[d] * strides[d];
  std::int64_t rows = 1;
  for (int d = 0; d < inner; ++d) rows *= part.dims[d];
  strided_walk<1>(part.dims, inner, rows, {strides}, {base},
                  [&](std::int64_t row, const auto& o) { f(o[0], row * run, run); });
}

void slice_kernel(const KernelCall& c) {
  const std::size_t es = dtype_size(c.out.dtype);
  const char* x = static_cast<const char*>(c.in[0].data);
  char* y = static_cast<char*>(c.out.data);
  if (c.out.size == 0) return;
  for_runs(c.in[0], c.out, attrs::Slice::of(*c.attrs).start.data(),
           [&](std::int64_t fo, std::int64_t po, std::int64_t n) {
             std::memcpy(y + po * static_cast<std::int64_t>(es),
                         x + fo * static_cast<std::int64_t>(es), static_cast<std::size_t>(n) * es);
           });
}

void slice_pad_kernel(const KernelCall& c) {
  const std::size_t es = dtype_size(c.out.dtype);
  const char* g = static_cast<const char*>(c.in[0].data);
  char* y = static_cast<char*>(c.out.data);
  std::memset(y, 0, static_cast<std::size_t>(c.out.size) * es);
  if (c.in[0].size == 0) return;
  for_runs(c.out, c.in[0], attrs::Slice::of(*c.attrs).start.data(),
           [&](std::int64_t fo, std::int64_t po, std::int64_t n) {
             std::memcpy(y + fo * static_cast<std::int64_t>(es),
                         g + po * static_cast<std::int64_t>(es), static_cast<std::size_t>(n) * es);
           });
}

// Output rows [r0, r1) of a transpose: row = every output index but the last. Each row is a
// contiguous copy when the permutation keeps the last axis last, else a strided gather.
template <std::size_t ES>
void transpose_rows(const KernelCall& c, const std::int64_t* src_strides, std::int64_t r0,
                    std::int64_t r1) {
  const int r = c.out.ndim;
  const std::int64_t n = c.out.dims[r - 1], step = src_strides[r - 1];
  const char* x = static_cast<const char*>(c.in[0].data);
  char* y = static_cast<char*>(c.out.data);
  std::int64_t idx[kMaxRank] = {}, off = 0;  // the source offset of row r0
  std::int64_t rest = r0;
  for (int d = r - 2; d >= 0; --d) {
    idx[d] = rest % c.out.dims[d];
    rest /= c.out.dims[d];
    off += idx[d] * src_strides[d];
  }
  for (std::int64_t row = r0; row < r1; ++row) {
    char* dst = y + static_cast<std::size_t>(row * n) * ES;
    if (step == 1) {
      std::memcpy(dst, x + static_cast<std::size_t>(off) * ES, static_cast<std::size_t>(n) * ES);
    } else {
      for (std::int64_t j = 0; j < n; ++j)
        std::memcpy(dst + static_cast<std::size_t>(j) * ES,
                    x + static_cast<std::size_t>(off + j * step) * ES, ES);
    }
    for (int d = r - 2; d >= 0; --d) {
      off += src_strides[d];
      if (++idx[d] < c.out.dims[d]) break;
      off -= src_strides[d] * c.out.dims[d];
      idx[d] = 0;
    }
  }
}

template <std::size_t ES>
void transpose_kernel(const KernelCall& c) {
  const int r = c.out.ndim;
  if (c.out.size == 0) return;
  if (r == 0) {
    std::memcpy(c.out.data, c.in[0].data, ES);
    return;
  }
  std::int64_t in_strides[kMaxRank], src_strides[kMaxRank];
  contiguous_strides(c.in[0].dims, r, in_strides);
  const auto perm = attrs::IntList::of(*c.attrs).values;
  for (int d = 0; d < r; ++d) src_strides[d] = in_strides[perm[static_cast<std::size_t>(d)]];
  const std::int64_t n = c.out.dims[r - 1];
  const std::int64_t rows = c.out.size / n;
  // A row costs its elements and a fixed part (a copy's call, a line of the source read apart
  // from the last row's): an RNN's (batch, time, features) input turned time-major is 3,584
  // rows of 28, 47 us on one thread with the source out of cache.
  const double per_row = static_cast<double>(n) * (src_strides[r - 1] == 1 ? 0.25 : 1.0) + 16.0;
  parallel_for(
      rows, per_row,
      [&](std::int64_t r0, std::int64_t r1) { transpose_rows<ES>(c, src_strides, r0, r1); }, 1);
}

}  // namespace

void register_cpu_layout(Backend& b) {
  for (int d = 0; d < kNumDTypes; ++d) {
    const auto dt = static_cast<DType>(d);
    if (!b.get(Op::Transpose, dt)) continue;
    switch (dtype_size(dt)) {
      case 1:
        b.set(Op::Transpose, dt, &transpose_kernel<1>);
        break;
      case 2:
        b.set(Op::Transpose, dt, &transpose_kernel<2>);
        break;
      case 4:
        b.set(Op::Transpose, dt, &transpose_kernel<4>);
        break;
      case 8:
        b.set(Op::Transpose, dt, &transpose_kernel<8>);
        break;
      default:
        break;
    }
  }
  for (int d = 0; d < kNumDTypes; ++d) {
    if (b.get(Op::Slice, static_cast<DType>(d)))
      b.set(Op::Slice, static_cast<DType>(d), &slice_kernel);
    if (b.get(Op::SlicePad, static_cast<DType>(d)))
      b.set(Op::SlicePad, static_cast<DType>(d), &slice_pad_kernel);
  }
}

}  // namespace ktape::kernels
