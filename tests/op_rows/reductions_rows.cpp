// Reduction rows: sum, mean, max, min over all axes, one axis or an axis list (keepdims or not),
// argmax and argmin (ops/reductions.hpp). Provenance of expected values: "by hand" = written out
// next to the values; "formula" = the naive float64 reference (op_rows/naive.hpp) applied to the
// row's inputs.
#include <cmath>
#include <limits>

#include "op_rows/op_row.hpp"

namespace ktape::op_rows {

std::vector<OpRow> reductions_rows() {
  Rows t("reductions");
  Gen g(20240613);
  const Shape s34{3, 4};
  const Shape s234{2, 3, 4};
  using VI = std::vector<int>;

  // ---- random inputs ----------------------------------------------------------------------------
  t.op("sum_all", [](const V& x) { return K::sum(x[0]); }, {g.normal(s234)})
      .formula([](const In& in) { return naive::sum(in[0]); });
  t.op("sum_axis0", [](const V& x) { return K::sum(x[0], 0); }, {g.normal(s234)})
      .formula([](const In& in) { return naive::sum(in[0], {0}); });
  t.op("sum_axis_neg1_keepdims", [](const V& x) { return K::sum(x[0], -1, true); },
       {g.normal(s234)})
      .formula([](const In& in) { return naive::sum(in[0], {-1}, true); });
  t.op("sum_axis_list",
       [](const V& x) {
         return K::sum(x[0], {.axis = VI{0, 2}});
       },
       {g.normal(s234)})
      .formula([](const In& in) {
        return naive::sum(in[0], {0, 2});
      });
  t.op("sum_axis_list_keepdims",
       [](const V& x) {
         return K::sum(x[0], {.axis = VI{-1, 1}, .keepdims = true});
       },
       {g.normal(s234)})
      .formula([](const In& in) {
        return naive::sum(in[0], {-1, 1}, true);
      });
  t.op("mean_all", [](const V& x) { return K::mean(x[0]); }, {g.normal(s234)})
      .formula([](const In& in) { return naive::mean(in[0]); });
  t.op("mean_axis1", [](const V& x) { return K::mean(x[0], 1); }, {g.normal(s234)})
      .formula([](const In& in) { return naive::mean(in[0], {1}); });
  t.op("mean_axis_list_keepdims",
       [](const V& x) {
         return K::mean(x[0], {.axis = VI{0, 2}, .keepdims = true});
       },
       {g.normal(s234)})
      .formula([](const In& in) {
        return naive::mean(in[0], {0, 2}, true);
      });
  t.op("max_all", [](const V& x) { return K::max(x[0]); }, {g.distinct(s234, -2, 2)})
      .formula([](const In& in) { return naive::max(in[0]); });
  t.op("max_axis1", [](const V& x) { return K::max(x[0], 1); }, {g.distinct(s234, -2, 2)})
      .ref_gradcheck()
      .formula([](const In& in) { return naive::max(in[0], {1}); });
  t.op("max_axis_neg1_keepdims", [](const V& x) { return K::max(x[0], -1, true); },
       {g.distinct(s234, -2, 2)})
      .formula([](const In& in) { return naive::max(in[0], {-1}, true); });
  t.op("max_axis_list",
       [](const V& x) {
         return K::max(x[0], {.axis = VI{0, 2}});
       },
       {g.distinct(s234, -2, 2)})
      .formula([](const In& in) {
        return naive::max(in[0], {0, 2});
      });
  t.op("min_all", [](const V& x) { return K::min(x[0]); }, {g.distinct(s234, -2, 2)})
      .formula([](const In& in) { return naive::min(in[0]); });
  t.op("min_axis0", [](const V& x) { return K::min(x[0], 0); }, {g.distinct(s234, -2, 2)})
      .formula([](const In& in) { return naive::min(in[0], {0}); });
  t.op("min_axis_list_keepdims",
       [](const V& x) {
         return K::min(x[0], {.axis = VI{1, 2}, .keepdims = true});
       },
       {g.distinct(s234, -2, 2)})
      .formula([](const In& in) {
        return naive::min(in[0], {1, 2}, true);
      });
  // Second-order compositions.
  t.op("mean_of_product_row", [](const V& x) { return K::mean(K::square(x[0]) * K::exp(x[0]), 1); },
       {g.uniform(s34, -1, 1)})
      .second_order()
      .formula([](const In& in) {
        return naive::mean(naive::mul(naive::sq(in[0]), naive::exp(in[0])), {1});
      });
  t.op("max_times_x", [](const V& x) { return K::max(x[0], 1) * K::sum(x[0], 1); },
       {g.distinct(s34, -2, 2)})
      .second_order()
      .formula(
          [](const In& in) { return naive::mul(naive::max(in[0], {1}), naive::sum(in[0], {1})); });
  t.op("broadcast_div", [](const V& x) { return K::sum(x[0], 0) / (K::square(x[0]) + 1.0); },
       {g.normal(s34)})
      .second_order()
      .formula([](const In& in) {
        return naive::div(naive::sum(in[0], {0}), naive::add(naive::sq(in[0]), 1.0));
      });

  // ---- by hand: x = [[1,2,3],[4,5,6]] -----------------------------------------------------------
  {
    const In x = {f64({1, 2, 3, 4, 5, 6}, {2, 3})};
    t.values(
         "sum_by_hand", [](const V& v) { return K::sum(v[0]); }, x)
        .expect({21}, {})
        .error("axis_out_of_range", Err::Value, "K::sum: axis 2 is out of range",
               [] {
                 (void)K::sum(cst({1, 2, 3, 4, 5, 6}, {2, 3}), 2);
               })
        .error("bool", Err::Type, "K::sum: cast a bool tensor before reducing it", [] {
          (void)K::sum(cst({1, 0}, {2}, "bool"));
        });
    t.values(
         "sum_axis0_by_hand", [](const V& v) { return K::sum(v[0], 0); }, x)
        .expect({5, 7, 9}, {3});
    t.values(
         "sum_axis1_by_hand", [](const V& v) { return K::sum(v[0], 1); }, x)
        .expect({6, 15}, {2});
    t.values(
         "sum_axis_minus1_by_hand", [](const V& v) { return K::sum(v[0], -1); }, x)
        .expect({6, 15}, {2});
    t.values(
         "sum_axis_minus2_by_hand", [](const V& v) { return K::sum(v[0], -2); }, x)
        .expect({5, 7, 9}, {3});
    t.values(
         "sum_axis1_keepdims_by_hand", [](const V& v) { return K::sum(v[0], 1, true); }, x)
        .expect({6, 15}, {2, 1});
    t.values(
         "sum_axis_list_all_by_hand",
         [](const V& v) {
           return K::sum(v[0], {.axis = VI{0, 1}});
         },
         x)
        .expect({21}, {});
    t.values(
         "sum_axis_list_all_keepdims_by_hand",
         [](const V& v) {
           return K::sum(v[0], {.axis = VI{1, 0}, .keepdims = true});
         },
         x)
        .expect({21}, {1, 1});
    t.values(
         "sum_keepdims_by_hand", [](const V& v) { return K::sum(v[0], {.keepdims = true}); }, x)
        .expect({21}, {1, 1});
    // Integer sums keep the int dtype: [[1,2],[3,4]]
    t.values("sum_int32_by_hand", [](const V& v) { return K::sum(v[0]); },
             {f64({1, 2, 3, 4}, {2, 2})})
        .in_dtypes({"int32"})
        .expect({10}, {})
        .out_dtype("int32")
        .exact();
    t.values("sum_int32_axis0_by_hand", [](const V& v) { return K::sum(v[0], 0); },
             {f64({1, 2, 3, 4}, {2, 2})})
        .in_dtypes({"int32"})
        .expect({4, 6}, {2})
        .out_dtype("int32")
        .exact();

    t.values(
         "mean_by_hand", [](const V& v) { return K::mean(v[0]); }, x)
        .expect({3.5}, {})
        .error("int32", Err::Type, "K::mean: `x` must be a float tensor, got int32",
               [] {
                 (void)K::mean(cst({1, 2}, {2}, "int32"));
               })
        .error("int64_axis", Err::Type, "K::mean: `x` must be a float tensor, got int64",
               [] {
                 (void)K::mean(cst({1, 2}, {2}, "int64"), 0);
               })
        .error("duplicate_axis", Err::Value, "K::mean: duplicate axis in the axis list", [] {
          (void)K::mean(cst({1, 2, 3, 4, 5, 6}, {2, 3}), {.axis = VI{0, 0}});
        });
    t.values(
         "mean_axis0_by_hand", [](const V& v) { return K::mean(v[0], 0); }, x)
        .expect({2.5, 3.5, 4.5}, {3});
    t.values(
         "mean_axis_minus1_by_hand", [](const V& v) { return K::mean(v[0], -1); }, x)
        .expect({2, 5}, {2});
    t.values(
         "mean_axis1_keepdims_by_hand", [](const V& v) { return K::mean(v[0], 1, true); }, x)
        .expect({2, 5}, {2, 1});
    t.values(
         "mean_axis_list_keepdims_by_hand",
         [](const V& v) {
           return K::mean(v[0], {.axis = VI{0, -1}, .keepdims = true});
         },
         x)
        .expect({3.5}, {1, 1});
  }
  // x (2,2,2) = [[[1,2],[3,4]],[[5,6],[7,8]]]; sum over axes {0,2}:
  //   j=0: 1+2+5+6 = 14; j=1: 3+4+7+8 = 22; axis 1: [[1+3, 2+4],[5+7, 6+8]] = [[4,6],[12,14]]
  {
    const In x = {f64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2})};
    t.values(
         "sum_axis_list_3d_by_hand",
         [](const V& v) {
           return K::sum(v[0], {.axis = VI{0, 2}});
         },
         x)
        .expect({14, 22}, {2});
    t.values(
         "sum_axis_list_3d_keepdims_by_hand",
         [](const V& v) {
           return K::sum(v[0], {.axis = VI{-1, 0}, .keepdims = true});
         },
         x)
        .expect({14, 22}, {1, 2, 1});
    t.values(
         "sum_axis1_3d_by_hand", [](const V& v) { return K::sum(v[0], 1); }, x)
        .expect({4, 6, 12, 14}, {2, 2});
  }
  // Spec 3.15 ("mean | bool -> floatx"): Keras 2.2.4 on TF casts a bool tensor to floatx before
  // tf.reduce_mean, and Keras itself relies on it (metrics.binary_accuracy is
  // K.mean(K.equal(y_true, K.round(y_pred)), axis=-1) with no cast).
  // greater([[1,-1,2],[3,-2,5]], 0) = [[1,0,1],[1,0,1]]: 4 of 6 are true; each row 2 of 3.
  {
    const In x = {f64({1, -1, 2, 3, -2, 5}, {2, 3})};
    t.values(
         "mean_of_bool_is_floatx", [](const V& v) { return K::mean(K::greater(v[0], 0.0)); }, x)
        .expect({4.0 / 6}, {})
        .out_dtype("float32");
    t.values(
         "mean_of_bool_axis_is_floatx",
         [](const V& v) { return K::mean(K::greater(v[0], 0.0), -1); }, x)
        .expect({2.0 / 3, 2.0 / 3}, {2})
        .out_dtype("float32");
  }
  // x = [[1,6,3],[4,2,5]]
  {
    const In x = {f64({1, 6, 3, 4, 2, 5}, {2, 3})};
    t.values(
         "max_by_hand", [](const V& v) { return K::max(v[0]); }, x)
        .expect({6}, {})
        .error("axis_out_of_range", Err::Value, "K::max: axis -3 is out of range", [] {
          (void)K::max(cst({1, 2, 3, 4, 5, 6}, {2, 3}), -3);
        });
    t.values(
         "max_axis0_by_hand", [](const V& v) { return K::max(v[0], 0); }, x)
        .expect({4, 6, 5}, {3});
    t.values(
         "max_axis_minus1_by_hand", [](const V& v) { return K::max(v[0], -1); }, x)
        .expect({6, 5}, {2});
    t.values(
         "max_axis1_keepdims_by_hand", [](const V& v) { return K::max(v[0], 1, true); }, x)
        .expect({6, 5}, {2, 1});
    t.values(
         "min_by_hand", [](const V& v) { return K::min(v[0]); }, x)
        .expect({1}, {})
        .error("axis_out_of_range", Err::Value, "K::min: axis 2 is out of range", [] {
          (void)K::min(cst({1, 6, 3, 4, 2, 5}, {2, 3}), {.axis = VI{0, 2}});
        });
    t.values(
         "min_axis0_by_hand", [](const V& v) { return K::min(v[0], 0); }, x)
        .expect({1, 2, 3}, {3});
    t.values(
         "min_axis_minus1_by_hand", [](const V& v) { return K::min(v[0], -1); }, x)
        .expect({1, 2}, {2});
    t.values(
         "min_axis_list_keepdims_by_hand",
         [](const V& v) {
           return K::min(v[0], {.axis = VI{0, 1}, .keepdims = true});
         },
         x)
        .expect({1}, {1, 1});
    // negative values
    t.values("max_negative_by_hand", [](const V& v) { return K::max(v[0]); },
             {f64({-5, -2, -9}, {3})})
        .expect({-2}, {});
  }
  // argmax/argmin return int64 and the first of tied extrema.
  {
    // [[1,3,3],[5,5,2]]: argmax axis -1 -> [1, 0] (first of the ties); axis 0 -> [1,1,0]
    const In x = {f64({1, 3, 3, 5, 5, 2}, {2, 3})};
    t.values(
         "argmax_ties_first", [](const V& v) { return K::argmax(v[0]); }, x)
        .expect({1, 0}, {2})
        .out_dtype("int64")
        .exact()
        .error("axis_out_of_range", Err::Value, "axis 2 is out of range for a tensor of rank 2",
               [] {
                 (void)K::argmax(cst({1, 3, 3, 5, 5, 2}, {2, 3}), 2);
               });
    t.values(
         "argmax_axis0_by_hand", [](const V& v) { return K::argmax(v[0], 0); }, x)
        .expect({1, 1, 0}, {3})
        .out_dtype("int64")
        .exact();
    // [[2,1,1],[0,4,0]]: argmin axis -1 -> [1, 0] (ties); axis 0 -> columns [2,0],[1,4],[1,0]
    // -> [1,0,1]
    const In y = {f64({2, 1, 1, 0, 4, 0}, {2, 3})};
    t.values(
         "argmin_ties_first", [](const V& v) { return K::argmin(v[0]); }, y)
        .expect({1, 0}, {2})
        .out_dtype("int64")
        .exact()
        .error("axis_out_of_range", Err::Value, "axis -3 is out of range for a tensor of rank 2",
               [] {
                 (void)K::argmin(cst({2, 1, 1, 0, 4, 0}, {2, 3}), -3);
               })
        .error("bool", Err::Type, "cast a bool tensor first",
               [] {
                 (void)K::argmin(cst({1, 0}, {2}, "bool"));
               })
        .error("empty_axis", Err::Value,
               "K::argmin: axis 1 of a tensor of shape (2, 0) is empty: it has no extreme", [] {
                 (void)K::argmin(K::zeros({2, 0}));
               });
    t.values(
         "argmin_axis0_by_hand", [](const V& v) { return K::argmin(v[0], 0); }, y)
        .expect({1, 0, 1}, {3})
        .out_dtype("int64")
        .exact();
    // ties along axis 0: [[3,1],[3,1]] -> argmin/argmax [0,0]
    const In z = {f64({3, 1, 3, 1}, {2, 2})};
    t.values(
         "argmin_axis0_ties_by_hand", [](const V& v) { return K::argmin(v[0], 0); }, z)
        .expect({0, 0}, {2})
        .out_dtype("int64")
        .exact();
    t.values(
         "argmax_axis0_ties_by_hand", [](const V& v) { return K::argmax(v[0], 0); }, z)
        .expect({0, 0}, {2})
        .out_dtype("int64")
        .exact();
  }

  // ---- parity-only ------------------------------------------------------------------------------
  t.parity_only(
       "big_reductions",
       [](const V& x) {
         return K::sum(x[0], 0) + K::mean(x[0], 0) * K::max(x[0], 0) - K::min(x[0], 0);
       },
       [](Gen& r) {
         return In{r.normal({500, 40})};
       })
      .formula([](const In& in) {
        return naive::sub(naive::add(naive::sum(in[0], {0}),
                                     naive::mul(naive::mean(in[0], {0}), naive::max(in[0], {0}))),
                          naive::min(in[0], {0}));
      })
      .tol32(1e-4, 1e-4);
  // Sums over an empty axis are 0; means over it are 0/0 = NaN (numpy's convention).
  t.parity_only("zero_sum_axis0", [](const V& x) { return K::sum(x[0], 0) * x[1]; },
                {g.normal({0, 4}), g.normal({4})})
      .expect({0, 0, 0, 0}, {4});
  t.parity_only("zero_mean_axis0", [](const V& x) { return K::mean(x[0], 0); }, {g.normal({0, 4})})
      .expect({NAN, NAN, NAN, NAN}, {4});
  t.parity_only("negative_axes",
                [](const V& x) {
                  return K::sum(K::softmax(x[0], -3), {.axis = VI{-1, -3}}) +
                         K::max(x[0], {.axis = VI{-3, -1}});
                },
                {g.normal({2, 3, 4})})
      .formula([](const In& in) {
        return naive::add(naive::sum(naive::softmax(in[0], -3), {-1, -3}),
                          naive::max(in[0], {-3, -1}));
      });
  t.parity_only(
       "argmax_argmin",
       [](const V& x) { return K::argmax(x[0], 0) * K::argmin(x[0], -1) + K::argmax(x[0]); },
       {g.normal({6, 6})})
      .out_dtype("int64")
      .formula([](const In& in) {
        return naive::add(naive::mul(naive::argmax(in[0], 0), naive::argmin(in[0], -1)),
                          naive::argmax(in[0], -1));
      })
      .exact();
  // ---- prod, var, std, logsumexp, any, all, cumsum, cumprod (issue 12) --------------------------
  t.op("prod_all", [](const V& x) { return K::prod(x[0]); }, {g.uniform(s34, 0.5, 1.5)})
      .formula([](const In& in) { return naive::prod(in[0]); });
  t.op("prod_axis1", [](const V& x) { return K::prod(x[0], 1); }, {g.normal(s234)})
      .second_order()
      .formula([](const In& in) { return naive::prod(in[0], {1}); });
  t.op("prod_axis_list_keepdims",
       [](const V& x) {
         return K::prod(x[0], {.axis = VI{0, 2}, .keepdims = true});
       },
       {g.normal(s234)})
      .formula([](const In& in) {
        return naive::prod(in[0], {0, 2}, true);
      });
  // by hand: rows [0,2,3] -> 0, [0,0,5] -> 0, [1,2,4] -> 8. The gradient (checked by finite
  // differences, exact for a product) is [6,0,0], [0,0,0], [8,4,2]: no division by the zeros.
  t.op("prod_with_zeros_axis1", [](const V& x) { return K::prod(x[0], 1); },
       {f64({0, 2, 3, 0, 0, 5, 1, 2, 4}, {3, 3})})
      .expect({0, 0, 8}, {3})
      .error("bool", Err::Type, "K::prod: cast a bool tensor before reducing it", [] {
        (void)K::prod(cst({1, 0}, {2}, "bool"));
      });
  // by hand: two zeros in each row, and a product of the others that overflows float32 (1e40):
  // the gradient is 0 everywhere, not inf * 0.
  t.values("prod_grad_two_zeros_overflow_by_hand",
           [](const V& v) { return K::gradients(K::sum(K::prod(v[0], 1)), {v[0]})[0]; },
           {f64({0, 0, 1e20, 1e20}, {1, 4})})
      .expect({0, 0, 0, 0}, {1, 4});
  t.values("prod_by_hand", [](const V& v) { return K::prod(v[0], 0); },
           {f64({1, 2, 3, 4, 5, 6}, {2, 3})})
      .expect({4, 10, 18}, {3});
  t.values("prod_int32_by_hand", [](const V& v) { return K::prod(v[0]); },
           {f64({1, 2, 3, 4, 5, 6}, {2, 3})})
      .in_dtypes({"int32"})
      .expect({720}, {})
      .out_dtype("int32")
      .exact();
  t.op("var_all", [](const V& x) { return K::var(x[0]); }, {g.normal(s234)})
      .formula([](const In& in) { return naive::var(in[0]); });
  t.op("var_axis_list",
       [](const V& x) {
         return K::var(x[0], {.axis = VI{0, 2}});
       },
       {g.normal(s234)})
      .second_order()
      .formula([](const In& in) {
        return naive::var(in[0], {0, 2});
      });
  t.op("std_axis0_keepdims", [](const V& x) { return K::std(x[0], 0, true); }, {g.normal(s234)})
      .formula([](const In& in) {
        return naive::map(naive::var(in[0], {0}, true), [](double v) { return std::sqrt(v); });
      });
  // by hand: [1,2,3,4] has mean 2.5 and squared deviations 2.25, 0.25, 0.25, 2.25: var 1.25,
  // std sqrt(1.25) = 1.118033988749895.
  t.values("var_by_hand", [](const V& v) { return K::var(v[0]); }, {f64({1, 2, 3, 4}, {4})})
      .expect({1.25}, {})
      .error("int32", Err::Type, "K::var: `x` must be a float tensor, got int32", [] {
        (void)K::var(cst({1, 2}, {2}, "int32"));
      });
  t.values("std_by_hand", [](const V& v) { return K::std(v[0]); }, {f64({1, 2, 3, 4}, {4})})
      .expect({1.118033988749895}, {});
  // by hand: columns [1,3] (mean 2, var 1) and [2,5] (mean 3.5, var 2.25), keepdims (1, 2).
  t.values("var_axis0_keepdims_by_hand", [](const V& v) { return K::var(v[0], 0, true); },
           {f64({1, 2, 3, 5}, {2, 2})})
      .expect({1, 2.25}, {1, 2});
  // by hand: a bool [1,0,1,1] is cast to floatx: mean 0.75, var (3 * 0.0625 + 0.5625) / 4.
  t.values("var_bool_by_hand", [](const V& v) { return K::var(v[0]); }, {f64({1, 0, 1, 1}, {4})})
      .in_dtypes({"bool"})
      .expect({0.1875}, {})
      .out_dtype("float32");
  t.op("logsumexp_axis1", [](const V& x) { return K::logsumexp(x[0], 1); }, {g.normal(s234)})
      .second_order()
      .formula([](const In& in) { return naive::logsumexp(in[0], {1}); });
  t.op("logsumexp_all_keepdims", [](const V& x) { return K::logsumexp(x[0], {.keepdims = true}); },
       {g.normal(s34)})
      .formula([](const In& in) { return naive::logsumexp(in[0], {}, true); });
  // by hand: log(2 e^1e4) = 1e4 + log 2; log(e^-1e4 + e^(1-1e4)) = 1 - 1e4 + log(1 + e^-1)
  // = -9999 + 0.31326168751822286. A naive log(sum(exp)) gives inf and -inf here.
  t.values("logsumexp_large_by_hand", [](const V& v) { return K::logsumexp(v[0], -1); },
           {f64({1e4, 1e4, -1e4, 1 - 1e4}, {2, 2})})
      .expect({10000.693147180560, -9998.686738312482}, {2})
      .error("int32", Err::Type, "K::logsumexp: `x` must be a float tensor, got int32", [] {
        (void)K::logsumexp(cst({1, 2}, {2}, "int32"));
      });
  // by hand: rows [0,1,0] and [0,0,0].
  {
    const In x = {f64({0, 1, 0, 0, 0, 0}, {2, 3})};
    t.values(
         "any_axis1_by_hand", [](const V& v) { return K::any(v[0], 1); }, x)
        .expect({1, 0}, {2})
        .out_dtype("bool")
        .exact();
    t.values(
         "all_axis1_by_hand", [](const V& v) { return K::all(v[0], 1); }, x)
        .expect({0, 0}, {2})
        .out_dtype("bool")
        .exact();
    t.values(
         "any_all_keepdims_by_hand", [](const V& v) { return K::any(v[0], {.keepdims = true}); }, x)
        .expect({1}, {1, 1})
        .out_dtype("bool")
        .exact();
  }
  // by hand: every element of [[1,2],[3,-1]] is non-zero; [nan, 0] has a non-zero (NaN).
  t.values("all_nonzero_by_hand", [](const V& v) { return K::all(v[0]); },
           {f64({1, 2, 3, -1}, {2, 2})})
      .expect({1}, {})
      .out_dtype("bool")
      .exact();
  t.values("any_nan_by_hand", [](const V& v) { return K::any(v[0]); }, {f64({NAN, 0}, {2})})
      .expect({1}, {})
      .out_dtype("bool")
      .exact();
  t.values("all_bool_axis0_by_hand", [](const V& v) { return K::all(v[0], 0); },
           {f64({1, 0, 1, 1}, {2, 2})})
      .in_dtypes({"bool"})
      .expect({1, 0}, {2})
      .out_dtype("bool")
      .exact();
  t.op("cumsum_axis1", [](const V& x) { return K::cumsum(x[0], 1); }, {g.normal(s234)})
      .second_order()
      .formula([](const In& in) { return naive::cumulative(in[0], 1, false); });
  t.op("cumsum_default_axis0", [](const V& x) { return K::cumsum(x[0]); }, {g.normal(s34)})
      .formula([](const In& in) { return naive::cumulative(in[0], 0, false); });
  t.op("cumprod_axis_neg1", [](const V& x) { return K::cumprod(x[0], -1); },
       {g.away(s234, -2, 2, {0}, 0.3)})
      .second_order()
      .formula([](const In& in) { return naive::cumulative(in[0], -1, true); });
  {
    const In x = {f64({1, 2, 3, 4, 5, 6}, {2, 3})};
    t.values(
         "cumsum_axis0_by_hand", [](const V& v) { return K::cumsum(v[0], 0); }, x)
        .expect({1, 2, 3, 5, 7, 9}, {2, 3})
        .error("scalar", Err::Value, "K::cumsum: x is a scalar",
               [] { (void)K::cumsum(cst({1}, {})); })
        .error("axis_out_of_range", Err::Value, "K::cumsum: axis 2 is out of range", [] {
          (void)K::cumsum(cst({1, 2}, {1, 2}), 2);
        });
    t.values(
         "cumsum_axis1_int32_by_hand", [](const V& v) { return K::cumsum(v[0], 1); }, x)
        .in_dtypes({"int32"})
        .expect({1, 3, 6, 4, 9, 15}, {2, 3})
        .out_dtype("int32")
        .exact();
    t.values(
         "cumprod_axis1_by_hand", [](const V& v) { return K::cumprod(v[0], 1); }, x)
        .expect({1, 2, 6, 4, 20, 120}, {2, 3})
        .error("bool", Err::Type, "K::cumprod: cast a bool tensor first", [] {
          (void)K::cumprod(cst({1, 0}, {2}, "bool"));
        });
  }
  return t.take();
}

}  // namespace ktape::op_rows
