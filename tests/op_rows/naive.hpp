// A naive float64 reference for the forward values of the op rows: plain loops over <cmath>,
// row-major arrays and numpy broadcasting written out by hand. It shares no code with ktape (no
// kernels, no shape rules): NDArray is only read and written element by element at the edges.
// The rows whose inputs are random (the gradcheck table) compute their expected values with
// these formulas; rows with hand-written inputs paste their values instead.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "ktape/ktape.hpp"

namespace naive {

using Dims = std::vector<std::int64_t>;

// A row-major float64 array.
struct Arr {
  Dims shape;
  std::vector<double> v;

  Arr() = default;
  Arr(Dims s, std::vector<double> values) : shape(std::move(s)), v(std::move(values)) {
    if (static_cast<std::int64_t>(v.size()) != count(shape))
      throw std::logic_error("naive::Arr: " + std::to_string(v.size()) + " values for " +
                             std::to_string(count(shape)) + " elements");
  }
  Arr(const ktape::NDArray& a)  // NOLINT(google-explicit-constructor): formulas read inputs
      : shape(a.shape().dims()), v(a.to_vector()) {}

  static std::int64_t count(const Dims& s) {
    std::int64_t n = 1;
    for (auto d : s) n *= d;
    return n;
  }
  std::int64_t size() const { return static_cast<std::int64_t>(v.size()); }
  int ndim() const { return static_cast<int>(shape.size()); }
  double operator[](std::int64_t i) const { return v[static_cast<std::size_t>(i)]; }
  double& operator[](std::int64_t i) { return v[static_cast<std::size_t>(i)]; }
};

inline Arr full(const Dims& s, double value) {
  return Arr(s, std::vector<double>(static_cast<std::size_t>(Arr::count(s)), value));
}
inline Arr scalar(double value) { return Arr({}, {value}); }

inline Dims strides_of(const Dims& s) {
  Dims st(s.size(), 1);
  for (int d = static_cast<int>(s.size()) - 2; d >= 0; --d)
    st[static_cast<std::size_t>(d)] =
        st[static_cast<std::size_t>(d) + 1] * s[static_cast<std::size_t>(d) + 1];
  return st;
}

// The multi-index of flat position `flat` in shape `s`.
inline Dims unravel(std::int64_t flat, const Dims& s) {
  Dims idx(s.size(), 0);
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    const auto n = s[static_cast<std::size_t>(d)];
    idx[static_cast<std::size_t>(d)] = n > 0 ? flat % n : 0;
    flat = n > 0 ? flat / n : 0;
  }
  return idx;
}

inline int axis_of(int axis, int ndim) {
  const int a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim) throw std::logic_error("naive: axis out of range");
  return a;
}

// ---- elementwise -------------------------------------------------------------------------------

inline Arr map(const Arr& a, const std::function<double(double)>& f) {
  Arr r = a;
  for (auto& x : r.v) x = f(x);
  return r;
}

// numpy broadcasting of any number of operands.
inline Dims broadcast_shape(const std::vector<const Arr*>& xs) {
  int r = 0;
  for (const Arr* x : xs) r = std::max(r, x->ndim());
  Dims out(static_cast<std::size_t>(r), 1);
  for (const Arr* x : xs)
    for (int i = 0; i < x->ndim(); ++i) {
      const auto d = x->shape[static_cast<std::size_t>(i)];
      auto& o = out[static_cast<std::size_t>(r - x->ndim() + i)];
      if (d == o || d == 1) continue;
      if (o != 1) throw std::logic_error("naive: shapes do not broadcast");
      o = d;
    }
  return out;
}

// The flat position in `x` of the broadcast multi-index `idx`.
inline std::int64_t broadcast_offset(const Arr& x, const Dims& idx) {
  const Dims st = strides_of(x.shape);
  const int lead = static_cast<int>(idx.size()) - x.ndim();
  std::int64_t off = 0;
  for (int i = 0; i < x.ndim(); ++i) {
    const auto d = x.shape[static_cast<std::size_t>(i)];
    if (d != 1) off += idx[static_cast<std::size_t>(lead + i)] * st[static_cast<std::size_t>(i)];
  }
  return off;
}

inline Arr zip(const Arr& a, const Arr& b, const std::function<double(double, double)>& f) {
  Arr r = full(broadcast_shape({&a, &b}), 0.0);
  for (std::int64_t i = 0; i < r.size(); ++i) {
    const Dims idx = unravel(i, r.shape);
    r[i] = f(a[broadcast_offset(a, idx)], b[broadcast_offset(b, idx)]);
  }
  return r;
}

// numpy.where(c, a, b) with broadcasting.
inline Arr where(const Arr& c, const Arr& a, const Arr& b) {
  Arr r = full(broadcast_shape({&c, &a, &b}), 0.0);
  for (std::int64_t i = 0; i < r.size(); ++i) {
    const Dims idx = unravel(i, r.shape);
    r[i] = c[broadcast_offset(c, idx)] != 0.0 ? a[broadcast_offset(a, idx)]
                                              : b[broadcast_offset(b, idx)];
  }
  return r;
}

inline Arr add(const Arr& a, const Arr& b) {
  return zip(a, b, [](double x, double y) { return x + y; });
}
inline Arr sub(const Arr& a, const Arr& b) {
  return zip(a, b, [](double x, double y) { return x - y; });
}
inline Arr mul(const Arr& a, const Arr& b) {
  return zip(a, b, [](double x, double y) { return x * y; });
}
inline Arr div(const Arr& a, const Arr& b) {
  return zip(a, b, [](double x, double y) { return x / y; });
}
inline Arr add(const Arr& a, double b) { return add(a, scalar(b)); }
inline Arr mul(const Arr& a, double b) { return mul(a, scalar(b)); }
inline Arr neg(const Arr& a) {
  return map(a, [](double x) { return -x; });
}
inline Arr sq(const Arr& a) {
  return map(a, [](double x) { return x * x; });
}
inline Arr exp(const Arr& a) {
  return map(a, [](double x) { return std::exp(x); });
}
inline Arr log(const Arr& a) {
  return map(a, [](double x) { return std::log(x); });
}
inline Arr tanh(const Arr& a) {
  return map(a, [](double x) { return std::tanh(x); });
}
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline Arr sigmoid(const Arr& a) {
  return map(a, [](double x) { return sigmoid(x); });
}
inline Arr clip(const Arr& a, double lo, double hi) {
  return map(a, [=](double x) { return std::min(std::max(x, lo), hi); });
}
// Keras's relu (spec 3.15): x above the threshold (clipped to max_value), alpha * (x - threshold)
// below it, 0 at the threshold.
inline double relu(double x, double alpha = 0, double max_value = HUGE_VAL, double threshold = 0) {
  if (std::isnan(x)) return x;
  if (x > threshold) return std::min(x, max_value);
  if (x < threshold && alpha != 0) return alpha * (x - threshold);
  return 0.0;
}

// ---- reductions --------------------------------------------------------------------------------

// Reduces the listed axes (all when empty) with `f` starting from `init`.
inline Arr reduce(const Arr& a, std::vector<int> axes, bool keepdims, double init,
                  const std::function<double(double, double)>& f) {
  if (axes.empty())
    for (int d = 0; d < a.ndim(); ++d) axes.push_back(d);
  std::vector<bool> red(static_cast<std::size_t>(a.ndim()), false);
  for (int ax : axes) red[static_cast<std::size_t>(axis_of(ax, a.ndim()))] = true;
  Dims kept;  // the output shape with keepdims
  for (int d = 0; d < a.ndim(); ++d)
    kept.push_back(red[static_cast<std::size_t>(d)] ? 1 : a.shape[static_cast<std::size_t>(d)]);
  Arr r = full(kept, init);
  for (std::int64_t i = 0; i < a.size(); ++i) {
    Dims idx = unravel(i, a.shape);
    for (int d = 0; d < a.ndim(); ++d)
      if (red[static_cast<std::size_t>(d)]) idx[static_cast<std::size_t>(d)] = 0;
    std::int64_t o = 0;
    const Dims st = strides_of(kept);
    for (std::size_t d = 0; d < idx.size(); ++d) o += idx[d] * st[d];
    r[o] = f(r[o], a[i]);
  }
  if (!keepdims) {
    Dims s;
    for (int d = 0; d < a.ndim(); ++d)
      if (!red[static_cast<std::size_t>(d)]) s.push_back(a.shape[static_cast<std::size_t>(d)]);
    r.shape = s;
  }
  return r;
}
inline Arr sum(const Arr& a, std::vector<int> axes = {}, bool keepdims = false) {
  return reduce(a, std::move(axes), keepdims, 0.0, [](double s, double x) { return s + x; });
}
inline Arr mean(const Arr& a, std::vector<int> axes = {}, bool keepdims = false) {
  Arr s = sum(a, axes, keepdims);
  const double n =
      static_cast<double>(a.size()) / static_cast<double>(std::max<std::int64_t>(s.size(), 1));
  return map(s, [n](double x) { return x / n; });
}
inline Arr max(const Arr& a, std::vector<int> axes = {}, bool keepdims = false) {
  return reduce(a, std::move(axes), keepdims, -HUGE_VAL,
                [](double m, double x) { return std::max(m, x); });
}
inline Arr min(const Arr& a, std::vector<int> axes = {}, bool keepdims = false) {
  return reduce(a, std::move(axes), keepdims, HUGE_VAL,
                [](double m, double x) { return std::min(m, x); });
}
inline Arr prod(const Arr& a, std::vector<int> axes = {}, bool keepdims = false) {
  return reduce(a, std::move(axes), keepdims, 1.0, [](double p, double x) { return p * x; });
}
// Population variance: the mean of squared deviations from the mean.
inline Arr var(const Arr& a, std::vector<int> axes = {}, bool keepdims = false) {
  const Arr m = mean(a, axes, true);
  Arr d = zip(a, m, [](double x, double mu) { return (x - mu) * (x - mu); });
  return mean(d, std::move(axes), keepdims);
}
// Straight from the definition (fine for the rows' moderate inputs).
inline Arr logsumexp(const Arr& a, std::vector<int> axes = {}, bool keepdims = false) {
  Arr s = sum(map(a, [](double x) { return std::exp(x); }), std::move(axes), keepdims);
  return map(s, [](double x) { return std::log(x); });
}
// Running sum or product along `axis`: element j is op(element j-1 of the result, a[j]).
inline Arr cumulative(const Arr& a, int axis, bool product) {
  const int ax = axis_of(axis, a.ndim());
  const Dims st = strides_of(a.shape);
  Arr r = a;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    const Dims idx = unravel(i, a.shape);
    if (idx[static_cast<std::size_t>(ax)] == 0) continue;
    const double prev = r[i - st[static_cast<std::size_t>(ax)]];
    r[i] = product ? prev * a[i] : prev + a[i];
  }
  return r;
}

// The index of the first extremum along `axis` (better(x, best) says x wins).
inline Arr arg_extremum(const Arr& a, int axis, const std::function<bool(double, double)>& better) {
  axis = axis_of(axis, a.ndim());
  Dims s = a.shape;
  const auto n = s[static_cast<std::size_t>(axis)];
  s.erase(s.begin() + axis);
  Arr r = full(s, 0.0);
  const Dims st = strides_of(a.shape);
  for (std::int64_t o = 0; o < r.size(); ++o) {
    Dims idx = unravel(o, s);
    idx.insert(idx.begin() + axis, 0);
    std::int64_t base = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) base += idx[d] * st[d];
    std::int64_t best = 0;
    for (std::int64_t k = 1; k < n; ++k)
      if (better(a[base + k * st[static_cast<std::size_t>(axis)]],
                 a[base + best * st[static_cast<std::size_t>(axis)]]))
        best = k;
    r[o] = static_cast<double>(best);
  }
  return r;
}
inline Arr argmax(const Arr& a, int axis = -1) {
  return arg_extremum(a, axis, [](double x, double best) { return x > best; });
}
inline Arr argmin(const Arr& a, int axis = -1) {
  return arg_extremum(a, axis, [](double x, double best) { return x < best; });
}

// ---- layout ------------------------------------------------------------------------------------

inline Arr reshape(const Arr& a, Dims s) {
  std::int64_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1)
      infer = static_cast<int>(i);
    else
      known *= s[i];
  }
  if (infer >= 0) s[static_cast<std::size_t>(infer)] = a.size() / known;
  return Arr(s, a.v);
}
inline Arr transpose(const Arr& a, const std::vector<int>& perm) {
  Dims s;
  for (int p : perm) s.push_back(a.shape[static_cast<std::size_t>(p)]);
  Arr r = full(s, 0.0);
  const Dims st = strides_of(a.shape);
  for (std::int64_t i = 0; i < r.size(); ++i) {
    const Dims idx = unravel(i, s);  // out[idx] = a[j] with j[perm[d]] = idx[d]
    std::int64_t off = 0;
    for (std::size_t d = 0; d < perm.size(); ++d)
      off += idx[d] * st[static_cast<std::size_t>(perm[d])];
    r[i] = a[off];
  }
  return r;
}
inline Arr transpose(const Arr& a) {
  std::vector<int> perm;
  for (int d = a.ndim() - 1; d >= 0; --d) perm.push_back(d);
  return transpose(a, perm);
}
inline Arr expand(const Arr& a, int axis) {
  Dims s = a.shape;
  s.insert(s.begin() + (axis < 0 ? axis + a.ndim() + 1 : axis), 1);
  return Arr(s, a.v);
}
inline Arr concat(const std::vector<Arr>& parts, int axis) {
  const int r = parts[0].ndim();
  axis = axis_of(axis, r);
  Dims s = parts[0].shape;
  s[static_cast<std::size_t>(axis)] = 0;
  for (const Arr& p : parts)
    s[static_cast<std::size_t>(axis)] += p.shape[static_cast<std::size_t>(axis)];
  Arr out = full(s, 0.0);
  for (std::int64_t i = 0; i < out.size(); ++i) {
    Dims idx = unravel(i, s);
    auto& k = idx[static_cast<std::size_t>(axis)];
    std::size_t part = 0;
    while (k >= parts[part].shape[static_cast<std::size_t>(axis)])
      k -= parts[part++].shape[static_cast<std::size_t>(axis)];
    const Dims st = strides_of(parts[part].shape);
    std::int64_t off = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) off += idx[d] * st[d];
    out[i] = parts[part][off];
  }
  return out;
}
inline Arr stack(const std::vector<Arr>& parts, int axis) {
  std::vector<Arr> e;
  for (const Arr& p : parts) e.push_back(expand(p, axis));
  return concat(e, axis < 0 ? axis + parts[0].ndim() + 1 : axis);
}
inline std::int64_t ravel(const Dims& idx, const Dims& s) {
  const Dims st = strides_of(s);
  std::int64_t o = 0;
  for (std::size_t d = 0; d < idx.size(); ++d) o += idx[d] * st[d];
  return o;
}
// numpy.flip over the listed axes.
inline Arr reverse(const Arr& a, const std::vector<int>& axes) {
  Arr r = a;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    Dims idx = unravel(i, a.shape);
    for (int ax : axes) {
      const auto d = static_cast<std::size_t>(axis_of(ax, a.ndim()));
      idx[d] = a.shape[d] - 1 - idx[d];
    }
    r[ravel(idx, a.shape)] = a[i];
  }
  return r;
}
// numpy.tile with len(n) == ndim: out[i] = a[i mod shape].
inline Arr tile(const Arr& a, const Dims& n) {
  Dims s;
  for (std::size_t d = 0; d < n.size(); ++d) s.push_back(a.shape[d] * n[d]);
  Arr r = full(s, 0);
  for (std::int64_t i = 0; i < r.size(); ++i) {
    Dims idx = unravel(i, s);
    for (std::size_t d = 0; d < idx.size(); ++d) idx[d] %= a.shape[d];
    r[i] = a[ravel(idx, a.shape)];
  }
  return r;
}
// Keras 2.3.1's batch_dot: out[b, xi..., yi...] = sum_k x[b, ... k at a0 ...] y[b, ... k at a1
// ...].
inline Arr batch_dot(const Arr& x, const Arr& y, int a0, int a1) {
  Dims xr, yr;
  for (int d = 1; d < x.ndim(); ++d)
    if (d != a0) xr.push_back(x.shape[static_cast<std::size_t>(d)]);
  for (int d = 1; d < y.ndim(); ++d)
    if (d != a1) yr.push_back(y.shape[static_cast<std::size_t>(d)]);
  Dims s{x.shape[0]};
  s.insert(s.end(), xr.begin(), xr.end());
  s.insert(s.end(), yr.begin(), yr.end());
  const std::int64_t K = x.shape[static_cast<std::size_t>(a0)];
  Arr r = full(s, 0);
  for (std::int64_t i = 0; i < r.size(); ++i) {
    const Dims idx = unravel(i, s);
    const auto xi = static_cast<std::ptrdiff_t>(xr.size());
    double acc = 0;
    for (std::int64_t k = 0; k < K; ++k) {
      Dims ix{idx[0]}, iy{idx[0]};
      ix.insert(ix.end(), idx.begin() + 1, idx.begin() + 1 + xi);
      iy.insert(iy.end(), idx.begin() + 1 + xi, idx.end());
      ix.insert(ix.begin() + a0, k);
      iy.insert(iy.begin() + a1, k);
      acc += x[ravel(ix, x.shape)] * y[ravel(iy, y.shape)];
    }
    r[i] = acc;
  }
  if (r.ndim() == 1) r.shape.push_back(1);
  return r;
}

// size -1: to the end of the axis.
inline Arr slice(const Arr& a, const Dims& start, const Dims& size) {
  Dims s;
  for (int d = 0; d < a.ndim(); ++d) {
    const auto sz = size[static_cast<std::size_t>(d)];
    s.push_back(
        sz >= 0 ? sz : a.shape[static_cast<std::size_t>(d)] - start[static_cast<std::size_t>(d)]);
  }
  Arr r = full(s, 0.0);
  const Dims st = strides_of(a.shape);
  for (std::int64_t i = 0; i < r.size(); ++i) {
    const Dims idx = unravel(i, s);
    std::int64_t off = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) off += (idx[d] + start[d]) * st[d];
    r[i] = a[off];
  }
  return r;
}

// np.dot: x (..., K) . y (..., K, N) -> x's leading dims + y's leading dims + (N,);
// out[i..., j..., n] = sum_k x[i..., k] y[j..., k, n].
inline Arr dot(const Arr& x, const Arr& y) {
  const auto K = x.shape.back();
  const auto N = y.shape.back();
  const std::int64_t rows = x.size() / K;
  const std::int64_t mats = y.size() / (K * N);
  Dims s(x.shape.begin(), x.shape.end() - 1);
  s.insert(s.end(), y.shape.begin(), y.shape.end() - 2);
  s.push_back(N);
  Arr r = full(s, 0.0);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < mats; ++j)
      for (std::int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (std::int64_t k = 0; k < K; ++k) acc += x[i * K + k] * y[(j * K + k) * N + n];
        r[(i * mats + j) * N + n] = acc;
      }
  return r;
}

// ---- nn ----------------------------------------------------------------------------------------

inline Arr log_softmax(const Arr& a, int axis) {
  const Arr m = max(a, {axis}, true);
  const Arr z = sub(a, m);
  const Arr lse = log(sum(exp(z), {axis}, true));
  return sub(z, lse);
}
inline Arr softmax(const Arr& a, int axis) { return exp(log_softmax(a, axis)); }

// Keras 2.2.4 categorical_crossentropy on TF: probabilities are normalized along the class axis
// and clipped to [eps, 1 - eps]; logits go through log_softmax.
inline Arr cce(const Arr& target, const Arr& output, bool from_logits, int axis,
               double eps = 1e-7) {
  if (from_logits) return neg(sum(mul(target, log_softmax(output, axis)), {axis}));
  const Arr p = clip(div(output, sum(output, {axis}, true)), eps, 1 - eps);
  return neg(sum(mul(target, log(p)), {axis}));
}
// Sparse: -log_softmax(logits)[target] along the last axis; probabilities become logits via
// log(clip(p, eps, 1 - eps)). `ids` holds one class id per row of `output`'s leading dims.
inline Arr scce(const std::vector<double>& ids, const Arr& output, bool from_logits,
                double eps = 1e-7) {
  const Arr logits = from_logits ? output : log(clip(output, eps, 1 - eps));
  const Arr ls = log_softmax(logits, -1);
  const auto C = output.shape.back();
  Dims s(output.shape.begin(), output.shape.end() - 1);
  Arr r = full(s, 0.0);
  for (std::int64_t i = 0; i < r.size(); ++i)
    r[i] = -ls[i * C + static_cast<std::int64_t>(ids[static_cast<std::size_t>(i)])];
  return r;
}

}  // namespace naive
