// Core rows: identity, stop_gradient, cast, zeros/ones/eye, zeros_like/ones_like, shape, size,
// print_tensor and the random sources (ops/core.hpp). Provenance of expected values: "by hand" =
// written out next to the values; "formula" = the naive float64 reference (op_rows/naive.hpp).
// Variables' semantics (get/set_value, placeholders, uids, random statistics, seeds) are ordinary
// tests in test_ops.cpp.
#include <cmath>

#include "op_rows/op_row.hpp"

namespace ktape::op_rows {

std::vector<OpRow> core_rows() {
  Rows t("core");
  Gen g(20240615);

  t.op("identity", [](const V& x) { return K::identity(x[0]) * x[0]; }, {g.normal({3, 4})})
      .formula([](const In& in) { return naive::sq(in[0]); });
  {
    const In x = {f64({1.7, -1.7, 0, 2.5}, {4})};
    t.values(
         "identity_by_hand", [](const V& v) { return K::identity(v[0]); }, x)
        .expect({1.7, -1.7, 0, 2.5}, {4});
    t.values(
         "stop_gradient_by_hand", [](const V& v) { return K::stop_gradient(v[0]); }, x)
        .expect({1.7, -1.7, 0, 2.5}, {4});
    // tf.cast truncates toward zero
    t.values(
         "cast_to_int32_truncates", [](const V& v) { return K::cast(v[0], "int32"); }, x)
        .expect({1, -1, 0, 2}, {4})
        .out_dtype("int32")
        .exact()
        .error("unknown_dtype", Err::Type, "K::cast: unsupported dtype 'float128'",
               [] { (void)K::cast(cst({1}, {1}), "float128"); });
    t.values(
         "cast_to_bool", [](const V& v) { return K::cast(v[0], "bool"); }, x)
        .expect({1, 1, 0, 1}, {4})
        .out_dtype("bool")
        .exact();
    // float32 inputs are 1.7 rounded to float32 (relative error below 1e-7).
    t.values(
         "cast_to_float64", [](const V& v) { return K::cast(v[0], "float64"); }, x)
        .expect({1.7, -1.7, 0, 2.5}, {4})
        .out_dtype("float64")
        .tol32(1e-7, 0)
        .tol64(0, 0);
  }

  // ---- creation: no inputs; floatx (float32) unless a dtype is given ----------------------------
  t.values(
       "zeros_by_hand",
       [](const V&) {
         return K::zeros({2, 3});
       },
       In{})
      .expect({0, 0, 0, 0, 0, 0}, {2, 3})
      .out_dtype("float32")
      .exact()
      .error("unknown_dim", Err::Value, "K::zeros: shape (None, 3) must be fully defined", [] {
        (void)K::zeros({K::None, 3});
      });
  t.values(
       "ones_by_hand", [](const V&) { return K::ones({3}); }, In{})
      .expect({1, 1, 1}, {3})
      .out_dtype("float32")
      .exact()
      .error("negative_dim", Err::Value,
             "K::ones: shape (3, None) must be fully defined with non-negative dims", [] {
               (void)K::ones({3, -2});
             });
  t.values(
       "ones_int32_by_hand", [](const V&) { return K::ones({2}, {.dtype = "int32"}); }, In{})
      .expect({1, 1}, {2})
      .out_dtype("int32")
      .exact();
  t.values(
       "eye_by_hand", [](const V&) { return K::eye(3); }, In{})
      .expect({1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3})
      .out_dtype("float32")
      .exact()
      .error("negative_size", Err::Value, "K::eye: size must be non-negative, got (-1, 2)",
             [] { (void)K::eye(-1, 2); });
  t.values(
       "eye_rectangular_by_hand", [](const V&) { return K::eye(2, 3); }, In{})
      .expect({1, 0, 0, 0, 1, 0}, {2, 3})
      .out_dtype("float32")
      .exact();
  // zero-size shapes give a constant
  t.values(
       "zeros_zero_size",
       [](const V&) {
         return K::zeros({0, 3});
       },
       In{})
      .expect({}, {0, 3})
      .out_dtype("float32");
  // Keras 2.2.4 keeps x's dtype: zeros_like of an int32 [[1,2],[3,4]] is int32
  t.values("zeros_like_int32", [](const V& v) { return K::zeros_like(v[0]); },
           {f64({1, 2, 3, 4}, {2, 2})})
      .in_dtypes({"int32"})
      .expect({0, 0, 0, 0}, {2, 2})
      .out_dtype("int32")
      .exact()
      .error("unknown_dtype", Err::Type, "unsupported dtype 'int3'",
             [] { (void)K::zeros_like(cst({1}, {1}), {.dtype = "int3"}); });
  t.values("ones_like_by_hand", [](const V& v) { return K::ones_like(v[0]); },
           {f64({5, 6, 7}, {3})})
      .expect({1, 1, 1}, {3})
      .exact()
      .error("unknown_dtype", Err::Type, "unsupported dtype 'float16x'",
             [] { (void)K::ones_like(cst({1}, {1}), {.dtype = "float16x"}); });
  t.values("ones_like_float64", [](const V& v) { return K::ones_like(v[0], {.dtype = "float64"}); },
           {f64({1, 2, 3, 4}, {2, 2})})
      .in_dtypes({"int32"})
      .expect({1, 1, 1, 1}, {2, 2})
      .out_dtype("float64")
      .exact();

  // ---- shape and size: int32 --------------------------------------------------------------------
  {
    const In x = {f64({1, 2, 3, 4, 5, 6}, {2, 3})};
    t.values(
         "shape_by_hand", [](const V& v) { return K::shape(v[0]); }, x)
        .expect({2, 3}, {2})
        .out_dtype("int32")
        .exact();
    t.values(
         "size_by_hand", [](const V& v) { return K::size(v[0]); }, x)
        .expect({6}, {})
        .out_dtype("int32")
        .exact();
    // A (None, 3) placeholder fed (5, 3): the shape and size of the fed value.
    const In y = {f64(std::vector<double>(15, 0.5), {5, 3})};
    t.values(
         "shape_unknown_batch", [](const V& v) { return K::shape(v[0]); }, y)
        .none_batch()
        .expect({5, 3}, {2})
        .out_dtype("int32")
        .exact();
    t.values(
         "size_unknown_batch", [](const V& v) { return K::size(v[0]); }, y)
        .none_batch()
        .expect({15}, {})
        .out_dtype("int32")
        .exact();
  }

  // print_tensor passes its value through (the logging itself: PrintTensor in test_ops.cpp).
  // [1, 2.5, -4] * 2 + 1 = [3, 6, -7]
  t.values(
       "print_tensor_passes_value",
       [](const V& v) { return K::print_tensor(v[0] * 2.0, "print_tensor_passes_value: ") + 1.0; },
       {f64({1.0, 2.5, -4.0}, {3})})
      .expect({3, 6, -7}, {3});

  // ---- random sources: degenerate distributions have exact values -------------------------------
  // By hand: uniform on [2.5, 2.5) is 2.5 (low + (high - low) * u); normal and truncated normal
  // with stddev 0 are the mean. Statistics of real draws: Core.Random* in test_ops.cpp.
  t.values(
       "random_uniform_degenerate",
       [](const V&) {
         return K::random_uniform({2, 3}, 2.5, 2.5, {.seed = 1});
       },
       In{})
      .expect({2.5, 2.5, 2.5, 2.5, 2.5, 2.5}, {2, 3})
      .out_dtype("float32")
      .exact()
      .error("int_dtype", Err::Type, "K::random_uniform: dtype must be a float type",
             [] { (void)K::random_uniform({2}, 0, 1, {.dtype = "int32"}); })
      .error("unknown_dim", Err::Value, "K::random_uniform: shape (None,) must be fully defined",
             [] { (void)K::random_uniform({K::None}); });
  t.values(
       "random_normal_degenerate",
       [](const V&) { return K::random_normal({4}, -1.5, 0.0, {.dtype = "float64", .seed = 2}); },
       In{})
      .expect({-1.5, -1.5, -1.5, -1.5}, {4})
      .out_dtype("float64")
      .exact()
      .error("int_dtype", Err::Type, "K::random_normal: dtype must be a float type",
             [] { (void)K::random_normal({2}, 0, 1, {.dtype = "int32"}); });
  t.values(
       "truncated_normal_degenerate",
       [](const V&) { return K::truncated_normal({3}, 0.25, 0.0, {.seed = 3}); }, In{})
      .expect({0.25, 0.25, 0.25}, {3})
      .out_dtype("float32")
      .exact()
      .error("int_dtype", Err::Type, "K::truncated_normal: dtype must be a float type",
             [] { (void)K::truncated_normal({2}, 0, 1, {.dtype = "int64"}); });
  // By hand: binomial draws are 1 where a uniform draw in [0, 1) is <= p: p = 0 gives zeros
  // (almost surely; a draw of exactly 0 has probability 2^-53), p = 1 gives ones.
  t.values(
       "random_binomial_p1",
       [](const V&) {
         return K::random_binomial({2, 2}, 1.0, {.dtype = "float64", .seed = 4});
       },
       In{})
      .expect({1, 1, 1, 1}, {2, 2})
      .out_dtype("float64")
      .exact()
      .error("int_dtype", Err::Type, "K::random_binomial: dtype must be a float type",
             [] { (void)K::random_binomial({2}, 0.5, {.dtype = "int32"}); })
      .error("nan", Err::Value, "K::random_binomial: p is NaN",
             [] { (void)K::random_binomial({2}, std::nan("")); })
      .error("unknown_dim", Err::Value, "K::random_binomial: shape (None,) must be fully defined",
             [] { (void)K::random_binomial({K::None}, 0.5); });
  t.values(
       "random_binomial_p0", [](const V&) { return K::random_binomial({3}, 0.0, {.seed = 5}); },
       In{})
      .expect({0, 0, 0}, {3})
      .out_dtype("float32")
      .exact();
  return t.take();
}

}  // namespace ktape::op_rows
