// Function's compiler: builds the Plan of one input-shape signature in phases — prune and fold,
// values, steps, fusion, in-place commits, variable locks, arena plan, pointer resolution. It
// names no op kind beyond the structural ones (sources and assignments): whatever an op needs at
// compile time comes from its record (OpDef: shape rule, alias facts, the prepare hook).
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "engine/arena.hpp"
#include "engine/backend.hpp"
#include "engine/errors.hpp"
#include "engine/fusion.hpp"
#include "engine/graph_walk.hpp"
#include "engine/plan.hpp"

namespace ktape {

namespace {

void copy_kernel(const KernelCall& c) {
  std::memcpy(c.out.data, c.in[0].data,
              static_cast<std::size_t>(c.out.size) * dtype_size(c.out.dtype));
}

std::string describe(const Node& n) {
  return "'" + n.name + "' (shape " + n.shape.str() + ", " + std::string(dtype_name(n.dtype)) + ")";
}

bool is_source(const Node& n) {
  return n.op == Op::Placeholder || n.op == Op::Variable || n.op == Op::Constant;
}
bool is_update(const Node& n) { return n.op == Op::Assign || n.op == Op::Group; }

class Compiler {
 public:
  Compiler(const CompileRequest& r, Plan& p) : r_(r), p_(p) {
    for (const auto& t : r.inputs) fed_set_.insert(t.node_ptr().get());
  }

  void run() {
    p_.sig = r_.fed;
    const std::vector<Node*> order = prune_and_fold();
    build_values(order);
    build_steps();
    if (r_.fuse && r_.backend.fuse_elementwise) fuse();
    if (r_.fuse) pair_steps();
    if (r_.backend.fuse_elementwise) commit_in_place();
    if (r_.fuse && r_.backend.fuse_elementwise && r_.backend.matmul_epilogue &&
        matmul_epilogues_enabled())
      matmul_epilogues();
    lock_variables();
    plan_arena();
    resolve_pointers();
  }

 private:
  Value& val(int v) { return p_.values[static_cast<std::size_t>(v)]; }
  int index_of(const Tensor& t) const { return index_.at(t.node_ptr().get()); }
  int root_of(int v) { return val(v).root; }

  // 1. The nodes the outputs and updates need, in tape order. A pure node computed only from
  // constants is folded: evaluated once here, then read like a constant.
  std::vector<Node*> prune_and_fold() {
    std::unordered_map<Node*, bool> memo;
    std::function<bool(Node*)> foldable = [&](Node* n) -> bool {
      if (n->op == Op::Constant) return true;
      if (auto it = memo.find(n); it != memo.end()) return it->second;
      bool f = r_.fold && op_def(n->op).pure && !is_source(*n) && !n->inputs.empty() &&
               n->control_inputs.empty() && !fed_set_.count(n);
      for (auto& in : n->inputs) f = f && foldable(in.node_ptr().get());
      return memo[n] = f;
    };
    std::vector<Node*> roots, folded;
    for (const auto& t : r_.outputs) roots.push_back(t.node_ptr().get());
    for (const auto& t : r_.updates) roots.push_back(t.node_ptr().get());
    auto order = reachable_in_tape_order(
        roots,
        [&](Node* n) {
          if (n->eager_value.defined() || fed_set_.count(n)) return false;
          if (n->op != Op::Constant && foldable(n)) {
            folded.push_back(n);
            return false;
          }
          return true;
        },
        [](Node*) { return false; }, /*control=*/true);
    for (Node* n : folded) {
      Function once({}, {Tensor(n->shared_from_this())}, {},
                    {.backend = r_.backend.name, .fuse = r_.fuse, .fold = false});
      p_.folded.emplace(n, once({})[0]);
    }
    return order;
  }

  // 2. A value with a concrete shape for every node: external (eager, folded, variable,
  // constant, defaulted placeholder), fed, or computed in the arena (maybe as a view).
  void build_values(const std::vector<Node*>& order) {
    p_.values.reserve(order.size() + r_.assigns.size());
    for (Node* n : order)
      for (const auto& in : n->inputs) readers_[in.node_ptr().get()].push_back(n);
    for (const auto& t : r_.outputs) read_whole_.insert(t.node_ptr().get());
    for (const auto& t : r_.updates) read_whole_.insert(t.node_ptr().get());
    std::vector<Shape> in_shapes;
    std::vector<const void*> in_ctx;
    for (Node* n : order) {
      Value v;
      v.node = n;
      v.dtype = n->dtype;
      const int vi = static_cast<int>(p_.values.size());
      v.root = vi;
      auto external = [&](const NDArray& a) {
        v.kind = Kind::kExternal;
        v.ext = const_cast<void*>(a.raw_data());
        v.shape = a.shape();
      };
      if (n->eager_value.defined()) {
        external(n->eager_value);
      } else if (auto fit = p_.folded.find(n); fit != p_.folded.end()) {
        external(fit->second);
      } else if (n->op == Op::Placeholder || fed_set_.count(n)) {
        int k = -1;
        for (std::size_t i = 0; i < r_.inputs.size(); ++i)
          if (r_.inputs[i].node_ptr().get() == n) k = static_cast<int>(i);
        if (k >= 0) {
          v.kind = Kind::kFed;
          v.fed = k;
          v.shape = r_.fed[static_cast<std::size_t>(k)];
        } else if (n->value.defined()) {  // a placeholder with a default (the learning phase)
          external(n->value);
        } else {
          throw ValueError("K::function: you must feed a value for placeholder " + describe(*n) +
                           ": it is needed by the outputs or updates but is not in inputs");
        }
      } else if (is_source(*n)) {
        external(n->value);
      } else {
        in_shapes.clear();
        in_ctx.clear();
        for (auto& in : n->inputs) {
          const Value& iv = val(index_of(in));
          in_shapes.push_back(iv.shape);
          in_ctx.push_back(iv.ctx.get());
        }
        compute_value(*n, v, in_shapes, in_ctx);
      }
      v.bytes = array_bytes(v.shape, v.dtype, ("K::function: " + describe(*n)).c_str());
      v.size = v.shape.num_elements();
      index_[n] = vi;
      p_.values.push_back(std::move(v));
    }
  }

  void compute_value(const Node& n, Value& v, const std::vector<Shape>& in_shapes,
                     const std::vector<const void*>& in_ctx) {
    const OpDef& def = op_def(n.op);
    int view = -1;
    std::size_t view_offset = 0;
    if (def.prepare) {
      const std::vector<const Node*>* readers = nullptr;
      if (!read_whole_.count(&n)) readers = &readers_[&n];
      unsigned invariant = 0;
      if (r_.loop_statics >= 0)
        for (std::size_t i = 0; i < n.inputs.size() && i < 32; ++i) {
          const Value& iv = val(index_of(n.inputs[i]));
          if (iv.kind == Kind::kFed && iv.fed >= r_.loop_statics) invariant |= 1u << i;
        }
      Prepared pr = def.prepare({n, in_shapes, in_ctx, r_.backend.name, r_.fuse, r_.fold, readers,
                                 &data_read_, invariant, &p_.loop_run});
      v.shape = std::move(pr.shape);
      v.ctx = std::move(pr.ctx);
      v.kernel = pr.kernel;
      v.scratch_bytes = pr.scratch_bytes;
      if (pr.view_input >= 0 &&
          val(root_of(index_of(n.inputs[static_cast<std::size_t>(pr.view_input)]))).kind ==
              Kind::kArena) {
        view = pr.view_input;
        view_offset = pr.view_offset;
      }
    } else {
      v.shape = def.shape(n, in_shapes);
    }
    if (!v.shape.is_fully_defined())
      throw ValueError(std::string("K::function: could not infer the shape of ") + describe(n) +
                       " for the fed input shapes");
    if (view < 0) view = def.alias_input;
    if (view < 0 && def.alias_if_same_shape && in_shapes[0] == v.shape) view = 0;
    if (view >= 0) {
      const Value& src = val(index_of(n.inputs[static_cast<std::size_t>(view)]));
      v.root = src.root;
      v.alias_offset = src.alias_offset + view_offset;
    }
  }

  // The arena buffers whose data something reads: the outputs', the updates', and, from the
  // last node back, those a needed node reads through an input that is not shape-only
  // (OpDef::shape_only) or depends on by a control edge. A buffer only ever read for its dims
  // gets no step.
  std::vector<char> data_needed() {
    std::vector<char> needed(p_.values.size(), 0);
    auto need = [&](int v) { needed[static_cast<std::size_t>(root_of(v))] = 1; };
    for (const auto& t : r_.outputs) need(index_of(t));
    for (const auto& t : r_.updates) need(index_of(t));
    for (Node* a : r_.assigns) need(index_.at(a));
    for (std::size_t vi = 0; vi < p_.values.size(); ++vi)
      if (op_def(p_.values[vi].node->op).side_effect) need(static_cast<int>(vi));
    for (std::size_t vi = p_.values.size(); vi-- > 0;) {
      const Value& v = p_.values[vi];
      if (v.kind != Kind::kArena || !needed[static_cast<std::size_t>(v.root)]) continue;
      const Node& n = *v.node;
      for (const auto& c : n.control_inputs)  // evaluated with n (K::control_dependencies)
        if (auto it = index_.find(c.node_ptr().get()); it != index_.end()) need(it->second);
      if (v.root != static_cast<int>(vi)) continue;  // a view: its root's step reads the inputs
      const OpDef& def = op_def(n.op);
      const unsigned skip = def.shape_only ? def.shape_only(n) : 0u;
      for (std::size_t k = 0; k < n.inputs.size(); ++k)
        if (k >= 32 || !(skip >> k & 1u)) need(index_of(n.inputs[k]));
    }
    return needed;
  }

  void add_step(int vi, KernelFn fn, const std::vector<int>& ins) {
    Step s;
    s.fn = fn;
    s.node = val(vi).node;
    s.random = op_def(s.node->op).random;
    s.out = vi;
    s.in_values = ins;
    p_.steps.push_back(std::move(s));
  }

  // 3. A step for every computed node that owns its buffer; then, for each update whose new
  // value lives outside the arena (a variable, constant or fed array that could change before
  // the commit), a snapshot copy; then the commits.
  void build_steps() {
    const std::vector<char> needed = data_needed();
    for (std::size_t vi = 0; vi < p_.values.size(); ++vi) {
      const Value& v = p_.values[vi];
      if (v.root != static_cast<int>(vi) || v.kind != Kind::kArena || !needed[vi]) continue;
      const Node& n = *v.node;
      const OpDef& def = op_def(n.op);
      const DType kdt = def.dispatch_input < 0
                            ? n.dtype
                            : n.inputs[static_cast<std::size_t>(def.dispatch_input)].dtype();
      const KernelFn fn = v.kernel ? v.kernel : find_kernel(r_.backend, n.op, kdt);
      if (!fn)
        throw NotImplementedError(std::string("K::function: no kernel for op ") + op_name(n.op) +
                                  " with dtype " + std::string(dtype_name(kdt)) + " (node " +
                                  describe(n) + ") in backend '" + r_.backend.name + "'");
      std::vector<int> ins;
      for (auto& in : n.inputs) ins.push_back(index_of(in));
      add_step(static_cast<int>(vi), fn, ins);
    }
    for (Node* a : r_.assigns) {
      const int vi = index_.at(a);
      int cv = vi;  // the value holding the new data (possibly a view)
      if (val(root_of(vi)).kind != Kind::kArena) {
        Value snap = val(root_of(vi));
        snap.kind = Kind::kArena;
        snap.root = static_cast<int>(p_.values.size());
        snap.ext = nullptr;
        snap.fed = -1;
        snap.alias_offset = 0;
        snap.ctx.reset();
        snap.kernel = nullptr;
        snap.scratch_bytes = 0;
        snap.shape = val(vi).shape;
        snap.size = val(vi).size;
        snap.bytes = val(vi).bytes;
        p_.values.push_back(snap);
        add_step(snap.root, &copy_kernel, {vi});
        cv = snap.root;
      }
      Node* var = a->inputs[0].node_ptr().get();
      const Value& rv = val(cv);
      if (rv.shape != var->value.shape() || rv.dtype != var->value.dtype())
        throw ValueError("K::function: update of variable " + describe(*var) +
                         " computes a value of shape " + rv.shape.str() + " and dtype " +
                         std::string(dtype_name(rv.dtype)) +
                         "; it must keep the variable's shape and dtype");
      p_.commits.push_back({var->value.raw_data(), cv, rv.bytes});
    }
  }

  // 3b. Elementwise chains fused into passes (outputs and committed values are written out).
  void fuse() {
    std::vector<bool> pinned(p_.values.size(), false);
    for (const auto& t : r_.outputs) pinned[static_cast<std::size_t>(root_of(index_of(t)))] = true;
    for (const auto& c : p_.commits) pinned[static_cast<std::size_t>(root_of(c.value))] = true;
    fuse_elementwise(p_, pinned);
  }

  // 3c. Joint steps: a step of an op with a pair hook (OpDef::pair) that reads the same data as
  // an earlier step of that op through its pair_input runs as one step with it (the nearest such
  // step, at most kPairReach back), at the earlier one's place, when the hook gives a kernel and
  // nothing the later one reads is written from that place on. Not in an unfused plan (the
  // one-kernel-per-node oracle). The later step's output becomes the joint step's extra
  // output (written from the earlier place on) and its last input.
  void pair_steps() {
    constexpr std::size_t kPairReach = 16;  // steps back
    auto& steps = p_.steps;
    auto pairable = [&](const Step& st) {
      if (st.fused || !st.node || st.out < 0 || val(st.out).node != st.node) return false;
      const OpDef& def = op_def(st.node->op);
      return def.pair && def.pair_input >= 0 && !def.random && st.extra_outs.empty() &&
             !val(st.out).ctx && st.node->control_inputs.empty() &&
             st.in_values.size() == st.node->inputs.size() &&
             static_cast<std::size_t>(def.pair_input) < st.in_values.size();
    };
    bool any = false;
    for (const Step& st : steps) any = any || pairable(st);
    if (!any) return;
    std::vector<int> last_write(p_.values.size(), -1);  // per buffer, the last step writing it
    for (std::size_t si = 0; si < steps.size(); ++si) {
      last_write[static_cast<std::size_t>(root_of(steps[si].out))] = static_cast<int>(si);
      for (int o : steps[si].extra_outs)
        last_write[static_cast<std::size_t>(root_of(o))] = static_cast<int>(si);
    }
    auto same_data = [&](int x, int y) {
      const Value &a = val(x), &b = val(y);
      return a.root == b.root && a.alias_offset == b.alias_offset && a.bytes == b.bytes &&
             a.dtype == b.dtype && a.shape == b.shape;
    };
    auto shapes = [&](const Step& st) {
      std::vector<Shape> in;
      for (int v : st.in_values) in.push_back(val(v).shape);
      return in;
    };
    std::vector<char> gone(steps.size(), 0), joined(steps.size(), 0);
    for (std::size_t s2 = 0; s2 < steps.size(); ++s2) {
      Step& later = steps[s2];
      if (!pairable(later)) continue;
      const OpDef& def = op_def(later.node->op);
      const auto shared = static_cast<std::size_t>(def.pair_input);
      // The nearest first (the later output lives least), and only near: a joint step far back
      // would hold the later output's buffer all the way.
      for (std::size_t s1 = s2; s1-- > 0 && s2 - s1 <= kPairReach;) {
        Step& first = steps[s1];
        if (gone[s1] || joined[s1] || !pairable(first) || first.node->op != later.node->op ||
            first.node->dtype != later.node->dtype ||
            !same_data(first.in_values[shared], later.in_values[shared]))
          continue;
        bool ready = true;
        for (int v : later.in_values)
          ready = ready && last_write[static_cast<std::size_t>(root_of(v))] < static_cast<int>(s1);
        if (!ready) continue;
        const std::vector<Shape> first_in = shapes(first), later_in = shapes(later);
        const Paired joint =
            def.pair({*first.node, *later.node, first_in, later_in, r_.backend.name});
        if (!joint.kernel) continue;
        first.fn = joint.kernel;
        first.in_values.insert(first.in_values.end(), later.in_values.begin(),
                               later.in_values.end());
        first.in_values.push_back(later.out);
        first.extra_outs.push_back(later.out);
        val(first.out).scratch_bytes = joint.scratch_bytes;
        last_write[static_cast<std::size_t>(root_of(later.out))] = static_cast<int>(s1);
        gone[s2] = joined[s1] = 1;
        break;
      }
    }
    std::size_t kept = 0;
    for (std::size_t si = 0; si < steps.size(); ++si)
      if (!gone[si]) {
        if (kept != si) steps[kept] = std::move(steps[si]);
        ++kept;
      }
    steps.resize(kept);
  }

  // 3d. Commit in place: a new value written by an elementwise step (or fused pass) after every
  // read of the variable's old value goes straight into the variable, with no copy at the end.
  // (Within a fused pass, reads of the old value must come no later than the write: each chunk
  // is read before it is overwritten.) Only for backends whose elementwise kernels promise to
  // be safe in place (the cpu backend; not plugins), and never before a step that may throw
  // (a failed call must leave every variable as it was).
  void commit_in_place() {
    std::vector<char> is_output(p_.values.size(), 0), aliased(p_.values.size(), 0);
    for (const auto& t : r_.outputs) is_output[static_cast<std::size_t>(root_of(index_of(t)))] = 1;
    for (std::size_t v = 0; v < p_.values.size(); ++v)
      if (p_.values[v].root != static_cast<int>(v) && !is_update(*p_.values[v].node))
        aliased[static_cast<std::size_t>(p_.values[v].root)] = 1;
    for (std::size_t ci = 0; ci < p_.commits.size();) {
      const Commit& c = p_.commits[ci];
      const int cv = root_of(c.value);  // the buffer holding the new value
      if (!can_commit_in_place(c, cv, is_output, aliased)) {
        ++ci;
        continue;
      }
      Value& v = val(cv);
      v.kind = Kind::kExternal;
      v.ext = c.dst;
      p_.commits.erase(p_.commits.begin() + static_cast<long>(ci));
      ++p_.commits_in_place;
    }
  }

  bool can_commit_in_place(const Commit& c, int cv, const std::vector<char>& is_output,
                           const std::vector<char>& aliased) {
    const Value& v = val(cv);
    if (val(c.value).alias_offset != 0 || v.kind != Kind::kArena ||
        is_output[static_cast<std::size_t>(cv)] || aliased[static_cast<std::size_t>(cv)])
      return false;
    int var_vi = -1;
    for (std::size_t u = 0; u < p_.values.size(); ++u)
      if (p_.values[u].kind == Kind::kExternal && p_.values[u].ext == c.dst &&
          p_.values[u].root == static_cast<int>(u))
        var_vi = static_cast<int>(u);
    if (var_vi >= 0 && is_output[static_cast<std::size_t>(var_vi)]) return false;
    int w = -1, writers = 0;  // the step writing the new value (a placed concatenation: several)
    for (std::size_t si = 0; si < p_.steps.size(); ++si) {
      const Step& st = p_.steps[si];
      if (st.out == cv ||
          std::find(st.extra_outs.begin(), st.extra_outs.end(), cv) != st.extra_outs.end()) {
        w = static_cast<int>(si);
        ++writers;
      }
    }
    if (w < 0 || writers > 1) return false;
    const Step& writer = p_.steps[static_cast<std::size_t>(w)];
    if (!writer.fused && !op_def(writer.node->op).elementwise) return false;
    for (std::size_t si = static_cast<std::size_t>(w); si < p_.steps.size(); ++si)
      if (op_def(p_.steps[si].node->op).may_throw) return false;
    if (var_vi < 0) return true;
    for (std::size_t si = static_cast<std::size_t>(w); si < p_.steps.size(); ++si) {
      const Step& st = p_.steps[si];
      for (std::size_t k = 0; k < st.in_values.size(); ++k) {
        if (root_of(st.in_values[k]) != var_vi) continue;
        if (static_cast<int>(si) > w) return false;  // read after the write
        if (!st.fused) continue;                 // the writer itself reads it, element by element
        if (st.fused->has_blocks) return false;  // a gathered block reads other elements
        // In the fused pass: every instruction reading input k runs no later than the writer.
        int write_at = -1, last_read = -1;
        const auto& prog = *st.fused;
        for (std::size_t j = 0; j < prog.instrs.size(); ++j) {
          const auto& ins = prog.instrs[j];
          if (ins.out.where == FusedOperand::kOutput &&
              prog.out_values[static_cast<std::size_t>(ins.out.index)] == cv)
            write_at = static_cast<int>(j);
          for (const auto& o : ins.ins)
            if (o.where == FusedOperand::kInput && o.index == static_cast<int>(k))
              last_read = static_cast<int>(j);
        }
        if (write_at < 0 || last_read > write_at) return false;
      }
    }
    return true;
  }

  // 3e. MatMul epilogues: the first pass (fused, or one elementwise step) that reads a MatMul's
  // product runs inside the MatMul step (engine/fusion.hpp MatMulEpilogue; a weight's update
  // after its gradient, a dense layer's bias + relu, a relu's gradient). Only a pass that gives
  // the same bits on any piece of its elements (epilogue_ready), that reads the product whole,
  // writes neither of its operands, and whose inputs are all computed by the MatMul's place;
  // and only when no step in between reads or writes what it writes, writes what it reads, runs
  // a loop body or may throw (the pass may write a variable in place).
  void matmul_epilogues() {
    auto& steps = p_.steps;
    // A buffer: an arena root by its index, a variable's (or other external) storage by address.
    auto buffer = [&](int v) -> std::uintptr_t {
      const Value& r = val(root_of(v));
      return r.kind == Kind::kExternal ? reinterpret_cast<std::uintptr_t>(r.ext)
                                       : static_cast<std::uintptr_t>(root_of(v)) * 2 + 1;
    };
    for (std::size_t mi = 0; mi < steps.size(); ++mi) {
      Step& m = steps[mi];
      if (m.fused || m.epilogue || !m.node || m.node->op != Op::MatMul || !m.extra_outs.empty() ||
          m.in_values.size() != 2 || val(m.out).node != m.node || val(m.out).size == 0)
        continue;
      const DType dt = val(m.out).dtype;
      const KernelFn fn = r_.backend.matmul_epilogue(dt);
      if (!fn || m.fn != r_.backend.get(Op::MatMul, dt)) continue;
      std::size_t fi = mi + 1;
      auto reads_product = [&](const Step& st) {
        return std::any_of(st.in_values.begin(), st.in_values.end(),
                           [&](int v) { return root_of(v) == m.out; });
      };
      // The pass reads the product element for element: all of it, not a view of part.
      auto reads_whole = [&](const Step& st) {
        return std::all_of(st.in_values.begin(), st.in_values.end(), [&](int v) {
          return root_of(v) != m.out ||
                 (val(v).alias_offset == 0 && val(v).size == val(m.out).size);
        });
      };
      while (fi < steps.size() && !reads_product(steps[fi])) ++fi;
      if (fi == steps.size()) continue;
      Step& f = steps[fi];
      const Shape& ps = val(m.out).shape;
      const std::int64_t n = ps[ps.ndim() - 1];
      std::unique_ptr<FusedProgram> alone = f.fused ? nullptr : single_pass(p_, f);
      const FusedProgram* pass = f.fused ? f.fused.get() : alone.get();
      if (!pass || !epilogue_ready(*pass, n) || pass->n != val(m.out).size || !reads_whole(f))
        continue;
      std::vector<std::uintptr_t> f_reads, f_writes;
      for (int v : f.in_values) f_reads.push_back(buffer(v));
      f_writes.push_back(buffer(f.out));
      for (int v : f.extra_outs) f_writes.push_back(buffer(v));
      auto hits = [](const std::vector<std::uintptr_t>& set, std::uintptr_t b) {
        return std::find(set.begin(), set.end(), b) != set.end();
      };
      // The product's operands are read until its last region: the pass must not write them.
      bool ok = !hits(f_writes, buffer(m.in_values[0])) && !hits(f_writes, buffer(m.in_values[1]));
      for (std::size_t si = mi + 1; si < fi && ok; ++si) {
        const Step& st = steps[si];
        ok = !(st.node && (op_def(st.node->op).may_throw || st.node->extra));
        std::vector<int> outs{st.out};
        outs.insert(outs.end(), st.extra_outs.begin(), st.extra_outs.end());
        for (int o : outs) ok = ok && !hits(f_reads, buffer(o)) && !hits(f_writes, buffer(o));
        for (int v : st.in_values) ok = ok && !hits(f_writes, buffer(v));
      }
      if (!ok) continue;
      auto e = std::make_unique<MatMulEpilogue>();
      e->done_columns =
          std::make_unique<std::atomic<std::int64_t>[]>(static_cast<std::size_t>(pass->n / n));
      e->pass = f.fused ? std::move(f.fused) : std::move(alone);
      e->node = f.node;
      m.in_values.insert(m.in_values.end(), f.in_values.begin(), f.in_values.end());
      m.extra_outs.push_back(f.out);
      m.extra_outs.insert(m.extra_outs.end(), f.extra_outs.begin(), f.extra_outs.end());
      m.epilogue = std::move(e);
      m.fn = fn;
      steps.erase(steps.begin() + static_cast<std::ptrdiff_t>(fi));
    }
  }

  // 3f. Variable locks, ordered by node id: every call takes them in the same order.
  void lock_variables() {
    std::map<std::int64_t, std::pair<std::shared_mutex*, bool>> locks;
    for (const Value& v : p_.values)
      if (v.node->op == Op::Variable && v.node->storage_lock)
        locks.emplace(v.node->id, std::make_pair(v.node->storage_lock.get(), false));
    for (Node* a : r_.assigns) {
      Node* var = a->inputs[0].node_ptr().get();
      locks[var->id] = {var->storage_lock.get(), true};
    }
    for (const auto& [id, l] : locks) p_.var_locks.push_back(l);
  }

  // The inputs a step's kernel reads only for their dims (OpDef::shape_only: the stored
  // projection x W a reverse loop is given to shape its gradient): they do not keep a buffer
  // alive, and the kernel gets whatever pointer the buffer's place holds. Only for a step that
  // runs its node's op on the node's inputs, in order (not a fused pass or a snapshot copy).
  unsigned shape_only_inputs(const Step& st) {
    if (st.fused || !st.node || st.out < 0 || val(st.out).node != st.node) return 0;
    const OpDef& def = op_def(st.node->op);
    if (!def.shape_only || st.in_values.size() != st.node->inputs.size()) return 0;
    for (std::size_t k = 0; k < st.in_values.size(); ++k)
      if (st.in_values[k] != index_of(st.node->inputs[k])) return 0;
    return def.shape_only(*st.node);
  }

  // 4. Liveness and arena offsets: a buffer lives from its step to its last reader; outputs and
  // committed values are pinned; a step's scratch lives during that step only.
  void plan_arena() {
    // A value with several writers (a concatenation placed by fused passes) lives until its
    // last writer at least, even when nothing reads its data (a control dependency).
    std::vector<int> writers(p_.values.size(), 0), last_write(p_.values.size(), -1);
    for (std::size_t si = 0; si < p_.steps.size(); ++si) {
      const Step& st = p_.steps[si];
      const unsigned dims_only = shape_only_inputs(st);
      for (std::size_t k = 0; k < st.in_values.size(); ++k) {
        if (k < 32 && (dims_only >> k & 1u)) continue;  // its buffer may be reused meanwhile
        Value& r = val(root_of(st.in_values[k]));
        r.last_use = std::max(r.last_use, static_cast<int>(si));
      }
      auto wrote = [&](int o) {
        if (last_write[static_cast<std::size_t>(o)] == static_cast<int>(si)) return;
        ++writers[static_cast<std::size_t>(o)];
        last_write[static_cast<std::size_t>(o)] = static_cast<int>(si);
      };
      wrote(st.out);
      for (int o : st.extra_outs) wrote(o);
    }
    for (std::size_t v = 0; v < p_.values.size(); ++v)
      if (writers[v] > 1) p_.values[v].last_use = std::max(p_.values[v].last_use, last_write[v]);
    for (const auto& t : r_.outputs) {
      const int vi = index_of(t);
      p_.outputs.push_back(vi);
      val(root_of(vi)).pinned = true;
    }
    for (const auto& c : p_.commits) val(root_of(c.value)).pinned = true;
    std::vector<int> outs;
    // Every buffer's steps (a buffer no step writes, read only for its dims, takes no space): from
    // its first writer (a concatenation that fused passes write in place, engine/fusion.cpp, is an
    // output of each of them) through its last reader, to the end for outputs and committed values;
    // a step's scratch during that step only, clear of the step's inputs and outputs.
    constexpr int kForever = std::numeric_limits<int>::max();
    std::vector<ArenaBlock> blocks;
    std::vector<std::size_t*> where;
    std::vector<char> allocated(p_.values.size(), 0);
    for (std::size_t si = 0; si < p_.steps.size(); ++si) {
      Step& step = p_.steps[si];
      const int s = static_cast<int>(si);
      outs.assign(1, step.out);
      outs.insert(outs.end(), step.extra_outs.begin(), step.extra_outs.end());
      for (int o : outs) {
        Value& out = val(o);
        if (allocated[static_cast<std::size_t>(o)]) continue;
        allocated[static_cast<std::size_t>(o)] = 1;
        if (!out.pinned && out.last_use < 0) out.last_use = s;  // dead
        blocks.push_back({out.bytes, s, out.pinned ? kForever : std::max(out.last_use, s)});
        where.push_back(&out.offset);
      }
      if (const std::size_t scratch = val(step.out).scratch_bytes; scratch > 0) {
        blocks.push_back({scratch, s, s});
        where.push_back(&step.scratch_offset);
      }
    }
    const int steps = static_cast<int>(p_.steps.size());
    for (ArenaBlock& b : blocks) b.last = std::min(b.last, steps);
    const std::size_t top = place_blocks(blocks);
    for (std::size_t i = 0; i < blocks.size(); ++i) *where[i] = blocks[i].offset;
    p_.arena_bytes = top;
    p_.arena = aligned_buffer(p_.arena_bytes);  // ResourceExhaustedError naming the bytes
  }

  // 5. Every step's kernel call with its pointers; the per-call patch lists for fed inputs and
  // for outputs computed straight into a caller's buffer.
  void resolve_pointers() {
    Plan& p = p_;
    std::vector<char> produced(p.values.size(), 0);  // arena roots some step writes
    for (const Step& s : p.steps) {
      produced[static_cast<std::size_t>(s.out)] = 1;
      for (int o : s.extra_outs) produced[static_cast<std::size_t>(o)] = 1;
    }
    p.fed_refs.assign(r_.inputs.size(), {});
    p.fed_ptrs.assign(r_.inputs.size(), nullptr);
    for (auto& s : p.steps) {
      s.ins.resize(s.in_values.size());
      for (std::size_t k = 0; k < s.in_values.size(); ++k) {
        const Value& v = val(s.in_values[k]);
        ArrayRef& a = s.ins[k];
        a.dims = v.shape.dims().data();
        a.ndim = v.shape.ndim();
        a.size = v.size;
        a.dtype = v.dtype;
        // Fed: patched per call. A buffer no step writes (read for its dims only): no data.
        const Value& root = val(v.root);
        const bool unwritten =
            root.kind == Kind::kArena && !produced[static_cast<std::size_t>(v.root)];
        a.data = root.kind == Kind::kFed || unwritten ? nullptr : value_ptr(p, s.in_values[k]);
      }
      const Value& o = val(s.out);
      s.call.in = s.ins.data();
      s.call.n_in = static_cast<int>(s.ins.size());
      s.call.out =
          ArrayRef{value_ptr(p, s.out), o.shape.dims().data(), o.shape.ndim(), o.size, o.dtype};
      s.call.attrs = &s.node->attrs;
      s.call.seed = s.node->seed;
      s.call.ctx = o.ctx.get();
      if (o.scratch_bytes > 0)
        s.call.scratch = static_cast<char*>(p.arena.get()) + s.scratch_offset;
    }
    resolve_fused(p, [&](int v) { return value_ptr(p, v); });
    for (auto& s : p.steps) {
      if (!s.epilogue) continue;
      FusedProgram& prog = *s.epilogue->pass;
      prog.out_ptrs.resize(prog.out_values.size());
      for (std::size_t k = 0; k < prog.out_values.size(); ++k)
        prog.out_ptrs[k] = value_ptr(p, prog.out_values[k]);
      s.epilogue->matmul_ctx = s.call.ctx;
      s.call.ctx = s.epilogue.get();
    }
    for (auto& s : p.steps)
      for (std::size_t k = 0; k < s.in_values.size(); ++k) {
        const Value& r = val(root_of(s.in_values[k]));
        if (r.kind == Kind::kFed) p.fed_refs[static_cast<std::size_t>(r.fed)].push_back(&s.ins[k]);
      }
    p.out_locs.assign(p.outputs.size(), {});
    p.out_into.assign(p.outputs.size(), nullptr);
    p.out_same.assign(p.outputs.size(), -1);
    // An output is redirected when it is a whole arena buffer (the root itself, or a SumToLike
    // or reshape alias of all its bytes) that a step writes and no other output shares: every
    // pointer to a value in that buffer (views into it too) then moves to the caller's buffer.
    p.out_loc_offsets.assign(p.outputs.size(), {});
    // Two outputs are the same storage when they are the same bytes of one buffer (a value and
    // its whole-buffer SumToLike or reshape alias: a loop's gradient for a sequence input and the
    // stacked per-step values of its weight gradient); a later one copies from the earlier's
    // redirected home, which the caller may make its own buffer too (a loop storing both once).
    auto same_storage = [&](int a, int b) {
      return val(a).root == val(b).root && val(a).alias_offset == val(b).alias_offset &&
             val(a).bytes == val(b).bytes;
    };
    for (std::size_t i = 0; i < p.outputs.size(); ++i) {
      const int vi = p.outputs[i];
      const int root = val(vi).root;
      std::size_t first = 0;
      while (first < i && !same_storage(p.outputs[first], vi)) ++first;
      if (first != i) {
        if (!p.out_locs[first].empty()) p.out_same[i] = static_cast<int>(first);
        continue;
      }
      const Value& v = val(vi);
      if (val(root).kind != Kind::kArena || v.alias_offset != 0 || v.bytes != val(root).bytes ||
          !produced[static_cast<std::size_t>(root)])  // its bytes come from no step
        continue;
      bool shared = false;
      for (int o : p.outputs) shared = shared || (!same_storage(o, vi) && val(o).root == root);
      if (shared) continue;
      auto& locs = p.out_locs[i];
      auto& offs = p.out_loc_offsets[i];
      auto add = [&](int w, void** loc) {
        if (w < 0 || val(w).root != root) return;
        locs.push_back(loc);
        offs.push_back(val(w).alias_offset);
      };
      for (auto& s : p.steps) {
        add(s.out, &s.call.out.data);
        if (s.fused)
          for (std::size_t k = 0; k < s.fused->out_values.size(); ++k)
            add(s.fused->out_values[k], &s.fused->out_ptrs[k]);
        if (s.epilogue)
          for (std::size_t k = 0; k < s.epilogue->pass->out_values.size(); ++k)
            add(s.epilogue->pass->out_values[k], &s.epilogue->pass->out_ptrs[k]);
        for (std::size_t k = 0; k < s.in_values.size(); ++k) add(s.in_values[k], &s.ins[k].data);
      }
    }
  }

  const CompileRequest& r_;
  Plan& p_;
  std::unordered_set<Node*> fed_set_;
  std::unordered_map<Node*, int> index_;
  std::unordered_map<const Node*, std::vector<const Node*>> readers_;
  std::unordered_set<const Node*> read_whole_;
  // PrepareArgs::data_read: an output or update, or a reader that takes it through an input
  // that is not shape-only.
  const std::function<bool(const Node&)> data_read_ = [this](const Node& n) {
    if (read_whole_.count(&n)) return true;
    const auto it = readers_.find(&n);
    if (it == readers_.end()) return false;
    for (const Node* r : it->second) {
      const OpDef& def = op_def(r->op);
      const unsigned skip = def.shape_only ? def.shape_only(*r) : 0u;
      for (std::size_t k = 0; k < r->inputs.size(); ++k)
        if (r->inputs[k].node_ptr().get() == &n && (k >= 32 || !(skip >> k & 1u))) return true;
    }
    return false;
  };
};

}  // namespace

std::unique_ptr<Plan> compile_plan(const CompileRequest& request) {
  auto plan = std::make_unique<Plan>();
  Compiler(request, *plan).run();
  return plan;
}

}  // namespace ktape
