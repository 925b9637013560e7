#include "ops/core.hpp"

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "engine/backend.hpp"
#include "engine/config.hpp"
#include "engine/graph_walk.hpp"
#include "engine/log.hpp"
#include "engine/random.hpp"
#include "ops/control.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/layout.hpp"
#include "ops/op_util.hpp"
#include "ops/reductions.hpp"

namespace ktape::backend {

namespace {

std::mutex g_mu;
std::map<std::string, std::int64_t> g_uids;
std::map<std::string, std::int64_t> g_names;
bool g_manual_init = false;
std::mt19937_64 g_seed_gen(0);

std::string unique_name(const std::string& given, const std::string& prefix) {
  if (!given.empty()) return given;
  std::lock_guard<std::mutex> lock(g_mu);
  const std::int64_t k = g_names[prefix]++;
  return k == 0 ? prefix : prefix + "_" + std::to_string(k);
}

DType resolve_dtype(const std::string& d, const char* fn) {
  return d.empty() ? config::floatx_dtype() : dtype_from_name(d, fn);
}

void check_defined_shape(const char* fn, const Shape& s) {
  for (auto d : s)
    if (d < 0)
      throw ValueError(std::string(fn) + ": shape " + s.str() +
                       " must be fully defined with non-negative dims");
}

Tensor make_variable(NDArray value, const std::string& name, DType dtype) {
  NDArray v = value.dtype() == dtype ? value.clone() : value.astype(dtype);
  const Shape s = v.shape();
  return make_source(Op::Variable, s, dtype, unique_name(name, "Variable"), std::move(v));
}

Shape random_shape(const Node& n, const std::vector<Shape>&) {
  const auto s = attrs::Random::of(n.attrs).shape;
  return Shape(std::vector<std::int64_t>(s.begin(), s.end()));
}

Shape shape_of_rule(const Node&, const std::vector<Shape>& in) { return Shape{in[0].ndim()}; }

std::vector<Tensor> identity_grad(const Node&, const Tensor&, const Tensor& g) { return {g}; }

std::vector<Tensor> cast_grad(const Node& n, const Tensor&, const Tensor& g) {
  const Tensor& x = n.inputs[0];
  if (!is_floating(x.dtype()) || !is_floating(n.dtype)) return {Tensor()};
  return {cast(g, std::string(dtype_name(x.dtype())))};
}

Tensor random_node(Op op, const Shape& shape, double a, double b, const RandomOptions& o,
                   const char* fn) {
  check_defined_shape(fn, shape);
  const DType dt = resolve_dtype(o.dtype, fn);
  if (!is_floating(dt)) throw TypeError(std::string(fn) + ": dtype must be a float type");
  Tensor t = make_node(op, {}, attrs::Random::make(shape.dims(), a, b), dt, o.name);
  t.node().seed = o.seed ? *o.seed : draw_seed();
  return t;
}

}  // namespace

// ---- configuration --------------------------------------------------------------------------
std::string backend() { return active_backend().name; }
double epsilon() { return config::epsilon(); }
void set_epsilon(double e) { config::set_epsilon(e); }
std::string floatx() { return config::floatx(); }
void set_floatx(const std::string& f) { config::set_floatx(f); }
NDArray cast_to_floatx(const NDArray& x) { return config::cast_to_floatx(x); }
std::string image_data_format() { return config::image_data_format(); }
void set_image_data_format(const std::string& f) { config::set_image_data_format(f); }
std::string normalize_data_format(const std::optional<std::string>& v) {
  return config::normalize_data_format(v);
}
std::string image_dim_ordering() { return config::image_dim_ordering(); }
void set_image_dim_ordering(const std::string& v) { config::set_image_dim_ordering(v); }

// ---- bookkeeping ----------------------------------------------------------------------------
std::int64_t get_uid(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mu);
  return ++g_uids[prefix];
}
void reset_uids() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_uids.clear();
}
void clear_session() {
  reset_uids();
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_names.clear();
  }
  reset_learning_phase();
  reset_tape();
}
void manual_variable_initialization(bool value) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_manual_init = value;
}
void set_random_seed(std::uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_seed_gen.seed(seed);
}
std::uint64_t draw_seed() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_seed_gen() % 10000000ULL;  // like np.random.randint(10e6)
}

// ---- variables, constants, placeholders ----------------------------------------------------
Tensor variable(const NDArray& value, const VariableOptions& o) {
  if (!value.defined()) throw ValueError("K::variable: `value` is an empty NDArray");
  Tensor t = make_variable(value, o.name, resolve_dtype(o.dtype, "K::variable"));
  t.node().constraint = o.constraint;
  return t;
}
Tensor variable(double value, const VariableOptions& o) {
  return variable(NDArray::scalar(value, DType::float64), o);
}

Tensor constant(const NDArray& value, const ConstantOptions& o) {
  if (!value.defined()) throw ValueError("K::constant: `value` is an empty NDArray");
  const DType dt = resolve_dtype(o.dtype, "K::constant");
  NDArray v;
  if (o.shape) {
    check_defined_shape("K::constant", *o.shape);
    if (value.size() == 1) {
      v = NDArray::full(*o.shape, value.item(0), dt);
    } else if (value.size() == o.shape->num_elements()) {
      v = value.astype(dt).reshaped(*o.shape);
    } else {
      throw ValueError("K::constant: value of shape " + value.shape().str() +
                       " cannot be given shape " + o.shape->str());
    }
  } else {
    v = value.dtype() == dt ? value.clone() : value.astype(dt);
  }
  const Shape s = v.shape();
  return make_source(Op::Constant, s, dt, unique_name(o.name, "Const"), std::move(v));
}
Tensor constant(double value, const ConstantOptions& o) {
  return constant(NDArray::scalar(value, DType::float64), o);
}

Tensor placeholder(const Shape& shape, const PlaceholderOptions& o) {
  for (auto d : shape)
    if (d < -1)
      throw ValueError("K::placeholder: invalid dim " + std::to_string(d) + " in shape " +
                       shape.str() + "; use K::None for an unknown dim");
  const DType dt = resolve_dtype(o.dtype, "K::placeholder");
  if (o.sparse) return ops::sparse_placeholder(shape, dt, unique_name(o.name, "SparsePlaceholder"));
  return make_source(Op::Placeholder, shape, dt, unique_name(o.name, "Placeholder"));
}
Tensor placeholder(const PlaceholderOptions& o) {
  if (o.shape) return placeholder(*o.shape, o);
  if (!o.ndim) throw ValueError("K::placeholder: Specify either a shape or ndim value.");
  if (*o.ndim < 0)
    throw ValueError("K::placeholder: ndim must be >= 0, got " + std::to_string(*o.ndim));
  return placeholder(Shape(std::vector<std::int64_t>(static_cast<std::size_t>(*o.ndim), None)), o);
}

bool is_keras_tensor(const Tensor& x) {
  if (!x.defined())
    throw ValueError(
        "K::is_keras_tensor: Unexpectedly found an instance of type null tensor. Expected a "
        "symbolic tensor instance.");
  return x.node().keras_history;
}
bool is_tensor(const Tensor& x) { return x.defined(); }
bool is_variable(const Tensor& x) { return x.defined() && x.op() == Op::Variable; }
bool is_placeholder(const Tensor& x) {
  if (!x.defined()) return false;
  if (x.op() == Op::Placeholder) return true;
  if (x.op() != Op::SparseTensor) return false;
  for (const auto& t : x.node().inputs)
    if (t.op() != Op::Placeholder) return false;
  return true;
}
bool is_sparse(const Tensor& x) { return x.defined() && x.op() == Op::SparseTensor; }
Tensor shape(const Tensor& x) {
  if (is_sparse(x))  // the dense shape: the carrier's shape without its last (0) dim
    return slice(make_node(Op::ShapeOf, {x.node().inputs[2]}, {}, DType::int32), {0}, {x.ndim()});
  return make_node(Op::ShapeOf, {x}, {}, DType::int32);
}
Shape int_shape(const Tensor& x) { return x.shape(); }
int ndim(const Tensor& x) { return x.ndim(); }
Tensor size(const Tensor& x) {
  const std::int64_t n = x.shape().num_elements();
  if (n >= 0) return ops::scalar(static_cast<double>(n), DType::int32);
  if (is_sparse(x)) return prod(shape(x));
  Tensor r = make_node(Op::SizeRatio, {x, ops::scalar(0.0, DType::float64)}, {}, DType::float64);
  return cast(r, "int32");
}
std::string dtype(const Tensor& x) { return std::string(dtype_name(x.dtype())); }
std::int64_t count_params(const Tensor& x) {
  const std::int64_t n = x.shape().num_elements();
  if (n < 0)
    throw ValueError("K::count_params: the shape " + x.shape().str() + " of '" + x.name() +
                     "' is not fully defined");
  return n;
}
Shape get_variable_shape(const Tensor& x) { return int_shape(x); }

// ---- values ---------------------------------------------------------------------------------
NDArray eval(const Tensor& x) { return evaluate(x); }
NDArray get_value(const Tensor& x) {
  if (is_variable(x)) {
    const VariableAccess read(x.node(), false);
    return x.node().value.clone();
  }
  return evaluate(x);
}
void set_value(const Tensor& x, const NDArray& value) {
  if (!is_variable(x))
    throw TypeError("K::set_value: `x` must be a variable, got " + std::string(op_name(x.op())) +
                    " '" + x.name() + "'");
  NDArray& storage = x.node().value;
  if (!value.defined() || value.shape() != storage.shape())
    throw ValueError("K::set_value: variable '" + x.name() + "' has shape " +
                     storage.shape().str() + ", the value has shape " +
                     (value.defined() ? value.shape().str() : std::string("(empty)")));
  const NDArray c = value.dtype() == storage.dtype() ? value : value.astype(storage.dtype());
  const VariableAccess write(x.node(), true);
  std::memcpy(storage.raw_data(), c.raw_data(), c.nbytes());
}
std::vector<NDArray> batch_get_value(const std::vector<Tensor>& xs) {
  std::vector<NDArray> r;
  r.reserve(xs.size());
  for (const auto& x : xs) r.push_back(get_value(x));
  return r;
}
void batch_set_value(const std::vector<std::pair<Tensor, NDArray>>& tuples) {
  for (const auto& [x, v] : tuples) set_value(x, v);
}
const std::function<Tensor(const Tensor&)>& variable_constraint(const Tensor& x) {
  return x.node().constraint;
}

// ---- creation -----------------------------------------------------------------------------
namespace {
Tensor filled(const Shape& shape, double v, const CreateOptions& o, const char* fn) {
  check_defined_shape(fn, shape);
  const DType dt = resolve_dtype(o.dtype, fn);
  NDArray a = NDArray::full(shape, v, dt);
  if (shape.num_elements() > 0) return make_variable(a, o.name, dt);
  return make_source(Op::Constant, shape, dt, unique_name(o.name, "Const"), std::move(a));
}
}  // namespace

Tensor zeros(const Shape& shape, const CreateOptions& o) {
  return filled(shape, 0.0, o, "K::zeros");
}
Tensor ones(const Shape& shape, const CreateOptions& o) { return filled(shape, 1.0, o, "K::ones"); }
Tensor eye(std::int64_t n, const CreateOptions& o) { return eye(n, n, o); }
Tensor eye(std::int64_t rows, std::int64_t cols, const CreateOptions& o) {
  if (rows < 0 || cols < 0)
    throw ValueError("K::eye: size must be non-negative, got (" + std::to_string(rows) + ", " +
                     std::to_string(cols) + ")");
  const DType dt = resolve_dtype(o.dtype, "K::eye");
  NDArray a(Shape{rows, cols}, dt);
  for (std::int64_t i = 0; i < std::min(rows, cols); ++i) a.set_item(i * cols + i, 1.0);
  return make_variable(a, o.name, dt);
}
Tensor zeros_like(const Tensor& x, const CreateOptions& o) {
  return make_node(Op::FillLike, {x}, attrs::Scalar::make(0.0),
                   o.dtype.empty() ? x.dtype() : dtype_from_name(o.dtype, "K::zeros_like"), o.name);
}
Tensor ones_like(const Tensor& x, const CreateOptions& o) {
  return make_node(Op::FillLike, {x}, attrs::Scalar::make(1.0),
                   o.dtype.empty() ? x.dtype() : dtype_from_name(o.dtype, "K::ones_like"), o.name);
}
Tensor identity(const Tensor& x, const std::string& name) {
  return make_node(Op::Identity, {x}, {}, x.dtype(), name);
}
Tensor cast(const Tensor& x, const std::string& dtype) {
  const DType dt = dtype_from_name(dtype, "K::cast");
  if (dt == x.dtype()) return x;
  return make_node(Op::Cast, {x}, {}, dt);
}

// ---- random ---------------------------------------------------------------------------------
Tensor random_uniform_variable(const Shape& shape, double low, double high,
                               const RandomOptions& o) {
  check_defined_shape("K::random_uniform_variable", shape);
  const DType dt = resolve_dtype(o.dtype, "K::random_uniform_variable");
  const std::uint64_t seed = o.seed ? *o.seed : draw_seed();
  NDArray a(shape, dt);
  for (std::int64_t i = 0; i < a.size(); ++i)
    a.set_item(i, low + (high - low) * rng::uniform(seed, 0, static_cast<std::uint64_t>(i)));
  return make_variable(a, o.name, dt);
}
Tensor random_normal_variable(const Shape& shape, double mean, double scale,
                              const RandomOptions& o) {
  check_defined_shape("K::random_normal_variable", shape);
  const DType dt = resolve_dtype(o.dtype, "K::random_normal_variable");
  const std::uint64_t seed = o.seed ? *o.seed : draw_seed();
  NDArray a(shape, dt);
  for (std::int64_t i = 0; i < a.size(); ++i)
    a.set_item(i, mean + scale * rng::normal(seed, 0, static_cast<std::uint64_t>(i)));
  return make_variable(a, o.name, dt);
}
Tensor random_uniform(const Shape& shape, double minval, double maxval, const RandomOptions& o) {
  return random_node(Op::RandomUniform, shape, minval, maxval, o, "K::random_uniform");
}
Tensor random_normal(const Shape& shape, double mean, double stddev, const RandomOptions& o) {
  return random_node(Op::RandomNormal, shape, mean, stddev, o, "K::random_normal");
}
Tensor truncated_normal(const Shape& shape, double mean, double stddev, const RandomOptions& o) {
  return random_node(Op::TruncatedNormal, shape, mean, stddev, o, "K::truncated_normal");
}
Tensor random_binomial(const Shape& shape, double p, const RandomOptions& o) {
  if (std::isnan(p)) throw ValueError("K::random_binomial: p is NaN");
  return random_node(Op::RandomBinomial, shape, p, 0.0, o, "K::random_binomial");
}

namespace {

// PrintTensor: an identity whose kernel also logs the value with the message (Node::extra).
// It allocates the printed copy: a debugging op, not for steady-state loops.
struct PrintMessage : NodeExtra {
  std::string message;
};

void print_kernel(const KernelCall& c) {
  const std::size_t bytes = static_cast<std::size_t>(c.out.size) * dtype_size(c.out.dtype);
  if (c.out.data != c.in[0].data) std::memcpy(c.out.data, c.in[0].data, bytes);
  NDArray v(Shape(std::vector<std::int64_t>(c.out.dims, c.out.dims + c.out.ndim)), c.out.dtype);
  std::memcpy(v.raw_data(), c.out.data, bytes);
  const auto& m = static_cast<const PrintMessage&>(*static_cast<const NodeExtra*>(c.ctx));
  log_info(m.message + v.str());
}

Prepared prepare_print(const PrepareArgs& a) {
  Prepared p;
  p.shape = a.in_shapes[0];
  p.ctx = std::const_pointer_cast<NodeExtra>(a.node.extra);
  p.kernel = &print_kernel;
  return p;
}

}  // namespace

Tensor print_tensor(const Tensor& x, const std::string& message) {
  auto m = std::make_shared<PrintMessage>();
  m->message = message;
  return make_node_with_extra(Op::PrintTensor, {x}, {}, x.dtype(), "", std::move(m),
                              /*eager=*/true);
}

std::vector<Tensor> random_sources(const std::vector<Tensor>& outputs) {
  std::vector<Node*> roots;
  for (const auto& t : outputs) roots.push_back(&t.node());
  std::vector<Tensor> found;
  for (Node* n : reachable_in_tape_order(roots))
    if (op_def(n->op).random) found.emplace_back(n->shared_from_this());
  return found;
}

namespace {
Node& random_node_of(const Tensor& t, const char* fn) {
  Node& n = t.node();
  if (!op_def(n.op).random)
    throw ValueError(std::string(fn) + ": '" + n.name + "' (" + op_name(n.op) +
                     ") is not a random op");
  return n;
}
}  // namespace

std::uint64_t random_counter(const Tensor& t) {
  return random_node_of(t, "K::random_counter").counter.load();
}
void set_random_counter(const Tensor& t, std::uint64_t calls) {
  random_node_of(t, "K::set_random_counter").counter.store(calls);
}

}  // namespace ktape::backend

namespace ktape::ops {

void register_core_ops() {
  for (Op op : {Op::Placeholder, Op::Variable, Op::Constant}) define_op(op, {.pure = false});
  for (Op op : {Op::RandomUniform, Op::RandomNormal, Op::TruncatedNormal, Op::RandomBinomial})
    define_op(
        op, {.shape = &backend::random_shape, .pure = false, .random = true, .dispatch_input = -1});
  define_op(Op::Identity,
            {.shape = &same_as_input0, .grad = &backend::identity_grad, .alias_input = 0});
  define_op(Op::StopGradient, {.shape = &same_as_input0, .alias_input = 0});
  define_op(Op::PrintTensor, {.shape = &same_as_input0,
                              .grad = &backend::identity_grad,
                              .pure = false,
                              .may_throw = true,  // it allocates the printed copy
                              .prepare = &backend::prepare_print,
                              .side_effect = true});
  define_op(Op::Cast, {.shape = &same_as_input0, .grad = &backend::cast_grad, .elementwise = true});
  define_op(Op::FillLike,
            {.shape = &same_as_input0, .dispatch_input = -1, .shape_only = &input0_shape_only});
  define_op(
      Op::ShapeOf,
      {.shape = &backend::shape_of_rule, .dispatch_input = -1, .shape_only = &input0_shape_only});
  define_op(Op::SizeRatio,
            {.shape = &scalar_rule, .dispatch_input = -1, .shape_only = &all_shape_only});
}

}  // namespace ktape::ops
