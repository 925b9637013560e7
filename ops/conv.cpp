#include "ops/conv.hpp"

#include <string>

#include "engine/config.hpp"
#include "ops/elementwise.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/conv_plan.hpp"
#include "ops/kernels/window.hpp"
#include "ops/layout.hpp"
#include "ops/op_util.hpp"
#include "ops/reductions.hpp"
#include "ops/window_shape.hpp"

namespace ktape::backend {

namespace {

using W = attrs::Window;
using G = std::vector<Tensor>;
using ops::dims_str;
using namespace ops::window_shape;

// Conv(x, w) -> y; ConvBackpropInput(dy, w[, like]) -> dx; ConvBackpropFilter(x, dy) -> dw.
// x (N, S..., C) or channels_first (N, C, S...); w (window..., C / groups, out).

void check_kernel(const W& a, const Shape& k) {
  if (k.ndim() != a.rank + 2)
    throw ValueError(a.fn + ": kernel of shape " + k.str() + " must have rank " +
                     std::to_string(a.rank + 2) + " (window..., in, out)");
}

void check_in_channels(const W& a, const Shape& x, const Shape& k) {
  const std::int64_t cx = channels(a, x), ck = k[a.rank];
  if (cx >= 0 && ck >= 0 && cx != ck * a.groups)
    throw ValueError(a.fn + ": input of shape " + x.str() + " has " + std::to_string(cx) +
                     " channels but the kernel of shape " + k.str() + " expects " +
                     std::to_string(ck * a.groups));
}

Shape conv_rule(const Node& n, const std::vector<Shape>& in) {
  const W a = W::of(n.attrs);
  check_input(a, in[0], "x");
  check_kernel(a, in[1]);
  check_in_channels(a, in[0], in[1]);
  return layout_shape(a, in[0][0], forward_extents(a, in[0]), in[1][a.rank + 1]);
}

// The result of ConvBackpropInput: like's shape (a gradient), or batch from dy, spatial from
// out_spatial and channels from the kernel (a transposed conv).
Shape conv_backprop_input_rule(const Node& n, const std::vector<Shape>& in) {
  const W a = W::of(n.attrs);
  const Shape& dy = in[0];
  const Shape& k = in[1];
  check_input(a, dy, "x");
  check_kernel(a, k);
  const std::int64_t cdy = channels(a, dy), ck = k[a.rank + 1];
  if (cdy >= 0 && ck >= 0 && cdy != ck)
    throw ValueError(a.fn + ": x of shape " + dy.str() + " has " + std::to_string(cdy) +
                     " channels but the kernel of shape " + k.str() + " has " + std::to_string(ck) +
                     " (kernel (window..., out, in))");
  Shape out = in.size() > 2 ? in[2]
                            : layout_shape(a, dy[0], {a.out_spatial.begin(), a.out_spatial.end()},
                                           k[a.rank] < 0 ? None : k[a.rank] * a.groups);
  check_in_channels(a, out, k);
  const auto ext = forward_extents(a, out);
  for (int i = 0; i < a.rank; ++i) {
    const std::int64_t want = spatial(a, dy, i), got = ext[static_cast<std::size_t>(i)];
    if (want >= 0 && got >= 0 && want != got)
      throw ValueError(a.fn + ": output_shape " + out.str() + " is inconsistent with x of shape " +
                       dy.str() + ": the forward convolution of that shape has spatial dim " +
                       std::to_string(i) + " of " + std::to_string(got) + ", not " +
                       std::to_string(want));
  }
  return out;
}

Shape conv_backprop_filter_rule(const Node& n, const std::vector<Shape>& in) {
  const W a = W::of(n.attrs);
  const std::int64_t cx = channels(a, in[0]);
  std::vector<std::int64_t> d(a.window.begin(), a.window.end());
  d.push_back(cx < 0 ? None : cx / a.groups);
  d.push_back(channels(a, in[1]));
  return Shape(std::move(d));
}

// The compile hook of the three conv ops: the shape rule, plus the cpu kernels' workspace
// (ops/kernels/conv_plan.hpp) carved from the Function's arena.
Prepared conv_prepare(const PrepareArgs& a) {
  const Node& n = a.node;
  Prepared p;
  kernels::ConvPass pass;
  const Shape* xs;
  const Shape* ys;
  switch (n.op) {
    case Op::Conv:
      p.shape = conv_rule(n, a.in_shapes);
      pass = kernels::ConvPass::kForward, xs = &a.in_shapes[0], ys = &p.shape;
      break;
    case Op::ConvBackpropInput:
      p.shape = conv_backprop_input_rule(n, a.in_shapes);
      pass = kernels::ConvPass::kBackpropInput, xs = &p.shape, ys = &a.in_shapes[0];
      break;
    default:
      p.shape = conv_backprop_filter_rule(n, a.in_shapes);
      pass = kernels::ConvPass::kBackpropFilter, xs = &a.in_shapes[0], ys = &a.in_shapes[1];
      break;
  }
  if (a.backend != "cpu" || !is_floating(n.dtype) || n.dtype == DType::float16) return p;
  auto ref = [](const Shape& s) {
    ArrayRef r;
    r.dims = s.dims().data();
    r.ndim = s.ndim();
    return r;
  };
  const auto g = kernels::window_dims(W::of(n.attrs), ref(*xs), ref(*ys));
  p.scratch_bytes = kernels::conv_plan(pass, g, dtype_size(n.dtype)).bytes();
  return p;
}

Tensor conv_node(Op op, std::vector<Tensor> in, const Attrs& at) {
  const DType dt = in[0].dtype();
  return make_node(op, std::move(in), at, dt);
}

G conv_grad(const Node& n, const Tensor&, const Tensor& g) {
  const Tensor& x = n.inputs[0];
  const Tensor& w = n.inputs[1];
  return {conv_node(Op::ConvBackpropInput, {g, w, x}, n.attrs),
          conv_node(Op::ConvBackpropFilter, {x, g}, n.attrs)};
}
// dx = B(dy, w) is linear in dy and in w: <h, B(dy, w)> = <conv(h, w), dy> = <F(h, dy), w>.
G conv_backprop_input_grad(const Node& n, const Tensor&, const Tensor& h) {
  const Tensor& dy = n.inputs[0];
  const Tensor& w = n.inputs[1];
  G r{conv_node(Op::Conv, {h, w}, n.attrs), conv_node(Op::ConvBackpropFilter, {h, dy}, n.attrs)};
  if (n.inputs.size() > 2) r.emplace_back();
  return r;
}
// dw = F(x, dy): <h, F(x, dy)> = <conv(x, h), dy> = <B(dy, h), x>.
G conv_backprop_filter_grad(const Node& n, const Tensor&, const Tensor& h) {
  const Tensor& x = n.inputs[0];
  const Tensor& dy = n.inputs[1];
  return {conv_node(Op::ConvBackpropInput, {dy, h, x}, n.attrs),
          conv_node(Op::Conv, {x, h}, n.attrs)};
}

// ---- builders ------------------------------------------------------------------------------

struct Common {
  W::Spec spec;
  std::string fn;
};

// Validates what every conv builder shares and fills the window spec (not the kernel window).
Common common(const char* fn, int rank, const Tensor& x, const Tensor& kernel, const ConvOptions& o,
              bool causal_ok) {
  ops::check_float(fn, "x", x);
  ops::check_same_dtype(fn, x, kernel);
  Common c;
  c.fn = fn;
  c.spec.rank = rank;
  c.spec.channels_first = ops::channels_first(fn, o.data_format);
  c.spec.strides = ops::spatial_tuple(fn, "strides", o.strides, rank);
  c.spec.dilation = ops::spatial_tuple(fn, "dilation_rate", o.dilation_rate, rank);
  c.spec.padding = ops::padding_mode(fn, o.padding, causal_ok);
  if (x.ndim() != rank + 2)
    throw ValueError(std::string(fn) + ": x of shape " + x.shape().str() + " must have rank " +
                     std::to_string(rank + 2) +
                     (c.spec.channels_first ? " (batch, channels, spatial...)"
                                            : " (batch, spatial..., channels)"));
  if (kernel.ndim() != rank + 2)
    throw ValueError(std::string(fn) + ": kernel of shape " + kernel.shape().str() +
                     " must have rank " + std::to_string(rank + 2));
  if (!kernel.shape().is_fully_defined())
    throw ValueError(std::string(fn) + ": the kernel's shape " + kernel.shape().str() +
                     " must be fully known");
  for (int i = 0; i < rank; ++i) {
    if (kernel.shape()[i] < 1 || kernel.shape()[i] > ops::kMaxWindowValue)
      throw ValueError(std::string(fn) + ": kernel of shape " + kernel.shape().str() +
                       " needs a window of 1 to " + std::to_string(ops::kMaxWindowValue) +
                       " cells per spatial dim");
    c.spec.window.push_back(kernel.shape()[i]);
  }
  return c;
}

// causal (conv1d): dilation * (k - 1) zeros on the left, then valid.
void resolve_causal(Common& c) {
  if (c.spec.padding != ops::kCausal) return;
  if (c.spec.channels_first)
    throw ValueError(c.fn +
                     ": When using causal padding in `conv1d`, `data_format` must be "
                     "\"channels_last\" (temporal data).");
  c.spec.padding = W::kExplicit;
  c.spec.pad_before = {c.spec.dilation[0] * (c.spec.window[0] - 1)};
  c.spec.pad_after = {0};
}

Tensor conv_nd(const char* fn, int rank, const Tensor& x, const Tensor& kernel,
               const ConvOptions& o) {
  Common c = common(fn, rank, x, kernel, o, rank == 1);
  resolve_causal(c);
  return make_node(Op::Conv, {x, kernel}, W::make(c.spec, c.fn), x.dtype());
}

Tensor conv_transpose(const char* fn, int rank, const Tensor& x, const Tensor& kernel,
                      const std::vector<std::int64_t>& output_shape, const ConvOptions& o) {
  Common c = common(fn, rank, x, kernel, o, false);
  bool dilated = false;
  for (auto d : c.spec.dilation) dilated = dilated || d != 1;
  if (dilated) {
    for (auto d : c.spec.dilation)
      if (d != c.spec.dilation[0])
        throw ValueError(c.fn + ": dilation_rate " + dims_str(c.spec.dilation) +
                         " must be equal on every spatial dim");
    for (auto s : c.spec.strides)
      if (s != 1)
        throw ValueError(c.fn + ": dilation_rate " + dims_str(c.spec.dilation) +
                         " needs strides of 1, got " + dims_str(c.spec.strides));
  }
  if (static_cast<int>(output_shape.size()) != rank + 2)
    throw ValueError(c.fn + ": output_shape " + dims_str(output_shape) + " must have " +
                     std::to_string(rank + 2) + " entries (batch included)");
  const auto ch = static_cast<std::size_t>(c.spec.channels_first ? 1 : rank + 1);
  const std::int64_t out_c = output_shape[ch], k_out = kernel.shape()[rank];
  if (out_c != k_out)
    throw ValueError(c.fn + ": output_shape " + dims_str(output_shape) + " has " +
                     std::to_string(out_c) + " channels but the kernel of shape " +
                     kernel.shape().str() + " makes " + std::to_string(k_out) +
                     " (kernel (window..., out, in))");
  const std::int64_t batch = output_shape[0];
  if (batch >= 0 && x.shape()[0] >= 0 && batch != x.shape()[0])
    throw ValueError(c.fn + ": output_shape " + dims_str(output_shape) + " has batch " +
                     std::to_string(batch) + " but x of shape " + x.shape().str() + " has " +
                     std::to_string(x.shape()[0]));
  for (int i = 0; i < rank; ++i) {
    const std::int64_t s =
        output_shape[static_cast<std::size_t>((c.spec.channels_first ? 2 : 1) + i)];
    if (s < 0)
      throw ValueError(c.fn + ": the spatial dims of output_shape " + dims_str(output_shape) +
                       " must be known");
    c.spec.out_spatial.push_back(s);
  }
  return make_node(Op::ConvBackpropInput, {x, kernel}, W::make(c.spec, c.fn), x.dtype());
}

// Depthwise as a grouped conv: (kh, kw, in, m) read as (kh, kw, 1, in * m), one group per input
// channel (output channel c * m + j is group c's filter j, as TF).
Tensor depthwise_nd(const char* fn, int rank, const Tensor& x, const Tensor& dk,
                    const ConvOptions& o) {
  Common c = common(fn, rank, x, dk, o, false);
  const std::int64_t in = dk.shape()[rank], m = dk.shape()[rank + 1];
  if (in < 1 || m < 1)
    throw ValueError(c.fn + ": the depthwise kernel of shape " + dk.shape().str() +
                     " needs at least one input channel and a multiplier of at least 1");
  const std::int64_t cx = x.shape()[c.spec.channels_first ? 1 : rank + 1];
  if (cx >= 0 && cx != in)
    throw ValueError(c.fn + ": x of shape " + x.shape().str() + " has " + std::to_string(cx) +
                     " channels but the depthwise kernel of shape " + dk.shape().str() +
                     " expects " + std::to_string(in));
  std::vector<std::int64_t> kd(c.spec.window.begin(), c.spec.window.end());
  kd.push_back(1);
  kd.push_back(in * m);
  c.spec.groups = in;
  return make_node(Op::Conv, {x, reshape(dk, kd)}, W::make(c.spec, c.fn), x.dtype());
}

Tensor separable_nd(const char* fn, int rank, const Tensor& x, const Tensor& dk, const Tensor& pk,
                    const ConvOptions& o) {
  ops::check_same_dtype(fn, x, pk);
  if (pk.ndim() != rank + 2 || !pk.shape().is_fully_defined())
    throw ValueError(std::string(fn) + ": pointwise_kernel of shape " + pk.shape().str() +
                     " must have rank " + std::to_string(rank + 2) + " and a known shape");
  const Tensor y = depthwise_nd(fn, rank, x, dk, o);
  const std::int64_t mid = dk.shape()[rank] * dk.shape()[rank + 1];
  bool ok = pk.shape()[rank] == mid;
  for (int i = 0; i < rank; ++i) ok = ok && pk.shape()[i] == 1;
  if (!ok)
    throw ValueError(std::string(fn) + ": pointwise_kernel of shape " + pk.shape().str() +
                     " must be (1, ..., 1, " + std::to_string(mid) +
                     ", out) for the depthwise kernel of shape " + dk.shape().str());
  W::Spec s;
  s.rank = rank;
  s.channels_first = ops::channels_first(fn, o.data_format);
  s.window.assign(static_cast<std::size_t>(rank), 1);
  return make_node(Op::Conv, {y, pk}, W::make(s, fn), x.dtype());
}

// out (P, B, F) = batch_dot(patches (P, B, J), kernel (P, J, F)) over J, as a sum of products.
Tensor patch_dot(const Tensor& patches, const Tensor& kernel) {
  return sum(expand_dims(patches, 3) * expand_dims(kernel, 1), 2);
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& kernel, const ConvOptions& o) {
  return conv_nd("K::conv1d", 1, x, kernel, o);
}
Tensor conv2d(const Tensor& x, const Tensor& kernel, const ConvOptions& o) {
  return conv_nd("K::conv2d", 2, x, kernel, o);
}
Tensor conv3d(const Tensor& x, const Tensor& kernel, const ConvOptions& o) {
  return conv_nd("K::conv3d", 3, x, kernel, o);
}
Tensor conv2d_transpose(const Tensor& x, const Tensor& kernel,
                        const std::vector<std::int64_t>& output_shape, const ConvOptions& o) {
  return conv_transpose("K::conv2d_transpose", 2, x, kernel, output_shape, o);
}
Tensor conv3d_transpose(const Tensor& x, const Tensor& kernel,
                        const std::vector<std::int64_t>& output_shape, const ConvOptions& o) {
  if (!o.dilation_rate.empty())
    for (auto d : o.dilation_rate)
      if (d != 1)
        throw ValueError("K::conv3d_transpose: dilation_rate is not supported (Keras has none)");
  return conv_transpose("K::conv3d_transpose", 3, x, kernel, output_shape, o);
}
Tensor depthwise_conv2d(const Tensor& x, const Tensor& dk, const ConvOptions& o) {
  return depthwise_nd("K::depthwise_conv2d", 2, x, dk, o);
}
Tensor separable_conv2d(const Tensor& x, const Tensor& dk, const Tensor& pk, const ConvOptions& o) {
  return separable_nd("K::separable_conv2d", 2, x, dk, pk, o);
}
Tensor separable_conv1d(const Tensor& x, const Tensor& dk, const Tensor& pk, const ConvOptions& o) {
  return separable_nd("K::separable_conv1d", 1, x, dk, pk, o);
}

Tensor local_conv1d(const Tensor& inputs, const Tensor& kernel, std::int64_t kernel_size,
                    std::int64_t stride, const std::optional<std::string>& data_format) {
  const char* fn = "K::local_conv1d";
  (void)ops::channels_first(fn, data_format);  // validated, then ignored (channels_last), as TF
  ops::check_float(fn, "inputs", inputs);
  ops::check_same_dtype(fn, inputs, kernel);
  if (inputs.ndim() != 3)
    throw ValueError(std::string(fn) + ": inputs of shape " + inputs.shape().str() +
                     " must have rank 3 (batch, steps, channels)");
  if (kernel_size < 1 || stride < 1)
    throw ValueError(std::string(fn) + ": kernel_size " + std::to_string(kernel_size) +
                     " and stride " + std::to_string(stride) + " must be positive");
  const std::int64_t c = inputs.shape()[2];
  if (kernel.ndim() != 3 || !kernel.shape().is_fully_defined() || c < 0)
    throw ValueError(std::string(fn) + ": kernel of shape " + kernel.shape().str() +
                     " must be (output_length, kernel_size * channels, filters), known, for "
                     "inputs of shape " +
                     inputs.shape().str());
  const std::int64_t out_len = kernel.shape()[0];
  if (kernel.shape()[1] != kernel_size * c)
    throw ValueError(std::string(fn) + ": kernel of shape " + kernel.shape().str() +
                     " must have kernel_size * channels = " + std::to_string(kernel_size * c) +
                     " rows per step");
  const std::int64_t steps = inputs.shape()[1];
  if (steps >= 0 && (out_len - 1) * stride + kernel_size > steps)
    throw ValueError(std::string(fn) + ": kernel of shape " + kernel.shape().str() + " has " +
                     std::to_string(out_len) + " output steps, more than inputs of shape " +
                     inputs.shape().str() + " allow");
  std::vector<Tensor> parts;
  for (std::int64_t i = 0; i < out_len; ++i)
    parts.push_back(reshape(slice(inputs, {0, i * stride, 0}, {-1, kernel_size, -1}),
                            {1, -1, kernel_size * c}));
  const Tensor out = patch_dot(concatenate(parts, 0), kernel);  // (P, B, F)
  return permute_dimensions(out, {1, 0, 2});
}

Tensor local_conv2d(const Tensor& inputs, const Tensor& kernel,
                    const std::vector<std::int64_t>& kernel_size,
                    const std::vector<std::int64_t>& strides,
                    const std::vector<std::int64_t>& output_shape,
                    const std::optional<std::string>& data_format) {
  const char* fn = "K::local_conv2d";
  const bool cf = ops::channels_first(fn, data_format);
  ops::check_float(fn, "inputs", inputs);
  ops::check_same_dtype(fn, inputs, kernel);
  if (inputs.ndim() != 4)
    throw ValueError(std::string(fn) + ": inputs of shape " + inputs.shape().str() +
                     " must have rank 4");
  if (kernel_size.size() != 2 || strides.size() != 2 || output_shape.size() != 2)
    throw ValueError(std::string(fn) + ": kernel_size, strides and output_shape need 2 entries");
  for (auto v :
       {kernel_size[0], kernel_size[1], strides[0], strides[1], output_shape[0], output_shape[1]})
    if (v < 1)
      throw ValueError(std::string(fn) + ": kernel_size " + dims_str(kernel_size) + ", strides " +
                       dims_str(strides) + " and output_shape " + dims_str(output_shape) +
                       " must be positive");
  const std::int64_t c = inputs.shape()[cf ? 1 : 3];
  const std::int64_t kh = kernel_size[0], kw = kernel_size[1];
  const std::int64_t rows = output_shape[0], cols = output_shape[1];
  if (kernel.ndim() != 3 || !kernel.shape().is_fully_defined() || c < 0 ||
      kernel.shape()[0] != rows * cols || kernel.shape()[1] != kh * kw * c)
    throw ValueError(std::string(fn) + ": kernel of shape " + kernel.shape().str() + " must be (" +
                     std::to_string(rows * cols) + ", " + std::to_string(kh * kw * c) +
                     ", filters) for inputs of shape " + inputs.shape().str() + ", kernel_size " +
                     dims_str(kernel_size) + " and output_shape " + dims_str(output_shape));
  const std::int64_t h = inputs.shape()[cf ? 2 : 1], w = inputs.shape()[cf ? 3 : 2];
  if ((h >= 0 && (rows - 1) * strides[0] + kh > h) || (w >= 0 && (cols - 1) * strides[1] + kw > w))
    throw ValueError(std::string(fn) + ": output_shape " + dims_str(output_shape) +
                     " needs more than inputs of shape " + inputs.shape().str() + " hold");
  std::vector<Tensor> parts;
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) {
      const std::int64_t r0 = i * strides[0], c0 = j * strides[1];
      const Tensor p = cf ? slice(inputs, {0, 0, r0, c0}, {-1, -1, kh, kw})
                          : slice(inputs, {0, r0, c0, 0}, {-1, kh, kw, -1});
      parts.push_back(reshape(p, {1, -1, kh * kw * c}));
    }
  const Tensor out = patch_dot(concatenate(parts, 0), kernel);  // (P, B, F)
  const Tensor grid = reshape(out, {rows, cols, -1, kernel.shape()[2]});
  return cf ? permute_dimensions(grid, {2, 3, 0, 1}) : permute_dimensions(grid, {2, 0, 1, 3});
}

}  // namespace ktape::backend

namespace ktape::ops {

void register_conv_ops() {
  using namespace ktape::backend;
  define_op(Op::Conv, {.shape = &conv_rule, .grad = &conv_grad, .prepare = &conv_prepare});
  define_op(Op::ConvBackpropInput, {.shape = &conv_backprop_input_rule,
                                    .grad = &conv_backprop_input_grad,
                                    .prepare = &conv_prepare});
  define_op(Op::ConvBackpropFilter, {.shape = &conv_backprop_filter_rule,
                                     .grad = &conv_backprop_filter_grad,
                                     .prepare = &conv_prepare});
}

}  // namespace ktape::ops
