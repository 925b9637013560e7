#include "engine/function.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "engine/backend.hpp"
#include "engine/errors.hpp"
#include "engine/fusion.hpp"
#include "engine/graph_walk.hpp"
#include "engine/plan.hpp"

namespace ktape {

namespace {

thread_local int t_eager = 0;
// Calls in progress on this thread: a nested call (a print hook that evaluates a tensor) runs
// under the locks its enclosing call holds.
thread_local int t_call_depth = 0;

std::string describe(const Node& n) {
  return "'" + n.name + "' (shape " + n.shape.str() + ", " + std::string(dtype_name(n.dtype)) + ")";
}

bool is_learning_phase(const Node& n) { return n.is_learning_phase; }

// K::placeholder(..., {.sparse = true}): a SparseTensor node over three placeholders (indices,
// values, and a zero-size array shaped (dense shape..., 0) that carries the dense shape).
bool is_sparse_placeholder(const Node& n) {
  if (n.op != Op::SparseTensor) return false;
  for (const auto& t : n.inputs)
    if (t.op() != Op::Placeholder) return false;
  return true;
}

std::string shape_str(const std::vector<std::int64_t>& v) { return Shape(v).str(); }

// The three arrays of a fed SparseValue (engine/function.hpp), checked against the placeholder
// and padded to a power-of-two count with padding entries (first index -1, value 0), which the
// sparse kernels skip (ops/kernels/sparse.hpp).
void flatten_sparse(std::size_t i, const Node& sp, const SparseValue& v,
                    std::vector<NDArray>& out) {
  auto fail = [&](const std::string& what) {
    throw ValueError("K::function: input " + std::to_string(i) + " for sparse placeholder " +
                     describe(sp) + ": " + what);
  };
  const int rank = sp.shape.ndim();
  const Shape& ds = v.dense_shape;
  bool ok = ds.ndim() == rank;
  for (int d = 0; ok && d < rank; ++d) ok = ds[d] >= 0 && (sp.shape[d] < 0 || sp.shape[d] == ds[d]);
  if (!ok) fail("dense_shape " + ds.str() + " does not fit");
  if (!v.indices.defined() || !v.values.defined()) fail("indices or values is an empty NDArray");
  if (v.indices.dtype() != DType::int64 && v.indices.dtype() != DType::int32)
    fail("indices must be int64 or int32, got " + std::string(dtype_name(v.indices.dtype())));
  const std::int64_t nnz = v.indices.ndim() == 2 ? v.indices.shape()[0] : -1;
  if (nnz < 0 || v.indices.shape()[1] != rank)
    fail("indices of shape " + v.indices.shape().str() + " for a rank-" + std::to_string(rank) +
         " tensor; they must be (nnz, " + std::to_string(rank) + ")");
  if (v.values.ndim() != 1 || v.values.shape()[0] != nnz)
    fail("values of shape " + v.values.shape().str() + " for indices of shape " +
         v.indices.shape().str() + "; they must be (" + std::to_string(nnz) + ",)");
  if (v.values.dtype() != sp.dtype)
    fail("values of dtype " + std::string(dtype_name(v.values.dtype())) + " for a placeholder of " +
         std::string(dtype_name(sp.dtype)));
  const std::int64_t cap =
      nnz == 0 ? 0 : static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(nnz)));
  NDArray idx(Shape{cap, rank}, DType::int64);
  std::int64_t* pi = idx.data<std::int64_t>();
  for (std::int64_t k = nnz; k < cap; ++k) pi[k * rank] = -1;
  // Copied and checked in a tight loop (data<T>() checks the dtype on every call; the message
  // is built after it, for the first entry out of range).
  const bool wide = v.indices.dtype() == DType::int64;
  const std::int64_t* i64 = wide ? v.indices.data<std::int64_t>() : nullptr;
  const std::int32_t* i32 = wide ? nullptr : v.indices.data<std::int32_t>();
  const std::vector<std::int64_t> dims(ds.begin(), ds.end());
  std::int64_t bad = -1;
  for (std::int64_t k = 0, at = 0; k < nnz; ++k) {
    bool inside = true;
    for (int d = 0; d < rank; ++d, ++at) {
      const std::int64_t x = wide ? i64[at] : i32[at];
      inside = inside & (x >= 0) & (x < dims[static_cast<std::size_t>(d)]);
      pi[at] = x;
    }
    if (!inside) {
      bad = k;
      break;
    }
  }
  if (bad >= 0) {
    std::vector<std::int64_t> row;
    for (int e = 0; e < rank; ++e)
      row.push_back(static_cast<std::int64_t>(v.indices.item(bad * rank + e)));
    fail("indices[" + std::to_string(bad) + "] = " + shape_str(row) +
         " is out of range for dense_shape " + ds.str());
  }
  NDArray vals(Shape{cap}, sp.dtype);
  if (nnz > 0) std::memcpy(vals.raw_data(), v.values.raw_data(), v.values.nbytes());
  std::vector<std::int64_t> carrier(ds.begin(), ds.end());
  carrier.push_back(0);
  out.push_back(std::move(idx));
  out.push_back(std::move(vals));
  out.push_back(NDArray(Shape(carrier), sp.dtype));
}

void collect_assigns(Node* n, std::vector<Node*>& out) {
  if (n->op == Op::Assign) {
    out.push_back(n);
  } else if (n->op == Op::Group) {
    for (auto& t : n->inputs) collect_assigns(t.node_ptr().get(), out);
  }
}

}  // namespace

Plan::~Plan() = default;

struct FunctionImpl {
  // `inputs` are the placeholders fed (a sparse placeholder's three); `given` the inputs as the
  // caller listed them, and `sparse` whether each is a sparse placeholder.
  std::vector<Tensor> inputs, outputs, updates, given;
  std::vector<bool> sparse;
  std::vector<std::size_t> given_index;  // per fed placeholder: its input's position in `given`
  std::vector<Node*> assigns;
  const Backend* backend = nullptr;
  bool fuse = true;
  bool fold = true;
  int loop_statics = -1;  // FunctionOptions::loop_statics
  mutable std::mutex mu;  // guards plans, their busy flags and last
  mutable std::vector<std::unique_ptr<Plan>> plans;
  mutable Plan* last = nullptr;

  void validate_feed(const std::vector<NDArray>& fed) const;
  std::vector<NDArray> flatten(const std::vector<Feed>& feeds) const;
  void run_flat(const std::vector<NDArray>& inputs, std::vector<NDArray>& outputs) const;
  // A plan for the fed shapes that no other call is running (compiled if there is none); it is
  // the caller's until release().
  Plan* acquire(const std::vector<NDArray>& fed) const;
  void release(Plan* p) const;
  std::unique_ptr<Plan> compile(const std::vector<Shape>& fed) const;
  void execute(Plan& p, const std::vector<NDArray>& fed) const;
  void execute_ptrs(Plan& p) const;
};

Function::Function(std::vector<Tensor> inputs, std::vector<Tensor> outputs,
                   std::vector<Tensor> updates, FunctionOptions options) {
  ensure_ops_registered();
  auto impl = std::make_shared<FunctionImpl>();
  std::vector<Tensor> flat;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      throw ValueError("K::function: inputs[" + std::to_string(i) + "] is a null tensor");
    const bool sparse = is_sparse_placeholder(inputs[i].node());
    if (!sparse && inputs[i].op() == Op::SparseTensor)
      throw ValueError("K::function: inputs[" + std::to_string(i) + "] " +
                       describe(inputs[i].node()) +
                       " is a sparse tensor computed in the graph; only sparse placeholders can "
                       "be fed");
    impl->sparse.push_back(sparse);
    for (std::size_t p = 0; p < (sparse ? 3 : 1); ++p) impl->given_index.push_back(i);
    if (sparse)
      flat.insert(flat.end(), inputs[i].node().inputs.begin(), inputs[i].node().inputs.end());
    else
      flat.push_back(inputs[i]);
    if (!sparse && inputs[i].op() != Op::Placeholder && !options.feed_intermediates)
      throw ValueError("K::function: inputs[" + std::to_string(i) + "] " +
                       describe(inputs[i].node()) +
                       " is not a placeholder; only placeholders can be fed");
    for (std::size_t j = 0; j < i; ++j)
      if (inputs[j] == inputs[i])
        throw ValueError("K::function: placeholder " + describe(inputs[i].node()) +
                         " is listed twice in inputs");
  }
  for (std::size_t i = 0; i < outputs.size(); ++i)
    if (!outputs[i].defined())
      throw ValueError("K::function: outputs[" + std::to_string(i) +
                       "] is a null tensor (K::gradients returns null for a variable the loss "
                       "does not depend on)");
  std::unordered_map<Node*, std::size_t> targets;
  for (std::size_t i = 0; i < updates.size(); ++i) {
    if (!updates[i].defined() || (updates[i].op() != Op::Assign && updates[i].op() != Op::Group))
      throw ValueError("K::function: updates[" + std::to_string(i) +
                       "] is not an update op; build updates with K::update, K::update_add, "
                       "K::update_sub or K::moving_average_update");
    std::vector<Node*> as;
    collect_assigns(updates[i].node_ptr().get(), as);
    for (Node* a : as) {
      Node* var = a->inputs[0].node_ptr().get();
      auto [it, inserted] = targets.emplace(var, i);
      if (!inserted)
        throw ValueError("K::function: variable " + describe(*var) + " is updated twice (updates[" +
                         std::to_string(it->second) + "] and updates[" + std::to_string(i) +
                         "]); a Function may assign each variable at most once");
      impl->assigns.push_back(a);
    }
  }
  // Updates that are control inputs (K::control_dependencies) of what the Function evaluates
  // run as its updates too.
  std::vector<Node*> roots;
  for (const auto& t : outputs) roots.push_back(t.node_ptr().get());
  for (const auto& t : updates) roots.push_back(t.node_ptr().get());
  // The compiler's walk: it stops at eagerly evaluated nodes and at fed inputs.
  std::unordered_set<Node*> fed;
  for (const auto& t : flat) fed.insert(t.node_ptr().get());
  const auto walk = reachable_in_tape_order(
      roots, [&](Node* n) { return !n->eager_value.defined() && !fed.count(n); },
      [](Node*) { return false; }, /*control=*/true);
  for (Node* n : walk) {
    if (n->eager_value.defined() || fed.count(n)) continue;
    for (const auto& c : n->control_inputs) {
      std::vector<Node*> as;
      collect_assigns(c.node_ptr().get(), as);
      for (Node* a : as) {
        if (std::find(impl->assigns.begin(), impl->assigns.end(), a) != impl->assigns.end())
          continue;
        Node* var = a->inputs[0].node_ptr().get();
        if (!targets.emplace(var, updates.size()).second)
          throw ValueError("K::function: variable " + describe(*var) +
                           " is updated twice (a control dependency and another update); a "
                           "Function may assign each variable at most once");
        impl->assigns.push_back(a);
      }
    }
  }
  impl->inputs = std::move(flat);
  impl->given = std::move(inputs);
  impl->outputs = std::move(outputs);
  impl->updates = std::move(updates);
  impl->fuse = options.fuse;
  impl->fold = options.fold;
  impl->loop_statics = options.loop_statics;
  impl->backend = options.backend.empty() ? &active_backend() : &backend_by_name(options.backend);
  impl_ = std::move(impl);
}

const std::vector<Tensor>& Function::inputs() const { return impl_->given; }
const std::vector<Tensor>& Function::outputs() const { return impl_->outputs; }
std::size_t Function::num_plans() const {
  if (!impl_) return 0;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->plans.size();
}
std::size_t Function::num_steps() const {
  if (!impl_) return 0;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last ? impl_->last->steps.size() : 0;
}
std::string Function::describe_plan() const {
  if (!impl_) return "(no plan compiled yet)\n";
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->last) return "(no plan compiled yet)\n";
  std::string out;
  for (const auto& s : impl_->last->steps) {
    const Value& v = impl_->last->values[static_cast<std::size_t>(s.out)];
    out += std::string(op_name(s.node->op)) + " " + v.shape.str() + " " +
           std::string(dtype_name(v.dtype)) + " '" + s.node->name + "'";
    if (s.fused)
      out += " [fused: " + std::to_string(s.fused->instrs.size()) + " kernels, " +
             (s.fused->sources.empty()
                  ? std::string()
                  : std::to_string(s.fused->sources.size()) + " input(s) computed per chunk, ") +
             std::to_string(s.fused->out_values.size()) + " outputs, " +
             std::to_string((s.fused->scratch_bytes + 1023) / 1024) + " KB of registers]";
    else if (s.epilogue)
      out += " [epilogue: " + std::string(op_name(s.epilogue->node->op)) + " '" +
             s.epilogue->node->name + "', " + std::to_string(s.epilogue->pass->instrs.size()) +
             " kernels, " + std::to_string(s.epilogue->pass->out_values.size()) + " outputs]";
    else
      for (int o : s.extra_outs) {  // a joint step (OpDef::pair)
        const Value& w = impl_->last->values[static_cast<std::size_t>(o)];
        out += " [and " + std::string(op_name(w.node->op)) + " " + w.shape.str() + " '" +
               w.node->name + "']";
      }
    out += "\n";
  }
  out += "commits: " + std::to_string(impl_->last->commits.size()) + " copied, " +
         std::to_string(impl_->last->commits_in_place) + " written in place\n";
  return out;
}
std::string Function::plan_dot() const {
  if (!impl_) return "digraph plan {}\n";
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last ? ktape::plan_dot(*impl_->last) : "digraph plan {}\n";
}
std::size_t Function::arena_bytes() const {
  if (!impl_) return 0;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last ? impl_->last->arena_bytes : 0;
}

void FunctionImpl::validate_feed(const std::vector<NDArray>& fed) const {
  if (fed.size() != inputs.size())
    throw ValueError("K::function: expected " + std::to_string(inputs.size()) +
                     " input value(s), got " + std::to_string(fed.size()));
  for (std::size_t i = 0; i < fed.size(); ++i) {
    const Node& ph = inputs[i].node();
    const NDArray& a = fed[i];
    auto fail = [&](const std::string& what) {
      const std::size_t at = i < given_index.size() ? given_index[i] : i;
      throw ValueError("K::function: input " + std::to_string(at) + " for placeholder " +
                       describe(ph) + " " + what);
    };
    if (!a.defined()) fail("was fed an empty NDArray");
    if (a.dtype() != ph.dtype && !(is_learning_phase(ph) && a.ndim() == 0))
      fail("was fed an array of dtype " + std::string(dtype_name(a.dtype())));
    bool ok = a.ndim() == ph.shape.ndim();
    for (int d = 0; ok && d < a.ndim(); ++d) ok = ph.shape[d] < 0 || ph.shape[d] == a.shape()[d];
    if (!ok) fail("was fed an array of shape " + a.shape().str());
  }
}

std::vector<NDArray> FunctionImpl::flatten(const std::vector<Feed>& feeds) const {
  if (feeds.size() != given.size())
    throw ValueError("K::function: expected " + std::to_string(given.size()) +
                     " input value(s), got " + std::to_string(feeds.size()));
  std::vector<NDArray> out;
  for (std::size_t i = 0; i < feeds.size(); ++i) {
    const Node& ph = given[i].node();
    if (sparse[i] && !feeds[i].is_sparse())
      throw ValueError("K::function: input " + std::to_string(i) + " for sparse placeholder " +
                       describe(ph) + " was fed a dense array; feed a K::SparseValue");
    if (!sparse[i] && feeds[i].is_sparse())
      throw ValueError("K::function: input " + std::to_string(i) + " for placeholder " +
                       describe(ph) +
                       " was fed a K::SparseValue; only a sparse placeholder takes one");
    if (sparse[i])
      flatten_sparse(i, ph, feeds[i].sparse(), out);
    else
      out.push_back(feeds[i].array());
  }
  return out;
}

Plan* FunctionImpl::acquire(const std::vector<NDArray>& fed) const {
  auto free_match = [&](const Plan& p) {
    if (p.busy) return false;
    for (std::size_t i = 0; i < fed.size(); ++i)
      if (p.sig[i] != fed[i].shape()) return false;
    return true;
  };
  {
    std::lock_guard<std::mutex> lock(mu);
    Plan* found = last && free_match(*last) ? last : nullptr;
    for (std::size_t i = 0; !found && i < plans.size(); ++i)
      if (free_match(*plans[i])) found = plans[i].get();
    if (found) {
      found->busy = true;
      return last = found;
    }
  }
  std::vector<Shape> shapes;
  for (const auto& a : fed) shapes.push_back(a.shape());
  auto plan = compile(shapes);  // outside the lock: other calls go on meanwhile
  std::lock_guard<std::mutex> lock(mu);
  plan->busy = true;
  plans.push_back(std::move(plan));
  return last = plans.back().get();
}

void FunctionImpl::release(Plan* p) const {
  std::lock_guard<std::mutex> lock(mu);
  p->busy = false;
}

namespace {

// A plan taken from a Function's pool for one call.
class PlanLease {
 public:
  PlanLease(const FunctionImpl& f, const std::vector<NDArray>& fed) : f_(f), p_(f.acquire(fed)) {}
  ~PlanLease() { f_.release(p_); }
  PlanLease(const PlanLease&) = delete;
  PlanLease& operator=(const PlanLease&) = delete;
  Plan& plan() const { return *p_; }

 private:
  const FunctionImpl& f_;
  Plan* p_;
};

// The variable locks of one call (Plan::var_locks), held until destruction. None on a thread
// that is already inside a call.
class VariableLocks {
 public:
  explicit VariableLocks(const Plan& p) : p_(t_call_depth == 0 ? &p : nullptr) {
    ++t_call_depth;
    if (!p_) return;
    for (const auto& [mu, exclusive] : p_->var_locks) exclusive ? mu->lock() : mu->lock_shared();
  }
  ~VariableLocks() {
    --t_call_depth;
    if (!p_) return;
    for (auto it = p_->var_locks.rbegin(); it != p_->var_locks.rend(); ++it)
      it->second ? it->first->unlock() : it->first->unlock_shared();
  }
  VariableLocks(const VariableLocks&) = delete;
  VariableLocks& operator=(const VariableLocks&) = delete;

 private:
  const Plan* p_;
};

}  // namespace

VariableAccess::VariableAccess(const Node& var, bool write)
    : mu_(t_call_depth == 0 ? var.storage_lock.get() : nullptr), write_(write) {
  if (mu_) write_ ? mu_->lock() : mu_->lock_shared();
}
VariableAccess::~VariableAccess() {
  if (mu_) write_ ? mu_->unlock() : mu_->unlock_shared();
}

std::unique_ptr<Plan> FunctionImpl::compile(const std::vector<Shape>& fed) const {
  return compile_plan({inputs, outputs, updates, assigns, *backend, fuse, fold, fed, loop_statics});
}

void FunctionImpl::execute(Plan& p, const std::vector<NDArray>& fed) const {
  ++p.loop_run;  // a call of its own: nothing kept of the statics carries over (loops advance it
                 // once per run instead, through function_execute_raw's caller)
  for (std::size_t i = 0; i < fed.size(); ++i) {
    void* ptr_i = const_cast<void*>(fed[i].raw_data());
    if (fed[i].dtype() != inputs[i].dtype()) {  // the learning phase fed as a number
      p.lp_byte = fed[i].item(0) != 0.0;
      ptr_i = &p.lp_byte;
    }
    p.fed_ptrs[i] = ptr_i;
  }
  execute_ptrs(p);
}

void FunctionImpl::execute_ptrs(Plan& p) const {
  for (std::size_t i = 0; i < p.fed_ptrs.size(); ++i)
    for (ArrayRef* a : p.fed_refs[i]) a->data = p.fed_ptrs[i];
  for (auto& s : p.steps) {
    if (s.random) s.call.counter = s.node->counter.fetch_add(1);
    s.fn(s.call);
  }
}

void Function::run_feeds(const std::vector<Feed>& inputs, std::vector<NDArray>& outputs) const {
  if (!impl_) throw ValueError("K::function: calling an empty Function");
  impl_->run_flat(impl_->flatten(inputs), outputs);
}

void Function::run(const std::vector<NDArray>& inputs, std::vector<NDArray>& outputs) const {
  if (!impl_) throw ValueError("K::function: calling an empty Function");
  const FunctionImpl& f = *impl_;
  if (f.inputs.size() != f.given.size())  // sparse placeholders: checked and expanded
    return f.run_flat(f.flatten({inputs.begin(), inputs.end()}), outputs);
  f.run_flat(inputs, outputs);
}

namespace {

// A call's outputs computed straight into the caller's arrays where they can be (Plan::out_locs:
// an output that is a whole arena buffer), instead of copied there after the run: when the
// caller passes back an array of the output's dtype and shape whose buffer no other array
// shares and no input overlaps (a training loop or a benchmark calling run() with the same
// output vector). The plan's pointers go back to the arena when the call ends, however it ends;
// a call that throws may have written part of such an array.
class DirectOutputs {
 public:
  DirectOutputs(Plan& p, const std::vector<NDArray>& inputs, std::vector<NDArray>& outputs)
      : p_(p), into_(p.out_into) {  // sized at compile: a call allocates nothing here
    std::fill(into_.begin(), into_.end(), nullptr);
    for (std::size_t i = 0; i < std::min(p.outputs.size(), outputs.size()); ++i) {
      const Value& v = p.values[static_cast<std::size_t>(p.outputs[i])];
      NDArray& o = outputs[i];
      if (p.out_locs[i].empty() || v.bytes == 0 || !o.defined() || !o.sole_owner() ||
          o.dtype() != v.dtype || o.shape() != v.shape)
        continue;
      const auto* lo = static_cast<const char*>(o.raw_data());
      bool overlaps = false;
      for (const NDArray& in : inputs) {
        const auto* b = static_cast<const char*>(in.raw_data());
        overlaps = overlaps || (b != nullptr && b < lo + o.nbytes() && lo < b + in.nbytes());
      }
      if (overlaps) continue;
      into_[i] = static_cast<char*>(o.raw_data());
      point(i, into_[i]);
      any_ = true;
    }
  }
  ~DirectOutputs() {
    for (std::size_t i = 0; any_ && i < into_.size(); ++i)
      if (into_[i]) point(i, static_cast<char*>(value_ptr(p_, p_.outputs[i])));
  }
  DirectOutputs(const DirectOutputs&) = delete;
  DirectOutputs& operator=(const DirectOutputs&) = delete;

  bool into(std::size_t i) const { return into_[i] != nullptr; }
  // Where value v is after the run: in a caller's array when its buffer went there.
  const void* source(int v) const {
    const int root = p_.values[static_cast<std::size_t>(v)].root;
    for (std::size_t i = 0; any_ && i < into_.size(); ++i)
      if (into_[i] && p_.values[static_cast<std::size_t>(p_.outputs[i])].root == root)
        return into_[i] + p_.values[static_cast<std::size_t>(v)].alias_offset;
    return value_ptr(p_, v);
  }

 private:
  void point(std::size_t i, char* home) {
    for (std::size_t k = 0; k < p_.out_locs[i].size(); ++k)
      *p_.out_locs[i][k] = home + p_.out_loc_offsets[i][k];
  }

  Plan& p_;
  std::vector<char*>& into_;
  bool any_ = false;  // some output goes into a caller's array
};

}  // namespace

void FunctionImpl::run_flat(const std::vector<NDArray>& inputs,
                            std::vector<NDArray>& outputs) const {
  const FunctionImpl& f = *this;
  f.validate_feed(inputs);
  const PlanLease lease(f, inputs);
  Plan& p = lease.plan();
  const VariableLocks locks(p);
  // (`outputs` may be `inputs`: resized only after the run.)
  const DirectOutputs direct(p, inputs, outputs);
  f.execute(p, inputs);
  if (outputs.size() != p.outputs.size()) outputs.resize(p.outputs.size());
  for (std::size_t i = 0; i < p.outputs.size(); ++i) {
    if (direct.into(i)) continue;
    const Value& v = p.values[static_cast<std::size_t>(p.outputs[i])];
    NDArray& o = outputs[i];
    if (!o.defined() || o.dtype() != v.dtype || o.shape() != v.shape) o = NDArray(v.shape, v.dtype);
    std::memcpy(o.raw_data(), direct.source(p.outputs[i]), v.bytes);
  }
  for (const auto& c : p.commits) std::memcpy(c.dst, direct.source(c.value), c.bytes);
}

std::vector<NDArray> Function::operator()(const std::vector<NDArray>& inputs) const {
  std::vector<NDArray> out;
  run(inputs, out);
  return out;
}

NDArray evaluate(const Tensor& t) {
  Node& n = t.node();
  if (n.eager_value.defined()) return n.eager_value.clone();
  if (!n.concrete)
    for (Node* m : reachable_in_tape_order({&n}))
      if (m->op == Op::Placeholder && !m->value.defined())
        throw ValueError("K::eval: tensor " + describe(n) + " depends on placeholder " +
                         describe(*m) + "; feed it through K::function");
  const bool is_update = n.op == Op::Assign || n.op == Op::Group;
  Function f({}, {t}, is_update ? std::vector<Tensor>{t} : std::vector<Tensor>{});
  return f({})[0];
}

std::unique_ptr<Plan> function_compile(const Function& f, const std::vector<Shape>& shapes) {
  return FunctionAccess::impl(f).compile(shapes);
}

void function_execute_raw(const Function& f, Plan& p, void* const* fed, void* const* outs) {
  const FunctionImpl& fi = FunctionAccess::impl(f);
  for (std::size_t i = 0; i < p.fed_ptrs.size(); ++i) p.fed_ptrs[i] = fed[i];
  for (std::size_t i = 0; i < p.outputs.size(); ++i)
    for (std::size_t k = 0; k < p.out_locs[i].size(); ++k)
      *p.out_locs[i][k] = static_cast<char*>(outs[i]) + p.out_loc_offsets[i][k];
  fi.execute_ptrs(p);
  for (std::size_t i = 0; i < p.outputs.size(); ++i) {
    if (!p.out_locs[i].empty()) continue;
    const Value& v = p.values[static_cast<std::size_t>(p.outputs[i])];
    const void* src = p.out_same[i] >= 0 ? outs[p.out_same[i]] : value_ptr(p, p.outputs[i]);
    // A caller may give two outputs of the same storage one buffer (a loop storing them once).
    bool done = v.bytes == 0 || src == outs[i];
    for (std::size_t j = 0; j < i && !done; ++j) {
      const Value& w = p.values[static_cast<std::size_t>(p.outputs[j])];
      done = outs[j] == outs[i] && w.root == v.root && w.alias_offset == v.alias_offset &&
             w.bytes == v.bytes;
    }
    if (!done) std::memcpy(outs[i], src, v.bytes);
  }
  for (std::size_t i = 0; i < p.outputs.size(); ++i) {
    if (p.out_locs[i].empty()) continue;
    char* home = static_cast<char*>(value_ptr(p, p.outputs[i]));
    for (std::size_t k = 0; k < p.out_locs[i].size(); ++k)
      *p.out_locs[i][k] = home + p.out_loc_offsets[i][k];
  }
}

bool in_eager_scope() { return t_eager > 0; }
EagerScope::EagerScope(bool eager) : previous_(t_eager) { t_eager = eager ? 1 : 0; }
EagerScope::~EagerScope() { t_eager = previous_; }

}  // namespace ktape
