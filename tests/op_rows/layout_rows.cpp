// Layout rows: dot, transpose, permute_dimensions, reshape, flatten, batch_flatten, expand_dims,
// squeeze, concatenate, slice, stack (ops/layout.hpp). Provenance of expected values: "by hand" =
// written out next to the values (or a loop over the hand formula written next to it); "formula"
// = the naive float64 reference (op_rows/naive.hpp) applied to the row's inputs.
#include <numeric>

#include "op_rows/op_row.hpp"

namespace ktape::op_rows {

namespace {

// 0, 1, 2, ... in shape s.
NDArray iota(const Shape& s) {
  std::vector<double> v(static_cast<std::size_t>(s.num_elements()));
  std::iota(v.begin(), v.end(), 0.0);
  return f64(v, s);
}

}  // namespace

std::vector<OpRow> layout_rows() {
  Rows t("layout");
  Gen g(20240614);
  const Shape s34{3, 4};
  const Shape s234{2, 3, 4};

  // ---- dot: random inputs -----------------------------------------------------------------------
  t.op("dot_2d", [](const V& x) { return K::dot(x[0], x[1]); }, {g.normal(s34), g.normal({4, 2})})
      .formula([](const In& in) { return naive::dot(in[0], in[1]); });
  // n-D dot needs y's shape fully known (documented), so no None dims for these.
  t.op("dot_nd_right", [](const V& x) { return K::dot(x[0], x[1]); },
       {g.normal({4, 2}), g.normal({5, 2, 3})})
      .ref_gradcheck()
      .no_unknown_dims()
      .formula([](const In& in) { return naive::dot(in[0], in[1]); });
  t.op("dot_nd_left", [](const V& x) { return K::dot(x[0], x[1]); },
       {g.normal({2, 3, 4}), g.normal({4, 2})})
      .no_unknown_dims()
      .formula([](const In& in) { return naive::dot(in[0], in[1]); });
  t.op("dot_nd_both", [](const V& x) { return K::dot(x[0], x[1]); },
       {g.normal({2, 2, 3}), g.normal({2, 3, 2})})
      .no_unknown_dims()
      .formula([](const In& in) { return naive::dot(in[0], in[1]); });
  // Transposed 2-D operands, every combination.
  t.op("dot_transposed_x", [](const V& x) { return K::dot(K::transpose(x[0]), x[1]); },
       {g.normal({4, 3}), g.normal({4, 2})})
      .second_order()
      .formula([](const In& in) { return naive::dot(naive::transpose(in[0]), in[1]); });
  t.op("dot_transposed_y", [](const V& x) { return K::dot(x[0], K::transpose(x[1])); },
       {g.normal(s34), g.normal({2, 4})})
      .second_order()
      .formula([](const In& in) { return naive::dot(in[0], naive::transpose(in[1])); });
  t.op("dot_transposed_both",
       [](const V& x) { return K::dot(K::transpose(x[0]), K::transpose(x[1])); },
       {g.normal({4, 3}), g.normal({2, 4})})
      .second_order()
      .formula([](const In& in) {
        return naive::dot(naive::transpose(in[0]), naive::transpose(in[1]));
      });
  t.op("dot_self_transpose", [](const V& x) { return K::dot(x[0], K::transpose(x[0])); },
       {g.normal(s34)})
      .formula([](const In& in) { return naive::dot(in[0], naive::transpose(in[0])); });
  {
    const NDArray m = g.normal({4, 2});  // a constant matrix
    t.op("dot_constant_squared",
         [m](const V& x) { return K::square(K::dot(x[0], const_like(x[0], m))); }, {g.normal(s34)})
        .second_order()
        .formula([m](const In& in) { return naive::sq(naive::dot(in[0], m)); });
    // (3,2,2) . (2,4) -> (3,2,4)
    t.op("dot_nd_squared",
         [m](const V& x) {
           return K::square(
               K::dot(K::reshape(x[0], {3, 2, 2}), K::reshape(const_like(x[0], m), {2, 4})));
         },
         {g.normal(s34)})
        .second_order()
        .formula([m](const In& in) {
          return naive::sq(naive::dot(naive::reshape(in[0], {3, 2, 2}), naive::reshape(m, {2, 4})));
        });
  }
  // exercises the transposed MatMul variants of the gradient graph
  t.op("dot_x_xT_squared", [](const V& x) { return K::square(K::dot(x[0], K::transpose(x[0]))); },
       {g.normal(s34)})
      .second_order()
      .formula([](const In& in) { return naive::sq(naive::dot(in[0], naive::transpose(in[0]))); });

  // ---- dot by hand ------------------------------------------------------------------------------
  // [[1,2],[3,4]] . [[5,6],[7,8]] = [[1*5+2*7, 1*6+2*8],[3*5+4*7, 3*6+4*8]] = [[19,22],[43,50]]
  t.values("dot_2d_by_hand", [](const V& v) { return K::dot(v[0], v[1]); },
           {f64({1, 2, 3, 4}, {2, 2}), f64({5, 6, 7, 8}, {2, 2})})
      .expect({19, 22, 43, 50}, {2, 2})
      .error("misaligned_2d", Err::Value,
             "K::dot: matmul of (2, 3) and (2, 3): not aligned: 3 != 2",
             [] {
               (void)K::dot(cst({1, 2, 3, 4, 5, 6}, {2, 3}), cst({1, 2, 3, 4, 5, 6}, {2, 3}));
             })
      .error("misaligned_nd", Err::Value,
             "K::dot: shapes (4, 3) and (5, 2, 3) are not aligned: 3 != 2",
             [] {
               (void)K::dot(cst(std::vector<double>(12, 1.0), {4, 3}),
                            cst(std::vector<double>(30, 1.0), {5, 2, 3}));
             })
      .error("rank_1", Err::Value, "K::dot: both operands need rank >= 2", [] {
        (void)K::dot(cst({1, 2}, {2}), cst({1, 2}, {2, 1}));
      });
  // (2,3).(3,1): [[1,2,3],[4,5,6]] . [[1],[0],[-1]] = [[-2],[-2]]
  t.values("dot_column_by_hand", [](const V& v) { return K::dot(v[0], v[1]); },
           {f64({1, 2, 3, 4, 5, 6}, {2, 3}), f64({1, 0, -1}, {3, 1})})
      .expect({-2, -2}, {2, 1})
      .error("bool", Err::Type, "K::dot: not defined for bool tensors",
             [] {
               (void)K::dot(cst({1, 0}, {1, 2}, "bool"), cst({1, 0}, {2, 1}, "bool"));
             })
      .error("mixed_dtypes", Err::Type, "K::dot: operands have different dtypes", [] {
        (void)K::dot(cst({1, 0}, {1, 2}), cst({1, 0}, {2, 1}, "float64"));
      });
  {
    // x (4,2): x[i][k] = 2i + k; y (5,2,3): y[b][k][n] = 6b + 3k + n.
    // np.dot: out[i][b][n] = sum_k x[i][k] * y[b][k][n], shape (4,5,3).
    std::vector<double> want;
    for (int i = 0; i < 4; ++i)
      for (int b = 0; b < 5; ++b)
        for (int n = 0; n < 3; ++n)
          want.push_back((2 * i) * (6 * b + n) + (2 * i + 1) * (6 * b + 3 + n));
    // Spot values by hand: out[0][0][0] = 0*0 + 1*3 = 3; out[1][2][1] = 2*13 + 3*16 = 74;
    // out[3][4][2] = 6*26 + 7*29 = 359.
    t.values("dot_nd_theano_semantics", [](const V& v) { return K::dot(v[0], v[1]); },
             {iota({4, 2}), iota({5, 2, 3})})
        .expect(want, {4, 5, 3})
        .spot(0, 3, 0)
        .spot((1 * 5 + 2) * 3 + 1, 74, 0)
        .spot((3 * 5 + 4) * 3 + 2, 359, 0);
  }
  // x (2,2,2) . y (2,3): contracts x's last axis; y = [[1,0,1],[0,1,1]]
  // x rows: [1,2],[3,4],[5,6],[7,8] -> [a, b, a+b]
  t.values("dot_nd_left_by_hand", [](const V& v) { return K::dot(v[0], v[1]); },
           {f64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}), f64({1, 0, 1, 0, 1, 1}, {2, 3})})
      .expect({1, 2, 3, 3, 4, 7, 5, 6, 11, 7, 8, 15}, {2, 2, 3});

  // ---- transpose, permute, reshape: random inputs -----------------------------------------------
  t.op("transpose", [](const V& x) { return K::transpose(x[0]); }, {g.normal(s34)})
      .formula([](const In& in) { return naive::transpose(in[0]); });
  t.op("transpose_3d", [](const V& x) { return K::transpose(x[0]); }, {g.normal(s234)})
      .formula([](const In& in) { return naive::transpose(in[0]); });
  t.op("permute_dimensions",
       [](const V& x) {
         return K::permute_dimensions(x[0], {2, 0, 1});
       },
       {g.normal(s234)})
      .formula([](const In& in) {
        return naive::transpose(in[0], {2, 0, 1});
      });
  t.op("reshape",
       [](const V& x) {
         return K::reshape(x[0], {2, -1, 3});
       },
       {g.normal(s34)})
      .formula([](const In& in) {
        return naive::reshape(in[0], {2, -1, 3});
      });
  t.op("flatten", [](const V& x) { return K::flatten(x[0]); }, {g.normal(s234)})
      .formula([](const In& in) { return naive::reshape(in[0], {-1}); });
  t.op("batch_flatten", [](const V& x) { return K::batch_flatten(x[0]); }, {g.normal(s234)})
      .none_batch()
      .formula([](const In& in) {
        return naive::reshape(in[0], {in[0].shape()[0], -1});
      });
  t.op("expand_dims", [](const V& x) { return K::expand_dims(x[0], 1); }, {g.normal(s34)})
      .formula([](const In& in) { return naive::expand(in[0], 1); });
  t.op("expand_dims_last", [](const V& x) { return K::expand_dims(x[0]); }, {g.normal(s34)})
      .formula([](const In& in) { return naive::expand(in[0], -1); });
  t.op("squeeze", [](const V& x) { return K::squeeze(x[0], 1); }, {g.normal({3, 1, 4})})
      .formula([](const In& in) {
        return naive::reshape(in[0], {3, 4});
      });
  {
    const NDArray w = g.normal(s34);
    t.op("layout_chain",
         [w](const V& x) {
           const Tensor c = K::concatenate({x[0], K::exp(x[0])}, 0);                // (6,4)
           const Tensor r = K::reshape(K::permute_dimensions(c, {1, 0}), {3, -1});  // (3,8)
           return K::square(K::batch_flatten(K::expand_dims(r, 1))) *
                  K::sum(K::squeeze(K::expand_dims(x[0] * const_like(x[0], w), 1), 1));
         },
         {g.uniform(s34, -1, 1)})
        .second_order()
        .formula([w](const In& in) {
          const naive::Arr c = naive::concat({in[0], naive::exp(in[0])}, 0);
          const naive::Arr r = naive::reshape(naive::transpose(c, {1, 0}), {3, -1});
          return naive::mul(naive::sq(r), naive::sum(naive::mul(in[0], w)));
        });
  }

  // ---- transpose, permute, reshape by hand ------------------------------------------------------
  // [[1,2,3],[4,5,6]]^T = [[1,4],[2,5],[3,6]]
  t.values("transpose_by_hand", [](const V& v) { return K::transpose(v[0]); },
           {f64({1, 2, 3, 4, 5, 6}, {2, 3})})
      .expect({1, 4, 2, 5, 3, 6}, {3, 2});
  {
    // x (2,3,4) with x[i][j][k] = 12i + 4j + k; pattern (2,0,1): out[k][i][j] = x[i][j][k].
    std::vector<double> want;
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j) want.push_back(12 * i + 4 * j + k);
    t.values("permute_dimensions_by_hand",
             [](const V& v) {
               return K::permute_dimensions(v[0], {2, 0, 1});
             },
             {iota({2, 3, 4})})
        .expect(want, {4, 2, 3})
        .spot((3 * 2 + 1) * 3 + 2, 23, 0)  // out[3][1][2] = x[1][2][3] = 12 + 8 + 3
        .error("repeated_axis", Err::Value,
               "K::permute_dimensions: pattern is not a permutation of 0..2",
               [] {
                 (void)K::permute_dimensions(cst(std::vector<double>(24, 0), {2, 3, 4}), {0, 0, 1});
               })
        .error("too_short", Err::Value,
               "K::permute_dimensions: pattern of length 2 for a tensor of shape (2, 3, 4)",
               [] {
                 (void)K::permute_dimensions(cst(std::vector<double>(24, 0), {2, 3, 4}), {0, 1});
               })
        .error("axis_out_of_range", Err::Value,
               "K::permute_dimensions: pattern is not a permutation of 0..2", [] {
                 (void)K::permute_dimensions(cst(std::vector<double>(24, 0), {2, 3, 4}), {0, 1, 3});
               });
  }
  {
    const In x = {f64({1, 2, 3, 4, 5, 6}, {2, 3})};
    t.values(
         "reshape_by_hand",
         [](const V& v) {
           return K::reshape(v[0], {3, -1});
         },
         x)
        .expect({1, 2, 3, 4, 5, 6}, {3, 2})
        .error("not_divisible", Err::Value,
               "K::reshape: cannot reshape a tensor of shape (2, 3) (6 elements) into (4, ",
               [] {
                 (void)K::reshape(cst({1, 2, 3, 4, 5, 6}, {2, 3}), {4, -1});
               })
        .error("wrong_count", Err::Value,
               "K::reshape: cannot reshape a tensor of shape (2, 3) (6 elements) into (4, 2)",
               [] {
                 (void)K::reshape(cst({1, 2, 3, 4, 5, 6}, {2, 3}), {4, 2});
               })
        .error("two_unknown", Err::Value, "K::reshape: can only infer one unknown dim (-1)", [] {
          (void)K::reshape(cst({1, 2, 3, 4, 5, 6}, {2, 3}), {-1, -1});
        });
    t.values(
         "reshape_flat_by_hand", [](const V& v) { return K::reshape(v[0], {-1}); }, x)
        .expect({1, 2, 3, 4, 5, 6}, {6});
    t.values(
         "reshape_3d_by_hand",
         [](const V& v) {
           return K::reshape(v[0], {1, 6, 1});
         },
         x)
        .expect({1, 2, 3, 4, 5, 6}, {1, 6, 1});
    // A placeholder (None, 3) reshaped to (-1, 2): (None, 2), checked when the Function runs.
    t.values(
         "reshape_unknown_batch",
         [](const V& v) {
           return K::reshape(v[0], {-1, 2});
         },
         x)
        .none_batch()
        .expect({1, 2, 3, 4, 5, 6}, {3, 2})
        .static_shape({K::None, 2})
        .error("checked_at_run_time", Err::Value,
               "K::reshape: cannot reshape a tensor of shape (1, 3) (3 elements) into (", [] {
                 const Tensor p = K::placeholder({K::None, 3});
                 (void)K::function(
                     {p}, {K::reshape(p, {-1, 2})})({NDArray::from_values({1, 2, 3}, {1, 3})});
               });
  }
  t.values("flatten_by_hand", [](const V& v) { return K::flatten(v[0]); },
           {f64({1, 2, 3, 4, 5, 6}, {2, 1, 3})})
      .expect({1, 2, 3, 4, 5, 6}, {6});
  // batch_flatten keeps dim 0 and flattens the rest: values unchanged in row-major order.
  t.values("batch_flatten_unknown_batch", [](const V& v) { return K::batch_flatten(v[0]); },
           {iota({4, 2, 3})})
      .none_batch()
      .expect(iota({4, 6}).to_vector(), {4, 6})
      .static_shape({K::None, 6})
      .error("scalar", Err::Value, "K::batch_flatten: x must have rank >= 1",
             [] { (void)K::batch_flatten(cst({1}, {})); });
  t.values("batch_flatten_by_hand", [](const V& v) { return K::batch_flatten(v[0]); },
           {iota({2, 3, 4})})
      .expect(iota({2, 12}).to_vector(), {2, 12});
  {
    // expand_dims inserts a size-1 axis; the values keep their order.
    const In x = {f64({1, 2, 3, 4, 5, 6}, {2, 3})};
    const std::vector<double> v = {1, 2, 3, 4, 5, 6};
    t.values(
         "expand_dims_axis0_by_hand", [](const V& a) { return K::expand_dims(a[0], 0); }, x)
        .expect(v, {1, 2, 3})
        .error("axis_out_of_range", Err::Value,
               "K::expand_dims: axis 3 out of range for a tensor of shape (2, 3)", [] {
                 (void)K::expand_dims(cst({1, 2, 3, 4, 5, 6}, {2, 3}), 3);
               });
    t.values(
         "expand_dims_last_by_hand", [](const V& a) { return K::expand_dims(a[0]); }, x)
        .expect(v, {2, 3, 1});
    t.values(
         "expand_dims_axis1_by_hand", [](const V& a) { return K::expand_dims(a[0], 1); }, x)
        .expect(v, {2, 1, 3});
    t.values(
         "expand_dims_axis_minus2_by_hand", [](const V& a) { return K::expand_dims(a[0], -2); }, x)
        .expect(v, {2, 1, 3});
    const In y = {f64(v, {2, 1, 3})};
    t.values(
         "squeeze_by_hand", [](const V& a) { return K::squeeze(a[0], 1); }, y)
        .expect(v, {2, 3})
        .error("size_not_one", Err::Value,
               "K::squeeze: cannot squeeze axis 0 of shape (2, 1, 3): its size is not 1",
               [] {
                 (void)K::squeeze(cst({1, 2, 3, 4, 5, 6}, {2, 1, 3}), 0);
               })
        .error("axis_out_of_range", Err::Value, "K::squeeze: axis 3 is out of range", [] {
          (void)K::squeeze(cst({1, 2, 3, 4, 5, 6}, {2, 1, 3}), 3);
        });
    t.values(
         "squeeze_axis_minus2_by_hand", [](const V& a) { return K::squeeze(a[0], -2); }, y)
        .expect(v, {2, 3});
  }

  // ---- concatenate, slice, stack ----------------------------------------------------------------
  t.op("concatenate_last",
       [](const V& x) {
         return K::concatenate({x[0], x[1]});
       },
       {g.normal({3, 2}), g.normal(s34)})
      .formula([](const In& in) {
        return naive::concat({in[0], in[1]}, -1);
      });
  t.op("concatenate_axis0",
       [](const V& x) {
         return K::concatenate({x[0], x[1]}, 0);
       },
       {g.normal({2, 4}), g.normal(s34)})
      .ref_gradcheck()
      .formula([](const In& in) {
        return naive::concat({in[0], in[1]}, 0);
      });
  t.op("concatenate_three_mid",
       [](const V& x) {
         return K::concatenate({x[0], x[1], x[0]}, -2);
       },
       {g.normal({2, 1, 3}), g.normal({2, 2, 3})})
      .formula([](const In& in) {
        return naive::concat({in[0], in[1], in[0]}, -2);
      });
  t.op("slice_mid",
       [](const V& x) {
         return K::slice(x[0], {0, 1, 1}, {2, 2, -1});
       },
       {g.normal(s234)})
      .ref_gradcheck()
      .formula([](const In& in) {
        return naive::slice(in[0], {0, 1, 1}, {2, 2, -1});
      });
  t.op("slice_gates",  // the four gate slices of an LSTM, recombined
       [](const V& x) {
         auto s = [&](int k) { return K::slice(x[0], {0, 2 * k}, {-1, 2}); };
         return K::sigmoid(s(0)) * K::tanh(s(1)) + s(2) * s(3);
       },
       {g.normal({3, 8})})
      .formula([](const In& in) {
        auto s = [&](int k) { return naive::slice(in[0], {0, 2 * k}, {-1, 2}); };
        return naive::add(naive::mul(naive::sigmoid(s(0)), naive::tanh(s(1))),
                          naive::mul(s(2), s(3)));
      });
  // Slice's gradient (SlicePad) and SlicePad's (Slice) are both differentiated here.
  t.op("slice_square",
       [](const V& x) {
         return K::square(K::slice(x[0], {1, 0}, {2, 3})) * K::sum(x[0]);
       },
       {g.normal(s34)})
      .second_order()
      .formula([](const In& in) {
        return naive::mul(naive::sq(naive::slice(in[0], {1, 0}, {2, 3})), naive::sum(in[0]));
      });
  t.op("stack_axis1",
       [](const V& x) {
         return K::stack({x[0], x[1] * 2.0}, 1);
       },
       {g.normal(s34), g.normal(s34)})
      .formula([](const In& in) {
        return naive::stack({in[0], naive::mul(in[1], 2.0)}, 1);
      });
  {
    const In ab = {f64({1, 2, 3, 4}, {2, 2}), f64({5, 6}, {2, 1}), f64({7, 8}, {1, 2})};
    // a = [[1,2],[3,4]], b = [[5],[6]], c = [[7,8]]; axis -1: [[1,2,5],[3,4,6]]
    t.values(
         "concatenate_last_by_hand",
         [](const V& v) {
           return K::concatenate({v[0], v[1]});
         },
         ab)
        .expect({1, 2, 5, 3, 4, 6}, {2, 3})
        .error("mismatched_rows", Err::Value,
               "K::concatenate: shapes (2, 2) and (3, 1) differ on axis 0",
               [] {
                 (void)K::concatenate({cst({1, 2, 3, 4}, {2, 2}), cst({1, 2, 3}, {3, 1})}, -1);
               })
        .error("mismatched_columns", Err::Value,
               "K::concatenate: shapes (2, 2) and (2, 1) differ on axis 1",
               [] {
                 (void)K::concatenate({cst({1, 2, 3, 4}, {2, 2}), cst({5, 6}, {2, 1})}, 0);
               })
        .error("mismatched_rank", Err::Value, "K::concatenate: all tensors must have the same rank",
               [] {
                 (void)K::concatenate({cst({1, 2, 3, 4}, {2, 2}), cst({1, 2}, {2})});
               });
    t.values(
         "concatenate_axis1_by_hand",
         [](const V& v) {
           return K::concatenate({v[0], v[1]}, 1);
         },
         ab)
        .expect({1, 2, 5, 3, 4, 6}, {2, 3});
    // axis 0: [[1,2],[3,4],[7,8]]
    t.values(
         "concatenate_axis0_by_hand",
         [](const V& v) {
           return K::concatenate({v[0], v[2]}, 0);
         },
         ab)
        .expect({1, 2, 3, 4, 7, 8}, {3, 2})
        .error("axis_out_of_range", Err::Value, "K::concatenate: axis 2 is out of range",
               [] {
                 (void)K::concatenate({cst({1, 2}, {1, 2}), cst({3, 4}, {1, 2})}, 2);
               })
        .error("no_tensors", Err::Value, "K::concatenate: needs at least one tensor",
               [] { (void)K::concatenate({}); })
        .error("scalars", Err::Value, "K::concatenate: cannot concatenate scalars",
               [] {
                 (void)K::concatenate({cst({1}, {}), cst({2}, {})});
               })
        .error("mixed_dtypes", Err::Type, "K::concatenate: operands have different dtypes", [] {
          (void)K::concatenate({cst({1}, {1}), cst({2}, {1}, "float64")});
        });
    // three pieces along axis 0: c, a, c
    t.values(
         "concatenate_three_by_hand",
         [](const V& v) {
           return K::concatenate({v[2], v[0], v[2]}, 0);
         },
         ab)
        .expect({7, 8, 1, 2, 3, 4, 7, 8}, {4, 2});
  }
  {
    // x (3,4) = [[0,1,2,3],[4,5,6,7],[8,9,10,11]]; slice rows 1.. (size -1), columns 1..2
    t.values("slice_by_hand",
             [](const V& v) {
               return K::slice(v[0], {1, 1}, {-1, 2});
             },
             {iota({3, 4})})
        .expect({5, 6, 9, 10}, {2, 2})
        .error_exactly("start_plus_size_past_the_end", Err::Value,
                       "K::slice: start 3 and size 2 on axis 1 leave a tensor of shape (3, 4)",
                       [] {
                         (void)K::slice(K::placeholder({3, 4}), {0, 3}, {1, 2});
                       })
        .error("one_entry_per_axis", Err::Value, "one entry per axis of (3, 4)", [] {
          (void)K::slice(K::placeholder({3, 4}), {0}, {1, 2});
        });
    // A slice of a None dim is checked when the Function sees the concrete shape: rows 2..3 of
    // a (4,4) input [[0..3],[4..7],[8..11],[12..15]].
    t.values("slice_unknown_batch",
             [](const V& v) {
               return K::slice(v[0], {2, 0}, {2, -1});
             },
             {iota({4, 4})})
        .none_batch()
        .expect({8, 9, 10, 11, 12, 13, 14, 15}, {2, 4})
        .error("checked_at_run_time", Err::Value,
               "K::slice: start 2 and size 2 on axis 0 leave a tensor of shape (3, 4)", [] {
                 const Tensor y = K::placeholder({K::None, 4});
                 (void)K::function(
                     {y}, {K::slice(y, {2, 0}, {2, -1})})({NDArray::full(Shape{3, 4}, 1.0)});
               });
    // stack((2,2) a, (2,2) b): axis 0 -> (2,2,2) [a, b]; axis -1 -> out[i][j] = [a[i][j], b[i][j]]
    const In ab = {f64({1, 2, 3, 4}, {2, 2}), f64({5, 6, 7, 8}, {2, 2})};
    t.values(
         "stack_by_hand",
         [](const V& v) {
           return K::stack({v[0], v[1]});
         },
         ab)
        .expect({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2})
        .error("shapes_differ", Err::Value, "K::stack: shapes differ: (3, 4) and (4, 3)",
               [] {
                 (void)K::stack({K::placeholder({3, 4}), K::placeholder({4, 3})});
               })
        .error("axis_out_of_range", Err::Value, "K::stack: axis 3 out of range for rank 3",
               [] {
                 (void)K::stack({K::placeholder({3, 4})}, 3);
               })
        .error("empty", Err::Value, "K::stack: needs at least one tensor",
               [] { (void)K::stack({}); });
    t.values(
         "stack_last_by_hand",
         [](const V& v) {
           return K::stack({v[0], v[1]}, -1);
         },
         ab)
        .expect({1, 5, 2, 6, 3, 7, 4, 8}, {2, 2, 2});
  }

  // ---- parity-only ------------------------------------------------------------------------------
  t.parity_only(
       "big_matmul", [](const V& x) { return K::dot(x[0], x[1]); },
       [](Gen& r) {
         return In{r.normal({64, 96}), r.normal({96, 80})};
       })
      .parity(1e-4)
      .formula([](const In& in) { return naive::dot(in[0], in[1]); })
      .tol32(1e-4, 1e-4);
  // A first-order gradient as the output: the parity test differentiates it again, which runs
  // MatMul with transpose flags on sizes large enough for the parallel split.
  // d/dx sum((x W)^2) = 2 (x W) W^T.
  t.parity_only(
       "big_matmul_gradient",
       [](const V& x) { return K::gradients(K::sum(K::square(K::dot(x[0], x[1]))), {x[0]})[0]; },
       [](Gen& r) {
         return In{r.normal({64, 96}), r.normal({96, 80})};
       })
      .parity(1e-4)
      .formula([](const In& in) {
        return naive::mul(naive::dot(naive::dot(in[0], in[1]), naive::transpose(in[1])), 2.0);
      })
      .tol32(1e-4, 1e-3);
  // Transposes large enough for the cpu kernel's parallel split: one that keeps the last axis
  // (row copies, an RNN's batch/time swap) and one that moves it (strided gathers).
  t.parity_only(
       "big_permute_keeps_last_axis",
       [](const V& x) {
         return K::permute_dimensions(x[0], {1, 0, 2});
       },
       [](Gen& r) {
         return In{r.normal({96, 128, 40})};
       })
      .formula([](const In& in) {
        return naive::transpose(in[0], {1, 0, 2});
      })
      .exact();
  t.parity_only(
       "big_permute_moves_last_axis",
       [](const V& x) {
         return K::permute_dimensions(x[0], {2, 1, 0});
       },
       [](Gen& r) {
         return In{r.normal({96, 128, 40})};
       })
      .formula([](const In& in) {
        return naive::transpose(in[0], {2, 1, 0});
      })
      .exact();
  t.parity_only("zero_matmul_rows", [](const V& x) { return K::dot(x[0], x[1]); },
                {g.normal({0, 4}), g.normal({4, 3})})
      .expect({}, {0, 3});
  // An empty contraction: all zeros.
  t.parity_only("zero_matmul_inner", [](const V& x) { return K::dot(x[0], x[1]); },
                {g.normal({3, 0}), g.normal({0, 2})})
      .expect({0, 0, 0, 0, 0, 0}, {3, 2});
  t.parity_only("zero_concat",
                [](const V& x) {
                  return K::concatenate({x[0], x[1]}, 0);
                },
                {g.normal({0, 4}), g.normal({2, 4})})
      .formula([](const In& in) {
        return naive::concat({in[0], in[1]}, 0);
      });
  return t.take();
}

}  // namespace ktape::op_rows
