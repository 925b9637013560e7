#include "ops/sparse.hpp"

#include <string>

#include "engine/errors.hpp"
#include "ops/control.hpp"
#include "ops/core.hpp"
#include "ops/elementwise.hpp"
#include "ops/indexing.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/layout.hpp"
#include "ops/op_util.hpp"
#include "ops/reductions.hpp"

namespace ktape::ops {

namespace {

using G = std::vector<Tensor>;

// The dense shape a carrier (dense shape..., 0) carries.
Shape carried(const Shape& carrier) {
  return Shape(std::vector<std::int64_t>(carrier.begin(), carrier.end() - 1));
}

bool compatible(std::int64_t a, std::int64_t b) { return a < 0 || b < 0 || a == b; }

// SparseTensor, SparseToDense(indices (nnz, rank), values (nnz,), carrier (dense..., 0)).
Shape parts_rule(const Node& n, const std::vector<Shape>& in) {
  const Shape& c = in[2];
  const bool ok = in[0].ndim() == 2 && in[1].ndim() == 1 && c.ndim() >= 1 && c[c.ndim() - 1] == 0 &&
                  compatible(in[0][1], c.ndim() - 1) && compatible(in[0][0], in[1][0]);
  if (!ok)
    throw ValueError(std::string(op_name(n.op)) + ": indices " + in[0].str() + ", values " +
                     in[1].str() + " and carrier " + c.str() +
                     " are not the parts of a sparse tensor");
  return carried(c);
}

// SparseDenseMatMul(indices, values, carrier, y) attrs {adjoint}: x y, or x^T y when adjoint.
Shape matmul_rule(const Node& n, const std::vector<Shape>& in) {
  const Shape x = parts_rule(n, in);
  const bool adjoint = n.attrs.ints[0] != 0;
  const std::int64_t rows = adjoint ? x[1] : x[0], inner = adjoint ? x[0] : x[1];
  if (!compatible(inner, in[3][0]))
    throw ValueError("K::dot: shapes " + x.str() + " (sparse) and " + in[3].str() +
                     " are not aligned: " + std::to_string(inner) +
                     " != " + std::to_string(in[3][0]));
  return Shape{rows, in[3][1]};
}

// SparseGather(indices, x): x at each entry's position, (nnz,).
Shape gather_rule(const Node&, const std::vector<Shape>& in) {
  if (in[0].ndim() != 2 || !compatible(in[0][1], in[1].ndim()))
    throw ValueError("SparseGather: indices " + in[0].str() + " for a tensor of shape " +
                     in[1].str());
  return Shape{in[0][0]};
}

Tensor carrier_of(const Tensor& x) { return make_node(Op::ShapeCarrier, {x}, {}, x.dtype()); }

// The values of a sparse tensor may be computed (ctc_label_dense_to_sparse of float labels, a
// concatenation of such): their gradient is the incoming one at the entries' positions.
G parts_grad(const Node& n, const Tensor&, const Tensor& g) {
  return {Tensor(), make_node(Op::SparseGather, {n.inputs[0], g}, {}, g.dtype()), Tensor()};
}

G gather_grad(const Node& n, const Tensor&, const Tensor& g) {
  const Tensor& x = n.inputs[1];
  return {Tensor(), make_node(Op::SparseToDense, {n.inputs[0], g, carrier_of(x)}, {}, g.dtype())};
}

// z = x y (or x^T y): dy = x^T g (x g); d values[k] = g[row k] . y[column k] (rows and columns
// swapped for x^T), as gathers, so it differentiates again.
G matmul_grad(const Node& n, const Tensor&, const Tensor& g) {
  const bool adjoint = n.attrs.ints[0] != 0;
  Attrs a = n.attrs;
  a.ints[0] = adjoint ? 0 : 1;
  const Tensor& idx = n.inputs[0];
  const Tensor& y = n.inputs[3];
  const Tensor gy =
      make_node(Op::SparseDenseMatMul, {idx, n.inputs[1], n.inputs[2], g}, a, g.dtype());
  // Padding entries (row -1) read row 0 instead and get a zero gradient.
  const Tensor rows = backend::squeeze(backend::slice(idx, {0, 0}, {-1, 1}), 1);
  const Tensor valid = backend::greater_equal(rows, 0.0);
  const Tensor zero = backend::zeros_like(rows);
  const Tensor r = backend::switch_(valid, rows, zero);
  const Tensor c =
      backend::switch_(valid, backend::squeeze(backend::slice(idx, {0, 1}, {-1, 1}), 1), zero);
  const Tensor gv =
      backend::sum(backend::gather(g, adjoint ? c : r) * backend::gather(y, adjoint ? r : c), 1);
  return {Tensor(), backend::switch_(valid, gv, backend::zeros_like(gv)), Tensor(), gy};
}

// SparseConcatIndices(indices_0..n-1, carrier_0..n-1) attrs {axis}.
Shape concat_indices_rule(const Node&, const std::vector<Shape>& in) {
  const std::size_t parts = in.size() / 2;
  std::int64_t total = 0;
  for (std::size_t p = 0; p < parts; ++p) total = total < 0 || in[p][0] < 0 ? -1 : total + in[p][0];
  return Shape{total, in[parts].ndim() - 1};
}

Shape dense_indices_rule(const Node&, const std::vector<Shape>& in) {
  return Shape{in[0].num_elements(), in[0].ndim()};
}

Shape carrier_rule(const Node&, const std::vector<Shape>& in) {
  std::vector<std::int64_t> d(in[0].begin(), in[0].end());
  d.push_back(0);
  return Shape(d);
}

const std::vector<Tensor>& parts(const Tensor& x) { return x.node().inputs; }

}  // namespace

Tensor sparse_from_parts(const Tensor& indices, const Tensor& values, const Tensor& carrier) {
  return make_node(Op::SparseTensor, {indices, values, carrier}, {}, values.dtype());
}

Tensor sparse_placeholder(const Shape& shape, DType dtype, const std::string& name) {
  if (shape.ndim() < 1 || shape.ndim() >= kMaxRank)
    throw ValueError("K::placeholder: a sparse placeholder needs rank 1 to " +
                     std::to_string(kMaxRank - 1) + ", got shape " + shape.str());
  std::vector<std::int64_t> c(shape.begin(), shape.end());
  c.push_back(0);
  const Tensor indices =
      make_source(Op::Placeholder, Shape{None, shape.ndim()}, DType::int64, name + "/indices");
  const Tensor values = make_source(Op::Placeholder, Shape{None}, dtype, name + "/values");
  const Tensor carrier = make_source(Op::Placeholder, Shape(c), dtype, name + "/dense_shape");
  return make_node(Op::SparseTensor, {indices, values, carrier}, {}, dtype, name);
}

// Keras: tf.sparse_tensor_dense_matmul for a sparse x (rank 2, as TF requires).
Tensor sparse_dot(const Tensor& x, const Tensor& y) {
  const char* fn = "K::dot";
  if (backend::is_sparse(y))
    throw TypeError(std::string(fn) + ": y " + y.shape().str() +
                    " is sparse; only x may be (tf.sparse_tensor_dense_matmul)");
  check_same_dtype(fn, x, y);
  if (x.dtype() == DType::bool_)
    throw TypeError(std::string(fn) + ": not defined for bool tensors");
  if (x.ndim() != 2 || y.ndim() != 2)
    throw ValueError(std::string(fn) + ": a sparse x needs x and y of rank 2, got " +
                     x.shape().str() + " and " + y.shape().str());
  const auto& p = parts(x);
  return make_node(Op::SparseDenseMatMul, {p[0], p[1], p[2], y}, attrs::IntList::make({0}),
                   y.dtype());
}

// Keras: tf.sparse_concat when every tensor is sparse (the result is sparse).
Tensor sparse_concatenate(const std::vector<Tensor>& tensors, int axis) {
  std::vector<Tensor> idx, vals, carriers;
  for (const auto& t : tensors) {
    idx.push_back(parts(t)[0]);
    vals.push_back(parts(t)[1]);
    carriers.push_back(parts(t)[2]);
  }
  const int rank = tensors[0].ndim();
  if (axis < -rank || axis >= rank)
    throw ValueError("K::concatenate: axis " + std::to_string(axis) + " is out of range for rank " +
                     std::to_string(rank));
  const int a = axis < 0 ? axis + rank : axis;
  std::vector<Tensor> ins = idx;
  ins.insert(ins.end(), carriers.begin(), carriers.end());
  // The carriers' concatenation checks the other dims and carries the result's shape.
  const Tensor carrier = backend::concatenate(carriers, a);
  const Tensor indices =
      make_node(Op::SparseConcatIndices, std::move(ins), attrs::IntList::make({a}), DType::int64);
  return sparse_from_parts(indices, backend::concatenate(vals, 0), carrier);
}

void register_sparse_ops() {
  define_op(Op::SparseTensor,
            {.shape = &parts_rule, .grad = &parts_grad, .dispatch_input = 1, .may_throw = true});
  define_op(Op::SparseToDense,
            {.shape = &parts_rule, .grad = &parts_grad, .dispatch_input = 1, .may_throw = true});
  define_op(Op::SparseGather,
            {.shape = &gather_rule, .grad = &gather_grad, .dispatch_input = 1, .may_throw = true});
  define_op(Op::SparseDenseMatMul,
            {.shape = &matmul_rule, .grad = &matmul_grad, .dispatch_input = 3, .may_throw = true});
  define_op(Op::SparseConcatIndices, {.shape = &concat_indices_rule, .dispatch_input = -1});
  define_op(Op::DenseIndices, {.shape = &dense_indices_rule, .dispatch_input = -1});
  define_op(Op::ShapeCarrier, {.shape = &carrier_rule, .shape_only = &input0_shape_only});
}

}  // namespace ktape::ops

namespace ktape::backend {

Tensor to_dense(const Tensor& x) {
  if (!is_sparse(x)) return x;
  const auto& p = x.node().inputs;
  return make_node(Op::SparseToDense, {p[0], p[1], p[2]}, {}, x.dtype());
}

}  // namespace ktape::backend
