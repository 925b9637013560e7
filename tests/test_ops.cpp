// Forward values and errors of the K:: ops (elementwise, nn, reductions, layout, core, control).
// Every expected value is independent of ktape: either written out by hand next to the check, or
// computed with <cmath> from the textbook formula (numpy was not available to precompute them).
#include <gtest/gtest.h>

#include <functional>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "ktape/ktape.hpp"

namespace {

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

NDArray arr(const std::vector<double>& v, const Shape& s, DType dt = DType::float32) {
  return NDArray::from_values(v, s, dt);
}

// A constant tensor of the given dtype (K::constant would otherwise cast to floatx).
Tensor cst(const std::vector<double>& v, const Shape& s, const std::string& dtype = "float32") {
  return K::constant(NDArray::from_values(v, s, DType::float64), {.dtype = dtype});
}

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

// Element-wise comparison against expected values: NaN matches NaN, infinities must match
// exactly, otherwise |got - want| <= rtol * |want| + atol.
::testing::AssertionResult Close(const NDArray& got, const std::vector<double>& want,
                                 const Shape& shape, double rtol = 1e-6, double atol = 1e-7) {
  if (got.shape() != shape)
    return ::testing::AssertionFailure()
           << "shape " << got.shape().str() << ", expected " << shape.str();
  if (got.size() != static_cast<std::int64_t>(want.size()))
    return ::testing::AssertionFailure() << "size " << got.size() << ", expected " << want.size();
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got.item(static_cast<std::int64_t>(i));
    const double w = want[i];
    bool ok;
    if (std::isnan(w))
      ok = std::isnan(g);
    else if (std::isinf(w))
      ok = g == w;
    else
      ok = std::abs(g - w) <= rtol * std::abs(w) + atol;
    if (!ok)
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << g << ", expected " << w << "\n  array " << got.str();
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult Close(const Tensor& t, const std::vector<double>& want,
                                 const Shape& shape, double rtol = 1e-6, double atol = 1e-7) {
  return Close(K::eval(t), want, shape, rtol, atol);
}

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// ============================================================================================
// Arithmetic with numpy broadcasting
// ============================================================================================

TEST(Arithmetic, AddRowBroadcast) {
  // (2,3) + (3,): [[1,2,3],[4,5,6]] + [10,20,30]
  const Tensor a = cst({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = cst({10, 20, 30}, {3});
  const Tensor y = a + b;
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_TRUE(Close(y, {11, 22, 33, 14, 25, 36}, {2, 3}));
  EXPECT_TRUE(Close(b + a, {11, 22, 33, 14, 25, 36}, {2, 3}));
  EXPECT_EQ(K::dtype(y), "float32");
}

TEST(Arithmetic, OuterBroadcastSubMulDiv) {
  // a = [[1],[2]] (2,1), b = [[10,20,30]] (1,3)
  const Tensor a = cst({1, 2}, {2, 1});
  const Tensor b = cst({10, 20, 30}, {1, 3});
  // a - b = [[1-10, 1-20, 1-30], [2-10, 2-20, 2-30]]
  EXPECT_TRUE(Close(a - b, {-9, -19, -29, -8, -18, -28}, {2, 3}));
  EXPECT_TRUE(Close(a + b, {11, 21, 31, 12, 22, 32}, {2, 3}));
  EXPECT_TRUE(Close(a * b, {10, 20, 30, 20, 40, 60}, {2, 3}));
  // b / a = [[10,20,30],[5,10,15]]
  EXPECT_TRUE(Close(b / a, {10, 20, 30, 5, 10, 15}, {2, 3}));
  // a / b = [[1/10, 1/20, 1/30], [2/10, 2/20, 2/30]]
  EXPECT_TRUE(Close(a / b, {0.1, 0.05, 1.0 / 30, 0.2, 0.1, 2.0 / 30}, {2, 3}));
}

TEST(Arithmetic, ScalarDoubleOnEitherSide) {
  const Tensor x = cst({1, 2, 4}, {3});
  EXPECT_TRUE(Close(x + 1.0, {2, 3, 5}, {3}));
  EXPECT_TRUE(Close(1.0 + x, {2, 3, 5}, {3}));
  EXPECT_TRUE(Close(x - 1.0, {0, 1, 3}, {3}));
  EXPECT_TRUE(Close(1.0 - x, {0, -1, -3}, {3}));
  EXPECT_TRUE(Close(x * 2.0, {2, 4, 8}, {3}));
  EXPECT_TRUE(Close(2.0 * x, {2, 4, 8}, {3}));
  EXPECT_TRUE(Close(x / 4.0, {0.25, 0.5, 1}, {3}));
  EXPECT_TRUE(Close(8.0 / x, {8, 4, 2}, {3}));
  EXPECT_TRUE(Close(-x, {-1, -2, -4}, {3}));
  // The double becomes a scalar of the tensor's dtype.
  const Tensor x64 = cst({1, 2}, {2}, "float64");
  EXPECT_EQ(K::dtype(x64 * 0.5), "float64");
  EXPECT_TRUE(Close(x64 * 0.5, {0.5, 1.0}, {2}, 1e-15, 0));
}

TEST(Arithmetic, ScalarTensorOperands) {
  // A rank-0 tensor broadcasts against anything.
  const Tensor s = cst({3}, {});
  const Tensor x = cst({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(Close(s * x, {3, 6, 9, 12}, {2, 2}));
  EXPECT_TRUE(Close(x - s, {-2, -1, 0, 1}, {2, 2}));
  EXPECT_TRUE(Close(s + s, {6}, {}));
}

TEST(Arithmetic, SizeOneDims) {
  // a (2,1,2) = [[[1,2]],[[3,4]]], b (1,3,1) = [[[10],[20],[30]]]
  // out[i][j][k] = a[i][0][k] + b[0][j][0]
  const Tensor a = cst({1, 2, 3, 4}, {2, 1, 2});
  const Tensor b = cst({10, 20, 30}, {1, 3, 1});
  EXPECT_TRUE(Close(a + b, {11, 12, 21, 22, 31, 32, 13, 14, 23, 24, 33, 34}, {2, 3, 2}));
  // (1,1) * (2,3): every element times 2.
  EXPECT_TRUE(
      Close(cst({2}, {1, 1}) * cst({1, 2, 3, 4, 5, 6}, {2, 3}), {2, 4, 6, 8, 10, 12}, {2, 3}));
  // (3,) + (1,): size-1 vector broadcasts along the only axis.
  EXPECT_TRUE(Close(cst({1, 2, 3}, {3}) + cst({5}, {1}), {6, 7, 8}, {3}));
}

TEST(Arithmetic, ZeroSizeDims) {
  const Tensor a = cst({}, {0, 3});
  const Tensor b = cst({1, 2, 3}, {3});
  const Tensor y = a + b;
  EXPECT_EQ(y.shape(), (Shape{0, 3}));
  const NDArray v = K::eval(y);
  EXPECT_EQ(v.shape(), (Shape{0, 3}));
  EXPECT_EQ(v.size(), 0);
  EXPECT_EQ(K::eval(b * a).shape(), (Shape{0, 3}));
  // (0,1) broadcast with (1,3) -> (0,3)
  EXPECT_EQ(K::eval(cst({}, {0, 1}) - cst({1, 2, 3}, {1, 3})).shape(), (Shape{0, 3}));
}

TEST(Arithmetic, IncompatibleShapesIsValueError) {
  const Tensor a = cst({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = cst({1, 2, 3, 4}, {4});
  try {
    (void)(a + b);
    FAIL() << "expected ktape::ValueError";
  } catch (const ktape::ValueError& e) {
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "(2, 3)")) << msg;
    EXPECT_TRUE(contains(msg, "(4,)")) << msg;
  }
  EXPECT_THROW((void)(a * b), ktape::ValueError);
  EXPECT_THROW((void)(b - a), ktape::ValueError);
  EXPECT_THROW((void)(a / b), ktape::ValueError);
  // (0,) does not broadcast with (3,)
  EXPECT_THROW((void)(cst({}, {0}) + cst({1, 2, 3}, {3})), ktape::ValueError);
}

TEST(Arithmetic, MixedDtypesIsTypeError) {
  const Tensor a = cst({1, 2}, {2}, "float32");
  const Tensor b = cst({1, 2}, {2}, "float64");
  EXPECT_THROW((void)(a + b), ktape::TypeError);
  EXPECT_THROW((void)(b - a), ktape::TypeError);
  EXPECT_THROW((void)(a * b), ktape::TypeError);
  EXPECT_THROW((void)(a / b), ktape::TypeError);
  EXPECT_THROW((void)K::maximum(a, b), ktape::TypeError);
}

TEST(Arithmetic, IntegerArithmetic) {
  const Tensor a = cst({7, -3, 2}, {3}, "int32");
  const Tensor b = cst({2, 2, 5}, {3}, "int32");
  const Tensor s = a + b;
  EXPECT_EQ(K::dtype(s), "int32");
  EXPECT_TRUE(Close(s, {9, -1, 7}, {3}, 0, 0));
  EXPECT_TRUE(Close(a * b, {14, -6, 10}, {3}, 0, 0));
  EXPECT_TRUE(Close(-a, {-7, 3, -2}, {3}, 0, 0));
  // Division needs a float tensor.
  EXPECT_THROW((void)(a / b), ktape::TypeError);
}

// ============================================================================================
// Unary math, clip, maximum/minimum, comparisons
// ============================================================================================

TEST(Unary, Square) {
  // (-2)^2 = 4, 0.5^2 = 0.25, 3^2 = 9
  EXPECT_TRUE(Close(K::square(cst({-2, 0.5, 3}, {3})), {4, 0.25, 9}, {3}));
}

TEST(Unary, SqrtNegativeGivesZero) {
  // sqrt(4) = 2, sqrt(0) = 0, sqrt(-1) -> sqrt(clip(-1, 0, inf)) = 0, sqrt(2.25) = 1.5
  EXPECT_TRUE(Close(K::sqrt(cst({4, 0, -1, 2.25}, {4})), {2, 0, 0, 1.5}, {4}));
}

TEST(Unary, Exp) {
  EXPECT_TRUE(Close(K::exp(cst({0, 1, -1, 2}, {4})),
                    {1, std::exp(1.0), std::exp(-1.0), std::exp(2.0)}, {4}));
}

TEST(Unary, LogIncludingZeroAndNegative) {
  // log(1) = 0, log(4) = 1.386294..., log(0) = -inf, log(-1) = NaN
  EXPECT_TRUE(Close(K::log(cst({1, 4, 0, -1, 0.5}, {5})),
                    {0, std::log(4.0), -kInf, kNaN, std::log(0.5)}, {5}));
}

TEST(Unary, Abs) {
  EXPECT_TRUE(Close(K::abs(cst({-1.5, 0, 2}, {3})), {1.5, 0, 2}, {3}));
  EXPECT_TRUE(Close(K::abs(cst({-4, 3}, {2}, "int32")), {4, 3}, {2}, 0, 0));
}

TEST(Unary, Pow) {
  // (-2)^3 = -8, 0.5^3 = 0.125, 3^3 = 27, 0^3 = 0
  EXPECT_TRUE(Close(K::pow(cst({-2, 0.5, 3, 0}, {4}), 3.0), {-8, 0.125, 27, 0}, {4}));
  // 4^0.5 = 2, 9^-1 = 1/9
  EXPECT_TRUE(Close(K::pow(cst({4}, {1}), 0.5), {2}, {1}));
  EXPECT_TRUE(Close(K::pow(cst({9}, {1}), -1.0), {1.0 / 9}, {1}));
}

TEST(Unary, Clip) {
  const Tensor x = cst({-2, -0.5, 0.5, 2}, {4});
  EXPECT_TRUE(Close(K::clip(x, -1, 1), {-1, -0.5, 0.5, 1}, {4}));
  // Keras 2.2.4: max_value < min_value -> max_value = min_value, so everything becomes 1.
  EXPECT_TRUE(Close(K::clip(x, 1, 0), {1, 1, 1, 1}, {4}));
  // Infinite bounds.
  EXPECT_TRUE(Close(K::clip(x, 0, kInf), {0, 0, 0.5, 2}, {4}));
}

TEST(Unary, MaximumMinimum) {
  const Tensor x = cst({1, 5, 3}, {3});
  const Tensor y = cst({4, 2, 3}, {3});
  EXPECT_TRUE(Close(K::maximum(x, y), {4, 5, 3}, {3}));
  EXPECT_TRUE(Close(K::minimum(x, y), {1, 2, 3}, {3}));
  EXPECT_TRUE(Close(K::maximum(x, 2.5), {2.5, 5, 3}, {3}));
  EXPECT_TRUE(Close(K::minimum(x, 2.5), {1, 2.5, 2.5}, {3}));
  // Broadcast (2,1) against (3,): max([[0],[4]], [1,5,3]) = [[1,5,3],[4,5,4]]
  EXPECT_TRUE(Close(K::maximum(cst({0, 4}, {2, 1}), x), {1, 5, 3, 4, 5, 4}, {2, 3}));
}

TEST(Unary, ComparisonsAreBool) {
  const Tensor x = cst({1, 2, 3}, {3});
  const Tensor y = cst({2, 2, 2}, {3});
  struct Case {
    const char* name;
    Tensor t;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {"equal", K::equal(x, y), {0, 1, 0}},
      {"not_equal", K::not_equal(x, y), {1, 0, 1}},
      {"greater", K::greater(x, y), {0, 0, 1}},
      {"greater_equal", K::greater_equal(x, y), {0, 1, 1}},
      {"less", K::less(x, y), {1, 0, 0}},
      {"less_equal", K::less_equal(x, y), {1, 1, 0}},
      {"equal(double)", K::equal(x, 2.0), {0, 1, 0}},
      {"not_equal(double)", K::not_equal(x, 2.0), {1, 0, 1}},
      {"greater(double)", K::greater(x, 2.0), {0, 0, 1}},
      {"greater_equal(double)", K::greater_equal(x, 2.0), {0, 1, 1}},
      {"less(double)", K::less(x, 2.0), {1, 0, 0}},
      {"less_equal(double)", K::less_equal(x, 2.0), {1, 1, 0}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(K::dtype(c.t), "bool");
    const NDArray v = K::eval(c.t);
    EXPECT_EQ(v.dtype(), DType::bool_);
    EXPECT_TRUE(Close(v, c.want, {3}, 0, 0));
  }
  // Broadcast comparison (2,1) vs (3,): [[2],[0]] > [1,2,3] = [[1,0,0],[0,0,0]]
  EXPECT_TRUE(Close(K::greater(cst({2, 0}, {2, 1}), x), {1, 0, 0, 0, 0, 0}, {2, 3}, 0, 0));
}

TEST(Unary, Sign) {
  EXPECT_TRUE(Close(K::sign(cst({-3, 0, 2.5, -0.1}, {4})), {-1, 0, 1, -1}, {4}, 0, 0));
}

TEST(Unary, RoundHalfToEven) {
  // np.round: 0.5->0, 1.5->2, 2.5->2, -0.5->-0, -1.5->-2, 0.4->0, -2.6->-3, 3.5->4
  const NDArray v = K::eval(K::round(cst({0.5, 1.5, 2.5, -0.5, -1.5, 0.4, -2.6, 3.5}, {8})));
  EXPECT_TRUE(Close(v, {0, 2, 2, -0.0, -2, 0, -3, 4}, {8}, 0, 0));
  EXPECT_TRUE(std::signbit(v.item(3))) << "round(-0.5) should be -0.0";
}

// ============================================================================================
// Activations
// ============================================================================================

// Hand-computed with the rule of spec 3.15 / ReluF: for x > threshold, x (clipped to
// [0, max_value] when max_value is set); for x < threshold, alpha * (x - threshold); 0 at x ==
// threshold.
TEST(Activations, ReluCombinations) {
  const std::vector<double> xs = {-3, -1, 0, 0.5, 1, 2, 5, 7};
  const Tensor x = cst(xs, {8});
  // Plain: max(x, 0)
  EXPECT_TRUE(Close(K::relu(x), {0, 0, 0, 0.5, 1, 2, 5, 7}, {8}));
  // alpha 0.1: negatives -> 0.1 * x
  EXPECT_TRUE(Close(K::relu(x, {.alpha = 0.1}), {-0.3, -0.1, 0, 0.5, 1, 2, 5, 7}, {8}));
  // max_value 4: min(max(x,0),4)
  EXPECT_TRUE(Close(K::relu(x, {.max_value = 4.0}), {0, 0, 0, 0.5, 1, 2, 4, 4}, {8}));
  // threshold 1: x > 1 kept, x <= 1 -> 0 (alpha = 0)
  EXPECT_TRUE(Close(K::relu(x, {.threshold = 1.0}), {0, 0, 0, 0, 0, 2, 5, 7}, {8}));
  // alpha 0.5, max_value 6, threshold 1:
  //   x > 1: 2, 5, min(7,6)=6; x < 1: 0.5*(x-1): -3->-2, -1->-1, 0->-0.5, 0.5->-0.25; x == 1 -> 0
  EXPECT_TRUE(Close(K::relu(x, {.alpha = 0.5, .max_value = 6.0, .threshold = 1.0}),
                    {-2, -1, -0.5, -0.25, 0, 2, 5, 6}, {8}));
  // alpha 0.2, max_value 3: x>0 -> min(x,3); x<0 -> 0.2*x
  EXPECT_TRUE(
      Close(K::relu(x, {.alpha = 0.2, .max_value = 3.0}), {-0.6, -0.2, 0, 0.5, 1, 2, 3, 3}, {8}));
  // threshold -2 (TF keeps x in (-2, 0) unchanged): -3 -> 0*(x+2) = 0, -1 -> -1, rest x.
  EXPECT_TRUE(Close(K::relu(x, {.threshold = -2.0}), {0, -1, 0, 0.5, 1, 2, 5, 7}, {8}));
  // threshold 2 with alpha 1: x<2 -> x-2: -5,-3,-2,-1.5,-1; x==2 -> 0; 5, 7 kept
  EXPECT_TRUE(
      Close(K::relu(x, {.alpha = 1.0, .threshold = 2.0}), {-5, -3, -2, -1.5, -1, 0, 5, 7}, {8}));
}

TEST(Activations, SigmoidTanh) {
  const std::vector<double> xs = {-2, 0, 3, -30, 30};
  std::vector<double> sig, th;
  for (double v : xs) {
    sig.push_back(sigmoid_ref(v));
    th.push_back(std::tanh(v));
  }
  EXPECT_TRUE(Close(K::sigmoid(cst(xs, {5})), sig, {5}, 1e-5, 1e-12));
  EXPECT_TRUE(Close(K::tanh(cst(xs, {5})), th, {5}));
  // sigmoid(0) = 0.5 exactly, tanh(0) = 0.
  EXPECT_EQ(K::eval(K::sigmoid(cst({0}, {}))).item(0), 0.5);
}

TEST(Activations, SoftmaxLastAxis) {
  // Row [1,2,3]: e^k / (e + e^2 + e^3); row [0,0,0]: 1/3 each.
  const double s = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const Tensor x = cst({1, 2, 3, 0, 0, 0}, {2, 3});
  const std::vector<double> want = {std::exp(1.0) / s, std::exp(2.0) / s, std::exp(3.0) / s,
                                    1.0 / 3,           1.0 / 3,           1.0 / 3};
  EXPECT_TRUE(Close(K::softmax(x), want, {2, 3}));
  EXPECT_TRUE(Close(K::softmax(x, 1), want, {2, 3}));
  // Large logits do not overflow (max is subtracted): [1000, 1000] -> [0.5, 0.5]
  EXPECT_TRUE(Close(K::softmax(cst({1000, 1000}, {1, 2})), {0.5, 0.5}, {1, 2}));
}

TEST(Activations, SoftmaxAxis0) {
  // x = [[1,2],[3,2]]: column 0 -> e/(e+e^3), e^3/(e+e^3); column 1 -> 0.5, 0.5
  const double c0 = std::exp(1.0) + std::exp(3.0);
  const Tensor x = cst({1, 2, 3, 2}, {2, 2});
  EXPECT_TRUE(Close(K::softmax(x, 0), {std::exp(1.0) / c0, 0.5, std::exp(3.0) / c0, 0.5}, {2, 2}));
  EXPECT_TRUE(Close(K::softmax(x, -2), {std::exp(1.0) / c0, 0.5, std::exp(3.0) / c0, 0.5}, {2, 2}));
  EXPECT_THROW((void)K::softmax(x, 2), ktape::ValueError);
}

// ============================================================================================
// Dropout (spec 3.8)
// ============================================================================================

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

TEST(Dropout, InvalidLevelIsValueError) {
  const Tensor x = K::ones({10});
  EXPECT_THROW((void)K::dropout(x, -0.5), ktape::ValueError);
  EXPECT_THROW((void)K::dropout(x, 1.0), ktape::ValueError);
  EXPECT_THROW((void)K::dropout(x, 1.5), ktape::ValueError);
  // Level 0 keeps everything.
  EXPECT_TRUE(Close(K::dropout(cst({1, 2, 3}, {3}), 0.0), {1, 2, 3}, {3}));
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
  // Not broadcastable -> ValueError.
  EXPECT_THROW((void)K::dropout(x, 0.5, {.noise_shape = Shape{3, 5}}), ktape::ValueError);
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

// ============================================================================================
// Crossentropies (spec 3.6)
// ============================================================================================

TEST(Crossentropy, CategoricalNormalizesThenClips) {
  const double eps = K::epsilon();
  ASSERT_DOUBLE_EQ(eps, 1e-7);
  // Row 0: output [1,2,1] -> normalized [0.25,0.5,0.25]; target [0,1,0] -> -log(0.5)
  // Row 1: output [3,1,0] -> [0.75,0.25,0] -> clipped p2 = eps; target [0,0,1] -> -log(eps)
  // Row 2: output [1,1,2] -> [0.25,0.25,0.5]; soft target [0.2,0.3,0.5]
  //        -> -(0.2 log .25 + 0.3 log .25 + 0.5 log .5) = 0.5*1.386294 + 0.5*0.693147 = 1.039721
  const Tensor target = cst({0, 1, 0, 0, 0, 1, 0.2, 0.3, 0.5}, {3, 3});
  const Tensor output = cst({1, 2, 1, 3, 1, 0, 1, 1, 2}, {3, 3});
  const std::vector<double> want = {
      -std::log(0.5), -std::log(eps),
      -(0.2 * std::log(0.25) + 0.3 * std::log(0.25) + 0.5 * std::log(0.5))};
  EXPECT_NEAR(want[2], 1.0397208, 1e-6);
  EXPECT_TRUE(Close(K::categorical_crossentropy(target, output), want, {3}, 1e-5));
}

TEST(Crossentropy, CategoricalAxis0) {
  // The same rows as columns: output (3,2), classes along axis 0.
  // column 0: output [1,2,1] target [0,1,0] -> -log(0.5)
  // column 1: output [1,1,2] target [1,0,0] -> -log(0.25)
  const Tensor target = cst({0, 1, 1, 0, 0, 0}, {3, 2});
  const Tensor output = cst({1, 1, 2, 1, 1, 2}, {3, 2});
  EXPECT_TRUE(Close(K::categorical_crossentropy(target, output, {.axis = 0}),
                    {-std::log(0.5), -std::log(0.25)}, {2}, 1e-6));
}

TEST(Crossentropy, CategoricalFromLogits) {
  // loss = logsumexp(z) - sum(t * z) for one-hot / soft targets (sum t = 1)
  // Row 0: z = [1,2,3], t = [0,1,0] -> log(e + e^2 + e^3) - 2
  // Row 1: z = [-1,0,4], t = [0.5,0,0.5] -> log(e^-1 + 1 + e^4) - 0.5*(-1) - 0.5*4
  const Tensor target = cst({0, 1, 0, 0.5, 0, 0.5}, {2, 3});
  const Tensor logits = cst({1, 2, 3, -1, 0, 4}, {2, 3});
  const double l0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 2.0;
  const double l1 = std::log(std::exp(-1.0) + 1.0 + std::exp(4.0)) + 0.5 - 2.0;
  EXPECT_TRUE(Close(K::categorical_crossentropy(target, logits, {.from_logits = true}), {l0, l1},
                    {2}, 1e-6));
}

TEST(Crossentropy, CategoricalBadAxisIsValueError) {
  const Tensor t = cst({0, 1, 1, 0}, {2, 2});
  const Tensor o = cst({0.5, 0.5, 0.5, 0.5}, {2, 2});
  EXPECT_THROW((void)K::categorical_crossentropy(t, o, {.axis = 2}), ktape::ValueError);
  EXPECT_THROW((void)K::categorical_crossentropy(t, o, {.axis = -2}), ktape::ValueError);
  EXPECT_THROW((void)K::categorical_crossentropy(t, o, {.from_logits = true, .axis = 5}),
               ktape::ValueError);
}

TEST(Crossentropy, SparseNonLogits) {
  // targets [1, 2]; output rows [0.2,0.5,0.3] and [0.1,0.1,0.8] -> -log(0.5), -log(0.8)
  const Tensor output = cst({0.2, 0.5, 0.3, 0.1, 0.1, 0.8}, {2, 3});
  const std::vector<double> want = {-std::log(0.5), -std::log(0.8)};
  const Tensor t1 = cst({1, 2}, {2}, "int32");
  const Tensor t2 = cst({1, 2}, {2, 1}, "int32");
  const Tensor l1 = K::sparse_categorical_crossentropy(t1, output);
  const Tensor l2 = K::sparse_categorical_crossentropy(t2, output);
  EXPECT_TRUE(Close(l1, want, {2}, 1e-6));
  EXPECT_TRUE(Close(l2, want, {2}, 1e-6));
  // Un-normalized probabilities are normalized implicitly (log(p) is used as logits):
  // [0.1,0.2,0.1], target 1 -> -log(0.2/0.4) = log 2
  EXPECT_TRUE(Close(
      K::sparse_categorical_crossentropy(cst({1}, {1}, "int32"), cst({0.1, 0.2, 0.1}, {1, 3})),
      {std::log(2.0)}, {1}, 1e-6));
  // Values are clipped to [eps, 1-eps] before the log: [1,2,1] -> all 1-eps -> uniform -> log 3
  EXPECT_TRUE(
      Close(K::sparse_categorical_crossentropy(cst({1}, {1}, "int32"), cst({1, 2, 1}, {1, 3})),
            {std::log(3.0)}, {1}, 1e-6));
}

TEST(Crossentropy, SparseFromLogits) {
  // targets [0, 2]; logits [1,2,3] -> logsumexp - 1; [0,0,0] -> log 3
  const Tensor logits = cst({1, 2, 3, 0, 0, 0}, {2, 3});
  const double l0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 1.0;
  const std::vector<double> want = {l0, std::log(3.0)};
  for (const Shape& ts : {Shape{2}, Shape{2, 1}}) {
    SCOPED_TRACE(ts.str());
    const Tensor t = cst({0, 2}, ts, "int32");
    EXPECT_TRUE(Close(K::sparse_categorical_crossentropy(t, logits, {.from_logits = true}), want,
                      {2}, 1e-6));
  }
  // int64 targets work too.
  EXPECT_TRUE(Close(
      K::sparse_categorical_crossentropy(cst({0, 2}, {2}, "int64"), logits, {.from_logits = true}),
      want, {2}, 1e-6));
}

TEST(Crossentropy, SparseRank3) {
  // output (2,2,3) logits, targets (2,2): loss shape (2,2)
  // [0,0,0] t=1 -> log 3; [1,2,3] t=2 -> lse-3; [3,2,1] t=0 -> lse-3; [0,0,0] t=0 -> log 3
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const Tensor logits = cst({0, 0, 0, 1, 2, 3, 3, 2, 1, 0, 0, 0}, {2, 2, 3});
  const Tensor t = cst({1, 2, 0, 0}, {2, 2}, "int32");
  EXPECT_TRUE(Close(K::sparse_categorical_crossentropy(t, logits, {.from_logits = true}),
                    {std::log(3.0), lse - 3.0, lse - 3.0, std::log(3.0)}, {2, 2}, 1e-6));
}

TEST(Crossentropy, SparseErrors) {
  const Tensor logits = cst({1, 2, 3, 0, 0, 0}, {2, 3});
  const Tensor t = cst({0, 2}, {2}, "int32");
  EXPECT_THROW((void)K::sparse_categorical_crossentropy(t, logits, {.axis = 2}), ktape::ValueError);
  EXPECT_THROW((void)K::sparse_categorical_crossentropy(t, logits, {.axis = 7}), ktape::ValueError);
  // Target shape does not match the output without its class axis.
  EXPECT_THROW((void)K::sparse_categorical_crossentropy(cst({0, 1, 2}, {3}, "int32"), logits),
               ktape::ValueError);
  // Out-of-range class ids are only found when the op runs.
  const Tensor bad_hi =
      K::sparse_categorical_crossentropy(cst({0, 3}, {2}, "int32"), logits, {.from_logits = true});
  EXPECT_THROW((void)K::eval(bad_hi), ktape::ValueError);
  const Tensor bad_lo = K::sparse_categorical_crossentropy(cst({-1, 0}, {2}, "int32"), logits);
  EXPECT_THROW((void)K::eval(bad_lo), ktape::ValueError);
}

TEST(Crossentropy, OneHot) {
  // tf.one_hot: indices.shape + (C,), float32, out-of-range ids give a zero row.
  const Tensor h = K::one_hot(cst({0, 2, 5, -1}, {4}, "int32"), 3);
  EXPECT_EQ(K::dtype(h), "float32");
  EXPECT_TRUE(Close(h, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, {4, 3}, 0, 0));
  EXPECT_TRUE(Close(K::one_hot(cst({1, 0}, {2, 1}, "int64"), 2), {0, 1, 1, 0}, {2, 1, 2}, 0, 0));
  EXPECT_THROW((void)K::one_hot(cst({0.0}, {1}), 3), ktape::TypeError);
}

// ============================================================================================
// Reductions
// ============================================================================================

TEST(Reductions, Sum) {
  // x = [[1,2,3],[4,5,6]]
  const Tensor x = cst({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(Close(K::sum(x), {21}, {}));
  EXPECT_TRUE(Close(K::sum(x, 0), {5, 7, 9}, {3}));
  EXPECT_TRUE(Close(K::sum(x, 1), {6, 15}, {2}));
  EXPECT_TRUE(Close(K::sum(x, -1), {6, 15}, {2}));
  EXPECT_TRUE(Close(K::sum(x, -2), {5, 7, 9}, {3}));
  EXPECT_TRUE(Close(K::sum(x, 1, true), {6, 15}, {2, 1}));
  EXPECT_TRUE(Close(K::sum(x, {.axis = std::vector<int>{0, 1}}), {21}, {}));
  EXPECT_TRUE(Close(K::sum(x, {.axis = std::vector<int>{1, 0}, .keepdims = true}), {21}, {1, 1}));
  EXPECT_TRUE(Close(K::sum(x, {.keepdims = true}), {21}, {1, 1}));
  // int sum keeps the int dtype
  const Tensor xi = cst({1, 2, 3, 4}, {2, 2}, "int32");
  EXPECT_EQ(K::dtype(K::sum(xi)), "int32");
  EXPECT_TRUE(Close(K::sum(xi, 0), {4, 6}, {2}, 0, 0));
}

TEST(Reductions, SumAxisList3D) {
  // x (2,2,2) = [[[1,2],[3,4]],[[5,6],[7,8]]]; sum over axes {0,2}:
  //   j=0: 1+2+5+6 = 14; j=1: 3+4+7+8 = 22
  const Tensor x = cst({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2});
  EXPECT_TRUE(Close(K::sum(x, {.axis = std::vector<int>{0, 2}}), {14, 22}, {2}));
  EXPECT_TRUE(
      Close(K::sum(x, {.axis = std::vector<int>{-1, 0}, .keepdims = true}), {14, 22}, {1, 2, 1}));
  // axis 1: [[1+3, 2+4],[5+7, 6+8]] = [[4,6],[12,14]]
  EXPECT_TRUE(Close(K::sum(x, 1), {4, 6, 12, 14}, {2, 2}));
}

TEST(Reductions, Mean) {
  const Tensor x = cst({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(Close(K::mean(x), {3.5}, {}));
  EXPECT_TRUE(Close(K::mean(x, 0), {2.5, 3.5, 4.5}, {3}));
  EXPECT_TRUE(Close(K::mean(x, -1), {2, 5}, {2}));
  EXPECT_TRUE(Close(K::mean(x, 1, true), {2, 5}, {2, 1}));
  EXPECT_TRUE(
      Close(K::mean(x, {.axis = std::vector<int>{0, -1}, .keepdims = true}), {3.5}, {1, 1}));
}

TEST(Reductions, MeanOfIntIsTypeError) {
  EXPECT_THROW((void)K::mean(cst({1, 2}, {2}, "int32")), ktape::TypeError);
  EXPECT_THROW((void)K::mean(cst({1, 2}, {2}, "int64"), 0), ktape::TypeError);
}

// Spec 3.15 ("mean | bool -> floatx"): Keras 2.2.4 on TF casts a bool tensor to floatx before
// tf.reduce_mean, and Keras itself relies on it (metrics.binary_accuracy is
// K.mean(K.equal(y_true, K.round(y_pred)), axis=-1) with no cast).
TEST(Reductions, MeanOfBoolIsFloatx) {
  const Tensor b = K::greater(cst({1, -1, 2, 3, -2, 5}, {2, 3}), 0.0);  // [[1,0,1],[1,0,1]]
  const Tensor m = K::mean(b);
  const Tensor m1 = K::mean(b, -1);
  EXPECT_EQ(K::dtype(m), "float32");
  EXPECT_TRUE(Close(m, {4.0 / 6}, {}));             // 4 of 6 are true
  EXPECT_TRUE(Close(m1, {2.0 / 3, 2.0 / 3}, {2}));  // each row [1,0,1]
}

TEST(Reductions, MaxMin) {
  // x = [[1,6,3],[4,2,5]]
  const Tensor x = cst({1, 6, 3, 4, 2, 5}, {2, 3});
  EXPECT_TRUE(Close(K::max(x), {6}, {}));
  EXPECT_TRUE(Close(K::max(x, 0), {4, 6, 5}, {3}));
  EXPECT_TRUE(Close(K::max(x, -1), {6, 5}, {2}));
  EXPECT_TRUE(Close(K::max(x, 1, true), {6, 5}, {2, 1}));
  EXPECT_TRUE(Close(K::min(x), {1}, {}));
  EXPECT_TRUE(Close(K::min(x, 0), {1, 2, 3}, {3}));
  EXPECT_TRUE(Close(K::min(x, -1), {1, 2}, {2}));
  EXPECT_TRUE(Close(K::min(x, {.axis = std::vector<int>{0, 1}, .keepdims = true}), {1}, {1, 1}));
  // negative values
  EXPECT_TRUE(Close(K::max(cst({-5, -2, -9}, {3})), {-2}, {}));
}

TEST(Reductions, BadAxisIsValueError) {
  const Tensor x = cst({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_THROW((void)K::sum(x, 2), ktape::ValueError);
  EXPECT_THROW((void)K::max(x, -3), ktape::ValueError);
  EXPECT_THROW((void)K::mean(x, {.axis = std::vector<int>{0, 0}}), ktape::ValueError);
}

TEST(Reductions, ArgmaxArgminTiesFirst) {
  // [[1,3,3],[5,5,2]]: argmax axis -1 -> [1, 0] (first of the ties); axis 0 -> [1,1,0]
  const Tensor x = cst({1, 3, 3, 5, 5, 2}, {2, 3});
  const Tensor am = K::argmax(x);
  EXPECT_EQ(K::dtype(am), "int64");
  const NDArray v = K::eval(am);
  EXPECT_EQ(v.dtype(), DType::int64);
  EXPECT_TRUE(Close(v, {1, 0}, {2}, 0, 0));
  EXPECT_TRUE(Close(K::argmax(x, 0), {1, 1, 0}, {3}, 0, 0));
  // [[2,1,1],[0,4,0]]: argmin axis -1 -> [1, 0] (ties); axis 0 -> columns [2,0],[1,4],[1,0]
  // -> [1,0,1]
  const Tensor y = cst({2, 1, 1, 0, 4, 0}, {2, 3});
  EXPECT_EQ(K::dtype(K::argmin(y)), "int64");
  EXPECT_TRUE(Close(K::argmin(y), {1, 0}, {2}, 0, 0));
  EXPECT_TRUE(Close(K::argmin(y, 0), {1, 0, 1}, {3}, 0, 0));
  // ties along axis 0: [[3,1],[3,1]] -> argmin/argmax [0,0]
  const Tensor z = cst({3, 1, 3, 1}, {2, 2});
  EXPECT_TRUE(Close(K::argmin(z, 0), {0, 0}, {2}, 0, 0));
  EXPECT_TRUE(Close(K::argmax(z, 0), {0, 0}, {2}, 0, 0));
  EXPECT_THROW((void)K::argmax(x, 2), ktape::ValueError);
}

// ============================================================================================
// dot and layout
// ============================================================================================

TEST(Dot, TwoD) {
  // [[1,2],[3,4]] . [[5,6],[7,8]] = [[1*5+2*7, 1*6+2*8],[3*5+4*7, 3*6+4*8]] = [[19,22],[43,50]]
  EXPECT_TRUE(Close(K::dot(cst({1, 2, 3, 4}, {2, 2}), cst({5, 6, 7, 8}, {2, 2})), {19, 22, 43, 50},
                    {2, 2}));
  // (2,3).(3,1): [[1,2,3],[4,5,6]] . [[1],[0],[-1]] = [[-2],[-2]]
  EXPECT_TRUE(
      Close(K::dot(cst({1, 2, 3, 4, 5, 6}, {2, 3}), cst({1, 0, -1}, {3, 1})), {-2, -2}, {2, 1}));
}

TEST(Dot, NDimTheanoSemantics) {
  // x (4,2): x[i][k] = 2i + k; y (5,2,3): y[b][k][n] = 6b + 3k + n.
  // np.dot: out[i][b][n] = sum_k x[i][k] * y[b][k][n], shape (4,5,3).
  std::vector<double> xv(8), yv(30);
  std::iota(xv.begin(), xv.end(), 0.0);
  std::iota(yv.begin(), yv.end(), 0.0);
  const Tensor r = K::dot(cst(xv, {4, 2}), cst(yv, {5, 2, 3}));
  EXPECT_EQ(r.shape(), (Shape{4, 5, 3}));
  std::vector<double> want;
  for (int i = 0; i < 4; ++i)
    for (int b = 0; b < 5; ++b)
      for (int n = 0; n < 3; ++n)
        want.push_back((2 * i) * (6 * b + n) + (2 * i + 1) * (6 * b + 3 + n));
  // Spot values by hand: out[0][0][0] = 0*0 + 1*3 = 3; out[1][2][1] = 2*13 + 3*16 = 74;
  // out[3][4][2] = 6*26 + 7*29 = 359.
  EXPECT_EQ(want[0], 3);
  EXPECT_EQ(want[(1 * 5 + 2) * 3 + 1], 74);
  EXPECT_EQ(want[(3 * 5 + 4) * 3 + 2], 359);
  EXPECT_TRUE(Close(r, want, {4, 5, 3}));
}

TEST(Dot, NDimLeftOperand) {
  // x (2,2,2) . y (2,3): contracts x's last axis; y = [[1,0,1],[0,1,1]]
  // x rows: [1,2],[3,4],[5,6],[7,8] -> [a, b, a+b]
  const Tensor r =
      K::dot(cst({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}), cst({1, 0, 1, 0, 1, 1}, {2, 3}));
  EXPECT_TRUE(Close(r, {1, 2, 3, 3, 4, 7, 5, 6, 11, 7, 8, 15}, {2, 2, 3}));
}

TEST(Dot, MisalignedIsValueError) {
  EXPECT_THROW((void)K::dot(cst({1, 2, 3, 4, 5, 6}, {2, 3}), cst({1, 2, 3, 4, 5, 6}, {2, 3})),
               ktape::ValueError);
  EXPECT_THROW((void)K::dot(cst(std::vector<double>(12, 1.0), {4, 3}),
                            cst(std::vector<double>(30, 1.0), {5, 2, 3})),
               ktape::ValueError);
}

TEST(Layout, Transpose) {
  // [[1,2,3],[4,5,6]]^T = [[1,4],[2,5],[3,6]]
  EXPECT_TRUE(Close(K::transpose(cst({1, 2, 3, 4, 5, 6}, {2, 3})), {1, 4, 2, 5, 3, 6}, {3, 2}));
}

TEST(Layout, PermuteDimensions) {
  // x (2,3,4) with x[i][j][k] = 12i + 4j + k; pattern (2,0,1): out[k][i][j] = x[i][j][k].
  std::vector<double> xv(24);
  std::iota(xv.begin(), xv.end(), 0.0);
  const Tensor x = cst(xv, {2, 3, 4});
  std::vector<double> want;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) want.push_back(12 * i + 4 * j + k);
  const NDArray v = K::eval(K::permute_dimensions(x, {2, 0, 1}));
  EXPECT_TRUE(Close(v, want, {4, 2, 3}));
  EXPECT_EQ(v.item((3 * 2 + 1) * 3 + 2), 23);  // out[3][1][2] = x[1][2][3] = 12 + 8 + 3
  EXPECT_THROW((void)K::permute_dimensions(x, {0, 0, 1}), ktape::ValueError);
  EXPECT_THROW((void)K::permute_dimensions(x, {0, 1}), ktape::ValueError);
  EXPECT_THROW((void)K::permute_dimensions(x, {0, 1, 3}), ktape::ValueError);
}

TEST(Layout, Reshape) {
  const Tensor x = cst({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(Close(K::reshape(x, {3, -1}), {1, 2, 3, 4, 5, 6}, {3, 2}));
  EXPECT_TRUE(Close(K::reshape(x, {-1}), {1, 2, 3, 4, 5, 6}, {6}));
  EXPECT_TRUE(Close(K::reshape(x, {1, 6, 1}), {1, 2, 3, 4, 5, 6}, {1, 6, 1}));
  EXPECT_THROW((void)K::reshape(x, {4, -1}), ktape::ValueError);
  EXPECT_THROW((void)K::reshape(x, {4, 2}), ktape::ValueError);
  EXPECT_THROW((void)K::reshape(x, {-1, -1}), ktape::ValueError);
}

TEST(Layout, ReshapeOfPlaceholderChecksAtRunTime) {
  const Tensor p = K::placeholder({K::None, 3});
  const Tensor r = K::reshape(p, {-1, 2});
  EXPECT_EQ(K::int_shape(r), (Shape{K::None, 2}));
  const K::Function f = K::function({p}, {r});
  EXPECT_TRUE(Close(f({arr({1, 2, 3, 4, 5, 6}, {2, 3})})[0], {1, 2, 3, 4, 5, 6}, {3, 2}));
  EXPECT_THROW((void)f({arr({1, 2, 3}, {1, 3})}), ktape::ValueError);
}

TEST(Layout, FlattenAndBatchFlatten) {
  EXPECT_TRUE(Close(K::flatten(cst({1, 2, 3, 4, 5, 6}, {2, 1, 3})), {1, 2, 3, 4, 5, 6}, {6}));
  const Tensor p = K::placeholder({K::None, 2, 3});
  const Tensor bf = K::batch_flatten(p);
  EXPECT_EQ(K::int_shape(bf), (Shape{K::None, 6}));
  std::vector<double> v(24);
  std::iota(v.begin(), v.end(), 0.0);
  const auto out = K::function({p}, {bf})({arr(v, {4, 2, 3})});
  EXPECT_TRUE(Close(out[0], v, {4, 6}));
  EXPECT_TRUE(Close(K::batch_flatten(cst(v, {2, 3, 4})), v, {2, 12}));
}

TEST(Layout, ExpandDimsSqueeze) {
  const Tensor x = cst({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(K::expand_dims(x, 0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(K::expand_dims(x).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(K::expand_dims(x, 1).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(K::expand_dims(x, -2).shape(), (Shape{2, 1, 3}));
  EXPECT_TRUE(Close(K::expand_dims(x, 1), {1, 2, 3, 4, 5, 6}, {2, 1, 3}));
  const Tensor y = cst({1, 2, 3, 4, 5, 6}, {2, 1, 3});
  EXPECT_TRUE(Close(K::squeeze(y, 1), {1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_TRUE(Close(K::squeeze(y, -2), {1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_THROW((void)K::squeeze(y, 0), ktape::ValueError);
  EXPECT_THROW((void)K::squeeze(y, 3), ktape::ValueError);
}

TEST(Layout, Concatenate) {
  const Tensor a = cst({1, 2, 3, 4}, {2, 2});  // [[1,2],[3,4]]
  const Tensor b = cst({5, 6}, {2, 1});        // [[5],[6]]
  const Tensor c = cst({7, 8}, {1, 2});        // [[7,8]]
  // axis -1: [[1,2,5],[3,4,6]]
  EXPECT_TRUE(Close(K::concatenate({a, b}), {1, 2, 5, 3, 4, 6}, {2, 3}));
  EXPECT_TRUE(Close(K::concatenate({a, b}, 1), {1, 2, 5, 3, 4, 6}, {2, 3}));
  // axis 0: [[1,2],[3,4],[7,8]]
  EXPECT_TRUE(Close(K::concatenate({a, c}, 0), {1, 2, 3, 4, 7, 8}, {3, 2}));
  // three pieces along axis 0
  EXPECT_TRUE(Close(K::concatenate({c, a, c}, 0), {7, 8, 1, 2, 3, 4, 7, 8}, {4, 2}));
  // Mismatched non-axis dims.
  EXPECT_THROW((void)K::concatenate({a, cst({1, 2, 3}, {3, 1})}, -1), ktape::ValueError);
  EXPECT_THROW((void)K::concatenate({a, b}, 0), ktape::ValueError);
  EXPECT_THROW((void)K::concatenate({a, cst({1, 2}, {2})}), ktape::ValueError);
}

// ============================================================================================
// Core: variables, constants, placeholders, values, creation, random
// ============================================================================================

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

TEST(Core, ZerosOnesEye) {
  EXPECT_TRUE(Close(K::zeros({2, 3}), {0, 0, 0, 0, 0, 0}, {2, 3}, 0, 0));
  EXPECT_TRUE(Close(K::ones({3}), {1, 1, 1}, {3}, 0, 0));
  EXPECT_TRUE(K::is_variable(K::zeros({2, 3})));
  EXPECT_EQ(K::dtype(K::ones({2}, {.dtype = "int32"})), "int32");
  EXPECT_TRUE(Close(K::eye(3), {1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3}, 0, 0));
  EXPECT_TRUE(Close(K::eye(2, 3), {1, 0, 0, 0, 1, 0}, {2, 3}, 0, 0));
  // zero-size shapes give a constant
  EXPECT_EQ(K::eval(K::zeros({0, 3})).shape(), (Shape{0, 3}));
}

TEST(Core, ZerosLikeOnesLike) {
  const Tensor x = cst({1, 2, 3, 4}, {2, 2}, "int32");
  const Tensor z = K::zeros_like(x);
  EXPECT_EQ(K::dtype(z), "int32");  // Keras 2.2.4 keeps x's dtype
  EXPECT_TRUE(Close(z, {0, 0, 0, 0}, {2, 2}, 0, 0));
  const Tensor o = K::ones_like(cst({5, 6, 7}, {3}));
  EXPECT_EQ(K::dtype(o), "float32");
  EXPECT_TRUE(Close(o, {1, 1, 1}, {3}, 0, 0));
  EXPECT_EQ(K::dtype(K::ones_like(x, {.dtype = "float64"})), "float64");
}

TEST(Core, CastAndIdentity) {
  const Tensor x = cst({1.7, -1.7, 0, 2.5}, {4});
  const Tensor i = K::cast(x, "int32");
  EXPECT_EQ(K::dtype(i), "int32");
  // tf.cast truncates toward zero
  EXPECT_TRUE(Close(i, {1, -1, 0, 2}, {4}, 0, 0));
  const Tensor b = K::cast(x, "bool");
  EXPECT_EQ(K::dtype(b), "bool");
  EXPECT_TRUE(Close(b, {1, 1, 0, 1}, {4}, 0, 0));
  EXPECT_TRUE(Close(K::cast(x, "float64"), {1.7, -1.7, 0, 2.5}, {4}, 1e-7, 0));
  EXPECT_TRUE(Close(K::identity(x), {1.7, -1.7, 0, 2.5}, {4}));
  EXPECT_THROW((void)K::cast(x, "float128"), ktape::TypeError);
}

TEST(Core, ShapeAndSize) {
  const Tensor v = K::variable(arr({1, 2, 3, 4, 5, 6}, {2, 3}));
  const Tensor s = K::shape(v);
  EXPECT_EQ(K::dtype(s), "int32");
  EXPECT_TRUE(Close(s, {2, 3}, {2}, 0, 0));
  EXPECT_TRUE(Close(K::size(v), {6}, {}, 0, 0));
  const Tensor p = K::placeholder({K::None, 3});
  const auto out =
      K::function({p}, {K::shape(p), K::size(p)})({NDArray(Shape{5, 3}, DType::float32)});
  EXPECT_TRUE(Close(out[0], {5, 3}, {2}, 0, 0));
  EXPECT_TRUE(Close(out[1], {15}, {}, 0, 0));
  EXPECT_EQ(out[1].dtype(), DType::int32);
}

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
  EXPECT_THROW((void)K::random_uniform({2}, 0, 1, {.dtype = "int32"}), ktape::TypeError);
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
  EXPECT_THROW((void)K::placeholder({2}, {.sparse = true}), ktape::NotImplementedError);
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

// ============================================================================================
// switch_, in_train_phase, in_test_phase, learning phase (spec 3.4)
// ============================================================================================

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

TEST(Control, SwitchRank1ConditionSelectsRows) {
  // cond [1,0,0,1] selects rows 0 and 3 from `then` and rows 1 and 2 from `else`.
  const Tensor cond = cst({1, 0, 0, 1}, {4});
  const Tensor th = cst({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 3});
  const Tensor el = cst({-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12}, {4, 3});
  EXPECT_TRUE(
      Close(K::switch_(cond, th, el), {1, 2, 3, -4, -5, -6, -7, -8, -9, 10, 11, 12}, {4, 3}));
  // A bool condition works the same, and callables are accepted.
  const Tensor bcond = K::greater(cst({0.5, -1, -2, 3}, {4}), 0.0);
  EXPECT_TRUE(Close(K::switch_(
                        bcond, [&] { return th; }, [&] { return el; }),
                    {1, 2, 3, -4, -5, -6, -7, -8, -9, 10, 11, 12}, {4, 3}));
}

TEST(Control, SwitchScalarAndSameRankConditions) {
  const Tensor th = cst({1, 2, 3, 4}, {2, 2});
  const Tensor el = cst({5, 6, 7, 8}, {2, 2});
  EXPECT_TRUE(Close(K::switch_(cst({1}, {}), th, el), {1, 2, 3, 4}, {2, 2}));
  EXPECT_TRUE(Close(K::switch_(cst({0}, {}), th, el), {5, 6, 7, 8}, {2, 2}));
  // elementwise condition [[1,0],[0,1]] -> [[1,6],[7,4]]
  EXPECT_TRUE(Close(K::switch_(cst({1, 0, 0, 1}, {2, 2}), th, el), {1, 6, 7, 4}, {2, 2}));
  // rank-2 condition on rank-3 branches: padded on the right.
  // cond (2,2) = [[1,0],[0,1]] on (2,2,2) 1..8 vs zeros -> keeps [0][0][:], [1][1][:]
  const Tensor t3 = cst({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2});
  const Tensor e3 = cst({0, 0, 0, 0, 0, 0, 0, 0}, {2, 2, 2});
  EXPECT_TRUE(
      Close(K::switch_(cst({1, 0, 0, 1}, {2, 2}), t3, e3), {1, 2, 0, 0, 0, 0, 7, 8}, {2, 2, 2}));
}

TEST(Control, SwitchHigherRankConditionIsValueError) {
  const Tensor th = cst({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4, 3});
  const Tensor cond = cst(std::vector<double>(24, 1.0), {4, 3, 2});
  EXPECT_THROW((void)K::switch_(cond, th, th), ktape::ValueError);
  // Branch dtypes must agree.
  EXPECT_THROW((void)K::switch_(cst({1}, {}), th, cst({1}, {1}, "float64")), ktape::TypeError);
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

TEST(Layout, SliceAndStackErrorsNameTheArguments) {
  auto x = K::placeholder({3, 4});
  auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const ktape::ValueError& e) {
      return e.what();
    }
    return "no ValueError";
  };
  EXPECT_EQ(message([&] {
              K::slice(x, {0, 3}, {1, 2});
            }),
            "K::slice: start 3 and size 2 on axis 1 leave a tensor of shape (3, 4)");
  EXPECT_NE(message([&] {
              K::slice(x, {0}, {1, 2});
            }).find("one entry per axis of (3, 4)"),
            std::string::npos);
  EXPECT_NE(message([&] {
              K::stack({x, K::placeholder({4, 3})});
            }).find("K::stack: shapes differ: (3, 4) and (4, 3)"),
            std::string::npos);
  // A slice of a None dim is checked when the Function sees the concrete shape.
  auto y = K::placeholder({K::None, 4});
  auto f = K::function({y}, {K::slice(y, {2, 0}, {2, -1})});
  EXPECT_EQ(f({NDArray::full(Shape{4, 4}, 1.0)})[0].shape(), (Shape{2, 4}));
  EXPECT_THROW(f({NDArray::full(Shape{3, 4}, 1.0)}), ktape::ValueError);
}
