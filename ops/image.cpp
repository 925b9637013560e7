#include "ops/image.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "ops/core.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/layout.hpp"
#include "ops/op_util.hpp"

namespace ktape::backend {

namespace {

using G = std::vector<Tensor>;

// Pad(x) (attrs::Pad): x with zeros added before and after every axis; negative amounts crop.
// Its gradient is the opposite Pad.
Shape pad_rule(const Node& n, const std::vector<Shape>& in) {
  const auto p = attrs::Pad::of(n.attrs);
  const Shape& x = in[0];
  if (static_cast<int>(p.before.size()) != x.ndim())
    throw ValueError("K::pad: " + std::to_string(p.before.size()) +
                     " padding pairs for a tensor of shape " + x.str());
  std::vector<std::int64_t> d;
  for (int i = 0; i < x.ndim(); ++i) {
    const auto u = static_cast<std::size_t>(i);
    if (x[i] < 0) {
      d.push_back(None);
      continue;
    }
    const std::int64_t v = x[i] + p.before[u] + p.after[u];
    if (v < 0)
      throw ValueError("K::pad: cropping " + ops::dims_str(p.before) + " / " +
                       ops::dims_str(p.after) + " removes more than a tensor of shape " + x.str() +
                       " holds");
    d.push_back(v);
  }
  return Shape(std::move(d));
}
G pad_grad(const Node& n, const Tensor&, const Tensor& g) {
  const auto p = attrs::Pad::of(n.attrs);
  std::vector<std::int64_t> b, a;
  for (auto v : p.before) b.push_back(-v);
  for (auto v : p.after) a.push_back(-v);
  return {make_node(Op::Pad, {g}, attrs::Pad::make(b, a), g.dtype())};
}

Tensor pad(const char* fn, const Tensor& x, int rank, const std::vector<int>& axes,
           const std::vector<PadPair>& pads) {
  if (x.ndim() != rank)
    throw ValueError(std::string(fn) + ": x of shape " + x.shape().str() + " must have rank " +
                     std::to_string(rank));
  std::vector<std::int64_t> b(static_cast<std::size_t>(rank), 0), a = b;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (pads[i][0] < 0 || pads[i][1] < 0 || pads[i][0] > ops::kMaxWindowValue ||
        pads[i][1] > ops::kMaxWindowValue)
      throw ValueError(std::string(fn) + ": padding (" + std::to_string(pads[i][0]) + ", " +
                       std::to_string(pads[i][1]) + ") must be non-negative (and at most " +
                       std::to_string(ops::kMaxWindowValue) + ")");
    b[static_cast<std::size_t>(axes[i])] = pads[i][0];
    a[static_cast<std::size_t>(axes[i])] = pads[i][1];
  }
  return make_node(Op::Pad, {x}, attrs::Pad::make(b, a), x.dtype());
}

std::vector<int> spatial_axes(int rank, bool cf) {
  std::vector<int> ax;
  for (int i = 0; i < rank - 2; ++i) ax.push_back((cf ? 2 : 1) + i);
  return ax;
}

bool explicit_channels_first(const char* fn, const std::string& data_format) {
  return ops::channels_first(fn, std::optional<std::string>(data_format));
}

void check_factor(const char* fn, const char* arg, int f) {
  if (f < 1)
    throw ValueError(std::string(fn) + ": " + arg + " " + std::to_string(f) +
                     " must be a positive integer");
}

// The (in x out) weights of TF 1.x resize_bilinear along one axis, for an integer factor: column
// o holds the weights of output o's two source cells.
NDArray bilinear_matrix(std::int64_t in, int factor) {
  const std::int64_t out = in * factor;
  NDArray m = NDArray::full({in, out}, 0.0, DType::float64);
  for (std::int64_t o = 0; o < out; ++o) {
    const double src = static_cast<double>(o) * static_cast<double>(in) / static_cast<double>(out);
    const auto y0 = static_cast<std::int64_t>(std::floor(src));
    const std::int64_t y1 = std::min(y0 + 1, in - 1);
    const double w = src - static_cast<double>(y0);
    m.set_item(y0 * out + o, m.item(y0 * out + o) + (1.0 - w));
    m.set_item(y1 * out + o, m.item(y1 * out + o) + w);
  }
  return m;
}

// x's axis `axis` (extent in) replaced by its product with m (in, out).
Tensor apply_along(const Tensor& x, int axis, const NDArray& m) {
  std::vector<int> to_last, back;
  for (int d = 0; d < x.ndim(); ++d)
    if (d != axis) to_last.push_back(d);
  to_last.push_back(axis);
  back.assign(static_cast<std::size_t>(x.ndim()), 0);
  for (int i = 0; i < x.ndim(); ++i)
    back[static_cast<std::size_t>(to_last[static_cast<std::size_t>(i)])] = i;
  const Tensor mt = constant(m, {.dtype = std::string(dtype_name(x.dtype()))});
  return permute_dimensions(dot(permute_dimensions(x, to_last), mt), back);
}

}  // namespace

Tensor temporal_padding(const Tensor& x, PadPair padding) {
  return pad("K::temporal_padding", x, 3, {1}, {padding});
}
Tensor spatial_2d_padding(const Tensor& x, std::array<PadPair, 2> padding,
                          const std::optional<std::string>& data_format) {
  const char* fn = "K::spatial_2d_padding";
  return pad(fn, x, 4, spatial_axes(4, ops::channels_first(fn, data_format)),
             {padding.begin(), padding.end()});
}
Tensor spatial_3d_padding(const Tensor& x, std::array<PadPair, 3> padding,
                          const std::optional<std::string>& data_format) {
  const char* fn = "K::spatial_3d_padding";
  return pad(fn, x, 5, spatial_axes(5, ops::channels_first(fn, data_format)),
             {padding.begin(), padding.end()});
}

Tensor resize_images(const Tensor& x, int height_factor, int width_factor,
                     const std::string& data_format, const std::string& interpolation) {
  const char* fn = "K::resize_images";
  const bool cf = explicit_channels_first(fn, data_format);
  check_factor(fn, "height_factor", height_factor);
  check_factor(fn, "width_factor", width_factor);
  if (x.ndim() != 4)
    throw ValueError(std::string(fn) + ": x of shape " + x.shape().str() + " must have rank 4");
  const int rows = cf ? 2 : 1, cols = rows + 1;
  if (interpolation == "nearest")
    return repeat_elements(repeat_elements(x, height_factor, rows), width_factor, cols);
  if (interpolation != "bilinear")
    throw ValueError(std::string(fn) +
                     ": interpolation should be one of \"nearest\" or "
                     "\"bilinear\", got \"" +
                     interpolation + "\"");
  ops::check_float(fn, "x", x);
  const std::int64_t h = x.shape()[rows], w = x.shape()[cols];
  if (h < 0 || w < 0)
    throw ValueError(std::string(fn) + ": bilinear resizing needs known rows and cols, x has " +
                     "shape " + x.shape().str());
  const Tensor y = apply_along(x, rows, bilinear_matrix(h, height_factor));
  return apply_along(y, cols, bilinear_matrix(w, width_factor));
}

Tensor resize_volumes(const Tensor& x, int depth_factor, int height_factor, int width_factor,
                      const std::string& data_format) {
  const char* fn = "K::resize_volumes";
  const bool cf = explicit_channels_first(fn, data_format);
  check_factor(fn, "depth_factor", depth_factor);
  check_factor(fn, "height_factor", height_factor);
  check_factor(fn, "width_factor", width_factor);
  if (x.ndim() != 5)
    throw ValueError(std::string(fn) + ": x of shape " + x.shape().str() + " must have rank 5");
  const int d0 = cf ? 2 : 1;
  return repeat_elements(
      repeat_elements(repeat_elements(x, depth_factor, d0), height_factor, d0 + 1), width_factor,
      d0 + 2);
}

}  // namespace ktape::backend

namespace ktape::ops {

void register_image_ops() {
  using namespace ktape::backend;
  define_op(Op::Pad, {.shape = &pad_rule, .grad = &pad_grad, .dispatch_input = 0});
}

}  // namespace ktape::ops
