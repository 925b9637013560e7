// Sparse rows (ops/sparse.hpp): sparse tensors made in the graph from dense inputs by
// ctc_label_dense_to_sparse (float labels, so the values are differentiable), then densified,
// multiplied and concatenated. Provenance: hand calculations written next to the values, and
// plain loops over the masked inputs (below). Fed sparse placeholders are tested in
// tests/test_sparse.cpp.
#include <functional>

#include "op_rows/op_row.hpp"

namespace ktape::op_rows {

namespace {

// x with x[b, t] = 0 for t >= len[b] (the dense value of ctc_label_dense_to_sparse).
naive::Arr masked(const naive::Arr& x, const std::vector<std::int64_t>& len) {
  naive::Arr r = x;
  const std::int64_t cols = x.shape[1];
  for (std::int64_t b = 0; b < x.shape[0]; ++b)
    for (std::int64_t t = 0; t < cols; ++t)
      if (t >= len[static_cast<std::size_t>(b)]) r[b * cols + t] = 0;
  return r;
}

Tensor sparse_of(const Tensor& x, const std::vector<double>& len) {
  return K::ctc_label_dense_to_sparse(x,
                                      cst(len, {static_cast<std::int64_t>(len.size())}, "int32"));
}

}  // namespace

std::vector<OpRow> sparse_rows() {
  Rows t("sparse");
  Gen g(20261125);

  // [[1, 2, 3], [4, 5, 6]] with lengths [2, 3] -> [[1, 2, 0], [4, 5, 6]] by hand. The sparse
  // tensor itself as the output comes dense.
  t.values("sparse_tensor_output_by_hand",
           [](const V& v) {
             return sparse_of(v[0], {2, 3});
           },
           {f64({1, 2, 3, 4, 5, 6}, {2, 3})})
      .expect({1, 2, 0, 4, 5, 6}, {2, 3})
      .exact()
      .error("labels_rank", Err::Value,
             "K::ctc_label_dense_to_sparse: labels must be (samples, max_label_length)",
             [] { (void)K::ctc_label_dense_to_sparse(cst({1}, {1}), cst({1}, {1}, "int32")); })
      .error("lengths_dtype", Err::Type,
             "K::ctc_label_dense_to_sparse: label_lengths must be int32 or int64",
             [] {
               (void)K::ctc_label_dense_to_sparse(cst({1}, {1, 1}), cst({1}, {1}));
             })
      .error("samples", Err::Value, "K::ctc_label_dense_to_sparse: label_lengths has 2 samples",
             [] {
               (void)K::ctc_label_dense_to_sparse(cst({1}, {1, 1}), cst({1, 1}, {2}, "int32"));
             })
      .error("not_an_op_input", Err::Type, "is a sparse tensor", [] {
        (void)K::exp(K::ctc_label_dense_to_sparse(cst({1}, {1, 1}), cst({1}, {1}, "int32")));
      });

  // to_dense: the gradient reaches the float labels through the sparse values (1 inside each
  // length, 0 past it).
  t.op("sparse_to_dense",
       [](const V& v) {
         return K::to_dense(sparse_of(v[0], {2, 0, 4}));
       },
       {g.normal({3, 4})})
      .formula([](const In& in) {
        return masked(in[0], {2, 0, 4});
      })
      .second_order();

  // dot(sparse, dense): gradients to the dense operand and (through the values) to the labels.
  t.op("sparse_dot",
       [](const V& v) {
         return K::dot(sparse_of(v[0], {3, 1, 4}), v[1]);
       },
       {g.normal({3, 4}), g.normal({4, 5})})
      .formula([](const In& in) {
        const naive::Arr x = masked(in[0], {3, 1, 4});
        const naive::Arr y = in[1];
        naive::Arr r = naive::full({3, 5}, 0.0);
        for (std::int64_t i = 0; i < 3; ++i)
          for (std::int64_t j = 0; j < 5; ++j)
            for (std::int64_t k = 0; k < 4; ++k) r[i * 5 + j] += x[i * 4 + k] * y[k * 5 + j];
        return r;
      })
      .second_order()
      .error("sparse_y", Err::Type, "K::dot: y (2, 2) is sparse; only x may be",
             [] {
               (void)K::dot(cst({1, 2, 3, 4}, {2, 2}),
                            K::ctc_label_dense_to_sparse(cst({1, 2, 3, 4}, {2, 2}),
                                                         cst({2, 2}, {2}, "int32")));
             })
      .error("rank", Err::Value, "K::dot: a sparse x needs x and y of rank 2",
             [] {
               (void)K::dot(
                   K::ctc_label_dense_to_sparse(cst({1, 2}, {1, 2}), cst({2}, {1}, "int32")),
                   cst({1, 2, 3, 4}, {2, 1, 2}));
             })
      .error("aligned", Err::Value, "not aligned: 2 != 3", [] {
        (void)K::dot(K::ctc_label_dense_to_sparse(cst({1, 2}, {1, 2}), cst({2}, {1}, "int32")),
                     cst({1, 2, 3}, {3, 1}));
      });

  // concatenate of sparse tensors (sparse) on axis 1 and on axis 0, densified.
  t.op("sparse_concatenate_axis1",
       [](const V& v) {
         return K::to_dense(K::concatenate({sparse_of(v[0], {1, 3}), sparse_of(v[1], {2, 0})}, 1));
       },
       {g.normal({2, 3}), g.normal({2, 2})})
      .formula([](const In& in) {
        const naive::Arr a = masked(in[0], {1, 3}), b = masked(in[1], {2, 0});
        naive::Arr r = naive::full({2, 5}, 0.0);
        for (std::int64_t i = 0; i < 2; ++i) {
          for (std::int64_t j = 0; j < 3; ++j) r[i * 5 + j] = a[i * 3 + j];
          for (std::int64_t j = 0; j < 2; ++j) r[i * 5 + 3 + j] = b[i * 2 + j];
        }
        return r;
      })
      .error("dims", Err::Value, "K::concatenate", [] {
        (void)K::concatenate(
            {K::ctc_label_dense_to_sparse(cst({1, 2}, {1, 2}), cst({2}, {1}, "int32")),
             K::ctc_label_dense_to_sparse(cst({1, 2, 3}, {1, 3}), cst({2}, {1}, "int32"))},
            0);
      });
  t.op("sparse_concatenate_axis0",
       [](const V& v) {
         return K::to_dense(K::concatenate({sparse_of(v[0], {2, 1}), sparse_of(v[1], {3})}, 0));
       },
       {g.normal({2, 3}), g.normal({1, 3})})
      .formula([](const In& in) {
        const naive::Arr a = masked(in[0], {2, 1}), b = masked(in[1], {3});
        std::vector<double> r = a.v;
        r.insert(r.end(), b.v.begin(), b.v.end());
        return naive::Arr({3, 3}, r);
      });
  // A first-order gradient as the output, so that gradcheck differentiates the gradient rules
  // themselves: d/dx sum(to_dense(sp(x)) * w) = w inside the lengths (SparseGather; its own
  // gradient is SparseToDense), and d/dx sum(dot(sp(x), y) * c) = c y^T inside the lengths (the
  // gathers of the values gradient).
  t.op("sparse_values_gradient",
       [](const V& v) {
         const Tensor x = v[0] * 1.0;
         return K::gradients(K::sum(K::to_dense(sparse_of(x, {2, 0, 4})) * v[1]), {x})[0];
       },
       {g.normal({3, 4}), g.normal({3, 4})})
      .formula([](const In& in) {
        return masked(in[1], {2, 0, 4});
      });
  t.op("sparse_dot_values_gradient",
       [](const V& v) {
         const Tensor x = v[0] * 1.0;
         return K::gradients(K::sum(K::dot(sparse_of(x, {3, 1, 4}), v[1]) * v[2]), {x})[0];
       },
       {g.normal({3, 4}), g.normal({4, 5}), g.normal({3, 5})})
      .formula([](const In& in) {
        const naive::Arr y = in[1], c = in[2];
        naive::Arr r = naive::full({3, 4}, 0.0);
        for (std::int64_t i = 0; i < 3; ++i)
          for (std::int64_t k = 0; k < 4; ++k)
            for (std::int64_t j = 0; j < 5; ++j) r[i * 4 + k] += c[i * 5 + j] * y[k * 5 + j];
        return masked(r, {3, 1, 4});
      });
  return t.take();
}

}  // namespace ktape::op_rows
