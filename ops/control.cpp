#include "ops/control.hpp"

#include <mutex>

#include "ops/core.hpp"
#include "ops/elementwise.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/layout.hpp"
#include "ops/op_util.hpp"

namespace ktape::backend {

namespace {

std::mutex g_lp_mu;
Tensor g_lp_placeholder;
std::optional<int> g_lp_static;

void check_variable(const char* fn, const Tensor& x) {
  if (!is_variable(x))
    throw TypeError(std::string(fn) + ": `x` must be a variable, got " +
                    std::string(op_name(x.op())) + " '" + x.name() + "'");
}

// Assign(variable, new value[, operand]) attrs: str = the K:: function's name. The new value
// (and the increment of update_add / update_sub, the optional third input) must have the
// variable's shape exactly. The rule runs when the update is built (None dims pass) and again
// whenever a Function compiles for a new input-shape signature, where every dim is known: so a
// value whose shape could not be proven at build time is checked before any call commits it.
Shape assign_rule(const Node& n, const std::vector<Shape>& in) {
  const Shape& vs = in[0];
  for (std::size_t k = 1; k < in.size(); ++k) {
    const Shape& ns = in[k];
    bool ok = vs.ndim() == ns.ndim();
    for (int i = 0; ok && i < vs.ndim(); ++i) ok = ns[i] < 0 || ns[i] == vs[i];
    if (!ok)
      throw ValueError(attrs::Assign::of(n.attrs).fn + ": variable '" + n.inputs[0].name() +
                       "' has shape " + vs.str() + " but the " +
                       (k == 1 ? "new value" : "operand") + " has shape " + ns.str());
  }
  return vs;
}

// operand: update_add's increment / update_sub's decrement, held only for the shape check.
Tensor make_assign(const char* fn, const Tensor& x, const Tensor& new_x,
                   const Tensor& operand = Tensor()) {
  check_variable(fn, x);
  if (!new_x.defined()) throw ValueError(std::string(fn) + ": the new value is a null tensor");
  if (new_x.dtype() != x.dtype())
    throw TypeError(std::string(fn) + ": variable '" + x.name() + "' is " + dtype(x) +
                    " but the new value is " + dtype(new_x));
  std::vector<Tensor> ins{x, new_x};
  if (operand.defined()) ins.push_back(operand);
  return make_node(Op::Assign, std::move(ins), attrs::Assign::make(fn), x.dtype(),
                   x.name() + "/assign");
}
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
  check_variable("K::update_add", x);
  if (!increment.defined()) throw ValueError("K::update_add: the increment is a null tensor");
  return make_assign("K::update_add", x, x + increment, increment);
}
Tensor update_sub(const Tensor& x, const Tensor& decrement) {
  check_variable("K::update_sub", x);
  if (!decrement.defined()) throw ValueError("K::update_sub: the decrement is a null tensor");
  return make_assign("K::update_sub", x, x - decrement, decrement);
}

Tensor moving_average_update(const Tensor& x, const Tensor& value, double momentum,
                             const MovingAverageOptions& o) {
  const char* fn = "K::moving_average_update";
  check_variable(fn, x);
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
    g_lp_placeholder.node().is_learning_phase = true;
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
    std::vector<std::int64_t> axes;
    for (int i = c.ndim(); i < er; ++i) axes.push_back(i);
    c = make_node(Op::ExpandAxes, {c}, attrs::IntList::make(std::move(axes)), DType::bool_);
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
  // An update's value is its new value's buffer (Function commits it into the variable).
  define_op(Op::Assign, {.shape = &backend::assign_rule, .pure = false, .alias_input = 1});
  define_op(Op::Group, {.shape = &backend::group_rule, .pure = false, .alias_input = 0});
  define_op(Op::Select, {.shape = &broadcast_rule,
                         .grad = &backend::select_grad,
                         .dispatch_input = -1,
                         .elementwise = true});
}

}  // namespace ktape::ops
