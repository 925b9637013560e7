#include "ops/rnn.hpp"

#include "engine/errors.hpp"
#include "ops/control.hpp"
#include "ops/core.hpp"
#include "ops/elementwise.hpp"
#include "ops/layout.hpp"
#include "ops/loops/scan.hpp"
#include "ops/reductions.hpp"

namespace ktape::backend {

namespace {

Shape drop_first(const Shape& s) {
  return Shape(std::vector<std::int64_t>(s.dims().begin() + 1, s.dims().end()));
}

Tensor step_placeholder(const Tensor& seq, const std::string& name) {
  return make_source(Op::Placeholder, drop_first(seq.shape()), seq.dtype(), name);
}

std::vector<int> swap01(int rank) {
  std::vector<int> p{1, 0};
  for (int i = 2; i < rank; ++i) p.push_back(i);
  return p;
}

// elems[i] along axis 0, as a tensor without that axis.
Tensor take(const Tensor& x, std::int64_t i) {
  std::vector<std::int64_t> start(static_cast<std::size_t>(x.ndim()), 0), size(start.size(), -1);
  start[0] = i;
  size[0] = 1;
  return squeeze(slice(x, start, size), 0);
}
// elems[b:e] along axis 0 (e = -1: to the end).
Tensor range(const Tensor& x, std::int64_t b, std::int64_t n) {
  std::vector<std::int64_t> start(static_cast<std::size_t>(x.ndim()), 0), size(start.size(), -1);
  start[0] = b;
  size[0] = n;
  return slice(x, start, size);
}

// Zeros of shape (batch, out_dims...) for a batch taken from `batch_source` (samples first).
Tensor zeros_batch(const Tensor& batch_source, const Tensor& like) {
  Tensor z = batch_source;
  while (z.ndim() > 1) z = sum(z, z.ndim() - 1);
  z = zeros_like(z, {.dtype = dtype(like)});  // (batch,)
  const Shape& s = like.shape();
  std::vector<std::int64_t> rest(s.dims().begin() + 1, s.dims().end());
  if (rest.empty()) return z;
  for (auto d : rest)
    if (d < 0)
      throw NotImplementedError("K::rnn: a step output of shape " + s.str() +
                                " needs a static shape past the batch axis");
  for (std::size_t i = 0; i < rest.size(); ++i) z = expand_dims(z, -1);
  NDArray c(Shape(rest), like.dtype());
  for (std::int64_t i = 0; i < c.size(); ++i) c.set_item(i, 0.0);
  return z + constant(c, {.dtype = dtype(like)});
}

}  // namespace

RnnResult rnn(const StepFunction& step_function, const Tensor& inputs,
              const std::vector<Tensor>& initial_states, const RnnOptions& o) {
  if (!step_function) throw ValueError("K::rnn: step_function is empty");
  if (inputs.ndim() < 3)
    throw ValueError("K::rnn: Input should be at least 3D. Got inputs of shape " +
                     inputs.shape().str());
  const int rank = inputs.ndim();
  const Tensor x_tm = o.time_major ? inputs : permute_dimensions(inputs, swap01(rank));
  Tensor mask_tm;
  if (o.mask.defined()) {
    if (o.mask.ndim() != 2)
      throw ValueError("K::rnn: mask should have `shape=(samples, time)`, got " +
                       o.mask.shape().str());
    Tensor m = cast(o.mask, "bool");
    mask_tm = o.time_major ? m : transpose(m);
    // (time, samples) against the inputs' (time, samples, ...); unknown dims are checked when
    // a Function runs (the scan's sequences must have one length).
    for (int d = 0; d < 2; ++d) {
      const std::int64_t a = mask_tm.shape()[d], b = x_tm.shape()[d];
      if (a >= 0 && b >= 0 && a != b)
        throw ValueError(std::string("K::rnn: mask of shape ") + o.mask.shape().str() +
                         " does not match inputs of shape " + inputs.shape().str() + " (" +
                         (d == 0 ? "time" : "samples") + " dimension " + std::to_string(a) +
                         " vs " + std::to_string(b) + (o.time_major ? "; time_major" : "") + ")");
    }
  }
  const std::size_t n_states = initial_states.size();
  auto call_step = [&](const Tensor& x_t, const std::vector<Tensor>& states) {
    std::vector<Tensor> args = states;
    args.insert(args.end(), o.constants.begin(), o.constants.end());
    auto r = step_function(x_t, args);
    if (!r.first.defined()) throw ValueError("K::rnn: the step function returned a null output");
    if (r.second.size() != n_states)
      throw ValueError("K::rnn: the step function returned " + std::to_string(r.second.size()) +
                       " states for " + std::to_string(n_states) + " initial states");
    for (std::size_t k = 0; k < n_states; ++k) {
      const Shape& a = initial_states[k].shape();
      const Shape& b = r.second[k].shape();
      bool ok = a.ndim() == b.ndim() && initial_states[k].dtype() == r.second[k].dtype();
      for (int d = 0; ok && d < a.ndim(); ++d) ok = a[d] < 0 || b[d] < 0 || a[d] == b[d];
      if (!ok)
        throw ValueError("K::rnn: state " + std::to_string(k) + " comes back as shape " + b.str() +
                         " " + std::string(dtype_name(r.second[k].dtype())) +
                         " but went in as shape " + a.str() + " " +
                         std::string(dtype_name(initial_states[k].dtype())));
    }
    return r;
  };

  if (o.unroll) {
    const std::int64_t T = x_tm.shape()[0];
    if (T < 0) throw ValueError("K::rnn: Unrolling requires a fixed number of timesteps.");
    std::vector<Tensor> states = initial_states, outs;
    Tensor prev;
    for (std::int64_t i = 0; i < T; ++i) {
      const std::int64_t t = o.go_backwards ? T - 1 - i : i;
      auto [out, ns] = call_step(take(x_tm, t), states);
      if (mask_tm.defined()) {
        const Tensor m = take(mask_tm, t);
        const Tensor alt = (o.zero_output_for_mask || !prev.defined()) ? zeros_like(out) : prev;
        out = switch_(m, out, alt);
        for (std::size_t k = 0; k < n_states; ++k) ns[k] = switch_(m, ns[k], states[k]);
      }
      outs.push_back(out);
      prev = out;
      states = ns;
    }
    if (T == 0) throw ValueError("K::rnn: unrolling over 0 timesteps");
    Tensor stacked = stack(outs, 0);
    return {outs.back(),
            o.time_major ? stacked : permute_dimensions(stacked, swap01(stacked.ndim())), states};
  }

  ScanSpec spec;
  spec.name = "rnn";
  const Tensor x_ph = step_placeholder(x_tm, "rnn/input_t");
  spec.seq_params.push_back(x_ph);
  spec.seqs.push_back(x_tm);
  spec.seq_reverse.push_back(o.go_backwards);
  Tensor m_ph;
  if (mask_tm.defined()) {
    m_ph = step_placeholder(mask_tm, "rnn/mask_t");
    spec.seq_params.push_back(m_ph);
    spec.seqs.push_back(mask_tm);
    spec.seq_reverse.push_back(o.go_backwards);
  }
  std::vector<Tensor> s_ph;
  for (std::size_t k = 0; k < n_states; ++k)
    s_ph.push_back(make_source(Op::Placeholder, initial_states[k].shape(),
                               initial_states[k].dtype(), "rnn/state_" + std::to_string(k)));
  auto [out, ns] = call_step(x_ph, s_ph);
  // Without a mask, an output that is also a state (h in SimpleRNN, LSTM, GRU) needs no carry of
  // its own: the last output is that state's final value.
  if (!m_ph.defined())
    for (std::size_t k = 0; k < n_states; ++k)
      if (ns[k] == out) {
        spec.outputs.push_back(out);
        for (std::size_t j = 0; j < n_states; ++j) {
          spec.carry_params.push_back(s_ph[j]);
          spec.inits.push_back(initial_states[j]);
          spec.new_carries.push_back(ns[j]);
        }
        ScanResult r = make_scan(spec);
        const Tensor outputs = o.time_major
                                   ? r.outputs[0]
                                   : permute_dimensions(r.outputs[0], swap01(r.outputs[0].ndim()));
        return {r.final_carries[k], outputs, r.final_carries};
      }
  // Otherwise the last output is a carry too: it is what a masked step repeats, and the
  // result's last_output.
  const Tensor prev_ph = make_source(Op::Placeholder, out.shape(), out.dtype(), "rnn/prev_output");
  if (m_ph.defined()) {
    out = switch_(m_ph, out, o.zero_output_for_mask ? zeros_like(out) : prev_ph);
    for (std::size_t k = 0; k < n_states; ++k) ns[k] = switch_(m_ph, ns[k], s_ph[k]);
  }
  spec.outputs.push_back(out);
  spec.carry_params.push_back(prev_ph);
  const bool like_state0 = n_states > 0 && initial_states[0].shape() == out.shape() &&
                           initial_states[0].dtype() == out.dtype();
  spec.inits.push_back(
      like_state0
          ? zeros_like(initial_states[0], {.dtype = dtype(out)})
          : zeros_batch(o.time_major ? permute_dimensions(inputs, swap01(rank)) : inputs, out));
  spec.new_carries.push_back(out);
  for (std::size_t k = 0; k < n_states; ++k) {
    spec.carry_params.push_back(s_ph[k]);
    spec.inits.push_back(initial_states[k]);
    spec.new_carries.push_back(ns[k]);
  }
  ScanResult r = make_scan(spec);
  const Tensor outputs =
      o.time_major ? r.outputs[0] : permute_dimensions(r.outputs[0], swap01(r.outputs[0].ndim()));
  std::vector<Tensor> states(r.final_carries.begin() + 1, r.final_carries.end());
  return {r.final_carries[0], outputs, states};
}

Tensor map_fn(const std::function<Tensor(const Tensor&)>& fn, const Tensor& elems,
              const MapFnOptions& o) {
  if (elems.ndim() < 1) throw ValueError("K::map_fn: elems must have at least one axis");
  ScanSpec spec;
  spec.name = o.name.empty() ? "map_fn" : o.name;
  const Tensor x = step_placeholder(elems, spec.name + "/elem");
  Tensor y = fn(x);
  if (!y.defined()) throw ValueError("K::map_fn: fn returned a null tensor");
  if (!o.dtype.empty()) y = cast(y, o.dtype);
  spec.seq_params.push_back(x);
  spec.seqs.push_back(elems);
  spec.outputs.push_back(y);
  return make_scan(spec).outputs[0];
}

namespace {
Tensor fold(const std::function<Tensor(const Tensor&, const Tensor&)>& fn, const Tensor& elems,
            const FoldOptions& o, bool right) {
  const std::string who = right ? "foldr" : "foldl";
  if (elems.ndim() < 1) throw ValueError("K::" + who + ": elems must have at least one axis");
  Tensor init = o.initializer, seq = elems;
  if (!init.defined()) {
    const std::int64_t T = elems.shape()[0];
    if (!right) {
      init = take(elems, 0);
      seq = range(elems, 1, -1);
    } else {
      if (T < 0)
        throw NotImplementedError(
            "K::foldr: without an initializer the first axis of elems must "
            "be static (got " +
            elems.shape().str() + ")");
      init = take(elems, T - 1);
      seq = range(elems, 0, T - 1);
    }
  }
  ScanSpec spec;
  spec.name = o.name.empty() ? who : o.name;
  const Tensor x = step_placeholder(seq, spec.name + "/elem");
  const Tensor acc = make_source(Op::Placeholder, init.shape(), init.dtype(), spec.name + "/acc");
  Tensor next = fn(acc, x);
  if (!next.defined()) throw ValueError("K::" + who + ": fn returned a null tensor");
  spec.seq_params.push_back(x);
  spec.seqs.push_back(seq);
  spec.seq_reverse.push_back(right);
  spec.carry_params.push_back(acc);
  spec.inits.push_back(init);
  spec.new_carries.push_back(next);
  return make_scan(spec).final_carries[0];
}
}  // namespace

Tensor foldl(const std::function<Tensor(const Tensor&, const Tensor&)>& fn, const Tensor& elems,
             const FoldOptions& o) {
  return fold(fn, elems, o, false);
}
Tensor foldr(const std::function<Tensor(const Tensor&, const Tensor&)>& fn, const Tensor& elems,
             const FoldOptions& o) {
  return fold(fn, elems, o, true);
}

}  // namespace ktape::backend
