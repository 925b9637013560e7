#include "ops/layout.hpp"

#include <algorithm>

#include "ops/core.hpp"
#include "ops/elementwise.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/cpu/gemm.hpp"
#include "ops/op_util.hpp"
#include "ops/reductions.hpp"
#include "ops/sparse.hpp"

namespace ktape::backend {

namespace {

using G = std::vector<Tensor>;
using attrs::kCopyDim0;

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  return make_node(Op::MatMul, {a, b}, attrs::MatMul::make(ta, tb), a.dtype());
}

// MatMul (attrs::MatMul). An operand of rank > 2 is a stack of rows: its
// leading dims flatten into one. a (..., K) . b (K, N) -> (..., N); a^T . b with a (..., M) and
// b (..., N) over the same leading dims -> (M, N) (a sum over every row: weight gradients).
Shape matmul_rule(const Node& n, const std::vector<Shape>& in) {
  const auto matmul_attrs = attrs::MatMul::of(n.attrs);
  const auto ta = matmul_attrs.ta;
  const auto tb = matmul_attrs.tb;
  const Shape& a = in[0];
  const Shape& b = in[1];
  auto fail = [&](const std::string& why) {
    throw ValueError("K::dot: matmul of " + a.str() + (ta ? "^T" : "") + " and " + b.str() +
                     (tb ? "^T" : "") + ": " + why);
  };
  if (a.ndim() < 2 || b.ndim() < 2) fail("operands need at least 2 dims");
  if (ta && tb && (a.ndim() != 2 || b.ndim() != 2)) fail("both transposed needs 2-D operands");
  if (!ta && b.ndim() != 2) fail("b must be 2-D");
  if (ta && !tb && a.ndim() != b.ndim()) fail("a^T . b needs operands of the same rank");
  const int la = a.ndim() - 1;
  std::int64_t ka, kb;
  if (ta && !tb) {
    for (int d = 0; d < la; ++d)
      if (a[d] >= 0 && b[d] >= 0 && a[d] != b[d]) fail("leading dims differ");
    ka = kb = -1;
    if (la == 1) ka = a[0], kb = b[0];
  } else {
    ka = ta ? a[0] : a[la];
    kb = tb ? b[1] : b[0];
  }
  if (ka >= 0 && kb >= 0 && ka != kb)
    fail("not aligned: " + std::to_string(ka) + " != " + std::to_string(kb));
  const std::int64_t nn = tb ? b[0] : b[b.ndim() - 1];
  if (ta) return Shape{a[la], nn};
  std::vector<std::int64_t> d(a.dims().begin(), a.dims().end() - 1);
  d.push_back(nn);
  return Shape(std::move(d));
}

// The compile hook of MatMul: the shape rule, plus the cpu GEMM's partial sums when it splits a
// deep product's depth (ops/kernels/cpu/gemm.hpp), carved from the Function's arena.
Prepared matmul_prepare(const PrepareArgs& p) {
  Prepared r;
  r.shape = matmul_rule(p.node, p.in_shapes);
  if (p.backend != "cpu" || !r.shape.is_fully_defined()) return r;
  const auto at = attrs::MatMul::of(p.node.attrs);
  const Shape& a = p.in_shapes[0];
  const std::int64_t n = r.shape[r.shape.ndim() - 1];
  const std::int64_t m = r.shape.num_elements() / std::max<std::int64_t>(n, 1);
  const std::int64_t k =
      at.ta ? a.num_elements() / std::max<std::int64_t>(a[a.ndim() - 1], 1) : a[a.ndim() - 1];
  r.scratch_bytes = kernels::parallel_gemm_scratch(m, n, k, dtype_size(p.node.dtype));
  // A loop body's weight (a static of the loop) is packed on the loop's first step and the packs
  // kept for the rest of the run (kernels::GemmKeep).
  if ((p.invariant_inputs & 3u) != 0 && p.loop_run != nullptr) {
    auto keep = std::make_shared<kernels::MatMulKeep>();
    keep->loop_run = p.loop_run;
    for (int which = 0; which < 2; ++which)
      if (p.invariant_inputs & (1u << which))
        (which == 0 ? keep->a : keep->b) = kernels::make_gemm_pack_cache(
            kernels::gemm_pack_cache_bytes(m, n, k, dtype_size(p.node.dtype), which));
    if (keep->a.data || keep->b.data) r.ctx = std::move(keep);
  }
  return r;
}

// Two products with the same right operand (the weight gradients h^T dZ and x^T dZ a loop
// hoists over one stacked dZ) run as one on the cpu backend: B is read and packed once for
// both (kernels::parallel_gemm_shared_b).
Paired matmul_pair(const PairArgs& p) {
  if (p.backend != "cpu" || !(p.first.attrs == p.second.attrs)) return {};
  const auto at = attrs::MatMul::of(p.first.attrs);
  std::int64_t ms[2], n = 0, k = 0;
  for (int i = 0; i < 2; ++i) {
    const std::vector<Shape>& in = i == 0 ? p.first_in : p.second_in;
    const Shape out = matmul_rule(i == 0 ? p.first : p.second, in);
    const Shape& a = in[0];
    const std::int64_t ni = out[out.ndim() - 1],
                       ki = at.ta ? a.num_elements() / std::max<std::int64_t>(a[a.ndim() - 1], 1)
                                  : a[a.ndim() - 1];
    ms[i] = out.num_elements() / std::max<std::int64_t>(ni, 1);
    if (i == 1 && (ni != n || ki != k)) return {};
    n = ni;
    k = ki;
  }
  Paired r;
  r.kernel = kernels::matmul_shared_b_kernel(p.first.dtype);
  if (r.kernel)
    r.scratch_bytes =
        kernels::parallel_gemm_shared_b_scratch(ms, 2, n, k, dtype_size(p.first.dtype));
  return r;
}

G matmul_grad(const Node& n, const Tensor&, const Tensor& g) {
  const Tensor& a = n.inputs[0];
  const Tensor& b = n.inputs[1];
  const auto matmul_attrs = attrs::MatMul::of(n.attrs);
  const auto ta = matmul_attrs.ta;
  const auto tb = matmul_attrs.tb;
  if (!ta && !tb) return {matmul(g, b, false, true), matmul(a, g, true, false)};
  if (ta && !tb) return {matmul(b, g, false, true), matmul(a, g, false, false)};
  if (!ta && tb) return {matmul(g, b, false, false), matmul(g, a, true, false)};
  return {matmul(b, g, true, true), matmul(g, a, true, true)};
}

// a . b over the rows of a: stacking a's rows (a per-step (B, K) into (T, B, K)) stacks the
// results.
unsigned matmul_stack_map(const Node& n) {
  const auto matmul_attrs = attrs::MatMul::of(n.attrs);
  const auto ta = matmul_attrs.ta;
  const auto tb = matmul_attrs.tb;
  const bool plain = !ta && !tb;
  return plain && n.inputs[0].ndim() == 2 && n.inputs[1].ndim() == 2 ? 0b01u : 0u;
}
// a^T . b sums over the rows both share: stacking both sums the per-step products.
unsigned matmul_stack_sum(const Node& n) {
  const auto matmul_attrs = attrs::MatMul::of(n.attrs);
  const auto ta = matmul_attrs.ta;
  const auto tb = matmul_attrs.tb;
  const bool at_b = ta && !tb;
  const Shape& a = n.inputs[0].shape();
  const Shape& b = n.inputs[1].shape();
  return at_b && a.ndim() == 2 && b.ndim() == 2 && a[1] >= 0 && b[1] >= 0 ? 0b11u : 0u;
}

Shape transpose_rule(const Node& n, const std::vector<Shape>& in) {
  std::vector<std::int64_t> s;
  for (auto p : attrs::IntList::of(n.attrs).values) s.push_back(in[0][static_cast<int>(p)]);
  return Shape(std::move(s));
}
G transpose_grad(const Node& n, const Tensor&, const Tensor& g) {
  const auto perm = attrs::IntList::of(n.attrs).values;
  std::vector<int> inv(perm.size());
  for (std::size_t i = 0; i < inv.size(); ++i)
    inv[static_cast<std::size_t>(perm[i])] = static_cast<int>(i);
  return {permute_dimensions(g, inv)};
}

Shape reshape_rule(const Node& n, const std::vector<Shape>& in) {
  const Shape& x = in[0];
  const auto target = attrs::IntList::of(n.attrs).values;
  const Shape given(std::vector<std::int64_t>(target.begin(), target.end()));
  std::vector<std::int64_t> s = given.dims();
  int infer = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == kCopyDim0) s[i] = x[0];
    if (s[i] == -1 && target[i] == -1)
      infer = static_cast<int>(i);
    else if (s[i] >= 0 && __builtin_mul_overflow(known, s[i], &known))
      throw ValueError("K::reshape: target shape " + given.str() +
                       " has more elements than fit in a 64-bit count");
  }
  const std::int64_t total = x.num_elements();
  bool unknown_target = false;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i] < 0 && static_cast<int>(i) != infer) unknown_target = true;
  if (total >= 0 && !unknown_target) {
    if (infer >= 0) {
      if (known == 0 || total % known != 0)
        throw ValueError("K::reshape: cannot reshape a tensor of shape " + x.str() + " (" +
                         std::to_string(total) + " elements) into " + given.str());
      s[static_cast<std::size_t>(infer)] = total / known;
    } else if (known != total) {
      throw ValueError("K::reshape: cannot reshape a tensor of shape " + x.str() + " (" +
                       std::to_string(total) + " elements) into " + given.str());
    }
  } else if (infer >= 0) {
    s[static_cast<std::size_t>(infer)] = None;
    // batch_flatten-style targets: dim 0 copied and the rest of x known.
    const bool copies_dim0 = std::find(target.begin(), target.end(), kCopyDim0) != target.end();
    std::int64_t rest = 1;
    bool rest_known = x.ndim() >= 1;
    for (int d = 1; d < x.ndim(); ++d) {
      if (x[d] < 0 || __builtin_mul_overflow(rest, x[d], &rest)) rest_known = false;
    }
    std::int64_t others = 1;
    bool others_known = true;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (static_cast<int>(i) == infer || target[i] == kCopyDim0) continue;
      if (s[i] < 0 || __builtin_mul_overflow(others, s[i], &others)) others_known = false;
    }
    if (copies_dim0 && rest_known && others_known && others > 0 && rest % others == 0)
      s[static_cast<std::size_t>(infer)] = rest / others;
  }
  return Shape(std::move(s));
}
G reshape_grad(const Node& n, const Tensor&, const Tensor& g) {
  return {make_node(Op::ReshapeLike, {g, n.inputs[0]}, {}, g.dtype())};
}
Shape reshape_like_rule(const Node& n, const std::vector<Shape>& in) {
  const std::int64_t a = in[0].num_elements(), b = in[1].num_elements();
  if (a >= 0 && b >= 0 && a != b)
    throw ValueError(ops::fn_name(n.op) + ": cannot reshape " + in[0].str() + " to " + in[1].str());
  return in[1];
}
G reshape_like_grad(const Node& n, const Tensor&, const Tensor& gg) {
  return {make_node(Op::ReshapeLike, {gg, n.inputs[0]}, {}, gg.dtype()), Tensor()};
}

Shape expand_rule(const Node& n, const std::vector<Shape>& in) {
  std::vector<std::int64_t> s = in[0].dims();
  for (auto a : attrs::IntList::of(n.attrs).values) s.insert(s.begin() + a, 1);
  return Shape(std::move(s));
}
Shape squeeze_rule(const Node& n, const std::vector<Shape>& in) {
  const auto axes = attrs::IntList::of(n.attrs).values;
  std::vector<std::int64_t> s;
  for (int d = 0; d < in[0].ndim(); ++d) {
    if (std::find(axes.begin(), axes.end(), d) != axes.end()) {
      if (in[0][d] != 1 && in[0][d] != None)
        throw ValueError("K::squeeze: cannot squeeze axis " + std::to_string(d) + " of shape " +
                         in[0].str() + ": its size is not 1");
      continue;
    }
    s.push_back(in[0][d]);
  }
  return Shape(std::move(s));
}
G expand_grad(const Node& n, const Tensor&, const Tensor& g) {
  Attrs at = n.attrs;
  return {make_node(Op::SqueezeAxes, {g}, std::move(at), g.dtype())};
}
G squeeze_grad(const Node& n, const Tensor&, const Tensor& g) {
  Attrs at = n.attrs;
  return {make_node(Op::ExpandAxes, {g}, std::move(at), g.dtype())};
}

Shape concat_rule(const Node& n, const std::vector<Shape>& in) {
  const int axis = attrs::Axis::of(n.attrs).axis;
  std::vector<std::int64_t> s = in[0].dims();
  for (std::size_t k = 1; k < in.size(); ++k) {
    if (in[k].ndim() != in[0].ndim())
      throw ValueError("K::concatenate: all tensors must have the same rank; got " + in[0].str() +
                       " and " + in[k].str());
    for (int d = 0; d < in[0].ndim(); ++d) {
      auto& sd = s[static_cast<std::size_t>(d)];
      if (d == axis) {
        if (sd >= 0 && in[k][d] >= 0 && __builtin_add_overflow(sd, in[k][d], &sd))
          throw ValueError("K::concatenate: the concatenated axis of " + in[0].str() + ", " +
                           in[k].str() + ", ... has more than 2^63 - 1 elements");
        if (in[k][d] < 0) sd = None;
      } else if (sd >= 0 && in[k][d] >= 0 && sd != in[k][d]) {
        throw ValueError("K::concatenate: shapes " + in[0].str() + " and " + in[k].str() +
                         " differ on axis " + std::to_string(d) + " (concatenation axis " +
                         std::to_string(axis) + ")");
      } else if (sd < 0) {
        sd = in[k][d];
      }
    }
  }
  return Shape(std::move(s));
}
G concat_grad(const Node& n, const Tensor&, const Tensor& g) {
  G r;
  for (std::size_t k = 0; k < n.inputs.size(); ++k) {
    std::vector<Tensor> ins{g};
    ins.insert(ins.end(), n.inputs.begin(), n.inputs.end());
    r.push_back(make_node(Op::ConcatPart, std::move(ins),
                          attrs::ConcatPart::make(attrs::Axis::of(n.attrs).axis, k), g.dtype()));
  }
  return r;
}
Shape concat_part_rule(const Node& n, const std::vector<Shape>& in) {
  return in[1 + attrs::ConcatPart::of(n.attrs).k];
}
// Slice (attrs::Slice): start and size per axis (size -1: to the end).
// SlicePad(g, x): x's shape, zeros except the slice, which holds g (the gradient of Slice).
Shape slice_rule(const Node& n, const std::vector<Shape>& in) {
  const Shape& x = in[0];
  const int r = x.ndim();
  const auto sl = attrs::Slice::of(n.attrs);
  std::vector<std::int64_t> d(static_cast<std::size_t>(r));
  for (int a = 0; a < r; ++a) {
    const std::int64_t st = sl.start[static_cast<std::size_t>(a)];
    const std::int64_t sz = sl.size[static_cast<std::size_t>(a)];
    const std::int64_t dim = x[a];
    if (st < 0 || sz < -1 || (dim >= 0 && (st > dim || sz > dim - st)))
      throw ValueError("K::slice: start " + std::to_string(st) + " and size " + std::to_string(sz) +
                       " on axis " + std::to_string(a) + " leave a tensor of shape " + x.str());
    d[static_cast<std::size_t>(a)] = sz >= 0 ? sz : (dim >= 0 ? dim - st : -1);
  }
  return Shape(std::move(d));
}
// A slice along one axis is a block of its input (OpDef::block_of); along several, it is not.
Block slice_block(const Node& n, const Shape& x, const Shape& y) {
  if (x.ndim() != y.ndim() || x.ndim() == 0) return {};
  int axis = -1;
  for (int a = 0; a < x.ndim(); ++a)
    if (x[a] != y[a]) {
      if (axis >= 0) return {};
      axis = a;
    }
  if (axis < 0) axis = 0;
  std::int64_t rows = 1, inner = 1;
  for (int a = 0; a < axis; ++a) rows *= x[a];
  for (int a = axis + 1; a < x.ndim(); ++a) inner *= x[a];
  const auto sl = attrs::Slice::of(n.attrs);
  if (rows <= 0 || inner <= 0 || y[axis] <= 0) return {};
  return {rows, y[axis] * inner, x[axis] * inner, sl.start[static_cast<std::size_t>(axis)] * inner};
}
// A slice that takes whole rows (every axis after the first whole) is a contiguous range of its
// input: a view (no copy) when the input lives in the arena, else the kernel copies it.
Prepared slice_prepare(const PrepareArgs& a) {
  Prepared p;
  p.shape = slice_rule(a.node, a.in_shapes);
  const Shape& x = a.in_shapes[0];
  if (x.ndim() == 0 || !x.is_fully_defined()) return p;
  for (int ax = 1; ax < x.ndim(); ++ax)
    if (p.shape[ax] != x[ax]) return p;
  const auto sl = attrs::Slice::of(a.node.attrs);
  p.view_input = 0;
  p.view_offset =
      static_cast<std::size_t>(sl.start[0] * (x.num_elements() / std::max<std::int64_t>(x[0], 1))) *
      dtype_size(a.node.dtype);
  return p;
}
G slice_grad(const Node& n, const Tensor&, const Tensor& g) {
  return {make_node(Op::SlicePad, {g, n.inputs[0]}, n.attrs, g.dtype())};
}
Shape slice_pad_rule(const Node&, const std::vector<Shape>& in) { return in[1]; }
G slice_pad_grad(const Node& n, const Tensor&, const Tensor& g) {
  return {make_node(Op::Slice, {g}, n.attrs, g.dtype()), Tensor()};
}
G concat_part_grad(const Node& n, const Tensor&, const Tensor& gg) {
  const auto concat_part_attrs = attrs::ConcatPart::of(n.attrs);
  const auto axis = concat_part_attrs.axis;
  const auto k = concat_part_attrs.k;
  std::vector<Tensor> parts;
  for (std::size_t i = 1; i < n.inputs.size(); ++i)
    parts.push_back(i - 1 == k ? gg : zeros_like(n.inputs[i], {.dtype = dtype(gg)}));
  G r(n.inputs.size());
  r[0] = make_node(Op::Concat, std::move(parts), attrs::Axis::make(axis), gg.dtype());
  return r;
}

}  // namespace

Tensor dot(const Tensor& x, const Tensor& y) {
  if (is_sparse(x) || is_sparse(y)) return ops::sparse_dot(x, y);
  ops::check_same_dtype("K::dot", x, y);
  if (x.dtype() == DType::bool_) throw TypeError("K::dot: not defined for bool tensors");
  if (x.ndim() < 2 || y.ndim() < 2)
    throw ValueError("K::dot: both operands need rank >= 2 (as tf.matmul), got " + x.shape().str() +
                     " and " + y.shape().str());
  if (x.ndim() == 2 && y.ndim() == 2) return matmul(x, y, false, false);
  const Shape& xs = x.shape();
  const Shape& ys = y.shape();
  const std::int64_t k = xs[xs.ndim() - 1];
  const std::int64_t ky = ys[ys.ndim() - 2];
  if (k >= 0 && ky >= 0 && k != ky)
    throw ValueError("K::dot: shapes " + xs.str() + " and " + ys.str() +
                     " are not aligned: " + std::to_string(k) + " != " + std::to_string(ky));
  if (!ys.is_fully_defined() || k < 0)
    throw ValueError("K::dot: for n-D operands the shape of y " + ys.str() +
                     " and the last dim of x " + xs.str() + " must be known");
  int x_unknown = 0;
  for (int i = 0; i < xs.ndim() - 1; ++i) x_unknown += xs[i] < 0;
  if (x_unknown > 1)
    throw ValueError("K::dot: x " + xs.str() + " may have at most one unknown dim");
  // Move y's contraction axis first: (k, rest...) -> (k, prod(rest)).
  std::vector<int> perm{ys.ndim() - 2};
  for (int i = 0; i < ys.ndim() - 2; ++i) perm.push_back(i);
  perm.push_back(ys.ndim() - 1);
  const Tensor y2 = reshape(permute_dimensions(y, perm), {k, -1});
  const Tensor x2 = reshape(x, {-1, k});
  const Tensor r = matmul(x2, y2, false, false);
  std::vector<std::int64_t> out;
  for (int i = 0; i < xs.ndim() - 1; ++i) out.push_back(xs[i] < 0 ? -1 : xs[i]);
  for (int i = 0; i < ys.ndim() - 2; ++i) out.push_back(ys[i]);
  out.push_back(ys[ys.ndim() - 1]);
  return reshape(r, out);
}

Tensor transpose(const Tensor& x) {
  std::vector<int> perm;
  for (int i = x.ndim() - 1; i >= 0; --i) perm.push_back(i);
  return permute_dimensions(x, perm);
}

Tensor permute_dimensions(const Tensor& x, const std::vector<int>& pattern) {
  if (static_cast<int>(pattern.size()) != x.ndim())
    throw ValueError("K::permute_dimensions: pattern of length " + std::to_string(pattern.size()) +
                     " for a tensor of shape " + x.shape().str());
  std::vector<bool> seen(pattern.size(), false);
  bool ident = true;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const int p = pattern[i];
    if (p < 0 || p >= x.ndim() || seen[static_cast<std::size_t>(p)])
      throw ValueError("K::permute_dimensions: pattern is not a permutation of 0.." +
                       std::to_string(x.ndim() - 1));
    seen[static_cast<std::size_t>(p)] = true;
    ident = ident && p == static_cast<int>(i);
  }
  if (ident) return x;
  return make_node(Op::Transpose, {x}, attrs::IntList::make({pattern.begin(), pattern.end()}),
                   x.dtype());
}

Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape) {
  int n_infer = 0;
  for (auto d : shape) {
    if (d == -1) ++n_infer;
    if (d < -1)
      throw ValueError("K::reshape: invalid target dim " + std::to_string(d) + " in " +
                       Shape(shape).str());
  }
  if (n_infer > 1)
    throw ValueError("K::reshape: can only infer one unknown dim (-1), got " + Shape(shape).str());
  return make_node(Op::Reshape, {x}, attrs::IntList::make(shape), x.dtype());
}
Tensor flatten(const Tensor& x) { return reshape(x, {-1}); }
Tensor batch_flatten(const Tensor& x) {
  if (x.ndim() < 1) throw ValueError("K::batch_flatten: x must have rank >= 1");
  return make_node(Op::Reshape, {x}, attrs::IntList::make({kCopyDim0, -1}), x.dtype());
}
Tensor expand_dims(const Tensor& x, int axis) {
  const int r = x.ndim();
  if (axis < -(r + 1) || axis > r)
    throw ValueError("K::expand_dims: axis " + std::to_string(axis) +
                     " out of range for a tensor of shape " + x.shape().str());
  return make_node(Op::ExpandAxes, {x}, attrs::IntList::make({axis < 0 ? axis + r + 1 : axis}),
                   x.dtype());
}
Tensor squeeze(const Tensor& x, int axis) {
  return make_node(Op::SqueezeAxes, {x},
                   attrs::IntList::make({normalize_axis(axis, x.ndim(), "K::squeeze")}), x.dtype());
}
Tensor concatenate(const std::vector<Tensor>& tensors, int axis) {
  if (tensors.empty()) throw ValueError("K::concatenate: needs at least one tensor");
  std::size_t n_sparse = 0;
  for (const auto& t : tensors) {
    ops::check_same_dtype("K::concatenate", tensors[0], t);
    n_sparse += is_sparse(t) ? 1 : 0;
  }
  if (n_sparse == tensors.size()) return ops::sparse_concatenate(tensors, axis);
  if (n_sparse > 0) {  // Keras: a mix is concatenated dense
    std::vector<Tensor> dense;
    for (const auto& t : tensors) dense.push_back(to_dense(t));
    return concatenate(dense, axis);
  }
  if (tensors[0].ndim() == 0) throw ValueError("K::concatenate: cannot concatenate scalars");
  const int a = normalize_axis(axis, tensors[0].ndim(), "K::concatenate");
  if (tensors.size() == 1) return tensors[0];
  return make_node(Op::Concat, tensors, attrs::Axis::make(a), tensors[0].dtype());
}

Tensor repeat_elements(const Tensor& x, int rep, int axis) {
  const char* fn = "K::repeat_elements";
  const int ax = normalize_axis(axis, x.ndim(), fn);
  if (rep < 0) throw ValueError(std::string(fn) + ": rep " + std::to_string(rep) + " is negative");
  if (rep == 1) return x;
  if (rep == 0) {  // an empty axis: no reshape, whatever the other dims
    std::vector<std::int64_t> size(static_cast<std::size_t>(x.ndim()), -1);
    size[static_cast<std::size_t>(ax)] = 0;
    return slice(x, std::vector<std::int64_t>(static_cast<std::size_t>(x.ndim()), 0), size);
  }
  // (..., n, 1, ...) concatenated rep times on the new axis, then merged back into axis.
  const Tensor e = expand_dims(x, ax + 1);
  const Tensor copies = concatenate(std::vector<Tensor>(static_cast<std::size_t>(rep), e), ax + 1);
  std::vector<std::int64_t> target;
  int unknown = 0;
  for (int d = 0; d < x.ndim(); ++d) {
    std::int64_t v = x.shape()[d];
    if (v >= 0 && d == ax && __builtin_mul_overflow(v, rep, &v))
      throw ValueError(std::string(fn) + ": " + std::to_string(x.shape()[d]) + " x rep " +
                       std::to_string(rep) + " elements overflow");
    if (v < 0 && d == 0 && ax != 0) {
      v = kCopyDim0;
    } else if (v < 0) {
      v = -1;
      ++unknown;
    }
    target.push_back(v);
  }
  if (unknown > 1)
    throw ValueError(std::string(fn) + ": x of shape " + x.shape().str() +
                     " has more than one unknown dim besides the batch");
  return make_node(Op::Reshape, {copies}, attrs::IntList::make(target), x.dtype());
}

Tensor batch_dot(const Tensor& x, const Tensor& y, std::vector<int> axes) {
  const char* fn = "K::batch_dot";
  const int rx = x.ndim(), ry = y.ndim();
  if (rx < 2 || ry < 2)
    throw ValueError(std::string(fn) + ": Cannot do batch_dot on inputs with rank < 2. Received " +
                     "inputs with shapes " + x.shape().str() + " and " + y.shape().str());
  ops::check_same_dtype(fn, x, y);
  if (x.shape()[0] >= 0 && y.shape()[0] >= 0 && x.shape()[0] != y.shape()[0])
    throw ValueError(std::string(fn) + ": the batch sizes differ: " + x.shape().str() + " and " +
                     y.shape().str());
  if (axes.empty()) axes = {rx - 1, ry == 2 ? ry - 1 : ry - 2};
  if (axes.size() == 1) axes.push_back(axes[0]);
  if (axes.size() != 2)
    throw ValueError(std::string(fn) + ": axes takes one axis or a pair, got " +
                     std::to_string(axes.size()) +
                     " (multiple target dimensions are not supported)");
  const int a0 = axes[0] < 0 ? axes[0] + rx : axes[0], a1 = axes[1] < 0 ? axes[1] + ry : axes[1];
  if (a0 == 0 || a1 == 0)
    throw ValueError(std::string(fn) + ": Can not perform batch_dot over axis 0.");
  if (a0 < 0 || a0 >= rx || a1 < 0 || a1 >= ry)
    throw ValueError(std::string(fn) + ": axes (" + std::to_string(axes[0]) + ", " +
                     std::to_string(axes[1]) + ") are out of range for shapes " + x.shape().str() +
                     " and " + y.shape().str());
  const std::int64_t kx = x.shape()[a0], ky = y.shape()[a1];
  if (kx >= 0 && ky >= 0 && kx != ky)
    throw ValueError(std::string(fn) + ": cannot contract axis " + std::to_string(a0) + " of " +
                     x.shape().str() + " with axis " + std::to_string(a1) + " of " +
                     y.shape().str() + " (sizes " + std::to_string(kx) + " and " +
                     std::to_string(ky) + ")");
  // x -> (B, X..., K, 1 for each of Y), y -> (B, 1 for each of X, K, Y...); multiply, sum K.
  std::vector<int> px{0}, py{0, a1};
  for (int d = 1; d < rx; ++d)
    if (d != a0) px.push_back(d);
  px.push_back(a0);
  for (int d = 1; d < ry; ++d)
    if (d != a1) py.push_back(d);
  Tensor xe = permute_dimensions(x, px), ye = permute_dimensions(y, py);
  const int nx = rx - 2, ny = ry - 2;
  for (int i = 0; i < ny; ++i) xe = expand_dims(xe, -1);
  for (int i = 0; i < nx; ++i) ye = expand_dims(ye, 1);
  Tensor r = sum(xe * ye, 1 + nx);
  if (r.ndim() == 1) r = expand_dims(r, 1);
  return r;
}
Tensor batch_dot(const Tensor& x, const Tensor& y, int axis) {
  return batch_dot(x, y, std::vector<int>{axis});
}

Tensor slice(const Tensor& x, const std::vector<std::int64_t>& start,
             const std::vector<std::int64_t>& size) {
  if (static_cast<int>(start.size()) != x.ndim() || static_cast<int>(size.size()) != x.ndim())
    throw ValueError("K::slice: start and size need one entry per axis of " + x.shape().str() +
                     " (got " + std::to_string(start.size()) + " and " +
                     std::to_string(size.size()) + ")");
  return make_node(Op::Slice, {x}, attrs::Slice::make(start, size), x.dtype());
}

Tensor stack(const std::vector<Tensor>& tensors, int axis) {
  if (tensors.empty()) throw ValueError("K::stack: needs at least one tensor");
  const int r = tensors[0].ndim() + 1;
  if (axis < -r || axis >= r)
    throw ValueError("K::stack: axis " + std::to_string(axis) + " out of range for rank " +
                     std::to_string(r));
  if (axis < 0) axis += r;
  std::vector<Tensor> parts;
  for (const auto& t : tensors) {
    if (t.shape() != tensors[0].shape())
      throw ValueError("K::stack: shapes differ: " + tensors[0].shape().str() + " and " +
                       t.shape().str());
    parts.push_back(expand_dims(t, axis));
  }
  return parts.size() == 1 ? parts[0] : concatenate(parts, axis);
}

}  // namespace ktape::backend

namespace ktape::ops {

void register_layout_ops() {
  using namespace ktape::backend;
  define_op(Op::MatMul, {.shape = &matmul_rule,
                         .grad = &matmul_grad,
                         .prepare = &matmul_prepare,
                         .pair_input = 1,
                         .pair = &matmul_pair,
                         .costly = true,
                         .stack_map = &matmul_stack_map,
                         .stack_sum = &matmul_stack_sum});
  define_op(Op::Transpose, {.shape = &transpose_rule, .grad = &transpose_grad});
  // Reshapes share their input's buffer: no kernel runs.
  define_op(Op::Reshape, {.shape = &reshape_rule, .grad = &reshape_grad, .alias_input = 0});
  define_op(Op::ReshapeLike,
            {.shape = &reshape_like_rule, .grad = &reshape_like_grad, .alias_input = 0});
  define_op(Op::ExpandAxes, {.shape = &expand_rule, .grad = &expand_grad, .alias_input = 0});
  define_op(Op::SqueezeAxes, {.shape = &squeeze_rule, .grad = &squeeze_grad, .alias_input = 0});
  define_op(Op::Concat,
            {.shape = &concat_rule, .grad = &concat_grad, .concat_axis = [](const Node& n) {
               return attrs::Axis::of(n.attrs).axis;
             }});
  define_op(Op::ConcatPart, {.shape = &concat_part_rule, .grad = &concat_part_grad});
  define_op(Op::Slice, {.shape = &slice_rule,
                        .grad = &slice_grad,
                        .prepare = &slice_prepare,
                        .block_of = &slice_block});
  define_op(Op::SlicePad,
            {.shape = &slice_pad_rule, .grad = &slice_pad_grad, .shape_only = &input1_shape_only});
}

}  // namespace ktape::ops
