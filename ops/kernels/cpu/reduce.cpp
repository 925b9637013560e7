// cpu reductions: the bias-gradient SumToLike (sums over leading rows), which training hits on
// every step, split over threads; the other reductions fall back to reference for now.
#include <tbb/task_arena.h>

#include <vector>

#include "engine/backend.hpp"
#include "engine/parallel.hpp"
#include "ops/kernels/broadcast.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/cpu/cpu.hpp"

namespace ktape::kernels {

namespace {

// Partial column sums of the row blocks, owned by the calling thread: grown once, never freed
// while the thread lives (steady-state calls allocate nothing).
template <class T>
std::vector<T>& partials() {
  thread_local std::vector<T> p;
  return p;
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

// out has the trailing dims of g (after dropping leading size-1 dims): column sums. The rows
// split into blocks, each summed as one contiguous stream (blocks of columns would read the
// array with a stride: 2.7x slower at 3584 x 512); the blocks' partial sums are added in block
// order. The split depends on the shape alone, never on the thread count.
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
  const std::int64_t blocks = slot_count(static_cast<double>(g.size), rows, 64);
  if (blocks <= 1) {
    sum_rows(pg, w, 0, rows, y);
    return true;
  }
  std::vector<T>& part = partials<T>();
  if (part.size() < static_cast<std::size_t>(blocks * w))
    part.resize(static_cast<std::size_t>(blocks * w));
  T* pp = part.data();
  // Isolated: a thread waiting here must not run another call's kernel, which would reuse this
  // thread's partial sums underneath.
  tbb::this_task_arena::isolate([&] {
    parallel_slots(blocks, [&](std::int64_t b) {
      sum_rows(pg, w, rows * b / blocks, rows * (b + 1) / blocks, pp + b * w);
    });
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

}  // namespace

void register_cpu_reduce(Backend& b) {
  b.set(Op::SumToLike, DType::float32, &sum_to_like_kernel<float>);
  b.set(Op::SumToLike, DType::float64, &sum_to_like_kernel<double>);
}

}  // namespace ktape::kernels
