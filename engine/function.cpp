#include "engine/function.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "engine/backend.hpp"
#include "engine/errors.hpp"
#include "engine/fusion.hpp"
#include "engine/plan.hpp"
#include "engine/scan_exec.hpp"

namespace ktape {

namespace {

thread_local int t_eager = 0;
// Calls in progress on this thread: a nested call (a print hook that evaluates a tensor) runs
// under the locks its enclosing call holds.
thread_local int t_call_depth = 0;

void copy_kernel(const KernelCall& c) {
  std::memcpy(c.out.data, c.in[0].data,
              static_cast<std::size_t>(c.out.size) * dtype_size(c.out.dtype));
}

std::string describe(const Node& n) {
  return "'" + n.name + "' (shape " + n.shape.str() + ", " + std::string(dtype_name(n.dtype)) + ")";
}

bool is_learning_phase(const Node& n) {
  return n.op == Op::Placeholder && n.attrs.str == "learning_phase";
}

// First-fit allocator over arena offsets.
class OffsetAllocator {
 public:
  std::size_t alloc(std::size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;  // bytes <= PTRDIFF_MAX (array_bytes): no wrap
    if (bytes == 0) bytes = 64;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= bytes) {
        const std::size_t off = it->first;
        if (it->second == bytes) {
          free_.erase(it);
        } else {
          it->first += bytes;
          it->second -= bytes;
        }
        return off;
      }
    }
    // Grow: extend a free block touching the end, if any.
    if (!free_.empty() && free_.back().first + free_.back().second == top_) {
      const std::size_t off = free_.back().first;
      free_.pop_back();
      top_ = off;
      if (__builtin_add_overflow(top_, bytes, &top_) || top_ > PTRDIFF_MAX)
        throw ResourceExhaustedError("K::function: the plan's buffers need more than " +
                                     std::to_string(PTRDIFF_MAX) + " bytes");
      return off;
    }
    const std::size_t off = top_;
    if (__builtin_add_overflow(top_, bytes, &top_) || top_ > PTRDIFF_MAX)
      throw ResourceExhaustedError("K::function: the plan's buffers need more than " +
                                   std::to_string(PTRDIFF_MAX) + " bytes");
    return off;
  }
  void release(std::size_t off, std::size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    if (bytes == 0) bytes = 64;
    auto it = std::lower_bound(free_.begin(), free_.end(), std::make_pair(off, std::size_t{0}));
    it = free_.insert(it, {off, bytes});
    // merge with next
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }
  std::size_t top() const { return top_; }

 private:
  std::vector<std::pair<std::size_t, std::size_t>> free_;
  std::size_t top_ = 0;
};

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
  std::vector<Tensor> inputs, outputs, updates;
  std::vector<Node*> assigns;
  const Backend* backend = nullptr;
  bool fuse = true;
  bool fold = true;
  mutable std::mutex mu;  // guards plans, their busy flags and last
  mutable std::vector<std::unique_ptr<Plan>> plans;
  mutable Plan* last = nullptr;

  void validate_feed(const std::vector<NDArray>& fed) const;
  // A plan for the fed shapes that no other call is running (compiled if there is none); it is
  // the caller's until release().
  Plan* acquire(const std::vector<NDArray>& fed) const;
  void release(Plan* p) const;
  std::unique_ptr<Plan> compile(const std::vector<Shape>& fed) const;
  void execute(Plan& p, const std::vector<NDArray>& fed) const;
  void execute_ptrs(Plan& p) const;
  void* ptr(const Plan& p, int v) const {
    const Value& val =
        p.values[static_cast<std::size_t>(p.values[static_cast<std::size_t>(v)].root)];
    const std::size_t off = p.values[static_cast<std::size_t>(v)].alias_offset;
    switch (val.kind) {
      case Kind::kArena:
        return static_cast<char*>(p.arena.get()) + val.offset + off;
      case Kind::kExternal:
        return static_cast<char*>(val.ext) + off;
      case Kind::kFed:
        return static_cast<char*>(p.fed_ptrs[static_cast<std::size_t>(val.fed)]) + off;
    }
    return nullptr;
  }
};

Function::Function(std::vector<Tensor> inputs, std::vector<Tensor> outputs,
                   std::vector<Tensor> updates, FunctionOptions options) {
  ensure_ops_registered();
  auto impl = std::make_shared<FunctionImpl>();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      throw ValueError("K::function: inputs[" + std::to_string(i) + "] is a null tensor");
    if (inputs[i].op() != Op::Placeholder && !options.feed_intermediates)
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
  impl->inputs = std::move(inputs);
  impl->outputs = std::move(outputs);
  impl->updates = std::move(updates);
  impl->fuse = options.fuse;
  impl->fold = options.fold;
  impl->backend = options.backend.empty() ? &active_backend() : &backend_by_name(options.backend);
  impl_ = std::move(impl);
}

const std::vector<Tensor>& Function::inputs() const { return impl_->inputs; }
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
             std::to_string(s.fused->out_values.size()) + " outputs]";
    out += "\n";
  }
  out += "commits: " + std::to_string(impl_->last->commits.size()) + " copied, " +
         std::to_string(impl_->last->commits_in_place) + " written in place\n";
  return out;
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
      throw ValueError("K::function: input " + std::to_string(i) + " for placeholder " +
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
  auto plan = std::make_unique<Plan>();
  Plan& p = *plan;
  p.sig = fed;

  // 1. Prune: nodes the outputs and updates need, in tape (id) order. A pure node computed only
  // from constants is folded: evaluated once here, then read like a constant.
  std::vector<Node*> order;
  std::unordered_set<Node*> fed_set;
  for (const auto& t : inputs) fed_set.insert(t.node_ptr().get());
  std::unordered_map<Node*, bool> foldable_memo;
  std::function<bool(Node*)> foldable = [&](Node* n) -> bool {
    if (n->op == Op::Constant) return true;
    auto it = foldable_memo.find(n);
    if (it != foldable_memo.end()) return it->second;
    bool f = fold && op_def(n->op).pure && n->op != Op::Placeholder && n->op != Op::Variable &&
             !n->print_hook && !n->inputs.empty() && !fed_set.count(n);
    for (auto& in : n->inputs) f = f && foldable(in.node_ptr().get());
    return foldable_memo[n] = f;
  };
  {
    std::unordered_set<Node*> seen;
    std::vector<Node*> stack;
    for (const auto& t : outputs) stack.push_back(t.node_ptr().get());
    for (const auto& t : updates) stack.push_back(t.node_ptr().get());
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      order.push_back(n);
      if (n->eager_value.defined() || fed_set.count(n)) continue;
      if (n->op != Op::Constant && foldable(n)) {
        Function once({}, {Tensor(n->shared_from_this())}, {},
                      {.backend = backend->name, .fuse = fuse, .fold = false});
        p.folded.emplace(n, once({})[0]);
        continue;
      }
      for (auto& in : n->inputs) stack.push_back(in.node_ptr().get());
    }
    std::sort(order.begin(), order.end(), [](Node* a, Node* b) { return a->id < b->id; });
  }

  // 2. Values with concrete shapes.
  std::unordered_map<Node*, int> index;
  p.values.reserve(order.size() + assigns.size());
  std::vector<Shape> in_shapes;
  for (Node* n : order) {
    Value v;
    v.node = n;
    v.dtype = n->dtype;
    const int vi = static_cast<int>(p.values.size());
    v.root = vi;
    if (n->eager_value.defined()) {
      v.kind = Kind::kExternal;
      v.ext = n->eager_value.raw_data();
      v.shape = n->eager_value.shape();
    } else if (auto fit = p.folded.find(n); fit != p.folded.end()) {
      v.kind = Kind::kExternal;
      v.ext = fit->second.raw_data();
      v.shape = fit->second.shape();
    } else if (n->op == Op::Placeholder || fed_set.count(n)) {
      int k = -1;
      for (std::size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i].node_ptr().get() == n) k = static_cast<int>(i);
      if (k >= 0) {
        v.kind = Kind::kFed;
        v.fed = k;
        v.shape = fed[static_cast<std::size_t>(k)];
      } else if (n->value.defined()) {  // placeholder with a default (the learning phase)
        v.kind = Kind::kExternal;
        v.ext = n->value.raw_data();
        v.shape = n->value.shape();
      } else {
        throw ValueError("K::function: you must feed a value for placeholder " + describe(*n) +
                         ": it is needed by the outputs or updates but is not in inputs");
      }
    } else if (n->op == Op::Variable || n->op == Op::Constant) {
      v.kind = Kind::kExternal;
      v.ext = n->value.raw_data();
      v.shape = n->value.shape();
    } else {
      in_shapes.clear();
      for (auto& in : n->inputs)
        in_shapes.push_back(
            p.values[static_cast<std::size_t>(index.at(in.node_ptr().get()))].shape);
      const OpDef& def = op_def(n->op);
      if (n->op == Op::Scan) {
        v.scan = scan_layout(*n, in_shapes, backend->name, fuse, fold);
        v.shape = scan_layout_shape(*v.scan, -1);
      } else if (n->op == Op::ScanPart || n->op == Op::ScanEmbed) {
        const auto& ref =
            p.values[static_cast<std::size_t>(index.at(n->inputs[1].node_ptr().get()))];
        v.scan = ref.scan;
        if (!v.scan)
          throw ValueError("K::function: " + describe(*n) + " does not refer to a scan node");
        const Value& src =
            p.values[static_cast<std::size_t>(index.at(n->inputs[0].node_ptr().get()))];
        if (n->op == Op::ScanPart &&
            p.values[static_cast<std::size_t>(src.root)].kind == Kind::kArena) {
          // A view into the flat buffer: no copy.
          v.root = src.root;
          v.alias_offset =
              src.alias_offset +
              static_cast<std::size_t>(v.scan->offset[static_cast<std::size_t>(n->attrs.ints[0])]) *
                  dtype_size(n->dtype);
        }
        v.shape = scan_layout_shape(
            *v.scan, n->op == Op::ScanPart ? static_cast<int>(n->attrs.ints[0]) : -1);
      } else {
        v.shape = def.shape(*n, in_shapes);
      }
      if (!v.shape.is_fully_defined())
        throw ValueError(std::string("K::function: could not infer the shape of ") + describe(*n) +
                         " for the fed input shapes");
      int alias = def.alias_input;
      if (alias < 0 && def.alias_if_same_shape && in_shapes[0] == v.shape) alias = 0;
      if (alias >= 0) {
        const Value& src = p.values[static_cast<std::size_t>(
            index.at(n->inputs[static_cast<std::size_t>(alias)].node_ptr().get()))];
        v.root = src.root;
        v.alias_offset = src.alias_offset;
      }
    }
    v.bytes = array_bytes(v.shape, v.dtype, ("K::function: " + describe(*n)).c_str());
    v.size = v.shape.num_elements();
    index[n] = vi;
    p.values.push_back(std::move(v));
  }

  // 3. Steps: every non-alias computed node; then snapshots for updates whose value lives
  // outside the arena (a variable, constant or fed array could change before the commit).
  auto add_step = [&](int vi, KernelFn fn, const std::vector<int>& ins) {
    Step s;
    s.fn = fn;
    s.node = p.values[static_cast<std::size_t>(vi)].node;
    s.random = op_def(s.node->op).random;
    s.out = vi;
    s.in_values = ins;
    p.steps.push_back(std::move(s));
  };
  for (std::size_t vi = 0; vi < p.values.size(); ++vi) {
    Value& v = p.values[vi];
    if (v.root != static_cast<int>(vi) || v.kind != Kind::kArena) continue;
    Node* n = v.node;
    const OpDef& def = op_def(n->op);
    const DType kdt = def.dispatch_input < 0
                          ? n->dtype
                          : n->inputs[static_cast<std::size_t>(def.dispatch_input)].dtype();
    KernelFn fn = n->op == Op::Scan        ? &run_scan
                  : n->op == Op::ScanPart  ? &run_scan_part
                  : n->op == Op::ScanEmbed ? &run_scan_embed
                                           : find_kernel(*backend, n->op, kdt);
    if (!fn)
      throw NotImplementedError(std::string("K::function: no kernel for op ") + op_name(n->op) +
                                " with dtype " + std::string(dtype_name(kdt)) + " (node " +
                                describe(*n) + ") in backend '" + backend->name + "'");
    std::vector<int> ins;
    for (auto& in : n->inputs) ins.push_back(index.at(in.node_ptr().get()));
    add_step(static_cast<int>(vi), fn, ins);
  }
  for (Node* a : assigns) {
    const int vi = index.at(a);
    int root = p.values[static_cast<std::size_t>(vi)].root;
    int cv = vi;  // the value holding the new data (possibly a view)
    if (p.values[static_cast<std::size_t>(root)].kind != Kind::kArena) {
      Value snap = p.values[static_cast<std::size_t>(root)];
      snap.kind = Kind::kArena;
      snap.root = static_cast<int>(p.values.size());
      snap.ext = nullptr;
      snap.fed = -1;
      snap.alias_offset = 0;
      const int src = vi;
      p.values.push_back(snap);
      p.values.back().shape = p.values[static_cast<std::size_t>(vi)].shape;
      p.values.back().size = p.values[static_cast<std::size_t>(vi)].size;
      p.values.back().bytes = p.values[static_cast<std::size_t>(vi)].bytes;
      add_step(snap.root, &copy_kernel, {src});
      root = snap.root;
      cv = snap.root;
    }
    Node* var = a->inputs[0].node_ptr().get();
    const Value& rv = p.values[static_cast<std::size_t>(cv)];
    if (rv.shape != var->value.shape() || rv.dtype != var->value.dtype())
      throw ValueError("K::function: update of variable " + describe(*var) +
                       " computes a value of shape " + rv.shape.str() + " and dtype " +
                       std::string(dtype_name(rv.dtype)) +
                       "; it must keep the variable's shape and dtype");
    p.commits.push_back({var->value.raw_data(), cv, rv.bytes});
  }

  // 3b. Fuse elementwise chains (the outputs and committed values are always written out).
  if (fuse && backend->fuse_elementwise) {
    std::vector<bool> pinned(p.values.size(), false);
    for (const auto& t : outputs)
      pinned[static_cast<std::size_t>(
          p.values[static_cast<std::size_t>(index.at(t.node_ptr().get()))].root)] = true;
    for (const auto& c : p.commits)
      pinned[static_cast<std::size_t>(p.values[static_cast<std::size_t>(c.value)].root)] = true;
    fuse_elementwise(p, pinned);
  }

  // 3c. Commit in place: a new value written by an elementwise step (or fused pass) after every
  // read of the variable's old value goes straight into the variable, with no copy at the end.
  // (Within a fused pass, reads of the old value must come no later than the write: each chunk
  // is read before it is overwritten.) Only for backends whose elementwise kernels promise to
  // be safe in place (the cpu backend; not plugins).
  if (backend->fuse_elementwise) {
    std::vector<char> is_output(p.values.size(), 0), aliased(p.values.size(), 0);
    for (const auto& t : outputs)
      is_output[static_cast<std::size_t>(
          p.values[static_cast<std::size_t>(index.at(t.node_ptr().get()))].root)] = 1;
    for (std::size_t v = 0; v < p.values.size(); ++v)
      if (p.values[v].root != static_cast<int>(v) && p.values[v].node->op != Op::Assign &&
          p.values[v].node->op != Op::Group)
        aliased[static_cast<std::size_t>(p.values[v].root)] = 1;
    auto root_of = [&](int v) { return p.values[static_cast<std::size_t>(v)].root; };
    for (std::size_t ci = 0; ci < p.commits.size();) {
      const Commit& c = p.commits[ci];
      const int cv = root_of(c.value);  // the buffer holding the new value
      Value& v = p.values[static_cast<std::size_t>(cv)];
      bool ok = p.values[static_cast<std::size_t>(c.value)].alias_offset == 0 &&
                v.kind == Kind::kArena && !is_output[static_cast<std::size_t>(cv)] &&
                !aliased[static_cast<std::size_t>(cv)];
      int var_vi = -1;
      for (std::size_t u = 0; u < p.values.size(); ++u)
        if (p.values[u].kind == Kind::kExternal && p.values[u].ext == c.dst &&
            p.values[u].root == static_cast<int>(u))
          var_vi = static_cast<int>(u);
      if (var_vi >= 0 && is_output[static_cast<std::size_t>(var_vi)]) ok = false;
      int w = -1;
      for (std::size_t si = 0; ok && si < p.steps.size(); ++si) {
        const Step& st = p.steps[si];
        if (st.out == cv ||
            std::find(st.extra_outs.begin(), st.extra_outs.end(), cv) != st.extra_outs.end())
          w = static_cast<int>(si);
      }
      ok = ok && w >= 0 &&
           (p.steps[static_cast<std::size_t>(w)].fused ||
            op_def(p.steps[static_cast<std::size_t>(w)].node->op).elementwise);
      // A step that may throw after the write would leave the variable half-updated.
      for (std::size_t si = static_cast<std::size_t>(std::max(w, 0)); ok && si < p.steps.size();
           ++si)
        ok = !op_def(p.steps[si].node->op).may_throw && !p.steps[si].node->print_hook;
      for (std::size_t si = 0; ok && var_vi >= 0 && si < p.steps.size(); ++si) {
        const Step& st = p.steps[si];
        for (std::size_t k = 0; ok && k < st.in_values.size(); ++k) {
          if (root_of(st.in_values[k]) != var_vi) continue;
          if (static_cast<int>(si) < w) continue;
          if (static_cast<int>(si) > w || !st.fused) {
            ok = static_cast<int>(si) == w;  // the writer itself reads it, element by element
            continue;
          }
          // In the fused pass: every instruction reading input k runs no later than the writer.
          int writer = -1, last_read = -1;
          const auto& prog = *st.fused;
          for (std::size_t j = 0; j < prog.instrs.size(); ++j) {
            const auto& ins = prog.instrs[j];
            if (ins.out.where == FusedOperand::kOutput &&
                prog.out_values[static_cast<std::size_t>(ins.out.index)] == cv)
              writer = static_cast<int>(j);
            for (const auto& o : ins.ins)
              if (o.where == FusedOperand::kInput && o.index == static_cast<int>(k))
                last_read = static_cast<int>(j);
          }
          ok = writer >= 0 && last_read <= writer;
        }
      }
      if (!ok) {
        ++ci;
        continue;
      }
      v.kind = Kind::kExternal;
      v.ext = c.dst;
      p.commits.erase(p.commits.begin() + static_cast<long>(ci));
      ++p.commits_in_place;
    }
  }

  // 3d. Variable locks, ordered by node id: every call takes them in the same order.
  {
    std::map<std::int64_t, std::pair<std::shared_mutex*, bool>> locks;
    for (const Value& v : p.values)
      if (v.node->op == Op::Variable && v.node->storage_lock)
        locks.emplace(v.node->id, std::make_pair(v.node->storage_lock.get(), false));
    for (Node* a : assigns) {
      Node* var = a->inputs[0].node_ptr().get();
      locks[var->id] = {var->storage_lock.get(), true};
    }
    for (const auto& [id, l] : locks) p.var_locks.push_back(l);
  }

  // 4. Liveness and arena offsets.
  for (std::size_t si = 0; si < p.steps.size(); ++si)
    for (int in : p.steps[si].in_values) {
      Value& r = p.values[static_cast<std::size_t>(p.values[static_cast<std::size_t>(in)].root)];
      r.last_use = std::max(r.last_use, static_cast<int>(si));
    }
  for (const auto& t : outputs) {
    const int vi = index.at(t.node_ptr().get());
    p.outputs.push_back(vi);
    p.values[static_cast<std::size_t>(p.values[static_cast<std::size_t>(vi)].root)].pinned = true;
  }
  for (const auto& c : p.commits)
    p.values[static_cast<std::size_t>(p.values[static_cast<std::size_t>(c.value)].root)].pinned =
        true;
  OffsetAllocator arena;
  std::vector<int> outs;
  for (std::size_t si = 0; si < p.steps.size(); ++si) {
    outs.assign(1, p.steps[si].out);
    outs.insert(outs.end(), p.steps[si].extra_outs.begin(), p.steps[si].extra_outs.end());
    for (int o : outs) {
      Value& out = p.values[static_cast<std::size_t>(o)];
      out.offset = arena.alloc(out.bytes);
      if (!out.pinned && out.last_use < 0) out.last_use = static_cast<int>(si);  // dead result
    }
    std::unordered_set<int> freed;
    for (int in : p.steps[si].in_values) {
      const int r = p.values[static_cast<std::size_t>(in)].root;
      Value& rv = p.values[static_cast<std::size_t>(r)];
      if (rv.kind == Kind::kArena && !rv.pinned && rv.last_use == static_cast<int>(si) &&
          freed.insert(r).second)
        arena.release(rv.offset, rv.bytes);
    }
    for (int o : outs) {
      Value& out = p.values[static_cast<std::size_t>(o)];
      if (!out.pinned && out.last_use == static_cast<int>(si) && !freed.count(o))
        arena.release(out.offset, out.bytes);
    }
  }
  p.arena_bytes = arena.top();
  p.arena = aligned_buffer(p.arena_bytes);  // ResourceExhaustedError naming the bytes

  // 5. Resolve pointers.
  p.fed_refs.assign(inputs.size(), {});
  p.fed_ptrs.assign(inputs.size(), nullptr);
  for (auto& s : p.steps) {
    s.ins.resize(s.in_values.size());
    for (std::size_t k = 0; k < s.in_values.size(); ++k) {
      const Value& v = p.values[static_cast<std::size_t>(s.in_values[k])];
      const Value& r = p.values[static_cast<std::size_t>(v.root)];
      ArrayRef& a = s.ins[k];
      a.dims = v.shape.dims().data();
      a.ndim = v.shape.ndim();
      a.size = v.size;
      a.dtype = v.dtype;
      if (r.kind == Kind::kFed)
        a.data = nullptr;  // patched per call
      else
        a.data = ptr(p, s.in_values[k]);
    }
    const Value& o = p.values[static_cast<std::size_t>(s.out)];
    s.call.in = s.ins.data();
    s.call.n_in = static_cast<int>(s.ins.size());
    s.call.out = ArrayRef{ptr(p, s.out), o.shape.dims().data(), o.shape.ndim(), o.size, o.dtype};
    s.call.attrs = &s.node->attrs;
    s.call.seed = s.node->seed;
    if (o.scan) s.call.ctx = o.scan.get();
  }
  resolve_fused(p, [&](int v) { return ptr(p, v); });
  for (auto& s : p.steps)
    for (std::size_t k = 0; k < s.in_values.size(); ++k) {
      const Value& r = p.values[static_cast<std::size_t>(
          p.values[static_cast<std::size_t>(s.in_values[k])].root)];
      if (r.kind == Kind::kFed) p.fed_refs[static_cast<std::size_t>(r.fed)].push_back(&s.ins[k]);
    }
  p.out_locs.assign(p.outputs.size(), {});
  p.out_same.assign(p.outputs.size(), -1);
  {
    std::vector<char> aliased(p.values.size(), 0);
    for (std::size_t v = 0; v < p.values.size(); ++v)
      if (p.values[v].root != static_cast<int>(v))
        aliased[static_cast<std::size_t>(p.values[v].root)] = 1;
    for (std::size_t i = 0; i < p.outputs.size(); ++i) {
      const int vi = p.outputs[i];
      const Value& v = p.values[static_cast<std::size_t>(vi)];
      const auto first = std::find(p.outputs.begin(), p.outputs.end(), vi) - p.outputs.begin();
      if (static_cast<std::size_t>(first) != i) {
        if (!p.out_locs[static_cast<std::size_t>(first)].empty())
          p.out_same[i] = static_cast<int>(first);
        continue;
      }
      if (v.root != vi || v.kind != Kind::kArena || aliased[static_cast<std::size_t>(vi)]) continue;
      auto& locs = p.out_locs[i];
      for (auto& s : p.steps) {
        if (s.out == vi) locs.push_back(&s.call.out.data);
        if (s.fused)
          for (std::size_t k = 0; k < s.fused->out_values.size(); ++k)
            if (s.fused->out_values[k] == vi) locs.push_back(&s.fused->out_ptrs[k]);
        for (std::size_t k = 0; k < s.in_values.size(); ++k)
          if (s.in_values[k] == vi) locs.push_back(&s.ins[k].data);
      }
    }
  }
  return plan;
}

void FunctionImpl::execute(Plan& p, const std::vector<NDArray>& fed) const {
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
    if (s.node->print_hook && s.fn != &copy_kernel) {
      const Value& o = p.values[static_cast<std::size_t>(s.out)];
      NDArray view(o.shape, o.dtype);
      std::memcpy(view.raw_data(), s.call.out.data, o.bytes);
      s.node->print_hook(view);
    }
  }
}

void Function::run(const std::vector<NDArray>& inputs, std::vector<NDArray>& outputs) const {
  if (!impl_) throw ValueError("K::function: calling an empty Function");
  const FunctionImpl& f = *impl_;
  f.validate_feed(inputs);
  const PlanLease lease(f, inputs);
  Plan& p = lease.plan();
  const VariableLocks locks(p);
  f.execute(p, inputs);
  if (outputs.size() != p.outputs.size()) outputs.resize(p.outputs.size());
  for (std::size_t i = 0; i < p.outputs.size(); ++i) {
    const Value& v = p.values[static_cast<std::size_t>(p.outputs[i])];
    NDArray& o = outputs[i];
    if (!o.defined() || o.dtype() != v.dtype || o.shape() != v.shape) o = NDArray(v.shape, v.dtype);
    std::memcpy(o.raw_data(), f.ptr(p, p.outputs[i]), v.bytes);
  }
  for (const auto& c : p.commits) std::memcpy(c.dst, f.ptr(p, c.value), c.bytes);
}

std::vector<NDArray> Function::operator()(const std::vector<NDArray>& inputs) const {
  std::vector<NDArray> out;
  run(inputs, out);
  return out;
}

NDArray evaluate(const Tensor& t) {
  Node& n = t.node();
  if (n.eager_value.defined()) return n.eager_value.clone();
  if (!n.concrete) {
    std::vector<Node*> stack{&n};
    std::unordered_set<Node*> seen;
    while (!stack.empty()) {
      Node* m = stack.back();
      stack.pop_back();
      if (!seen.insert(m).second) continue;
      if (m->op == Op::Placeholder && !m->value.defined())
        throw ValueError("K::eval: tensor " + describe(n) + " depends on placeholder " +
                         describe(*m) + "; feed it through K::function");
      for (auto& in : m->inputs) stack.push_back(in.node_ptr().get());
    }
  }
  const bool is_update = n.op == Op::Assign || n.op == Op::Group;
  Function f({}, {t}, is_update ? std::vector<Tensor>{t} : std::vector<Tensor>{});
  return f({})[0];
}

std::unique_ptr<Plan> function_compile(const Function& f, const std::vector<Shape>& shapes) {
  return f.impl_->compile(shapes);
}

void function_execute_raw(const Function& f, Plan& p, void* const* fed, void* const* outs) {
  const FunctionImpl& fi = *f.impl_;
  for (std::size_t i = 0; i < p.fed_ptrs.size(); ++i) p.fed_ptrs[i] = fed[i];
  for (std::size_t i = 0; i < p.outputs.size(); ++i)
    for (void** loc : p.out_locs[i]) *loc = outs[i];
  fi.execute_ptrs(p);
  for (std::size_t i = 0; i < p.outputs.size(); ++i) {
    if (!p.out_locs[i].empty()) continue;
    const Value& v = p.values[static_cast<std::size_t>(p.outputs[i])];
    const void* src = p.out_same[i] >= 0 ? outs[p.out_same[i]] : fi.ptr(p, p.outputs[i]);
    std::memcpy(outs[i], src, v.bytes);
  }
  for (std::size_t i = 0; i < p.outputs.size(); ++i) {
    if (p.out_locs[i].empty()) continue;
    void* home = fi.ptr(p, p.outputs[i]);
    for (void** loc : p.out_locs[i]) *loc = home;
  }
}

bool in_eager_scope() { return t_eager > 0; }
EagerScope::EagerScope(bool eager) : previous_(t_eager) { t_eager = eager ? 1 : 0; }
EagerScope::~EagerScope() { t_eager = previous_; }

}  // namespace ktape
