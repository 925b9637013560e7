#include "ops/normalization.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "ops/core.hpp"
#include "ops/elementwise.hpp"
#include "ops/layout.hpp"
#include "ops/op_util.hpp"
#include "ops/reductions.hpp"

namespace ktape::backend {

namespace {

// `p` (rank 1, C entries) reshaped to broadcast along `axis` of a rank-`rank` tensor.
Tensor along_axis(const Tensor& p, int axis, int rank) {
  if (axis == rank - 1) return p;
  std::vector<std::int64_t> s(static_cast<std::size_t>(rank - axis), 1);
  s[0] = -1;
  return reshape(p, s);
}

void check_param(const char* fn, const char* arg, const Tensor& x, const Tensor& p, int axis) {
  ops::check_same_dtype(fn, x, p);
  if (p.ndim() == 1) {
    const std::int64_t c = x.shape()[axis], pc = p.shape()[0];
    if (c >= 0 && pc >= 0 && c != pc && pc != 1)
      throw ValueError(std::string(fn) + ": `" + arg + "` of shape " + p.shape().str() +
                       " does not match axis " + std::to_string(axis) + " of x's shape " +
                       x.shape().str());
  } else {
    (void)ops::broadcast_shapes(fn, x.shape(), p.shape());
  }
}

}  // namespace

Tensor bias_add(const Tensor& x, const Tensor& bias, const std::optional<std::string>& df) {
  const char* fn = "K::bias_add";
  const bool cf = ops::channels_first(fn, df);
  ops::check_same_dtype(fn, x, bias);
  const int r = x.ndim();
  if (bias.ndim() != 1 && bias.ndim() != r - 1)
    throw ValueError(std::string(fn) + ": Unexpected bias dimensions " +
                     std::to_string(bias.ndim()) + ", expect to be 1 or " + std::to_string(r - 1) +
                     " dimensions (bias of shape " + bias.shape().str() + ", x of shape " +
                     x.shape().str() + ")");
  const bool first = cf && r >= 3 && r <= 5;
  const int axis = first ? 1 : r - 1;
  if (r < 1) throw ValueError(std::string(fn) + ": x must have rank >= 1");
  const std::int64_t c = x.shape()[axis], bc = bias.shape()[bias.ndim() - 1];
  if (c >= 0 && bc >= 0 && c != bc)
    throw ValueError(std::string(fn) + ": bias of shape " + bias.shape().str() + " has " +
                     std::to_string(bc) + " channels but x of shape " + x.shape().str() + " has " +
                     std::to_string(c) + " on axis " + std::to_string(axis));
  if (bias.ndim() == 1 || r == 2 || r > 5) {
    if (bias.ndim() != 1 && (r == 2 || r > 5)) return x + bias;
    return x + along_axis(bias, axis, r);
  }
  if (!first) return x + bias;  // (spatial..., C) against (N, spatial..., C)
  // channels_first: the channels_last bias (spatial..., C) reshaped to (C, spatial...).
  const Shape& b = bias.shape();
  if (!b.is_fully_defined())
    throw ValueError(std::string(fn) + ": a full-rank bias of shape " + b.str() +
                     " must have a known shape with channels_first");
  std::vector<std::int64_t> s{b[b.ndim() - 1]};
  for (int i = 0; i + 1 < b.ndim(); ++i) s.push_back(b[i]);
  return x + reshape(bias, s);
}

Tensor batch_normalization(const Tensor& x, const Tensor& mean, const Tensor& var,
                           const Tensor& beta, const Tensor& gamma, const BatchNormOptions& o) {
  const char* fn = "K::batch_normalization";
  ops::check_float(fn, "x", x);
  if (!mean.defined() || !var.defined())
    throw ValueError(std::string(fn) + ": mean and var are required");
  if (x.ndim() < 1) throw ValueError(std::string(fn) + ": x must have rank >= 1");
  const int axis = normalize_axis(o.axis, x.ndim(), fn);
  if (!(o.epsilon >= 0))
    throw ValueError(std::string(fn) + ": epsilon " + std::to_string(o.epsilon) + " must be >= 0");
  auto prep = [&](const char* arg, const Tensor& p) {
    check_param(fn, arg, x, p, axis);
    return p.ndim() == 1 ? along_axis(p, axis, x.ndim()) : p;
  };
  const Tensor m = prep("mean", mean), v = prep("var", var);
  Tensor inv = 1.0 / sqrt(v + o.epsilon);
  if (gamma.defined()) inv = inv * prep("gamma", gamma);
  const Tensor shift = beta.defined() ? prep("beta", beta) - m * inv : -(m * inv);
  return x * inv + shift;
}

NormalizedBatch normalize_batch_in_training(const Tensor& x, const Tensor& gamma,
                                            const Tensor& beta,
                                            const std::vector<int>& reduction_axes,
                                            double epsilon) {
  const char* fn = "K::normalize_batch_in_training";
  ops::check_float(fn, "x", x);
  if (reduction_axes.empty())
    throw ValueError(std::string(fn) + ": reduction_axes must not be empty");
  std::vector<int> axes;
  for (int a : reduction_axes) axes.push_back(normalize_axis(a, x.ndim(), fn));
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    throw ValueError(std::string(fn) + ": reduction_axes " +
                     ops::dims_str(std::vector<std::int64_t>(axes.begin(), axes.end())) +
                     " repeat an axis");
  const Tensor mean_k = mean(x, {.axis = axes, .keepdims = true});
  const Tensor var_k = mean(square(x - mean_k), {.axis = axes, .keepdims = true});
  // gamma / beta with the reduced shape broadcast like the keepdims moments.
  auto prep = [&](const char* arg, const Tensor& p) -> Tensor {
    if (!p.defined()) return p;
    ops::check_same_dtype(fn, x, p);
    const int kept = x.ndim() - static_cast<int>(axes.size());
    if (p.ndim() == kept && p.ndim() != x.ndim()) {
      std::vector<std::int64_t> s;
      int unknown = 0;
      int pi = 0;
      for (int d = 0; d < x.ndim(); ++d) {
        if (std::binary_search(axes.begin(), axes.end(), d)) {
          s.push_back(1);
        } else {
          std::int64_t v = p.shape()[pi++];
          if (v < 0) v = -1, ++unknown;
          s.push_back(v);
        }
      }
      if (unknown > 1)
        throw ValueError(std::string(fn) + ": `" + arg + "` of shape " + p.shape().str() +
                         " has more than one unknown dim");
      return reshape(p, s);
    }
    (void)ops::broadcast_shapes(fn, mean_k.shape(), p.shape());
    return p;
  };
  const Tensor normed = batch_normalization(x, mean_k, var_k, prep("beta", beta),
                                            prep("gamma", gamma), {.axis = -1, .epsilon = epsilon});
  Tensor m = mean_k, v = var_k;
  for (auto it = axes.rbegin(); it != axes.rend(); ++it) {
    m = squeeze(m, *it);
    v = squeeze(v, *it);
  }
  return {normed, m, v};
}

}  // namespace ktape::backend
