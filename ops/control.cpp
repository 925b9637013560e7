#include "ops/control.hpp"

#include <mutex>

#include "ops/core.hpp"
#include "ops/elementwise.hpp"
#include "ops/layout.hpp"
#include "ops/op_util.hpp"

namespace ktape::backend {

namespace {

std::mutex g_lp_mu;
Tensor g_lp_placeholder;
std::optional<int> g_lp_static;

Tensor make_assign(const char* fn, const Tensor& x, const Tensor& new_x) {
  if (!is_variable(x))
    throw TypeError(std::string(fn) + ": `x` must be a variable, got " +
                    std::string(op_name(x.op())) + " '" + x.name() + "'");
  if (!new_x.defined()) throw ValueError(std::string(fn) + ": the new value is a null tensor");
  if (new_x.dtype() != x.dtype())
    throw TypeError(std::string(fn) + ": variable '" + x.name() + "' is " + dtype(x) +
                    " but the new value is " + dtype(new_x));
  const Shape& vs = x.shape();
  const Shape& ns = new_x.shape();
  bool ok = vs.ndim() == ns.ndim();
  for (int i = 0; ok && i < vs.ndim(); ++i) ok = ns[i] < 0 || ns[i] == vs[i];
  if (!ok)
    throw ValueError(std::string(fn) + ": variable '" + x.name() + "' has shape " + vs.str() +
                     " but the new value has shape " + ns.str());
  return make_node(Op::Assign, {x, new_x}, {}, x.dtype(), x.name() + "/assign");
}

Shape assign_rule(const Node& n, const std::vector<Shape>&) { return n.inputs[0].shape(); }
Shape group_rule(const Node&, const std::vector<Shape>& in) { return in[0]; }

std::vector<Tensor> select_grad(const Node& n, const Tensor&, const Tensor& g) {
  const Tensor& c = n.inputs[0];
  const Tensor z = zeros_like(g);
  return {Tensor(), make_node(Op::Select, {c, g, z}, {}, g.dtype()),
          make_node(Op::Select, {c, z, g}, {}, g.dtype())};
}

bool constant_phase(const Tensor& t, int& value) {
  if (t.op() == Op::Constant && t.shape().ndim() == 0) {
    value = t.node().value.item(0) != 0.0 ? 1 : 0;
    return true;
  }
  return false;
}

}  // namespace

Function function(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                  const std::vector<Tensor>& updates, const FunctionOptions& options) {
  return Function(inputs, outputs, updates, options);
}

Tensor stop_gradient(const Tensor& x) { return make_node(Op::StopGradient, {x}, {}, x.dtype()); }
std::vector<Tensor> stop_gradient(const std::vector<Tensor>& xs) {
  std::vector<Tensor> r;
  r.reserve(xs.size());
  for (const auto& x : xs) r.push_back(stop_gradient(x));
  return r;
}

Tensor update(const Tensor& x, const Tensor& new_x) { return make_assign("K::update", x, new_x); }
Tensor update_add(const Tensor& x, const Tensor& increment) {
  if (!is_variable(x)) return make_assign("K::update_add", x, x);  // throws the TypeError
  return make_assign("K::update_add", x, x + increment);
}
Tensor update_sub(const Tensor& x, const Tensor& decrement) {
  if (!is_variable(x)) return make_assign("K::update_sub", x, x);
  return make_assign("K::update_sub", x, x - decrement);
}

Tensor moving_average_update(const Tensor& x, const Tensor& value, double momentum,
                             const MovingAverageOptions& o) {
  const char* fn = "K::moving_average_update";
  if (!is_variable(x)) return make_assign(fn, x, x);
  ops::check_same_dtype(fn, x, value);
  const Tensor m = ops::scalar(momentum, x.dtype());
  const Tensor one_minus_m = ops::scalar(1.0 - momentum, x.dtype());
  if (!o.zero_debias) return make_assign(fn, x, x - (x - value) * one_minus_m);
  const Tensor biased = zeros(int_shape(x), {.dtype = dtype(x), .name = x.name() + "/biased"});
  const Tensor step = zeros(Shape{}, {.dtype = dtype(x), .name = x.name() + "/local_step"});
  const Tensor new_biased = biased - (biased - value) * one_minus_m;
  const Tensor new_step = step + 1.0;
  const Tensor new_x = new_biased / (1.0 - exp(new_step * log(m)));
  return make_node(Op::Group,
                   {make_assign(fn, x, new_x), make_assign(fn, biased, new_biased),
                    make_assign(fn, step, new_step)},
                   {}, x.dtype(), x.name() + "/moving_average");
}

Tensor learning_phase() {
  std::lock_guard<std::mutex> lock(g_lp_mu);
  if (g_lp_static) return ops::scalar(*g_lp_static, DType::bool_);
  if (!g_lp_placeholder.defined()) {
    g_lp_placeholder = make_source(Op::Placeholder, Shape{}, DType::bool_, "keras_learning_phase",
                                   NDArray::scalar(0.0, DType::bool_));
    g_lp_placeholder.node().attrs.str = "learning_phase";
    g_lp_placeholder.node().uses_learning_phase = true;
  }
  return g_lp_placeholder;
}
void set_learning_phase(int value) {
  if (value != 0 && value != 1)
    throw ValueError("K::set_learning_phase: Expected learning phase to be 0 or 1, got " +
                     std::to_string(value));
  std::lock_guard<std::mutex> lock(g_lp_mu);
  g_lp_static = value;
}
void reset_learning_phase() {
  std::lock_guard<std::mutex> lock(g_lp_mu);
  g_lp_static.reset();
  g_lp_placeholder = Tensor();
}

Tensor switch_(const Tensor& condition, const TensorOrFn& then_expression,
               const TensorOrFn& else_expression) {
  const Tensor a = then_expression.get();
  const Tensor b = else_expression.get();
  ops::check_same_dtype("K::switch_", a, b);
  Tensor c = cast(condition, "bool");
  const int er = std::max(a.ndim(), b.ndim());
  if (c.ndim() > er)
    throw ValueError(
        "K::switch_: Rank of `condition` should be less than or equal to rank of "
        "`then_expression` and `else_expression`. ndim(condition)=" +
        std::to_string(c.ndim()) + ", ndim(then_expression)=" + std::to_string(a.ndim()));
  if (c.ndim() > 0 && c.ndim() < er) {
    std::vector<int> axes;
    for (int i = c.ndim(); i < er; ++i) axes.push_back(i);
    Attrs at;
    at.ints.assign(axes.begin(), axes.end());
    c = make_node(Op::ExpandAxes, {c}, std::move(at), DType::bool_);
  }
  Tensor r = make_node(Op::Select, {c, a, b}, {}, a.dtype());
  return r;
}

Tensor in_train_phase(const TensorOrFn& x, const TensorOrFn& alt, int training) {
  if (training == 1) return x.get();
  if (training == 0) return alt.get();
  throw ValueError("K::in_train_phase: `training` must be 0, 1 or a tensor, got " +
                   std::to_string(training));
}
Tensor in_train_phase(const TensorOrFn& x, const TensorOrFn& alt, const Tensor& training) {
  int v;
  if (constant_phase(training, v)) return in_train_phase(x, alt, v);
  Tensor r = switch_(training, x, alt);
  r.node().uses_learning_phase = true;
  return r;
}
Tensor in_train_phase(const TensorOrFn& x, const TensorOrFn& alt) {
  return in_train_phase(x, alt, learning_phase());
}
Tensor in_test_phase(const TensorOrFn& x, const TensorOrFn& alt) { return in_train_phase(alt, x); }
Tensor in_test_phase(const TensorOrFn& x, const TensorOrFn& alt, int training) {
  return in_train_phase(alt, x, training);
}
Tensor in_test_phase(const TensorOrFn& x, const TensorOrFn& alt, const Tensor& training) {
  return in_train_phase(alt, x, training);
}

}  // namespace ktape::backend

namespace ktape::ops {

void register_control_ops() {
  op_def(Op::Assign) = {&backend::assign_rule, nullptr, false, 1, false, 0};
  op_def(Op::Group) = {&backend::group_rule, nullptr, false, 0, false, 0};
  op_def(Op::Select) = {&broadcast_rule, &backend::select_grad, true, -1, false, -1};
}

}  // namespace ktape::ops
