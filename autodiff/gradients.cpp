#include "autodiff/gradients.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "engine/errors.hpp"
#include "engine/graph.hpp"
#include "engine/graph_walk.hpp"
#include "ops/kernels/attrs.hpp"

namespace ktape {

namespace {

bool provably_same_shape(const Shape& a, const Shape& b) { return a.is_fully_defined() && a == b; }

// When x's gradients are the padded gradients of slices of x (SlicePad(g_i, x)) that tile x
// along one axis, edge to edge (an LSTM's gates cut from one projection), their sum is the
// concatenation of the g_i: one copy instead of a zero-filled x per slice and their sum, and
// x's data is no longer read (a loop's reverse pass then need not recompute it).
Tensor concat_of_slices(const std::vector<Tensor>& gs, const Node* x) {
  if (gs.size() < 2) return Tensor();
  const int rank = x->shape.ndim();
  int axis = -1;
  std::vector<std::pair<std::int64_t, std::size_t>> starts;  // (start, index in gs)
  std::vector<std::int64_t> sizes(gs.size());
  for (std::size_t i = 0; i < gs.size(); ++i) {
    const Node& n = gs[i].node();
    if (n.op != Op::SlicePad || n.inputs[1].node_ptr().get() != x) return Tensor();
    if (n.inputs[0].dtype() != gs[0].node().inputs[0].dtype()) return Tensor();
    const auto sl = attrs::Slice::of(n.attrs);
    int cut = -1;  // the one axis this slice does not take whole
    for (int d = 0; d < rank; ++d) {
      const auto dd = static_cast<std::size_t>(d);
      const bool whole = sl.start[dd] == 0 && (sl.size[dd] == -1 || sl.size[dd] == x->shape[d]);
      if (whole) continue;
      if (cut >= 0) return Tensor();
      cut = d;
    }
    if (cut < 0 || (axis >= 0 && cut != axis)) return Tensor();
    axis = cut;
    starts.emplace_back(sl.start[static_cast<std::size_t>(cut)], i);
    sizes[i] = sl.size[static_cast<std::size_t>(cut)];
  }
  std::sort(starts.begin(), starts.end());
  std::int64_t at = 0;
  for (std::size_t j = 0; j < starts.size(); ++j) {
    const auto [start, i] = starts[j];
    const std::int64_t size = sizes[i];
    if (start != at || (size < 0 && j + 1 != starts.size())) return Tensor();
    at = size < 0 ? -1 : at + size;
  }
  const std::int64_t dim = x->shape[axis];
  if (at != -1 && (dim < 0 || at != dim)) return Tensor();
  std::vector<Tensor> parts;
  for (const auto& [start, i] : starts) parts.push_back(gs[i].node().inputs[0]);
  const DType dt = parts[0].dtype();
  return make_node(Op::Concat, std::move(parts), attrs::Axis::make(axis), dt);
}

Tensor sum_grads(std::vector<Tensor>& gs, const Node* x) {
  if (gs.size() == 1) return gs[0];
  if (Tensor c = concat_of_slices(gs, x)) return c;
  const Tensor& first = gs[0];
  return make_node(Op::AddN, gs, {}, first.dtype());
}

}  // namespace

std::vector<Tensor> gradients(const Tensor& loss, const std::vector<Tensor>& xs) {
  if (!loss.defined()) throw ValueError("K::gradients: `loss` is a null tensor");
  return gradients(std::vector<Tensor>{loss}, xs, std::vector<Tensor>{Tensor()});
}

std::vector<Tensor> gradients(const std::vector<Tensor>& ys_in, const std::vector<Tensor>& xs,
                              const std::vector<Tensor>& grad_ys) {
  ensure_ops_registered();
  if (grad_ys.size() != ys_in.size())
    throw ValueError("K::gradients: " + std::to_string(grad_ys.size()) + " grad_ys for " +
                     std::to_string(ys_in.size()) + " ys");
  for (std::size_t i = 0; i < ys_in.size(); ++i)
    if (!ys_in[i].defined())
      throw ValueError("K::gradients: ys[" + std::to_string(i) + "] is a null tensor");
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (!xs[i].defined())
      throw ValueError("K::gradients: variables[" + std::to_string(i) + "] is a null tensor");
  // As tf.gradients: a seed of another dtype than its y is a TypeError (a gradient op reads its
  // operands as the first one's dtype).
  for (std::size_t i = 0; i < ys_in.size(); ++i)
    if (grad_ys[i].defined() && is_floating(ys_in[i].dtype()) &&
        grad_ys[i].dtype() != ys_in[i].dtype())
      throw TypeError("K::gradients: grad_ys[" + std::to_string(i) + "] is " +
                      std::string(dtype_name(grad_ys[i].dtype())) + " but ys[" + std::to_string(i) +
                      "] is " + std::string(dtype_name(ys_in[i].dtype())) +
                      "; they must have the same dtype");
  std::vector<Tensor> result(xs.size());
  std::vector<Tensor> ys, seeds;
  for (std::size_t i = 0; i < ys_in.size(); ++i)
    if (is_floating(ys_in[i].dtype())) {
      ys.push_back(ys_in[i]);
      seeds.push_back(grad_ys[i]);
    }
  if (ys.empty()) return result;

  std::int64_t min_id = ys[0].id();
  for (const auto& y : ys) min_id = std::min(min_id, y.id());
  std::unordered_set<Node*> targets;
  for (const auto& x : xs) {
    min_id = std::min(min_id, x.id());
    targets.insert(x.node_ptr().get());
  }
  // Nodes the ys depend on that were created no earlier than the first x.
  std::vector<Node*> roots;
  for (const auto& y : ys) roots.push_back(y.node_ptr().get());
  const std::vector<Node*> nodes = reachable_in_tape_order(
      roots, [&](Node* n) { return !n->eager_value.defined() || targets.count(n) > 0; },
      [&](Node* n) { return n->id < min_id; });
  // Forward: which of them depend on some x.
  std::unordered_set<Node*> on_path;
  for (Node* n : nodes) {
    bool p = targets.count(n) > 0;
    if (!p && !n->eager_value.defined())
      for (auto& in : n->inputs) p = p || on_path.count(in.node_ptr().get()) > 0;
    if (p) on_path.insert(n);
  }

  std::unordered_map<Node*, std::vector<Tensor>> pending;
  std::unordered_map<Node*, Tensor> total;
  for (std::size_t i = 0; i < ys.size(); ++i) {
    const Tensor& y = ys[i];
    if (!on_path.count(y.node_ptr().get())) continue;
    Tensor seed = seeds[i];
    if (!seed.defined()) {
      seed = make_node(Op::FillLike, {y}, attrs::Scalar::make(1.0), y.dtype());
    } else if (!provably_same_shape(seed.shape(), y.shape())) {
      seed = make_node(Op::SumToLike, {seed, y}, {}, seed.dtype());
    }
    pending[y.node_ptr().get()].push_back(seed);
  }
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* n = *it;
    if (!on_path.count(n)) continue;
    auto pit = pending.find(n);
    if (pit == pending.end()) continue;
    Tensor g = sum_grads(pit->second, n);
    pending.erase(pit);
    if (targets.count(n)) total[n] = g;
    const OpDef& def = op_def(n->op);
    if (!def.grad || n->inputs.empty()) continue;
    bool any_input_on_path = false;
    for (auto& in : n->inputs)
      any_input_on_path = any_input_on_path || on_path.count(in.node_ptr().get());
    if (!any_input_on_path) continue;
    const Tensor y(n->shared_from_this());
    std::vector<Tensor> gs = def.grad(*n, y, g);
    for (std::size_t i = 0; i < n->inputs.size() && i < gs.size(); ++i) {
      const Tensor& in = n->inputs[i];
      if (!gs[i].defined() || !on_path.count(in.node_ptr().get())) continue;
      if (!is_floating(in.dtype())) continue;
      Tensor gi = gs[i];
      const bool padded_to_in = gi.op() == Op::SlicePad && gi.node().inputs[1] == in;
      if (!padded_to_in && !provably_same_shape(gi.shape(), in.shape()))
        gi = make_node(Op::SumToLike, {gi, in}, {}, gi.dtype());
      pending[in.node_ptr().get()].push_back(gi);
    }
  }
  for (std::size_t i = 0; i < xs.size(); ++i) {
    auto it = total.find(xs[i].node_ptr().get());
    if (it != total.end() && is_floating(xs[i].dtype())) result[i] = it->second;
  }
  return result;
}

}  // namespace ktape
