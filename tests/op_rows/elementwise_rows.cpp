// Elementwise rows: arithmetic with numpy broadcasting, unary math, pow, clip, maximum/minimum,
// comparisons, sign and round (ops/elementwise.hpp). Provenance of expected values: "by hand" =
// written out next to the values; "formula" = the naive float64 reference (op_rows/naive.hpp) or
// <cmath> applied to the row's inputs.
#include <cmath>
#include <limits>

#include "op_rows/op_row.hpp"

namespace ktape::op_rows {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The broadcasting errors of a binary operator on (2,3) and (4,) operands.
auto incompatible = [] {
  return std::pair{cst({1, 2, 3, 4, 5, 6}, {2, 3}), cst({1, 2, 3, 4}, {4})};
};
auto mixed = [] { return std::pair{cst({1, 2}, {2}, "float32"), cst({1, 2}, {2}, "float64")}; };
const char* kBroadcast = "operands could not be broadcast together with shapes";
const char* kDtypes = "operands have different dtypes float32";

}  // namespace

std::vector<OpRow> elementwise_rows() {
  Rows t("elementwise");
  Gen g(20240611);
  const Shape s34{3, 4};

  // ---- arithmetic with broadcasting: random inputs, formula values ------------------------------
  t.op("add_same", [](const V& x) { return x[0] + x[1]; }, {g.normal(s34), g.normal(s34)})
      .formula([](const In& in) { return naive::add(in[0], in[1]); });
  t.op("add_row", [](const V& x) { return x[0] + x[1]; }, {g.normal(s34), g.normal({4})})
      .ref_gradcheck()
      .formula([](const In& in) { return naive::add(in[0], in[1]); });
  t.op("add_col", [](const V& x) { return x[0] + x[1]; }, {g.normal(s34), g.normal({3, 1})})
      .formula([](const In& in) { return naive::add(in[0], in[1]); });
  t.op("add_outer", [](const V& x) { return x[0] + x[1]; }, {g.normal({3, 1}), g.normal({1, 4})})
      .formula([](const In& in) { return naive::add(in[0], in[1]); });
  t.op("add_scalar_tensor", [](const V& x) { return x[1] + x[0]; }, {g.normal(s34), g.normal({})})
      .formula([](const In& in) { return naive::add(in[1], in[0]); });
  t.op("sub_row", [](const V& x) { return x[0] - x[1]; }, {g.normal(s34), g.normal({4})})
      .formula([](const In& in) { return naive::sub(in[0], in[1]); });
  t.op("sub_col_rev", [](const V& x) { return x[1] - x[0]; }, {g.normal(s34), g.normal({3, 1})})
      .formula([](const In& in) { return naive::sub(in[1], in[0]); });
  t.op("mul_same", [](const V& x) { return x[0] * x[1]; }, {g.normal(s34), g.normal(s34)})
      .formula([](const In& in) { return naive::mul(in[0], in[1]); });
  t.op("mul_row", [](const V& x) { return x[0] * x[1]; }, {g.normal(s34), g.normal({4})})
      .formula([](const In& in) { return naive::mul(in[0], in[1]); });
  t.op("mul_col", [](const V& x) { return x[1] * x[0]; }, {g.normal(s34), g.normal({3, 1})})
      .formula([](const In& in) { return naive::mul(in[1], in[0]); });
  t.op("mul_outer", [](const V& x) { return x[0] * x[1]; }, {g.normal({3, 1}), g.normal({1, 4})})
      .formula([](const In& in) { return naive::mul(in[0], in[1]); });
  t.op("mul_self", [](const V& x) { return x[0] * x[0]; }, {g.normal(s34)})
      .formula([](const In& in) { return naive::sq(in[0]); });
  t.op("div_same", [](const V& x) { return x[0] / x[1]; },
       {g.normal(s34), g.away(s34, -2, 2, {0}, 0.5)})
      .formula([](const In& in) { return naive::div(in[0], in[1]); });
  t.op("div_row", [](const V& x) { return x[0] / x[1]; },
       {g.normal(s34), g.away({4}, -2, 2, {0}, 0.5)})
      .ref_gradcheck()
      .formula([](const In& in) { return naive::div(in[0], in[1]); });
  t.op("div_col_numerator_broadcast", [](const V& x) { return x[1] / x[0]; },
       {g.away(s34, -2, 2, {0}, 0.5), g.normal({3, 1})})
      .formula([](const In& in) { return naive::div(in[1], in[0]); });
  t.op("neg", [](const V& x) { return -x[0]; }, {g.normal(s34)}).formula([](const In& in) {
    return naive::neg(in[0]);
  });
  t.op("scalar_doubles",
       [](const V& x) {
         const Tensor& a = x[0];
         return ((a + 2.0) * 3.0 - 1.0) / 4.0 + (2.0 - a) + 3.0 / (a + 5.0) + 2.0 * a - (a - 0.5) +
                (1.5 + a) * (a * 0.5);
       },
       {g.uniform(s34, -1, 1)})
      .formula([](const In& in) {
        return naive::map(in[0], [](double a) {
          return ((a + 2) * 3 - 1) / 4 + (2 - a) + 3 / (a + 5) + 2 * a - (a - 0.5) +
                 (1.5 + a) * (a * 0.5);
        });
      });
  // 1/x twice differentiated (second order only before; now also first order and parity).
  t.op("reciprocal", [](const V& x) { return 1.0 / x[0]; }, {g.away(s34, -2, 2, {0}, 0.5)})
      .second_order()
      .formula([](const In& in) { return naive::map(in[0], [](double a) { return 1 / a; }); });
  t.op("cube_via_mul", [](const V& x) { return x[0] * x[0] * x[0]; }, {g.normal(s34)})
      .second_order()
      .formula([](const In& in) { return naive::map(in[0], [](double a) { return a * a * a; }); });

  // ---- arithmetic by hand -----------------------------------------------------------------------
  {
    // (2,3) + (3,): [[1,2,3],[4,5,6]] + [10,20,30]
    const In ab = {f64({1, 2, 3, 4, 5, 6}, {2, 3}), f64({10, 20, 30}, {3})};
    t.values(
         "add_row_by_hand", [](const V& x) { return x[0] + x[1]; }, ab)
        .expect({11, 22, 33, 14, 25, 36}, {2, 3})
        .error("incompatible_names_x", Err::Value, "(2, 3)",
               [] {
                 auto [a, b] = incompatible();
                 (void)(a + b);
               })
        .error("incompatible_names_y", Err::Value, "(4,)",
               [] {
                 auto [a, b] = incompatible();
                 (void)(a + b);
               })
        .error("zero_size_does_not_broadcast_with_3", Err::Value, kBroadcast,
               [] {
                 (void)(cst({}, {0}) + cst({1, 2, 3}, {3}));
               })
        .error("mixed_dtypes", Err::Type, kDtypes, [] {
          auto [a, b] = mixed();
          (void)(a + b);
        });
    t.values(
         "add_row_swapped_by_hand", [](const V& x) { return x[1] + x[0]; }, ab)
        .expect({11, 22, 33, 14, 25, 36}, {2, 3});
  }
  {
    // a = [[1],[2]] (2,1), b = [[10,20,30]] (1,3)
    const In ab = {f64({1, 2}, {2, 1}), f64({10, 20, 30}, {1, 3})};
    // a - b = [[1-10, 1-20, 1-30], [2-10, 2-20, 2-30]]
    t.values(
         "sub_outer_by_hand", [](const V& x) { return x[0] - x[1]; }, ab)
        .expect({-9, -19, -29, -8, -18, -28}, {2, 3})
        .error("incompatible", Err::Value, kBroadcast,
               [] {
                 auto [a, b] = incompatible();
                 (void)(b - a);
               })
        .error("mixed_dtypes", Err::Type, "K::sub: operands have different dtypes float64", [] {
          auto [a, b] = mixed();
          (void)(b - a);
        });
    t.values(
         "add_outer_by_hand", [](const V& x) { return x[0] + x[1]; }, ab)
        .expect({11, 21, 31, 12, 22, 32}, {2, 3});
    t.values(
         "mul_outer_by_hand", [](const V& x) { return x[0] * x[1]; }, ab)
        .expect({10, 20, 30, 20, 40, 60}, {2, 3})
        .error("incompatible", Err::Value, kBroadcast,
               [] {
                 auto [a, b] = incompatible();
                 (void)(a * b);
               })
        .error("mixed_dtypes", Err::Type, kDtypes, [] {
          auto [a, b] = mixed();
          (void)(a * b);
        });
    // b / a = [[10,20,30],[5,10,15]]
    t.values(
         "div_outer_by_hand", [](const V& x) { return x[1] / x[0]; }, ab)
        .expect({10, 20, 30, 5, 10, 15}, {2, 3})
        .error("incompatible", Err::Value, kBroadcast,
               [] {
                 auto [a, b] = incompatible();
                 (void)(a / b);
               })
        .error("mixed_dtypes", Err::Type, kDtypes, [] {
          auto [a, b] = mixed();
          (void)(a / b);
        });
    // a / b = [[1/10, 1/20, 1/30], [2/10, 2/20, 2/30]]
    t.values(
         "div_outer_rev_by_hand", [](const V& x) { return x[0] / x[1]; }, ab)
        .expect({0.1, 0.05, 1.0 / 30, 0.2, 0.1, 2.0 / 30}, {2, 3});
  }
  {
    // A double on either side: x = [1, 2, 4]
    const In x = {f64({1, 2, 4}, {3})};
    t.values(
         "add_double_by_hand", [](const V& v) { return v[0] + 1.0; }, x)
        .expect({2, 3, 5}, {3});
    t.values(
         "double_add_by_hand", [](const V& v) { return 1.0 + v[0]; }, x)
        .expect({2, 3, 5}, {3});
    t.values(
         "sub_double_by_hand", [](const V& v) { return v[0] - 1.0; }, x)
        .expect({0, 1, 3}, {3});
    t.values(
         "double_sub_by_hand", [](const V& v) { return 1.0 - v[0]; }, x)
        .expect({0, -1, -3}, {3});
    t.values(
         "mul_double_by_hand", [](const V& v) { return v[0] * 2.0; }, x)
        .expect({2, 4, 8}, {3});
    t.values(
         "double_mul_by_hand", [](const V& v) { return 2.0 * v[0]; }, x)
        .expect({2, 4, 8}, {3});
    t.values(
         "div_double_by_hand", [](const V& v) { return v[0] / 4.0; }, x)
        .expect({0.25, 0.5, 1}, {3});
    t.values(
         "double_div_by_hand", [](const V& v) { return 8.0 / v[0]; }, x)
        .expect({8, 4, 2}, {3});
    t.values(
         "neg_by_hand", [](const V& v) { return -v[0]; }, x)
        .expect({-1, -2, -4}, {3})
        .error("bool", Err::Type, "K::neg: not defined for bool tensors", [] {
          (void)(-cst({1, 0}, {2}, "bool"));
        });
    // The double becomes a scalar of the tensor's dtype (float64 runs stay float64, exactly).
    t.values("mul_half_by_hand", [](const V& v) { return v[0] * 0.5; }, {f64({1, 2}, {2})})
        .expect({0.5, 1.0}, {2})
        .tol64(1e-15, 0);
  }
  {
    // A rank-0 tensor broadcasts against anything: s = 3, x = [[1,2],[3,4]]
    const In sx = {f64({3}, {}), f64({1, 2, 3, 4}, {2, 2})};
    t.values(
         "mul_scalar_tensor_by_hand", [](const V& v) { return v[0] * v[1]; }, sx)
        .expect({3, 6, 9, 12}, {2, 2});
    t.values(
         "sub_scalar_tensor_by_hand", [](const V& v) { return v[1] - v[0]; }, sx)
        .expect({-2, -1, 0, 1}, {2, 2});
    t.values(
         "add_scalars_by_hand", [](const V& v) { return v[0] + v[0]; }, sx)
        .expect({6}, {});
  }
  // a (2,1,2) = [[[1,2]],[[3,4]]], b (1,3,1) = [[[10],[20],[30]]]:
  // out[i][j][k] = a[i][0][k] + b[0][j][0]
  t.values("add_size_one_dims_by_hand", [](const V& v) { return v[0] + v[1]; },
           {f64({1, 2, 3, 4}, {2, 1, 2}), f64({10, 20, 30}, {1, 3, 1})})
      .expect({11, 12, 21, 22, 31, 32, 13, 14, 23, 24, 33, 34}, {2, 3, 2});
  // (1,1) * (2,3): every element times 2.
  t.values("mul_1x1_by_hand", [](const V& v) { return v[0] * v[1]; },
           {f64({2}, {1, 1}), f64({1, 2, 3, 4, 5, 6}, {2, 3})})
      .expect({2, 4, 6, 8, 10, 12}, {2, 3});
  // (3,) + (1,): a size-1 vector broadcasts along the only axis.
  t.values("add_size_one_vector_by_hand", [](const V& v) { return v[0] + v[1]; },
           {f64({1, 2, 3}, {3}), f64({5}, {1})})
      .expect({6, 7, 8}, {3});
  // Zero-size dims: (0,3) + (3,) -> (0,3); (3,) * (0,3) -> (0,3); (0,1) - (1,3) -> (0,3)
  t.values("add_zero_size_by_hand", [](const V& v) { return v[0] + v[1]; },
           {f64({}, {0, 3}), f64({1, 2, 3}, {3})})
      .expect({}, {0, 3});
  t.values("mul_zero_size_by_hand", [](const V& v) { return v[1] * v[0]; },
           {f64({}, {0, 3}), f64({1, 2, 3}, {3})})
      .expect({}, {0, 3});
  t.values("sub_zero_size_by_hand", [](const V& v) { return v[0] - v[1]; },
           {f64({}, {0, 1}), f64({1, 2, 3}, {1, 3})})
      .expect({}, {0, 3});
  // Integer arithmetic keeps int32: [7,-3,2] and [2,2,5]
  {
    const In ab = {f64({7, -3, 2}, {3}), f64({2, 2, 5}, {3})};
    t.values(
         "add_int32_by_hand", [](const V& v) { return v[0] + v[1]; }, ab)
        .in_dtypes({"int32", "int32"})
        .expect({9, -1, 7}, {3})
        .out_dtype("int32")
        .exact()
        .error("division_needs_float", Err::Type, "K::div: `x` must be a float tensor, got int32",
               [] {
                 (void)(cst({7, -3, 2}, {3}, "int32") / cst({2, 2, 5}, {3}, "int32"));
               });
    t.values(
         "mul_int32_by_hand", [](const V& v) { return v[0] * v[1]; }, ab)
        .in_dtypes({"int32", "int32"})
        .expect({14, -6, 10}, {3})
        .out_dtype("int32")
        .exact();
    t.values("neg_int32_by_hand", [](const V& v) { return -v[0]; }, {ab[0]})
        .in_dtypes({"int32"})
        .expect({-7, 3, -2}, {3})
        .out_dtype("int32")
        .exact();
  }

  // ---- unary math -------------------------------------------------------------------------------
  t.op("square", [](const V& x) { return K::square(x[0]); }, {g.normal(s34)})
      .second_order()
      .formula([](const In& in) { return naive::sq(in[0]); });
  t.op("sqrt", [](const V& x) { return K::sqrt(x[0]); }, {g.uniform(s34, 0.5, 2)})
      .second_order()
      .formula(
          [](const In& in) { return naive::map(in[0], [](double a) { return std::sqrt(a); }); });
  t.op("exp", [](const V& x) { return K::exp(x[0]); }, {g.uniform(s34, -1, 1)})
      .second_order()
      .formula([](const In& in) { return naive::exp(in[0]); });
  t.op("log", [](const V& x) { return K::log(x[0]); }, {g.uniform(s34, 0.5, 2)})
      .second_order()
      .formula([](const In& in) { return naive::log(in[0]); });
  t.op("abs", [](const V& x) { return K::abs(x[0]); }, {g.away(s34, -2, 2, {0})})
      .formula(
          [](const In& in) { return naive::map(in[0], [](double a) { return std::abs(a); }); });
  t.op("pow3", [](const V& x) { return K::pow(x[0], 3.0); }, {g.normal(s34)})
      .formula([](const In& in) { return naive::map(in[0], [](double a) { return a * a * a; }); });
  t.op("pow2_5", [](const V& x) { return K::pow(x[0], 2.5); }, {g.uniform(s34, 0.5, 2)})
      .second_order()
      .formula([](const In& in) {
        return naive::map(in[0], [](double a) { return std::pow(a, 2.5); });
      });
  t.op("pow_neg1_5", [](const V& x) { return K::pow(x[0], -1.5); }, {g.uniform(s34, 0.5, 2)})
      .formula([](const In& in) {
        return naive::map(in[0], [](double a) { return std::pow(a, -1.5); });
      });
  t.op("clip", [](const V& x) { return K::clip(x[0], -0.5, 0.5); },
       {g.away(s34, -1.5, 1.5, {-0.5, 0.5}, 0.05)})
      .formula([](const In& in) { return naive::clip(in[0], -0.5, 0.5); });
  // Keras 2.2.4: max_value < min_value -> max_value = min_value: clip(x, 0.5, 0.5) * x
  t.op("clip_swapped_bounds", [](const V& x) { return K::clip(x[0], 0.5, -1.0) * x[0]; },
       {g.away(s34, -1.5, 1.5, {0.5}, 0.05)})
      .formula([](const In& in) { return naive::mul(naive::clip(in[0], 0.5, 0.5), in[0]); });
  {
    auto xy = g.separated(s34, s34);
    t.op(
         "maximum", [](const V& x) { return K::maximum(x[0], x[1]); }, xy)
        .formula([](const In& in) {
          return naive::zip(in[0], in[1], [](double a, double b) { return std::max(a, b); });
        });
    t.op(
         "minimum", [](const V& x) { return K::minimum(x[0], x[1]); }, xy)
        .formula([](const In& in) {
          return naive::zip(in[0], in[1], [](double a, double b) { return std::min(a, b); });
        });
    auto xr = g.separated(s34, {4});
    t.op(
         "maximum_row", [](const V& x) { return K::maximum(x[0], x[1]); }, xr)
        .ref_gradcheck()
        .formula([](const In& in) {
          return naive::zip(in[0], in[1], [](double a, double b) { return std::max(a, b); });
        });
    t.op(
         "minimum_row", [](const V& x) { return K::minimum(x[1], x[0]); }, xr)
        .formula([](const In& in) {
          return naive::zip(in[1], in[0], [](double a, double b) { return std::min(a, b); });
        });
  }
  t.op("maximum_double", [](const V& x) { return K::maximum(x[0], 0.3); },
       {g.away(s34, -2, 2, {0.3})})
      .formula([](const In& in) {
        return naive::map(in[0], [](double a) { return std::max(a, 0.3); });
      });
  t.op("minimum_double", [](const V& x) { return K::minimum(x[0], -0.2); },
       {g.away(s34, -2, 2, {-0.2})})
      .formula([](const In& in) {
        return naive::map(in[0], [](double a) { return std::min(a, -0.2); });
      });
  // Second-order compositions around the kinks of abs, maximum and clip.
  t.op("abs_times_square", [](const V& x) { return K::abs(x[0]) * K::square(x[0]); },
       {g.away(s34, -2, 2, {0})})
      .second_order()
      .formula([](const In& in) {
        return naive::map(in[0], [](double a) { return std::abs(a) * a * a; });
      });
  t.op("maximum_times_x", [](const V& x) { return K::maximum(x[0], 0.1) * x[0]; },
       {g.away(s34, -2, 2, {0.1})})
      .second_order()
      .formula([](const In& in) {
        return naive::map(in[0], [](double a) { return std::max(a, 0.1) * a; });
      });
  t.op("clip_times_x", [](const V& x) { return K::clip(x[0], -0.5, 0.7) * K::exp(x[0]); },
       {g.away(s34, -1.5, 1.5, {-0.5, 0.7}, 0.05)})
      .second_order()
      .formula([](const In& in) {
        return naive::mul(naive::clip(in[0], -0.5, 0.7), naive::exp(in[0]));
      });

  // ---- unary math by hand -----------------------------------------------------------------------
  // (-2)^2 = 4, 0.5^2 = 0.25, 3^2 = 9
  t.values("square_by_hand", [](const V& x) { return K::square(x[0]); }, {f64({-2, 0.5, 3}, {3})})
      .expect({4, 0.25, 9}, {3})
      .error("bool", Err::Type, "K::square: not defined for bool tensors", [] {
        (void)K::square(cst({1, 0}, {2}, "bool"));
      });
  // sqrt(4) = 2, sqrt(0) = 0, sqrt(-1) -> sqrt(clip(-1, 0, inf)) = 0, sqrt(2.25) = 1.5
  t.values("sqrt_negative_gives_zero", [](const V& x) { return K::sqrt(x[0]); },
           {f64({4, 0, -1, 2.25}, {4})})
      .expect({2, 0, 0, 1.5}, {4})
      .error("int", Err::Type, "K::sqrt: `x` must be a float tensor, got int32",
             [] { (void)K::sqrt(cst({4}, {1}, "int32")); });
  // <cmath>: exp(0) = 1, e, 1/e, e^2
  t.values("exp_by_hand", [](const V& x) { return K::exp(x[0]); }, {f64({0, 1, -1, 2}, {4})})
      .expect({1, std::exp(1.0), std::exp(-1.0), std::exp(2.0)}, {4})
      .error("int", Err::Type, "K::exp: `x` must be a float tensor, got int32",
             [] { (void)K::exp(cst({1}, {1}, "int32")); });
  // log(1) = 0, log(4) = 1.386294... (<cmath>), log(0) = -inf, log(-1) = NaN, log(0.5)
  t.values("log_including_zero_and_negative", [](const V& x) { return K::log(x[0]); },
           {f64({1, 4, 0, -1, 0.5}, {5})})
      .expect({0, std::log(4.0), -kInf, kNaN, std::log(0.5)}, {5})
      .error("int", Err::Type, "K::log: `x` must be a float tensor, got int64",
             [] { (void)K::log(cst({1}, {1}, "int64")); });
  t.values("abs_by_hand", [](const V& x) { return K::abs(x[0]); }, {f64({-1.5, 0, 2}, {3})})
      .expect({1.5, 0, 2}, {3})
      .error("bool", Err::Type, "K::abs: not defined for bool tensors", [] {
        (void)K::abs(cst({1, 0}, {2}, "bool"));
      });
  t.values("abs_int32_by_hand", [](const V& x) { return K::abs(x[0]); }, {f64({-4, 3}, {2})})
      .in_dtypes({"int32"})
      .expect({4, 3}, {2})
      .out_dtype("int32")
      .exact();
  // (-2)^3 = -8, 0.5^3 = 0.125, 3^3 = 27, 0^3 = 0
  t.values("pow3_by_hand", [](const V& x) { return K::pow(x[0], 3.0); },
           {f64({-2, 0.5, 3, 0}, {4})})
      .expect({-8, 0.125, 27, 0}, {4})
      .error("pow_needs_float", Err::Type, "K::pow: `x` must be a float tensor", [] {
        (void)K::pow(cst({1, 2}, {2}, "int32"), 2.0);
      });
  // 4^0.5 = 2, 9^-1 = 1/9
  t.values("pow_half_by_hand", [](const V& x) { return K::pow(x[0], 0.5); }, {f64({4}, {1})})
      .expect({2}, {1});
  t.values("pow_minus_one_by_hand", [](const V& x) { return K::pow(x[0], -1.0); }, {f64({9}, {1})})
      .expect({1.0 / 9}, {1});
  {
    const In x = {f64({-2, -0.5, 0.5, 2}, {4})};
    t.values(
         "clip_by_hand", [](const V& v) { return K::clip(v[0], -1, 1); }, x)
        .expect({-1, -0.5, 0.5, 1}, {4})
        .error("nan_bound", Err::Value, "K::clip: min_value and max_value must not be NaN",
               [] { (void)K::clip(cst({1}, {1}), kNaN, 1.0); })
        .error("bool", Err::Type, "K::clip: not defined for bool tensors",
               [] { (void)K::clip(cst({1}, {1}, "bool"), 0.0, 1.0); });
    // Keras 2.2.4: max_value < min_value -> max_value = min_value, so everything becomes 1.
    t.values(
         "clip_swapped_bounds_by_hand", [](const V& v) { return K::clip(v[0], 1, 0); }, x)
        .expect({1, 1, 1, 1}, {4});
    // Infinite bounds.
    t.values(
         "clip_infinite_bound_by_hand", [](const V& v) { return K::clip(v[0], 0, kInf); }, x)
        .expect({0, 0, 0.5, 2}, {4});
    // By hand: NaN stays NaN (TF's clip_by_value is minimum then maximum, both keep NaN),
    // infinities go to the bounds, signed zeros inside the bounds are kept. 18 elements: the
    // cpu kernel's 8-wide vector loop and its scalar tail both see NaN and the bounds.
    const double n = kNaN;
    t.values(
         "clip_special_values_by_hand", [](const V& v) { return K::clip(v[0], -1, 1); },
         {f64({n, -kInf, kInf, -2, -0.0, 0, 0.5, 3, n, -kInf, kInf, -0.5, 1, -1, n, -3, 2, -0.0},
              {18})})
        .expect({n, -1, 1, -1, -0.0, 0, 0.5, 1, n, -1, 1, -0.5, 1, -1, n, -1, 1, -0.0}, {18})
        .exact()
        .signed_zeros();
  }
  {
    const In xy = {f64({1, 5, 3}, {3}), f64({4, 2, 3}, {3})};
    t.values(
         "maximum_by_hand", [](const V& v) { return K::maximum(v[0], v[1]); }, xy)
        .expect({4, 5, 3}, {3})
        .error("mixed_dtypes", Err::Type, "K::maximum: operands have different dtypes", [] {
          auto [a, b] = mixed();
          (void)K::maximum(a, b);
        });
    t.values(
         "minimum_by_hand", [](const V& v) { return K::minimum(v[0], v[1]); }, xy)
        .expect({1, 2, 3}, {3})
        .error("mixed_dtypes", Err::Type, "K::minimum: operands have different dtypes", [] {
          auto [a, b] = mixed();
          (void)K::minimum(a, b);
        });
    t.values("maximum_double_by_hand", [](const V& v) { return K::maximum(v[0], 2.5); }, {xy[0]})
        .expect({2.5, 5, 3}, {3});
    t.values("minimum_double_by_hand", [](const V& v) { return K::minimum(v[0], 2.5); }, {xy[0]})
        .expect({1, 2.5, 2.5}, {3});
    // Broadcast (2,1) against (3,): max([[0],[4]], [1,5,3]) = [[1,5,3],[4,5,4]]
    t.values("maximum_broadcast_by_hand", [](const V& v) { return K::maximum(v[0], v[1]); },
             {f64({0, 4}, {2, 1}), xy[0]})
        .expect({1, 5, 3, 4, 5, 4}, {2, 3});
  }

  // ---- comparisons: bool results, x = [1,2,3] against y = [2,2,2] or the double 2 ---------------
  {
    const In xy = {f64({1, 2, 3}, {3}), f64({2, 2, 2}, {3})};
    struct Cmp {
      const char* name;  // K::<name> (the _double variants compare with a double)
      Fn f;
      std::vector<double> want;
    };
    const std::vector<Cmp> cmps = {
        {"equal", [](const V& v) { return K::equal(v[0], v[1]); }, {0, 1, 0}},
        {"not_equal", [](const V& v) { return K::not_equal(v[0], v[1]); }, {1, 0, 1}},
        {"greater", [](const V& v) { return K::greater(v[0], v[1]); }, {0, 0, 1}},
        {"greater_equal", [](const V& v) { return K::greater_equal(v[0], v[1]); }, {0, 1, 1}},
        {"less", [](const V& v) { return K::less(v[0], v[1]); }, {1, 0, 0}},
        {"less_equal", [](const V& v) { return K::less_equal(v[0], v[1]); }, {1, 1, 0}},
        {"equal_double", [](const V& v) { return K::equal(v[0], 2.0); }, {0, 1, 0}},
        {"not_equal_double", [](const V& v) { return K::not_equal(v[0], 2.0); }, {1, 0, 1}},
        {"greater_double", [](const V& v) { return K::greater(v[0], 2.0); }, {0, 0, 1}},
        {"greater_equal_double", [](const V& v) { return K::greater_equal(v[0], 2.0); }, {0, 1, 1}},
        {"less_double", [](const V& v) { return K::less(v[0], 2.0); }, {1, 0, 0}},
        {"less_equal_double", [](const V& v) { return K::less_equal(v[0], 2.0); }, {1, 1, 0}},
    };
    for (const Cmp& c : cmps) {
      OpRow& r = t.values(std::string(c.name) + "_by_hand", c.f, xy)
                     .expect(c.want, {3})
                     .out_dtype("bool")
                     .exact();
      const std::string name = c.name;
      if (name.find("_double") != std::string::npos) continue;
      // Mixed dtypes are a TypeError naming the op; f applies the op to its two inputs.
      r.error("mixed_dtypes", Err::Type, "K::" + name + ": operands have different dtypes",
              [f = c.f] {
                auto [a, b] = mixed();
                (void)f({a, b});
              });
    }
    // Broadcast comparison (2,1) vs (3,): [[2],[0]] > [1,2,3] = [[1,0,0],[0,0,0]]
    t.values("greater_broadcast_by_hand", [](const V& v) { return K::greater(v[0], v[1]); },
             {f64({2, 0}, {2, 1}), xy[0]})
        .expect({1, 0, 0, 0, 0, 0}, {2, 3})
        .out_dtype("bool")
        .exact()
        .error("ordering_bools", Err::Type, "K::greater: not defined for bool tensors", [] {
          const Tensor b = cst({1, 0}, {2}, "bool");
          (void)K::greater(b, b);
        });
  }
  t.values("sign_by_hand", [](const V& x) { return K::sign(x[0]); }, {f64({-3, 0, 2.5, -0.1}, {4})})
      .expect({-1, 0, 1, -1}, {4})
      .exact()
      .error("bool", Err::Type, "K::sign: not defined for bool tensors", [] {
        (void)K::sign(cst({1, 0}, {2}, "bool"));
      });
  // np.round: 0.5->0, 1.5->2, 2.5->2, -0.5->-0, -1.5->-2, 0.4->0, -2.6->-3, 3.5->4; round(-0.5)
  // is -0.0.
  t.values("round_half_to_even", [](const V& x) { return K::round(x[0]); },
           {f64({0.5, 1.5, 2.5, -0.5, -1.5, 0.4, -2.6, 3.5}, {8})})
      .expect({0, 2, 2, -0.0, -2, 0, -3, 4}, {8})
      .exact()
      .signed_zeros()
      .error("round_needs_float", Err::Type, "K::round: `x` must be a float tensor",
             [] { (void)K::round(cst({1}, {1}, "int32")); });

  // ---- parity-only: bigger shapes (parallel kernels; inputs made on first use), zero sizes,
  // scalars, size-1 dims
  t.parity_only(
       "big_add_row", [](const V& x) { return x[0] + x[1]; },
       [](Gen& r) {
         return In{r.normal({400, 250}), r.normal({250})};
       })
      .formula([](const In& in) { return naive::add(in[0], in[1]); });
  t.parity_only(
       "big_mul_col", [](const V& x) { return x[0] * x[1]; },
       [](Gen& r) {
         return In{r.normal({400, 250}), r.normal({400, 1})};
       })
      .formula([](const In& in) { return naive::mul(in[0], in[1]); });
  t.parity_only(
       "big_unary_chain",
       [](const V& x) {
         const Tensor& a = x[0];
         return K::exp(K::tanh(a)) + K::sigmoid(a) * K::sqrt(K::abs(a)) +
                K::log(K::square(a) + 1.0) - K::relu(a, {.alpha = 0.1, .max_value = 1.0}) +
                K::clip(-a, -0.5, 0.5);
       },
       [](Gen& r) {
         return In{r.normal({300, 300})};
       })
      .formula([](const In& in) {
        return naive::map(in[0], [](double a) {
          return std::exp(std::tanh(a)) + naive::sigmoid(a) * std::sqrt(std::abs(a)) +
                 std::log(a * a + 1) - naive::relu(a, 0.1, 1.0) + std::min(std::max(-a, -0.5), 0.5);
        });
      });
  t.parity_only("add_5x4_row", [](const V& x) { return x[0] + x[1]; },
                {g.normal({5, 4}), g.normal({4})})
      .formula([](const In& in) { return naive::add(in[0], in[1]); });
  t.parity_only("mul_5x1_1x4", [](const V& x) { return x[0] * x[1]; },
                {g.normal({5, 1}), g.normal({1, 4})})
      .formula([](const In& in) { return naive::mul(in[0], in[1]); });
  t.parity_only("div_sub_5x4_broadcast",
                [](const V& x) { return (x[0] - x[1]) / (x[1] * x[1] + 1.0); },
                {g.normal({5, 4}), g.normal({5, 1})})
      .formula([](const In& in) {
        return naive::div(naive::sub(in[0], in[1]), naive::add(naive::sq(in[1]), 1.0));
      });
  t.parity_only("zero_add_row", [](const V& x) { return x[0] + x[1]; },
                {g.normal({0, 4}), g.normal({4})})
      .expect({}, {0, 4});
  t.parity_only("zero_unary",
                [](const V& x) { return K::relu(K::exp(x[0]) * K::tanh(x[0]) - x[0]); },
                {g.normal({0, 4})})
      .expect({}, {0, 4});
  t.parity_only("scalar_ops",
                [](const V& x) { return K::exp(x[0]) * x[1] + K::sigmoid(x[1]) / (x[0] + 3.0); },
                {g.uniform({}, -1, 1), g.normal({})})
      .formula([](const In& in) {
        const double a = in[0].item(), b = in[1].item();
        return naive::scalar(std::exp(a) * b + naive::sigmoid(b) / (a + 3));
      });
  t.parity_only("size1_outer", [](const V& x) { return x[0] * x[1] - x[1]; },
                {g.normal({1, 4}), g.normal({5, 1})})
      .formula([](const In& in) { return naive::sub(naive::mul(in[0], in[1]), in[1]); });
  t.parity_only("size1_11", [](const V& x) { return x[1] + x[0]; },
                {g.normal({1, 1}), g.normal({5, 4})})
      .formula([](const In& in) { return naive::add(in[1], in[0]); });
  t.parity_only("size1_middle", [](const V& x) { return x[0] / (x[1] * x[1] + 1.0); },
                {g.normal({3, 1, 4}), g.normal({3, 5, 1})})
      .formula([](const In& in) { return naive::div(in[0], naive::add(naive::sq(in[1]), 1.0)); });
  // Non-float outputs are compared exactly (no gradients).
  t.parity_only("compare_ops",
                [](const V& x) {
                  return K::cast(K::greater(x[0], x[1]), "int32") +
                         K::cast(K::less_equal(x[0], 0.0), "int32") * 2 +
                         K::cast(K::equal(x[0], x[0]), "int32") * 4 +
                         K::cast(K::not_equal(x[1], x[0]), "int32") * 8 +
                         K::cast(K::greater_equal(x[1], 0.5), "int32") * 16 +
                         K::cast(K::less(x[1], x[0]), "int32") * 32;
                },
                {g.normal({40, 30}), g.normal({30})})
      .out_dtype("int32")
      .formula([](const In& in) {
        return naive::zip(in[0], in[1], [](double a, double b) {
          return (a > b) + (a <= 0) * 2 + (a == a) * 4 + (b != a) * 8 + (b >= 0.5) * 16 +
                 (b < a) * 32;
        });
      })
      .exact();
  // round half to even (std::nearbyint in the default rounding mode), sign, and a cast to int32
  // that truncates toward zero (std::trunc).
  t.parity_only("round_sign_casts",
                [](const V& x) {
                  return K::round(x[0] * 3.0) + K::sign(x[0]) +
                         K::cast(K::cast(x[0] * 4.0, "int32"), K::dtype(x[0]));
                },
                {g.normal({5, 7})})
      .formula([](const In& in) {
        return naive::map(in[0], [](double a) {
          return std::nearbyint(a * 3) + (a > 0) - (a < 0) + std::trunc(a * 4);
        });
      });
  // ---- sin, cos, clip with None and tensor bounds (issue 12) ------------------------------------
  t.op("sin", [](const V& x) { return K::sin(x[0]); }, {g.normal(s34, 2.0)})
      .second_order()
      .error("int32", Err::Type, "K::sin: `x` must be a float tensor, got int32",
             [] { (void)K::sin(cst({1}, {1}, "int32")); })
      .formula(
          [](const In& in) { return naive::map(in[0], [](double v) { return std::sin(v); }); });
  t.op("cos", [](const V& x) { return K::cos(x[0]); }, {g.normal(s34, 2.0)})
      .second_order()
      .error("bool", Err::Type, "K::cos: `x` must be a float tensor, got bool",
             [] { (void)K::cos(cst({1}, {1}, "bool")); })
      .formula(
          [](const In& in) { return naive::map(in[0], [](double v) { return std::cos(v); }); });
  // by hand: sin(pi/2) = 1, sin(pi/6) = 0.5, sin(0) = 0; cos(pi) = -1, cos(pi/3) = 0.5, cos(0) = 1.
  t.values("sin_by_hand", [](const V& v) { return K::sin(v[0]); },
           {f64({1.5707963267948966, 0.5235987755982988, 0}, {3})})
      .expect({1, 0.5, 0}, {3});
  t.values("cos_by_hand", [](const V& v) { return K::cos(v[0]); },
           {f64({3.141592653589793, 1.0471975511965976, 0}, {3})})
      .expect({-1, 0.5, 1}, {3});
  // by hand: clip(x, None, 1) and clip(x, -1, None) of [-2, 0.5, 3].
  t.values("clip_none_min_by_hand", [](const V& v) { return K::clip(v[0], std::nullopt, 1.0); },
           {f64({-2, 0.5, 3}, {3})})
      .expect({-2, 0.5, 1}, {3});
  t.values("clip_none_max_by_hand", [](const V& v) { return K::clip(v[0], -1.0, std::nullopt); },
           {f64({-2, 0.5, 3}, {3})})
      .expect({-1, 0.5, 3}, {3});
  // by hand: x [-2, 0.5, 3] between per-element bounds [-1, 0, 0.5] and 1: [-1, 0.5, 1]. The
  // gradient goes to min for x[0], to x for x[1], to max for x[2] (each 0.5 or more from a
  // kink).
  t.op("clip_tensor_bounds", [](const V& v) { return K::clip(v[0], v[1], v[2]); },
       {f64({-2, 0.5, 3}, {3}), f64({-1, 0, 0.5}, {3}), f64({1}, {1})})
      .expect({-1, 0.5, 1}, {3})
      .error("dtype", Err::Type, "K::clip: operands have different dtypes",
             [] { (void)K::clip(cst({1}, {1}), cst({0}, {1}, "float64"), cst({2}, {1})); });
  // by hand, TF's order max(min(x, max), min): with max 0 < min 1 every element is 1.
  t.values("clip_tensor_bounds_crossed", [](const V& v) { return K::clip(v[0], v[1], v[2]); },
           {f64({0.5, -3, 3}, {3}), f64({1}, {1}), f64({0}, {1})})
      .expect({1, 1, 1}, {3})
      .error("enlarges_x", Err::Value, "K::clip: the bounds (2, 3) and (1,) would broadcast x (3,)",
             [] {
               (void)K::clip(cst({1, 2, 3}, {3}), cst(std::vector<double>(6, 0), {2, 3}),
                             cst({1}, {1}));
             });
  t.op("clip_tensor_bounds_random", [](const V& v) { return K::clip(v[0], v[1], v[1] + 1.0); },
       {g.away(s34, -3, 3, {-0.5, 0.5}, 0.1), f64({-0.5}, {})})
      .formula([](const In& in) { return naive::clip(in[0], -0.5, 0.5); });
  return t.take();
}

}  // namespace ktape::op_rows
