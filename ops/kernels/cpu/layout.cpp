// cpu layout kernels: Slice and SlicePad as row copies (memcpy of the contiguous inner run),
// for every dtype (they only move bytes). Attrs as in ops/layout.cpp.
#include <cstring>

#include "engine/backend.hpp"
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

}  // namespace

void register_cpu_layout(Backend& b) {
  for (int d = 0; d < kNumDTypes; ++d) {
    if (b.get(Op::Slice, static_cast<DType>(d)))
      b.set(Op::Slice, static_cast<DType>(d), &slice_kernel);
    if (b.get(Op::SlicePad, static_cast<DType>(d)))
      b.set(Op::SlicePad, static_cast<DType>(d), &slice_pad_kernel);
  }
}

}  // namespace ktape::kernels
