// Semantics of the K:: ops beyond one op's values: dropout statistics and seeds, variables and
// their values, dtype defaults, random sources and seeds, placeholders, predicates, uids, the
// learning phase and print_tensor; the float exp of the softmax kernels. The forward values and
// errors of each op are rows of tests/op_rows (run by tests/test_op_rows.cpp). Every expected value
// is independent of ktape.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ktape/ktape.hpp"
#include "op_rows/op_row.hpp"
#include "ops/kernels/softmax.hpp"
#include "test_util.hpp"

namespace {

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;
using ktape::op_rows::cst;

NDArray arr(const std::vector<double>& v, const Shape& s, DType dt = DType::float32) {
  return NDArray::from_values(v, s, dt);
}

::testing::AssertionResult Close(const NDArray& got, const std::vector<double>& want,
                                 const Shape& shape, double rtol = 1e-6, double atol = 1e-7) {
  return ktape::testing_util::Close(got, want, shape, rtol, atol);
}
::testing::AssertionResult Close(const Tensor& t, const std::vector<double>& want,
                                 const Shape& shape, double rtol = 1e-6, double atol = 1e-7) {
  return Close(K::eval(t), want, shape, rtol, atol);
}

TEST(Dropout, HalfLevelScalesKeptByTwo) {
  const Tensor x = K::ones({1000});
  const NDArray v = K::eval(K::dropout(x, 0.5, {.seed = 42}));
  ASSERT_EQ(v.shape(), (Shape{1000}));
  double sum = 0;
  int zeros = 0;
  for (std::int64_t i = 0; i < v.size(); ++i) {
    const double e = v.item(i);
    EXPECT_TRUE(e == 0.0 || e == 2.0) << "element " << i << " = " << e;
    sum += e;
    zeros += e == 0.0;
  }
  EXPECT_NEAR(sum / 1000.0, 1.0, 0.1);
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, 1000);
}

TEST(Dropout, FreshMaskPerEvaluationButSeedReproducible) {
  const Tensor x = K::ones({200});
  const Tensor a = K::dropout(x, 0.5, {.seed = 1234});
  const Tensor b = K::dropout(x, 0.5, {.seed = 1234});
  const NDArray a1 = K::eval(a);
  const NDArray a2 = K::eval(a);
  const NDArray b1 = K::eval(b);
  EXPECT_NE(a1.to_vector(), a2.to_vector()) << "two evaluations drew the same mask";
  EXPECT_EQ(a1.to_vector(), b1.to_vector()) << "same seed, different first evaluation";
  const NDArray c1 = K::eval(K::dropout(x, 0.5, {.seed = 99}));
  EXPECT_NE(a1.to_vector(), c1.to_vector()) << "different seeds, same mask";
}

TEST(Dropout, NoiseShapeSharesMaskAlongSizeOneAxes) {
  const Tensor x = K::ones({4, 5});
  // noise_shape (1,5): one mask row shared by all rows.
  const NDArray v = K::eval(K::dropout(x, 0.5, {.noise_shape = Shape{1, 5}, .seed = 7}));
  ASSERT_EQ(v.shape(), (Shape{4, 5}));
  for (int i = 1; i < 4; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_EQ(v.item(i * 5 + j), v.item(j)) << i << "," << j;
  for (std::int64_t i = 0; i < v.size(); ++i) EXPECT_TRUE(v.item(i) == 0.0 || v.item(i) == 2.0);
  // noise_shape (None,1): the None dim is taken from x; one value per row.
  const NDArray w = K::eval(K::dropout(x, 0.5, {.noise_shape = Shape{K::None, 1}, .seed = 8}));
  ASSERT_EQ(w.shape(), (Shape{4, 5}));
  for (int i = 0; i < 4; ++i)
    for (int j = 1; j < 5; ++j) EXPECT_EQ(w.item(i * 5 + j), w.item(i * 5)) << i << "," << j;
  // (A noise shape that does not broadcast: the dropout_level_zero row's errors.)
}

TEST(Dropout, ScalesNonUnitValues) {
  // level 0.75: kept entries are x / 0.25 = 4x.
  const std::vector<double> xs = {1, -2, 3, 0.5, 8, -1, 2, 4};
  const NDArray v = K::eval(K::dropout(cst(xs, {8}), 0.75, {.seed = 3}));
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double e = v.item(static_cast<std::int64_t>(i));
    EXPECT_TRUE(e == 0.0 || std::abs(e - 4 * xs[i]) < 1e-6) << i << ": " << e;
  }
}

TEST(Core, DtypeDefaultsToFloatx) {
  ASSERT_EQ(K::floatx(), "float32");
  EXPECT_EQ(K::dtype(K::variable(arr({1, 2}, {2}, DType::float64))), "float32");
  EXPECT_EQ(K::dtype(K::variable(1.5)), "float32");
  EXPECT_EQ(K::dtype(K::constant(arr({1, 2}, {2}, DType::float64))), "float32");
  EXPECT_EQ(K::dtype(K::constant(2.0)), "float32");
  EXPECT_EQ(K::dtype(K::placeholder({2, 3})), "float32");
  EXPECT_EQ(K::dtype(K::variable(arr({1, 2}, {2}), {.dtype = "float64"})), "float64");
  EXPECT_EQ(K::dtype(K::variable(arr({1, 2}, {2}), {.dtype = "int32"})), "int32");
  EXPECT_EQ(K::dtype(K::placeholder({2}, {.dtype = "int64"})), "int64");
  EXPECT_THROW((void)K::variable(arr({1}, {1}), {.dtype = "unsupported"}), ktape::TypeError);
  // constant with a shape broadcasts a scalar
  EXPECT_TRUE(Close(K::constant(3.0, {.shape = Shape{2, 2}}), {3, 3, 3, 3}, {2, 2}));
}

TEST(Core, IntShapeNdimCountParams) {
  const Tensor p = K::placeholder({K::None, 3});
  EXPECT_EQ(K::int_shape(p), (Shape{K::None, 3}));
  EXPECT_EQ(K::ndim(p), 2);
  const Tensor v = K::variable(arr({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_EQ(K::int_shape(v), (Shape{2, 3}));
  EXPECT_EQ(K::ndim(v), 2);
  EXPECT_EQ(K::count_params(v), 6);
  EXPECT_EQ(K::count_params(K::variable(2.0)), 1);
  EXPECT_THROW((void)K::count_params(p), ktape::ValueError);
}

// (Their values: the zeros_by_hand, ones_by_hand, eye_by_hand, ... rows.)
TEST(Core, ZerosOnesEyeAreVariables) {
  EXPECT_TRUE(K::is_variable(K::zeros({2, 3})));
  EXPECT_TRUE(K::is_variable(K::ones({3})));
  EXPECT_TRUE(K::is_variable(K::eye(2, 3)));
  // zero-size shapes give a constant
  EXPECT_FALSE(K::is_variable(K::zeros({0, 3})));
}

// The crossentropy rows' hand values use Keras's default epsilon.
TEST(Core, EpsilonIsKerasDefault) { ASSERT_DOUBLE_EQ(K::epsilon(), 1e-7); }

TEST(Core, GetSetValue) {
  const Tensor v = K::variable(arr({1, 2, 3, 4}, {2, 2}));
  EXPECT_TRUE(Close(K::get_value(v), {1, 2, 3, 4}, {2, 2}, 0, 0));
  // A float64 value is cast to the variable's dtype.
  K::set_value(v, arr({5, 6, 7, 8.5}, {2, 2}, DType::float64));
  const NDArray g = K::get_value(v);
  EXPECT_EQ(g.dtype(), DType::float32);
  EXPECT_TRUE(Close(g, {5, 6, 7, 8.5}, {2, 2}, 0, 0));
  EXPECT_TRUE(Close(K::eval(v * 2.0), {10, 12, 14, 17}, {2, 2}, 0, 0));
  EXPECT_THROW(K::set_value(v, arr({1, 2, 3, 4}, {4})), ktape::ValueError);
  EXPECT_THROW(K::set_value(v, arr({1, 2, 3, 4, 5, 6}, {2, 3})), ktape::ValueError);
  EXPECT_THROW(K::set_value(cst({1, 2}, {2}), arr({3, 4}, {2})), ktape::TypeError);
  EXPECT_THROW(K::set_value(K::placeholder({2}), arr({3, 4}, {2})), ktape::TypeError);
}

TEST(Core, BatchGetSetValue) {
  const Tensor a = K::variable(arr({1, 2}, {2}));
  const Tensor b = K::variable(arr({3}, {}), {.dtype = "float64"});
  K::batch_set_value({{a, arr({10, 20}, {2})}, {b, arr({30}, {})}});
  const auto vals = K::batch_get_value({a, b});
  ASSERT_EQ(vals.size(), 2u);
  EXPECT_TRUE(Close(vals[0], {10, 20}, {2}, 0, 0));
  EXPECT_TRUE(Close(vals[1], {30}, {}, 0, 0));
  EXPECT_EQ(vals[1].dtype(), DType::float64);
  EXPECT_TRUE(K::batch_get_value({}).empty());
}

TEST(Core, RandomUniform) {
  const NDArray v = K::eval(K::random_uniform({10000}, -1.0, 3.0, {.seed = 11}));
  ASSERT_EQ(v.shape(), (Shape{10000}));
  EXPECT_EQ(v.dtype(), DType::float32);
  double sum = 0, lo = 1e9, hi = -1e9;
  for (std::int64_t i = 0; i < v.size(); ++i) {
    const double e = v.item(i);
    sum += e;
    lo = std::min(lo, e);
    hi = std::max(hi, e);
  }
  EXPECT_GE(lo, -1.0);
  EXPECT_LT(hi, 3.0);
  EXPECT_NEAR(sum / 10000, 1.0, 0.05);  // center of [-1, 3)
  EXPECT_LT(lo, -0.99);                 // the range is actually covered
  EXPECT_GT(hi, 2.99);
}

TEST(Core, RandomNormal) {
  const NDArray v = K::eval(K::random_normal({10000}, 0.5, 1.0, {.seed = 12}));
  double sum = 0, sq = 0;
  for (std::int64_t i = 0; i < v.size(); ++i) sum += v.item(i);
  const double mean = sum / 10000;
  for (std::int64_t i = 0; i < v.size(); ++i) sq += (v.item(i) - mean) * (v.item(i) - mean);
  EXPECT_NEAR(mean, 0.5, 0.05);
  EXPECT_NEAR(std::sqrt(sq / 10000), 1.0, 0.05);
}

TEST(Core, TruncatedNormal) {
  const double stddev = 2.0, mean = 1.0;
  const NDArray v = K::eval(K::truncated_normal({10000}, mean, stddev, {.seed = 13}));
  double sum = 0, sq = 0, worst = 0;
  for (std::int64_t i = 0; i < v.size(); ++i) {
    sum += v.item(i);
    worst = std::max(worst, std::abs(v.item(i) - mean));
  }
  const double m = sum / 10000;
  for (std::int64_t i = 0; i < v.size(); ++i) sq += (v.item(i) - m) * (v.item(i) - m);
  EXPECT_LE(worst, 2 * stddev + 1e-6);
  EXPECT_NEAR(m, mean, 0.05 * stddev);
  // std of a standard normal truncated to [-2, 2] is 0.87962
  EXPECT_NEAR(std::sqrt(sq / 10000) / stddev, 0.88, 0.03);
}

TEST(Core, RandomTensorsDrawFreshValuesPerEvaluation) {
  const Tensor r = K::random_uniform({50}, 0.0, 1.0, {.seed = 21});
  EXPECT_NE(K::eval(r).to_vector(), K::eval(r).to_vector());
  // (A non-float dtype: the random_uniform_degenerate row's errors.)
}

TEST(Core, RandomVariablesDeterministicForFixedSeed) {
  const Tensor a = K::random_uniform_variable({3, 4}, -2.0, 2.0, {.seed = 5});
  const Tensor b = K::random_uniform_variable({3, 4}, -2.0, 2.0, {.seed = 5});
  const Tensor c = K::random_uniform_variable({3, 4}, -2.0, 2.0, {.seed = 6});
  EXPECT_TRUE(K::is_variable(a));
  const NDArray va = K::get_value(a);
  EXPECT_EQ(va.to_vector(), K::get_value(b).to_vector());
  EXPECT_NE(va.to_vector(), K::get_value(c).to_vector());
  for (double e : va.to_vector()) {
    EXPECT_GE(e, -2.0);
    EXPECT_LT(e, 2.0);
  }
  // Evaluating a variable twice gives the same values (it is not a random op).
  EXPECT_EQ(K::eval(a).to_vector(), K::eval(a).to_vector());
  const Tensor n1 = K::random_normal_variable({100}, 3.0, 0.1, {.seed = 9});
  const Tensor n2 = K::random_normal_variable({100}, 3.0, 0.1, {.seed = 9});
  EXPECT_EQ(K::get_value(n1).to_vector(), K::get_value(n2).to_vector());
  double s = 0;
  for (double e : K::get_value(n1).to_vector()) s += e;
  EXPECT_NEAR(s / 100, 3.0, 0.05);  // the mean is honoured (unlike TH)
}

TEST(Core, PlaceholderNdimAndErrors) {
  const Tensor p = K::placeholder({.ndim = 2});
  EXPECT_EQ(K::int_shape(p), (Shape{K::None, K::None}));
  EXPECT_TRUE(K::is_placeholder(p));
  EXPECT_EQ(K::int_shape(K::placeholder({.ndim = 0})), Shape{});
  EXPECT_THROW((void)K::placeholder(K::PlaceholderOptions{}), ktape::ValueError);
  EXPECT_TRUE(K::is_sparse(K::placeholder({2}, {.sparse = true})));  // tests/test_sparse.cpp
  // K::eval of something that needs a placeholder
  EXPECT_THROW((void)K::eval(p * 2.0), ktape::ValueError);
}

TEST(Core, Predicates) {
  EXPECT_THROW((void)K::is_keras_tensor(Tensor{}), ktape::ValueError);
  const Tensor v = K::variable(arr({1}, {1}));
  const Tensor p = K::placeholder({1});
  const Tensor c = cst({1}, {1});
  EXPECT_FALSE(K::is_keras_tensor(v));
  EXPECT_FALSE(K::is_keras_tensor(p));
  EXPECT_TRUE(K::is_variable(v));
  EXPECT_FALSE(K::is_variable(p));
  EXPECT_FALSE(K::is_variable(c));
  EXPECT_FALSE(K::is_variable(v * 2.0));
  EXPECT_TRUE(K::is_placeholder(p));
  EXPECT_FALSE(K::is_placeholder(v));
  EXPECT_FALSE(K::is_placeholder(p + 1.0));
  EXPECT_TRUE(K::is_tensor(c));
  EXPECT_FALSE(K::is_tensor(Tensor{}));
}

TEST(Core, RandomSeedFromSetRandomSeed) {
  // seed = nullopt draws the op seed from the generator seeded by set_random_seed (Keras draws
  // it from numpy's RNG at graph-construction time), so re-seeding reproduces the graph.
  K::set_random_seed(123);
  const Tensor a = K::random_uniform({20});
  const Tensor da = K::dropout(K::ones({50}), 0.5);
  K::set_random_seed(123);
  const Tensor b = K::random_uniform({20});
  const Tensor db = K::dropout(K::ones({50}), 0.5);
  EXPECT_EQ(K::eval(a).to_vector(), K::eval(b).to_vector());
  EXPECT_EQ(K::eval(da).to_vector(), K::eval(db).to_vector());
  const std::uint64_t s = K::draw_seed();
  EXPECT_LT(s, 10000000u);  // like np.random.randint(10e6)
}

TEST(Core, Uids) {
  K::reset_uids();
  EXPECT_EQ(K::get_uid("a"), 1);
  EXPECT_EQ(K::get_uid("a"), 2);
  EXPECT_EQ(K::get_uid("b"), 1);
  EXPECT_EQ(K::get_uid("a"), 3);
  K::reset_uids();
  EXPECT_EQ(K::get_uid("a"), 1);
  EXPECT_EQ(K::get_uid("b"), 1);
  EXPECT_EQ(K::get_uid(), 1);
  EXPECT_EQ(K::get_uid(), 2);
  K::clear_session();  // also resets the uids
  EXPECT_EQ(K::get_uid("a"), 1);
  EXPECT_EQ(K::get_uid(), 1);
}

TEST(Control, StaticTrainingCallsOnlyTheChosenBranch) {
  bool called_x = false, called_alt = false;
  const Tensor a = cst({1, 2, 3}, {3});
  const Tensor b = cst({10, 20}, {2});  // different shapes are fine when static
  auto fx = [&]() -> Tensor {
    called_x = true;
    return a;
  };
  auto falt = [&]() -> Tensor {
    called_alt = true;
    return b;
  };
  const Tensor y1 = K::in_train_phase(fx, falt, 1);
  EXPECT_TRUE(called_x);
  EXPECT_FALSE(called_alt);
  EXPECT_TRUE(Close(y1, {1, 2, 3}, {3}));

  called_x = called_alt = false;
  const Tensor y0 = K::in_train_phase(fx, falt, 0);
  EXPECT_FALSE(called_x);
  EXPECT_TRUE(called_alt);
  EXPECT_TRUE(Close(y0, {10, 20}, {2}));

  // in_test_phase(x, alt, training) == in_train_phase(alt, x, training)
  called_x = called_alt = false;
  const Tensor t0 = K::in_test_phase(fx, falt, 0);
  EXPECT_TRUE(called_x);
  EXPECT_FALSE(called_alt);
  EXPECT_TRUE(Close(t0, {1, 2, 3}, {3}));
  called_x = called_alt = false;
  const Tensor t1 = K::in_test_phase(fx, falt, 1);
  EXPECT_FALSE(called_x);
  EXPECT_TRUE(called_alt);
  EXPECT_TRUE(Close(t1, {10, 20}, {2}));
}

TEST(Control, DynamicLearningPhaseThroughFunction) {
  K::clear_session();
  const Tensor a = cst({1, 2}, {2});
  const Tensor b = cst({10, 20}, {2});
  const Tensor lp = K::learning_phase();
  EXPECT_TRUE(K::is_placeholder(lp));
  const Tensor y = K::in_train_phase(a, b);
  const Tensor z = K::in_test_phase(a, b);
  const K::Function f = K::function({lp}, {y, z});
  auto out = f({NDArray::scalar(1.0, DType::bool_)});
  EXPECT_TRUE(Close(out[0], {1, 2}, {2}));
  EXPECT_TRUE(Close(out[1], {10, 20}, {2}));
  out = f({NDArray::scalar(0.0, DType::bool_)});
  EXPECT_TRUE(Close(out[0], {10, 20}, {2}));
  EXPECT_TRUE(Close(out[1], {1, 2}, {2}));
  // Any numeric scalar is accepted for the learning phase.
  out = f({NDArray::scalar(1.0, DType::float32)});
  EXPECT_TRUE(Close(out[0], {1, 2}, {2}));
  out = f({NDArray::scalar(0.0, DType::float32)});
  EXPECT_TRUE(Close(out[0], {10, 20}, {2}));
  // Not fed: test mode.
  const K::Function g = K::function({}, {y, z});
  out = g({});
  EXPECT_TRUE(Close(out[0], {10, 20}, {2}));
  EXPECT_TRUE(Close(out[1], {1, 2}, {2}));
  EXPECT_TRUE(Close(K::eval(y), {10, 20}, {2}));
  K::clear_session();
}

TEST(Control, DynamicLearningPhaseWithDropout) {
  K::clear_session();
  const Tensor x = K::ones({100});
  const Tensor y = K::in_train_phase([&] { return K::dropout(x, 0.5, {.seed = 77}); }, x);
  const K::Function f = K::function({K::learning_phase()}, {y});
  const NDArray test = f({NDArray::scalar(0.0, DType::bool_)})[0];
  for (std::int64_t i = 0; i < test.size(); ++i) EXPECT_EQ(test.item(i), 1.0);
  const NDArray train = f({NDArray::scalar(1.0, DType::bool_)})[0];
  int zeros = 0;
  for (std::int64_t i = 0; i < train.size(); ++i) {
    EXPECT_TRUE(train.item(i) == 0.0 || train.item(i) == 2.0);
    zeros += train.item(i) == 0.0;
  }
  EXPECT_GT(zeros, 0);
  K::clear_session();
}

TEST(Control, StaticLearningPhase) {
  K::clear_session();
  EXPECT_THROW(K::set_learning_phase(2), ktape::ValueError);
  EXPECT_THROW(K::set_learning_phase(-1), ktape::ValueError);
  K::set_learning_phase(1);
  bool called_x = false, called_alt = false;
  const Tensor y = K::in_train_phase(
      [&]() -> Tensor {
        called_x = true;
        return cst({1}, {1});
      },
      [&]() -> Tensor {
        called_alt = true;
        return cst({2}, {1});
      });
  EXPECT_TRUE(called_x);
  EXPECT_FALSE(called_alt);
  EXPECT_TRUE(Close(y, {1}, {1}));
  EXPECT_EQ(K::eval(K::learning_phase()).item(0), 1.0);
  K::set_learning_phase(0);
  EXPECT_TRUE(Close(K::in_train_phase(cst({1}, {1}), cst({2}, {1})), {2}, {1}));
  K::clear_session();  // dynamic again
  EXPECT_TRUE(K::is_placeholder(K::learning_phase()));
}

}  // namespace

TEST(PrintTensor, LogsMessageAndValuesEveryCallAndPassesTheValueThrough) {
  auto x = K::placeholder({3});
  auto y = K::print_tensor(x * 2.0, "doubled: ") + 1.0;
  auto f = K::function({x}, {y});
  testing::internal::CaptureStderr();
  auto out = f({NDArray::from_values({1.0, 2.5, -4.0}, Shape{3})});
  f({NDArray::from_values({0.0, 0.0, 7.0}, Shape{3})});
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out[0].item(0), 3.0);
  EXPECT_EQ(out[0].item(1), 6.0);
  EXPECT_EQ(out[0].item(2), -7.0);
  const auto first = log.find("doubled: ");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_NE(log.find("doubled: ", first + 1), std::string::npos) << "one line per call: " << log;
  EXPECT_NE(log.find("-8"), std::string::npos) << log;
  EXPECT_NE(log.find("14"), std::string::npos) << log;
  // The gradient passes straight through (identity).
  auto g = K::gradients(K::sum(K::print_tensor(x, "x") * 3.0), {x})[0];
  testing::internal::CaptureStderr();
  auto gv = K::function({x}, {g})({NDArray::from_values({1.0, 2.0, 3.0}, Shape{3})});
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(gv[0].item(1), 3.0);
}

TEST(PrintTensor, PrintsAlsoWhenOnlyItsShapeIsRead) {
  // A plan skips nodes read only for their dims (OpDef::shape_only), but not a print: it runs
  // for its effect.
  auto x = K::placeholder({K::None});
  auto f = K::function({x}, {K::ones_like(K::print_tensor(x * 2.0, "shape only: "))});
  testing::internal::CaptureStderr();
  auto out = f({NDArray::from_values({1.0, 2.5}, Shape{2})});
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out[0].item(1), 1.0);
  EXPECT_NE(log.find("shape only: "), std::string::npos) << log;
}

// The softmax family's float exp (ops/kernels/softmax.hpp): against e^x computed in double and
// rounded once to float (an independent value), at a spread of bit patterns over the whole
// range where it is neither 0 nor inf, and at the edges.
namespace {

std::int64_t ulps_apart(float a, float b) {  // both finite and of one sign, or both zero
  return std::abs(static_cast<std::int64_t>(std::bit_cast<std::int32_t>(a)) -
                  static_cast<std::int64_t>(std::bit_cast<std::int32_t>(b)));
}

float exp_rounded(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }

}  // namespace

TEST(SoftmaxExp, WithinOneUlpOfTheRoundedValue) {
  std::int64_t checked = 0, worst = 0;
  float worst_x = 0;
  for (std::uint32_t b = 0; b < 0xFFFF0000u; b += 9973) {  // every 9973rd pattern
    const float x = std::bit_cast<float>(b);
    if (!(x >= -103.0f && x <= 88.7f)) continue;  // NaN and the ends: below
    const std::int64_t d = ulps_apart(ktape::kernels::exp_float(x), exp_rounded(x));
    if (d > worst) {
      worst = d;
      worst_x = x;
    }
    ++checked;
  }
  EXPECT_GT(checked, 200000);
  EXPECT_LE(worst, 1) << "at x = " << worst_x;
}

TEST(SoftmaxExp, EdgesAndSpecialValues) {
  using ktape::kernels::exp_float;
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp_float(0.0f), 1.0f);
  EXPECT_EQ(exp_float(-0.0f), 1.0f);
  EXPECT_EQ(exp_float(-inf), 0.0f);
  EXPECT_EQ(exp_float(inf), inf);
  EXPECT_EQ(exp_float(88.73f), inf);  // e^88.7228 is FLT_MAX
  EXPECT_EQ(exp_float(1e30f), inf);
  EXPECT_TRUE(std::isfinite(exp_float(88.72f)));
  EXPECT_LE(ulps_apart(exp_float(88.72f), exp_rounded(88.72f)), 1);
  EXPECT_TRUE(std::isnan(exp_float(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(exp_float(-104.0f), 0.0f);  // e^-104 = 6.8e-46, under half the least denormal
  EXPECT_EQ(exp_float(-1e30f), 0.0f);
  for (float x : {-87.5f, -90.0f, -95.5f, -100.0f, -103.0f}) {  // denormal results
    EXPECT_GT(exp_float(x), 0.0f) << x;
    EXPECT_LE(ulps_apart(exp_float(x), exp_rounded(x)), 1) << x;
  }
}

// The gradient of clip passes where lo <= x <= hi, the bounds included, compared in double on
// both backends: float(0.1) lies above the bound 0.1 and the float just below it does not;
// float(0.7) lies below 0.7 and gets no gradient (TF compares in the tensor's dtype and would
// pass it).
TEST(Clip, GradientPassesAtTheBoundsOnEveryBackend) {
  for (const char* dtype : {"float32", "float64"}) {
    const DType dt = std::string(dtype) == "float32" ? DType::float32 : DType::float64;
    auto as_dtype = [&](double v) {
      return dt == DType::float32 ? static_cast<double>(static_cast<float>(v)) : v;
    };
    std::vector<NDArray> seventh;
    for (const char* backend : {"cpu", "reference"}) {
      K::clear_session();
      auto x = K::placeholder({5}, {.dtype = dtype});
      auto grad = [&](double lo, double hi) {
        return K::gradients(K::sum(K::clip(x, lo, hi)), {x})[0];
      };
      auto f = K::function({x}, {grad(-0.5, 0.75), grad(0.1, 1.0), grad(0.7, 1.0)}, {},
                           {.backend = backend});
      const auto out = f({arr({-1.0, -0.5, 0.25, 0.75, 2.0}, Shape{5}, dt)});
      EXPECT_TRUE(Close(out[0], {0, 1, 1, 1, 0}, Shape{5}, 0, 0)) << backend << " " << dtype;
      const double below = dt == DType::float32 ? static_cast<double>(std::nextafter(0.1f, 0.0f))
                                                : std::nextafter(0.1, 0.0);
      const auto near = f({arr({as_dtype(0.1), below, 1.0, 1.5, 0.5}, Shape{5}, dt)});
      EXPECT_TRUE(Close(near[1], {1, 0, 1, 0, 1}, Shape{5}, 0, 0)) << backend << " " << dtype;
      seventh.push_back(
          f({arr({as_dtype(0.7), as_dtype(0.7000001), 0.9, 1.0, 0.6999999}, Shape{5}, dt)})[2]);
    }
    const std::vector<double> want = dt == DType::float32 ? std::vector<double>{0, 1, 1, 1, 0}
                                                          : std::vector<double>{1, 1, 1, 1, 0};
    for (const NDArray& got : seventh) EXPECT_TRUE(Close(got, want, Shape{5}, 0, 0)) << dtype;
  }
}

// K::switch_ on both backends, by hand: a condition of one value picks one operand whole (or its
// one value, filled), a full condition picks element by element with either branch a single value.
TEST(Switch, PicksOperandsOfEveryShape) {
  for (const char* backend : {"cpu", "reference"}) {
    K::clear_session();
    auto x = K::placeholder({6});
    auto c = K::placeholder(Shape{});
    auto cv = K::placeholder({6});
    auto f =
        K::function({x, c, cv},
                    {K::switch_(c, x * 2.0, x), K::switch_(c, K::constant(7.0), x),
                     K::switch_(cv, x, K::constant(-1.0)), K::switch_(cv, K::constant(5.0), x)},
                    {}, {.backend = backend});
    const NDArray xv = arr({1, 2, 3, 4, 5, 6}, Shape{6});
    const NDArray pick = arr({1, 0, 1, 0, 0, 1}, Shape{6});
    for (double cond : {1.0, 0.0}) {
      const auto out = f({xv, arr({cond}, Shape{}), pick});
      const bool on = cond != 0.0;
      EXPECT_TRUE(Close(
          out[0],
          on ? std::vector<double>{2, 4, 6, 8, 10, 12} : std::vector<double>{1, 2, 3, 4, 5, 6},
          Shape{6}, 0, 0))
          << backend << " " << cond;
      EXPECT_TRUE(
          Close(out[1],
                on ? std::vector<double>{7, 7, 7, 7, 7, 7} : std::vector<double>{1, 2, 3, 4, 5, 6},
                Shape{6}, 0, 0))
          << backend << " " << cond;
      EXPECT_TRUE(Close(out[2], {1, -1, 3, -1, -1, 6}, Shape{6}, 0, 0)) << backend;
      EXPECT_TRUE(Close(out[3], {5, 2, 5, 4, 5, 5}, Shape{6}, 0, 0)) << backend;
    }
  }
}
