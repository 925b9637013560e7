// Gradients: float64 finite-difference checks of every differentiable op (first and second
// order), the gradient semantics of spec 3.2 (unconnected inputs, intermediate tensors,
// stop_gradient, non-scalar losses), dropout's gradient, and cpu-vs-reference backend parity of
// forward values and gradients in float32 and float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ktape/ktape.hpp"

namespace {

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;
using V = std::vector<Tensor>;
using Fn = std::function<Tensor(const V&)>;

// ---- input generation -------------------------------------------------------------------------

// Deterministic float64 inputs (std::mt19937_64 with a fixed seed).
class Gen {
 public:
  explicit Gen(std::uint64_t seed) : gen_(seed) {}

  double u(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen_); }

  NDArray uniform(const Shape& s, double lo, double hi) {
    NDArray a(s, DType::float64);
    for (std::int64_t i = 0; i < a.size(); ++i) a.set_item(i, u(lo, hi));
    return a;
  }
  NDArray normal(const Shape& s, double stddev = 1.0) {
    NDArray a(s, DType::float64);
    std::normal_distribution<double> d(0.0, stddev);
    for (std::int64_t i = 0; i < a.size(); ++i) a.set_item(i, d(gen_));
    return a;
  }
  // Uniform in [lo, hi) but at least `margin` away from every kink (so that central differences
  // never straddle a non-differentiable point).
  NDArray away(const Shape& s, double lo, double hi, const std::vector<double>& kinks,
               double margin = 0.1) {
    NDArray a(s, DType::float64);
    for (std::int64_t i = 0; i < a.size(); ++i) {
      double v;
      bool ok;
      do {
        v = u(lo, hi);
        ok = true;
        for (double k : kinks) ok = ok && std::abs(v - k) >= margin;
      } while (!ok);
      a.set_item(i, v);
    }
    return a;
  }
  // Distinct values on an evenly spaced grid over [lo, hi], shuffled (no ties for max/min).
  NDArray distinct(const Shape& s, double lo, double hi) {
    NDArray a(s, DType::float64);
    const std::int64_t n = a.size();
    std::vector<double> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      v[static_cast<std::size_t>(i)] =
          n == 1 ? lo : lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(n - 1);
    std::shuffle(v.begin(), v.end(), gen_);
    for (std::int64_t i = 0; i < n; ++i) a.set_item(i, v[static_cast<std::size_t>(i)]);
    return a;
  }
  // Pairs (x, y) with |x - y| >= margin everywhere (for maximum/minimum).
  std::vector<NDArray> separated(const Shape& sx, const Shape& sy, double margin = 0.2) {
    for (;;) {
      NDArray x = uniform(sx, -2, 2), y = uniform(sy, -2, 2);
      // Check with broadcasting: the shapes used here are equal or y is a trailing suffix.
      bool ok = true;
      for (std::int64_t i = 0; ok && i < x.size(); ++i)
        ok = std::abs(x.item(i) - y.item(i % y.size())) >= margin;
      if (ok) return {x, y};
    }
  }

 private:
  std::mt19937_64 gen_;
};

NDArray f64(const std::vector<double>& v, const Shape& s) {
  return NDArray::from_values(v, s, DType::float64);
}

// A constant with the dtype of `like` (so that one builder serves float32 and float64 graphs).
Tensor const_like(const Tensor& like, const NDArray& value) {
  return K::constant(value, {.dtype = K::dtype(like)});
}

Tensor int_target(const std::vector<double>& ids, const Shape& s) {
  return K::constant(NDArray::from_values(ids, s, DType::float64), {.dtype = "int32"});
}

// ---- the op table ----------------------------------------------------------------------------

struct OpCase {
  std::string name;
  Fn f;
  std::vector<NDArray> inputs;  // float64
  bool gradcheck = true;        // run the finite-difference check
  bool parity = true;           // run the cpu-vs-reference comparison
  bool ref_gradcheck = false;   // also gradcheck with .backend = "reference"
  double rtol32 = 1e-5;         // parity tolerance in float32
  bool none_batch = false;      // parity placeholders get a None leading dim
  bool none_ok = true;          // buildable with None leading dims (UnknownDims test)
};

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

std::vector<OpCase> make_cases() {
  Gen g(20240611);
  std::vector<OpCase> c;
  auto add = [&](const std::string& name, Fn f, std::vector<NDArray> in) -> OpCase& {
    OpCase k;
    k.name = name;
    k.f = std::move(f);
    k.inputs = std::move(in);
    c.push_back(std::move(k));
    return c.back();
  };
  const Shape s34{3, 4};

  // -- arithmetic with broadcasting
  add("add_same", [](const V& x) { return x[0] + x[1]; }, {g.normal(s34), g.normal(s34)});
  add("add_row", [](const V& x) { return x[0] + x[1]; }, {g.normal(s34), g.normal({4})})
      .ref_gradcheck = true;
  add("add_col", [](const V& x) { return x[0] + x[1]; }, {g.normal(s34), g.normal({3, 1})});
  add("add_outer", [](const V& x) { return x[0] + x[1]; }, {g.normal({3, 1}), g.normal({1, 4})});
  add("add_scalar_tensor", [](const V& x) { return x[1] + x[0]; }, {g.normal(s34), g.normal({})});
  add("sub_row", [](const V& x) { return x[0] - x[1]; }, {g.normal(s34), g.normal({4})});
  add("sub_col_rev", [](const V& x) { return x[1] - x[0]; }, {g.normal(s34), g.normal({3, 1})});
  add("mul_same", [](const V& x) { return x[0] * x[1]; }, {g.normal(s34), g.normal(s34)});
  add("mul_row", [](const V& x) { return x[0] * x[1]; }, {g.normal(s34), g.normal({4})});
  add("mul_col", [](const V& x) { return x[1] * x[0]; }, {g.normal(s34), g.normal({3, 1})});
  add("mul_outer", [](const V& x) { return x[0] * x[1]; }, {g.normal({3, 1}), g.normal({1, 4})});
  add("mul_self", [](const V& x) { return x[0] * x[0]; }, {g.normal(s34)});
  add("div_same", [](const V& x) { return x[0] / x[1]; },
      {g.normal(s34), g.away(s34, -2, 2, {0}, 0.5)});
  add("div_row", [](const V& x) { return x[0] / x[1]; },
      {g.normal(s34), g.away({4}, -2, 2, {0}, 0.5)})
      .ref_gradcheck = true;
  add("div_col_numerator_broadcast", [](const V& x) { return x[1] / x[0]; },
      {g.away(s34, -2, 2, {0}, 0.5), g.normal({3, 1})});
  add("neg", [](const V& x) { return -x[0]; }, {g.normal(s34)});
  add("scalar_doubles",
      [](const V& x) {
        const Tensor& a = x[0];
        return ((a + 2.0) * 3.0 - 1.0) / 4.0 + (2.0 - a) + 3.0 / (a + 5.0) + 2.0 * a - (a - 0.5) +
               (1.5 + a) * (a * 0.5);
      },
      {g.uniform(s34, -1, 1)});

  // -- unary math
  add("square", [](const V& x) { return K::square(x[0]); }, {g.normal(s34)});
  add("sqrt", [](const V& x) { return K::sqrt(x[0]); }, {g.uniform(s34, 0.5, 2)});
  add("exp", [](const V& x) { return K::exp(x[0]); }, {g.uniform(s34, -1, 1)});
  add("log", [](const V& x) { return K::log(x[0]); }, {g.uniform(s34, 0.5, 2)});
  add("abs", [](const V& x) { return K::abs(x[0]); }, {g.away(s34, -2, 2, {0})});
  add("pow3", [](const V& x) { return K::pow(x[0], 3.0); }, {g.normal(s34)});
  add("pow2_5", [](const V& x) { return K::pow(x[0], 2.5); }, {g.uniform(s34, 0.5, 2)});
  add("pow_neg1_5", [](const V& x) { return K::pow(x[0], -1.5); }, {g.uniform(s34, 0.5, 2)});
  add("clip", [](const V& x) { return K::clip(x[0], -0.5, 0.5); },
      {g.away(s34, -1.5, 1.5, {-0.5, 0.5}, 0.05)});
  add("clip_swapped_bounds", [](const V& x) { return K::clip(x[0], 0.5, -1.0) * x[0]; },
      {g.away(s34, -1.5, 1.5, {0.5}, 0.05)});
  {
    auto xy = g.separated(s34, s34);
    add(
        "maximum", [](const V& x) { return K::maximum(x[0], x[1]); }, xy);
    add(
        "minimum", [](const V& x) { return K::minimum(x[0], x[1]); }, xy);
    auto xr = g.separated(s34, {4});
    add(
        "maximum_row", [](const V& x) { return K::maximum(x[0], x[1]); }, xr)
        .ref_gradcheck = true;
    add(
        "minimum_row", [](const V& x) { return K::minimum(x[1], x[0]); }, xr);
  }
  add("maximum_double", [](const V& x) { return K::maximum(x[0], 0.3); },
      {g.away(s34, -2, 2, {0.3})});
  add("minimum_double", [](const V& x) { return K::minimum(x[0], -0.2); },
      {g.away(s34, -2, 2, {-0.2})});

  // -- activations (inputs kept away from 0, the threshold and max_value)
  add("relu", [](const V& x) { return K::relu(x[0]); }, {g.away(s34, -2, 2, {0})});
  add("relu_alpha", [](const V& x) { return K::relu(x[0], {.alpha = 0.3}); },
      {g.away(s34, -2, 2, {0})});
  add("relu_max_value", [](const V& x) { return K::relu(x[0], {.max_value = 1.0}); },
      {g.away(s34, -2, 2, {0, 1})});
  add("relu_threshold", [](const V& x) { return K::relu(x[0], {.threshold = 0.5}); },
      {g.away(s34, -2, 2, {0.5})});
  add("relu_negative_threshold", [](const V& x) { return K::relu(x[0], {.threshold = -0.5}); },
      {g.away(s34, -2, 2, {-0.5})});
  add("relu_all",
      [](const V& x) { return K::relu(x[0], {.alpha = 0.2, .max_value = 1.5, .threshold = 0.5}); },
      {g.away({4, 5}, -2, 2.5, {0.5, 1.5})})
      .ref_gradcheck = true;
  add("sigmoid", [](const V& x) { return K::sigmoid(x[0]); }, {g.normal(s34, 2)});
  add("tanh", [](const V& x) { return K::tanh(x[0]); }, {g.normal(s34)});
  add("softmax_last", [](const V& x) { return K::softmax(x[0]); }, {g.normal(s34)}).ref_gradcheck =
      true;
  add("softmax_axis0", [](const V& x) { return K::softmax(x[0], 0); }, {g.normal(s34)});
  add("softmax_3d_axis1", [](const V& x) { return K::softmax(x[0], 1); }, {g.normal({2, 3, 2})});
  add("softmax_neg_axis", [](const V& x) { return K::softmax(x[0], -2); }, {g.normal({2, 3, 2})});

  // -- crossentropies
  add("cce", [](const V& x) { return K::categorical_crossentropy(x[0], x[1]); },
      {g.uniform(s34, 0, 1), g.uniform(s34, 0.1, 1)});
  add("cce_logits",
      [](const V& x) { return K::categorical_crossentropy(x[0], x[1], {.from_logits = true}); },
      {g.uniform(s34, 0, 1), g.normal(s34)});
  add("cce_axis0", [](const V& x) { return K::categorical_crossentropy(x[0], x[1], {.axis = 0}); },
      {g.uniform(s34, 0, 1), g.uniform(s34, 0.1, 1)});
  add("cce_logits_axis0",
      [](const V& x) {
        return K::categorical_crossentropy(x[0], x[1], {.from_logits = true, .axis = 0});
      },
      {g.uniform(s34, 0, 1), g.normal(s34)});
  add("scce",
      [](const V& x) {
        return K::sparse_categorical_crossentropy(int_target({0, 2, 3}, {3}), x[0]);
      },
      {g.uniform(s34, 0.05, 0.95)});
  add("scce_logits",
      [](const V& x) {
        return K::sparse_categorical_crossentropy(int_target({1, 3, 0}, {3}), x[0],
                                                  {.from_logits = true});
      },
      {g.normal(s34)})
      .ref_gradcheck = true;
  add("scce_logits_target_n1",
      [](const V& x) {
        return K::sparse_categorical_crossentropy(int_target({2, 2, 1}, {3, 1}), x[0],
                                                  {.from_logits = true});
      },
      {g.normal(s34)});
  add("scce_target_n1",
      [](const V& x) {
        return K::sparse_categorical_crossentropy(int_target({3, 0, 1}, {3, 1}), x[0]);
      },
      {g.uniform(s34, 0.05, 0.95)});
  add("scce_logits_rank3",
      [](const V& x) {
        return K::sparse_categorical_crossentropy(int_target({0, 1, 2, 3, 2, 1}, {2, 3}), x[0],
                                                  {.from_logits = true});
      },
      {g.normal({2, 3, 4})});
  add("scce_logits_axis0",
      [](const V& x) {
        return K::sparse_categorical_crossentropy(int_target({0, 3, 1}, {3}), x[0],
                                                  {.from_logits = true, .axis = 0});
      },
      {g.normal({4, 3})})
      .none_ok = false;  // the class axis (axis 0 here) must be known

  // -- reductions
  const Shape s234{2, 3, 4};
  add("sum_all", [](const V& x) { return K::sum(x[0]); }, {g.normal(s234)});
  add("sum_axis0", [](const V& x) { return K::sum(x[0], 0); }, {g.normal(s234)});
  add("sum_axis_neg1_keepdims", [](const V& x) { return K::sum(x[0], -1, true); },
      {g.normal(s234)});
  add("sum_axis_list",
      [](const V& x) {
        return K::sum(x[0], {.axis = std::vector<int>{0, 2}});
      },
      {g.normal(s234)});
  add("sum_axis_list_keepdims",
      [](const V& x) {
        return K::sum(x[0], {.axis = std::vector<int>{-1, 1}, .keepdims = true});
      },
      {g.normal(s234)});
  add("mean_all", [](const V& x) { return K::mean(x[0]); }, {g.normal(s234)});
  add("mean_axis1", [](const V& x) { return K::mean(x[0], 1); }, {g.normal(s234)});
  add("mean_axis_list_keepdims",
      [](const V& x) {
        return K::mean(x[0], {.axis = std::vector<int>{0, 2}, .keepdims = true});
      },
      {g.normal(s234)});
  add("max_all", [](const V& x) { return K::max(x[0]); }, {g.distinct(s234, -2, 2)});
  add("max_axis1", [](const V& x) { return K::max(x[0], 1); }, {g.distinct(s234, -2, 2)})
      .ref_gradcheck = true;
  add("max_axis_neg1_keepdims", [](const V& x) { return K::max(x[0], -1, true); },
      {g.distinct(s234, -2, 2)});
  add("max_axis_list",
      [](const V& x) {
        return K::max(x[0], {.axis = std::vector<int>{0, 2}});
      },
      {g.distinct(s234, -2, 2)});
  add("min_all", [](const V& x) { return K::min(x[0]); }, {g.distinct(s234, -2, 2)});
  add("min_axis0", [](const V& x) { return K::min(x[0], 0); }, {g.distinct(s234, -2, 2)});
  add("min_axis_list_keepdims",
      [](const V& x) {
        return K::min(x[0], {.axis = std::vector<int>{1, 2}, .keepdims = true});
      },
      {g.distinct(s234, -2, 2)});

  // -- linear algebra and layout
  add("dot_2d", [](const V& x) { return K::dot(x[0], x[1]); }, {g.normal(s34), g.normal({4, 2})});
  {
    // n-D dot needs y's shape fully known (documented), so no None dims for these.
    OpCase& k = add("dot_nd_right", [](const V& x) { return K::dot(x[0], x[1]); },
                    {g.normal({4, 2}), g.normal({5, 2, 3})});
    k.ref_gradcheck = true;
    k.none_ok = false;
  }
  add("dot_nd_left", [](const V& x) { return K::dot(x[0], x[1]); },
      {g.normal({2, 3, 4}), g.normal({4, 2})})
      .none_ok = false;
  add("dot_nd_both", [](const V& x) { return K::dot(x[0], x[1]); },
      {g.normal({2, 2, 3}), g.normal({2, 3, 2})})
      .none_ok = false;
  add("dot_self_transpose", [](const V& x) { return K::dot(x[0], K::transpose(x[0])); },
      {g.normal(s34)});
  add("transpose", [](const V& x) { return K::transpose(x[0]); }, {g.normal(s34)});
  add("transpose_3d", [](const V& x) { return K::transpose(x[0]); }, {g.normal(s234)});
  add("permute_dimensions",
      [](const V& x) {
        return K::permute_dimensions(x[0], {2, 0, 1});
      },
      {g.normal(s234)});
  add("reshape", [](const V& x) { return K::reshape(x[0], {2, -1, 3}); }, {g.normal(s34)});
  add("flatten", [](const V& x) { return K::flatten(x[0]); }, {g.normal(s234)});
  add("batch_flatten", [](const V& x) { return K::batch_flatten(x[0]); }, {g.normal(s234)})
      .none_batch = true;
  add("expand_dims", [](const V& x) { return K::expand_dims(x[0], 1); }, {g.normal(s34)});
  add("expand_dims_last", [](const V& x) { return K::expand_dims(x[0]); }, {g.normal(s34)});
  add("squeeze", [](const V& x) { return K::squeeze(x[0], 1); }, {g.normal({3, 1, 4})});
  add("concatenate_last",
      [](const V& x) {
        return K::concatenate({x[0], x[1]});
      },
      {g.normal({3, 2}), g.normal(s34)});
  add("concatenate_axis0",
      [](const V& x) {
        return K::concatenate({x[0], x[1]}, 0);
      },
      {g.normal({2, 4}), g.normal(s34)})
      .ref_gradcheck = true;
  add("concatenate_three_mid",
      [](const V& x) {
        return K::concatenate({x[0], x[1], x[0]}, -2);
      },
      {g.normal({2, 1, 3}), g.normal({2, 2, 3})});
  add("identity", [](const V& x) { return K::identity(x[0]) * x[0]; }, {g.normal(s34)});
  add("slice_mid",
      [](const V& x) {
        return K::slice(x[0], {0, 1, 1}, {2, 2, -1});
      },
      {g.normal(s234)})
      .ref_gradcheck = true;
  add("slice_gates",  // the four gate slices of an LSTM, recombined
      [](const V& x) {
        auto s = [&](int k) { return K::slice(x[0], {0, 2 * k}, {-1, 2}); };
        return K::sigmoid(s(0)) * K::tanh(s(1)) + s(2) * s(3);
      },
      {g.normal({3, 8})});
  add("stack_axis1",
      [](const V& x) {
        return K::stack({x[0], x[1] * 2.0}, 1);
      },
      {g.normal(s34), g.normal(s34)});
  // -- loops (Scan): the body runs on the backend under test
  add("rnn_simple",
      [](const V& x) {
        auto r = K::rnn(
            [&](const Tensor& xt, const V& s) -> std::pair<Tensor, V> {
              Tensor h = K::tanh(K::dot(xt, x[1]) + K::dot(s[0], x[2]));
              return {h, {h}};
            },
            x[0], {K::zeros_like(K::dot(K::sum(x[0], 1), x[1]))});
        return r.outputs;
      },
      {g.normal({2, 3, 4}), g.normal({4, 3}), g.normal({3, 3})})
      .ref_gradcheck = true;
  add("map_fn_square",
      [](const V& x) { return K::map_fn([](const Tensor& e) { return K::square(e); }, x[0]); },
      {g.normal(s34)});
  add("foldl_product",
      [](const V& x) {
        return K::foldl([](const Tensor& a, const Tensor& e) { return a * e; }, x[0]);
      },
      {g.normal(s34)});

  // -- control
  add("switch_rows",
      [](const V& x) {
        const Tensor cond = K::constant(f64({1, 0, 1}, {3}), {.dtype = "bool"});
        return K::switch_(cond, x[0], x[1]);
      },
      {g.normal(s34), g.normal(s34)});
  add("switch_scalar",
      [](const V& x) { return K::switch_(const_like(x[0], f64({0}, {})), x[0], x[1] * x[1]); },
      {g.normal(s34), g.normal(s34)});
  add("switch_broadcast_branch",
      [](const V& x) {
        const Tensor cond = K::constant(f64({0, 1, 1, 0}, {2, 2}), {.dtype = "bool"});
        return K::switch_(cond, x[0], x[1]);
      },
      {g.normal({2, 2}), g.normal({2})});
  add("in_train_phase_static",
      [](const V& x) { return K::in_train_phase([&] { return K::exp(x[0]); }, x[0], 1); },
      {g.normal(s34)});

  // -- a small model: softmax(relu(x.W1 + b1).W2 + b2) with a crossentropy
  add("mlp_cce",
      [](const V& x) {
        const Tensor h = K::relu(K::dot(x[0], x[1]) + x[2], {.alpha = 0.1});
        const Tensor p = K::softmax(K::dot(h, x[3]));
        const Tensor t = const_like(x[0], f64({1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3}));
        return K::mean(K::categorical_crossentropy(t, p));
      },
      {g.normal({3, 4}), g.normal({4, 5}), g.normal({5}), g.normal({5, 3})});

  // ---- parity-only cases: bigger shapes (parallel kernels), zero-size, scalars, size-1 dims
  auto parity_only = [&](const std::string& name, Fn f, std::vector<NDArray> in) -> OpCase& {
    OpCase& k = add(name, std::move(f), std::move(in));
    k.gradcheck = false;
    return k;
  };
  parity_only("big_add_row", [](const V& x) { return x[0] + x[1]; },
              {g.normal({400, 250}), g.normal({250})});
  parity_only("big_mul_col", [](const V& x) { return x[0] * x[1]; },
              {g.normal({400, 250}), g.normal({400, 1})});
  parity_only("big_unary_chain",
              [](const V& x) {
                const Tensor& a = x[0];
                return K::exp(K::tanh(a)) + K::sigmoid(a) * K::sqrt(K::abs(a)) +
                       K::log(K::square(a) + 1.0) - K::relu(a, {.alpha = 0.1, .max_value = 1.0}) +
                       K::clip(-a, -0.5, 0.5);
              },
              {g.normal({300, 300})});
  parity_only("big_matmul", [](const V& x) { return K::dot(x[0], x[1]); },
              {g.normal({64, 96}), g.normal({96, 80})})
      .rtol32 = 1e-4;
  // A first-order gradient as the output: the parity test differentiates it again, which runs
  // MatMul with transpose flags on sizes large enough for the parallel split.
  parity_only(
      "big_matmul_gradient",
      [](const V& x) { return K::gradients(K::sum(K::square(K::dot(x[0], x[1]))), {x[0]})[0]; },
      {g.normal({64, 96}), g.normal({96, 80})})
      .rtol32 = 1e-4;
  parity_only("big_softmax_cce",
              [](const V& x) {
                return K::categorical_crossentropy(K::softmax(x[1]), x[0], {.from_logits = true});
              },
              {g.normal({200, 50}), g.normal({200, 50})});
  parity_only("big_reductions",
              [](const V& x) {
                return K::sum(x[0], 0) + K::mean(x[0], 0) * K::max(x[0], 0) - K::min(x[0], 0);
              },
              {g.normal({500, 40})});
  parity_only("add_5x4_row", [](const V& x) { return x[0] + x[1]; },
              {g.normal({5, 4}), g.normal({4})});
  parity_only("mul_5x1_1x4", [](const V& x) { return x[0] * x[1]; },
              {g.normal({5, 1}), g.normal({1, 4})});
  parity_only("div_sub_5x4_broadcast",
              [](const V& x) { return (x[0] - x[1]) / (x[1] * x[1] + 1.0); },
              {g.normal({5, 4}), g.normal({5, 1})});
  parity_only("zero_add_row", [](const V& x) { return x[0] + x[1]; },
              {g.normal({0, 4}), g.normal({4})});
  parity_only("zero_unary", [](const V& x) { return K::relu(K::exp(x[0]) * K::tanh(x[0]) - x[0]); },
              {g.normal({0, 4})});
  parity_only("zero_sum_axis0", [](const V& x) { return K::sum(x[0], 0) * x[1]; },
              {g.normal({0, 4}), g.normal({4})});
  parity_only("zero_mean_axis0", [](const V& x) { return K::mean(x[0], 0); }, {g.normal({0, 4})});
  parity_only("zero_matmul_rows", [](const V& x) { return K::dot(x[0], x[1]); },
              {g.normal({0, 4}), g.normal({4, 3})});
  parity_only("zero_matmul_inner", [](const V& x) { return K::dot(x[0], x[1]); },
              {g.normal({3, 0}), g.normal({0, 2})});
  parity_only("zero_concat",
              [](const V& x) {
                return K::concatenate({x[0], x[1]}, 0);
              },
              {g.normal({0, 4}), g.normal({2, 4})});
  parity_only("scalar_ops",
              [](const V& x) { return K::exp(x[0]) * x[1] + K::sigmoid(x[1]) / (x[0] + 3.0); },
              {g.uniform({}, -1, 1), g.normal({})});
  parity_only("size1_outer", [](const V& x) { return x[0] * x[1] - x[1]; },
              {g.normal({1, 4}), g.normal({5, 1})});
  parity_only("size1_11", [](const V& x) { return x[1] + x[0]; },
              {g.normal({1, 1}), g.normal({5, 4})});
  parity_only("size1_middle", [](const V& x) { return x[0] / (x[1] * x[1] + 1.0); },
              {g.normal({3, 1, 4}), g.normal({3, 5, 1})});
  parity_only("none_batch_chain",
              [](const V& x) { return K::softmax(K::dot(x[0], x[1]) + x[2]) * K::mean(x[0]); },
              {g.normal({6, 4}), g.normal({4, 3}), g.normal({3})})
      .none_batch = true;
  parity_only("negative_axes",
              [](const V& x) {
                return K::sum(K::softmax(x[0], -3), {.axis = std::vector<int>{-1, -3}}) +
                       K::max(x[0], {.axis = std::vector<int>{-3, -1}});
              },
              {g.normal({2, 3, 4})});
  // Non-float outputs are compared exactly (no gradients).
  parity_only("compare_ops",
              [](const V& x) {
                return K::cast(K::greater(x[0], x[1]), "int32") +
                       K::cast(K::less_equal(x[0], 0.0), "int32") * 2 +
                       K::cast(K::equal(x[0], x[0]), "int32") * 4 +
                       K::cast(K::not_equal(x[1], x[0]), "int32") * 8 +
                       K::cast(K::greater_equal(x[1], 0.5), "int32") * 16 +
                       K::cast(K::less(x[1], x[0]), "int32") * 32;
              },
              {g.normal({40, 30}), g.normal({30})});
  parity_only("argmax_argmin",
              [](const V& x) { return K::argmax(x[0], 0) * K::argmin(x[0], -1) + K::argmax(x[0]); },
              {g.normal({6, 6})});
  parity_only("round_sign_casts",
              [](const V& x) {
                return K::round(x[0] * 3.0) + K::sign(x[0]) +
                       K::cast(K::cast(x[0] * 4.0, "int32"), K::dtype(x[0]));
              },
              {g.normal({5, 7})});
  return c;
}

const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> c = make_cases();
  return c;
}

std::vector<OpCase> gradcheck_cases() {
  std::vector<OpCase> r;
  for (const auto& k : cases())
    if (k.gradcheck) r.push_back(k);
  return r;
}
std::vector<OpCase> ref_gradcheck_cases() {
  std::vector<OpCase> r;
  for (const auto& k : cases())
    if (k.ref_gradcheck) r.push_back(k);
  return r;
}
std::vector<OpCase> parity_cases() {
  std::vector<OpCase> r;
  for (const auto& k : cases())
    if (k.parity) r.push_back(k);
  return r;
}

std::string case_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }

// ---- 1. first-order gradchecks -----------------------------------------------------------------

class Gradcheck : public ::testing::TestWithParam<OpCase> {};

TEST_P(Gradcheck, MatchesFiniteDifferences) {
  const OpCase& k = GetParam();
  const auto r = ktape::gradcheck(k.f, k.inputs);
  EXPECT_TRUE(r.ok) << r.report << " (max_error " << r.max_error << ")";
}

INSTANTIATE_TEST_SUITE_P(Ops, Gradcheck, ::testing::ValuesIn(gradcheck_cases()), case_name);

class GradcheckReference : public ::testing::TestWithParam<OpCase> {};

TEST_P(GradcheckReference, MatchesFiniteDifferences) {
  const OpCase& k = GetParam();
  const auto r = ktape::gradcheck(k.f, k.inputs, {.backend = "reference"});
  EXPECT_TRUE(r.ok) << r.report << " (max_error " << r.max_error << ")";
}

INSTANTIATE_TEST_SUITE_P(Ops, GradcheckReference, ::testing::ValuesIn(ref_gradcheck_cases()),
                         case_name);

// ---- 2. second order ---------------------------------------------------------------------------

struct SecondOrderCase {
  std::string name;
  Fn op;  // scalar-valued after K::sum; differentiated twice
  NDArray x;
};
void PrintTo(const SecondOrderCase& c, std::ostream* os) { *os << c.name; }

std::vector<SecondOrderCase> second_order_cases() {
  Gen g(777);
  const Shape s{3, 4};
  const NDArray w = g.normal(s);         // fixed weights for softmax
  const NDArray m = g.normal({4, 2});    // constant matrix for dot
  const NDArray t = g.uniform(s, 0, 1);  // soft targets
  std::vector<SecondOrderCase> c = {
      {"tanh", [](const V& x) { return K::tanh(x[0]); }, g.normal(s)},
      {"sigmoid", [](const V& x) { return K::sigmoid(x[0]); }, g.normal(s)},
      {"exp", [](const V& x) { return K::exp(x[0]); }, g.uniform(s, -1, 1)},
      {"square", [](const V& x) { return K::square(x[0]); }, g.normal(s)},
      {"log", [](const V& x) { return K::log(x[0]); }, g.uniform(s, 0.5, 2)},
      {"sqrt", [](const V& x) { return K::sqrt(x[0]); }, g.uniform(s, 0.5, 2)},
      {"pow2_5", [](const V& x) { return K::pow(x[0], 2.5); }, g.uniform(s, 0.5, 2)},
      {"reciprocal", [](const V& x) { return 1.0 / x[0]; }, g.away(s, -2, 2, {0}, 0.5)},
      {"softmax_weighted", [w](const V& x) { return K::softmax(x[0]) * const_like(x[0], w); },
       g.normal(s)},
      {"softmax_axis0_weighted",
       [w](const V& x) { return K::softmax(x[0], 0) * const_like(x[0], w); }, g.normal(s)},
      {"cube_via_mul", [](const V& x) { return x[0] * x[0] * x[0]; }, g.normal(s)},
      {"dot_constant_squared",
       [m](const V& x) { return K::square(K::dot(x[0], const_like(x[0], m))); }, g.normal(s)},
      {"cce_logits",
       [t](const V& x) {
         return K::categorical_crossentropy(const_like(x[0], t), x[0], {.from_logits = true});
       },
       g.normal(s)},
      {"cce_probabilities",
       [t](const V& x) { return K::categorical_crossentropy(const_like(x[0], t), x[0]); },
       g.uniform(s, 0.1, 1)},
      {"scce_logits",
       [](const V& x) {
         return K::sparse_categorical_crossentropy(int_target({2, 0, 3}, {3}), x[0],
                                                   {.from_logits = true});
       },
       g.normal(s)},
      {"mean_of_product_row", [](const V& x) { return K::mean(K::square(x[0]) * K::exp(x[0]), 1); },
       g.uniform(s, -1, 1)},
      {"max_times_x", [](const V& x) { return K::max(x[0], 1) * K::sum(x[0], 1); },
       g.distinct(s, -2, 2)},
      {"scce_probabilities",
       [](const V& x) {
         return K::sparse_categorical_crossentropy(int_target({1, 3, 0}, {3}), x[0]);
       },
       g.uniform(s, 0.05, 0.95)},
      // relu'(x) * x + relu(x): differentiating the ReluGrad node w.r.t. its incoming gradient
      {"relu_times_x",
       [](const V& x) {
         return K::relu(x[0], {.alpha = 0.2, .max_value = 1.0, .threshold = 0.3}) * x[0];
       },
       g.away(s, -2, 2, {0.3, 1.0})},
      {"clip_times_x", [](const V& x) { return K::clip(x[0], -0.5, 0.7) * K::exp(x[0]); },
       g.away(s, -1.5, 1.5, {-0.5, 0.7}, 0.05)},
      {"abs_times_square", [](const V& x) { return K::abs(x[0]) * K::square(x[0]); },
       g.away(s, -2, 2, {0})},
      {"maximum_times_x", [](const V& x) { return K::maximum(x[0], 0.1) * x[0]; },
       g.away(s, -2, 2, {0.1})},
      {"layout_chain",
       [w](const V& x) {
         const Tensor c = K::concatenate({x[0], K::exp(x[0])}, 0);                // (6,4)
         const Tensor r = K::reshape(K::permute_dimensions(c, {1, 0}), {3, -1});  // (3,8)
         return K::square(K::batch_flatten(K::expand_dims(r, 1))) *
                K::sum(K::squeeze(K::expand_dims(x[0] * const_like(x[0], w), 1), 1));
       },
       g.uniform(s, -1, 1)},
      // exercises the transposed MatMul variants of the gradient graph
      {"dot_x_xT_squared", [](const V& x) { return K::square(K::dot(x[0], K::transpose(x[0]))); },
       g.normal(s)},
      {"dot_nd_squared",
       [m](const V& x) {
         // (3,2,2) . (2,4) -> (3,2,4)
         return K::square(
             K::dot(K::reshape(x[0], {3, 2, 2}), K::reshape(const_like(x[0], m), {2, 4})));
       },
       g.normal(s)},
      {"broadcast_div", [](const V& x) { return K::sum(x[0], 0) / (K::square(x[0]) + 1.0); },
       g.normal(s)},
      {"switch_rows",
       [](const V& x) {
         const Tensor cond = K::constant(f64({1, 0, 1}, {3}), {.dtype = "bool"});
         return K::switch_(cond, K::square(x[0]), K::exp(x[0]));
       },
       g.uniform(s, -1, 1)},
      // Slice's gradient (SlicePad) and SlicePad's (Slice) are both differentiated here.
      {"slice_square",
       [](const V& x) {
         return K::square(K::slice(x[0], {1, 0}, {2, 3})) * K::sum(x[0]);
       },
       g.normal(s)},
      // A loop: the gradient of the reverse scan (a storing twin recomputes the forward).
      {"map_fn_tanh",
       [](const V& x) { return K::map_fn([](const Tensor& e) { return K::tanh(e) * e; }, x[0]); },
       g.normal(s)},
  };
  return c;
}

class SecondOrder : public ::testing::TestWithParam<SecondOrderCase> {};

TEST_P(SecondOrder, GradientOfGradientMatchesFiniteDifferences) {
  const SecondOrderCase& k = GetParam();
  const Fn op = k.op;
  const auto grad_fn = [op](const V& xs) {
    const Tensor gx = K::gradients(K::sum(op(xs)), {xs[0]})[0];
    if (!gx.defined()) throw std::runtime_error("first-order gradient is null");
    return gx;
  };
  const auto r = ktape::gradcheck(grad_fn, {k.x});
  EXPECT_TRUE(r.ok) << r.report << " (max_error " << r.max_error << ")";
}

INSTANTIATE_TEST_SUITE_P(Ops, SecondOrder, ::testing::ValuesIn(second_order_cases()),
                         [](const ::testing::TestParamInfo<SecondOrderCase>& i) {
                           return i.param.name;
                         });

TEST(SecondOrderReference, TanhAndSoftmaxCrossentropy) {
  Gen g(99);
  const auto d2 = [](Fn op) {
    return [op](const V& xs) { return K::gradients(K::sum(op(xs)), {xs[0]})[0]; };
  };
  auto r = ktape::gradcheck(d2([](const V& x) { return K::tanh(x[0]); }), {g.normal({3, 4})},
                            {.backend = "reference"});
  EXPECT_TRUE(r.ok) << r.report;
  r = ktape::gradcheck(d2([](const V& x) {
                         return K::sparse_categorical_crossentropy(int_target({1, 0, 2}, {3}), x[0],
                                                                   {.from_logits = true});
                       }),
                       {g.normal({3, 4})}, {.backend = "reference"});
  EXPECT_TRUE(r.ok) << r.report;
}

// ---- gradient semantics (spec 3.2) -------------------------------------------------------------

::testing::AssertionResult Close(const NDArray& got, const std::vector<double>& want,
                                 double tol = 1e-12) {
  if (got.size() != static_cast<std::int64_t>(want.size()))
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double a = got.item(static_cast<std::int64_t>(i));
    if (!(std::abs(a - want[i]) <= tol * std::max(1.0, std::abs(want[i]))))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << a << " vs " << want[i] << "\n"
             << got.str();
  }
  return ::testing::AssertionSuccess();
}

TEST(GradientSemantics, UnconnectedVariableGetsNullTensor) {
  const Tensor x = K::variable(f64({1, 2, 3}, {3}), {.dtype = "float64"});
  const Tensor v = K::variable(f64({4, 5}, {2}), {.dtype = "float64"});
  const Tensor loss = K::sum(x * x);
  const auto g = K::gradients(loss, {x, v});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_TRUE(g[0].defined());
  EXPECT_FALSE(g[1].defined());
  EXPECT_FALSE(K::gradients(loss, {v})[0].defined());
  // d/dx sum(x^2) = 2x = [2,4,6]
  EXPECT_TRUE(Close(K::eval(g[0]), {2, 4, 6}));
  // An integer tensor gets no gradient; non-differentiable ops give none either.
  const Tensor xi = K::variable(f64({1, 2}, {2}), {.dtype = "int32"});
  EXPECT_FALSE(K::gradients(K::sum(K::cast(xi, "float64") * 2.0), {xi})[0].defined());
  EXPECT_FALSE(K::gradients(K::sum(K::round(x)), {x})[0].defined());
}

TEST(GradientSemantics, WithRespectToIntermediateTensor) {
  // loss = sum(x * exp(x)). d loss / d exp(x) = x; d loss / d (x*exp(x)) = 1;
  // d loss / d x = exp(x) * (1 + x).
  const std::vector<double> xv = {0.5, -1, 2, 0};
  const Tensor x = K::variable(f64(xv, {4}), {.dtype = "float64"});
  const Tensor e = K::exp(x);
  const Tensor p = x * e;
  const Tensor loss = K::sum(p);
  const auto g = K::gradients(loss, {e, p, x});
  ASSERT_TRUE(g[0].defined() && g[1].defined() && g[2].defined());
  EXPECT_TRUE(Close(K::eval(g[0]), xv));
  EXPECT_TRUE(Close(K::eval(g[1]), {1, 1, 1, 1}));
  std::vector<double> gx;
  for (double v : xv) gx.push_back(std::exp(v) * (1 + v));
  EXPECT_TRUE(Close(K::eval(g[2]), gx));
  // Keras's test_gradient: gradients(loss + stop_gradient(loss), [p]) is all ones and the
  // stopped loss alone contributes nothing.
  const Tensor zero_loss = K::stop_gradient(loss);
  EXPECT_TRUE(Close(K::eval(K::gradients(loss + zero_loss, {p})[0]), {1, 1, 1, 1}));
  EXPECT_FALSE(K::gradients(zero_loss, {p})[0].defined());
}

TEST(GradientSemantics, StopGradient) {
  const std::vector<double> xv = {0.3, -1.2, 2.0};
  const Tensor x = K::variable(f64(xv, {3}), {.dtype = "float64"});
  const Tensor loss = K::sum(K::square(x) * K::tanh(x));
  const NDArray g1 = K::eval(K::gradients(loss + K::stop_gradient(loss), {x})[0]);
  const NDArray g2 = K::eval(K::gradients(loss, {x})[0]);
  EXPECT_TRUE(Close(g1, g2.to_vector()));
  // d/dx x^2 tanh x = 2x tanh x + x^2 (1 - tanh^2 x)
  std::vector<double> want;
  for (double v : xv)
    want.push_back(2 * v * std::tanh(v) + v * v * (1 - std::tanh(v) * std::tanh(v)));
  EXPECT_TRUE(Close(g2, want));
  // The list form.
  const Tensor y = K::variable(f64({2, 3}, {2}), {.dtype = "float64"});
  const auto stopped = K::stop_gradient(std::vector<Tensor>{x, y});
  ASSERT_EQ(stopped.size(), 2u);
  const Tensor l2 = K::sum(stopped[0]) * K::sum(y) + K::sum(stopped[1] * y);
  const auto g = K::gradients(l2, {x, y});
  EXPECT_FALSE(g[0].defined());
  // d/dy [sum(x) sum(y) + sum(sg(y) * y)] = sum(x) + y = 1.1 + [2,3]
  EXPECT_TRUE(Close(K::eval(g[1]), {1.1 + 2, 1.1 + 3}));
}

TEST(GradientSemantics, CastsDuplicatesAndTheLossItself) {
  const Tensor x = K::variable(f64({1, -2, 3}, {3}), {.dtype = "float64"});
  // Through a float cast the gradient comes back in x's dtype.
  const Tensor gc = K::gradients(K::sum(K::cast(x, "float32") * 2.0), {x})[0];
  ASSERT_TRUE(gc.defined());
  EXPECT_EQ(K::dtype(gc), "float64");
  EXPECT_TRUE(Close(K::eval(gc), {2, 2, 2}));
  // ... but not through a cast to an integer type.
  EXPECT_FALSE(K::gradients(K::sum(K::cast(K::cast(x, "int32"), "float64")), {x})[0].defined());
  // The same tensor twice gets the same gradient twice.
  const Tensor loss = K::sum(K::square(x));
  const auto g2 = K::gradients(loss, {x, x});
  EXPECT_TRUE(Close(K::eval(g2[0]), {2, -4, 6}));
  EXPECT_TRUE(Close(K::eval(g2[1]), {2, -4, 6}));
  // d loss / d loss = 1
  EXPECT_TRUE(Close(K::eval(K::gradients(loss, {loss})[0]), {1}));
  // identity passes the gradient through
  EXPECT_TRUE(Close(K::eval(K::gradients(K::sum(K::identity(x) * x), {x})[0]), {2, -4, 6}));
}

TEST(GradientSemantics, BroadcastResolvedAtRunTime) {
  // Both operands are (None,); fed (3,) and (1,) the second one is broadcast, so its gradient
  // must be summed: d/dy sum(x * y) = sum(x) = 6, d/dx = y = [5, 5, 5].
  const Tensor x = K::placeholder({K::None}, {.dtype = "float64"});
  const Tensor y = K::placeholder({K::None}, {.dtype = "float64"});
  const auto g = K::gradients(K::sum(x * y), {x, y});
  const auto out = K::function({x, y}, {g[0], g[1]})({f64({1, 2, 3}, {3}), f64({5}, {1})});
  EXPECT_EQ(out[0].shape(), (Shape{3}));
  EXPECT_EQ(out[1].shape(), (Shape{1}));
  EXPECT_TRUE(Close(out[0], {5, 5, 5}));
  EXPECT_TRUE(Close(out[1], {6}));
}

TEST(GradientSemantics, NonScalarLossIsSummed) {
  const Tensor x = K::variable(f64({1, -2, 3, 0.5}, {2, 2}), {.dtype = "float64"});
  const NDArray g = K::eval(K::gradients(x * x, {x})[0]);
  EXPECT_EQ(g.shape(), (Shape{2, 2}));
  EXPECT_TRUE(Close(g, {2, -4, 6, 1}));
  EXPECT_TRUE(Close(g, K::eval(K::gradients(K::sum(x * x), {x})[0]).to_vector()));
  // broadcasting output: loss = x (2,2) + b (2,) summed -> d/db = [2, 2]
  const Tensor b = K::variable(f64({1, 1}, {2}), {.dtype = "float64"});
  EXPECT_TRUE(Close(K::eval(K::gradients(x + b, {b})[0]), {2, 2}));
}

TEST(GradientSemantics, KinksFollowTensorFlow) {
  // sqrt(x) = sqrt(clip(x, 0, inf)): at negative x the gradient is 0 (clip), not NaN.
  // d/dx sqrt(4) = 1 / (2 * 2) = 0.25
  const Tensor x = K::variable(f64({-1, 4}, {2}), {.dtype = "float64"});
  EXPECT_TRUE(Close(K::eval(K::gradients(K::sum(K::sqrt(x)), {x})[0]), {0, 0.25}));
  // maximum/minimum: ties send the gradient to x.
  const Tensor a = K::variable(f64({1, 2}, {2}), {.dtype = "float64"});
  const Tensor b = K::variable(f64({1, 3}, {2}), {.dtype = "float64"});
  const auto g = K::gradients(K::sum(K::maximum(a, b)), {a, b});
  EXPECT_TRUE(Close(K::eval(g[0]), {1, 0}));
  EXPECT_TRUE(Close(K::eval(g[1]), {0, 1}));
  // max reduction: ties share the gradient equally (TF): [3, 1, 3] -> [0.5, 0, 0.5]
  const Tensor c = K::variable(f64({3, 1, 3}, {3}), {.dtype = "float64"});
  EXPECT_TRUE(Close(K::eval(K::gradients(K::max(c), {c})[0]), {0.5, 0, 0.5}));
  // relu at exactly the threshold: 0 (TF)
  const Tensor r = K::variable(f64({0, 1, -1}, {3}), {.dtype = "float64"});
  EXPECT_TRUE(
      Close(K::eval(K::gradients(K::sum(K::relu(r, {.alpha = 0.5})), {r})[0]), {0, 1, 0.5}));
  // sign: zero gradient (defined); abs: sign(x)
  EXPECT_TRUE(Close(K::eval(K::gradients(K::sum(K::abs(r)), {r})[0]), {0, 1, -1}));
}

TEST(GradcheckHarness, DetectsAWrongGradient) {
  // x * stop_gradient(x): the analytic gradient is x, the true derivative 2x. A gradcheck that
  // passes this would pass anything.
  Gen g(5);
  const auto r = ktape::gradcheck([](const V& x) { return x[0] * K::stop_gradient(x[0]); },
                                  {g.uniform({3, 4}, 0.5, 2)});
  EXPECT_FALSE(r.ok);
  EXPECT_GT(r.max_error, 0.1);
  EXPECT_FALSE(r.report.empty());
  // ... and reports a null analytic gradient against a non-zero numeric one.
  const auto r2 = ktape::gradcheck([](const V& x) { return K::stop_gradient(x[0]) * 2.0; },
                                   {g.uniform({2}, 0.5, 2)});
  EXPECT_FALSE(r2.ok);
}

TEST(GradientSemantics, UnknownDimsUseRuntimeSizes) {
  // mean over a (None, 3) placeholder fed (4, 3): d mean / dx = 1/12 everywhere.
  const Tensor x = K::placeholder({K::None, 3}, {.dtype = "float64"});
  const Tensor g_all = K::gradients(K::mean(x), {x})[0];
  const Tensor g_ax0 = K::gradients(K::sum(K::mean(x, 0)), {x})[0];
  const Tensor g_ax1 = K::gradients(K::sum(K::mean(x, 1)), {x})[0];
  Gen g(8);
  const auto out = K::function({x}, {g_all, g_ax0, g_ax1})({g.normal({4, 3})});
  EXPECT_TRUE(Close(out[0], std::vector<double>(12, 1.0 / 12)));
  EXPECT_TRUE(Close(out[1], std::vector<double>(12, 1.0 / 4)));
  EXPECT_TRUE(Close(out[2], std::vector<double>(12, 1.0 / 3)));
  // The same Function with another batch size.
  const auto out2 = K::function({x}, {g_all})({g.normal({6, 3})});
  EXPECT_TRUE(Close(out2[0], std::vector<double>(18, 1.0 / 18)));
}

TEST(GradientSemantics, ThroughDynamicLearningPhase) {
  K::clear_session();
  const Tensor x = K::placeholder({3}, {.dtype = "float64"});
  const Tensor y = K::in_train_phase(x * 2.0, K::square(x));
  const Tensor gx = K::gradients(K::sum(y), {x})[0];
  ASSERT_TRUE(gx.defined());
  const K::Function f = K::function({x, K::learning_phase()}, {gx});
  const NDArray xv = f64({1, -2, 0.5}, {3});
  // train: d(2x)/dx = 2; test: d(x^2)/dx = 2x
  EXPECT_TRUE(Close(f({xv, NDArray::scalar(1, DType::bool_)})[0], {2, 2, 2}));
  EXPECT_TRUE(Close(f({xv, NDArray::scalar(0, DType::bool_)})[0], {2, -4, 1}));
  K::clear_session();
}

// Gradients built on placeholders with a None leading dim must equal those built on fully known
// shapes (exercises SizeRatio, SumToLike, ReshapeLike and shape inference at compile time).
class UnknownDims : public ::testing::TestWithParam<OpCase> {};

TEST_P(UnknownDims, GradientsMatchKnownShapes) {
  const OpCase& k = GetParam();
  auto run = [&](bool none) {
    V phs;
    for (const NDArray& in : k.inputs) {
      Shape s = in.shape();
      if (none && s.ndim() >= 2) s[0] = K::None;
      phs.push_back(K::placeholder(s, {.dtype = "float64"}));
    }
    const Tensor y = k.f(phs);
    const NDArray y0 = K::function(phs, {y}, {}, {.backend = "reference"})(k.inputs)[0];
    Gen g(23);
    const Tensor r = const_like(y, g.uniform(y0.shape(), 0.5, 1.5));
    std::vector<Tensor> outs{y};
    for (const Tensor& gr : K::gradients(K::sum(y * r), phs))
      outs.push_back(gr.defined() ? gr : K::constant(0.0, {.dtype = "float64"}));
    return K::function(phs, outs, {}, {.backend = "reference"})(k.inputs);
  };
  const auto known = run(false);
  const auto unknown = run(true);
  ASSERT_EQ(known.size(), unknown.size());
  for (std::size_t i = 0; i < known.size(); ++i) {
    SCOPED_TRACE(i == 0 ? std::string("forward") : "gradient " + std::to_string(i - 1));
    EXPECT_EQ(known[i].shape(), unknown[i].shape());
    EXPECT_TRUE(Close(unknown[i], known[i].to_vector(), 1e-12));
  }
}

std::vector<OpCase> unknown_dims_cases() {
  std::vector<OpCase> r;
  for (const auto& k : cases())
    if (k.gradcheck && k.none_ok) r.push_back(k);
  return r;
}

INSTANTIATE_TEST_SUITE_P(Ops, UnknownDims, ::testing::ValuesIn(unknown_dims_cases()), case_name);

// ---- dropout's gradient is its own mask ---------------------------------------------------------

TEST(DropoutGradient, EqualsMaskOfTheSameCall) {
  for (const std::string backend : {"cpu", "reference"}) {
    SCOPED_TRACE(backend);
    const Tensor x = K::placeholder({300}, {.dtype = "float64"});
    const Tensor y = K::dropout(x, 0.3, {.seed = 5});
    const Tensor g = K::gradients(K::sum(y), {x})[0];
    ASSERT_TRUE(g.defined());
    const K::Function f = K::function({x}, {y, g}, {}, {.backend = backend});
    const NDArray ones = NDArray::full({300}, 1.0, DType::float64);
    NDArray first;
    for (int call = 0; call < 2; ++call) {
      const auto out = f({ones});
      int kept = 0;
      for (std::int64_t i = 0; i < 300; ++i) {
        const double yi = out[0].item(i);
        EXPECT_TRUE(yi == 0.0 || std::abs(yi - 1.0 / 0.7) < 1e-12) << i << ": " << yi;
        EXPECT_EQ(out[1].item(i), yi) << "call " << call << " element " << i;
        kept += yi != 0.0;
      }
      EXPECT_GT(kept, 150);
      EXPECT_LT(kept, 270);
      if (call == 0)
        first = out[0];
      else
        EXPECT_NE(first.to_vector(), out[0].to_vector()) << "the mask did not change";
    }
  }
}

TEST(DropoutGradient, NoiseShapeMaskGradient) {
  const Tensor x = K::placeholder({4, 6}, {.dtype = "float64"});
  const Tensor y = K::dropout(x, 0.5, {.noise_shape = Shape{1, 6}, .seed = 11});
  const Tensor g = K::gradients(K::sum(y), {x})[0];
  const auto out = K::function({x}, {y, g})({NDArray::full({4, 6}, 1.0, DType::float64)});
  for (std::int64_t i = 0; i < 24; ++i) {
    EXPECT_EQ(out[1].item(i), out[0].item(i));
    EXPECT_EQ(out[0].item(i), out[0].item(i % 6));
  }
}

TEST(DropoutParity, SameSeedSameMaskOnBothBackends) {
  // Two dropout nodes with one seed draw the same first mask; (300,300) takes the cpu kernel's
  // parallel path.
  for (const DType dt : {DType::float32, DType::float64})
    for (const Shape& s : {Shape{40, 50}, Shape{300, 300}}) {
      const std::string dn(ktape::dtype_name(dt));
      SCOPED_TRACE(dn + " " + s.str());
      const Tensor x = K::placeholder(s, {.dtype = dn});
      const Tensor a = K::dropout(x, 0.4, {.seed = 31});
      const Tensor b = K::dropout(x, 0.4, {.seed = 31});
      Gen g(3);
      const NDArray in = g.normal(s).astype(dt);
      const NDArray ya = K::function({x}, {a}, {}, {.backend = "cpu"})({in})[0];
      const NDArray yb = K::function({x}, {b}, {}, {.backend = "reference"})({in})[0];
      EXPECT_EQ(ya.to_vector(), yb.to_vector());
    }
}

// ---- 3. cpu vs reference parity
// ------------------------------------------------------------------

double max_abs(const NDArray& a) {
  double m = 0;
  for (std::int64_t i = 0; i < a.size(); ++i)
    if (std::isfinite(a.item(i))) m = std::max(m, std::abs(a.item(i)));
  return m;
}

// |cpu - ref| <= rtol * max(|cpu|, |ref|) + floor_frac * rtol * max|ref|; NaN/inf must match.
::testing::AssertionResult Agree(const std::string& what, const NDArray& cpu, const NDArray& ref,
                                 double rtol, double floor_frac) {
  if (cpu.shape() != ref.shape() || cpu.dtype() != ref.dtype())
    return ::testing::AssertionFailure()
           << what << ": cpu " << cpu.shape().str() << " " << ktape::dtype_name(cpu.dtype())
           << " vs reference " << ref.shape().str() << " " << ktape::dtype_name(ref.dtype());
  const bool exact = !ktape::is_floating(ref.dtype());
  const double floor = floor_frac * rtol * max_abs(ref);
  for (std::int64_t i = 0; i < ref.size(); ++i) {
    const double a = cpu.item(i), b = ref.item(i);
    bool ok;
    if (exact)
      ok = a == b;
    else if (std::isnan(a) || std::isnan(b))
      ok = std::isnan(a) && std::isnan(b);
    else if (std::isinf(a) || std::isinf(b))
      ok = a == b;
    else
      ok = std::abs(a - b) <= rtol * std::max(std::abs(a), std::abs(b)) + floor;
    if (!ok)
      return ::testing::AssertionFailure()
             << what << ": element " << i << " cpu " << a << " vs reference " << b << " (diff "
             << std::abs(a - b) << ", rtol " << rtol << ")";
  }
  return ::testing::AssertionSuccess();
}

class Parity : public ::testing::TestWithParam<OpCase> {};

TEST_P(Parity, CpuMatchesReference) {
  const OpCase& k = GetParam();
  for (const DType dt : {DType::float32, DType::float64}) {
    const std::string dn(ktape::dtype_name(dt));
    SCOPED_TRACE(dn);
    const double rtol = dt == DType::float32 ? k.rtol32 : 1e-12;
    V phs;
    std::vector<NDArray> feed;
    for (const NDArray& in : k.inputs) {
      Shape s = in.shape();
      if (k.none_batch && s.ndim() > 0) s[0] = K::None;
      phs.push_back(K::placeholder(s, {.dtype = dn}));
      feed.push_back(in.astype(dt));
    }
    const Tensor y = k.f(phs);
    std::vector<Tensor> outs{y};
    std::vector<std::string> names{"forward"};
    if (ktape::is_floating(y.dtype())) {
      // Gradients of a fixed random projection of y (cotangent r).
      Shape ys = y.shape();
      if (!ys.is_fully_defined())
        ys = K::function(phs, {y}, {}, {.backend = "reference"})(feed)[0].shape();
      Gen g(17);
      const Tensor r = const_like(y, g.uniform(ys, 0.5, 1.5));
      const auto grads = K::gradients(K::sum(y * r), phs);
      for (std::size_t i = 0; i < grads.size(); ++i)
        if (grads[i].defined()) {
          outs.push_back(grads[i]);
          names.push_back("gradient of input " + std::to_string(i));
        }
    }
    const auto cpu = K::function(phs, outs, {}, {.backend = "cpu"})(feed);
    const auto ref = K::function(phs, outs, {}, {.backend = "reference"})(feed);
    ASSERT_EQ(cpu.size(), ref.size());
    for (std::size_t i = 0; i < cpu.size(); ++i)
      EXPECT_TRUE(Agree(names[i], cpu[i], ref[i], rtol, i == 0 ? 1e-2 : 1.0));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, Parity, ::testing::ValuesIn(parity_cases()), case_name);

// The table's sigmoid inputs (normal, std 2) rarely reach the tail; check it on a dense grid.
TEST(ParityAccuracy, Float32SigmoidTail) {
  std::vector<double> v;
  for (double x = -13; x <= -3; x += 0.05) v.push_back(x);
  const auto n = static_cast<std::int64_t>(v.size());
  const Tensor x = K::placeholder({n}, {.dtype = "float32"});
  const Tensor y = K::sigmoid(x);
  const Tensor gx = K::gradients(K::sum(y), {x})[0];
  const NDArray in = NDArray::from_values(v, {n}, DType::float32);
  const auto cpu = K::function({x}, {y, gx}, {}, {.backend = "cpu"})({in});
  const auto ref = K::function({x}, {y, gx}, {}, {.backend = "reference"})({in});
  // Relative error of each backend against the double-precision formula.
  double worst_cpu = 0, worst_ref = 0, at = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double exact = 1.0 / (1.0 + std::exp(-in.item(i)));
    const double rc = std::abs(cpu[0].item(i) - exact) / exact;
    const double rr = std::abs(ref[0].item(i) - exact) / exact;
    if (rc > worst_cpu) {
      worst_cpu = rc;
      at = in.item(i);
    }
    worst_ref = std::max(worst_ref, rr);
  }
  EXPECT_LT(worst_ref, 1e-6);
  const auto fwd = Agree("sigmoid", cpu[0], ref[0], 1e-5, 1e-2);
  const auto bwd = Agree("sigmoid gradient", cpu[1], ref[1], 1e-5, 1e-2);
  EXPECT_LT(worst_cpu, 1e-5) << "at x = " << at;
  EXPECT_TRUE(fwd);
  EXPECT_TRUE(bwd);
}

}  // namespace
