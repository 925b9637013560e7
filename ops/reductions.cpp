#include "ops/reductions.hpp"

#include <algorithm>
#include <limits>

#include "ops/control.hpp"
#include "ops/core.hpp"
#include "ops/elementwise.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/op_util.hpp"

namespace ktape::backend {

namespace {

Tensor reduce(Op op, const Tensor& x, const ReduceOptions& o) {
  const std::string fn = ops::fn_name(op);
  if (x.dtype() == DType::bool_) throw TypeError(fn + ": cast a bool tensor before reducing it");
  if (op == Op::Mean) ops::check_float(fn.c_str(), "x", x);
  std::vector<int> axes;
  if (o.axis) {
    for (int a : *o.axis) axes.push_back(normalize_axis(a, x.ndim(), fn.c_str()));
    std::sort(axes.begin(), axes.end());
    if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
      throw ValueError(fn + ": duplicate axis in the axis list");
    if (axes.empty()) return x;
  } else {
    for (int a = 0; a < x.ndim(); ++a) axes.push_back(a);
  }
  return make_node(op, {x}, attrs::Reduce::make(o.keepdims, axes), x.dtype());
}

Shape reduce_rule(const Node& n, const std::vector<Shape>& in) {
  const auto a = attrs::Reduce::of(n.attrs);
  const bool keep = a.keepdims;
  std::vector<bool> red(static_cast<std::size_t>(in[0].ndim()), false);
  for (auto axis : a.axes) red[static_cast<std::size_t>(axis)] = true;
  std::vector<std::int64_t> out;
  for (int d = 0; d < in[0].ndim(); ++d) {
    if (!red[static_cast<std::size_t>(d)])
      out.push_back(in[0][d]);
    else if (keep)
      out.push_back(1);
  }
  return Shape(std::move(out));
}

// K::argmax / K::argmin (ops::fn_name would give the op's name, arg_max).
std::string arg_name(Op op) { return op == Op::ArgMax ? "K::argmax" : "K::argmin"; }

Tensor arg(Op op, const Tensor& x, int axis) {
  const std::string fn = arg_name(op);
  if (x.dtype() == DType::bool_) throw TypeError(fn + ": cast a bool tensor first");
  return make_node(op, {x}, attrs::Axis::make(normalize_axis(axis, x.ndim(), fn.c_str())),
                   DType::int64);
}

// An empty axis has no extreme: a ValueError (numpy's and TF's too), when the node is built or
// when a Function compiles for a fed shape.
Shape arg_rule(const Node& n, const std::vector<Shape>& in) {
  const int axis = attrs::Axis::of(n.attrs).axis;
  if (in[0][axis] == 0)
    throw ValueError(arg_name(n.op) + ": axis " + std::to_string(axis) + " of a tensor of shape " +
                     in[0].str() + " is empty: it has no extreme");
  std::vector<std::int64_t> out = in[0].dims();
  out.erase(out.begin() + axis);
  return Shape(std::move(out));
}

// The reduced gradient with the reduced axes put back as size-1 dims.
Tensor keep_dims(const Node& n, const Tensor& g) {
  const auto a = attrs::Reduce::of(n.attrs);
  if (a.keepdims || a.axes.empty()) return g;
  return make_node(Op::ExpandAxes, {g}, attrs::IntList::make({a.axes.begin(), a.axes.end()}),
                   g.dtype());
}

Tensor broadcast_to_like(const Tensor& g, const Tensor& like) {
  return make_node(Op::BroadcastToLike, {g, like}, {}, g.dtype());
}

using G = std::vector<Tensor>;
G sum_grad(const Node& n, const Tensor&, const Tensor& g) {
  return {broadcast_to_like(keep_dims(n, g), n.inputs[0])};
}
G mean_grad(const Node& n, const Tensor& y, const Tensor& g) {
  const Tensor& x = n.inputs[0];
  const std::int64_t nx = x.shape().num_elements(), ny = y.shape().num_elements();
  Tensor scale = (nx > 0 && ny >= 0)
                     ? ops::scalar(static_cast<double>(ny) / static_cast<double>(nx), g.dtype())
                     : make_node(Op::SizeRatio, {y, x}, {}, g.dtype());
  return {broadcast_to_like(keep_dims(n, g) * scale, x)};
}
// Max/min: the gradient is shared equally between tied extrema (TF).
G extremum_grad(const Node& n, const Tensor& y, const Tensor& g) {
  const Tensor& x = n.inputs[0];
  const Tensor mask = cast(equal(x, keep_dims(n, y)), dtype(g));
  ReduceOptions ro;
  const auto axes = attrs::Reduce::of(n.attrs).axes;
  ro.axis = std::vector<int>(axes.begin(), axes.end());
  ro.keepdims = true;
  const Tensor count = sum(mask, ro);
  return {mask * (keep_dims(n, g) / count)};
}

// d prod / d x_i is the product of the group's other elements. With p the product of the
// group's non-zero elements and z its count of zeros: p / x_i when z = 0; p at the zero and 0
// elsewhere when z = 1; 0 when z >= 2. No division by a zero.
G prod_grad(const Node& n, const Tensor&, const Tensor& g) {
  const Tensor& x = n.inputs[0];
  const auto axes = attrs::Reduce::of(n.attrs).axes;
  const ReduceOptions keep{std::vector<int>(axes.begin(), axes.end()), true};
  const std::string dt = dtype(x);
  const Tensor zero = cast(equal(x, 0.0), dt);
  const Tensor nonzero_x = x + zero;  // the zeros become ones
  const Tensor p = prod(nonzero_x, keep);
  const Tensor zeros = sum(zero, keep);
  // Selected, not masked by products: p may overflow to inf where the answer is 0.
  const Tensor z = zeros_like(x);
  const Tensor at_zero = switch_(equal(zeros, 1.0), switch_(equal(x, 0.0), p + z, z), z);
  const Tensor d = switch_(equal(zeros, 0.0), p / nonzero_x, at_zero);
  return {broadcast_to_like(keep_dims(n, g), x) * d};
}
G cumsum_grad(const Node& n, const Tensor&, const Tensor& g) {
  const auto a = attrs::Cumulative::of(n.attrs);
  return {make_node(Op::Cumsum, {g}, attrs::Cumulative::make(a.axis, !a.reverse), g.dtype())};
}
G cumprod_grad(const Node& n, const Tensor& y, const Tensor& g) {
  const auto a = attrs::Cumulative::of(n.attrs);
  const Tensor r =
      make_node(Op::Cumsum, {y * g}, attrs::Cumulative::make(a.axis, !a.reverse), g.dtype());
  return {r / n.inputs[0]};
}

Tensor cumulative(Op op, const Tensor& x, int axis) {
  const std::string fn = ops::fn_name(op);
  if (x.dtype() == DType::bool_) throw TypeError(fn + ": cast a bool tensor first");
  if (x.ndim() == 0) throw ValueError(fn + ": x is a scalar; it needs an axis to run along");
  return make_node(op, {x},
                   attrs::Cumulative::make(normalize_axis(axis, x.ndim(), fn.c_str()), false),
                   x.dtype());
}

ReduceOptions one_axis(int axis, bool keepdims) { return {std::vector<int>{axis}, keepdims}; }

G sum_to_like_grad(const Node& n, const Tensor&, const Tensor& gg) {
  return {broadcast_to_like(gg, n.inputs[0]), Tensor()};
}
G broadcast_to_like_grad(const Node& n, const Tensor&, const Tensor& gg) {
  return {make_node(Op::SumToLike, {gg, n.inputs[0]}, {}, gg.dtype()), Tensor()};
}
Shape like_rule(const Node& n, const std::vector<Shape>& in) {
  // Validate that in[0] and in[1] broadcast (SumToLike: in[1] broadcast to in[0]).
  (void)ops::broadcast_shapes(ops::fn_name(n.op).c_str(), in[0], in[1]);
  return in[1];
}

}  // namespace

Tensor sum(const Tensor& x, const ReduceOptions& o) { return reduce(Op::Sum, x, o); }
Tensor sum(const Tensor& x, int axis, bool keepdims) {
  return sum(x, {std::vector<int>{axis}, keepdims});
}
Tensor mean(const Tensor& x, const ReduceOptions& o) {
  // Keras on TF casts a bool tensor to floatx first (metrics average K.equal results).
  if (x.dtype() == DType::bool_) return reduce(Op::Mean, cast(x, floatx()), o);
  return reduce(Op::Mean, x, o);
}
Tensor mean(const Tensor& x, int axis, bool keepdims) {
  return mean(x, {std::vector<int>{axis}, keepdims});
}
Tensor max(const Tensor& x, const ReduceOptions& o) { return reduce(Op::Max, x, o); }
Tensor max(const Tensor& x, int axis, bool keepdims) {
  return max(x, {std::vector<int>{axis}, keepdims});
}
Tensor min(const Tensor& x, const ReduceOptions& o) { return reduce(Op::Min, x, o); }
Tensor min(const Tensor& x, int axis, bool keepdims) {
  return min(x, {std::vector<int>{axis}, keepdims});
}
Tensor prod(const Tensor& x, const ReduceOptions& o) { return reduce(Op::Prod, x, o); }
Tensor prod(const Tensor& x, int axis, bool keepdims) { return prod(x, one_axis(axis, keepdims)); }
Tensor var(const Tensor& x, const ReduceOptions& o) {
  const Tensor xf = x.dtype() == DType::bool_ ? cast(x, floatx()) : x;
  ops::check_float("K::var", "x", xf);
  const Tensor m = mean(xf, {o.axis, true});
  return mean(square(xf - m), o);
}
Tensor var(const Tensor& x, int axis, bool keepdims) { return var(x, one_axis(axis, keepdims)); }
Tensor std(const Tensor& x, const ReduceOptions& o) { return sqrt(var(x, o)); }
Tensor std(const Tensor& x, int axis, bool keepdims) { return std(x, one_axis(axis, keepdims)); }
Tensor logsumexp(const Tensor& x, const ReduceOptions& o) {
  ops::check_float("K::logsumexp", "x", x);
  const Tensor raw = max(x, {o.axis, true});
  const Tensor finite = less(abs(raw), std::numeric_limits<double>::infinity());
  const Tensor m = stop_gradient(switch_(finite, raw, zeros_like(raw)));
  return log(sum(exp(x - m), o)) + (o.keepdims ? m : max(m, o));
}
Tensor logsumexp(const Tensor& x, int axis, bool keepdims) {
  return logsumexp(x, one_axis(axis, keepdims));
}
// Keras casts to bool and reduces; here the 0/1 flags are reduced as uint8.
Tensor any(const Tensor& x, const ReduceOptions& o) {
  const Tensor flags = cast(x.dtype() == DType::bool_ ? x : not_equal(x, 0.0), "uint8");
  return not_equal(max(flags, o), 0.0);
}
Tensor any(const Tensor& x, int axis, bool keepdims) { return any(x, one_axis(axis, keepdims)); }
Tensor all(const Tensor& x, const ReduceOptions& o) {
  const Tensor flags = cast(x.dtype() == DType::bool_ ? x : not_equal(x, 0.0), "uint8");
  return not_equal(min(flags, o), 0.0);
}
Tensor all(const Tensor& x, int axis, bool keepdims) { return all(x, one_axis(axis, keepdims)); }
Tensor cumsum(const Tensor& x, int axis) { return cumulative(Op::Cumsum, x, axis); }
Tensor cumprod(const Tensor& x, int axis) { return cumulative(Op::Cumprod, x, axis); }
Tensor argmax(const Tensor& x, int axis) { return arg(Op::ArgMax, x, axis); }
Tensor argmin(const Tensor& x, int axis) { return arg(Op::ArgMin, x, axis); }

}  // namespace ktape::backend

namespace ktape::ops {

void register_reduction_ops() {
  using namespace ktape::backend;
  define_op(Op::Sum, {.shape = &reduce_rule, .grad = &sum_grad});
  define_op(Op::Mean, {.shape = &reduce_rule, .grad = &mean_grad});
  define_op(Op::Max, {.shape = &reduce_rule, .grad = &extremum_grad});
  define_op(Op::Min, {.shape = &reduce_rule, .grad = &extremum_grad});
  define_op(Op::Prod, {.shape = &reduce_rule, .grad = &prod_grad});
  define_op(Op::Cumsum, {.shape = &same_as_input0, .grad = &cumsum_grad});
  define_op(Op::Cumprod, {.shape = &same_as_input0, .grad = &cumprod_grad});
  define_op(Op::ArgMax, {.shape = &arg_rule});
  define_op(Op::ArgMin, {.shape = &arg_rule});
  define_op(Op::SumToLike, {.shape = &like_rule,
                            .grad = &sum_to_like_grad,
                            .alias_if_same_shape = true,
                            // No stack_sum: a loop's bias gradient is summed step by step, while
                            // each step's gradient is in cache. Stacked and summed after the loop
                            // it was read back from memory (an LSTM at batch 128: 0.15 against
                            // 0.056 ms a call), and a column sum gains nothing from one long run.
                            .shape_only = &input1_shape_only});
  define_op(Op::BroadcastToLike, {.shape = &like_rule,
                                  .grad = &broadcast_to_like_grad,
                                  .alias_if_same_shape = true,
                                  .shape_only = &input1_shape_only});
}

}  // namespace ktape::ops
