// nn rows: relu, sigmoid, tanh, softmax, dropout, the crossentropies, one_hot (ops/nn.hpp), and a
// small model. Provenance of expected values: "by hand" = written out next to the values; <cmath>
// = the textbook formula evaluated with <cmath>; "formula" = the naive float64 reference
// (op_rows/naive.hpp) applied to the row's inputs.
#include <algorithm>
#include <cmath>
#include <limits>

#include "op_rows/op_row.hpp"

namespace ktape::op_rows {

namespace {

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// relu with Keras's options over a whole array (naive::relu per element).
naive::Arr relu_ref(const naive::Arr& x, double alpha, double max_value, double threshold) {
  return naive::map(x, [=](double v) { return naive::relu(v, alpha, max_value, threshold); });
}

}  // namespace

std::vector<OpRow> nn_rows() {
  Rows t("nn");
  Gen g(20240612);
  const Shape s34{3, 4};
  const double inf = HUGE_VAL;

  // ---- activations: random inputs kept away from 0, the threshold and max_value -----------------
  t.op("relu", [](const V& x) { return K::relu(x[0]); }, {g.away(s34, -2, 2, {0})})
      .formula([=](const In& in) { return relu_ref(in[0], 0, inf, 0); });
  t.op("relu_alpha", [](const V& x) { return K::relu(x[0], {.alpha = 0.3}); },
       {g.away(s34, -2, 2, {0})})
      .formula([=](const In& in) { return relu_ref(in[0], 0.3, inf, 0); });
  t.op("relu_max_value", [](const V& x) { return K::relu(x[0], {.max_value = 1.0}); },
       {g.away(s34, -2, 2, {0, 1})})
      .formula([=](const In& in) { return relu_ref(in[0], 0, 1, 0); });
  t.op("relu_threshold", [](const V& x) { return K::relu(x[0], {.threshold = 0.5}); },
       {g.away(s34, -2, 2, {0.5})})
      .formula([=](const In& in) { return relu_ref(in[0], 0, inf, 0.5); });
  t.op("relu_negative_threshold", [](const V& x) { return K::relu(x[0], {.threshold = -0.5}); },
       {g.away(s34, -2, 2, {-0.5})})
      .formula([=](const In& in) { return relu_ref(in[0], 0, inf, -0.5); });
  t.op("relu_all",
       [](const V& x) { return K::relu(x[0], {.alpha = 0.2, .max_value = 1.5, .threshold = 0.5}); },
       {g.away({4, 5}, -2, 2.5, {0.5, 1.5})})
      .ref_gradcheck()
      .formula([](const In& in) { return relu_ref(in[0], 0.2, 1.5, 0.5); });
  // The special values, by hand, as TF's relu gives them: NaN stays NaN, -inf and negatives
  // give +0 (not NaN from 0 * -inf, nor -0 from 0 * -3); in the gradient (seed 1 per element)
  // only positives pass.
  const double nan = std::nan("");
  t.values("relu_special_values_by_hand", [](const V& x) { return K::relu(x[0]); },
           {f64({nan, -inf, inf, -3, -0.0, 0, 2}, {7})})
      .expect({nan, 0, inf, 0, 0, 0, 2}, {7})
      .exact()
      .signed_zeros();
  t.values("relu_special_values_gradient_by_hand",
           [](const V& x) { return K::gradients(K::sum(K::relu(x[0])), {x[0]})[0]; },
           {f64({nan, -inf, inf, -3, -0.0, 0, 2}, {7})})
      .expect({0, 0, 1, 0, 0, 0, 1}, {7})
      .exact()
      .signed_zeros();
  t.values("relu_alpha_keeps_nan_by_hand", [](const V& x) { return K::relu(x[0], {.alpha = 0.5}); },
           {f64({nan, -inf, -2, 3}, {4})})
      .expect({nan, -inf, -1, 3}, {4})
      .exact();
  // relu'(x) * x + relu(x): differentiating the ReluGrad node w.r.t. its incoming gradient
  t.op("relu_times_x",
       [](const V& x) {
         return K::relu(x[0], {.alpha = 0.2, .max_value = 1.0, .threshold = 0.3}) * x[0];
       },
       {g.away(s34, -2, 2, {0.3, 1.0})})
      .second_order()
      .formula([](const In& in) { return naive::mul(relu_ref(in[0], 0.2, 1.0, 0.3), in[0]); });
  // sigmoid(x) * x and tanh(x) * x: the incoming gradient of SigmoidGrad / TanhGrad (x) depends
  // on x, so the second order differentiates them w.r.t. it too, not only w.r.t. y.
  t.op("sigmoid_times_x", [](const V& x) { return K::sigmoid(x[0]) * x[0]; }, {g.normal(s34, 2)})
      .second_order()
      .formula([](const In& in) { return naive::mul(naive::sigmoid(in[0]), in[0]); });
  t.op("tanh_times_x", [](const V& x) { return K::tanh(x[0]) * x[0]; }, {g.normal(s34)})
      .second_order()
      .formula([](const In& in) { return naive::mul(naive::tanh(in[0]), in[0]); });
  t.op("sigmoid", [](const V& x) { return K::sigmoid(x[0]); }, {g.normal(s34, 2)})
      .second_order()
      .formula([](const In& in) { return naive::sigmoid(in[0]); });
  t.op("tanh", [](const V& x) { return K::tanh(x[0]); }, {g.normal(s34)})
      .second_order()
      .second_order_ref()
      .formula([](const In& in) { return naive::tanh(in[0]); });
  t.op("softmax_last", [](const V& x) { return K::softmax(x[0]); }, {g.normal(s34)})
      .ref_gradcheck()
      .formula([](const In& in) { return naive::softmax(in[0], -1); });
  t.op("softmax_axis0", [](const V& x) { return K::softmax(x[0], 0); }, {g.normal(s34)})
      .formula([](const In& in) { return naive::softmax(in[0], 0); });
  t.op("softmax_3d_axis1", [](const V& x) { return K::softmax(x[0], 1); }, {g.normal({2, 3, 2})})
      .formula([](const In& in) { return naive::softmax(in[0], 1); });
  t.op("softmax_neg_axis", [](const V& x) { return K::softmax(x[0], -2); }, {g.normal({2, 3, 2})})
      .formula([](const In& in) { return naive::softmax(in[0], -2); });
  {
    // softmax sums to 1, so its second derivative needs weights: softmax(x) * w
    const NDArray w = g.normal(s34);
    t.op("softmax_weighted", [w](const V& x) { return K::softmax(x[0]) * const_like(x[0], w); },
         {g.normal(s34)})
        .second_order()
        .formula([w](const In& in) { return naive::mul(naive::softmax(in[0], -1), w); });
    t.op("softmax_axis0_weighted",
         [w](const V& x) { return K::softmax(x[0], 0) * const_like(x[0], w); }, {g.normal(s34)})
        .second_order()
        .formula([w](const In& in) { return naive::mul(naive::softmax(in[0], 0), w); });
  }

  // ---- activations by hand ----------------------------------------------------------------------
  {
    // The rule of spec 3.15 / ReluF: for x > threshold, x (clipped to [0, max_value] when max_value
    // is set); for x < threshold, alpha * (x - threshold); 0 at x == threshold.
    const In x = {f64({-3, -1, 0, 0.5, 1, 2, 5, 7}, {8})};
    // Plain: max(x, 0)
    t.values(
         "relu_by_hand", [](const V& v) { return K::relu(v[0]); }, x)
        .expect({0, 0, 0, 0.5, 1, 2, 5, 7}, {8})
        .error("int", Err::Type, "K::relu: `x` must be a float tensor",
               [] { (void)K::relu(cst({1}, {1}, "int32")); })
        .error("nan_max_value", Err::Value, "K::relu: max_value is NaN",
               [] { (void)K::relu(cst({1}, {1}), {.max_value = std::nan("")}); });
    // alpha 0.1: negatives -> 0.1 * x
    t.values(
         "relu_alpha_by_hand", [](const V& v) { return K::relu(v[0], {.alpha = 0.1}); }, x)
        .expect({-0.3, -0.1, 0, 0.5, 1, 2, 5, 7}, {8});
    // max_value 4: min(max(x,0),4)
    t.values(
         "relu_max_value_by_hand", [](const V& v) { return K::relu(v[0], {.max_value = 4.0}); }, x)
        .expect({0, 0, 0, 0.5, 1, 2, 4, 4}, {8});
    // threshold 1: x > 1 kept, x <= 1 -> 0 (alpha = 0)
    t.values(
         "relu_threshold_by_hand", [](const V& v) { return K::relu(v[0], {.threshold = 1.0}); }, x)
        .expect({0, 0, 0, 0, 0, 2, 5, 7}, {8});
    // alpha 0.5, max_value 6, threshold 1:
    //   x > 1: 2, 5, min(7,6)=6; x < 1: 0.5*(x-1): -3->-2, -1->-1, 0->-0.5, 0.5->-0.25; x == 1 -> 0
    t.values(
         "relu_all_options_by_hand",
         [](const V& v) {
           return K::relu(v[0], {.alpha = 0.5, .max_value = 6.0, .threshold = 1.0});
         },
         x)
        .expect({-2, -1, -0.5, -0.25, 0, 2, 5, 6}, {8});
    // alpha 0.2, max_value 3: x>0 -> min(x,3); x<0 -> 0.2*x
    t.values(
         "relu_alpha_max_value_by_hand",
         [](const V& v) { return K::relu(v[0], {.alpha = 0.2, .max_value = 3.0}); }, x)
        .expect({-0.6, -0.2, 0, 0.5, 1, 2, 3, 3}, {8});
    // threshold -2 (TF keeps x in (-2, 0) unchanged): -3 -> 0*(x+2) = 0, -1 -> -1, rest x.
    t.values(
         "relu_negative_threshold_by_hand",
         [](const V& v) { return K::relu(v[0], {.threshold = -2.0}); }, x)
        .expect({0, -1, 0, 0.5, 1, 2, 5, 7}, {8});
    // threshold 2 with alpha 1: x<2 -> x-2: -5,-3,-2,-1.5,-1; x==2 -> 0; 5, 7 kept
    t.values(
         "relu_alpha_threshold_by_hand",
         [](const V& v) { return K::relu(v[0], {.alpha = 1.0, .threshold = 2.0}); }, x)
        .expect({-5, -3, -2, -1.5, -1, 0, 5, 7}, {8});
  }
  {
    // <cmath>: 1 / (1 + exp(-x)) and tanh(x)
    const std::vector<double> xs = {-2, 0, 3, -30, 30};
    std::vector<double> sig, th;
    for (double v : xs) {
      sig.push_back(sigmoid_ref(v));
      th.push_back(std::tanh(v));
    }
    t.values("sigmoid_by_hand", [](const V& v) { return K::sigmoid(v[0]); }, {f64(xs, {5})})
        .expect(sig, {5})
        .tol32(1e-5, 1e-12)
        .tol64(1e-12, 1e-15)
        .error("int", Err::Type, "K::sigmoid: `x` must be a float tensor",
               [] { (void)K::sigmoid(cst({1}, {1}, "int32")); });
    t.values("tanh_by_hand", [](const V& v) { return K::tanh(v[0]); }, {f64(xs, {5})})
        .expect(th, {5})
        .error("int", Err::Type, "K::tanh: `x` must be a float tensor",
               [] { (void)K::tanh(cst({1}, {1}, "int32")); });
    // sigmoid(0) = 0.5 exactly.
    t.values("sigmoid_of_zero_is_half", [](const V& v) { return K::sigmoid(v[0]); }, {f64({0}, {})})
        .expect({0.5}, {})
        .exact();
  }
  {
    // Row [1,2,3]: e^k / (e + e^2 + e^3); row [0,0,0]: 1/3 each (<cmath>).
    const double s = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    const std::vector<double> want = {std::exp(1.0) / s, std::exp(2.0) / s, std::exp(3.0) / s,
                                      1.0 / 3,           1.0 / 3,           1.0 / 3};
    const In x = {f64({1, 2, 3, 0, 0, 0}, {2, 3})};
    t.values(
         "softmax_by_hand", [](const V& v) { return K::softmax(v[0]); }, x)
        .expect(want, {2, 3})
        .error("scalar", Err::Value, "K::softmax: cannot apply softmax to a scalar",
               [] { (void)K::softmax(cst({1}, {})); });
    t.values(
         "softmax_axis1_by_hand", [](const V& v) { return K::softmax(v[0], 1); }, x)
        .expect(want, {2, 3});
    // Large logits do not overflow (max is subtracted): [1000, 1000] -> [0.5, 0.5]
    t.values("softmax_large_logits", [](const V& v) { return K::softmax(v[0]); },
             {f64({1000, 1000}, {1, 2})})
        .expect({0.5, 0.5}, {1, 2});
  }
  {
    // x = [[1,2],[3,2]]: column 0 -> e/(e+e^3), e^3/(e+e^3); column 1 -> 0.5, 0.5 (<cmath>)
    const double c0 = std::exp(1.0) + std::exp(3.0);
    const std::vector<double> want = {std::exp(1.0) / c0, 0.5, std::exp(3.0) / c0, 0.5};
    const In x = {f64({1, 2, 3, 2}, {2, 2})};
    t.values(
         "softmax_axis0_by_hand", [](const V& v) { return K::softmax(v[0], 0); }, x)
        .expect(want, {2, 2})
        .error("axis_out_of_range", Err::Value, "K::softmax: axis 2 is out of range", [] {
          (void)K::softmax(cst({1, 2, 3, 2}, {2, 2}), 2);
        });
    t.values(
         "softmax_axis_minus2_by_hand", [](const V& v) { return K::softmax(v[0], -2); }, x)
        .expect(want, {2, 2});
  }

  // ---- dropout ---------------------------------------------------------------------------------
  // Level 0 keeps everything.
  t.values("dropout_level_zero", [](const V& v) { return K::dropout(v[0], 0.0); },
           {f64({1, 2, 3}, {3})})
      .expect({1, 2, 3}, {3})
      .error("negative_level", Err::Value, "K::dropout: Dropout level must be in interval [0, 1[",
             [] { (void)K::dropout(K::ones({10}), -0.5); })
      .error("level_one", Err::Value, "K::dropout: Dropout level must be in interval [0, 1[",
             [] { (void)K::dropout(K::ones({10}), 1.0); })
      .error("level_above_one", Err::Value, "K::dropout: Dropout level must be in interval [0, 1[",
             [] { (void)K::dropout(K::ones({10}), 1.5); })
      .error("noise_shape_not_broadcastable", Err::Value,
             "K::dropout: noise_shape (3, 5) is not broadcastable to x's shape (4, 5)", [] {
               (void)K::dropout(K::ones({4, 5}), 0.5, {.noise_shape = Shape{3, 5}});
             });
  // Every element of dropout(x, 0.5) is 0 or 2x, so y * (y - 2x) is 0 everywhere (by hand); the
  // mask itself is random (statistics in test_ops.cpp, gradients in test_gradcheck.cpp).
  t.values("dropout_keeps_zero_or_scaled",
           [](const V& v) {
             const Tensor y = K::dropout(v[0], 0.5, {.seed = 42});
             return y * (y - 2.0 * v[0]);
           },
           {f64({1, -2, 3, 0.5, 8, -1}, {6})})
      .expect({0, 0, 0, 0, 0, 0}, {6})
      .exact();

  // ---- crossentropies: random inputs ----------------------------------------------------------
  t.op("cce", [](const V& x) { return K::categorical_crossentropy(x[0], x[1]); },
       {g.uniform(s34, 0, 1), g.uniform(s34, 0.1, 1)})
      .formula([](const In& in) { return naive::cce(in[0], in[1], false, -1); });
  t.op("cce_logits",
       [](const V& x) { return K::categorical_crossentropy(x[0], x[1], {.from_logits = true}); },
       {g.uniform(s34, 0, 1), g.normal(s34)})
      .formula([](const In& in) { return naive::cce(in[0], in[1], true, -1); });
  t.op("cce_axis0", [](const V& x) { return K::categorical_crossentropy(x[0], x[1], {.axis = 0}); },
       {g.uniform(s34, 0, 1), g.uniform(s34, 0.1, 1)})
      .formula([](const In& in) { return naive::cce(in[0], in[1], false, 0); });
  t.op("cce_logits_axis0",
       [](const V& x) {
         return K::categorical_crossentropy(x[0], x[1], {.from_logits = true, .axis = 0});
       },
       {g.uniform(s34, 0, 1), g.normal(s34)})
      .formula([](const In& in) { return naive::cce(in[0], in[1], true, 0); });
  {
    // Second order with respect to the output only (the target a fixed soft distribution).
    const NDArray soft = g.uniform(s34, 0, 1);
    t.op("cce_logits_fixed_target",
         [soft](const V& x) {
           return K::categorical_crossentropy(const_like(x[0], soft), x[0], {.from_logits = true});
         },
         {g.normal(s34)})
        .second_order()
        .formula([soft](const In& in) { return naive::cce(soft, in[0], true, -1); });
    t.op("cce_probabilities_fixed_target",
         [soft](const V& x) { return K::categorical_crossentropy(const_like(x[0], soft), x[0]); },
         {g.uniform(s34, 0.1, 1)})
        .second_order()
        .formula([soft](const In& in) { return naive::cce(soft, in[0], false, -1); });
  }
  t.op("scce",
       [](const V& x) {
         return K::sparse_categorical_crossentropy(int_target({0, 2, 3}, {3}), x[0]);
       },
       {g.uniform(s34, 0.05, 0.95)})
      .second_order()
      .formula([](const In& in) {
        return naive::scce({0, 2, 3}, in[0], false);
      });
  t.op("scce_logits",
       [](const V& x) {
         return K::sparse_categorical_crossentropy(int_target({1, 3, 0}, {3}), x[0],
                                                   {.from_logits = true});
       },
       {g.normal(s34)})
      .ref_gradcheck()
      .second_order()
      .second_order_ref()
      .formula([](const In& in) {
        return naive::scce({1, 3, 0}, in[0], true);
      });
  t.op("scce_logits_target_n1",
       [](const V& x) {
         return K::sparse_categorical_crossentropy(int_target({2, 2, 1}, {3, 1}), x[0],
                                                   {.from_logits = true});
       },
       {g.normal(s34)})
      .formula([](const In& in) {
        return naive::scce({2, 2, 1}, in[0], true);
      });
  t.op("scce_target_n1",
       [](const V& x) {
         return K::sparse_categorical_crossentropy(int_target({3, 0, 1}, {3, 1}), x[0]);
       },
       {g.uniform(s34, 0.05, 0.95)})
      .formula([](const In& in) {
        return naive::scce({3, 0, 1}, in[0], false);
      });
  t.op("scce_logits_rank3",
       [](const V& x) {
         return K::sparse_categorical_crossentropy(int_target({0, 1, 2, 3, 2, 1}, {2, 3}), x[0],
                                                   {.from_logits = true});
       },
       {g.normal({2, 3, 4})})
      .formula([](const In& in) {
        return naive::scce({0, 1, 2, 3, 2, 1}, in[0], true);
      });
  t.op("scce_logits_axis0",
       [](const V& x) {
         return K::sparse_categorical_crossentropy(int_target({0, 3, 1}, {3}), x[0],
                                                   {.from_logits = true, .axis = 0});
       },
       {g.normal({4, 3})})
      .no_unknown_dims()  // the class axis (axis 0 here) must be known
      .formula([](const In& in) {
        return naive::scce({0, 3, 1}, naive::transpose(in[0]), true);
      });

  // ---- crossentropies by hand (eps = 1e-7, Keras's default K::epsilon()) ------------------------
  // Row 0: output [1,2,1] -> normalized [0.25,0.5,0.25]; target [0,1,0] -> -log(0.5)
  // Row 1: output [3,1,0] -> [0.75,0.25,0] -> clipped p2 = eps; target [0,0,1] -> -log(eps)
  // Row 2: output [1,1,2] -> [0.25,0.25,0.5]; soft target [0.2,0.3,0.5]
  //        -> -(0.2 log .25 + 0.3 log .25 + 0.5 log .5) = 0.5*1.386294 + 0.5*0.693147 = 1.039721
  t.values(
       "cce_normalizes_then_clips",
       [](const V& v) { return K::categorical_crossentropy(v[0], v[1]); },
       {f64({0, 1, 0, 0, 0, 1, 0.2, 0.3, 0.5}, {3, 3}), f64({1, 2, 1, 3, 1, 0, 1, 1, 2}, {3, 3})})
      .expect({-std::log(0.5), -std::log(1e-7),
               -(0.2 * std::log(0.25) + 0.3 * std::log(0.25) + 0.5 * std::log(0.5))},
              {3})
      .spot(2, 1.0397208, 1e-6)
      .tol32(1e-5, 1e-7)
      .tol64(1e-10, 1e-12)
      .error("axis_2", Err::Value, "K::categorical_crossentropy: Unexpected channels axis 2",
             [] {
               (void)K::categorical_crossentropy(cst({0, 1, 1, 0}, {2, 2}),
                                                 cst({0.5, 0.5, 0.5, 0.5}, {2, 2}), {.axis = 2});
             })
      .error("axis_minus2", Err::Value, "K::categorical_crossentropy: Unexpected channels axis -2",
             [] {
               (void)K::categorical_crossentropy(cst({0, 1, 1, 0}, {2, 2}),
                                                 cst({0.5, 0.5, 0.5, 0.5}, {2, 2}), {.axis = -2});
             })
      .error("logits_axis_5", Err::Value, "K::categorical_crossentropy: Unexpected channels axis 5",
             [] {
               (void)K::categorical_crossentropy(cst({0, 1, 1, 0}, {2, 2}),
                                                 cst({0.5, 0.5, 0.5, 0.5}, {2, 2}),
                                                 {.from_logits = true, .axis = 5});
             });
  // The same rows as columns: output (3,2), classes along axis 0.
  // column 0: output [1,2,1] target [0,1,0] -> -log(0.5)
  // column 1: output [1,1,2] target [1,0,0] -> -log(0.25)
  t.values("cce_axis0_by_hand",
           [](const V& v) { return K::categorical_crossentropy(v[0], v[1], {.axis = 0}); },
           {f64({0, 1, 1, 0, 0, 0}, {3, 2}), f64({1, 1, 2, 1, 1, 2}, {3, 2})})
      .expect({-std::log(0.5), -std::log(0.25)}, {2});
  // loss = logsumexp(z) - sum(t * z) for one-hot / soft targets (sum t = 1)
  // Row 0: z = [1,2,3], t = [0,1,0] -> log(e + e^2 + e^3) - 2
  // Row 1: z = [-1,0,4], t = [0.5,0,0.5] -> log(e^-1 + 1 + e^4) - 0.5*(-1) - 0.5*4
  t.values(
       "cce_from_logits_by_hand",
       [](const V& v) { return K::categorical_crossentropy(v[0], v[1], {.from_logits = true}); },
       {f64({0, 1, 0, 0.5, 0, 0.5}, {2, 3}), f64({1, 2, 3, -1, 0, 4}, {2, 3})})
      .expect({std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 2.0,
               std::log(std::exp(-1.0) + 1.0 + std::exp(4.0)) + 0.5 - 2.0},
              {2});
  {
    // targets [1, 2]; output rows [0.2,0.5,0.3] and [0.1,0.1,0.8] -> -log(0.5), -log(0.8)
    const NDArray out = f64({0.2, 0.5, 0.3, 0.1, 0.1, 0.8}, {2, 3});
    const std::vector<double> want = {-std::log(0.5), -std::log(0.8)};
    auto scce = [](const V& v) { return K::sparse_categorical_crossentropy(v[0], v[1]); };
    t.values("scce_by_hand", scce, {f64({1, 2}, {2}), out})
        .in_dtypes({"int32"})
        .expect(want, {2})
        .error("axis_2", Err::Value,
               "K::sparse_categorical_crossentropy: Unexpected channels axis 2",
               [] {
                 (void)K::sparse_categorical_crossentropy(
                     cst({0, 2}, {2}, "int32"), cst({1, 2, 3, 0, 0, 0}, {2, 3}), {.axis = 2});
               })
        .error("axis_7", Err::Value,
               "K::sparse_categorical_crossentropy: Unexpected channels axis 7",
               [] {
                 (void)K::sparse_categorical_crossentropy(
                     cst({0, 2}, {2}, "int32"), cst({1, 2, 3, 0, 0, 0}, {2, 3}), {.axis = 7});
               })
        .error("target_shape", Err::Value,
               "K::sparse_categorical_crossentropy: target of shape (3,) does not match output of "
               "shape (2, 3)",
               [] {
                 (void)K::sparse_categorical_crossentropy(cst({0, 1, 2}, {3}, "int32"),
                                                          cst({1, 2, 3, 0, 0, 0}, {2, 3}));
               })
        // Out-of-range class ids are only found when the op runs.
        .error("class_id_too_high_at_run_time", Err::Value,
               "target 3 at row 1 is out of range [0, 3)",
               [] {
                 (void)K::eval(K::sparse_categorical_crossentropy(cst({0, 3}, {2}, "int32"),
                                                                  cst({1, 2, 3, 0, 0, 0}, {2, 3}),
                                                                  {.from_logits = true}));
               })
        .error("class_id_negative_at_run_time", Err::Value,
               "target -1 at row 0 is out of range [0, 3)", [] {
                 (void)K::eval(K::sparse_categorical_crossentropy(cst({-1, 0}, {2}, "int32"),
                                                                  cst({1, 2, 3, 0, 0, 0}, {2, 3})));
               });
    t.values("scce_target_n1_by_hand", scce, {f64({1, 2}, {2, 1}), out})
        .in_dtypes({"int32"})
        .expect(want, {2});
    // Un-normalized probabilities are normalized implicitly (log(p) is used as logits):
    // [0.1,0.2,0.1], target 1 -> -log(0.2/0.4) = log 2
    t.values("scce_unnormalized_by_hand", scce, {f64({1}, {1}), f64({0.1, 0.2, 0.1}, {1, 3})})
        .in_dtypes({"int32"})
        .expect({std::log(2.0)}, {1});
    // Values are clipped to [eps, 1-eps] before the log: [1,2,1] -> all 1-eps -> uniform -> log 3
    t.values("scce_clips_by_hand", scce, {f64({1}, {1}), f64({1, 2, 1}, {1, 3})})
        .in_dtypes({"int32"})
        .expect({std::log(3.0)}, {1});
  }
  {
    // targets [0, 2]; logits [1,2,3] -> logsumexp - 1; [0,0,0] -> log 3
    const NDArray logits = f64({1, 2, 3, 0, 0, 0}, {2, 3});
    const std::vector<double> want = {std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 1.0,
                                      std::log(3.0)};
    auto scce = [](const V& v) {
      return K::sparse_categorical_crossentropy(v[0], v[1], {.from_logits = true});
    };
    t.values("scce_from_logits_by_hand", scce, {f64({0, 2}, {2}), logits})
        .in_dtypes({"int32"})
        .expect(want, {2});
    t.values("scce_from_logits_target_n1_by_hand", scce, {f64({0, 2}, {2, 1}), logits})
        .in_dtypes({"int32"})
        .expect(want, {2});
    // int64 targets work too.
    t.values("scce_from_logits_int64_by_hand", scce, {f64({0, 2}, {2}), logits})
        .in_dtypes({"int64"})
        .expect(want, {2});
  }
  {
    // output (2,2,3) logits, targets (2,2): loss shape (2,2)
    // [0,0,0] t=1 -> log 3; [1,2,3] t=2 -> lse-3; [3,2,1] t=0 -> lse-3; [0,0,0] t=0 -> log 3
    const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
    t.values("scce_rank3_by_hand",
             [](const V& v) {
               return K::sparse_categorical_crossentropy(v[0], v[1], {.from_logits = true});
             },
             {f64({1, 2, 0, 0}, {2, 2}), f64({0, 0, 0, 1, 2, 3, 3, 2, 1, 0, 0, 0}, {2, 2, 3})})
        .in_dtypes({"int32"})
        .expect({std::log(3.0), lse - 3.0, lse - 3.0, std::log(3.0)}, {2, 2});
  }
  // tf.one_hot: indices.shape + (C,), float32, out-of-range ids give a zero row.
  t.values("one_hot_by_hand", [](const V& v) { return K::one_hot(v[0], 3); },
           {f64({0, 2, 5, -1}, {4})})
      .in_dtypes({"int32"})
      .expect({1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, {4, 3})
      .out_dtype("float32")
      .exact()
      .error("float_indices", Err::Type,
             "K::one_hot: indices must be an integer tensor, got float32",
             [] { (void)K::one_hot(cst({0.0}, {1}), 3); });
  t.values("one_hot_int64_by_hand", [](const V& v) { return K::one_hot(v[0], 2); },
           {f64({1, 0}, {2, 1})})
      .in_dtypes({"int64"})
      .expect({0, 1, 1, 0}, {2, 1, 2})
      .out_dtype("float32")
      .exact()
      .error("negative_classes", Err::Value, "K::one_hot: num_classes must be >= 0",
             [] { (void)K::one_hot(cst({0}, {1}, "int32"), -1); });

  // ---- a small model: softmax(relu(x.W1 + b1).W2) with a crossentropy ---------------------------
  {
    const NDArray onehot = f64({1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3});
    t.op("mlp_cce",
         [onehot](const V& x) {
           const Tensor h = K::relu(K::dot(x[0], x[1]) + x[2], {.alpha = 0.1});
           const Tensor p = K::softmax(K::dot(h, x[3]));
           return K::mean(K::categorical_crossentropy(const_like(x[0], onehot), p));
         },
         {g.normal({3, 4}), g.normal({4, 5}), g.normal({5}), g.normal({5, 3})})
        .formula([onehot](const In& in) {
          const naive::Arr h =
              relu_ref(naive::add(naive::dot(in[0], in[1]), in[2]), 0.1, HUGE_VAL, 0);
          const naive::Arr p = naive::softmax(naive::dot(h, in[3]), -1);
          return naive::mean(naive::cce(onehot, p, false, -1));
        });
  }
  // ---- parity-only ------------------------------------------------------------------------------
  t.parity_only(
       "big_softmax_cce",
       [](const V& x) {
         return K::categorical_crossentropy(K::softmax(x[1]), x[0], {.from_logits = true});
       },
       [](Gen& r) {
         return In{r.normal({200, 50}), r.normal({200, 50})};
       })
      .formula([](const In& in) { return naive::cce(naive::softmax(in[1], -1), in[0], true, -1); });
  t.parity_only("none_batch_chain",
                [](const V& x) { return K::softmax(K::dot(x[0], x[1]) + x[2]) * K::mean(x[0]); },
                {g.normal({6, 4}), g.normal({4, 3}), g.normal({3})})
      .none_batch()
      .formula([](const In& in) {
        return naive::mul(naive::softmax(naive::add(naive::dot(in[0], in[1]), in[2]), -1),
                          naive::mean(in[0]));
      });
  // ---- elu, softplus, softsign, hard_sigmoid, l2_normalize, binary_crossentropy (issue 12) ------
  t.op("elu", [](const V& x) { return K::elu(x[0]); }, {g.away(s34, -3, 3, {0})})
      .second_order()
      .formula([](const In& in) {
        return naive::map(in[0], [](double v) { return v > 0 ? v : std::exp(v) - 1; });
      });
  t.op("elu_alpha", [](const V& x) { return K::elu(x[0], 0.5); }, {g.away(s34, -3, 3, {0})})
      .formula([](const In& in) {
        return naive::map(in[0], [](double v) { return v > 0 ? v : 0.5 * (std::exp(v) - 1); });
      });
  // by hand: elu(-1) = e^-1 - 1 = -0.6321205588285577, elu(2) = 2, elu(0) = 0; alpha 2 doubles
  // the negative side only. exp(1000) would overflow: elu(1000) = 1000.
  t.values("elu_by_hand", [](const V& v) { return K::elu(v[0], 2.0); },
           {f64({-1, 2, 0, 1000}, {4})})
      .expect({-1.2642411176571153, 2, 0, 1000}, {4})
      .error("int32", Err::Type, "K::elu: `x` must be a float tensor, got int32",
             [] { (void)K::elu(cst({1}, {1}, "int32")); });
  t.op("softplus", [](const V& x) { return K::softplus(x[0]); }, {g.normal(s34, 3.0)})
      .second_order()
      .formula([](const In& in) {
        return naive::map(in[0], [](double v) { return std::log1p(std::exp(v)); });
      });
  // by hand: softplus(0) = log 2; softplus(-50) = log1p(e^-50) = e^-50 = 1.9287498479639178e-22
  // to double precision; softplus(50) = 50 + log1p(e^-50) = 50; softplus(1e4) = 1e4 (no
  // overflow).
  t.values("softplus_by_hand", [](const V& v) { return K::softplus(v[0]); },
           {f64({0, -50, 50, 1e4}, {4})})
      .expect({0.6931471805599453, 1.9287498479639178e-22, 50, 1e4}, {4})
      .tol32(1e-6, 0)
      .tol64(1e-12, 0)
      .error("int32", Err::Type, "K::softplus: `x` must be a float tensor, got int32",
             [] { (void)K::softplus(cst({1}, {1}, "int32")); });
  t.op("softsign", [](const V& x) { return K::softsign(x[0]); }, {g.away(s34, -3, 3, {0})})
      .formula([](const In& in) {
        return naive::map(in[0], [](double v) { return v / (1 + std::abs(v)); });
      });
  t.op("hard_sigmoid", [](const V& x) { return K::hard_sigmoid(x[0]); },
       {g.away(s34, -4, 4, {-2.5, 2.5})})
      .formula([](const In& in) {
        return naive::map(in[0], [](double v) { return std::clamp(0.2 * v + 0.5, 0.0, 1.0); });
      });
  // by hand: 0.2 * [-3, 0, 1, 3] + 0.5 = [-0.1, 0.5, 0.7, 1.1], clipped to [0, 0.5, 0.7, 1].
  t.values("hard_sigmoid_by_hand", [](const V& v) { return K::hard_sigmoid(v[0]); },
           {f64({-3, 0, 1, 3}, {4})})
      .expect({0, 0.5, 0.7, 1}, {4});
  t.op("l2_normalize_all", [](const V& x) { return K::l2_normalize(x[0]); }, {g.normal(s34)})
      .formula([](const In& in) {
        const double n = std::sqrt(naive::sum(naive::sq(in[0]))[0]);
        return naive::map(in[0], [n](double v) { return v / n; });
      });
  t.op("l2_normalize_axis1", [](const V& x) { return K::l2_normalize(x[0], 1); }, {g.normal(s34)})
      .second_order()
      .formula([](const In& in) {
        const naive::Arr n = naive::map(naive::sum(naive::sq(in[0]), {1}, true),
                                        [](double v) { return std::sqrt(v); });
        return naive::div(in[0], n);
      });
  // by hand: rows [3, 4] / 5 and [0, 0] (the norm is floored at sqrt(1e-12), so 0 stays 0).
  t.values("l2_normalize_by_hand",
           [](const V& v) { return K::l2_normalize(v[0], std::vector<int>{-1}); },
           {f64({3, 4, 0, 0}, {2, 2})})
      .expect({0.6, 0.8, 0, 0}, {2, 2});
  t.op("binary_crossentropy", [](const V& x) { return K::binary_crossentropy(x[0], x[1]); },
       {g.uniform(s34, 0, 1), g.uniform(s34, 0.1, 0.9)})
      .formula([](const In& in) {
        return naive::zip(in[0], in[1], [](double t, double p) {
          return -(t * std::log(p) + (1 - t) * std::log(1 - p));
        });
      });
  t.op("binary_crossentropy_logits",
       [](const V& x) { return K::binary_crossentropy(x[0], x[1], true); },
       {g.uniform(s34, 0, 1), g.away(s34, -4, 4, {0})})
      .formula([](const In& in) {
        return naive::zip(in[0], in[1], [](double t, double x) {
          return std::max(x, 0.0) - x * t + std::log1p(std::exp(-std::abs(x)));
        });
      });
  // by hand: t=1, p=0.5: log 2; t=0, p=0.9: -log(0.1).
  t.values("binary_crossentropy_by_hand",
           [](const V& v) { return K::binary_crossentropy(v[0], v[1]); },
           {f64({1, 0}, {2}), f64({0.5, 0.9}, {2})})
      .expect({0.6931471805599453, 2.302585092994046}, {2})
      .tol32(2e-6, 1e-6)
      .error(
          "shape", Err::Value,
          "K::binary_crossentropy: target and output must have the same shape, got (2,) and (3,)",
          [] {
            (void)K::binary_crossentropy(cst({0, 1}, {2}), cst({0.5, 0.5, 0.5}, {3}));
          });
  // by hand: p = 1 is clipped to 1 - 1e-7, so t = 0 costs log(1 + (1 - 1e-7) / 1e-7) =
  // log(1e7) = 16.11809565095832 in float64 (1 - (1 - 1e-7) rounds by 6e-17: a relative 6e-10).
  // float32 rounds the bound to 1 - 2^-23: odds 2^23 - 1, log(2^23) = 15.942385152878742.
  t.values("binary_crossentropy_clipped_float64",
           [](const V& v) { return K::binary_crossentropy(v[0], v[1]); },
           {f64({0}, {1}), f64({1}, {1})})
      .in_dtypes({"float64", "float64"})
      .out_dtype("float64")
      .expect({16.11809565095832}, {1})
      .tol64(1e-9, 0)
      .tol32(1e-9, 0);
  t.values("binary_crossentropy_clipped_float32",
           [](const V& v) { return K::binary_crossentropy(v[0], v[1]); },
           {f64({0}, {1}), f64({1}, {1})})
      .in_dtypes({"float32", "float32"})
      .out_dtype("float32")
      .expect({15.942385152878742}, {1})
      .tol64(1e-6, 0)
      .tol32(1e-6, 0);
  return t.take();
}

}  // namespace ktape::op_rows
