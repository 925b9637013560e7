// The gradient of a Scan: a Scan over the reversed time axis (see scan_grad below).
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "autodiff/gradients.hpp"
#include "engine/errors.hpp"
#include "engine/graph_walk.hpp"
#include "ops/core.hpp"
#include "ops/elementwise.hpp"
#include "ops/loops/scan_internal.hpp"

namespace ktape::loops {

using namespace ktape::backend;

namespace {

Tensor zeros_for(const Tensor& like) {
  return backend::zeros_like(like, {.dtype = std::string(dtype_name(like.dtype()))});
}

// The gradient of a Scan is a Scan over the reversed time axis. Its body recomputes the forward
// step from the stored carries (rematerialization: memory stays O(T * carries)), then takes the
// vector-Jacobian product with the incoming gradients using ordinary graph nodes. Weight
// gradients of the form h_t^T g_t (a MatMul, OpDef::stack_sum) are not accumulated step by step:
// g_t is stacked and one large GEMM outside the loop sums over time. Other gradients of statics
// (a bias gradient's column sums) are accumulated in carries.
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
    r.parts[part_of(t.node())].push_back(t.node().inputs[0]);
  }
  return r;
}

}  // namespace

std::vector<Tensor> scan_grad(const Node& n, const Tensor& y_in, const Tensor& g) {
  const ScanBody& B = scan_body(n);
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
    y = make_node_with_extra(Op::Scan, n.inputs, n.attrs, n.dtype, n.name + "/stored", twin);
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
    std::vector<Node*> roots;
    for (const auto& r : B.results) roots.push_back(r.node_ptr().get());
    const auto order = reachable_in_tape_order(
        roots, [](Node*) { return true; }, [&](Node* m) { return map.count(m) > 0; });
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
  // A term of a static's gradient that sums over the steps (OpDef::stack_sum: x_t^T g_t) is not
  // accumulated step by step: its per-step inputs are stacked — a sequence the
  // backward scan reads, or a stacked output of it — and the op runs once after the loop.
  struct Hoisted {
    std::size_t c;
    const Node* term;
    std::vector<int> seq, out;  // per input: backward sequence / stacked output index, or -1
    std::vector<Tensor> fixed;  // per input otherwise: a loop-invariant outer tensor
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
  std::unordered_set<Node*> params;
  for (const auto* list : {&spec.seq_params, &spec.carry_params, &spec.static_params})
    for (const auto& p : *list) params.insert(p.node_ptr().get());
  DependsOn varies(params);
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
  auto try_hoist = [&](const Tensor& t, std::size_t c) {
    const Node& tn = t.node();
    const OpDef& d = op_def(tn.op);
    const unsigned mask = d.stack_sum ? d.stack_sum(tn) : 0u;
    if (!mask) return false;
    const std::size_t k = tn.inputs.size();
    Hoisted h{c, &tn, std::vector<int>(k, -1), std::vector<int>(k, -1), std::vector<Tensor>(k)};
    int rev = -1;  // the time order of the stacked sequences
    for (std::size_t i = 0; i < k; ++i) {
      const Tensor& in = tn.inputs[i];
      if (mask & (1u << i)) {
        h.seq[i] = seq_index(in);
        if (h.seq[i] >= 0) {
          const int r = spec.seq_reverse[static_cast<std::size_t>(h.seq[i])];
          if (rev >= 0 && r != rev) return false;
          rev = r;
        } else if (!varies(in.node_ptr().get())) {
          return false;  // a loop-invariant input would need repeating, not stacking
        }
        continue;
      }
      for (std::size_t s = 0; s < nst && !h.fixed[i].defined(); ++s)
        if (in == s_ph[s]) h.fixed[i] = n.inputs[ns + nc + s];
      if (!h.fixed[i].defined()) {
        if (varies(in.node_ptr().get())) return false;
        h.fixed[i] = in;
      }
    }
    // A term no sequence orders (h_{t-1} of h^T dz) is stacked reversed (for a forward loop:
    // in forward time order, like its sequence gradients and carry-ordered terms), so that
    // equal stacked outputs can share storage (ScanLayout::alias).
    for (std::size_t i = 0; i < k; ++i)
      if ((mask & (1u << i)) && h.seq[i] < 0) h.out[i] = stack_out(tn.inputs[i], rev != 0);
    hoisted.push_back(std::move(h));
    return true;
  };
  for (std::size_t c = 0; c < nst; ++c) {
    const Tensor& gr = grads[ns + nc + c];
    if (!gr.defined() || !is_floating(s_ph[c].dtype())) continue;
    std::vector<Tensor> terms = gr.op() == Op::AddN ? gr.node().inputs : std::vector<Tensor>{gr};
    std::vector<Tensor> rest;
    for (const Tensor& t : terms)
      if (!try_hoist(t, c)) rest.push_back(t);
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
    std::vector<Tensor> ins;
    for (std::size_t i = 0; i < h.seq.size(); ++i)
      ins.push_back(h.seq[i] >= 0   ? spec.seqs[static_cast<std::size_t>(h.seq[i])]
                    : h.out[i] >= 0 ? back.outputs[static_cast<std::size_t>(h.out[i])]
                                    : h.fixed[i]);
    parts[h.c].push_back(clone_node(*h.term, std::move(ins)));  // one op over every step
  }
  for (std::size_t c = 0; c < nst; ++c) {
    if (parts[c].empty()) continue;
    out[ns + nc + c] =
        parts[c].size() == 1 ? parts[c][0] : make_node(Op::AddN, parts[c], {}, parts[c][0].dtype());
  }
  return out;
}

}  // namespace ktape::loops
