// Reference kernels of the sliding-window ops (attrs::Window, ops/kernels/window.hpp): plain
// loops over every output element, the oracle of the cpu kernels. Convolutions are
// cross-correlations; each output element is one sum in Compute<T>, in a fixed order.
#include <cmath>
#include <limits>

#include "engine/backend.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/functors.hpp"
#include "ops/kernels/reference/reference.hpp"
#include "ops/kernels/window.hpp"

namespace ktape::kernels {

namespace {

// Flat offset of (n, pixel p, channel c) in an array of `pixels` pixels and `ch` channels.
inline std::int64_t at(const WindowDims& g, std::int64_t n, std::int64_t p, std::int64_t c,
                       std::int64_t pixels, std::int64_t ch) {
  return g.cf ? (n * ch + c) * pixels + p : (n * pixels + p) * ch + c;
}

// The input pixel that kernel position kp of output pixel op reads, or -1 (padding).
inline std::int64_t input_pixel(const WindowDims& g, std::int64_t op, std::int64_t kp) {
  std::int64_t o[3], k[3];
  unflatten(op, g.r, g.out, o);
  unflatten(kp, g.r, g.k, k);
  std::int64_t ip = 0;
  for (int i = 0; i < g.r; ++i) {
    const std::int64_t x = o[i] * g.s[i] - g.pb[i] + k[i] * g.d[i];
    if (x < 0 || x >= g.in[i]) return -1;
    ip = ip * g.in[i] + x;
  }
  return ip;
}

// The output pixel whose kernel position kp reads input pixel ip, or -1 (none: the position
// falls between strides or outside the output).
inline std::int64_t output_pixel(const WindowDims& g, std::int64_t ip, std::int64_t kp) {
  std::int64_t in[3], k[3];
  unflatten(ip, g.r, g.in, in);
  unflatten(kp, g.r, g.k, k);
  std::int64_t op = 0;
  for (int i = 0; i < g.r; ++i) {
    const std::int64_t t = in[i] + g.pb[i] - k[i] * g.d[i];
    if (t < 0 || t % g.s[i] != 0 || t / g.s[i] >= g.out[i]) return -1;
    op = op * g.out[i] + t / g.s[i];
  }
  return op;
}

// Conv(x, w) -> y.
template <class T>
void conv_kernel(const KernelCall& c) {
  using C = Compute<T>;
  const WindowDims g = window_dims(attrs::Window::of(*c.attrs), c.in[0], c.out);
  const T* x = ptr<T>(c.in[0]);
  const T* w = ptr<T>(c.in[1]);
  T* y = ptr<T>(c.out);
  const std::int64_t cin_g = g.cx / g.groups, cout_g = g.cy / g.groups;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t op = 0; op < g.out_pixels; ++op)
      for (std::int64_t co = 0; co < g.cy; ++co) {
        const std::int64_t grp = co / cout_g;
        C s = 0;
        for (std::int64_t kp = 0; kp < g.k_count; ++kp) {
          const std::int64_t ip = input_pixel(g, op, kp);
          if (ip < 0) continue;
          for (std::int64_t ci = 0; ci < cin_g; ++ci)
            s += static_cast<C>(x[at(g, n, ip, grp * cin_g + ci, g.in_pixels, g.cx)]) *
                 static_cast<C>(w[(kp * cin_g + ci) * g.cy + co]);
        }
        y[at(g, n, op, co, g.out_pixels, g.cy)] = static_cast<T>(s);
      }
}

// ConvBackpropInput(dy, w[, like]) -> dx: dx at input pixel i sums dy * w over the (output
// pixel, kernel position) pairs that read i.
template <class T>
void conv_backprop_input_kernel(const KernelCall& c) {
  using C = Compute<T>;
  const WindowDims g = window_dims(attrs::Window::of(*c.attrs), c.out, c.in[0]);
  const T* dy = ptr<T>(c.in[0]);
  const T* w = ptr<T>(c.in[1]);
  T* dx = ptr<T>(c.out);
  const std::int64_t cin_g = g.cx / g.groups, cout_g = g.cy / g.groups;
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t ip = 0; ip < g.in_pixels; ++ip)
      for (std::int64_t cx = 0; cx < g.cx; ++cx) {
        const std::int64_t grp = cx / cin_g, ci = cx % cin_g;
        C s = 0;
        for (std::int64_t kp = 0; kp < g.k_count; ++kp) {
          const std::int64_t op = output_pixel(g, ip, kp);
          if (op < 0) continue;
          for (std::int64_t co = grp * cout_g; co < (grp + 1) * cout_g; ++co)
            s += static_cast<C>(dy[at(g, n, op, co, g.out_pixels, g.cy)]) *
                 static_cast<C>(w[(kp * cin_g + ci) * g.cy + co]);
        }
        dx[at(g, n, ip, cx, g.in_pixels, g.cx)] = static_cast<T>(s);
      }
}

// ConvBackpropFilter(x, dy) -> dw (window..., in / groups, out).
template <class T>
void conv_backprop_filter_kernel(const KernelCall& c) {
  using C = Compute<T>;
  const WindowDims g = window_dims(attrs::Window::of(*c.attrs), c.in[0], c.in[1]);
  const T* x = ptr<T>(c.in[0]);
  const T* dy = ptr<T>(c.in[1]);
  T* dw = ptr<T>(c.out);
  const std::int64_t cin_g = g.cx / g.groups, cout_g = g.cy / g.groups;
  for (std::int64_t kp = 0; kp < g.k_count; ++kp)
    for (std::int64_t ci = 0; ci < cin_g; ++ci)
      for (std::int64_t co = 0; co < g.cy; ++co) {
        const std::int64_t grp = co / cout_g;
        C s = 0;
        for (std::int64_t n = 0; n < g.n; ++n)
          for (std::int64_t op = 0; op < g.out_pixels; ++op) {
            const std::int64_t ip = input_pixel(g, op, kp);
            if (ip < 0) continue;
            s += static_cast<C>(x[at(g, n, ip, grp * cin_g + ci, g.in_pixels, g.cx)]) *
                 static_cast<C>(dy[at(g, n, op, co, g.out_pixels, g.cy)]);
          }
        dw[(kp * cin_g + ci) * g.cy + co] = static_cast<T>(s);
      }
}

// The window's first maximum in scan order (max pooling's argmax, as TF's CPU kernels), as an
// input pixel; windows always hold at least one input cell.
template <class T>
std::int64_t argmax_pixel(const WindowDims& g, const T* x, std::int64_t n, std::int64_t op,
                          std::int64_t ch) {
  using C = Compute<T>;
  std::int64_t best = -1;
  C bv = 0;
  for (std::int64_t kp = 0; kp < g.k_count; ++kp) {
    const std::int64_t ip = input_pixel(g, op, kp);
    if (ip < 0) continue;
    const C v = static_cast<C>(x[at(g, n, ip, ch, g.in_pixels, g.cx)]);
    if (best < 0 || v > bv || (std::isnan(v) && !std::isnan(bv))) best = ip, bv = v;
  }
  return best;
}

// Pool(x) -> y: the max, or the mean of the cells inside the input.
template <class T>
void pool_kernel(const KernelCall& c) {
  using C = Compute<T>;
  const auto w = attrs::Window::of(*c.attrs);
  const WindowDims g = window_dims(w, c.in[0], c.out);
  const T* x = ptr<T>(c.in[0]);
  T* y = ptr<T>(c.out);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t op = 0; op < g.out_pixels; ++op)
      for (std::int64_t ch = 0; ch < g.cx; ++ch) {
        C v = 0;
        if (w.mode == attrs::Window::kMax) {
          v = static_cast<C>(x[at(g, n, argmax_pixel(g, x, n, op, ch), ch, g.in_pixels, g.cx)]);
        } else {
          std::int64_t count = 0;
          for (std::int64_t kp = 0; kp < g.k_count; ++kp) {
            const std::int64_t ip = input_pixel(g, op, kp);
            if (ip < 0) continue;
            v += static_cast<C>(x[at(g, n, ip, ch, g.in_pixels, g.cx)]);
            ++count;
          }
          v /= static_cast<C>(count);
        }
        y[at(g, n, op, ch, g.out_pixels, g.cy)] = static_cast<T>(v);
      }
}

// MaxPoolGrad(x, dy) -> dx: each window's dy goes to its argmax.
// MaxPoolReluGrad(x, dy) -> dx: relu's gradient (ReluGradPlainF: g * (x > 0)) of MaxPoolGrad's dx.
// AvgPoolGrad(dy, like) -> dx: each window's dy is shared by its cells inside the input.
template <class T, bool Max, bool Relu = false>
void pool_grad_kernel(const KernelCall& c) {
  using C = Compute<T>;
  const ArrayRef& dy_ref = Max ? c.in[1] : c.in[0];
  const WindowDims g = window_dims(attrs::Window::of(*c.attrs), c.out, dy_ref);
  const T* x = ptr<T>(c.in[0]);
  const T* dy = ptr<T>(dy_ref);
  T* dx = ptr<T>(c.out);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t ip = 0; ip < g.in_pixels; ++ip)
      for (std::int64_t ch = 0; ch < g.cx; ++ch) {
        C s = 0;
        for (std::int64_t kp = 0; kp < g.k_count; ++kp) {
          const std::int64_t op = output_pixel(g, ip, kp);
          if (op < 0) continue;
          const C gv = static_cast<C>(dy[at(g, n, op, ch, g.out_pixels, g.cy)]);
          if constexpr (Max) {
            if (argmax_pixel(g, x, n, op, ch) == ip) s += gv;
          } else {
            std::int64_t count = 0;
            for (std::int64_t q = 0; q < g.k_count; ++q) count += input_pixel(g, op, q) >= 0;
            s += gv / static_cast<C>(count);
          }
        }
        const std::int64_t i = at(g, n, ip, ch, g.in_pixels, g.cx);
        dx[i] = static_cast<T>(s);
        if constexpr (Relu) dx[i] = ReluGradPlainF{}(x[i], dx[i]);
      }
}

// MaxPoolGradGrad(x, h) -> (y's shape): each window takes h at its argmax.
template <class T>
void max_pool_grad_grad_kernel(const KernelCall& c) {
  const WindowDims g = window_dims(attrs::Window::of(*c.attrs), c.in[0], c.out);
  const T* x = ptr<T>(c.in[0]);
  const T* h = ptr<T>(c.in[1]);
  T* y = ptr<T>(c.out);
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t op = 0; op < g.out_pixels; ++op)
      for (std::int64_t ch = 0; ch < g.cx; ++ch)
        y[at(g, n, op, ch, g.out_pixels, g.cy)] =
            h[at(g, n, argmax_pixel(g, x, n, op, ch), ch, g.in_pixels, g.cx)];
}

// Pad(x) -> y: x shifted by `before` on every axis, zeros elsewhere (negative amounts crop).
template <class T>
void pad_kernel(const KernelCall& c) {
  const auto p = attrs::Pad::of(*c.attrs);
  const ArrayRef& in = c.in[0];
  const int r = c.out.ndim;
  std::int64_t in_strides[kMaxRank];
  contiguous_strides(in.dims, r, in_strides);
  const T* x = ptr<T>(in);
  T* y = ptr<T>(c.out);
  std::int64_t idx[kMaxRank] = {};
  for (std::int64_t i = 0; i < c.out.size; ++i) {
    std::int64_t off = 0;
    bool inside = true;
    for (int d = 0; d < r; ++d) {
      const std::int64_t src = idx[d] - p.before[static_cast<std::size_t>(d)];
      inside = inside && src >= 0 && src < in.dims[d];
      off += src * in_strides[d];
    }
    y[i] = inside ? x[off] : T{};
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[d] < c.out.dims[d]) break;
      idx[d] = 0;
    }
  }
}

template <class... Ts>
struct TypeList {};

template <class... Ts>
void reg(Backend& b, TypeList<Ts...>) {
  (b.set(Op::Conv, dtype_of<Ts>, &conv_kernel<Ts>), ...);
  (b.set(Op::ConvBackpropInput, dtype_of<Ts>, &conv_backprop_input_kernel<Ts>), ...);
  (b.set(Op::ConvBackpropFilter, dtype_of<Ts>, &conv_backprop_filter_kernel<Ts>), ...);
  (b.set(Op::Pool, dtype_of<Ts>, &pool_kernel<Ts>), ...);
  (b.set(Op::MaxPoolGrad, dtype_of<Ts>, &pool_grad_kernel<Ts, true>), ...);
  (b.set(Op::AvgPoolGrad, dtype_of<Ts>, &pool_grad_kernel<Ts, false>), ...);
  (b.set(Op::MaxPoolGradGrad, dtype_of<Ts>, &max_pool_grad_grad_kernel<Ts>), ...);
  (b.set(Op::MaxPoolReluGrad, dtype_of<Ts>, &pool_grad_kernel<Ts, true, true>), ...);
}

template <class... Ts>
void reg_pad(Backend& b, TypeList<Ts...>) {
  (b.set(Op::Pad, dtype_of<Ts>, &pad_kernel<Ts>), ...);
}

}  // namespace

void register_reference_window(Backend& b) {
  reg(b, TypeList<Half, float, double>{});
  reg_pad(b, TypeList<Half, float, double, std::int8_t, std::int16_t, std::int32_t, std::int64_t,
                      std::uint8_t, bool>{});
}

}  // namespace ktape::kernels
