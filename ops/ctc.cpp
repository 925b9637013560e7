#include "ops/ctc.hpp"

#include "engine/errors.hpp"
#include "ops/core.hpp"
#include "ops/elementwise.hpp"
#include "ops/indexing.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/layout.hpp"
#include "ops/nn.hpp"
#include "ops/op_util.hpp"

namespace ktape::backend {

namespace {

using G = std::vector<Tensor>;

// (samples, 1) or (samples,) lengths as int32 (samples,).
Tensor lengths(const char* fn, const char* arg, const Tensor& t) {
  if (t.dtype() == DType::bool_) throw TypeError(std::string(fn) + ": " + arg + " must be numeric");
  Tensor r = t;
  if (r.ndim() == 2 && (r.shape()[1] == 1 || r.shape()[1] < 0)) r = squeeze(r, 1);
  if (r.ndim() != 1)
    throw ValueError(std::string(fn) + ": " + arg +
                     " must have shape (samples, 1) or (samples,), "
                     "got " +
                     t.shape().str());
  return r.dtype() == DType::int32 ? r : cast(r, "int32");
}

void check_samples(const char* fn, const Tensor& y_pred, const Tensor& t, const char* arg) {
  const std::int64_t n = y_pred.shape()[0], m = t.shape()[0];
  if (n >= 0 && m >= 0 && n != m)
    throw ValueError(std::string(fn) + ": " + arg + " has " + std::to_string(m) +
                     " samples but y_pred " + y_pred.shape().str() + " has " + std::to_string(n));
}

Shape ctc_loss_rule(const Node&, const std::vector<Shape>& in) { return Shape{in[0][0]}; }
Shape ctc_loss_grad_rule(const Node&, const std::vector<Shape>& in) { return in[0]; }
Shape ctc_decode_rule(const Node& n, const std::vector<Shape>& in) {
  const auto a = attrs::IntList::of(n.attrs).values;
  const std::int64_t paths = a[0] != 0 ? 1 : a[2];
  const std::int64_t steps = in[0][1];
  return Shape{in[0][0], paths, steps < 0 ? -1 : steps + 1};
}

G ctc_loss_grad(const Node& n, const Tensor&, const Tensor& g) {
  std::vector<Tensor> ins = n.inputs;
  ins.push_back(g);
  return {make_node(Op::CtcLossGrad, std::move(ins), {}, g.dtype()), Tensor(), Tensor(), Tensor()};
}

// TF prevents it too (prevent_gradient): the fused loss has no second derivative. An error, not
// a silent zero.
G ctc_loss_grad_grad(const Node&, const Tensor&, const Tensor&) {
  throw NotImplementedError(
      "K::gradients: ctc_batch_cost has no second derivative (its gradient is computed by the "
      "fused CTC kernel, as in TF)");
}

}  // namespace

Tensor ctc_label_dense_to_sparse(const Tensor& labels, const Tensor& label_lengths) {
  const char* fn = "K::ctc_label_dense_to_sparse";
  if (labels.ndim() != 2)
    throw ValueError(std::string(fn) + ": labels must be (samples, max_label_length), got " +
                     labels.shape().str());
  if (label_lengths.ndim() != 1)
    throw ValueError(std::string(fn) + ": label_lengths must be (samples,), got " +
                     label_lengths.shape().str());
  if (label_lengths.dtype() != DType::int32 && label_lengths.dtype() != DType::int64)
    throw TypeError(std::string(fn) + ": label_lengths must be int32 or int64, got " +
                    dtype(label_lengths));
  check_samples(fn, labels, label_lengths, "label_lengths");
  // Every position (b, t), row-major, with labels[b, t]; the positions at or past length[b] are
  // padding entries (index -1, ops/kernels/sparse.hpp), which every sparse kernel skips.
  const Tensor all = make_node(Op::DenseIndices, {labels}, {}, DType::int64);
  const Tensor row = squeeze(slice(all, {0, 0}, {-1, 1}), 1);
  const Tensor t = squeeze(slice(all, {0, 1}, {-1, 1}), 1);
  const Tensor keep =
      expand_dims(cast(less(t, cast(gather(label_lengths, row), "int64")), "int64"), 1);
  const Tensor indices = all * keep + (keep - 1.0);  // (b, t) or (-1, -1)
  const Tensor carrier = make_node(Op::ShapeCarrier, {labels}, {}, labels.dtype());
  return ops::sparse_from_parts(indices, flatten(labels), carrier);
}

Tensor ctc_batch_cost(const Tensor& y_true, const Tensor& y_pred, const Tensor& input_length,
                      const Tensor& label_length) {
  const char* fn = "K::ctc_batch_cost";
  ops::check_float(fn, "y_pred", y_pred);
  if (y_pred.ndim() != 3)
    throw ValueError(std::string(fn) + ": y_pred must be (samples, time_steps, classes), got " +
                     y_pred.shape().str());
  if (y_pred.shape()[2] == 0 || y_pred.shape()[2] == 1)
    throw ValueError(std::string(fn) + ": y_pred " + y_pred.shape().str() +
                     " needs at least 2 classes (the last is the blank)");
  if (y_true.ndim() != 2)
    throw ValueError(std::string(fn) + ": y_true must be (samples, max_label_length), got " +
                     y_true.shape().str());
  if (y_true.dtype() == DType::bool_) throw TypeError(std::string(fn) + ": y_true must be numeric");
  const Tensor il = lengths(fn, "input_length", input_length);
  const Tensor ll = lengths(fn, "label_length", label_length);
  check_samples(fn, y_pred, y_true, "y_true");
  check_samples(fn, y_pred, il, "input_length");
  check_samples(fn, y_pred, ll, "label_length");
  const Tensor labels = y_true.dtype() == DType::int32 ? y_true : cast(y_true, "int32");
  const Tensor logits = log(y_pred + epsilon());
  const Tensor logp = make_node(Op::LogSoftmax, {logits}, attrs::Axis::make(2), logits.dtype());
  const Tensor loss = make_node(Op::CtcLoss, {logp, labels, il, ll}, {}, y_pred.dtype());
  return expand_dims(loss, 1);
}

CtcDecoded ctc_decode(const Tensor& y_pred, const Tensor& input_length, const CtcDecodeOptions& o) {
  const char* fn = "K::ctc_decode";
  ops::check_float(fn, "y_pred", y_pred);
  if (y_pred.ndim() != 3)
    throw ValueError(std::string(fn) + ": y_pred must be (samples, time_steps, classes), got " +
                     y_pred.shape().str());
  if (!o.greedy && (o.beam_width < 1 || o.top_paths < 1 || o.top_paths > o.beam_width))
    throw ValueError(std::string(fn) + ": need 1 <= top_paths <= beam_width, got top_paths " +
                     std::to_string(o.top_paths) + " and beam_width " +
                     std::to_string(o.beam_width));
  const Tensor il = lengths(fn, "input_length", input_length);
  check_samples(fn, y_pred, il, "input_length");
  const Tensor logits = log(y_pred + epsilon());
  const Tensor packed = make_node(
      Op::CtcDecode, {logits, il},
      attrs::IntList::make({o.greedy ? 1 : 0, o.beam_width, o.top_paths, o.merge_repeated ? 1 : 0}),
      DType::float64);
  const int paths = o.greedy ? 1 : o.top_paths;
  CtcDecoded r;
  for (int p = 0; p < paths; ++p)
    r.decoded.push_back(cast(squeeze(slice(packed, {0, p, 1}, {-1, 1, -1}), 1), "int64"));
  r.log_probability = cast(squeeze(slice(packed, {0, 0, 0}, {-1, paths, 1}), 2), dtype(y_pred));
  return r;
}

}  // namespace ktape::backend

namespace ktape::ops {

void register_ctc_ops() {
  using namespace ktape::backend;
  define_op(Op::CtcLoss, {.shape = &ctc_loss_rule, .grad = &ctc_loss_grad, .may_throw = true});
  define_op(Op::CtcLossGrad,
            {.shape = &ctc_loss_grad_rule, .grad = &ctc_loss_grad_grad, .may_throw = true});
  define_op(Op::CtcDecode, {.shape = &ctc_decode_rule, .may_throw = true});
}

}  // namespace ktape::ops
