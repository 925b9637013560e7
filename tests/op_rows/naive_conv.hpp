// The naive float64 reference of the sliding-window rows (tests/op_rows/conv_rows.cpp), in the
// manner of naive.hpp: the input explicitly zero-padded (TF SAME: out = ceil(in / stride), the
// odd cell at the end; causal: dilation * (k - 1) cells on the left), then every output
// element summed over its window with plain loops. It shares no code with ktape's kernels or
// shape rules; channels_first arrays are moved to channels_last and back.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "op_rows/naive.hpp"

namespace naive {

struct Window {
  Dims strides, dilation;         // per spatial dim (empty: 1)
  std::string padding = "valid";  // "valid", "same", "causal"
  bool channels_first = false;
  std::int64_t groups = 1;
};

// (N, C, S...) <-> (N, S..., C).
inline Arr to_last(const Arr& a) {
  std::vector<int> perm{0};
  for (int d = 2; d < a.ndim(); ++d) perm.push_back(d);
  perm.push_back(1);
  return transpose(a, perm);
}
inline Arr to_first(const Arr& a) {
  std::vector<int> perm{0, a.ndim() - 1};
  for (int d = 1; d + 1 < a.ndim(); ++d) perm.push_back(d);
  return transpose(a, perm);
}

inline Dims fill_ones(const Dims& v, std::size_t r) { return v.empty() ? Dims(r, 1) : v; }

// The zero padding (before, after) of every spatial dim of a channels_last x.
inline void window_pads(const Arr& x, const Dims& window, const Window& w, Dims& before,
                        Dims& after) {
  const std::size_t r = window.size();
  const Dims s = fill_ones(w.strides, r), d = fill_ones(w.dilation, r);
  before.assign(r, 0);
  after.assign(r, 0);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t in = x.shape[i + 1], k = (window[i] - 1) * d[i] + 1;
    if (w.padding == "same") {
      const std::int64_t out = (in + s[i] - 1) / s[i];
      const std::int64_t total = std::max<std::int64_t>((out - 1) * s[i] + k - in, 0);
      before[i] = total / 2;
      after[i] = total - total / 2;
    } else if (w.padding == "causal") {
      before[i] = k - 1;
    }
  }
}

// x padded with `fill` around its spatial dims (channels_last).
inline Arr pad_spatial(const Arr& x, const Dims& before, const Dims& after, double fill) {
  Dims s = x.shape;
  for (std::size_t i = 0; i < before.size(); ++i) s[i + 1] += before[i] + after[i];
  Arr out = full(s, fill);
  const Dims os = strides_of(s);
  for (std::int64_t f = 0; f < x.size(); ++f) {
    Dims idx = unravel(f, x.shape);
    for (std::size_t i = 0; i < before.size(); ++i) idx[i + 1] += before[i];
    std::int64_t o = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) o += idx[d] * os[d];
    out[o] = x[f];
  }
  return out;
}

// Calls f(output index (n, o..., ), window cell k...) with the padded-input index of the cell.
template <class F>
void for_windows(const Dims& padded, const Dims& window, const Dims& s, const Dims& d,
                 const Dims& out_spatial, std::int64_t n, F&& f) {
  const std::size_t r = window.size();
  const std::int64_t outs = Arr::count(out_spatial), cells = Arr::count(window);
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t o = 0; o < outs; ++o) {
      const Dims oi = unravel(o, out_spatial);
      for (std::int64_t c = 0; c < cells; ++c) {
        const Dims ki = unravel(c, window);
        Dims at{b};
        for (std::size_t i = 0; i < r; ++i) at.push_back(oi[i] * s[i] + ki[i] * d[i]);
        f(b, o, c, at);
      }
    }
  (void)padded;
}

// conv (cross-correlation): x (N, S..., C) or channels_first; kernel (K..., C / groups, out).
inline Arr conv(const Arr& x_in, const Arr& kernel, const Window& w) {
  const Arr x = w.channels_first ? to_last(x_in) : x_in;
  const std::size_t r = static_cast<std::size_t>(x.ndim() - 2);
  const Dims window(kernel.shape.begin(), kernel.shape.begin() + static_cast<long>(r));
  const Dims s = fill_ones(w.strides, r), d = fill_ones(w.dilation, r);
  Dims before, after;
  window_pads(x, window, w, before, after);
  const Arr xp = pad_spatial(x, before, after, 0.0);
  const std::int64_t cin = x.shape.back(), cin_g = kernel.shape[r], cout = kernel.shape[r + 1];
  const std::int64_t cout_g = cout / w.groups;
  Dims out_spatial;
  for (std::size_t i = 0; i < r; ++i)
    out_spatial.push_back((xp.shape[i + 1] - ((window[i] - 1) * d[i] + 1)) / s[i] + 1);
  Dims os{x.shape[0]};
  os.insert(os.end(), out_spatial.begin(), out_spatial.end());
  os.push_back(cout);
  Arr y = full(os, 0.0);
  const Dims xs = strides_of(xp.shape);
  const std::int64_t opix = Arr::count(out_spatial);
  for_windows(xp.shape, window, s, d, out_spatial, x.shape[0],
              [&](std::int64_t b, std::int64_t o, std::int64_t c, const Dims& at) {
                std::int64_t base = 0;
                for (std::size_t i = 0; i < at.size(); ++i) base += at[i] * xs[i];
                for (std::int64_t co = 0; co < cout; ++co) {
                  const std::int64_t g = co / cout_g;
                  double acc = 0;
                  for (std::int64_t ci = 0; ci < cin_g; ++ci)
                    acc += xp[base + g * cin_g + ci] * kernel[(c * cin_g + ci) * cout + co];
                  y[(b * opix + o) * cout + co] += acc;
                }
              });
  (void)cin;
  return w.channels_first ? to_first(y) : y;
}

// depthwise: kernel (K..., C, m) as a grouped conv with C groups.
inline Arr depthwise(const Arr& x, const Arr& dk, Window w) {
  const std::size_t r = static_cast<std::size_t>(dk.ndim() - 2);
  Dims ks(dk.shape.begin(), dk.shape.begin() + static_cast<long>(r));
  w.groups = dk.shape[r];
  ks.push_back(1);
  ks.push_back(dk.shape[r] * dk.shape[r + 1]);
  return conv(x, reshape(dk, ks), w);
}

// The adjoint of conv: x (N, O..., in) scattered through kernel (K..., out, in) into
// output_shape (layout of w.channels_first), then the padding cut off.
inline Arr conv_transpose(const Arr& x_in, const Arr& kernel, Dims out_shape, const Window& w) {
  const Arr x = w.channels_first ? to_last(x_in) : x_in;
  if (w.channels_first) {
    Dims o{out_shape[0]};
    o.insert(o.end(), out_shape.begin() + 2, out_shape.end());
    o.push_back(out_shape[1]);
    out_shape = o;
  }
  out_shape[0] = x.shape[0];
  const std::size_t r = static_cast<std::size_t>(x.ndim() - 2);
  const Dims window(kernel.shape.begin(), kernel.shape.begin() + static_cast<long>(r));
  const Dims s = fill_ones(w.strides, r), d = fill_ones(w.dilation, r);
  Dims before, after;
  window_pads(full(out_shape, 0.0), window, w, before, after);
  Dims padded = out_shape;
  for (std::size_t i = 0; i < r; ++i) padded[i + 1] += before[i] + after[i];
  Arr yp = full(padded, 0.0);
  const Dims ys = strides_of(padded);
  const std::int64_t cout = kernel.shape[r], cin = kernel.shape[r + 1];
  const Dims in_spatial(x.shape.begin() + 1, x.shape.end() - 1);
  const std::int64_t ipix = Arr::count(in_spatial);
  for_windows(padded, window, s, d, in_spatial, x.shape[0],
              [&](std::int64_t b, std::int64_t o, std::int64_t c, const Dims& at) {
                std::int64_t base = 0;
                for (std::size_t i = 0; i < at.size(); ++i) base += at[i] * ys[i];
                for (std::int64_t co = 0; co < cout; ++co) {
                  double acc = 0;
                  for (std::int64_t ci = 0; ci < cin; ++ci)
                    acc += x[(b * ipix + o) * cin + ci] * kernel[(c * cout + co) * cin + ci];
                  yp[base + co] += acc;
                }
              });
  Dims start(padded.size(), 0);
  for (std::size_t i = 0; i < r; ++i) start[i + 1] = before[i];
  const Arr y = slice(yp, start, out_shape);
  return w.channels_first ? to_first(y) : y;
}

// pool: max over the window (padding never wins) or the mean of the cells inside the input.
inline Arr pool(const Arr& x_in, const Dims& size, const Window& w, bool max) {
  const Arr x = w.channels_first ? to_last(x_in) : x_in;
  const std::size_t r = size.size();
  const Dims s = fill_ones(w.strides, r), d(r, 1);
  Dims before, after;
  window_pads(x, size, w, before, after);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Arr xp = pad_spatial(x, before, after, nan);  // NaN marks padding
  Dims out_spatial;
  for (std::size_t i = 0; i < r; ++i) out_spatial.push_back((xp.shape[i + 1] - size[i]) / s[i] + 1);
  const std::int64_t ch = x.shape.back();
  Dims os{x.shape[0]};
  os.insert(os.end(), out_spatial.begin(), out_spatial.end());
  os.push_back(ch);
  Arr y = full(os, max ? -std::numeric_limits<double>::infinity() : 0.0);
  Arr count = full(os, 0.0);
  const Dims xs = strides_of(xp.shape);
  const std::int64_t opix = Arr::count(out_spatial);
  for_windows(xp.shape, size, s, d, out_spatial, x.shape[0],
              [&](std::int64_t b, std::int64_t o, std::int64_t, const Dims& at) {
                std::int64_t base = 0;
                for (std::size_t i = 0; i < at.size(); ++i) base += at[i] * xs[i];
                for (std::int64_t c = 0; c < ch; ++c) {
                  const double v = xp[base + c];
                  if (std::isnan(v)) continue;
                  const std::int64_t at_y = (b * opix + o) * ch + c;
                  y[at_y] = max ? std::max(y[at_y], v) : y[at_y] + v;
                  count[at_y] += 1;
                }
              });
  if (!max)
    for (std::int64_t i = 0; i < y.size(); ++i) y[i] /= count[i];
  return w.channels_first ? to_first(y) : y;
}

}  // namespace naive
