// Geometry of the sliding-window ops (attrs::Window): output extents, TF SAME padding, and the
// concrete dims of one call, shared by the shape rules and every conv / pool kernel so that
// they agree on where each window sits. Not a public header.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/kernel_abi.hpp"
#include "ops/kernels/attrs.hpp"

namespace ktape::kernels {

inline std::int64_t effective_window(std::int64_t k, std::int64_t dilation) {
  return (k - 1) * dilation + 1;
}

// The output extent of one spatial dim for input extent `in` (>= 0), or -1 when the window does
// not fit (valid padding on an input smaller than the dilated window).
inline std::int64_t window_out_extent(const attrs::Window& w, int d, std::int64_t in) {
  const auto i = static_cast<std::size_t>(d);
  const std::int64_t s = w.strides[i];
  if (w.padding == attrs::Window::kSame) return (in + s - 1) / s;
  const std::int64_t padded =
      in + (w.padding == attrs::Window::kExplicit ? w.pad_before[i] + w.pad_after[i] : 0);
  const std::int64_t k = effective_window(w.window[i], w.dilation[i]);
  if (padded < k) return -1;
  return (padded - k) / s + 1;
}

// Cells of padding before the input on spatial dim d, for concrete extents in -> out.
inline std::int64_t window_pad_before(const attrs::Window& w, int d, std::int64_t in,
                                      std::int64_t out) {
  const auto i = static_cast<std::size_t>(d);
  if (w.padding == attrs::Window::kExplicit) return w.pad_before[i];
  if (w.padding == attrs::Window::kValid) return 0;
  const std::int64_t k = effective_window(w.window[i], w.dilation[i]);
  const std::int64_t total = std::max<std::int64_t>((out - 1) * w.strides[i] + k - in, 0);
  return total / 2;
}

// The concrete geometry of one call: `xs` is the input-space array (x, or the dx a backward op
// writes), `ys` the output-space array (y, or the incoming gradient).
struct WindowDims {
  int r = 0;
  bool cf = false;
  std::int64_t n = 0, cx = 0, cy = 0;  // batch, input-space and output-space channels
  std::int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1},
               d[3] = {1, 1, 1}, pb[3] = {0, 0, 0};
  std::int64_t in_pixels = 1, out_pixels = 1, k_count = 1;
  std::int64_t groups = 1;
};

inline WindowDims window_dims(const attrs::Window& w, const ArrayRef& xs, const ArrayRef& ys) {
  WindowDims g;
  g.r = w.rank;
  g.cf = w.channels_first;
  g.groups = w.groups;
  g.n = xs.dims[0];
  g.cx = g.cf ? xs.dims[1] : xs.dims[xs.ndim - 1];
  g.cy = g.cf ? ys.dims[1] : ys.dims[ys.ndim - 1];
  const int first = g.cf ? 2 : 1;
  for (int i = 0; i < g.r; ++i) {
    const auto u = static_cast<std::size_t>(i);
    g.in[i] = xs.dims[first + i];
    g.out[i] = ys.dims[first + i];
    g.k[i] = w.window[u];
    g.s[i] = w.strides[u];
    g.d[i] = w.dilation[u];
    g.pb[i] = window_pad_before(w, i, g.in[i], g.out[i]);
    g.in_pixels *= g.in[i];
    g.out_pixels *= g.out[i];
    g.k_count *= g.k[i];
  }
  return g;
}

// Splits a flat pixel index of extents e[0..r) into coordinates.
inline void unflatten(std::int64_t p, int r, const std::int64_t* e, std::int64_t* c) {
  for (int i = r - 1; i >= 0; --i) {
    c[i] = p % e[i];
    p /= e[i];
  }
}

}  // namespace ktape::kernels
