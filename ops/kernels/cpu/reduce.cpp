// cpu reductions, split over threads: the bias-gradient SumToLike (sums over leading rows), which
// training hits on every step, its adjoint BroadcastToLike, Sum, Mean, Max, Min, Prod over axes,
// and ArgMax, ArgMin, Cumsum, Cumprod by lines (the reference's bits).
#include <tbb/task_arena.h>

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/backend.hpp"
#include "engine/parallel.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/broadcast.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/cpu/cpu.hpp"
#include "ops/kernels/functors.hpp"

namespace ktape::kernels {

namespace {

// Partial column sums of the row blocks, owned by the calling thread: grown once, never freed
// while the thread lives (steady-state calls allocate nothing).
template <class T>
std::vector<T>& partials() {
  thread_local std::vector<T> p;
  return p;
}

// Runs f(b, partial) for blocks b in [0, blocks), each a task writing `width` partial results at
// `partial`, and returns the partials (block b at b * width) for the caller to combine in order.
// Isolated: a thread waiting here must not run another call's kernel, which would reuse this
// thread's partials underneath.
template <class T, class F>
const T* in_blocks(std::int64_t blocks, std::int64_t width, F&& f) {
  std::vector<T>& part = partials<T>();
  if (part.size() < static_cast<std::size_t>(blocks * width))
    part.resize(static_cast<std::size_t>(blocks * width));
  T* pp = part.data();
  tbb::this_task_arena::isolate(
      [&] { parallel_slots(blocks, [&](std::int64_t b) { f(b, pp + b * width); }); });
  return pp;
}

// Sums rows [r0, r1) of the rows x w array g into y[0, w) (y is set, not added to), four rows
// at a time so y is loaded and stored once per four rows.
template <class T>
void sum_rows(const T* g, std::int64_t w, std::int64_t r0, std::int64_t r1, T* __restrict y) {
  for (std::int64_t j = 0; j < w; ++j) y[j] = T(0);
  std::int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const T* __restrict a = g + r * w;
    for (std::int64_t j = 0; j < w; ++j) y[j] += (a[j] + a[w + j]) + (a[2 * w + j] + a[3 * w + j]);
  }
  for (; r < r1; ++r) {
    const T* __restrict a = g + r * w;
    for (std::int64_t j = 0; j < w; ++j) y[j] += a[j];
  }
}

// The max (Max) or min of the run x[0, n), with MaxF's and MinF's bits: 16 lanes at a time,
// each keeping the first of equal values as the in-order walk does, then the lanes combined.
// Equal values other than zeros have the same bits, so lanes change nothing but which zero
// wins: a zero result is taken again in order (`in_order`). Any NaN gives the quiet NaN, as in
// order.
template <class T, bool Max, class InOrder>
T run_extreme(const T* __restrict x, std::int64_t n, InOrder&& in_order) {
  constexpr std::int64_t L = 16;
  if (n < 2 * L) return in_order();
  T acc[L];
  bool nan = false;
  for (std::int64_t j = 0; j < L; ++j) acc[j] = x[j];
  auto pick = [](T a, T b) {
    if constexpr (Max)
      return a >= b ? a : b;
    else
      return a <= b ? a : b;
  };
  std::int64_t i = L;
  for (; i + L <= n; i += L)
    for (std::int64_t j = 0; j < L; ++j) acc[j] = pick(acc[j], x[i + j]);
  for (std::int64_t j = 0; i + j < n; ++j) acc[j] = pick(acc[j], x[i + j]);
  if constexpr (std::is_floating_point_v<T>) {
    for (std::int64_t k = 0; k < n; k += L)  // a NaN may have been passed over by a lane
      for (std::int64_t j = 0; j < L && k + j < n; ++j) nan |= x[k + j] != x[k + j];
    if (nan) return std::numeric_limits<T>::quiet_NaN();
  }
  T m = acc[0];
  for (std::int64_t j = 1; j < L; ++j) m = pick(m, acc[j]);
  if constexpr (std::is_floating_point_v<T>)
    if (m == T(0)) return in_order();
  return m;
}

// The sum of x[0, n) in 16 lanes (x[i] into lane i % 16, in order), the lanes then added
// pairwise: dependency chains 16 times shorter than the in-order sum's, whose rounding it does
// not keep (it is usually nearer the exact sum). For the blocks of a sum of everything of
// kLaneSumMin or more values, whose bits are already the reference's only within rounding.
constexpr std::int64_t kLaneSumMin = 1024;
template <class C, class T>
C lane_sum(const T* __restrict x, std::int64_t n) {
  constexpr std::int64_t L = 16;
  C acc[L] = {};
  std::int64_t i = 0;
  for (; i + L <= n; i += L)
    for (std::int64_t j = 0; j < L; ++j) acc[j] += static_cast<C>(x[i + j]);
  for (std::int64_t j = 0; i + j < n; ++j) acc[j] += static_cast<C>(x[i + j]);
  for (std::int64_t w = L / 2; w >= 1; w /= 2)
    for (std::int64_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}

// Rows at least this wide split by columns instead of rows (partial sums stay <= 64 x kWideRow).
constexpr std::int64_t kWideRow = 4096;

// out has the trailing dims of g (after dropping leading size-1 dims): column sums. The rows
// split into blocks, each summed as one contiguous stream (blocks of columns would read the
// array with a stride: 2.7x slower at 3584 x 512); the blocks' partial sums are added in block
// order. Rows of kWideRow or more split by columns of kWideRow / 4 (runs of 4 KB in float32).
// The split depends on the shape alone, never on the thread count.
template <class T>
bool column_sum(const ArrayRef& g, const ArrayRef& out, T* y) {
  int lead = 0;
  while (lead < out.ndim && out.dims[lead] == 1 && out.ndim - lead > 0) ++lead;
  const int tail = out.ndim - lead;
  if (tail > g.ndim) return false;
  for (int i = 0; i < tail; ++i)
    if (out.dims[lead + i] != g.dims[g.ndim - tail + i]) return false;
  const std::int64_t w = out.size;
  if (w == 0) return true;
  const std::int64_t rows = g.size / w;
  const T* pg = ptr<T>(g);
  if (w >= kWideRow) {  // wide rows: blocks of columns read long runs, and need no partials
    parallel_for(
        w, static_cast<double>(rows),
        [&](std::int64_t c0, std::int64_t c1) {
          for (std::int64_t j = c0; j < c1; ++j) y[j] = T(0);
          for (std::int64_t r = 0; r < rows; ++r) {
            const T* __restrict a = pg + r * w;
            for (std::int64_t j = c0; j < c1; ++j) y[j] += a[j];
          }
        },
        kWideRow / 4);
    return true;
  }
  const std::int64_t blocks = slot_count(static_cast<double>(g.size), rows, 64);
  if (blocks <= 1) {
    sum_rows(pg, w, 0, rows, y);
    return true;
  }
  const T* pp = in_blocks<T>(blocks, w, [&](std::int64_t b, T* out) {
    sum_rows(pg, w, rows * b / blocks, rows * (b + 1) / blocks, out);
  });
  for (std::int64_t j = 0; j < w; ++j) y[j] = pp[j];
  for (std::int64_t b = 1; b < blocks; ++b)
    for (std::int64_t j = 0; j < w; ++j) y[j] += pp[b * w + j];
  return true;
}

template <class T>
void sum_to_like_kernel(const KernelCall& c) {
  T* y = ptr<T>(c.out);
  if (c.out.size == 1) {
    double s = 0;
    const T* pg = ptr<T>(c.in[0]);
    for (std::int64_t i = 0; i < c.in[0].size; ++i) s += static_cast<double>(pg[i]);
    y[0] = static_cast<T>(s);
    return;
  }
  if (column_sum<T>(c.in[0], c.out, y)) return;
  sum_to_like<T>(c);  // the general strided case, shared with the reference backend
}

// BroadcastToLike(g, like): g broadcast to like's shape, the gradient of a sum or a mean (a
// loss's mean, a weight regularizer's sum over the weights). Rows of the output's last axis, each
// a copy of a row of g or one of its values repeated, split over threads; g's offset for the
// next row advances as an odometer over the leading axes. Copies only: the reference's bits.
template <class T>
void broadcast_to_like_kernel(const KernelCall& c) {
  const ArrayRef& g = c.in[0];
  const T* pg = ptr<T>(g);
  T* y = ptr<T>(c.out);
  const std::int64_t n = c.out.size;
  if (n == 0) return;
  if (g.size == 1) {
    const T v = pg[0];
    parallel_for(n, 0.25, [&](std::int64_t i0, std::int64_t i1) { std::fill(y + i0, y + i1, v); });
    return;
  }
  const int r = c.out.ndim;
  const std::int64_t* dims = c.out.dims;
  std::int64_t sg[kMaxRank];
  broadcast_strides(g, r, dims, sg);
  const std::int64_t w = dims[r - 1], rows = n / w;
  const bool copy = sg[r - 1] != 0;  // g's rows run along the last axis (stride 1)
  parallel_for(
      rows, 0.25 * static_cast<double>(w) + 16.0,
      [&](std::int64_t r0, std::int64_t r1) {
        std::int64_t idx[kMaxRank] = {};
        std::int64_t off = 0;
        std::int64_t rest = r0;
        for (int d = r - 2; d >= 0; --d) {
          idx[d] = rest % dims[d];
          rest /= dims[d];
          off += idx[d] * sg[d];
        }
        for (std::int64_t row = r0; row < r1; ++row) {
          T* out = y + row * w;
          if (copy)
            std::copy(pg + off, pg + off + w, out);
          else
            std::fill(out, out + w, pg[off]);
          for (int d = r - 2; d >= 0; --d) {
            off += sg[d];
            if (++idx[d] < dims[d]) break;
            off -= sg[d] * dims[d];
            idx[d] = 0;
          }
        }
      },
      1);
}

// Sum (0), Mean (1), Max (2), Min (3), Prod (4) over any axes, the outputs split over threads.
// Each output takes its inputs in ascending index order, as the reference kernel's walk does,
// so the bits are the reference's at any thread count. With the last axis reduced, each output
// runs over its reduced values (a contiguous run where the reduced axes are the last ones, whose
// Max and Min take 16 lanes and still give the walk's bits: run_extreme); with it kept, a task runs
// over the reduced positions outside and a run of its outputs inside, so consecutive outputs read
// consecutive inputs. With fewer than 512 outputs along a kept last axis (a batch norm's channels),
// the reduced positions split instead into blocks fixed by the shape, combined in block order: the
// same bits at any thread count, the reference's for Max, Min and integers, within rounding of them
// for float sums and products. A reduction to one value splits the same way, into contiguous
// blocks, of which Max and Min take lanes with the walk's bits, and float sums of 1,024 or more
// values take lanes too (lane_sum: within rounding of the walk).
template <class T, int Mode>
void reduce_kernel(const KernelCall& c) {
  static constexpr Op kOps[] = {Op::Sum, Op::Mean, Op::Max, Op::Min, Op::Prod};
  const ArrayRef& in = c.in[0];
  const std::int64_t nout = c.out.size;
  if (nout == 0 || in.size == 0) return reference_backend().get(kOps[Mode], in.dtype)(c);
  bool reduced[kMaxRank] = {};
  for (auto axis : attrs::Reduce::of(*c.attrs).axes) reduced[axis] = true;
  std::int64_t kd[kMaxRank], ks[kMaxRank], rd[kMaxRank], rs[kMaxRank];
  int nk = 0, nr = 0;
  std::int64_t stride = 1, count = 1;
  for (int d = in.ndim - 1; d >= 0; --d) {  // innermost first
    if (reduced[d]) {
      rd[nr] = in.dims[d];
      rs[nr++] = stride;
      count *= in.dims[d];
    } else {
      kd[nk] = in.dims[d];
      ks[nk++] = stride;
    }
    stride *= in.dims[d];
  }
  using C = Compute<T>;
  const T* x = ptr<T>(in);
  T* y = ptr<T>(c.out);
  auto init = [] {
    if constexpr (Mode == 4) return C(1);
    if constexpr (Mode == 0 || Mode == 1) return C(0);
    if constexpr (std::is_floating_point_v<C>)
      return Mode == 2 ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    else
      return Mode == 2 ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
  };
  auto op = [](C a, C b) {
    if constexpr (Mode == 4) return wrap_mul(a, b);
    if constexpr (Mode == 0 || Mode == 1) return wrap_add(a, b);
    if constexpr (Mode == 2) return MaxF{}(a, b);
    return MinF{}(a, b);
  };
  // Offset of output o's first input: its kept multi-index (innermost first) in `idx`.
  auto first_input = [&](std::int64_t o, std::int64_t* idx) {
    std::int64_t off = 0;
    for (int k = 0; k < nk; ++k) {
      idx[k] = o % kd[k];
      o /= kd[k];
      off += idx[k] * ks[k];
    }
    return off;
  };
  // Steps a multi-index (innermost first) and its offset to the next position.
  auto next = [](std::int64_t* idx, const std::int64_t* dims, const std::int64_t* strides, int n,
                 std::int64_t& off) {
    for (int k = 0; k < n; ++k) {
      off += strides[k];
      if (++idx[k] < dims[k]) return;
      off -= idx[k] * strides[k];
      idx[k] = 0;
    }
  };
  // Reduced positions [i0, i1) into outputs [o0, o1) when the last axis is kept: dst[o - o0] is
  // set, then each reduced position adds its runs along the last axis (stride 1, vectorized).
  auto sweep = [&](std::int64_t i0, std::int64_t i1, std::int64_t o0, std::int64_t o1, T* dst) {
    std::int64_t kidx[kMaxRank], ridx[kMaxRank];
    for (std::int64_t o = o0; o < o1; ++o) dst[o - o0] = static_cast<T>(init());
    std::int64_t roff = 0, rest = i0;
    for (int k = 0; k < nr; ++k) {
      ridx[k] = rest % rd[k];
      rest /= rd[k];
      roff += ridx[k] * rs[k];
    }
    for (std::int64_t i = i0; i < i1; ++i) {
      std::int64_t off = first_input(o0, kidx) + roff;
      for (std::int64_t o = o0; o < o1;) {
        const std::int64_t run = std::min(kd[0] - kidx[0], o1 - o);
        T* __restrict yo = dst + (o - o0);
        const T* __restrict xo = x + off;
        for (std::int64_t j = 0; j < run; ++j)
          yo[j] = static_cast<T>(op(static_cast<C>(yo[j]), static_cast<C>(xo[j])));
        o += run;
        off += run - 1;
        kidx[0] += run - 1;
        next(kidx, kd, ks, nk, off);
      }
      next(ridx, rd, rs, nr, roff);
    }
  };
  constexpr std::int64_t kRun = 256;  // outputs of a task when the last axis is kept
  const bool last_reduced = in.ndim > 0 && reduced[in.ndim - 1];
  bool suffix = true;  // the reduced axes are the last nr ones
  for (int d = in.ndim - 1, k = 0; d >= 0; --d, ++k) suffix = suffix && reduced[d] == (k < nr);
  if (nout == 1) {
    // Everything to one value: contiguous blocks fixed by the size, combined in block order.
    auto run = [&](std::int64_t i0, std::int64_t i1) {
      auto in_order = [&] {
        C acc = init();
        for (std::int64_t i = i0; i < i1; ++i) acc = op(acc, static_cast<C>(x[i]));
        return acc;
      };
      if constexpr ((Mode == 2 || Mode == 3) && std::is_same_v<C, T>)
        return run_extreme<T, Mode == 2>(x + i0, i1 - i0, in_order);
      else if constexpr ((Mode == 0 || Mode == 1) && std::is_floating_point_v<C>)
        return i1 - i0 >= kLaneSumMin ? lane_sum<C>(x + i0, i1 - i0) : in_order();
      else
        return in_order();
    };
    const std::int64_t blocks = slot_count(static_cast<double>(in.size), in.size, 64);
    C part[64];
    parallel_slots(blocks, [&](std::int64_t b) {
      part[b] = run(in.size * b / blocks, in.size * (b + 1) / blocks);
    });
    C acc = part[0];
    for (std::int64_t b = 1; b < blocks; ++b) acc = op(acc, part[b]);
    y[0] = static_cast<T>(acc);
  } else if (suffix) {
    // The reduced axes are the last ones (a softmax's row sums): output o reduces the run
    // x[o * count, (o + 1) * count), in the walk's order.
    parallel_for(
        nout, static_cast<double>(count),
        [&](std::int64_t o0, std::int64_t o1) {
          for (std::int64_t o = o0; o < o1; ++o) {
            const T* __restrict xo = x + o * count;
            auto in_order = [&] {
              C acc = init();
              for (std::int64_t i = 0; i < count; ++i) acc = op(acc, static_cast<C>(xo[i]));
              return static_cast<T>(acc);
            };
            if constexpr ((Mode == 2 || Mode == 3) && std::is_same_v<C, T>)
              y[o] = run_extreme<T, Mode == 2>(xo, count, in_order);
            else
              y[o] = in_order();
          }
        },
        1);
  } else if (last_reduced || nout >= 2 * kRun) {
    parallel_for(
        nout, static_cast<double>(count),
        [&](std::int64_t o0, std::int64_t o1) {
          if (!last_reduced) return sweep(0, count, o0, o1, y + o0);
          std::int64_t kidx[kMaxRank], ridx[kMaxRank];
          for (std::int64_t o = o0; o < o1; ++o) {
            const std::int64_t base = first_input(o, kidx);
            C acc = init();
            std::int64_t roff = 0;
            for (int k = 0; k < nr; ++k) ridx[k] = 0;
            for (std::int64_t i = 0; i < count; ++i) {
              acc = op(acc, static_cast<C>(x[base + roff]));
              next(ridx, rd, rs, nr, roff);
            }
            y[o] = static_cast<T>(acc);
          }
        },
        // With the last axis kept, a task's outputs are a run of at least kRun consecutive
        // ones, so each reduced position reads 1 KB or more of consecutive inputs.
        last_reduced ? 1 : kRun);
  } else {
    // Few outputs along the kept last axis (a batch norm's channels): the reduced positions
    // split into blocks fixed by the shape, whose partial results are combined in block order.
    const std::int64_t blocks =
        slot_count(static_cast<double>(nout) * static_cast<double>(count), count, 64);
    if (blocks <= 1) {
      sweep(0, count, 0, nout, y);
    } else {
      const T* pp = in_blocks<T>(blocks, nout, [&](std::int64_t b, T* out) {
        sweep(count * b / blocks, count * (b + 1) / blocks, 0, nout, out);
      });
      for (std::int64_t o = 0; o < nout; ++o) y[o] = pp[o];
      for (std::int64_t b = 1; b < blocks; ++b)
        for (std::int64_t o = 0; o < nout; ++o)
          y[o] = static_cast<T>(op(static_cast<C>(y[o]), static_cast<C>(pp[b * nout + o])));
    }
  }
  if constexpr (Mode == 1) {
    const C n = static_cast<C>(static_cast<double>(in.size) / static_cast<double>(nout));
    for (std::int64_t i = 0; i < nout; ++i) y[i] = static_cast<T>(static_cast<C>(y[i]) / n);
  }
}

// ArgMax, ArgMin, Cumsum and Cumprod: the reference's kernels, which walk one line along the
// axis at a time (the first extreme, a NaN first; a running sum or product), run on ranges of
// the indices before the axis, each range a call of its own on a (count, n, inner) view split by
// the grain policy: the reference's bits. A reduction along the first axis (one range) stays
// serial. Costs per element against an add, from the reference's kernels on (1024, 1000) floats:
// argmax 10.5-11.5, cumsum 7-14 (the last axis, the first), cumprod 11.
template <Op kOp>
void lines_kernel(const KernelCall& c) {
  constexpr bool kCumulative = kOp == Op::Cumsum || kOp == Op::Cumprod;
  constexpr double kCost = kOp == Op::Cumsum ? 10.0 : kOp == Op::Cumprod ? 12.0 : 11.0;
  const ArrayRef& in = c.in[0];
  const KernelFn reference = reference_backend().get(kOp, in.dtype);
  const int axis =
      kCumulative ? attrs::Cumulative::of(*c.attrs).axis : attrs::Axis::of(*c.attrs).axis;
  if (in.ndim == 0 || in.size == 0) return reference(c);
  std::int64_t outer, n, inner;
  split_axis(in.dims, in.ndim, axis, outer, n, inner);
  static const Attrs line_axis = attrs::Axis::make(1);
  static const Attrs line_cumulative[2] = {attrs::Cumulative::make(1, false),
                                           attrs::Cumulative::make(1, true)};
  const Attrs* line_attrs =
      kCumulative ? &line_cumulative[attrs::Cumulative::of(*c.attrs).reverse ? 1 : 0] : &line_axis;
  const std::int64_t out_per_outer = c.out.size / outer;
  parallel_for(
      outer, kCost * static_cast<double>(n * inner),
      [&](std::int64_t o0, std::int64_t o1) {
        const std::int64_t dims[3] = {o1 - o0, n, inner}, out_dims[2] = {o1 - o0, inner};
        run_part(reference, c, o0 * n * inner, dims, 3, o0 * out_per_outer,
                 kCumulative ? dims : out_dims, kCumulative ? 3 : 2, line_attrs);
      },
      1);
}

}  // namespace

void register_cpu_reduce(Backend& b) {
  b.set(Op::SumToLike, DType::float32, &sum_to_like_kernel<float>);
  b.set(Op::SumToLike, DType::float64, &sum_to_like_kernel<double>);
  b.set(Op::BroadcastToLike, DType::float32, &broadcast_to_like_kernel<float>);
  b.set(Op::BroadcastToLike, DType::float64, &broadcast_to_like_kernel<double>);
  auto each = [&](auto t) {
    using T = decltype(t);
    b.set(Op::Sum, dtype_of<T>, &reduce_kernel<T, 0>);
    b.set(Op::Max, dtype_of<T>, &reduce_kernel<T, 2>);
    b.set(Op::Min, dtype_of<T>, &reduce_kernel<T, 3>);
    b.set(Op::Prod, dtype_of<T>, &reduce_kernel<T, 4>);
    if constexpr (std::is_floating_point_v<T>) b.set(Op::Mean, dtype_of<T>, &reduce_kernel<T, 1>);
  };
  each(float{});
  each(double{});
  each(std::int32_t{});
  each(std::int64_t{});
  const Backend& r = reference_backend();
  for (int d = 0; d < kNumDTypes; ++d) {  // lines_kernel calls the reference's
    const auto dt = static_cast<DType>(d);
    if (r.get(Op::ArgMax, dt)) b.set(Op::ArgMax, dt, &lines_kernel<Op::ArgMax>);
    if (r.get(Op::ArgMin, dt)) b.set(Op::ArgMin, dt, &lines_kernel<Op::ArgMin>);
    if (r.get(Op::Cumsum, dt)) b.set(Op::Cumsum, dt, &lines_kernel<Op::Cumsum>);
    if (r.get(Op::Cumprod, dt)) b.set(Op::Cumprod, dt, &lines_kernel<Op::Cumprod>);
  }
}

}  // namespace ktape::kernels
