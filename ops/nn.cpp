#include "ops/nn.hpp"

#include <cmath>
#include <limits>

#include "ops/core.hpp"
#include "ops/elementwise.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/functors.hpp"
#include "ops/layout.hpp"
#include "ops/op_util.hpp"
#include "ops/pool.hpp"
#include "ops/reductions.hpp"

namespace ktape::backend {

namespace {

using G = std::vector<Tensor>;

Tensor last_axis_expand(const Tensor& g) {
  return make_node(Op::ExpandAxes, {g}, attrs::IntList::make({g.ndim()}), g.dtype());
}

Tensor softmax_like(Op op, const Tensor& x, int axis, const char* fn) {
  ops::check_float(fn, "x", x);
  if (x.ndim() == 0) throw ValueError(std::string(fn) + ": cannot apply softmax to a scalar");
  return make_node(op, {x}, attrs::Axis::make(normalize_axis(axis, x.ndim(), fn)), x.dtype());
}

Tensor log_softmax(const Tensor& x, int axis) {
  return softmax_like(Op::LogSoftmax, x, axis, "K::log_softmax");
}

// A plain relu's gradient reads its output, as TF's does (y > 0 exactly where x > 0, NaN
// included): a pass computing bias + relu then need not write the pre-activation for it.
// Other options need x.
// Where y feeds a max pool and nothing else, the pool's gradient and this one are one pass
// (ops::max_pool_relu_grad): no relu-sized array written and read back between them.
G relu_grad(const Node& n, const Tensor& y, const Tensor& g) {
  const auto r = attrs::Relu::of(n.attrs);
  const bool plain = kernels::is_plain_relu(r.alpha, r.max_value, r.threshold);
  if (plain)
    if (Tensor fused = ops::max_pool_relu_grad(y, g); fused.defined()) return {fused};
  Attrs at = n.attrs;
  return {make_node(Op::ReluGrad, {plain ? y : n.inputs[0], g}, std::move(at), g.dtype())};
}
G relu_grad_grad(const Node& n, const Tensor&, const Tensor& gg) {
  Attrs at = n.attrs;
  return {Tensor(), make_node(Op::ReluGrad, {n.inputs[0], gg}, std::move(at), gg.dtype())};
}
// Sigmoid's and tanh's gradients read their output, as TF's do, and are one op each, TF's
// SigmoidGrad(y, g) = g * (y * (1 - y)) and TanhGrad(y, g) = g * (1 - y * y): in an LSTM's reverse
// step that is five instructions of the fused pass instead of fifteen.
G sigmoid_grad(const Node&, const Tensor& y, const Tensor& g) {
  return {make_node(Op::SigmoidGrad, {y, g}, {}, g.dtype())};
}
// d/dy of g y (1 - y) is g (1 - 2y); d/dg is y (1 - y), SigmoidGrad itself.
G sigmoid_grad_grad(const Node& n, const Tensor&, const Tensor& h) {
  const Tensor& y = n.inputs[0];
  const Tensor& g = n.inputs[1];
  return {(h * g) * (1.0 - 2.0 * y), make_node(Op::SigmoidGrad, {y, h}, {}, h.dtype())};
}
G softplus_grad(const Node& n, const Tensor&, const Tensor& g) {
  return {g * sigmoid(n.inputs[0])};
}
G tanh_grad(const Node&, const Tensor& y, const Tensor& g) {
  return {make_node(Op::TanhGrad, {y, g}, {}, g.dtype())};
}
// d/dy of g (1 - y^2) is -2 g y; d/dg is 1 - y^2, TanhGrad itself.
G tanh_grad_grad(const Node& n, const Tensor&, const Tensor& h) {
  const Tensor& y = n.inputs[0];
  const Tensor& g = n.inputs[1];
  return {(h * g) * (-2.0 * y), make_node(Op::TanhGrad, {y, h}, {}, h.dtype())};
}
G softmax_grad(const Node& n, const Tensor& y, const Tensor& g) {
  const int axis = attrs::Axis::of(n.attrs).axis;
  return {y * (g - sum(g * y, axis, true))};
}
G log_softmax_grad(const Node& n, const Tensor& y, const Tensor& g) {
  const int axis = attrs::Axis::of(n.attrs).axis;
  return {g - exp(y) * sum(g, axis, true)};
}
G sparse_ce_grad(const Node& n, const Tensor&, const Tensor& g) {
  const Tensor& labels = n.inputs[0];
  const Tensor& logits = n.inputs[1];
  const int classes = static_cast<int>(logits.shape()[logits.ndim() - 1]);
  const Tensor p = softmax(logits, -1);
  const Tensor hot = make_node(Op::OneHot, {labels}, attrs::OneHot::make(classes), logits.dtype());
  return {Tensor(), (p - hot) * last_axis_expand(g)};
}

Shape sparse_ce_rule(const Node&, const std::vector<Shape>& in) {
  const Shape& t = in[0];
  const Shape& o = in[1];
  bool ok = t.ndim() == o.ndim() - 1;
  for (int i = 0; ok && i < t.ndim(); ++i) ok = t[i] < 0 || o[i] < 0 || t[i] == o[i];
  if (!ok)
    throw ValueError("K::sparse_categorical_crossentropy: target of shape " + t.str() +
                     " does not match output of shape " + o.str() +
                     " (expected output's shape without its class axis)");
  std::vector<std::int64_t> s = t.dims();
  for (int i = 0; i < t.ndim(); ++i)
    if (s[static_cast<std::size_t>(i)] < 0) s[static_cast<std::size_t>(i)] = o[i];
  return Shape(std::move(s));
}
Shape one_hot_rule(const Node& n, const std::vector<Shape>& in) {
  std::vector<std::int64_t> s = in[0].dims();
  s.push_back(attrs::OneHot::of(n.attrs).depth);
  return Shape(std::move(s));
}
Shape dropout_mask_rule(const Node& n, const std::vector<Shape>& in) {
  const auto a = attrs::Dropout::of(n.attrs);
  if (!a.has_noise_shape) return in[0];
  const Shape& x = in[0];
  const Shape given(std::vector<std::int64_t>(a.noise_shape.begin(), a.noise_shape.end()));
  if (given.ndim() != x.ndim())
    throw ValueError("K::dropout: noise_shape has rank " + std::to_string(given.ndim()) +
                     " but x has shape " + x.str());
  std::vector<std::int64_t> s = given.dims();
  for (int i = 0; i < x.ndim(); ++i) {
    auto& d = s[static_cast<std::size_t>(i)];
    if (d < 0) d = x[i];
    if (d != 1 && d >= 0 && x[i] >= 0 && d != x[i])
      throw ValueError("K::dropout: noise_shape " + given.str() +
                       " is not broadcastable to x's shape " + x.str());
  }
  return Shape(std::move(s));
}

}  // namespace

Tensor relu(const Tensor& x, const ReluOptions& o) {
  ops::check_float("K::relu", "x", x);
  if (o.max_value && std::isnan(*o.max_value)) throw ValueError("K::relu: max_value is NaN");
  return make_node(
      Op::Relu, {x},
      attrs::Relu::make(o.alpha,
                        o.max_value ? *o.max_value : std::numeric_limits<double>::infinity(),
                        o.threshold),
      x.dtype());
}
Tensor sigmoid(const Tensor& x) {
  ops::check_float("K::sigmoid", "x", x);
  return make_node(Op::Sigmoid, {x}, {}, x.dtype());
}
Tensor tanh(const Tensor& x) {
  ops::check_float("K::tanh", "x", x);
  return make_node(Op::Tanh, {x}, {}, x.dtype());
}
Tensor softmax(const Tensor& x, int axis) {
  return softmax_like(Op::Softmax, x, axis, "K::softmax");
}

Tensor elu(const Tensor& x, double alpha) {
  ops::check_float("K::elu", "x", x);
  // relu(x) + alpha (exp(min(x, 0)) - 1): one fused pass, and exp never overflows.
  return relu(x) + alpha * (exp(minimum(x, 0.0)) - 1.0);
}
Tensor softplus(const Tensor& x) {
  ops::check_float("K::softplus", "x", x);
  return make_node(Op::Softplus, {x}, {}, x.dtype());
}
Tensor softsign(const Tensor& x) {
  ops::check_float("K::softsign", "x", x);
  return x / (abs(x) + 1.0);
}
Tensor hard_sigmoid(const Tensor& x) {
  ops::check_float("K::hard_sigmoid", "x", x);
  return clip(0.2 * x + 0.5, 0.0, 1.0);
}
Tensor l2_normalize(const Tensor& x, std::optional<std::vector<int>> axis) {
  ops::check_float("K::l2_normalize", "x", x);
  const Tensor ss = sum(square(x), {std::move(axis), true});
  return x * (1.0 / sqrt(maximum(ss, 1e-12)));
}
Tensor l2_normalize(const Tensor& x, int axis) { return l2_normalize(x, std::vector<int>{axis}); }

Tensor binary_crossentropy(const Tensor& target, const Tensor& output, bool from_logits) {
  const char* fn = "K::binary_crossentropy";
  ops::check_float(fn, "output", output);
  ops::check_same_dtype(fn, target, output);
  const Shape& t = target.shape();
  const Shape& o = output.shape();
  bool same = t.ndim() == o.ndim();
  for (int i = 0; same && i < t.ndim(); ++i) same = t[i] < 0 || o[i] < 0 || t[i] == o[i];
  if (!same)
    throw ValueError(std::string(fn) + ": target and output must have the same shape, got " +
                     t.str() + " and " + o.str());
  Tensor logits = output;
  if (!from_logits) {
    const double eps = epsilon();
    const Tensor p = clip(output, eps, 1.0 - eps);
    logits = log(p / (1.0 - p));
  }
  return relu(logits) - logits * target + softplus(-abs(logits));
}

Tensor dropout(const Tensor& x, double level, const DropoutOptions& o) {
  ops::check_float("K::dropout", "x", x);
  if (!(level >= 0.0 && level < 1.0))
    throw ValueError("K::dropout: Dropout level must be in interval [0, 1[, got " +
                     std::to_string(level));
  if (level == 0.0) return x;
  Tensor mask = make_node(
      Op::DropoutMask, {x},
      attrs::Dropout::make(level, o.noise_shape ? &o.noise_shape->dims() : nullptr), x.dtype());
  mask.node().seed = o.seed ? *o.seed : draw_seed();
  return x * mask;
}

Tensor categorical_crossentropy(const Tensor& target, const Tensor& output,
                                const CrossentropyOptions& o) {
  const char* fn = "K::categorical_crossentropy";
  ops::check_float(fn, "output", output);
  ops::check_same_dtype(fn, target, output);
  if (output.ndim() == 0) throw ValueError(std::string(fn) + ": output must have a class axis");
  if (o.axis != -1 && (o.axis < 0 || o.axis >= output.ndim()))
    throw ValueError(std::string(fn) + ": Unexpected channels axis " + std::to_string(o.axis) +
                     ". Expected to use -1 or a dim in [0, " + std::to_string(output.ndim()) +
                     ") for output of shape " + output.shape().str());
  (void)ops::broadcast_shapes(fn, target.shape(), output.shape());
  const int axis = o.axis;
  if (o.from_logits) return -sum(target * log_softmax(output, axis), axis);
  const Tensor p = output / sum(output, axis, true);
  const double eps = epsilon();
  return -sum(target * log(clip(p, eps, 1.0 - eps)), axis);
}

Tensor sparse_categorical_crossentropy(const Tensor& target, const Tensor& output,
                                       const CrossentropyOptions& o) {
  const char* fn = "K::sparse_categorical_crossentropy";
  ops::check_float(fn, "output", output);
  if (output.ndim() == 0) throw ValueError(std::string(fn) + ": output must have a class axis");
  if (o.axis != -1 && (o.axis < 0 || o.axis >= output.ndim()))
    throw ValueError(std::string(fn) + ": Unexpected channels axis " + std::to_string(o.axis) +
                     ". Expected to use -1 or a dim in [0, " + std::to_string(output.ndim()) +
                     ") for output of shape " + output.shape().str());
  if (target.dtype() == DType::bool_) throw TypeError(std::string(fn) + ": target must be numeric");
  Tensor out = output;
  const int axis = normalize_axis(o.axis, output.ndim(), fn);
  if (axis != output.ndim() - 1) {
    std::vector<int> perm;
    for (int i = 0; i < output.ndim(); ++i)
      if (i != axis) perm.push_back(i);
    perm.push_back(axis);
    out = permute_dimensions(output, perm);
  }
  if (out.shape()[out.ndim() - 1] < 0)
    throw ValueError(std::string(fn) + ": the class axis of output " + output.shape().str() +
                     " must be known");
  Tensor t = target;
  if (t.ndim() == out.ndim() && t.ndim() > 0 &&
      (t.shape()[t.ndim() - 1] == 1 || t.shape()[t.ndim() - 1] == None))
    t = squeeze(t, -1);
  Tensor logits = out;
  if (!o.from_logits) {
    const double eps = epsilon();
    logits = log(clip(out, eps, 1.0 - eps));
  }
  return make_node(Op::SparseSoftmaxCE, {t, logits}, {}, out.dtype());
}

Tensor one_hot(const Tensor& indices, int num_classes, const std::string& dt) {
  if (num_classes < 0) throw ValueError("K::one_hot: num_classes must be >= 0");
  if (is_floating(indices.dtype()) || indices.dtype() == DType::bool_)
    throw TypeError("K::one_hot: indices must be an integer tensor, got " + dtype(indices));
  return make_node(Op::OneHot, {indices}, attrs::OneHot::make(num_classes),
                   dt.empty() ? DType::float32 : dtype_from_name(dt, "K::one_hot"));
}

}  // namespace ktape::backend

namespace ktape::ops {

void register_nn_ops() {
  using namespace ktape::backend;
  define_op(Op::Relu, {.shape = &same_as_input0, .grad = &relu_grad, .elementwise = true});
  define_op(Op::ReluGrad, {.shape = &broadcast_rule, .grad = &relu_grad_grad, .elementwise = true});
  define_op(Op::Sigmoid, {.shape = &same_as_input0,
                          .grad = &sigmoid_grad,
                          .elementwise = true,
                          .store_in_loops = true});
  define_op(
      Op::Tanh,
      {.shape = &same_as_input0, .grad = &tanh_grad, .elementwise = true, .store_in_loops = true});
  define_op(Op::SigmoidGrad,
            {.shape = &broadcast_rule, .grad = &sigmoid_grad_grad, .elementwise = true});
  define_op(Op::TanhGrad, {.shape = &broadcast_rule, .grad = &tanh_grad_grad, .elementwise = true});
  define_op(Op::Softplus, {.shape = &same_as_input0, .grad = &softplus_grad, .elementwise = true});
  define_op(Op::Softmax, {.shape = &same_as_input0, .grad = &softmax_grad});
  define_op(Op::LogSoftmax, {.shape = &same_as_input0, .grad = &log_softmax_grad});
  define_op(Op::SparseSoftmaxCE, {.shape = &sparse_ce_rule,
                                  .grad = &sparse_ce_grad,
                                  .dispatch_input = 1,
                                  .may_throw = true});  // a target out of range
  define_op(Op::OneHot, {.shape = &one_hot_rule, .dispatch_input = -1});
  define_op(Op::DropoutMask,
            {.shape = &dropout_mask_rule, .pure = false, .random = true, .dispatch_input = -1});
}

}  // namespace ktape::ops
