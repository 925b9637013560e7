// cpu layout kernels: Slice, SlicePad, Concat and ConcatPart as copies of contiguous runs, and
// Transpose, Reverse, Pad and Gather, split over output rows or elements by the grain policy, for
// every dtype (they only move bytes); GatherGrad's sums. Attrs as in ops/layout.cpp and
// ops/image.cpp.
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

// Rows of `run` elements that sit one after another in a contiguous array and apart in a
// strided one: row i at base + (i's coordinates over dims[0, nd)) . strides there.
struct StridedRows {
  const std::int64_t* dims = nullptr;
  int nd = 0;
  const std::int64_t* strides = nullptr;
  std::int64_t base = 0, rows = 0, run = 0;
};

// The strided offset of row `row` of s, and of the rows after it as next() steps on.
struct RowCursor {
  RowCursor(const StridedRows& rows, std::int64_t row) : s(rows), off(rows.base) {
    for (int d = s.nd - 1; d >= 0; --d) {
      idx[d] = row % s.dims[d];
      row /= s.dims[d];
      off += idx[d] * s.strides[d];
    }
  }
  void next() {
    for (int d = s.nd - 1; d >= 0; --d) {
      off += s.strides[d];
      if (++idx[d] < s.dims[d]) return;
      off -= s.strides[d] * s.dims[d];
      idx[d] = 0;
    }
  }
  const StridedRows& s;
  std::int64_t idx[kMaxRank] = {};
  std::int64_t off;
};

// n elements of ES bytes: memcpy for a long run; a short one (a channel row) inline, in blocks
// of 64 bytes, then element by element (a call per run costs more than the copy).
template <std::size_t ES>
inline void copy_elems(char* to, const char* from, std::int64_t n) {
  const auto bytes = static_cast<std::size_t>(n) * ES;
  if (bytes > 512) {
    std::memcpy(to, from, bytes);
    return;
  }
  std::size_t i = 0;
  for (; i + 64 <= bytes; i += 64) std::memcpy(to + i, from + i, 64);
  for (; i < bytes; i += ES) std::memcpy(to + i, from + i, ES);
}

// Gathers the rows from the strided array `from` into the contiguous `to`, split over threads by
// the grain policy in ranges of elements: a row cut at a task's end goes on in the next task. A
// row costs its elements and a fixed part (its copy's start, its odometer step).
template <std::size_t ES>
void copy_rows(const StridedRows& s, const void* from, void* to) {
  if (s.rows <= 0 || s.run <= 0) return;
  const char* src = static_cast<const char*>(from);
  char* dst = static_cast<char*>(to);
  parallel_for(
      s.rows * s.run, 0.25 + 16.0 / static_cast<double>(s.run),
      [&](std::int64_t e0, std::int64_t e1) {
        auto copy = [&](std::int64_t strided_at, std::int64_t flat_at, std::int64_t n) {
          copy_elems<ES>(dst + static_cast<std::size_t>(flat_at) * ES,
                         src + static_cast<std::size_t>(strided_at) * ES, n);
        };
        if (s.nd <= 1) {  // rows evenly apart (a concatenation's part): no odometer
          const std::int64_t pitch = s.nd == 1 ? s.strides[0] : 0;
          std::int64_t at = e0 % s.run, off = s.base + (e0 / s.run) * pitch;
          for (std::int64_t e = e0; e < e1; off += pitch) {
            const std::int64_t n = std::min(s.run - at, e1 - e);
            copy(off + at, e, n);
            e += n;
            at = 0;
          }
          return;
        }
        RowCursor row(s, e0 / s.run);
        for (std::int64_t e = e0, at = e0 % s.run; e < e1; row.next()) {
          const std::int64_t n = std::min(s.run - at, e1 - e);
          copy(row.off + at, e, n);
          e += n;
          at = 0;
        }
      },
      1);
}

// The slice `part` of `full` (from `start` on each axis) as rows: trailing axes the slice covers
// whole merge into one run. `strides` (kMaxRank) holds full's strides for the result.
StridedRows slice_rows(const ArrayRef& full, const ArrayRef& part, const std::int64_t* start,
                       std::int64_t* strides) {
  const int r = full.ndim;
  StridedRows s;
  s.dims = part.dims;
  s.strides = strides;
  if (r == 0) {
    s.rows = 1;
    s.run = part.size;
    return s;
  }
  int inner = r - 1;  // first axis of the contiguous run
  s.run = part.dims[r - 1];
  while (inner > 0 && part.dims[inner] == full.dims[inner]) {
    --inner;
    s.run *= part.dims[inner];
  }
  contiguous_strides(full.dims, r, strides);
  for (int d = 0; d < r; ++d) s.base += start[d] * strides[d];
  s.nd = inner;
  s.rows = 1;
  for (int d = 0; d < inner; ++d) s.rows *= part.dims[d];
  return s;
}

template <std::size_t ES>
void slice_kernel(const KernelCall& c) {
  std::int64_t strides[kMaxRank];
  copy_rows<ES>(slice_rows(c.in[0], c.out, attrs::Slice::of(*c.attrs).start.data(), strides),
                c.in[0].data, c.out.data);
}

// SlicePad (a slice's gradient): the output split over threads in ranges of elements, each
// zeroed and then given the slice's rows that fall in it (the first found by bisection: rows
// lie in increasing order), so every byte is written while in cache.
template <std::size_t ES>
void slice_pad_kernel(const KernelCall& c) {
  std::int64_t strides[kMaxRank];
  const StridedRows s =
      slice_rows(c.out, c.in[0], attrs::Slice::of(*c.attrs).start.data(), strides);
  const char* g = static_cast<const char*>(c.in[0].data);
  char* y = static_cast<char*>(c.out.data);
  if (c.out.size <= 0) return;
  const bool rows = s.rows > 0 && s.run > 0;
  const double size = static_cast<double>(c.out.size);
  const double cost =
      0.125 +
      (rows ? (0.25 * static_cast<double>(s.rows * s.run) + 16.0 * static_cast<double>(s.rows)) /
                  size
            : 0.0);
  parallel_for(
      c.out.size, cost,
      [&](std::int64_t e0, std::int64_t e1) {
        std::memset(y + static_cast<std::size_t>(e0) * ES, 0,
                    static_cast<std::size_t>(e1 - e0) * ES);
        if (!rows) return;
        std::int64_t lo = 0, hi = s.rows;  // the first row that ends after e0
        while (lo < hi) {
          const std::int64_t mid = lo + (hi - lo) / 2;
          if (RowCursor(s, mid).off + s.run > e0)
            hi = mid;
          else
            lo = mid + 1;
        }
        RowCursor row(s, lo);
        for (std::int64_t r = lo; r < s.rows && row.off < e1; ++r, row.next()) {
          const std::int64_t a = std::max(row.off, e0), b = std::min(row.off + s.run, e1);
          copy_elems<ES>(y + static_cast<std::size_t>(a) * ES,
                         g + static_cast<std::size_t>(r * s.run + a - row.off) * ES, b - a);
        }
      },
      1);
}

// Concat: each input's rows (one per index before the axis) placed into the output's, input
// after input, each split over threads by the grain policy. Inputs too small to split (on
// average) run as tasks of their own instead, in groups. Placing one input's rows at a time
// measured faster than walking the output row by row (BM_LayoutCopy/0: 122-128 against 152-211
// us on one thread) or placing inputs side by side (66 against 75 us on two).
template <std::size_t ES>
void concat_kernel(const KernelCall& c) {
  const int axis = attrs::Axis::of(*c.attrs).axis;
  std::int64_t outer, n_out, inner;
  split_axis(c.out.dims, c.out.ndim, axis, outer, n_out, inner);
  const std::int64_t pitch = n_out * inner;
  if (c.out.size <= 0 || pitch <= 0) return;
  auto place = [&](int k, std::int64_t col) {  // input k at column col of every output row
    const std::int64_t w = c.in[k].dims[axis] * inner;
    if (w == 0) return;
    const char* x = static_cast<const char*>(c.in[k].data);
    char* y = static_cast<char*>(c.out.data) + static_cast<std::size_t>(col) * ES;
    parallel_for(
        outer * w, 0.25 + 16.0 / static_cast<double>(w),
        [&](std::int64_t e0, std::int64_t e1) {
          for (std::int64_t e = e0, o = e0 / w, at = e0 % w; e < e1; ++o, at = 0) {
            const std::int64_t n = std::min(w - at, e1 - e);
            copy_elems<ES>(y + static_cast<std::size_t>(o * pitch + at) * ES,
                           x + static_cast<std::size_t>(e) * ES, n);
            e += n;
          }
        },
        1);
  };
  const double per_input =
      (0.25 * static_cast<double>(c.out.size) + 16.0 * static_cast<double>(outer * c.n_in)) /
      static_cast<double>(c.n_in);
  if (c.n_in == 1 || per_input >= 2 * kTaskWork) {
    std::int64_t col = 0;
    for (int k = 0; k < c.n_in; col += c.in[k++].dims[axis] * inner) place(k, col);
    return;
  }
  // Input k's first column, for a group to start anywhere: in the thread's buffer, grown as calls
  // need, never shrunk (the groups run isolated, so no other call reuses it meanwhile).
  thread_local std::vector<std::int64_t> cols;
  if (cols.size() < static_cast<std::size_t>(c.n_in)) cols.resize(static_cast<std::size_t>(c.n_in));
  std::int64_t* col = cols.data();  // (the tasks below see other threads' `cols`)
  col[0] = 0;
  for (int k = 1; k < c.n_in; ++k) col[k] = col[k - 1] + c.in[k - 1].dims[axis] * inner;
  tbb::this_task_arena::isolate([&] {
    parallel_for(
        c.n_in, per_input,
        [&](std::int64_t k0, std::int64_t k1) {
          for (std::int64_t k = k0; k < k1; ++k) place(static_cast<int>(k), col[k]);
        },
        1);
  });
}

// ConcatPart(g, x0..xn-1) (a concatenation's gradient for input k): g's rows of input k's part.
template <std::size_t ES>
void concat_part_kernel(const KernelCall& c) {
  const auto a = attrs::ConcatPart::of(*c.attrs);
  const ArrayRef& g = c.in[0];
  std::int64_t outer, n_g, inner;
  split_axis(g.dims, g.ndim, a.axis, outer, n_g, inner);
  std::int64_t off = 0;
  for (std::size_t k = 0; k < a.k; ++k) off += c.in[1 + k].dims[a.axis];
  const std::int64_t dims[1] = {outer}, strides[1] = {n_g * inner};
  copy_rows<ES>({dims, 1, strides, off * inner, outer, c.out.dims[a.axis] * inner}, g.data,
                c.out.data);
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

}  // namespace

void register_cpu_layout(Backend& b) {
  set_by_size(b, Op::Transpose, [](auto es) { return &transpose_kernel<es.value>; });
  set_by_size(b, Op::Reverse, [](auto es) { return &reverse_kernel<es.value>; });
  set_by_size(b, Op::Pad, [](auto es) { return &pad_kernel<es.value>; });
  set_by_size(b, Op::Gather, [](auto es) { return &gather_kernel<es.value>; });
  b.set(Op::GatherGrad, DType::float32, &gather_grad_kernel<float>);
  b.set(Op::GatherGrad, DType::float64, &gather_grad_kernel<double>);
  set_by_size(b, Op::Slice, [](auto es) { return &slice_kernel<es.value>; });
  set_by_size(b, Op::SlicePad, [](auto es) { return &slice_pad_kernel<es.value>; });
  set_by_size(b, Op::Concat, [](auto es) { return &concat_kernel<es.value>; });
  set_by_size(b, Op::ConcatPart, [](auto es) { return &concat_part_kernel<es.value>; });
}

}  // namespace ktape::kernels
