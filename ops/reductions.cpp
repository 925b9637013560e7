#include "ops/reductions.hpp"

#include <algorithm>

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

Tensor arg(Op op, const Tensor& x, int axis) {
  const std::string fn = ops::fn_name(op);
  if (x.dtype() == DType::bool_) throw TypeError(fn + ": cast a bool tensor first");
  return make_node(op, {x}, attrs::Axis::make(normalize_axis(axis, x.ndim(), fn.c_str())),
                   DType::int64);
}

Shape arg_rule(const Node& n, const std::vector<Shape>& in) {
  std::vector<std::int64_t> out = in[0].dims();
  out.erase(out.begin() + attrs::Axis::of(n.attrs).axis);
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

// SumToLike sums every axis its like-input lacks: a new leading (step) axis on g is summed too.
unsigned sum_to_like_stack_sum(const Node&) { return 0b01u; }

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
  define_op(Op::ArgMax, {.shape = &arg_rule});
  define_op(Op::ArgMin, {.shape = &arg_rule});
  define_op(Op::SumToLike, {.shape = &like_rule,
                            .grad = &sum_to_like_grad,
                            .alias_if_same_shape = true,
                            .stack_sum = &sum_to_like_stack_sum});
  define_op(Op::BroadcastToLike,
            {.shape = &like_rule, .grad = &broadcast_to_like_grad, .alias_if_same_shape = true});
}

}  // namespace ktape::ops
