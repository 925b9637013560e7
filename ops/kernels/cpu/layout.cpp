// cpu layout kernels: Slice and SlicePad as row copies (memcpy of the contiguous inner run),
// and Transpose, Reverse, Pad and Gather split over output rows by the grain policy, for every
// dtype (they only move bytes); GatherGrad's sums. Attrs as in ops/layout.cpp and ops/image.cpp.
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/backend.hpp"
#include "engine/parallel.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/cpu/cpu.hpp"
#include "ops/kernels/reference/reference.hpp"

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

// The source row (over the source's axes before `k`, of dims `src_dims`) that row `row` of the
// output (over its axes before `k`, of dims `dims`) reads: each coordinate mirrored on a flipped
// axis (Reverse) or shifted back by `before` (Pad; -1 when it falls outside the source).
inline std::int64_t source_row(std::int64_t row, int k, const std::int64_t* dims,
                               const std::int64_t* src_dims, const bool* flip,
                               const std::int64_t* before) {
  std::int64_t src = 0, mul = 1;
  for (int d = k - 1; d >= 0; --d) {
    std::int64_t coord = row % dims[d];
    row /= dims[d];
    if (flip && flip[d]) coord = dims[d] - 1 - coord;
    if (before) coord -= before[d];
    if (coord < 0 || coord >= src_dims[d]) return -1;
    src += coord * mul;
    mul *= src_dims[d];
  }
  return src;
}

// Reverse: the innermost flipped axis k and the axes after it (a block of B elements, kept in
// order) make an output row, the source row's L = dims[k] blocks in reverse order (the axes
// before k mirrored where flipped). The blocks split over threads (one flipped axis of time-major
// steps is a row of large blocks), or the rows where blocks are single elements.
template <std::size_t ES>
void reverse_kernel(const KernelCall& c) {
  const ArrayRef& in = c.in[0];
  const int r = in.ndim;
  if (in.size == 0) return;
  bool flip[kMaxRank] = {};
  int k = -1;
  for (auto a : attrs::IntList::of(*c.attrs).values) {
    flip[a] = true;
    k = std::max(k, static_cast<int>(a));
  }
  const char* x = static_cast<const char*>(in.data);
  char* y = static_cast<char*>(c.out.data);
  if (k < 0 || r == 0) {
    std::memcpy(y, x, static_cast<std::size_t>(in.size) * ES);
    return;
  }
  std::int64_t block = 1;
  for (int d = k + 1; d < r; ++d) block *= in.dims[d];
  const std::int64_t len = in.dims[k], rows = in.size / (len * block);
  const std::size_t row_bytes = static_cast<std::size_t>(len * block) * ES;
  const std::size_t block_bytes = static_cast<std::size_t>(block) * ES;
  if (block == 1) {
    parallel_for(
        rows, static_cast<double>(len) + 16.0,
        [&](std::int64_t r0, std::int64_t r1) {
          for (std::int64_t row = r0; row < r1; ++row) {
            const std::int64_t src = source_row(row, k, in.dims, in.dims, flip, nullptr);
            const char* from = x + static_cast<std::size_t>(src) * row_bytes;
            char* to = y + static_cast<std::size_t>(row) * row_bytes;
            for (std::int64_t j = 0; j < len; ++j)
              std::memcpy(to + static_cast<std::size_t>(j) * ES,
                          from + static_cast<std::size_t>(len - 1 - j) * ES, ES);
          }
        },
        1);
    return;
  }
  parallel_for(
      rows * len, 0.25 * static_cast<double>(block) + 16.0,
      [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) {
          const std::int64_t row = i / len, j = i % len;
          const std::int64_t src = source_row(row, k, in.dims, in.dims, flip, nullptr);
          std::memcpy(y + static_cast<std::size_t>(row) * row_bytes +
                          static_cast<std::size_t>(j) * block_bytes,
                      x + static_cast<std::size_t>(src) * row_bytes +
                          static_cast<std::size_t>(len - 1 - j) * block_bytes,
                      block_bytes);
        }
      },
      1);
}

// Pad: the innermost padded axis k and the axes after it make an output row of W elements: the
// source row's elements shifted by before[k] times the block after k (negative amounts crop),
// zeros around them, or a row of zeros where the axes before k fall outside the source. The
// rows split over threads.
template <std::size_t ES>
void pad_kernel(const KernelCall& c) {
  const auto p = attrs::Pad::of(*c.attrs);
  const ArrayRef& in = c.in[0];
  const int r = c.out.ndim;
  const char* x = static_cast<const char*>(in.data);
  char* y = static_cast<char*>(c.out.data);
  if (c.out.size == 0) return;
  int k = -1;
  for (int d = 0; d < r; ++d)
    if (p.before[static_cast<std::size_t>(d)] != 0 || p.after[static_cast<std::size_t>(d)] != 0)
      k = d;
  if (k < 0) {  // nothing padded: the same shape
    std::memcpy(y, x, static_cast<std::size_t>(c.out.size) * ES);
    return;
  }
  std::int64_t block = 1;
  for (int d = k + 1; d < r; ++d) block *= c.out.dims[d];
  const std::int64_t w_out = c.out.dims[k] * block, w_in = in.dims[k] * block;
  const std::int64_t shift = p.before[static_cast<std::size_t>(k)] * block;
  const std::int64_t j0 = std::clamp<std::int64_t>(shift, 0, w_out);
  const std::int64_t j1 = std::clamp<std::int64_t>(shift + w_in, j0, w_out);
  const std::int64_t rows = c.out.size / w_out;
  parallel_for(
      rows, 0.25 * static_cast<double>(w_out) + 16.0,
      [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t row = r0; row < r1; ++row) {
          const std::int64_t src =
              source_row(row, k, c.out.dims, in.dims, nullptr, p.before.data());
          char* to = y + static_cast<std::size_t>(row * w_out) * ES;
          if (src < 0 || j1 == j0) {
            std::memset(to, 0, static_cast<std::size_t>(w_out) * ES);
            continue;
          }
          std::memset(to, 0, static_cast<std::size_t>(j0) * ES);
          std::memcpy(to + static_cast<std::size_t>(j0) * ES,
                      x + static_cast<std::size_t>(src * w_in + j0 - shift) * ES,
                      static_cast<std::size_t>(j1 - j0) * ES);
          std::memset(to + static_cast<std::size_t>(j1) * ES, 0,
                      static_cast<std::size_t>(w_out - j1) * ES);
        }
      },
      1);
}

// A call's indices as rows of `rows`, checked in order (the first bad one reported as the
// reference reports it: gather_row), in the calling thread's buffer, grown as calls need and
// never shrunk (8 bytes an index of the thread's largest call). Callers run their parallel parts
// isolated, so that no other call's kernel reuses the buffer on this thread meanwhile.
const std::int64_t* gather_rows(const ArrayRef& idx, std::int64_t rows) {
  thread_local std::vector<std::int64_t> buf;
  if (buf.size() < static_cast<std::size_t>(idx.size))
    buf.resize(static_cast<std::size_t>(idx.size));
  auto take = [&](const auto* p) {
    for (std::int64_t i = 0; i < idx.size; ++i) {
      const auto r = static_cast<std::int64_t>(p[i]);
      buf[static_cast<std::size_t>(i)] = r >= 0 && r < rows ? r : gather_row(idx, i, rows);
    }
  };
  if (idx.dtype == DType::int32)
    take(static_cast<const std::int32_t*>(idx.data));
  else if (idx.dtype == DType::int64)
    take(static_cast<const std::int64_t*>(idx.data));
  else
    for (std::int64_t i = 0; i < idx.size; ++i)
      buf[static_cast<std::size_t>(i)] = gather_row(idx, i, rows);
  return buf.data();
}

// Gather(reference, indices): out[i] = reference[indices[i]], rows of `width` elements, copied
// split over threads once every index is checked.
template <std::size_t ES>
void gather_kernel(const KernelCall& c) {
  const ArrayRef& ref = c.in[0];
  const ArrayRef& idx = c.in[1];
  const std::int64_t rows = ref.dims[0];
  const std::int64_t width = rows > 0 ? ref.size / rows : 0;
  const std::int64_t* at = gather_rows(idx, rows);
  const std::size_t bytes = static_cast<std::size_t>(width) * ES;
  const char* x = static_cast<const char*>(ref.data);
  char* y = static_cast<char*>(c.out.data);
  tbb::this_task_arena::isolate([&] {
    parallel_for(
        idx.size, 0.25 * static_cast<double>(width) + 16.0,
        [&](std::int64_t i0, std::int64_t i1) {
          for (std::int64_t i = i0; i < i1; ++i)
            std::memcpy(y + static_cast<std::size_t>(i) * bytes,
                        x + static_cast<std::size_t>(at[i]) * bytes, bytes);
        },
        1);
  });
}

// GatherGrad(g, indices, reference): zeros of reference's shape, g's rows added at the indices
// (an embedding's gradient). The zeros are written split over threads; then slots of destination
// rows each add, in index order, the rows of g whose index falls in them, so every row sums in the
// reference's order. Each slot reads every index, so there are at most width / 32 slots (the
// adds stay 32 or more per index read) and at most 16.
template <class T>
void gather_grad_kernel(const KernelCall& c) {
  const ArrayRef& g = c.in[0];
  const ArrayRef& idx = c.in[1];
  const std::int64_t rows = c.out.dims[0];
  const std::int64_t width = rows > 0 ? c.out.size / rows : 0;
  const T* pg = ptr<T>(g);
  T* y = ptr<T>(c.out);
  const std::int64_t* at = gather_rows(idx, rows);
  const double adds = static_cast<double>(idx.size) * static_cast<double>(width);
  const std::int64_t slots =
      std::min(slot_count(adds, rows, 16), std::max<std::int64_t>(1, width / 32));
  tbb::this_task_arena::isolate([&] {
    parallel_for(c.out.size, 0.25,
                 [&](std::int64_t i0, std::int64_t i1) { std::fill(y + i0, y + i1, T(0)); });
    parallel_slots(slots, [&](std::int64_t s) {
      const std::int64_t r0 = rows * s / slots, r1 = rows * (s + 1) / slots;
      for (std::int64_t i = 0; i < idx.size; ++i) {
        const std::int64_t r = at[i];
        if (r < r0 || r >= r1) continue;
        T* dst = y + r * width;
        const T* src = pg + i * width;
        for (std::int64_t j = 0; j < width; ++j) dst[j] += src[j];
      }
    });
  });
}

// Sets op's kernel for every dtype the backend already has one for, by element size.
template <template <std::size_t> class Kernel>
void set_by_size(Backend& b, Op op) {
  for (int d = 0; d < kNumDTypes; ++d) {
    const auto dt = static_cast<DType>(d);
    if (!b.get(op, dt)) continue;
    switch (dtype_size(dt)) {
      case 1:
        b.set(op, dt, &Kernel<1>::run);
        break;
      case 2:
        b.set(op, dt, &Kernel<2>::run);
        break;
      case 4:
        b.set(op, dt, &Kernel<4>::run);
        break;
      case 8:
        b.set(op, dt, &Kernel<8>::run);
        break;
      default:
        break;
    }
  }
}
template <std::size_t ES>
struct TransposeKernel {
  static void run(const KernelCall& c) { transpose_kernel<ES>(c); }
};
template <std::size_t ES>
struct ReverseKernel {
  static void run(const KernelCall& c) { reverse_kernel<ES>(c); }
};
template <std::size_t ES>
struct PadKernel {
  static void run(const KernelCall& c) { pad_kernel<ES>(c); }
};
template <std::size_t ES>
struct GatherKernel {
  static void run(const KernelCall& c) { gather_kernel<ES>(c); }
};

}  // namespace

void register_cpu_layout(Backend& b) {
  set_by_size<TransposeKernel>(b, Op::Transpose);
  set_by_size<ReverseKernel>(b, Op::Reverse);
  set_by_size<PadKernel>(b, Op::Pad);
  set_by_size<GatherKernel>(b, Op::Gather);
  b.set(Op::GatherGrad, DType::float32, &gather_grad_kernel<float>);
  b.set(Op::GatherGrad, DType::float64, &gather_grad_kernel<double>);
  for (int d = 0; d < kNumDTypes; ++d) {
    if (b.get(Op::Slice, static_cast<DType>(d)))
      b.set(Op::Slice, static_cast<DType>(d), &slice_kernel);
    if (b.get(Op::SlicePad, static_cast<DType>(d)))
      b.set(Op::SlicePad, static_cast<DType>(d), &slice_pad_kernel);
  }
}

}  // namespace ktape::kernels
