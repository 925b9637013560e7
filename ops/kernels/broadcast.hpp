// The generic strided broadcasting loop shared by the reference and cpu kernels.
#pragma once

#include "ops/kernels/common.hpp"
#include "ops/kernels/functors.hpp"

namespace ktape::kernels {

// Output index walk with per-input broadcast strides.
template <class TA, class TB, class TO, class F>
void binary(const KernelCall& c, F f) {
  const ArrayRef& a = c.in[0];
  const ArrayRef& b = c.in[1];
  const int r = c.out.ndim;
  std::int64_t sa[kMaxRank], sb[kMaxRank], idx[kMaxRank] = {};
  broadcast_strides(a, r, c.out.dims, sa);
  broadcast_strides(b, r, c.out.dims, sb);
  const TA* pa = ptr<TA>(a);
  const TB* pb = ptr<TB>(b);
  TO* out = ptr<TO>(c.out);
  std::int64_t ia = 0, ib = 0;
  for (std::int64_t i = 0; i < c.out.size; ++i) {
    out[i] = static_cast<TO>(f(static_cast<Compute<TA>>(pa[ia]), static_cast<Compute<TB>>(pb[ib])));
    for (int d = r - 1; d >= 0; --d) {
      ++idx[d];
      ia += sa[d];
      ib += sb[d];
      if (idx[d] < c.out.dims[d]) break;
      ia -= sa[d] * c.out.dims[d];
      ib -= sb[d] * c.out.dims[d];
      idx[d] = 0;
    }
  }
}

}  // namespace ktape::kernels
