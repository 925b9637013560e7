// cpu reductions: the bias-gradient SumToLike (sums over leading rows), which training hits on
// every step; the other reductions fall back to reference for now.
#include "engine/backend.hpp"
#include "ops/kernels/broadcast.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/cpu/cpu.hpp"

namespace ktape::kernels {

namespace {

// out has the trailing dims of g (after dropping leading size-1 dims): column sums.
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
  for (std::int64_t j = 0; j < w; ++j) y[j] = T(0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < w; ++j) y[j] += pg[r * w + j];
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
