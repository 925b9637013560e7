// The generic strided broadcasting loops shared by the reference and cpu kernels.
#pragma once

#include "ops/kernels/common.hpp"
#include "ops/kernels/functors.hpp"

namespace ktape::kernels {

// Output index walk with per-input broadcast strides: an odometer over the leading axes, and
// along the last one a plain loop per stride pattern (1 or 0 for each input), which the
// compiler vectorizes.
template <class TA, class TB, class TO, class F>
void binary(const KernelCall& c, F f) {
  const ArrayRef& a = c.in[0];
  const ArrayRef& b = c.in[1];
  const int r = c.out.ndim;
  if (c.out.size == 0) return;
  std::int64_t sa[kMaxRank], sb[kMaxRank];
  broadcast_strides(a, r, c.out.dims, sa);
  broadcast_strides(b, r, c.out.dims, sb);
  const TA* pa = ptr<TA>(a);
  const TB* pb = ptr<TB>(b);
  TO* out = ptr<TO>(c.out);
  const std::int64_t n = r > 0 ? c.out.dims[r - 1] : 1;
  const std::int64_t ia = r > 0 ? sa[r - 1] : 0, ib = r > 0 ? sb[r - 1] : 0;
  auto at = [&](const TA* x, const TB* y) {
    return static_cast<TO>(f(static_cast<Compute<TA>>(*x), static_cast<Compute<TB>>(*y)));
  };
  strided_walk<2>(c.out.dims, r - 1 > 0 ? r - 1 : 0, c.out.size / n, {sa, sb}, {0, 0},
                  [&](std::int64_t row, const auto& o) {
                    TO* y = out + row * n;
                    const TA* xa = pa + o[0];
                    const TB* xb = pb + o[1];
                    if (ia == 1 && ib == 1)
                      for (std::int64_t j = 0; j < n; ++j) y[j] = at(xa + j, xb + j);
                    else if (ia == 1)
                      for (std::int64_t j = 0; j < n; ++j) y[j] = at(xa + j, xb);
                    else if (ib == 1)
                      for (std::int64_t j = 0; j < n; ++j) y[j] = at(xa, xb + j);
                    else  // both broadcast along it (the last stride is 1 or 0)
                      for (std::int64_t j = 0; j < n; ++j) y[j] = at(xa, xb);
                  });
}

// Select: out = cond ? a : b (in = cond (bool), a, b), every operand broadcast to out.
template <class T>
void select_strided(const KernelCall& c) {
  const int r = c.out.ndim;
  std::int64_t sc[kMaxRank], sa[kMaxRank], sb[kMaxRank];
  broadcast_strides(c.in[0], r, c.out.dims, sc);
  broadcast_strides(c.in[1], r, c.out.dims, sa);
  broadcast_strides(c.in[2], r, c.out.dims, sb);
  const bool* pc = ptr<bool>(c.in[0]);
  const T* pa = ptr<T>(c.in[1]);
  const T* pb = ptr<T>(c.in[2]);
  T* out = ptr<T>(c.out);
  strided_walk<3>(c.out.dims, r, c.out.size, {sc, sa, sb}, {0, 0, 0},
                  [&](std::int64_t i, const auto& o) { out[i] = pc[o[0]] ? pa[o[1]] : pb[o[2]]; });
}

// out (shape of in[1]) = g summed over the axes that broadcasting expanded; integers wrap.
template <class T>
void sum_to_like(const KernelCall& c) {
  const ArrayRef& g = c.in[0];
  const int r = g.ndim;
  std::int64_t so[kMaxRank];
  broadcast_strides(c.out, r, g.dims, so);
  const T* pg = ptr<T>(g);
  T* y = ptr<T>(c.out);
  for (std::int64_t i = 0; i < c.out.size; ++i) y[i] = T(0);
  strided_walk<1>(g.dims, r, g.size, {so}, {0}, [&](std::int64_t i, const auto& o) {
    y[o[0]] =
        static_cast<T>(wrap_add(static_cast<Compute<T>>(y[o[0]]), static_cast<Compute<T>>(pg[i])));
  });
}

}  // namespace ktape::kernels
