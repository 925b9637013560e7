// pool rows: pooling (max, average, their gradients, max pooling fused with relu's gradient),
// bias_add and batch normalization, padding, resizing and repeat_elements: the rest of the
// sliding-window family of tests/op_rows/conv_rows.cpp, with the same provenance of expected
// values ("NumPy" = tests/data/conv_reference.py on its ramp inputs, "by hand" = written out
// next to the values, "formula" = op_rows/naive_conv.hpp on the row's random inputs).
#include <cmath>
#include <string>
#include <vector>

#include "op_rows/naive_conv.hpp"
#include "op_rows/op_row.hpp"

namespace ktape::op_rows {

namespace {

// pool2d max 3x3 stride 2 same: shape (1, 3, 3, 2)
const std::vector<double> kMaxPoolSame = {0.0, 1.5,  0.5, 1.0, 0.75, 1.25, 1.25, 1.5,  1.5,
                                          1.5, 0.75, 1.5, 0.5, 1.0,  1.0,  1.5,  1.25, 1.5};
// pool2d avg 3x3 stride 2 same: shape (1, 3, 3, 2)
const std::vector<double> kAvgPoolSame = {-0.75,
                                          0.1875,
                                          -0.375,
                                          -0.25,
                                          0.0,
                                          0.125,
                                          0.041666666667,
                                          0.166666666667,
                                          0.055555555556,
                                          0.0,
                                          -0.291666666667,
                                          -0.166666666667,
                                          -0.25,
                                          -0.125,
                                          0.125,
                                          0.25,
                                          0.5,
                                          -0.1875};
// pool2d avg 2x2 stride 2 valid channels_first: shape (1, 2, 2, 2)
const std::vector<double> kAvgPoolValidCF = {-0.3125, -0.0625, 0.125, -0.4375,
                                             -0.4375, -0.1875, 0.0,   0.25};
// pool3d max 2x2x2 stride 2 same: shape (1, 2, 2, 2, 2)
const std::vector<double> kMaxPool3dSame = {1.5,  1.25, 1.25, 1.5,  0.25, 1.0, 0.5,  1.25,
                                            0.75, 1.5,  1.0,  -0.5, 1.5,  0.0, -1.5, 0.25};

}  // namespace

std::vector<OpRow> pool_rows() {
  Rows t("pool");
  Gen g(20241125);

  // ---- pooling -------------------------------------------------------------------------------
  t.values("pool2d_max_same",
           [](const V& x) {
             return K::pool2d(x[0], {3, 3}, {.strides = {2, 2}, .padding = "same"});
           },
           {ramp({1, 5, 5, 2}, 13)})
      .expect(kMaxPoolSame, {1, 3, 3, 2})  // NumPy
      .error("mode", Err::Value,
             "K::pool2d: Invalid pooling mode: \"min\" (expected \"max\" or \"avg\")",
             [] {
               (void)K::pool2d(ph({2, 5, 5, 3}), {2, 2}, {.pool_mode = "min"});
             })
      .error("padding", Err::Value, "K::pool2d: Invalid padding: \"causal\"",
             [] {
               (void)K::pool2d(ph({2, 5, 5, 3}), {2, 2}, {.padding = "causal"});
             })
      .error("pool_huge", Err::Value,
             "K::pool2d: `pool_size` (4294967296, 4294967296) must hold values from 1 to",
             [] {
               (void)K::pool2d(ph({1, 4, 4, 1}), {std::int64_t{1} << 32, std::int64_t{1} << 32},
                               {.padding = "same"});
             })
      .error("pool_size", Err::Value, "K::pool2d: pool_size (2,) must have 2 entries",
             [] {
               (void)K::pool2d(ph({2, 5, 5, 3}), {2});
             })
      .error("too_small", Err::Value,
             "K::pool2d: input of shape (2, 5, 5, 3) is smaller than the window",
             [] {
               (void)K::pool2d(ph({2, 5, 5, 3}), {6, 2});
             })
      .error("data_format", Err::Value, "channels_middle",
             [] {
               (void)K::pool2d(ph({2, 5, 5, 3}), {2, 2}, {.data_format = "channels_middle"});
             })
      .error("int_dtype", Err::Type, "K::pool2d: `x` must be a float tensor", [] {
        (void)K::pool2d(ph({2, 5, 5, 3}, "int32"), {2, 2});
      });
  t.values(
       "pool2d_avg_same",
       [](const V& x) {
         return K::pool2d(x[0], {3, 3}, {.strides = {2, 2}, .padding = "same", .pool_mode = "avg"});
       },
       {ramp({1, 5, 5, 2}, 13)})
      .expect(kAvgPoolSame, {1, 3, 3, 2});  // NumPy (padding excluded from the count)
  // By hand: 3x3 input 1..9, 2x2 windows, stride 2, same: the bottom-right window holds only 9,
  // so it averages to 9 (not 9 / 4).
  t.values(
       "pool2d_avg_same_corner_by_hand",
       [](const V& x) {
         return K::pool2d(x[0], {2, 2}, {.strides = {2, 2}, .padding = "same", .pool_mode = "avg"});
       },
       {f64({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 3, 3, 1})})
      .expect({3, 4.5, 7.5, 9}, {1, 2, 2, 1});
  t.values("pool2d_avg_valid_cf",
           [](const V& x) {
             return K::pool2d(
                 x[0], {2, 2},
                 {.strides = {2, 2}, .data_format = "channels_first", .pool_mode = "avg"});
           },
           {ramp({1, 2, 5, 5}, 13)})
      .expect(kAvgPoolValidCF, {1, 2, 2, 2});  // NumPy
  t.values("pool3d_max_same",
           [](const V& x) {
             return K::pool3d(x[0], {2, 2, 2}, {.strides = {2, 2, 2}, .padding = "same"});
           },
           {ramp({1, 3, 3, 3, 2}, 13)})
      .expect(kMaxPool3dSame, {1, 2, 2, 2, 2})  // NumPy
      .error("rank", Err::Value, "K::pool3d: x of shape (2, 5, 5, 3) must have rank 5", [] {
        (void)K::pool3d(ph({2, 5, 5, 3}), {2, 2, 2});
      });
  t.op("pool2d_max_grad",
       [](const V& x) {
         return K::pool2d(x[0], {3, 3}, {.strides = {2, 2}, .padding = "same"});
       },
       {g.distinct({2, 5, 5, 2}, -2, 2)})
      .second_order()
      .formula([](const In& in) {
        return naive::pool(in[0], {3, 3}, {.strides = {2, 2}, .padding = "same"}, true);
      });
  // By hand: ties and NaNs in 2x2 windows, channels_last (input (1, 2, 4, 2), two windows per
  // channel). Channel 0 is all 5: each window's gradient goes to its first cell in scan order,
  // (0, 0) and (0, 2). Channel 1: the first window's 3s at (0, 1) and (1, 0) tie, (0, 1) first;
  // the second window holds NaNs at (0, 3) and (1, 2) and a 7: a NaN counts as the maximum, the
  // first one takes it (the cpu kernel's channels_last path and the reference alike).
  {
    const double nan = std::nan("");
    t.values("pool2d_max_grad_ties_by_hand",
             [](const V& x) {
               return K::gradients(K::sum(K::pool2d(x[0], {2, 2}, {.strides = {2, 2}})), {x[0]})[0];
             },
             {f64({5, 1, 5, 3, 5, 0, 5, nan, 5, 3, 5, 2, 5, nan, 5, 7}, {1, 2, 4, 2})})
        .expect({1, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 2, 4, 2});
  }
  // Max pooling of a relu's output: relu's gradient and the pool's are one op (MaxPoolReluGrad),
  // which must give what the two give, ReluGrad(y, MaxPoolGrad(y, dy)), and its own gradient.
  // Windows apart and tiling the input (the cpu kernel's write-once path), overlapping windows
  // with SAME padding, windows with gaps between them in channels_first, and a 3-D pool. The
  // inputs' values are distinct in [-2, 2]: some windows are all negative, relu's zeros tie there.
  auto relu_then = [](naive::Arr a) {
    for (double& v : a.v) v = v > 0 ? v : 0;
    return a;
  };
  t.op("pool2d_max_of_relu_grad",
       [](const V& x) {
         return K::pool2d(K::relu(x[0]), {2, 2}, {.strides = {2, 2}});
       },
       {g.distinct({2, 4, 6, 3}, -2, 2)})
      .second_order()
      .formula([relu_then](const In& in) {
        return naive::pool(relu_then(in[0]), {2, 2}, {.strides = {2, 2}}, true);
      });
  t.op("pool2d_max_of_relu_same_grad",
       [](const V& x) {
         return K::pool2d(K::relu(x[0]), {3, 3}, {.strides = {2, 2}, .padding = "same"});
       },
       {g.distinct({2, 5, 5, 2}, -2, 2)})
      .second_order()
      .formula([relu_then](const In& in) {
        return naive::pool(relu_then(in[0]), {3, 3}, {.strides = {2, 2}, .padding = "same"}, true);
      });
  t.op("pool2d_max_of_relu_gaps_cf_grad",
       [](const V& x) {
         return K::pool2d(K::relu(x[0]), {2, 2},
                          {.strides = {3, 3}, .data_format = "channels_first"});
       },
       {g.distinct({2, 2, 7, 8}, -2, 2)})
      .formula([relu_then](const In& in) {
        return naive::pool(relu_then(in[0]), {2, 2}, {.strides = {3, 3}, .channels_first = true},
                           true);
      });
  // The fused op's own gradient, for its incoming gradient u (an input here): a window whose
  // maximum relu made 0 passes none of u on, in the gradient as in the values.
  t.op("pool2d_max_of_relu_grad_of_grad",
       [](const V& x) {
         return K::gradients(K::sum(K::pool2d(K::relu(x[0]), {2, 2}, {.strides = {2, 2}}) * x[1]),
                             {x[0]})[0];
       },
       {g.distinct({1, 4, 6, 2}, -3, 1), g.normal({1, 2, 3, 2})});  // windows all negative
  // A pool of relu's output plus another input: the gradient reaching relu's output is the
  // pool's gradient of the sum, whose maxima are elsewhere; relu's gradient stays its own op.
  t.op("pool2d_max_of_relu_plus_grad",
       [](const V& x) {
         return K::pool2d(K::relu(x[0]) + x[1], {2, 2}, {.strides = {2, 2}});
       },
       {g.distinct({1, 4, 4, 2}, -2, 2), g.distinct({1, 4, 4, 2}, -2, 2)});
  t.op("pool3d_max_of_relu_grad",
       [](const V& x) {
         return K::pool3d(K::relu(x[0]), {2, 2, 2}, {.strides = {1, 2, 2}});
       },
       {g.distinct({1, 3, 4, 4, 2}, -2, 2)})
      .formula([relu_then](const In& in) {
        return naive::pool(relu_then(in[0]), {2, 2, 2}, {.strides = {1, 2, 2}}, true);
      });
  // By hand (input (1, 2, 4, 2), 2x2 windows, stride 2): as TF's ReluGrad(relu(x),
  // MaxPoolGrad(relu(x), 1)). Channel 0: the first window is all negative, relu makes it four
  // zeros, the first of them takes the pool's gradient and relu's gradient zeroes it; the second
  // window's max 2 first appears at (0, 3). Channel 1: the first window's maximum is a NaN at
  // (0, 1) (relu keeps it, and NaN > 0 is false, so its gradient is 0); the second's is 4 at
  // (1, 2).
  {
    const double nan = std::nan("");
    t.values("pool2d_max_of_relu_grad_by_hand",
             [](const V& x) {
               return K::gradients(K::sum(K::pool2d(K::relu(x[0]), {2, 2}, {.strides = {2, 2}})),
                                   {x[0]})[0];
             },
             {f64({-1, 1, -3, nan, 0.5, -1, 2, -2, -2, 3, -0.5, 2, 1.5, 4, 2, 0.5}, {1, 2, 4, 2})})
        .expect({0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0}, {1, 2, 4, 2});
  }
  t.op("pool2d_avg_cf_grad",
       [](const V& x) {
         return K::pool2d(x[0], {2, 3},
                          {.strides = {2, 2},
                           .padding = "same",
                           .data_format = "channels_first",
                           .pool_mode = "avg"});
       },
       {g.normal({2, 2, 5, 5})})
      .second_order()
      .formula([](const In& in) {
        return naive::pool(in[0], {2, 3},
                           {.strides = {2, 2}, .padding = "same", .channels_first = true}, false);
      });
  t.op("pool2d_max_valid_cf_grad",
       [](const V& x) {
         return K::pool2d(x[0], {2, 2}, {.strides = {1, 2}, .data_format = "channels_first"});
       },
       {g.distinct({1, 3, 4, 5}, -2, 2)})
      .formula([](const In& in) {
        return naive::pool(in[0], {2, 2}, {.strides = {1, 2}, .channels_first = true}, true);
      });
  t.op("pool3d_avg_grad",
       [](const V& x) {
         return K::pool3d(x[0], {2, 2, 2},
                          {.strides = {2, 2, 2}, .padding = "same", .pool_mode = "avg"});
       },
       {g.normal({1, 3, 4, 3, 2})})
      .formula([](const In& in) {
        return naive::pool(in[0], {2, 2, 2}, {.strides = {2, 2, 2}, .padding = "same"}, false);
      });
  t.op("pool3d_max_grad",
       [](const V& x) {
         return K::pool3d(x[0], {2, 2, 2}, {.strides = {1, 2, 2}});
       },
       {g.distinct({1, 3, 4, 4, 2}, -2, 2)})
      .formula([](const In& in) {
        return naive::pool(in[0], {2, 2, 2}, {.strides = {1, 2, 2}}, true);
      });

  // The gradient of max pooling's gradient (MaxPoolGradGrad): y = d sum(pool(x)^2) / dx. By
  // hand: one 2x2 window over (1, 3, 2, 4) pools to 4, so y is 2 * 4 at the maximum, 0 elsewhere.
  t.values("pool2d_max_gradient_by_hand",
           [](const V& x) {
             return K::gradients(K::sum(K::square(K::pool2d(x[0], {2, 2}, {.strides = {2, 2}}))),
                                 {x[0]})[0];
           },
           {f64({1, 3, 2, 4}, {1, 2, 2, 1})})
      .expect({0, 0, 0, 8}, {1, 2, 2, 1});
  t.op("pool2d_max_gradient_grad",
       [](const V& x) {
         return K::gradients(K::sum(K::square(K::pool2d(x[0], {2, 2}, {.padding = "same"}))),
                             {x[0]})[0];
       },
       {g.distinct({1, 3, 4, 2}, -2, 2)});

  // ---- bias_add and batch normalization -------------------------------------------------------
  // By hand: ones (2, 3, 2) plus a bias on the last axis, on axis 1, and a full channels_first
  // bias (steps 2, C 3) whose data is reshaped (not transposed) to (3, 2) as Keras does.
  t.values("bias_add_by_hand", [](const V& x) { return K::bias_add(x[0], x[1]); },
           {NDArray::full({2, 3, 2}, 1.0, DType::float64), f64({10, 20}, {2})})
      .expect({11, 21, 11, 21, 11, 21, 11, 21, 11, 21, 11, 21}, {2, 3, 2})
      .error("bias_rank", Err::Value,
             "K::bias_add: Unexpected bias dimensions 3, expect to be 1 or 2 dimensions",
             [] {
               (void)K::bias_add(ph({2, 5, 3}), ph({2, 5, 3}));
             })
      .error("channels", Err::Value,
             "K::bias_add: bias of shape (4,) has 4 channels but x of shape (2, 5, 3) has 3",
             [] {
               (void)K::bias_add(ph({2, 5, 3}), ph({4}));
             })
      .error("channels_first", Err::Value, "on axis 1", [] {
        (void)K::bias_add(ph({2, 5, 3}), ph({4}), "channels_first");
      });
  t.values("bias_add_cf_by_hand",
           [](const V& x) { return K::bias_add(x[0], x[1], "channels_first"); },
           {NDArray::full({2, 3, 2}, 1.0, DType::float64), f64({10, 20, 30}, {3})})
      .expect({11, 11, 21, 21, 31, 31, 11, 11, 21, 21, 31, 31}, {2, 3, 2});
  t.values("bias_add_cf_full_by_hand",
           [](const V& x) { return K::bias_add(x[0], x[1], "channels_first"); },
           {NDArray::full({2, 3, 2}, 1.0, DType::float64), f64({1, 2, 3, 4, 5, 6}, {2, 3})})
      .expect({2, 3, 4, 5, 6, 7, 2, 3, 4, 5, 6, 7}, {2, 3, 2});
  t.op("bias_add_grad", [](const V& x) { return K::bias_add(x[0], x[1]); },
       {g.normal({2, 3, 4}), g.normal({4})})
      .formula([](const In& in) { return naive::add(in[0], in[1]); });
  t.op("bias_add_cf_full_grad",
       [](const V& x) { return K::bias_add(x[0], x[1], "channels_first"); },
       {g.normal({2, 3, 2, 4}), g.normal({2, 4, 3})})
      .no_unknown_dims();
  // By hand: x (1, 2, 1, 2) = channel 0 (1, 2), channel 1 (3, 4); mean (1, 3), var (4, 1),
  // beta (0, 10), gamma (2, 1), epsilon 0: (x - 1) / 2 * 2 + 0 and (x - 3) / 1 * 1 + 10.
  t.values("batch_normalization_by_hand",
           [](const V& x) {
             return K::batch_normalization(x[0], x[1], x[2], x[3], x[4], {.axis = 1, .epsilon = 0});
           },
           {f64({1, 2, 3, 4}, {1, 2, 1, 2}), f64({1, 3}, {2}), f64({4, 1}, {2}), f64({0, 10}, {2}),
            f64({2, 1}, {2})})
      .expect({0, 1, 10, 11}, {1, 2, 1, 2})
      .error("mean_shape", Err::Value,
             "K::batch_normalization: `mean` of shape (4,) does not match axis 2",
             [] {
               (void)K::batch_normalization(ph({2, 5, 3}), ph({4}), ph({3}), ph({3}), ph({3}));
             })
      .error("axis", Err::Value, "K::batch_normalization", [] {
        (void)K::batch_normalization(ph({2, 5, 3}), ph({3}), ph({3}), ph({3}), ph({3}),
                                     {.axis = 3});
      });
  // By hand: rank-1 parameters of length 1 broadcast over the axis: (x - 1) / sqrt(4) * 3 + 1.
  t.values("batch_normalization_length1_by_hand",
           [](const V& x) {
             return K::batch_normalization(x[0], x[1], x[2], x[3], x[4], {.epsilon = 0});
           },
           {f64({1, 3, 5, 7}, {2, 2}), f64({1}, {1}), f64({4}, {1}), f64({1}, {1}), f64({3}, {1})})
      .expect({1, 4, 7, 10}, {2, 2});
  t.op("batch_normalization_grad",
       [](const V& x) {
         return K::batch_normalization(x[0], x[1], K::exp(x[2]), x[3], x[4], {.axis = 1});
       },
       {g.normal({2, 3, 2}), g.normal({3}), g.normal({3}), g.normal({3}), g.normal({3})})
      .formula([](const In& in) {
        return naive::add(
            naive::mul(
                naive::div(naive::sub(in[0], naive::reshape(in[1], {3, 1})),
                           naive::map(naive::add(naive::exp(naive::reshape(in[2], {3, 1})), 1e-3),
                                      [](double v) { return std::sqrt(v); })),
                naive::reshape(in[4], {3, 1})),
            naive::reshape(in[3], {3, 1}));
      });
  // By hand: x (4, 2), column 0 = 1, 2, 3, 4 (mean 2.5, biased variance 1.25), column 1 all 2;
  // gamma (2, 3), beta (0.5, -1), epsilon 1e-3. The output concatenates normed (4, 2), the
  // mean and the variance.
  t.values("normalize_batch_in_training_by_hand",
           [](const V& x) {
             const auto r = K::normalize_batch_in_training(x[0], x[1], x[2], {0});
             return K::concatenate({K::flatten(r.normed), r.mean, r.var}, 0);
           },
           {f64({1, 2, 2, 2, 3, 2, 4, 2}, {4, 2}), f64({2, 3}, {2}), f64({0.5, -1}, {2})})
      .expect({(1 - 2.5) / std::sqrt(1.25 + 1e-3) * 2 + 0.5, -1,
               (2 - 2.5) / std::sqrt(1.25 + 1e-3) * 2 + 0.5, -1,
               (3 - 2.5) / std::sqrt(1.25 + 1e-3) * 2 + 0.5, -1,
               (4 - 2.5) / std::sqrt(1.25 + 1e-3) * 2 + 0.5, -1, 2.5, 2, 1.25, 0},
              {12})
      .error("no_axes", Err::Value,
             "K::normalize_batch_in_training: reduction_axes must not be empty",
             [] {
               (void)K::normalize_batch_in_training(ph({2, 5, 3}), Tensor(), Tensor(), {});
             })
      .error("repeated_axis", Err::Value, "repeat an axis", [] {
        (void)K::normalize_batch_in_training(ph({2, 5, 3}), Tensor(), Tensor(), {0, -3});
      });
  t.op("normalize_batch_in_training_grad",
       [](const V& x) {
         const auto r = K::normalize_batch_in_training(x[0], x[1], x[2], {0, 1});
         return r.normed + K::expand_dims(K::expand_dims(r.mean * r.var, 0), 0);
       },
       {g.normal({3, 2, 3}), g.normal({3}), g.normal({3})});
  t.op("normalize_batch_cf_grad",
       [](const V& x) {
         const auto r = K::normalize_batch_in_training(x[0], x[1], x[2], {0, 2, 3});
         return K::sum(r.normed * r.normed * x[0]) + K::sum(r.mean + K::sqrt(r.var));
       },
       {g.normal({2, 2, 2, 3}), g.normal({2}), g.normal({2})})
      .no_unknown_dims();

  // ---- padding and resizing ------------------------------------------------------------------
  // By hand: a 2x2 image padded one row above and two columns right.
  t.values("spatial_2d_padding_by_hand",
           [](const V& x) {
             return K::spatial_2d_padding(x[0], {{{1, 0}, {0, 2}}});
           },
           {f64({1, 2, 3, 4}, {1, 2, 2, 1})})
      .expect({0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0}, {1, 3, 4, 1})
      .error("huge", Err::Value,
             "K::temporal_padding: padding (4611686018427387904, 4611686018427387904) must be "
             "non-negative (and at most 16777216)",
             [] {
               (void)K::temporal_padding(ph({1, 2, 2}),
                                         {std::int64_t{1} << 62, std::int64_t{1} << 62});
             })
      .error("negative", Err::Value, "K::spatial_2d_padding: padding (-1, 0) must be non-negative",
             [] {
               (void)K::spatial_2d_padding(ph({1, 4, 4, 2}), {{{-1, 0}, {0, 0}}});
             });
  t.values("temporal_padding_by_hand",
           [](const V& x) {
             return K::temporal_padding(x[0], {2, 1});
           },
           {f64({5, 6}, {1, 1, 2})})
      .expect({0, 0, 0, 0, 5, 6, 0, 0}, {1, 4, 2})
      .error("rank", Err::Value, "K::temporal_padding: x of shape (2, 5) must have rank 3", [] {
        (void)K::temporal_padding(ph({2, 5}), {1, 1});
      });
  t.op("spatial_3d_padding_cf_grad",
       [](const V& x) {
         return K::spatial_3d_padding(x[0], {{{1, 0}, {0, 2}, {1, 1}}}, "channels_first");
       },
       {g.normal({1, 2, 2, 2, 3})});
  t.values("resize_images_nearest_by_hand",
           [](const V& x) { return K::resize_images(x[0], 2, 1, "channels_last"); },
           {f64({1, 2, 3, 4}, {1, 2, 2, 1})})
      .expect({1, 2, 1, 2, 3, 4, 3, 4}, {1, 4, 2, 1})
      .error("interpolation", Err::Value,
             "K::resize_images: interpolation should be one of \"nearest\" or \"bilinear\", got "
             "\"cubic\"",
             [] {
               (void)K::resize_images(ph({1, 4, 4, 2}), 2, 2, "channels_last", "cubic");
             })
      .error("factor", Err::Value, "K::resize_images: height_factor 0 must be a positive integer",
             [] {
               (void)K::resize_images(ph({1, 4, 4, 2}), 0, 2, "channels_last");
             })
      .error("data_format", Err::Value, "NHWC",
             [] {
               (void)K::resize_images(ph({1, 4, 4, 2}), 2, 2, "NHWC");
             })
      .error("bilinear_unknown", Err::Value, "bilinear resizing needs known rows and cols", [] {
        (void)K::resize_images(ph({1, K::None, 4, 2}), 2, 2, "channels_last", "bilinear");
      });
  // By hand: TF 1.x bilinear, factor 2 on rows (1, 2) and (3, 4): source = dst / 2 -> 1, 1.5,
  // 2, 2 (the last clamps to the edge).
  t.values("resize_images_bilinear_by_hand",
           [](const V& x) { return K::resize_images(x[0], 1, 2, "channels_last", "bilinear"); },
           {f64({1, 2, 3, 4}, {1, 2, 2, 1})})
      .expect({1, 1.5, 2, 2, 3, 3.5, 4, 4}, {1, 2, 4, 1});
  t.op("resize_images_bilinear_grad",
       [](const V& x) { return K::resize_images(x[0], 3, 2, "channels_first", "bilinear"); },
       {g.normal({1, 2, 3, 2})});
  t.op("resize_volumes_grad",
       [](const V& x) { return K::resize_volumes(x[0], 2, 1, 2, "channels_last"); },
       {g.normal({1, 2, 2, 2, 2})})
      .error("rank", Err::Value, "K::resize_volumes: x of shape (1, 4, 4, 2) must have rank 5", [] {
        (void)K::resize_volumes(ph({1, 4, 4, 2}), 2, 2, 2, "channels_last");
      });
  // rep 0 empties the axis, also with an unknown dim elsewhere.
  t.values("repeat_elements_zero", [](const V& x) { return K::repeat_elements(x[0], 0, 1); },
           {f64({1, 2, 3, 4}, {2, 2})})
      .expect({}, {2, 0})
      .none_batch();
  t.values("repeat_elements_by_hand", [](const V& x) { return K::repeat_elements(x[0], 3, 1); },
           {f64({1, 2, 3, 4}, {2, 2})})
      .expect({1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4}, {2, 6})
      .gradcheck()
      .parity()
      .error("negative", Err::Value, "K::repeat_elements: rep -1 is negative",
             [] {
               (void)K::repeat_elements(ph({2, 3}), -1, 0);
             })
      .error("axis", Err::Value, "K::repeat_elements", [] {
        (void)K::repeat_elements(ph({2, 3}), 2, 2);
      });
  return t.take();
}

}  // namespace ktape::op_rows
