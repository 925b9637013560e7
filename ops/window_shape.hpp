// Static shape helpers of the sliding-window ops (conv, pooling): where the channels and the
// spatial dims sit in either data format, and the output extents of a window (None stays None).
// Internal to ops/.
#pragma once

#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/shape.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/window.hpp"
#include "ops/op_util.hpp"

namespace ktape::ops::window_shape {

using W = attrs::Window;

// The channels of a layout-`a` shape s (None if unknown).
inline std::int64_t channels(const W& a, const Shape& s) {
  return s[a.channels_first ? 1 : s.ndim() - 1];
}
inline std::int64_t spatial(const W& a, const Shape& s, int i) {
  return s[(a.channels_first ? 2 : 1) + i];
}

inline Shape layout_shape(const W& a, std::int64_t n, const std::vector<std::int64_t>& sp,
                          std::int64_t c) {
  std::vector<std::int64_t> d{n};
  if (a.channels_first) d.push_back(c);
  d.insert(d.end(), sp.begin(), sp.end());
  if (!a.channels_first) d.push_back(c);
  return Shape(std::move(d));
}

// The spatial extents a window op of attrs `a` produces from input shape x (None stays None).
inline std::vector<std::int64_t> forward_extents(const W& a, const Shape& x) {
  std::vector<std::int64_t> out;
  for (int i = 0; i < a.rank; ++i) {
    const std::int64_t in = spatial(a, x, i);
    if (in < 0) {
      out.push_back(None);
      continue;
    }
    const std::int64_t o = kernels::window_out_extent(a, i, in);
    if (o < 0)
      throw ValueError(a.fn + ": input of shape " + x.str() + " is smaller than the window " +
                       dims_str(a.window) + " (dilation " + dims_str(a.dilation) +
                       ") on spatial dim " + std::to_string(i) + " with padding \"valid\"");
    out.push_back(o);
  }
  return out;
}

inline void check_input(const W& a, const Shape& x, const char* what) {
  if (x.ndim() != a.rank + 2)
    throw ValueError(
        a.fn + ": " + what + " of shape " + x.str() + " must have rank " +
        std::to_string(a.rank + 2) +
        (a.channels_first ? " (batch, channels, spatial...)" : " (batch, spatial..., channels)"));
}

}  // namespace ktape::ops::window_shape
