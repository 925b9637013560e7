// Gradient semantics (spec 3.2: unconnected inputs, intermediate tensors, stop_gradient,
// non-scalar losses, kinks, unknown dims, the learning phase), the gradcheck harness itself,
// dropout's gradient and the float32 sigmoid tail. The per-op finite-difference checks (first and
// second order), the cpu-vs-reference parity and the unknown-dims comparison of every op are rows
// of tests/op_rows, run by tests/test_op_rows.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ktape/ktape.hpp"
#include "op_rows/op_row.hpp"

namespace {

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;
using ktape::op_rows::Agree;
using ktape::op_rows::f64;
using ktape::op_rows::Gen;
using V = std::vector<Tensor>;

// ---- gradient semantics (spec 3.2) -------------------------------------------------------------

::testing::AssertionResult Close(const NDArray& got, const std::vector<double>& want,
                                 double tol = 1e-12) {
  if (got.size() != static_cast<std::int64_t>(want.size()))
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double a = got.item(static_cast<std::int64_t>(i));
    if (!(std::abs(a - want[i]) <= tol * std::max(1.0, std::abs(want[i]))))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << a << " vs " << want[i] << "\n"
             << got.str();
  }
  return ::testing::AssertionSuccess();
}

TEST(GradientSemantics, UnconnectedVariableGetsNullTensor) {
  const Tensor x = K::variable(f64({1, 2, 3}, {3}), {.dtype = "float64"});
  const Tensor v = K::variable(f64({4, 5}, {2}), {.dtype = "float64"});
  const Tensor loss = K::sum(x * x);
  const auto g = K::gradients(loss, {x, v});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_TRUE(g[0].defined());
  EXPECT_FALSE(g[1].defined());
  EXPECT_FALSE(K::gradients(loss, {v})[0].defined());
  // d/dx sum(x^2) = 2x = [2,4,6]
  EXPECT_TRUE(Close(K::eval(g[0]), {2, 4, 6}));
  // An integer tensor gets no gradient; non-differentiable ops give none either.
  const Tensor xi = K::variable(f64({1, 2}, {2}), {.dtype = "int32"});
  EXPECT_FALSE(K::gradients(K::sum(K::cast(xi, "float64") * 2.0), {xi})[0].defined());
  EXPECT_FALSE(K::gradients(K::sum(K::round(x)), {x})[0].defined());
}

TEST(GradientSemantics, WithRespectToIntermediateTensor) {
  // loss = sum(x * exp(x)). d loss / d exp(x) = x; d loss / d (x*exp(x)) = 1;
  // d loss / d x = exp(x) * (1 + x).
  const std::vector<double> xv = {0.5, -1, 2, 0};
  const Tensor x = K::variable(f64(xv, {4}), {.dtype = "float64"});
  const Tensor e = K::exp(x);
  const Tensor p = x * e;
  const Tensor loss = K::sum(p);
  const auto g = K::gradients(loss, {e, p, x});
  ASSERT_TRUE(g[0].defined() && g[1].defined() && g[2].defined());
  EXPECT_TRUE(Close(K::eval(g[0]), xv));
  EXPECT_TRUE(Close(K::eval(g[1]), {1, 1, 1, 1}));
  std::vector<double> gx;
  for (double v : xv) gx.push_back(std::exp(v) * (1 + v));
  EXPECT_TRUE(Close(K::eval(g[2]), gx));
  // Keras's test_gradient: gradients(loss + stop_gradient(loss), [p]) is all ones and the
  // stopped loss alone contributes nothing.
  const Tensor zero_loss = K::stop_gradient(loss);
  EXPECT_TRUE(Close(K::eval(K::gradients(loss + zero_loss, {p})[0]), {1, 1, 1, 1}));
  EXPECT_FALSE(K::gradients(zero_loss, {p})[0].defined());
}

TEST(GradientSemantics, StopGradient) {
  const std::vector<double> xv = {0.3, -1.2, 2.0};
  const Tensor x = K::variable(f64(xv, {3}), {.dtype = "float64"});
  const Tensor loss = K::sum(K::square(x) * K::tanh(x));
  const NDArray g1 = K::eval(K::gradients(loss + K::stop_gradient(loss), {x})[0]);
  const NDArray g2 = K::eval(K::gradients(loss, {x})[0]);
  EXPECT_TRUE(Close(g1, g2.to_vector()));
  // d/dx x^2 tanh x = 2x tanh x + x^2 (1 - tanh^2 x)
  std::vector<double> want;
  for (double v : xv)
    want.push_back(2 * v * std::tanh(v) + v * v * (1 - std::tanh(v) * std::tanh(v)));
  EXPECT_TRUE(Close(g2, want));
  // The list form.
  const Tensor y = K::variable(f64({2, 3}, {2}), {.dtype = "float64"});
  const auto stopped = K::stop_gradient(std::vector<Tensor>{x, y});
  ASSERT_EQ(stopped.size(), 2u);
  const Tensor l2 = K::sum(stopped[0]) * K::sum(y) + K::sum(stopped[1] * y);
  const auto g = K::gradients(l2, {x, y});
  EXPECT_FALSE(g[0].defined());
  // d/dy [sum(x) sum(y) + sum(sg(y) * y)] = sum(x) + y = 1.1 + [2,3]
  EXPECT_TRUE(Close(K::eval(g[1]), {1.1 + 2, 1.1 + 3}));
}

TEST(GradientSemantics, CastsDuplicatesAndTheLossItself) {
  const Tensor x = K::variable(f64({1, -2, 3}, {3}), {.dtype = "float64"});
  // Through a float cast the gradient comes back in x's dtype.
  const Tensor gc = K::gradients(K::sum(K::cast(x, "float32") * 2.0), {x})[0];
  ASSERT_TRUE(gc.defined());
  EXPECT_EQ(K::dtype(gc), "float64");
  EXPECT_TRUE(Close(K::eval(gc), {2, 2, 2}));
  // ... but not through a cast to an integer type.
  EXPECT_FALSE(K::gradients(K::sum(K::cast(K::cast(x, "int32"), "float64")), {x})[0].defined());
  // The same tensor twice gets the same gradient twice.
  const Tensor loss = K::sum(K::square(x));
  const auto g2 = K::gradients(loss, {x, x});
  EXPECT_TRUE(Close(K::eval(g2[0]), {2, -4, 6}));
  EXPECT_TRUE(Close(K::eval(g2[1]), {2, -4, 6}));
  // d loss / d loss = 1
  EXPECT_TRUE(Close(K::eval(K::gradients(loss, {loss})[0]), {1}));
  // identity passes the gradient through
  EXPECT_TRUE(Close(K::eval(K::gradients(K::sum(K::identity(x) * x), {x})[0]), {2, -4, 6}));
}

TEST(GradientSemantics, BroadcastResolvedAtRunTime) {
  // Both operands are (None,); fed (3,) and (1,) the second one is broadcast, so its gradient
  // must be summed: d/dy sum(x * y) = sum(x) = 6, d/dx = y = [5, 5, 5].
  const Tensor x = K::placeholder({K::None}, {.dtype = "float64"});
  const Tensor y = K::placeholder({K::None}, {.dtype = "float64"});
  const auto g = K::gradients(K::sum(x * y), {x, y});
  const auto out = K::function({x, y}, {g[0], g[1]})({f64({1, 2, 3}, {3}), f64({5}, {1})});
  EXPECT_EQ(out[0].shape(), (Shape{3}));
  EXPECT_EQ(out[1].shape(), (Shape{1}));
  EXPECT_TRUE(Close(out[0], {5, 5, 5}));
  EXPECT_TRUE(Close(out[1], {6}));
}

TEST(GradientSemantics, NonScalarLossIsSummed) {
  const Tensor x = K::variable(f64({1, -2, 3, 0.5}, {2, 2}), {.dtype = "float64"});
  const NDArray g = K::eval(K::gradients(x * x, {x})[0]);
  EXPECT_EQ(g.shape(), (Shape{2, 2}));
  EXPECT_TRUE(Close(g, {2, -4, 6, 1}));
  EXPECT_TRUE(Close(g, K::eval(K::gradients(K::sum(x * x), {x})[0]).to_vector()));
  // broadcasting output: loss = x (2,2) + b (2,) summed -> d/db = [2, 2]
  const Tensor b = K::variable(f64({1, 1}, {2}), {.dtype = "float64"});
  EXPECT_TRUE(Close(K::eval(K::gradients(x + b, {b})[0]), {2, 2}));
}

// A seed (grad_ys) of another dtype than its y is a TypeError, as in tf.gradients: the gradient
// ops would read one operand as the other's dtype (out of bounds for float32 read as float64).
TEST(GradientSemantics, SeedOfAnotherDtypeIsATypeError) {
  const Tensor x = K::variable(f64({0.5, -1}, {2}), {.dtype = "float64"});
  const Tensor seed32 = K::constant(1.0, {.dtype = "float32", .shape = Shape{2}});
  for (const Tensor& y : {K::sigmoid(x), K::tanh(x), K::relu(x)}) {
    try {
      K::gradients({y}, {x}, {seed32});
      ADD_FAILURE() << "no error";
    } catch (const ktape::TypeError& e) {
      EXPECT_NE(
          std::string(e.what()).find("K::gradients: grad_ys[0] is float32 but ys[0] is float64"),
          std::string::npos)
          << e.what();
    }
  }
  // The same dtype is fine: d sigmoid(x) = s (1 - s) times the seed 2.
  const Tensor seed64 = K::constant(2.0, {.dtype = "float64", .shape = Shape{2}});
  const NDArray g = K::eval(K::gradients({K::sigmoid(x)}, {x}, {seed64})[0]);
  const double s0 = 1 / (1 + std::exp(-0.5)), s1 = 1 / (1 + std::exp(1.0));
  EXPECT_TRUE(Close(g, {2 * s0 * (1 - s0), 2 * s1 * (1 - s1)}));
}

// In half, sigmoid's and tanh's gradients (SigmoidGrad, TanhGrad) round every step to half, as
// TF's half packets do: g * (y * (1 - y)) and g * (1 - y * y), each product and difference
// rounded, computed here in float from the forward's y.
TEST(GradientSemantics, HalfGradientsRoundEveryStep) {
  const std::vector<double> xs = {-3.1, -0.7, 0.05, 0.9, 2.3, 4.7, -1.9, 0.33};
  const std::vector<double> gs = {0.3, -1.7, 2.9, 0.11, -0.6, 1.3, 3.7, -2.2};
  const Shape shape{8};
  const Tensor x =
      K::variable(NDArray::from_values(xs, shape, ktape::DType::float16), {.dtype = "float16"});
  const Tensor g =
      K::constant(NDArray::from_values(gs, shape, ktape::DType::float16), {.dtype = "float16"});
  auto h = [](float v) { return static_cast<float>(ktape::Half(v)); };
  for (const bool sigmoid : {true, false}) {
    const Tensor y = sigmoid ? K::sigmoid(x) : K::tanh(x);
    const NDArray yv = K::eval(y);
    const NDArray dx = K::eval(K::gradients({y}, {x}, {g})[0]);
    ASSERT_EQ(dx.dtype(), ktape::DType::float16);
    for (std::int64_t i = 0; i < 8; ++i) {
      const float yi = static_cast<float>(yv.item(i));
      const float gi = h(static_cast<float>(gs[static_cast<std::size_t>(i)]));
      const float want = sigmoid ? h(gi * h(yi * h(1.0f - yi))) : h(gi * h(1.0f - h(yi * yi)));
      EXPECT_EQ(static_cast<float>(dx.item(i)), want)
          << (sigmoid ? "sigmoid" : "tanh") << " at x = " << xs[static_cast<std::size_t>(i)];
    }
  }
}

TEST(GradientSemantics, KinksFollowTensorFlow) {
  // sqrt(x) = sqrt(clip(x, 0, inf)): at negative x the gradient is 0 (clip), not NaN.
  // d/dx sqrt(4) = 1 / (2 * 2) = 0.25
  const Tensor x = K::variable(f64({-1, 4}, {2}), {.dtype = "float64"});
  EXPECT_TRUE(Close(K::eval(K::gradients(K::sum(K::sqrt(x)), {x})[0]), {0, 0.25}));
  // maximum/minimum: ties send the gradient to x.
  const Tensor a = K::variable(f64({1, 2}, {2}), {.dtype = "float64"});
  const Tensor b = K::variable(f64({1, 3}, {2}), {.dtype = "float64"});
  const auto g = K::gradients(K::sum(K::maximum(a, b)), {a, b});
  EXPECT_TRUE(Close(K::eval(g[0]), {1, 0}));
  EXPECT_TRUE(Close(K::eval(g[1]), {0, 1}));
  // max reduction: ties share the gradient equally (TF): [3, 1, 3] -> [0.5, 0, 0.5]
  const Tensor c = K::variable(f64({3, 1, 3}, {3}), {.dtype = "float64"});
  EXPECT_TRUE(Close(K::eval(K::gradients(K::max(c), {c})[0]), {0.5, 0, 0.5}));
  // relu at exactly the threshold: 0 (TF)
  const Tensor r = K::variable(f64({0, 1, -1}, {3}), {.dtype = "float64"});
  EXPECT_TRUE(
      Close(K::eval(K::gradients(K::sum(K::relu(r, {.alpha = 0.5})), {r})[0]), {0, 1, 0.5}));
  // sign: zero gradient (defined); abs: sign(x)
  EXPECT_TRUE(Close(K::eval(K::gradients(K::sum(K::abs(r)), {r})[0]), {0, 1, -1}));
}

TEST(GradcheckHarness, DetectsAWrongGradient) {
  // x * stop_gradient(x): the analytic gradient is x, the true derivative 2x. A gradcheck that
  // passes this would pass anything.
  Gen g(5);
  const auto r = ktape::gradcheck([](const V& x) { return x[0] * K::stop_gradient(x[0]); },
                                  {g.uniform({3, 4}, 0.5, 2)});
  EXPECT_FALSE(r.ok);
  EXPECT_GT(r.max_error, 0.1);
  EXPECT_FALSE(r.report.empty());
  // ... and reports a null analytic gradient against a non-zero numeric one.
  const auto r2 = ktape::gradcheck([](const V& x) { return K::stop_gradient(x[0]) * 2.0; },
                                   {g.uniform({2}, 0.5, 2)});
  EXPECT_FALSE(r2.ok);
}

TEST(GradientSemantics, UnknownDimsUseRuntimeSizes) {
  // mean over a (None, 3) placeholder fed (4, 3): d mean / dx = 1/12 everywhere.
  const Tensor x = K::placeholder({K::None, 3}, {.dtype = "float64"});
  const Tensor g_all = K::gradients(K::mean(x), {x})[0];
  const Tensor g_ax0 = K::gradients(K::sum(K::mean(x, 0)), {x})[0];
  const Tensor g_ax1 = K::gradients(K::sum(K::mean(x, 1)), {x})[0];
  Gen g(8);
  const auto out = K::function({x}, {g_all, g_ax0, g_ax1})({g.normal({4, 3})});
  EXPECT_TRUE(Close(out[0], std::vector<double>(12, 1.0 / 12)));
  EXPECT_TRUE(Close(out[1], std::vector<double>(12, 1.0 / 4)));
  EXPECT_TRUE(Close(out[2], std::vector<double>(12, 1.0 / 3)));
  // The same Function with another batch size.
  const auto out2 = K::function({x}, {g_all})({g.normal({6, 3})});
  EXPECT_TRUE(Close(out2[0], std::vector<double>(18, 1.0 / 18)));
}

TEST(GradientSemantics, ThroughDynamicLearningPhase) {
  K::clear_session();
  const Tensor x = K::placeholder({3}, {.dtype = "float64"});
  const Tensor y = K::in_train_phase(x * 2.0, K::square(x));
  const Tensor gx = K::gradients(K::sum(y), {x})[0];
  ASSERT_TRUE(gx.defined());
  const K::Function f = K::function({x, K::learning_phase()}, {gx});
  const NDArray xv = f64({1, -2, 0.5}, {3});
  // train: d(2x)/dx = 2; test: d(x^2)/dx = 2x
  EXPECT_TRUE(Close(f({xv, NDArray::scalar(1, DType::bool_)})[0], {2, 2, 2}));
  EXPECT_TRUE(Close(f({xv, NDArray::scalar(0, DType::bool_)})[0], {2, -4, 1}));
  K::clear_session();
}

// Gradients built on placeholders with a None leading dim must equal those built on fully known
// ---- dropout's gradient is its own mask ---------------------------------------------------------

TEST(DropoutGradient, EqualsMaskOfTheSameCall) {
  for (const std::string backend : {"cpu", "reference"}) {
    SCOPED_TRACE(backend);
    const Tensor x = K::placeholder({300}, {.dtype = "float64"});
    const Tensor y = K::dropout(x, 0.3, {.seed = 5});
    const Tensor g = K::gradients(K::sum(y), {x})[0];
    ASSERT_TRUE(g.defined());
    const K::Function f = K::function({x}, {y, g}, {}, {.backend = backend});
    const NDArray ones = NDArray::full({300}, 1.0, DType::float64);
    NDArray first;
    for (int call = 0; call < 2; ++call) {
      const auto out = f({ones});
      int kept = 0;
      for (std::int64_t i = 0; i < 300; ++i) {
        const double yi = out[0].item(i);
        EXPECT_TRUE(yi == 0.0 || std::abs(yi - 1.0 / 0.7) < 1e-12) << i << ": " << yi;
        EXPECT_EQ(out[1].item(i), yi) << "call " << call << " element " << i;
        kept += yi != 0.0;
      }
      EXPECT_GT(kept, 150);
      EXPECT_LT(kept, 270);
      if (call == 0)
        first = out[0];
      else
        EXPECT_NE(first.to_vector(), out[0].to_vector()) << "the mask did not change";
    }
  }
}

TEST(DropoutGradient, NoiseShapeMaskGradient) {
  const Tensor x = K::placeholder({4, 6}, {.dtype = "float64"});
  const Tensor y = K::dropout(x, 0.5, {.noise_shape = Shape{1, 6}, .seed = 11});
  const Tensor g = K::gradients(K::sum(y), {x})[0];
  const auto out = K::function({x}, {y, g})({NDArray::full({4, 6}, 1.0, DType::float64)});
  for (std::int64_t i = 0; i < 24; ++i) {
    EXPECT_EQ(out[1].item(i), out[0].item(i));
    EXPECT_EQ(out[0].item(i), out[0].item(i % 6));
  }
}

TEST(DropoutParity, SameSeedSameMaskOnBothBackends) {
  // Two dropout nodes with one seed draw the same first mask; (300,300) takes the cpu kernel's
  // parallel path.
  for (const DType dt : {DType::float32, DType::float64})
    for (const Shape& s : {Shape{40, 50}, Shape{300, 300}}) {
      const std::string dn(ktape::dtype_name(dt));
      SCOPED_TRACE(dn + " " + s.str());
      const Tensor x = K::placeholder(s, {.dtype = dn});
      const Tensor a = K::dropout(x, 0.4, {.seed = 31});
      const Tensor b = K::dropout(x, 0.4, {.seed = 31});
      Gen g(3);
      const NDArray in = g.normal(s).astype(dt);
      const NDArray ya = K::function({x}, {a}, {}, {.backend = "cpu"})({in})[0];
      const NDArray yb = K::function({x}, {b}, {}, {.backend = "reference"})({in})[0];
      EXPECT_EQ(ya.to_vector(), yb.to_vector());
    }
}

// The table's sigmoid inputs (normal, std 2) rarely reach the tail; check it on a dense grid.
TEST(ParityAccuracy, Float32SigmoidTail) {
  std::vector<double> v;
  for (double x = -13; x <= -3; x += 0.05) v.push_back(x);
  const auto n = static_cast<std::int64_t>(v.size());
  const Tensor x = K::placeholder({n}, {.dtype = "float32"});
  const Tensor y = K::sigmoid(x);
  const Tensor gx = K::gradients(K::sum(y), {x})[0];
  const NDArray in = NDArray::from_values(v, {n}, DType::float32);
  const auto cpu = K::function({x}, {y, gx}, {}, {.backend = "cpu"})({in});
  const auto ref = K::function({x}, {y, gx}, {}, {.backend = "reference"})({in});
  // Relative error of each backend against the double-precision formula.
  double worst_cpu = 0, worst_ref = 0, at = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double exact = 1.0 / (1.0 + std::exp(-in.item(i)));
    const double rc = std::abs(cpu[0].item(i) - exact) / exact;
    const double rr = std::abs(ref[0].item(i) - exact) / exact;
    if (rc > worst_cpu) {
      worst_cpu = rc;
      at = in.item(i);
    }
    worst_ref = std::max(worst_ref, rr);
  }
  EXPECT_LT(worst_ref, 1e-6);
  const auto fwd = Agree("sigmoid", cpu[0], ref[0], 1e-5, 1e-2);
  const auto bwd = Agree("sigmoid gradient", cpu[1], ref[1], 1e-5, 1e-2);
  EXPECT_LT(worst_cpu, 1e-5) << "at x = " << at;
  EXPECT_TRUE(fwd);
  EXPECT_TRUE(bwd);
}

}  // namespace
