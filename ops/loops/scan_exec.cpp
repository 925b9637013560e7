// Executing a Scan: its compile hook lays out the flat buffer for the concrete shapes and
// compiles the body into a plan the layout owns (each enclosing plan has its own, so concurrent
// calls never share one); its kernel runs that plan once per step without allocating.
#include <algorithm>
#include <cstring>

#include "engine/errors.hpp"
#include "engine/plan.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/loops/scan_internal.hpp"

namespace ktape::loops {

namespace {

// The concrete layout of a Scan node for one input-shape signature: time steps, part shapes
// and offsets in the flat buffer, the body's compiled plan.
struct ScanLayout {
  const ScanBody* body = nullptr;
  const Function* fn = nullptr;  // the body compiled for the enclosing Function's options
  std::unique_ptr<Plan> plan;    // its plan for these shapes, owned by this layout
  std::int64_t T = 0;
  std::vector<Shape> parts;          // outputs, stored carries, final carries
  std::vector<std::int64_t> offset;  // element offset of each part
  // Per stacked output: an earlier output whose storage it shares, else -1. The body computes
  // some outputs as the same buffer (a reverse body's SumToLike aliases of one dz): they are
  // stored once.
  std::vector<int> alias;
  // Parts the enclosing plan never reads (a forward loop's gradient residuals and stored
  // carries in a Function without its gradient) keep one step (outputs) or two alternating
  // slots (carries) instead of T.
  std::vector<std::size_t> out_stride;  // bytes between the steps of output m: 0 when unread
  std::vector<char> carry_stored;       // carry k keeps every step
  // Per output: an unread output that is the same value as new carry k (a cell's h) is written
  // straight into that carry's slot, else -1: no copy of it per step.
  std::vector<int> out_into_carry;
  std::int64_t total = 0;
  std::vector<std::size_t> seq_step_bytes, out_step_bytes, carry_bytes;
  std::vector<void*> fed, outs;  // per-step pointer scratch
};

// `read`: whether the plan reads each part; null: the plan may read any part, or materialize a
// flat gradient of y (a ScanEmbed), so every part is stored in full and none is shared.
std::shared_ptr<ScanLayout> scan_layout(const Node& scan, const std::vector<Shape>& in,
                                        const std::string& backend, bool fuse, bool fold,
                                        const std::vector<char>* read) {
  const ScanBody& b = scan_body(scan);
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
  auto is_read = [&](int part) {
    return !read || (static_cast<std::size_t>(part) < read->size() &&
                     (*read)[static_cast<std::size_t>(part)] != 0);
  };
  for (int m = 0; m < b.n_out; ++m)
    l->parts.push_back(prepend(l->T, result_shape(static_cast<std::size_t>(m))));
  for (int k = 0; k < b.n_carry; ++k)
    l->carry_stored.push_back(b.store && is_read(b.n_out + k) ? 1 : 0);
  for (int k = 0; k < b.n_carry; ++k) {
    const Shape& c = sig[static_cast<std::size_t>(b.n_seq + k)];
    const Shape got = result_shape(static_cast<std::size_t>(b.n_out + k));
    if (got != c)
      throw ValueError(who + ": state " + std::to_string(k) + " comes back with shape " +
                       got.str() + " but went in with shape " + c.str());
    l->parts.push_back(prepend(
        l->carry_stored[static_cast<std::size_t>(k)] ? l->T : std::min<std::int64_t>(l->T, 2), c));
  }
  for (int k = 0; k < b.n_carry; ++k)
    l->parts.push_back(sig[static_cast<std::size_t>(b.n_seq + k)]);
  l->alias.assign(static_cast<std::size_t>(b.n_out), -1);
  auto same_storage = [&](int m, int k) {
    const Value& vm = p.values[static_cast<std::size_t>(p.outputs[static_cast<std::size_t>(m)])];
    const Value& vk = p.values[static_cast<std::size_t>(p.outputs[static_cast<std::size_t>(k)])];
    return vm.root == vk.root && vm.alias_offset == vk.alias_offset && vm.bytes == vk.bytes &&
           vm.dtype == vk.dtype;
  };
  for (int m = 0; read && m < b.n_out; ++m)
    for (int k = 0; k < m; ++k)
      if (l->alias[static_cast<std::size_t>(k)] < 0 &&
          b.out_reverse[static_cast<std::size_t>(m)] ==
              b.out_reverse[static_cast<std::size_t>(k)] &&
          same_storage(m, k)) {
        l->alias[static_cast<std::size_t>(m)] = k;
        break;
      }
  // An output is stored for every step when it, or an output sharing its storage, is read.
  std::vector<char> out_read(static_cast<std::size_t>(b.n_out), 0);
  for (int m = 0; m < b.n_out; ++m) {
    const int owner =
        l->alias[static_cast<std::size_t>(m)] >= 0 ? l->alias[static_cast<std::size_t>(m)] : m;
    if (is_read(m)) out_read[static_cast<std::size_t>(owner)] = 1;
  }
  for (std::size_t i = 0; i < l->parts.size(); ++i) {
    const auto& s = l->parts[i];
    if (i < l->alias.size() && l->alias[i] >= 0) {
      l->offset.push_back(l->offset[static_cast<std::size_t>(l->alias[i])]);
      continue;
    }
    l->offset.push_back(l->total);
    const std::int64_t elems =
        i < out_read.size() && !out_read[i] ? drop_first(s).num_elements() : s.num_elements();
    if (__builtin_add_overflow(l->total, elems, &l->total))
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
  for (int m = 0; m < b.n_out; ++m) {
    const int owner =
        l->alias[static_cast<std::size_t>(m)] >= 0 ? l->alias[static_cast<std::size_t>(m)] : m;
    l->out_stride.push_back(out_read[static_cast<std::size_t>(owner)]
                                ? l->out_step_bytes[static_cast<std::size_t>(m)]
                                : 0);
  }
  for (int m = 0; m < b.n_out; ++m) {
    int into = -1;
    for (int k = 0; read && into < 0 && l->out_stride[static_cast<std::size_t>(m)] == 0 &&
                    l->alias[static_cast<std::size_t>(m)] < 0 && k < b.n_carry;
         ++k)
      if (same_storage(m, b.n_out + k)) into = k;
    l->out_into_carry.push_back(into);
  }
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
  ++l.plan->loop_run;  // what the body's kernels kept of the statics is stale
  const std::size_t es = dtype_size(b.dtype);
  char* base = static_cast<char*>(c.out.data);
  auto part = [&](int k) {
    return base + static_cast<std::size_t>(l.offset[static_cast<std::size_t>(k)]) * es;
  };
  const std::size_t ns = static_cast<std::size_t>(b.n_seq),
                    nc = static_cast<std::size_t>(b.n_carry);
  // Carries live in the stored parts: step j reads slot j and writes slot j + 1 (or the final);
  // without storage the two slots alternate.
  auto slot = [&](std::size_t k, std::int64_t j) { return l.carry_stored[k] ? j : j % 2; };
  for (std::size_t k = 0; k < nc; ++k) {
    char* dst = l.T > 0 ? part(b.n_out + static_cast<int>(k))
                        : part(b.n_out + b.n_carry + static_cast<int>(k));
    std::memcpy(dst, c.in[ns + k].data, l.carry_bytes[k]);
  }
  for (std::size_t s = ns + nc; s < b.params.size(); ++s) l.fed[s] = c.in[s].data;
  for (std::int64_t j = 0; j < l.T; ++j) {
    for (std::size_t i = 0; i < ns; ++i) {
      const std::int64_t t = b.seq_reverse[i] ? l.T - 1 - j : j;
      // (A sequence read only for its dims may have no data, or storage for one step only.)
      l.fed[i] = c.in[i].data == nullptr ? nullptr
                                         : static_cast<char*>(c.in[i].data) +
                                               static_cast<std::size_t>(t) * l.seq_step_bytes[i];
    }
    for (std::size_t k = 0; k < nc; ++k) {
      char* stored = part(b.n_out + static_cast<int>(k));
      l.fed[ns + k] = stored + static_cast<std::size_t>(slot(k, j)) * l.carry_bytes[k];
      l.outs[static_cast<std::size_t>(b.n_out) + k] =
          j + 1 < l.T ? stored + static_cast<std::size_t>(slot(k, j + 1)) * l.carry_bytes[k]
                      : part(b.n_out + b.n_carry + static_cast<int>(k));
    }
    for (std::size_t m = 0; m < static_cast<std::size_t>(b.n_out); ++m) {
      const std::int64_t t = b.out_reverse[m] ? l.T - 1 - j : j;
      const int into = l.out_into_carry[m];
      l.outs[m] = into >= 0
                      ? l.outs[static_cast<std::size_t>(b.n_out + into)]
                      : part(static_cast<int>(m)) + static_cast<std::size_t>(t) * l.out_stride[m];
    }
    function_execute_raw(*l.fn, *l.plan, l.fed.data(), l.outs.data());
  }
}

void run_scan_part(const KernelCall& c) {
  const auto& l = *static_cast<const ScanLayout*>(c.ctx);
  const std::size_t es = dtype_size(c.out.dtype);
  const auto k = static_cast<std::size_t>(attrs::ScanPart::of(*c.attrs).part);
  std::memcpy(c.out.data,
              static_cast<const char*>(c.in[0].data) + static_cast<std::size_t>(l.offset[k]) * es,
              static_cast<std::size_t>(c.out.size) * es);
}

void run_scan_embed(const KernelCall& c) {
  const auto& l = *static_cast<const ScanLayout*>(c.ctx);
  const std::size_t es = dtype_size(c.out.dtype);
  const auto k = static_cast<std::size_t>(attrs::ScanPart::of(*c.attrs).part);
  std::memset(c.out.data, 0, static_cast<std::size_t>(c.out.size) * es);
  std::memcpy(static_cast<char*>(c.out.data) + static_cast<std::size_t>(l.offset[k]) * es,
              c.in[0].data, static_cast<std::size_t>(c.in[0].size) * es);
}

const ScanLayout& layout_of(const PrepareArgs& a) {
  const auto* l = static_cast<const ScanLayout*>(a.in_ctx[1]);
  if (!l) throw ValueError("K::function: '" + a.node.name + "' does not refer to a compiled loop");
  return *l;
}

}  // namespace

Prepared prepare_scan(const PrepareArgs& a) {
  // The parts the plan reads (their data, not only their dims), when its only readers of y are
  // ScanPart(y, y, part): then parts nobody reads are not stored per step, and equal outputs
  // share storage. A plan that also
  // holds ScanEmbed(g, y) or ScanPart(g, y, part) (a flat gradient of y, built outside the
  // lazy gradient path) gets the full layout, which the gradient's part offsets assume.
  std::vector<char> read;
  const ScanBody& body = scan_body(a.node);
  bool all = !a.readers;
  if (a.readers)
    for (const Node* r : *a.readers) {
      if (r->op != Op::ScanPart || r->inputs[0].node_ptr().get() != &a.node) {
        all = true;  // a flat gradient of y (ScanEmbed, its ScanParts) or an unknown reader
        break;
      }
      const auto part = static_cast<std::size_t>(part_of(*r));
      if (read.size() <= part) read.resize(part + 1, 0);
      // An output read only for its dims (a stored projection that only shapes a gradient in
      // the reverse scan) is not stored per step; its part keeps its shape. (A carry's stored
      // part changes shape when it is not stored, so it counts as read.)
      if (part >= static_cast<std::size_t>(body.n_out) || !a.data_read || (*a.data_read)(*r))
        read[part] = 1;
    }
  auto l = scan_layout(a.node, a.in_shapes, a.backend, a.fuse, a.fold, all ? nullptr : &read);
  Prepared p;
  p.shape = scan_layout_shape(*l, -1);
  p.ctx = std::move(l);
  p.kernel = &run_scan;
  return p;
}

// A part of the flat buffer: a view (no copy) when the buffer lives in the arena.
Prepared prepare_scan_part(const PrepareArgs& a) {
  const ScanLayout& l = layout_of(a);
  const int part = part_of(a.node);
  Prepared p;
  p.shape = scan_layout_shape(l, part);
  p.ctx = std::shared_ptr<void>(std::shared_ptr<void>(), const_cast<ScanLayout*>(&l));
  p.kernel = &run_scan_part;
  p.view_input = 0;
  p.view_offset =
      static_cast<std::size_t>(l.offset[static_cast<std::size_t>(part)]) * dtype_size(a.node.dtype);
  return p;
}

Prepared prepare_scan_embed(const PrepareArgs& a) {
  const ScanLayout& l = layout_of(a);
  const Shape& want = l.parts[static_cast<std::size_t>(part_of(a.node))];
  if (a.in_shapes[0] != want)
    throw ValueError("K::function: '" + a.node.name + "' embeds a gradient of shape " +
                     a.in_shapes[0].str() + " into a loop part of shape " + want.str());
  Prepared p;
  p.shape = scan_layout_shape(l, -1);
  p.ctx = std::shared_ptr<void>(std::shared_ptr<void>(), const_cast<ScanLayout*>(&l));
  p.kernel = &run_scan_embed;
  return p;
}

}  // namespace ktape::loops
