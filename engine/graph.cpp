#include "engine/graph.hpp"

#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "engine/errors.hpp"
#include "engine/eval.hpp"

namespace ktape {

namespace {

const char* const kOpNames[] = {
#define KTAPE_OP_NAME(name) #name,
    KTAPE_OP_LIST(KTAPE_OP_NAME)
#undef KTAPE_OP_NAME
};

OpDef g_defs[kNumOps];
bool g_defined[kNumOps] = {};
std::atomic<std::int64_t> g_next_id{1};

struct Tape {
  std::mutex mu;
  std::unordered_map<std::string, std::weak_ptr<Node>> cse;
  std::size_t inserts_since_purge = 0;
};
Tape& tape() {
  static Tape t;
  return t;
}

std::string cse_key(Op op, const std::vector<Tensor>& inputs, const Attrs& a, DType dtype) {
  std::string k;
  k.reserve(64);
  auto put = [&k](const void* p, std::size_t n) { k.append(static_cast<const char*>(p), n); };
  put(&op, sizeof op);
  put(&dtype, sizeof dtype);
  for (const auto& t : inputs) {
    const std::int64_t id = t.id();
    put(&id, sizeof id);
  }
  k.push_back('|');
  for (auto v : a.ints) put(&v, sizeof v);
  k.push_back('|');
  for (auto v : a.floats) put(&v, sizeof v);
  k.push_back('|');
  k += a.str;
  return k;
}

}  // namespace

const char* op_name(Op op) { return kOpNames[static_cast<int>(op)]; }

Node& Tensor::node() const {
  if (!node_)
    throw ValueError(
        "ktape: a null tensor was used as an operand. A null tensor is what K::gradients returns "
        "for a variable the loss does not depend on (None in Keras).");
  return *node_;
}
std::int64_t Tensor::id() const { return node().id; }
const Shape& Tensor::shape() const { return node().shape; }
DType Tensor::dtype() const { return node().dtype; }
const std::string& Tensor::name() const { return node().name; }
Op Tensor::op() const { return node().op; }

const OpDef& op_def(Op op) { return g_defs[static_cast<int>(op)]; }

void define_op(Op op, const OpDef& def) {
  const int i = static_cast<int>(op);
  if (g_defined[i])
    throw std::logic_error(std::string("ktape: op ") + op_name(op) + " is defined twice");
  if (!def.shape && op != Op::Placeholder && op != Op::Variable && op != Op::Constant)
    throw std::logic_error(std::string("ktape: op ") + op_name(op) + " has no shape rule");
  g_defs[i] = def;
  g_defined[i] = true;
}

void ensure_ops_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_all_ops();
    std::string missing;
    for (int i = 0; i < kNumOps; ++i)
      if (!g_defined[i]) missing += std::string(missing.empty() ? "" : ", ") + kOpNames[i];
    if (!missing.empty()) throw std::logic_error("ktape: op kinds without a record: " + missing);
  });
}

std::int64_t next_node_id() { return g_next_id.fetch_add(1); }

void reset_tape() {
  std::lock_guard<std::mutex> lock(tape().mu);
  tape().cse.clear();
}

namespace {
void check_rank(const Shape& s, const std::string& name) {
  if (s.ndim() > kMaxRank)
    throw ValueError("ktape: '" + name + "' would have shape " + s.str() + " of rank " +
                     std::to_string(s.ndim()) + "; ktape supports ranks up to " +
                     std::to_string(kMaxRank));
}

thread_local std::vector<std::string> t_name_scopes;
thread_local std::vector<std::vector<Tensor>> t_control_scopes;

bool in_control_scope() {
  for (const auto& c : t_control_scopes)
    if (!c.empty()) return true;
  return false;
}

// A node with its inputs, flags and inferred static shape; no id yet.
std::shared_ptr<Node> new_node(Op op, std::vector<Tensor> inputs, Attrs attrs, DType dtype,
                               const std::string& name, std::shared_ptr<const NodeExtra> extra) {
  auto n = std::make_shared<Node>();
  n->op = op;
  n->dtype = dtype;
  n->attrs = std::move(attrs);
  n->inputs = std::move(inputs);
  n->name = scoped_name(name.empty() ? std::string(op_name(op)) : name);
  n->extra = std::move(extra);
  if (!in_eager_scope())  // TF's eager mode ignores control dependencies too
    for (const auto& scope : t_control_scopes)
      n->control_inputs.insert(n->control_inputs.end(), scope.begin(), scope.end());
  for (std::size_t i = 0; i < n->inputs.size(); ++i)
    if (n->inputs[i].op() == Op::SparseTensor)  // only ops/sparse reads the parts of one
      throw TypeError("op " + std::string(op_name(op)) + ": input " + std::to_string(i) + " '" +
                      n->inputs[i].name() +
                      "' is a sparse tensor; of the K:: functions only to_dense, dot (sparse x), "
                      "concatenate, is_sparse, is_placeholder, shape, size, int_shape, ndim and "
                      "dtype take one: convert it with K::to_dense first");
  n->concrete = true;
  for (const auto& t : n->inputs) {
    n->concrete = n->concrete && t.node().concrete;
    n->uses_learning_phase = n->uses_learning_phase || t.node().uses_learning_phase;
  }
  std::vector<Shape> in_shapes;
  in_shapes.reserve(n->inputs.size());
  for (const auto& t : n->inputs) in_shapes.push_back(t.shape());
  const OpDef& def = op_def(op);
  n->shape = def.shape ? def.shape(*n, in_shapes) : Shape{};
  check_rank(n->shape, n->name);
  return n;
}
}  // namespace

Tensor make_source(Op op, const Shape& shape, DType dtype, const std::string& name, NDArray value) {
  check_rank(shape, name);
  auto n = std::make_shared<Node>();
  n->id = next_node_id();
  n->op = op;
  n->dtype = dtype;
  n->shape = shape;
  n->name = scoped_name(name);
  n->value = std::move(value);
  n->concrete = op != Op::Placeholder;
  if (op == Op::Variable) n->storage_lock = std::make_unique<std::shared_mutex>();
  return Tensor(std::move(n));
}

Tensor make_node(Op op, std::vector<Tensor> inputs, Attrs attrs, DType dtype,
                 const std::string& name) {
  ensure_ops_registered();
  const OpDef& def = op_def(op);
  for (const auto& t : inputs) (void)t.node();  // null operands throw here, with a clear message
  std::string key;
  Tape& tp = tape();
  const bool share = def.pure && !in_control_scope();  // a control edge makes a node distinct
  if (share) {
    key = cse_key(op, inputs, attrs, dtype);
    std::lock_guard<std::mutex> lock(tp.mu);
    auto it = tp.cse.find(key);
    if (it != tp.cse.end()) {
      auto existing = it->second.lock();
      // An eagerly evaluated node holds a value frozen at build time: share it only in eager
      // scopes, and never hand a lazy node to an eager scope.
      if (existing && existing->eager_value.defined() == in_eager_scope())
        return Tensor(std::move(existing));
    }
  }
  auto n = new_node(op, std::move(inputs), std::move(attrs), dtype, name, nullptr);
  n->id = next_node_id();
  Tensor t(n);
  if (share) {
    std::lock_guard<std::mutex> lock(tp.mu);
    tp.cse[key] = n;
    if (++tp.inserts_since_purge > 4096 && tp.cse.size() > 8192) {
      tp.inserts_since_purge = 0;
      for (auto it = tp.cse.begin(); it != tp.cse.end();)
        it = it->second.expired() ? tp.cse.erase(it) : std::next(it);
    }
  }
  if (n->concrete && in_eager_scope() && op != Op::Assign && op != Op::Group)
    n->eager_value = evaluate(t);
  return t;
}

Tensor make_node_with_extra(Op op, std::vector<Tensor> inputs, Attrs attrs, DType dtype,
                            const std::string& name, std::shared_ptr<const NodeExtra> extra,
                            bool eager) {
  ensure_ops_registered();
  for (const auto& t : inputs) (void)t.node();
  auto n = new_node(op, std::move(inputs), std::move(attrs), dtype, name, std::move(extra));
  n->id = next_node_id();
  Tensor t(std::move(n));
  if (eager && t.node().concrete && in_eager_scope()) t.node().eager_value = evaluate(t);
  return t;
}

void push_name_scope(const std::string& name) { t_name_scopes.push_back(name); }
void pop_name_scope() {
  if (!t_name_scopes.empty()) t_name_scopes.pop_back();
}
std::string scoped_name(const std::string& name) {
  std::string s;
  for (const auto& scope : t_name_scopes)
    if (!scope.empty()) s += scope + "/";
  return s + name;
}
void push_control_inputs(std::vector<Tensor> inputs) {
  t_control_scopes.push_back(std::move(inputs));
}
void pop_control_inputs() {
  if (!t_control_scopes.empty()) t_control_scopes.pop_back();
}

// Loops clone the nodes of a step function into their body: the clones get no control inputs
// (a loop body is free of side effects; the Scan node itself carries the open scopes).
Tensor clone_node(const Node& n, std::vector<Tensor> inputs) {
  std::vector<std::vector<Tensor>> saved;
  saved.swap(t_control_scopes);
  struct Restore {
    std::vector<std::vector<Tensor>>& saved;
    ~Restore() { saved.swap(t_control_scopes); }
  } restore{saved};
  Tensor t = n.extra
                 ? make_node_with_extra(n.op, std::move(inputs), n.attrs, n.dtype, n.name, n.extra)
                 : make_node(n.op, std::move(inputs), n.attrs, n.dtype, n.name);
  Node& c = t.node();
  if (c.seed == 0) c.seed = n.seed;
  return t;
}

}  // namespace ktape
