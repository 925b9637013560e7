#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "engine/errors.hpp"
#include "engine/graph_walk.hpp"
#include "ops/loops/scan_internal.hpp"

namespace ktape::loops {

std::string describe(const Tensor& t) {
  return "'" + t.name() + "' (shape " + t.shape().str() + ", " +
         std::string(dtype_name(t.dtype())) + ")";
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
  const ScanBody& b = scan_body(scan);
  const std::int64_t T = scan.inputs[0].shape()[0];
  if (part < b.n_out) return prepend(T, b.results[static_cast<std::size_t>(part)].shape());
  part -= b.n_out;
  const auto& carry = b.params[static_cast<std::size_t>(b.n_seq + part % b.n_carry)].shape();
  const std::int64_t slots = b.store ? T : (T < 0 ? -1 : std::min<std::int64_t>(T, 2));
  return part < b.n_carry ? prepend(slots, carry) : carry;
}

Shape scan_rule(const Node&, const std::vector<Shape>&) { return Shape{-1}; }
Shape scan_part_rule(const Node& n, const std::vector<Shape>&) {
  return static_part_shape(n.inputs[1].node(), part_of(n));
}
Shape scan_embed_rule(const Node&, const std::vector<Shape>&) { return Shape{-1}; }

int part_of(const Node& n) { return attrs::ScanPart::of(n.attrs).part; }

Tensor part_node(Op op, const Tensor& buf, const Tensor& scan, int part) {
  return make_node(op, {buf, scan}, attrs::ScanPart::make(part), buf.dtype());
}

std::vector<Tensor> scan_part_grad(const Node& n, const Tensor&, const Tensor& g) {
  return {part_node(Op::ScanEmbed, g, n.inputs[1], part_of(n)), Tensor()};
}
std::vector<Tensor> scan_embed_grad(const Node& n, const Tensor&, const Tensor& g) {
  return {part_node(Op::ScanPart, g, n.inputs[1], part_of(n)), Tensor()};
}

namespace {

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
  // The body: the nodes that depend on a parameter (parameters excluded); the captures: the
  // nodes it reads that do not.
  std::vector<Node*> roots;
  for (const auto& r : results) roots.push_back(r.node_ptr().get());
  const auto reached = reachable_in_tape_order(
      roots, [&](Node* n) { return depends(n); }, [&](Node* n) { return param_set.count(n) > 0; });
  std::vector<Node*> body, caps;
  for (Node* n : reached) {
    if (!depends(n)) {
      caps.push_back(n);
      continue;
    }
    if (n->op == Op::Assign || n->op == Op::Group)
      throw ValueError(who + ": the step function assigns a variable (" + n->name +
                       "); a loop body must be free of updates");
    body.push_back(n);
  }

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

}  // namespace

}  // namespace ktape::loops

namespace ktape {

using namespace loops;

const ScanBody& scan_body(const Node& scan) {
  const auto* b = dynamic_cast<const ScanBody*>(scan.extra.get());
  if (!b) throw ValueError("'" + scan.name + "' is not a loop (Scan) node");
  return *b;
}

unsigned ScanBody::shape_only_inputs() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (shape_only_) return *shape_only_;
  // A node's data is needed when it is a result, or a needed node reads it through an input that
  // is not shape-only (as a Function's plan decides what to run): walked from the last node back.
  std::vector<Node*> roots;
  for (const auto& r : results) roots.push_back(r.node_ptr().get());
  std::unordered_set<const Node*> param_set;
  for (const auto& p : params) param_set.insert(p.node_ptr().get());
  const auto order = reachable_in_tape_order(
      roots, [&](Node* m) { return !param_set.count(m); }, [](Node*) { return false; });
  std::unordered_set<const Node*> needed(roots.begin(), roots.end());
  for (Node* m : order)  // prints run whatever reads them, as in a plan
    if (op_def(m->op).side_effect) needed.insert(m);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* m = *it;
    if (!needed.count(m) || param_set.count(m)) continue;
    const OpDef& def = op_def(m->op);
    const unsigned skip = def.shape_only ? def.shape_only(*m) : 0u;
    for (std::size_t k = 0; k < m->inputs.size(); ++k)
      if (k >= 32 || !(skip >> k & 1u)) needed.insert(m->inputs[k].node_ptr().get());
    for (const auto& c : m->control_inputs) needed.insert(c.node_ptr().get());
  }
  unsigned mask = 0;
  for (std::size_t i = 0; i < params.size() && i < 32; ++i) {
    const bool carry =
        i >= static_cast<std::size_t>(n_seq) && i < static_cast<std::size_t>(n_seq + n_carry);
    if (!carry && !needed.count(params[i].node_ptr().get())) mask |= 1u << i;
  }
  shape_only_ = mask;
  return mask;
}

const Function& ScanBody::function_for(const std::string& backend, bool fuse, bool fold) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& v : variants_)
    if (v->backend == backend && v->fuse == fuse && v->fold == fold) return v->fn;
  variants_.push_back(
      std::make_unique<Variant>(Variant{backend, fuse, fold,
                                        Function(params, results, {},
                                                 {.backend = backend,
                                                  .fuse = fuse,
                                                  .fold = fold,
                                                  .feed_intermediates = true,
                                                  .loop_statics = n_seq + n_carry})}));
  return variants_.back()->fn;
}

Tensor scan_part(const Tensor& buf, const Tensor& scan, ScanPartKind kind, int index) {
  return loops::part_node(Op::ScanPart, buf, scan,
                          loops::part_number(scan_body(scan.node()), kind, index));
}

namespace {

void check_spec(const ScanSpec& spec, const std::vector<Tensor>& results, const std::string& who) {
  if (spec.seqs.empty()) throw ValueError(who + ": needs at least one sequence to iterate over");
  if (spec.seq_params.size() != spec.seqs.size() || spec.carry_params.size() != spec.inits.size() ||
      spec.static_params.size() != spec.statics.size() ||
      spec.new_carries.size() != spec.carry_params.size())
    throw ValueError(who + ": mismatched parameter lists");
  for (const auto& s : spec.seqs)
    if (s.ndim() < 1) throw ValueError(who + ": sequence " + describe(s) + " has no time axis");
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
}

// The sequences a loop reads: the spec's, then one per hoisted op. A costly op whose stacked
// inputs (OpDef::stack_map) are all sequence slices and whose other inputs are loop-invariant
// (x_t . W) runs once over every step outside the loop (one GEMM); the body reads its result
// as a sequence, through a new placeholder substituted for the op (`subst`).
struct Sequences {
  std::vector<Tensor> params, outer;
  std::vector<char> reverse;
  std::unordered_map<Node*, Tensor> subst;
};

Sequences hoist(const ScanSpec& spec, const std::vector<Tensor>& results) {
  Sequences s{spec.seq_params, spec.seqs, spec.seq_reverse, {}};
  s.reverse.resize(s.outer.size(), 0);
  if (!spec.hoist_input_projections) return s;
  std::unordered_set<Node*> any_param;
  for (const auto* list : {&spec.seq_params, &spec.carry_params, &spec.static_params})
    for (const auto& p : *list) any_param.insert(p.node_ptr().get());
  DependsOn depends(any_param);
  auto seq_of = [&](const Tensor& t) -> int {
    for (std::size_t i = 0; i < spec.seq_params.size(); ++i)
      if (t == spec.seq_params[i]) return static_cast<int>(i);
    return -1;
  };
  // Which sequence each stacked input of m reads, or empty when m cannot be hoisted.
  auto hoistable = [&](Node* m) {
    std::vector<int> seq(m->inputs.size(), -1);
    const OpDef& def = op_def(m->op);
    const unsigned mask = def.costly && def.stack_map ? def.stack_map(*m) : 0u;
    if (!mask) return std::vector<int>{};
    int rev = -1;
    for (std::size_t i = 0; i < m->inputs.size(); ++i) {
      const Tensor& in = m->inputs[i];
      if (!(mask & (1u << i))) {
        if (depends(in.node_ptr().get())) return std::vector<int>{};
        continue;
      }
      seq[i] = seq_of(in);
      if (seq[i] < 0) return std::vector<int>{};
      const int r = s.reverse[static_cast<std::size_t>(seq[i])];
      if (rev >= 0 && r != rev) return std::vector<int>{};
      rev = r;
    }
    return seq;
  };
  std::vector<std::pair<Node*, std::vector<int>>> found;
  std::vector<Node*> roots;
  for (const auto& r : results) roots.push_back(r.node_ptr().get());
  reachable_in_tape_order(
      roots,
      [&](Node* m) {
        std::vector<int> seq = hoistable(m);
        if (seq.empty()) return true;
        found.emplace_back(m, std::move(seq));
        return false;
      },
      [&](Node* m) { return any_param.count(m) > 0 || !depends(m); });
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first->id < b.first->id; });
  for (const auto& [m, seq] : found) {
    std::vector<Tensor> ins;
    int rev = 0;
    for (std::size_t i = 0; i < m->inputs.size(); ++i) {
      if (seq[i] < 0) {
        ins.push_back(m->inputs[i]);
        continue;
      }
      ins.push_back(spec.seqs[static_cast<std::size_t>(seq[i])]);
      rev = s.reverse[static_cast<std::size_t>(seq[i])];
    }
    Tensor ph = make_source(Op::Placeholder, m->shape, m->dtype, "hoisted/" + m->name);
    s.subst[m] = ph;
    s.params.push_back(ph);
    s.outer.push_back(clone_node(*m, std::move(ins)));  // e.g. (T, B, F) . (F, G): one GEMM
    s.reverse.push_back(static_cast<char>(rev));
  }
  return s;
}

// Values the reverse pass reads instead of recomputing them: each costly op of the loop's state
// and statics (the recurrent projection h . U), each per-step value of an op whose gradient
// reads its output (the gates' sigmoids and tanhs: the reverse pass then runs none of the
// forward cell's GEMMs) unless it is of a new state alone, and every random draw (the reverse pass
// must see the very values the forward step drew). They become extra per-step outputs.
void store_residuals(ScanBody& body, const std::vector<Tensor>& carry_params, std::size_t n_seq,
                     DType dt, const std::string& who) {
  std::unordered_set<Node*> carries, statics, varying, new_carries;
  for (const auto& t : carry_params) carries.insert(t.node_ptr().get());
  for (std::size_t k = 0; k < carry_params.size(); ++k)
    new_carries.insert(body.results[static_cast<std::size_t>(body.n_out) + k].node_ptr().get());
  for (std::size_t i = n_seq + carry_params.size(); i < body.params.size(); ++i)
    statics.insert(body.params[i].node_ptr().get());
  for (std::size_t i = 0; i < n_seq + carry_params.size(); ++i)
    varying.insert(body.params[i].node_ptr().get());
  std::vector<Node*> roots, found;
  for (const auto& r : body.results) roots.push_back(r.node_ptr().get());
  const auto order = reachable_in_tape_order(
      roots, [](Node*) { return true; },
      [&](Node* m) { return carries.count(m) > 0 || statics.count(m) > 0; });
  for (Node* m : order) {
    const OpDef& def = op_def(m->op);
    bool state_only = def.costly && !m->inputs.empty() && m->dtype == dt, reads_carry = false;
    bool varies = false;
    for (const auto& in : m->inputs) {
      Node* i = in.node_ptr().get();
      reads_carry = reads_carry || carries.count(i) > 0;
      state_only = state_only && (carries.count(i) > 0 || statics.count(i) > 0);
      varies = varies || varying.count(i) > 0;
    }
    if (varies) varying.insert(m);
    // Of a new state (an LSTM's tanh(c_t)): the reverse pass recomputes it from that state,
    // which it rebuilds from values it reads anyway (c_t = f c_{t-1} + i g), rather than read
    // it back from memory.
    const bool of_new_state =
        m->inputs.size() == 1 && new_carries.count(m->inputs[0].node_ptr().get()) > 0;
    if ((state_only && reads_carry) ||
        (def.store_in_loops && varies && m->dtype == dt && !of_new_state))
      found.push_back(m);
    if (def.random) {
      if (m->dtype != dt)
        throw NotImplementedError(who + ": a random op of dtype " +
                                  std::string(dtype_name(m->dtype)) + " in a loop of dtype " +
                                  std::string(dtype_name(dt)));
      found.push_back(m);
    }
  }
  for (Node* m : found) {
    const int idx = body.n_out++;
    body.results.insert(body.results.begin() + idx, Tensor(m->shared_from_this()));
    body.out_reverse.push_back(0);
    body.residuals.emplace_back(idx, m);
  }
}

}  // namespace

ScanResult make_scan(const ScanSpec& spec) {
  const std::string who = "K::" + spec.name;
  std::vector<Tensor> results = spec.outputs;
  results.insert(results.end(), spec.new_carries.begin(), spec.new_carries.end());
  check_spec(spec, results, who);
  const DType dt = results[0].dtype();
  Sequences seqs = hoist(spec, results);
  std::vector<Tensor> params = seqs.params;
  params.insert(params.end(), spec.carry_params.begin(), spec.carry_params.end());
  params.insert(params.end(), spec.static_params.begin(), spec.static_params.end());
  ClosedBody closed = close_body(params, results, who, seqs.subst);

  auto body = std::make_shared<ScanBody>();
  body->n_seq = static_cast<int>(seqs.outer.size());
  body->n_carry = static_cast<int>(spec.inits.size());
  body->n_static = static_cast<int>(spec.statics.size() + closed.captures.size());
  body->n_out = static_cast<int>(spec.outputs.size());
  body->seq_reverse = seqs.reverse;
  body->out_reverse = spec.out_reverse;
  body->out_reverse.resize(spec.outputs.size(), 0);
  body->params = params;
  body->params.insert(body->params.end(), closed.capture_params.begin(),
                      closed.capture_params.end());
  body->results = closed.results;
  body->n_user_out = body->n_out;
  if (spec.store_carries) store_residuals(*body, spec.carry_params, seqs.params.size(), dt, who);
  body->dtype = dt;
  body->store = spec.store_carries;

  std::vector<Tensor> ins = seqs.outer;
  ins.insert(ins.end(), spec.inits.begin(), spec.inits.end());
  ins.insert(ins.end(), spec.statics.begin(), spec.statics.end());
  ins.insert(ins.end(), closed.captures.begin(), closed.captures.end());
  ScanResult r;
  r.node = make_node_with_extra(Op::Scan, std::move(ins), {}, dt, spec.name, body);
  for (int m = 0; m < body->n_user_out; ++m)
    r.outputs.push_back(scan_part(r.node, r.node, ScanPartKind::kOutput, m));
  for (int k = 0; k < body->n_carry; ++k)
    r.final_carries.push_back(scan_part(r.node, r.node, ScanPartKind::kFinal, k));
  return r;
}

namespace {
unsigned scan_shape_only(const Node& n) { return scan_body(n).shape_only_inputs(); }
}  // namespace

void register_loop_ops() {
  define_op(Op::Scan, {.shape = &scan_rule,
                       .grad = &scan_grad,
                       .pure = false,
                       .dispatch_input = -1,
                       .may_throw = true,  // its body may hold any op
                       .prepare = &prepare_scan,
                       .shape_only = &scan_shape_only});
  define_op(Op::ScanPart, {.shape = &scan_part_rule,
                           .grad = &scan_part_grad,
                           .dispatch_input = -1,
                           .prepare = &prepare_scan_part});
  define_op(Op::ScanEmbed, {.shape = &scan_embed_rule,
                            .grad = &scan_embed_grad,
                            .dispatch_input = -1,
                            .prepare = &prepare_scan_embed});
}

}  // namespace ktape
