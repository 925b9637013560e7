#include "engine/scan.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "autodiff/gradients.hpp"
#include "engine/errors.hpp"
#include "engine/scan_exec.hpp"
#include "ops/core.hpp"
#include "ops/elementwise.hpp"
#include "ops/layout.hpp"
#include "ops/reductions.hpp"

namespace ktape {

namespace {

std::string describe(const Tensor& t) {
  return "'" + t.name() + "' (shape " + t.shape().str() + ", " +
         std::string(dtype_name(t.dtype())) + ")";
}

// Whether a node depends on any of a set of nodes (memoized; the set's members count).
class DependsOn {
 public:
  explicit DependsOn(std::unordered_set<Node*> roots) : roots_(std::move(roots)) {}
  bool operator()(Node* n) {
    if (roots_.count(n)) return true;
    auto it = memo_.find(n);
    if (it != memo_.end()) return it->second;
    bool d = false;
    for (const auto& in : n->inputs) d = (*this)(in.node_ptr().get()) || d;
    return memo_[n] = d;
  }
  bool is_root(Node* n) const { return roots_.count(n) > 0; }

 private:
  std::unordered_set<Node*> roots_;
  std::unordered_map<Node*, bool> memo_;
};

// A copy of `n` on new inputs (same op, attrs, seed, body and print hook).
Tensor clone_node(const Node& n, std::vector<Tensor> ins) {
  Tensor t = n.body ? make_body_node(n.op, std::move(ins), n.attrs, n.dtype, n.name, n.body)
                    : make_node(n.op, std::move(ins), n.attrs, n.dtype, n.name);
  Node& c = t.node();
  if (c.seed == 0) c.seed = n.seed;
  if (n.print_hook && !c.print_hook) c.print_hook = n.print_hook;
  return t;
}

// Closes a body over its placeholders: every tensor the results use that does not depend on a
// parameter becomes a capture, replaced inside the body by a fresh placeholder.
struct ClosedBody {
  std::vector<Tensor> results;
  std::vector<Tensor> capture_params;  // placeholders inside the body
  std::vector<Tensor> captures;        // the outer tensors they stand for
};

ClosedBody close_body(const std::vector<Tensor>& params, const std::vector<Tensor>& results,
                      const std::string& who, const std::unordered_map<Node*, Tensor>& subst = {}) {
  std::unordered_set<Node*> param_set;
  for (const auto& p : params) param_set.insert(p.node_ptr().get());
  for (const auto& [k, v] : subst) param_set.insert(k);
  DependsOn depends(param_set);
  std::vector<Node*> body;  // nodes that depend on a parameter (parameters excluded)
  std::vector<Node*> caps;
  std::unordered_set<Node*> seen, cap_seen;
  std::vector<Node*> stack;
  auto add_capture = [&](Node* n) {
    if (cap_seen.insert(n).second) caps.push_back(n);
  };
  for (const auto& r : results) {
    Node* n = r.node_ptr().get();
    if (!depends(n))
      add_capture(n);
    else
      stack.push_back(n);
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (param_set.count(n) || !seen.insert(n).second) continue;
    if (n->op == Op::Assign || n->op == Op::Group)
      throw ValueError(who + ": the step function assigns a variable (" + n->name +
                       "); a loop body must be free of updates");
    body.push_back(n);
    for (const auto& in : n->inputs) {
      Node* m = in.node_ptr().get();
      if (depends(m))
        stack.push_back(m);
      else
        add_capture(m);
    }
  }
  std::sort(body.begin(), body.end(), [](Node* a, Node* b) { return a->id < b->id; });
  std::sort(caps.begin(), caps.end(), [](Node* a, Node* b) { return a->id < b->id; });

  ClosedBody out;
  std::unordered_map<Node*, Tensor> map;
  for (const auto& p : params) map[p.node_ptr().get()] = p;
  for (const auto& [k, v] : subst) map[k] = v;
  for (Node* c : caps) {
    Tensor ph = make_source(Op::Placeholder, c->shape, c->dtype, "capture/" + c->name);
    map[c] = ph;
    out.capture_params.push_back(ph);
    out.captures.push_back(Tensor(c->shared_from_this()));
  }
  for (Node* n : body) {
    std::vector<Tensor> ins;
    for (const auto& in : n->inputs) ins.push_back(map.at(in.node_ptr().get()));
    map[n] = clone_node(*n, std::move(ins));
  }
  for (const auto& r : results) out.results.push_back(map.at(r.node_ptr().get()));
  return out;
}

int part_number(const ScanBody& b, ScanPartKind kind, int index) {
  switch (kind) {
    case ScanPartKind::kOutput:
      return index;
    case ScanPartKind::kStored:
      return b.n_out + index;
    case ScanPartKind::kFinal:
      break;
  }
  return b.n_out + b.n_carry + index;
}

Shape prepend(std::int64_t t, const Shape& s) {
  std::vector<std::int64_t> d{t};
  d.insert(d.end(), s.dims().begin(), s.dims().end());
  return Shape(std::move(d));
}

Shape drop_first(const Shape& s) {
  return Shape(std::vector<std::int64_t>(s.dims().begin() + 1, s.dims().end()));
}

// Static shape of a part at build time (None where unknown).
Shape static_part_shape(const Node& scan, int part) {
  const ScanBody& b = *scan.body;
  const std::int64_t T = scan.inputs[0].shape()[0];
  if (part < b.n_out) return prepend(T, b.results[static_cast<std::size_t>(part)].shape());
  part -= b.n_out;
  const auto& carry = b.params[static_cast<std::size_t>(b.n_seq + part % b.n_carry)].shape();
  const std::int64_t slots = b.store ? T : (T < 0 ? -1 : std::min<std::int64_t>(T, 2));
  return part < b.n_carry ? prepend(slots, carry) : carry;
}

Shape scan_rule(const Node&, const std::vector<Shape>&) { return Shape{-1}; }
Shape scan_part_rule(const Node& n, const std::vector<Shape>&) {
  return static_part_shape(n.inputs[1].node(), static_cast<int>(n.attrs.ints[0]));
}
Shape scan_embed_rule(const Node&, const std::vector<Shape>&) { return Shape{-1}; }

Tensor part_node(Op op, const Tensor& buf, const Tensor& scan, int part) {
  Attrs a;
  a.ints = {part};
  return make_node(op, {buf, scan}, std::move(a), buf.dtype());
}

std::vector<Tensor> scan_part_grad(const Node& n, const Tensor&, const Tensor& g) {
  return {part_node(Op::ScanEmbed, g, n.inputs[1], static_cast<int>(n.attrs.ints[0])), Tensor()};
}
std::vector<Tensor> scan_embed_grad(const Node& n, const Tensor&, const Tensor& g) {
  return {part_node(Op::ScanPart, g, n.inputs[1], static_cast<int>(n.attrs.ints[0])), Tensor()};
}

Tensor zeros_for(const Tensor& like) {
  return backend::zeros_like(like, {.dtype = std::string(dtype_name(like.dtype()))});
}

// The gradient of a Scan is a Scan over the reversed time axis. Its body recomputes the forward
// step from the stored carries (rematerialization: memory stays O(T * carries)), then takes the
// vector-Jacobian product with the incoming gradients using ordinary graph nodes. Weight
// gradients of the form h_t^T g_t (a MatMul against a sequence) and bias gradients (a SumToLike)
// are not accumulated step by step: g_t is stacked and one large GEMM or reduction outside the
// loop sums over time. Other gradients of statics are accumulated in carries.
// The incoming gradient of a Scan is a sum of ScanEmbeds (one per ScanPart the loss used):
// read each part's gradient straight from them, so the flat gradient is never materialized.
// A part no gradient reaches gets a null tensor (zero).
struct IncomingGrads {
  bool known = true;
  std::unordered_map<std::int64_t, std::vector<Tensor>> parts;
  Tensor flat;
  Tensor y;
  Tensor get(const ScanBody& b, ScanPartKind kind, int index) const {
    const int part = part_number(b, kind, index);
    if (!known) return part_node(Op::ScanPart, flat, y, part);
    auto it = parts.find(part);
    if (it == parts.end()) return Tensor();
    return it->second.size() == 1 ? it->second[0]
                                  : make_node(Op::AddN, it->second, {}, it->second[0].dtype());
  }
};

IncomingGrads analyze_grads(const Tensor& g, const Tensor& y) {
  IncomingGrads r;
  r.flat = g;
  r.y = y;
  std::vector<Tensor> terms = g.op() == Op::AddN ? g.node().inputs : std::vector<Tensor>{g};
  for (Tensor t : terms) {
    if (t.op() == Op::SumToLike && t.node().inputs[1] == y) t = t.node().inputs[0];
    if (t.op() != Op::ScanEmbed || !(t.node().inputs[1] == y)) {
      r.known = false;
      return r;
    }
    r.parts[t.node().attrs.ints[0]].push_back(t.node().inputs[0]);
  }
  return r;
}

std::vector<Tensor> scan_grad(const Node& n, const Tensor& y_in, const Tensor& g) {
  const ScanBody& B = *n.body;
  const IncomingGrads in_grads = analyze_grads(g, y_in);
  const auto ns = static_cast<std::size_t>(B.n_seq), nc = static_cast<std::size_t>(B.n_carry),
             nst = static_cast<std::size_t>(B.n_static), no = static_cast<std::size_t>(B.n_out);
  // A scan that keeps no per-step carries (a backward scan) is recomputed once by a twin that
  // does, when its own gradient is asked for (second order).
  Tensor y = y_in;
  if (!B.store && nc > 0) {
    auto twin = std::make_shared<ScanBody>();
    twin->n_seq = B.n_seq;
    twin->n_carry = B.n_carry;
    twin->n_static = B.n_static;
    twin->n_out = B.n_out;
    twin->n_user_out = B.n_user_out;
    twin->residuals = B.residuals;
    twin->seq_reverse = B.seq_reverse;
    twin->out_reverse = B.out_reverse;
    twin->params = B.params;
    twin->results = B.results;
    twin->dtype = B.dtype;
    twin->store = true;
    y = make_body_node(Op::Scan, n.inputs, n.attrs, n.dtype, n.name + "/stored", twin);
  }
  ScanSpec spec;
  spec.name = n.name + "/grad";
  spec.store_carries = false;
  std::vector<Tensor> x_ph, c_ph, s_ph;
  std::vector<Tensor> seq_outer;  // the backward scan's sequence behind each parameter
  for (std::size_t i = 0; i < ns; ++i) {
    const Tensor& p = B.params[i];
    x_ph.push_back(make_source(Op::Placeholder, p.shape(), p.dtype(), "grad/x"));
    spec.seq_params.push_back(x_ph.back());
    spec.seqs.push_back(n.inputs[i]);
    spec.seq_reverse.push_back(!B.seq_reverse[i]);
  }
  for (std::size_t k = 0; k < nc; ++k) {
    const Tensor& p = B.params[ns + k];
    c_ph.push_back(make_source(Op::Placeholder, p.shape(), p.dtype(), "grad/carry"));
    spec.seq_params.push_back(c_ph.back());
    spec.seqs.push_back(scan_part(y, y, ScanPartKind::kStored, static_cast<int>(k)));
    spec.seq_reverse.push_back(1);
  }
  std::vector<Tensor> dy_ph(no), dst_ph(nc);  // null: no gradient reaches that part
  for (std::size_t m = 0; m < no; ++m) {
    const Tensor d = in_grads.get(B, ScanPartKind::kOutput, static_cast<int>(m));
    if (!d.defined()) continue;
    const Tensor& r = B.results[m];
    dy_ph[m] = make_source(Op::Placeholder, r.shape(), r.dtype(), "grad/dy");
    spec.seq_params.push_back(dy_ph[m]);
    spec.seqs.push_back(d);
    spec.seq_reverse.push_back(!B.out_reverse[m]);
  }
  if (B.store)  // gradients reaching the stored carries themselves
    for (std::size_t k = 0; k < nc; ++k) {
      const Tensor d = in_grads.get(B, ScanPartKind::kStored, static_cast<int>(k));
      if (!d.defined()) continue;
      const Tensor& p = B.params[ns + k];
      dst_ph[k] = make_source(Op::Placeholder, p.shape(), p.dtype(), "grad/dstored");
      spec.seq_params.push_back(dst_ph[k]);
      spec.seqs.push_back(d);
      spec.seq_reverse.push_back(1);
    }
  std::vector<Tensor> dc_ph;
  for (std::size_t k = 0; k < nc; ++k) {
    const Tensor& p = B.params[ns + k];
    dc_ph.push_back(make_source(Op::Placeholder, p.shape(), p.dtype(), "grad/dcarry"));
    spec.carry_params.push_back(dc_ph.back());
    const Tensor d = in_grads.get(B, ScanPartKind::kFinal, static_cast<int>(k));
    spec.inits.push_back(d.defined() ? d : zeros_for(n.inputs[ns + k]));
  }
  for (std::size_t c = 0; c < nst; ++c) {
    const Tensor& p = B.params[ns + nc + c];
    s_ph.push_back(make_source(Op::Placeholder, p.shape(), p.dtype(), "grad/static"));
    spec.static_params.push_back(s_ph.back());
    spec.statics.push_back(n.inputs[ns + nc + c]);
  }
  // Recompute the forward step on the new placeholders.
  std::vector<Tensor> fwd_params;
  for (auto& t : x_ph) fwd_params.push_back(t);
  for (auto& t : c_ph) fwd_params.push_back(t);
  for (auto& t : s_ph) fwd_params.push_back(t);
  std::unordered_map<Node*, Tensor> map;
  for (std::size_t i = 0; i < B.params.size(); ++i)
    map[B.params[i].node_ptr().get()] = fwd_params[i];
  {
    std::vector<Node*> order;
    std::unordered_set<Node*> seen;
    std::vector<Node*> stack;
    for (const auto& r : B.results) stack.push_back(r.node_ptr().get());
    while (!stack.empty()) {
      Node* m = stack.back();
      stack.pop_back();
      if (map.count(m) || !seen.insert(m).second) continue;
      order.push_back(m);
      for (const auto& in : m->inputs) stack.push_back(in.node_ptr().get());
    }
    std::sort(order.begin(), order.end(), [](Node* a, Node* b) { return a->id < b->id; });
    for (Node* m : order) {
      if (m->op == Op::Placeholder || m->op == Op::Variable || m->op == Op::Constant) {
        map[m] = Tensor(m->shared_from_this());  // a closed body has none but its params
        continue;
      }
      std::vector<Tensor> ins;
      for (const auto& in : m->inputs) ins.push_back(map.at(in.node_ptr().get()));
      map[m] = clone_node(*m, std::move(ins));
    }
  }
  // Stored projections are fed to the reverse body (its plan then does not recompute them).
  for (const auto& [m, node] : B.residuals) {
    spec.seq_params.push_back(map.at(const_cast<Node*>(node)));
    spec.seqs.push_back(scan_part(y, y, ScanPartKind::kOutput, m));
    spec.seq_reverse.push_back(!B.out_reverse[static_cast<std::size_t>(m)]);
  }
  std::vector<Tensor> ys, seeds;
  for (std::size_t m = 0; m < no; ++m) {
    if (!dy_ph[m].defined()) continue;
    ys.push_back(map.at(B.results[m].node_ptr().get()));
    seeds.push_back(dy_ph[m]);
  }
  for (std::size_t k = 0; k < nc; ++k) {
    ys.push_back(map.at(B.results[no + k].node_ptr().get()));
    seeds.push_back(dc_ph[k]);
  }
  const std::vector<Tensor> grads = gradients(ys, fwd_params, seeds);
  auto or_zeros = [&](const Tensor& gr, const Tensor& like) {
    return gr.defined() ? gr : zeros_for(like);
  };
  std::vector<int> dx_of(ns, -1);  // output index of each sequence's gradient (float only)
  for (std::size_t i = 0; i < ns; ++i) {
    // No output for a sequence no gradient reaches (a mask, or x after its projection was
    // hoisted): its gradient is null, not a stack of zeros.
    if (!is_floating(x_ph[i].dtype()) || !grads[i].defined()) continue;
    dx_of[i] = static_cast<int>(spec.outputs.size());
    spec.outputs.push_back(or_zeros(grads[i], x_ph[i]));
    spec.out_reverse.push_back(!B.seq_reverse[i]);
  }
  for (std::size_t k = 0; k < nc; ++k) {
    Tensor d = or_zeros(grads[ns + k], c_ph[k]);
    spec.new_carries.push_back(dst_ph[k].defined() ? d + dst_ph[k] : d);
  }
  // Gradients of the statics: hoisted terms (stacked per step, summed outside) or accumulators.
  struct Hoisted {
    std::size_t c;
    int out;       // stacked output index of g_t
    int seq = -1;  // MatMul against this backward sequence; -1: a SumToLike
  };
  std::vector<Hoisted> hoisted;
  std::vector<std::pair<std::size_t, std::size_t>> accs;  // (static, carry index)
  auto seq_index = [&](const Tensor& t) -> int {
    for (std::size_t i = 0; i < ns; ++i)
      if (t == x_ph[i]) return static_cast<int>(i);
    for (std::size_t k = 0; k < nc; ++k)
      if (t == c_ph[k]) return static_cast<int>(ns + k);
    return -1;
  };
  std::unordered_map<Node*, int> stacked;  // g_t already stacked (by node and time order)
  auto stack_out = [&](const Tensor& t, bool reverse) {
    Node* key = t.node_ptr().get();
    auto it = stacked.find(key);
    if (it != stacked.end() && spec.out_reverse[static_cast<std::size_t>(it->second)] == reverse)
      return it->second;
    const int idx = static_cast<int>(spec.outputs.size());
    spec.outputs.push_back(t);
    spec.out_reverse.push_back(reverse);
    stacked[key] = idx;
    return idx;
  };
  for (std::size_t c = 0; c < nst; ++c) {
    const Tensor& gr = grads[ns + nc + c];
    if (!gr.defined() || !is_floating(s_ph[c].dtype())) continue;
    std::vector<Tensor> terms = gr.op() == Op::AddN ? gr.node().inputs : std::vector<Tensor>{gr};
    std::vector<Tensor> rest;
    for (const Tensor& t : terms) {
      const Node& tn = t.node();
      if (tn.op == Op::MatMul && tn.attrs.ints == std::vector<std::int64_t>{1, 0}) {
        const int si = seq_index(tn.inputs[0]);
        const Shape& a = tn.inputs[0].shape();
        const Shape& b = tn.inputs[1].shape();
        if (si >= 0 && a.ndim() == 2 && b.ndim() == 2 && a[1] >= 0 && b[1] >= 0) {
          const bool rev = spec.seq_reverse[static_cast<std::size_t>(si)] != 0;
          hoisted.push_back({c, stack_out(tn.inputs[1], rev), si});
          continue;
        }
      }
      if (tn.op == Op::SumToLike && tn.inputs[1] == s_ph[c]) {
        hoisted.push_back({c, stack_out(tn.inputs[0], false), -1});
        continue;
      }
      rest.push_back(t);
    }
    if (rest.empty()) continue;
    const Tensor sum = rest.size() == 1 ? rest[0] : make_node(Op::AddN, rest, {}, rest[0].dtype());
    const Tensor& outer = n.inputs[ns + nc + c];
    const Tensor acc = make_source(Op::Placeholder, outer.shape(), s_ph[c].dtype(), "grad/acc");
    accs.emplace_back(c, spec.carry_params.size());
    spec.carry_params.push_back(acc);
    spec.inits.push_back(zeros_for(outer));
    spec.new_carries.push_back(acc + sum);
  }
  ScanResult back = make_scan(spec);
  std::vector<Tensor> out(n.inputs.size());
  for (std::size_t i = 0; i < ns; ++i)
    if (dx_of[i] >= 0) out[i] = back.outputs[static_cast<std::size_t>(dx_of[i])];
  for (std::size_t k = 0; k < nc; ++k) out[ns + k] = back.final_carries[k];
  std::vector<std::vector<Tensor>> parts(nst);
  for (auto [c, k] : accs) parts[c].push_back(back.final_carries[k]);
  for (const auto& h : hoisted) {
    const Tensor& G = back.outputs[static_cast<std::size_t>(h.out)];
    const Tensor& outer = n.inputs[ns + nc + h.c];
    if (h.seq < 0) {
      parts[h.c].push_back(make_node(Op::SumToLike, {G, outer}, {}, G.dtype()));
      continue;
    }
    const Tensor& S = spec.seqs[static_cast<std::size_t>(h.seq)];
    Attrs mm;
    mm.ints = {1, 0};  // S^T G over (T, B, .) stacks: one GEMM over every step and sample
    parts[h.c].push_back(make_node(Op::MatMul, {S, G}, std::move(mm), G.dtype()));
  }
  for (std::size_t c = 0; c < nst; ++c) {
    if (parts[c].empty()) continue;
    out[ns + nc + c] =
        parts[c].size() == 1 ? parts[c][0] : make_node(Op::AddN, parts[c], {}, parts[c][0].dtype());
  }
  return out;
}

}  // namespace

const Function& ScanBody::function_for(const std::string& backend, bool fuse, bool fold) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& v : variants_)
    if (v->backend == backend && v->fuse == fuse && v->fold == fold) return v->fn;
  variants_.push_back(std::make_unique<Variant>(Variant{
      backend, fuse, fold,
      Function(params, results, {},
               {.backend = backend, .fuse = fuse, .fold = fold, .feed_intermediates = true})}));
  return variants_.back()->fn;
}

Tensor scan_part(const Tensor& buf, const Tensor& scan, ScanPartKind kind, int index) {
  return part_node(Op::ScanPart, buf, scan, part_number(*scan.node().body, kind, index));
}

ScanResult make_scan(const ScanSpec& spec) {
  const std::string who = "K::" + spec.name;
  if (spec.seqs.empty()) throw ValueError(who + ": needs at least one sequence to iterate over");
  if (spec.seq_params.size() != spec.seqs.size() || spec.carry_params.size() != spec.inits.size() ||
      spec.static_params.size() != spec.statics.size() ||
      spec.new_carries.size() != spec.carry_params.size())
    throw ValueError(who + ": mismatched parameter lists");
  for (const auto& s : spec.seqs)
    if (s.ndim() < 1) throw ValueError(who + ": sequence " + describe(s) + " has no time axis");
  std::vector<Tensor> results = spec.outputs;
  results.insert(results.end(), spec.new_carries.begin(), spec.new_carries.end());
  if (results.empty()) throw ValueError(who + ": the body returns nothing");
  const DType dt = results[0].dtype();
  for (const auto& r : results)
    if (r.dtype() != dt)
      throw NotImplementedError(who +
                                ": every output and state of a loop must have one dtype; got " +
                                std::string(dtype_name(dt)) + " and " + describe(r));
  for (std::size_t k = 0; k < spec.carry_params.size(); ++k) {
    const Shape& a = spec.carry_params[k].shape();
    const Shape& b = spec.new_carries[k].shape();
    bool ok = a.ndim() == b.ndim() && spec.carry_params[k].dtype() == spec.new_carries[k].dtype();
    for (int d = 0; ok && d < a.ndim(); ++d) ok = a[d] < 0 || b[d] < 0 || a[d] == b[d];
    if (!ok)
      throw ValueError(who + ": state " + std::to_string(k) + " comes back as " +
                       describe(spec.new_carries[k]) + " but went in as " +
                       describe(spec.carry_params[k]) + "; states must keep their shape and dtype");
  }
  std::vector<Tensor> seq_params = spec.seq_params, seqs = spec.seqs;
  std::vector<char> seq_reverse = spec.seq_reverse;
  seq_reverse.resize(seqs.size(), 0);
  std::unordered_map<Node*, Tensor> subst;
  if (spec.hoist_input_projections) {
    std::unordered_set<Node*> any_param;
    for (const auto* list : {&spec.seq_params, &spec.carry_params, &spec.static_params})
      for (const auto& p : *list) any_param.insert(p.node_ptr().get());
    DependsOn depends(any_param);
    std::unordered_set<Node*> seen;
    std::vector<Node*> stack;
    for (const auto& r : results) stack.push_back(r.node_ptr().get());
    std::vector<Node*> found;
    while (!stack.empty()) {
      Node* m = stack.back();
      stack.pop_back();
      if (any_param.count(m) || !seen.insert(m).second || !depends(m)) continue;
      if (m->op == Op::MatMul && m->attrs.ints == std::vector<std::int64_t>{0, 0} &&
          m->inputs[1].ndim() == 2 && !depends(m->inputs[1].node_ptr().get())) {
        for (std::size_t i = 0; i < spec.seq_params.size(); ++i)
          if (m->inputs[0] == spec.seq_params[i] && spec.seq_params[i].ndim() == 2) {
            found.push_back(m);
            break;
          }
        if (!found.empty() && found.back() == m) continue;
      }
      for (const auto& in : m->inputs) stack.push_back(in.node_ptr().get());
    }
    std::sort(found.begin(), found.end(), [](Node* a, Node* b) { return a->id < b->id; });
    for (Node* m : found) {
      std::size_t i = 0;
      while (!(m->inputs[0] == spec.seq_params[i])) ++i;
      Tensor ph = make_source(Op::Placeholder, m->shape, m->dtype, "hoisted/" + m->name);
      subst[m] = ph;
      seq_params.push_back(ph);
      Attrs mm;
      mm.ints = {0, 0};  // (T, B, F) . (F, G) -> (T, B, G): one GEMM over every step
      seqs.push_back(make_node(Op::MatMul, {spec.seqs[i], m->inputs[1]}, std::move(mm), m->dtype));
      seq_reverse.push_back(seq_reverse[i]);
    }
  }
  std::vector<Tensor> params = seq_params;
  params.insert(params.end(), spec.carry_params.begin(), spec.carry_params.end());
  params.insert(params.end(), spec.static_params.begin(), spec.static_params.end());
  ClosedBody closed = close_body(params, results, who, subst);

  auto body = std::make_shared<ScanBody>();
  body->n_seq = static_cast<int>(seqs.size());
  body->n_carry = static_cast<int>(spec.inits.size());
  body->n_static = static_cast<int>(spec.statics.size() + closed.captures.size());
  body->n_out = static_cast<int>(spec.outputs.size());
  body->seq_reverse = seq_reverse;
  body->out_reverse = spec.out_reverse;
  body->out_reverse.resize(spec.outputs.size(), 0);
  body->params = params;
  body->params.insert(body->params.end(), closed.capture_params.begin(),
                      closed.capture_params.end());
  body->results = closed.results;
  body->n_user_out = body->n_out;
  if (spec.store_carries) {
    // Store each recurrent projection (carry . static) for the reverse scan: it then needs no
    // GEMM to recompute the forward step's pre-activations.
    std::unordered_set<Node*> carries, statics;
    for (const auto& t : spec.carry_params) carries.insert(t.node_ptr().get());
    for (std::size_t i = seq_params.size() + spec.carry_params.size(); i < body->params.size(); ++i)
      statics.insert(body->params[i].node_ptr().get());
    std::unordered_set<Node*> seen;
    std::vector<Node*> stack, found;
    for (const auto& r : body->results) stack.push_back(r.node_ptr().get());
    while (!stack.empty()) {
      Node* m = stack.back();
      stack.pop_back();
      if (carries.count(m) || statics.count(m) || !seen.insert(m).second) continue;
      if (m->op == Op::MatMul && m->attrs.ints == std::vector<std::int64_t>{0, 0} &&
          carries.count(m->inputs[0].node_ptr().get()) &&
          statics.count(m->inputs[1].node_ptr().get()) && m->dtype == dt)
        found.push_back(m);
      // Random draws (dropout masks) too: the reverse scan must see the very values the
      // forward step drew, not draw again.
      if (op_def(m->op).random) {
        if (m->dtype != dt)
          throw NotImplementedError(who + ": a random op of dtype " +
                                    std::string(dtype_name(m->dtype)) + " in a loop of dtype " +
                                    std::string(dtype_name(dt)));
        found.push_back(m);
      }
      for (const auto& in : m->inputs) stack.push_back(in.node_ptr().get());
    }
    std::sort(found.begin(), found.end(), [](Node* a, Node* b) { return a->id < b->id; });
    for (Node* m : found) {
      const int idx = body->n_out++;
      body->results.insert(body->results.begin() + idx, Tensor(m->shared_from_this()));
      body->out_reverse.push_back(0);
      body->residuals.emplace_back(idx, m);
    }
  }
  body->dtype = dt;
  body->store = spec.store_carries;

  std::vector<Tensor> ins = seqs;
  ins.insert(ins.end(), spec.inits.begin(), spec.inits.end());
  ins.insert(ins.end(), spec.statics.begin(), spec.statics.end());
  ins.insert(ins.end(), closed.captures.begin(), closed.captures.end());
  ScanResult r;
  r.node = make_body_node(Op::Scan, std::move(ins), {}, dt, spec.name, body);
  for (int m = 0; m < body->n_user_out; ++m)
    r.outputs.push_back(scan_part(r.node, r.node, ScanPartKind::kOutput, m));
  for (int k = 0; k < body->n_carry; ++k)
    r.final_carries.push_back(scan_part(r.node, r.node, ScanPartKind::kFinal, k));
  return r;
}

std::shared_ptr<ScanLayout> scan_layout(const Node& scan, const std::vector<Shape>& in,
                                        const std::string& backend, bool fuse, bool fold) {
  const ScanBody& b = *scan.body;
  const std::string who = "K::" + scan.name;
  auto l = std::make_shared<ScanLayout>();
  l->body = &b;
  l->T = in[0][0];
  for (int i = 1; i < b.n_seq; ++i)
    if (in[static_cast<std::size_t>(i)][0] != l->T)
      throw ValueError(who + ": sequences differ in length: " + in[0].str() + " and " +
                       in[static_cast<std::size_t>(i)].str());
  std::vector<Shape> sig;
  for (int i = 0; i < b.n_seq; ++i) sig.push_back(drop_first(in[static_cast<std::size_t>(i)]));
  for (std::size_t i = static_cast<std::size_t>(b.n_seq); i < in.size(); ++i) sig.push_back(in[i]);
  for (std::size_t i = 0; i < sig.size(); ++i) {
    const Shape& want = b.params[i].shape();
    bool ok = want.ndim() == sig[i].ndim();
    for (int d = 0; ok && d < want.ndim(); ++d) ok = want[d] < 0 || want[d] == sig[i][d];
    if (!ok)
      throw ValueError(who + ": loop input " + std::to_string(i) + " has shape " + sig[i].str() +
                       " per step, but the step function was built for " + want.str());
  }
  l->fn = &b.function_for(backend, fuse, fold);
  l->plan = function_compile(*l->fn, sig);
  const Plan& p = *l->plan;
  auto result_shape = [&](std::size_t r) {
    return p.values[static_cast<std::size_t>(p.outputs[r])].shape;
  };
  for (int m = 0; m < b.n_out; ++m)
    l->parts.push_back(prepend(l->T, result_shape(static_cast<std::size_t>(m))));
  for (int k = 0; k < b.n_carry; ++k) {
    const Shape& c = sig[static_cast<std::size_t>(b.n_seq + k)];
    const Shape got = result_shape(static_cast<std::size_t>(b.n_out + k));
    if (got != c)
      throw ValueError(who + ": state " + std::to_string(k) + " comes back with shape " +
                       got.str() + " but went in with shape " + c.str());
    l->parts.push_back(prepend(b.store ? l->T : std::min<std::int64_t>(l->T, 2), c));
  }
  for (int k = 0; k < b.n_carry; ++k)
    l->parts.push_back(sig[static_cast<std::size_t>(b.n_seq + k)]);
  for (const auto& s : l->parts) {
    l->offset.push_back(l->total);
    if (__builtin_add_overflow(l->total, s.num_elements(), &l->total))
      throw ValueError(who + ": the loop's outputs and states (" + s.str() +
                       ", ...) have more elements than fit in a 64-bit count");
  }
  const std::size_t es = dtype_size(b.dtype);
  for (int i = 0; i < b.n_seq; ++i)
    l->seq_step_bytes.push_back(
        static_cast<std::size_t>(sig[static_cast<std::size_t>(i)].num_elements()) *
        dtype_size(b.params[static_cast<std::size_t>(i)].dtype()));
  for (int m = 0; m < b.n_out; ++m)
    l->out_step_bytes.push_back(
        static_cast<std::size_t>(result_shape(static_cast<std::size_t>(m)).num_elements()) * es);
  for (int k = 0; k < b.n_carry; ++k)
    l->carry_bytes.push_back(
        static_cast<std::size_t>(sig[static_cast<std::size_t>(b.n_seq + k)].num_elements()) * es);
  l->fed.resize(b.params.size());
  l->outs.resize(b.results.size());
  return l;
}

Shape scan_layout_shape(const ScanLayout& l, int part) {
  return part < 0 ? Shape{l.total} : l.parts[static_cast<std::size_t>(part)];
}

void run_scan(const KernelCall& c) {
  auto& l = *const_cast<ScanLayout*>(static_cast<const ScanLayout*>(c.ctx));
  const ScanBody& b = *l.body;
  const std::size_t es = dtype_size(b.dtype);
  char* base = static_cast<char*>(c.out.data);
  auto part = [&](int k) {
    return base + static_cast<std::size_t>(l.offset[static_cast<std::size_t>(k)]) * es;
  };
  const std::size_t ns = static_cast<std::size_t>(b.n_seq),
                    nc = static_cast<std::size_t>(b.n_carry);
  // Carries live in the stored parts: step j reads slot j and writes slot j + 1 (or the final);
  // without storage the two slots alternate.
  auto slot = [&](std::int64_t j) { return b.store ? j : j % 2; };
  for (std::size_t k = 0; k < nc; ++k) {
    char* dst = l.T > 0 ? part(b.n_out + static_cast<int>(k))
                        : part(b.n_out + b.n_carry + static_cast<int>(k));
    std::memcpy(dst, c.in[ns + k].data, l.carry_bytes[k]);
  }
  for (std::size_t s = ns + nc; s < b.params.size(); ++s) l.fed[s] = c.in[s].data;
  for (std::int64_t j = 0; j < l.T; ++j) {
    for (std::size_t i = 0; i < ns; ++i) {
      const std::int64_t t = b.seq_reverse[i] ? l.T - 1 - j : j;
      l.fed[i] =
          static_cast<char*>(c.in[i].data) + static_cast<std::size_t>(t) * l.seq_step_bytes[i];
    }
    for (std::size_t k = 0; k < nc; ++k) {
      char* stored = part(b.n_out + static_cast<int>(k));
      l.fed[ns + k] = stored + static_cast<std::size_t>(slot(j)) * l.carry_bytes[k];
      l.outs[static_cast<std::size_t>(b.n_out) + k] =
          j + 1 < l.T ? stored + static_cast<std::size_t>(slot(j + 1)) * l.carry_bytes[k]
                      : part(b.n_out + b.n_carry + static_cast<int>(k));
    }
    for (std::size_t m = 0; m < static_cast<std::size_t>(b.n_out); ++m) {
      const std::int64_t t = b.out_reverse[m] ? l.T - 1 - j : j;
      l.outs[m] = part(static_cast<int>(m)) + static_cast<std::size_t>(t) * l.out_step_bytes[m];
    }
    function_execute_raw(*l.fn, *l.plan, l.fed.data(), l.outs.data());
  }
}

void run_scan_part(const KernelCall& c) {
  const auto& l = *static_cast<const ScanLayout*>(c.ctx);
  const std::size_t es = dtype_size(c.out.dtype);
  const auto k = static_cast<std::size_t>(c.attrs->ints[0]);
  std::memcpy(c.out.data,
              static_cast<const char*>(c.in[0].data) + static_cast<std::size_t>(l.offset[k]) * es,
              static_cast<std::size_t>(c.out.size) * es);
}

void run_scan_embed(const KernelCall& c) {
  const auto& l = *static_cast<const ScanLayout*>(c.ctx);
  const std::size_t es = dtype_size(c.out.dtype);
  const auto k = static_cast<std::size_t>(c.attrs->ints[0]);
  std::memset(c.out.data, 0, static_cast<std::size_t>(c.out.size) * es);
  std::memcpy(static_cast<char*>(c.out.data) + static_cast<std::size_t>(l.offset[k]) * es,
              c.in[0].data, static_cast<std::size_t>(c.in[0].size) * es);
}

void register_scan_ops() {
  define_op(Op::Scan, {.shape = &scan_rule,
                       .grad = &scan_grad,
                       .pure = false,
                       .dispatch_input = -1,
                       .may_throw = true});  // its body may hold any op
  define_op(Op::ScanPart,
            {.shape = &scan_part_rule, .grad = &scan_part_grad, .dispatch_input = -1});
  define_op(Op::ScanEmbed,
            {.shape = &scan_embed_rule, .grad = &scan_embed_grad, .dispatch_input = -1});
}

}  // namespace ktape
