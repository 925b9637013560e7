#include "ops/pool.hpp"

#include <limits>

#include "ops/kernels/attrs.hpp"
#include "ops/op_util.hpp"
#include "ops/window_shape.hpp"

namespace ktape::backend {

namespace {

using namespace ops::window_shape;
using G = std::vector<Tensor>;

// Pool(x) -> y. MaxPoolGrad(x, dy) -> dx. MaxPoolReluGrad(y, dy) -> MaxPoolGrad(y, dy) * (y > 0)
// (y a relu's output; see ops::max_pool_relu_grad). MaxPoolGradGrad(x, h) -> (y's shape): h at each
// window's argmax. AvgPoolGrad(dy, like) -> dx (like: x, for its shape only).
Shape pool_rule(const Node& n, const std::vector<Shape>& in) {
  const W a = W::of(n.attrs);
  check_input(a, in[0], "x");
  return layout_shape(a, in[0][0], forward_extents(a, in[0]), channels(a, in[0]));
}
Shape like_input_rule(const Node& n, const std::vector<Shape>& in) {
  return in[n.op == Op::AvgPoolGrad ? 1 : 0];
}

Tensor window_node(Op op, std::vector<Tensor> in, const Attrs& at, DType dt) {
  return make_node(op, std::move(in), at, dt);
}

G pool_grad(const Node& n, const Tensor&, const Tensor& g) {
  const Tensor& x = n.inputs[0];
  if (W::of(n.attrs).mode == W::kMax)
    return {window_node(Op::MaxPoolGrad, {x, g}, n.attrs, g.dtype())};
  return {window_node(Op::AvgPoolGrad, {g, x}, n.attrs, g.dtype())};
}
// MaxPoolGrad is linear in dy and piecewise constant in x (zero gradient, as TF).
G max_pool_grad_grad(const Node& n, const Tensor&, const Tensor& h) {
  return {Tensor(), window_node(Op::MaxPoolGradGrad, {n.inputs[0], h}, n.attrs, h.dtype())};
}
G max_pool_grad_grad_grad(const Node& n, const Tensor&, const Tensor& h) {
  return {Tensor(), window_node(Op::MaxPoolGrad, {n.inputs[0], h}, n.attrs, h.dtype())};
}
// MaxPoolReluGrad is linear in dy, its gradient that of ReluGrad(y, MaxPoolGrad(y, dy)):
// MaxPoolGradGrad(y, ReluGrad(y, h)); piecewise constant in y.
G max_pool_relu_grad_grad(const Node& n, const Tensor&, const Tensor& h) {
  const Tensor& y = n.inputs[0];
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor masked = make_node(Op::ReluGrad, {y, h}, attrs::Relu::make(0, inf, 0), h.dtype());
  return {Tensor(), window_node(Op::MaxPoolGradGrad, {y, masked}, n.attrs, h.dtype())};
}
G avg_pool_grad_grad(const Node& n, const Tensor&, const Tensor& h) {
  return {window_node(Op::Pool, {h}, n.attrs, h.dtype()), Tensor()};
}

Tensor pool_nd(const char* fn, int rank, const Tensor& x, const std::vector<std::int64_t>& size,
               const PoolOptions& o) {
  ops::check_float(fn, "x", x);
  W::Spec s;
  s.rank = rank;
  s.channels_first = ops::channels_first(fn, o.data_format);
  s.padding = ops::padding_mode(fn, o.padding, false);
  if (o.pool_mode == "max")
    s.mode = W::kMax;
  else if (o.pool_mode == "avg")
    s.mode = W::kAvg;
  else
    throw ValueError(std::string(fn) + ": Invalid pooling mode: \"" + o.pool_mode +
                     "\" (expected \"max\" or \"avg\")");
  if (static_cast<int>(size.size()) != rank)
    throw ValueError(std::string(fn) + ": pool_size " + ops::dims_str(size) + " must have " +
                     std::to_string(rank) + " entries");
  s.window = ops::spatial_tuple(fn, "pool_size", size, rank);
  std::int64_t cells = 1;
  for (auto k : s.window) cells *= k;  // each <= 2^24, at most 3 of them: no overflow
  if (cells > (std::int64_t{1} << 40))
    throw ValueError(std::string(fn) + ": pool_size " + ops::dims_str(size) +
                     " has more than 2^40 cells per window");
  s.strides = ops::spatial_tuple(fn, "strides", o.strides, rank);
  const Attrs at = W::make(s, fn);
  check_input(W::of(at), x.shape(), "x");
  return make_node(Op::Pool, {x}, at, x.dtype());
}

}  // namespace

Tensor pool2d(const Tensor& x, const std::vector<std::int64_t>& pool_size, const PoolOptions& o) {
  return pool_nd("K::pool2d", 2, x, pool_size, o);
}
Tensor pool3d(const Tensor& x, const std::vector<std::int64_t>& pool_size, const PoolOptions& o) {
  return pool_nd("K::pool3d", 3, x, pool_size, o);
}

}  // namespace ktape::backend

namespace ktape::ops {

Tensor max_pool_relu_grad(const Tensor& y, const Tensor& g) {
  if (!g.defined()) return {};
  // With unknown dims the gradient comes as SumToLike(MaxPoolGrad(y, dy), y): shaped like y
  // already, so the same values.
  const Node* m = &g.node();
  if (m->op == Op::SumToLike && m->inputs[1] == y) m = &m->inputs[0].node();
  if (m->op != Op::MaxPoolGrad || !(m->inputs[0] == y)) return {};
  return make_node(Op::MaxPoolReluGrad, {y, m->inputs[1]}, m->attrs, g.dtype());
}

void register_pool_ops() {
  using namespace ktape::backend;
  define_op(Op::Pool, {.shape = &pool_rule, .grad = &pool_grad});
  define_op(Op::MaxPoolGrad, {.shape = &like_input_rule, .grad = &max_pool_grad_grad});
  define_op(Op::MaxPoolGradGrad, {.shape = &pool_rule, .grad = &max_pool_grad_grad_grad});
  define_op(Op::MaxPoolReluGrad, {.shape = &like_input_rule, .grad = &max_pool_relu_grad_grad});
  define_op(Op::AvgPoolGrad, {.shape = &like_input_rule, .grad = &avg_pool_grad_grad});
}

}  // namespace ktape::ops
