// The conv family (ops/conv, ops/pool, ops/normalization, ops/image): forward values against
// NumPy (tests/data/conv_reference.py: direct loops over explicitly padded inputs, run once,
// values pasted below) or hand calculation, the transposed convs as adjoints of the forward
// conv, float64 gradchecks of every op with respect to every float input (and second order
// through conv2d and pool2d), cpu-vs-reference parity in both data formats, and every
// documented error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <tbb/global_control.h>

#include "ktape/ktape.hpp"
#include "test_util.hpp"

namespace {

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;
using V = std::vector<Tensor>;
using Fn = std::function<Tensor(const V&)>;

// The inputs of conv_reference.py: ((i * 7) % mod - mod / 2) * scale over the flat index i.
NDArray ramp(const Shape& s, int mod = 11, double scale = 0.25) {
  NDArray a(s, DType::float64);
  for (std::int64_t i = 0; i < a.size(); ++i)
    a.set_item(i, static_cast<double>((i * 7) % mod - mod / 2) * scale);
  return a;
}

NDArray normal(const Shape& s, std::uint64_t seed, double stddev = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> d(0.0, stddev);
  NDArray a(s, DType::float64);
  for (std::int64_t i = 0; i < a.size(); ++i) a.set_item(i, d(gen));
  return a;
}

// Distinct values (a shuffled grid): no ties inside a max-pool window.
NDArray distinct(const Shape& s, std::uint64_t seed) {
  NDArray a(s, DType::float64);
  std::vector<double> v(static_cast<std::size_t>(a.size()));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = -2.0 + 4.0 * static_cast<double>(i) / static_cast<double>(v.size());
  std::shuffle(v.begin(), v.end(), std::mt19937_64(seed));
  for (std::int64_t i = 0; i < a.size(); ++i) a.set_item(i, v[static_cast<std::size_t>(i)]);
  return a;
}

// Runs f on float64 placeholders shaped like `inputs` with the given backend.
NDArray run(const Fn& f, const std::vector<NDArray>& inputs, const std::string& backend) {
  V phs;
  for (const auto& in : inputs) phs.push_back(K::placeholder(in.shape(), {.dtype = "float64"}));
  return K::function(phs, {f(phs)}, {}, {.backend = backend})(inputs)[0];
}

::testing::AssertionResult Near(const NDArray& got, const std::vector<double>& want,
                                const Shape& shape, double tol = 1e-9) {
  if (got.shape() != shape)
    return ::testing::AssertionFailure()
           << "shape " << got.shape().str() << ", expected " << shape.str();
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got.item(static_cast<std::int64_t>(i));
    if (!(std::abs(g - want[i]) <= tol * (1 + std::abs(want[i]))))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << g << ", expected " << want[i];
  }
  return ::testing::AssertionSuccess();
}

// Forward values on both backends.
void expect_forward(const Fn& f, const std::vector<NDArray>& inputs,
                    const std::vector<double>& want, const Shape& shape) {
  for (const char* b : {"cpu", "reference"}) {
    SCOPED_TRACE(b);
    EXPECT_TRUE(Near(run(f, inputs, b), want, shape));
  }
}

// The message of the E that f throws ("no exception" / "wrong type: ..." otherwise).
template <class E>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}
#define EXPECT_ERROR(E, stmt, ...)                                 \
  do {                                                             \
    const std::string msg_ = message_of<E>([&] { (void)(stmt); }); \
    for (const char* part : {__VA_ARGS__})                         \
      EXPECT_NE(msg_.find(part), std::string::npos)                \
          << "message: " << msg_ << "\n  lacks: " << part;         \
  } while (0)

// conv2d valid stride 1: shape (2, 3, 3, 4)
const std::vector<double> kConv2dValid = {
    0.125, 5.375, -6.25, 4.625,  0.25,   0.125, -3.75, 8.625, 8.625, -3.75, 0.125, 0.25,
    0.75,  -5.75, 9.0,   -5.625, -1.875, -2.75, 3.25,  -5.75, -4.5,  3.0,   3.0,   -4.5,
    -2.75, 3.75,  -6.0,  6.125,  0.125,  5.375, -6.25, 4.625, 0.25,  0.125, -3.75, 8.625,
    4.625, -6.25, 5.375, 0.125,  6.125,  -6.0,  3.75,  -2.75, 0.75,  -5.75, 9.0,   -5.625,
    -5.75, 3.25,  -2.75, -1.875, -5.625, 9.0,   -5.75, 0.75,  -2.75, 3.75,  -6.0,  6.125,
    8.625, -3.75, 0.125, 0.25,   4.625,  -6.25, 5.375, 0.125, 6.125, -6.0,  3.75,  -2.75};
// conv2d same stride 2: shape (2, 3, 3, 4)
const std::vector<double> kConv2dSameStride2 = {
    3.25,   -3.875, 4.0,   -0.625, -2.25,  -1.25,  5.375, -3.625, -2.75, 6.5,   -3.625, 0.625,
    6.5,    -5.75,  3.875, -0.875, -1.875, -2.75,  3.25,  -5.75,  -2.25, 1.375, -2.5,   0.5,
    3.625,  -3.625, 3.5,   -1.875, -1.375, -3.125, 7.0,   -4.75,  -2.5,  4.5,   -2.25,  -0.875,
    -3.625, 0.625,  -0.75, -2.75,  -3.25,  4.25,   -3.25, 1.125,  -0.75, 0.625, -3.625, 6.5,
    -2.5,   0.5,    2.875, -2.25,  -5.625, 9.0,    -5.75, 0.75,   1.875, 2.375, -4.625, 4.0,
    -2.25,  -0.875, 1.125, -2.5,   -3.375, 4.125,  -4.0,  0.375,  1.0,   1.0,   -4.0,   6.0};
// conv2d even kernel same stride 1: shape (2, 5, 5, 2)
const std::vector<double> kConv2dEvenSame = {
    0.125,  -4.125, -4.625, -0.75,  -2.5,   -2.875, 7.875, 0.5,    -0.75,  5.625,  5.25,  4.5,
    0.5,    7.875,  -2.875, -2.5,   -0.75,  -4.625, 1.125, -1.75,  -3.375, -3.375, 0.125, -4.125,
    -4.625, -0.75,  -2.5,   -2.875, 3.0,    0.5,    4.5,   5.25,   5.25,   4.5,    0.5,   7.875,
    -2.875, -2.5,   0.75,   -1.375, -0.125, -3.25,  0.25,  -3.625, 3.375,  -4.0,   -1.75, -0.25,
    -0.5,   -0.5,   7.875,  0.5,    4.5,    5.25,   5.25,  4.5,    0.5,    7.875,  -1.0,  0.375,
    -0.75,  -4.625, -4.125, 0.125,  -3.375, -3.375, 0.125, -4.125, -3.25,  -1.5,   -2.5,  -2.875,
    7.875,  0.5,    4.5,    5.25,   5.25,   4.5,    0.0,   4.875,  -2.875, -2.5,   -0.75, -4.625,
    -4.125, 0.125,  -3.375, -3.375, 1.875,  -5.25,  -1.75, -0.25,  -1.375, -0.625, 3.125, 0.375,
    -0.625, 5.5,    -2.375, 2.75};
// conv2d dilation 2 same: shape (2, 5, 5, 4)
const std::vector<double> kConv2dDilatedSame = {
    -1.125, 1.625,  2.5,    -2.25,  -2.5,   3.125,  0.0,    -2.5,   -4.0,   2.375,  -2.5,   0.125,
    -2.5,   1.875,  -2.5,   3.125,  0.0,    3.125,  -2.5,   1.875,  1.625,  0.875,  -1.75,  0.625,
    3.0,    -1.75,  -1.5,   3.125,  0.75,   -3.125, 2.375,  1.625,  3.125,  -2.875, 3.0,    -1.75,
    1.5,    -1.625, 0.25,   -1.625, -2.375, -0.625, 1.75,   0.375,  0.125,  1.0,    1.875,  -1.0,
    1.375,  1.125,  0.25,   -2.5,   -1.0,   -2.0,   0.125,  1.0,    -3.75,  0.625,  1.25,   1.25,
    -1.375, 1.625,  0.875,  -1.75,  -2.875, 3.0,    -1.75,  -1.5,   -1.625, 0.75,   -3.125, 2.375,
    -1.5,   3.125,  -2.875, 3.0,    1.5,    1.5,    -1.625, 0.25,   2.125,  -1.125, -1.25,  3.625,
    -0.75,  -1.125, 1.625,  2.5,    2.375,  -4.125, 3.75,   0.375,  2.5,    -2.25,  -0.75,  -1.125,
    0.0,    -2.5,   1.875,  -2.5,   -1.125, -0.75,  -2.25,  2.5,    -1.125, 2.125,  -3.375, 3.625,
    3.25,   2.375,  -2.875, -0.625, 3.625,  -1.25,  -1.125, 2.125,  0.625,  -1.375, 1.625,  0.875,
    3.0,    -2.875, 3.125,  -1.5,   1.625,  -1.375, 0.625,  -1.75,  -3.0,   -3.125, 6.125,  -4.625,
    -1.75,  0.875,  1.625,  -1.375, -3.375, 2.125,  -1.125, -1.25,  1.0,    0.125,  -2.0,   -1.0,
    -0.625, -2.375, 0.875,  0.375,  0.375,  1.875,  0.875,  -0.125, 0.375,  1.75,   -0.625, -2.375,
    1.75,   -1.125, -0.875, 0.625,  -1.75,  3.0,    -2.875, 3.125,  0.875,  1.625,  -1.375, 0.625,
    4.625,  -3.0,   -3.125, 6.125,  0.625,  -1.75,  0.875,  1.625,  3.625,  -3.375, 2.125,  -1.125,
    3.125,  -2.5,   1.875,  -2.5,   1.625,  -1.125, -0.75,  -2.25,  -2.375, 0.375,  3.75,   -4.125,
    -2.25,  2.5,    1.625,  -1.125, -3.375, 3.625,  -1.25,  -1.125};
// conv2d channels_first same stride 2: shape (2, 4, 3, 3)
const std::vector<double> kConv2dChannelsFirst = {
    -0.125, 0.125,  -2.625, 2.375,  2.0,    2.75,   -0.125, 2.625,  -2.875, 0.875,  -2.875, -1.0,
    -2.5,   -3.875, 2.875,  1.25,   0.75,   -1.125, 2.5,    1.0,    1.25,   -4.25,  2.125,  -2.0,
    0.125,  2.625,  2.5,    0.375,  1.75,   1.0,    2.75,   -1.875, -5.0,   -0.375, -2.375, -0.125,
    1.25,   0.5,    -0.625, -2.5,   2.375,  0.0,    0.875,  0.625,  3.375,  -0.125, 1.25,   0.0,
    2.375,  -1.75,  -4.375, -0.125, -1.625, 0.875,  -0.875, 2.0,    1.25,   1.625,  -2.75,  0.0,
    -3.625, -0.125, 2.125,  -0.375, -0.375, 0.0,    2.75,   1.875,  1.25,   0.375,  1.375,  -2.875};
// conv1d causal dilation 2: shape (2, 7, 3)
const std::vector<double> kConv1dCausalDilated = {
    -1.75,  0.625,  -0.125, -1.75,  0.25,  1.0,    1.25,   -1.875, 0.0,    1.625,  -2.25,
    0.75,   -1.125, 1.75,   -1.625, 0.875, 1.75,   -3.625, 1.5,    -2.375, 1.25,   1.0,
    -0.625, 0.875,  -1.75,  0.375,  0.625, 1.125,  1.0,    -1.625, 1.5,    -2.125, 0.5,
    -3.625, 1.75,   0.875,  -1.625, 1.75,  -1.125, 1.75,   -2.375, 1.0};
// conv1d same stride 3: shape (2, 3, 3)
const std::vector<double> kConv1dSameStride3 = {-1.5,   -1.5,  1.625, -1.625, 1.125, 0.75,
                                                0.625,  0.375, 0.75,  -1.625, 1.375, 0.0,
                                                -1.375, 1.125, 0.5,   -0.5,   1.625, -1.875};
// conv3d same stride (2, 1, 2): shape (1, 2, 3, 2, 2)
const std::vector<double> kConv3dSame = {2.75, 0.5,    1.5,   0.375,  1.5,    -2.375, 1.5, -4.875,
                                         0.5,  -1.625, -3.25, 3.375,  2.125,  -0.25,  1.5, -3.625,
                                         2.25, -5.875, 1.5,   -3.375, -4.375, 3.75,   1.5, -2.125};
// depthwise_conv2d same stride 2: shape (2, 3, 3, 6)
const std::vector<double> kDepthwiseSame = {
    -1.625, 1.125,  0.875,  1.125,  0.625,  1.125,  -0.875, -0.5,   -1.875, 0.875,  -1.375, 1.5,
    -0.875, -0.25,  0.125,  -0.875, -2.125, 1.25,   1.125,  1.125,  0.875,  1.625,  -0.125, 1.875,
    -0.125, -1.75,  0.875,  -0.5,   -1.25,  0.875,  -0.125, -1.0,   2.0,    -2.25,  -0.75,  -0.125,
    0.875,  1.125,  0.625,  1.125,  -1.375, 1.25,   -1.875, 0.875,  -1.375, 1.5,    -0.625, 0.125,
    0.125,  -0.875, -2.125, 1.25,   -0.25,  -0.625, -0.25,  -0.875, -0.875, -1.25,  1.25,   -1.625,
    -0.5,   -0.875, -1.125, -0.5,   0.625,  -0.875, 1.125,  -1.625, 0.875,  -1.25,  1.0,    -0.875,
    -1.0,   -1.25,  -2.25,  1.0,    -0.125, 1.125,  -1.125, -1.125, -0.5,   -1.125, -1.625, -0.125,
    -0.125, 1.0,    1.0,    -1.25,  1.375,  -0.125, -0.875, -1.25,  1.25,   -1.625, -0.625, 0.875,
    -1.125, -0.5,   0.625,  -0.875, 0.375,  -1.875, 0.875,  -1.25,  1.0,    -0.875, 1.125,  0.125};
// conv2d_transpose (2, 6, 6, 2) same stride 2: shape (2, 6, 6, 2)
const std::vector<double> kTransposeSame = {
    0.125,  0.125,  1.375,  -3.0,   2.125,  1.0,    -1.5,   1.125, 0.125,  -1.75,  1.125,  -0.25,
    0.125,  1.375,  -3.0,   1.375,  1.0,    -1.375, 1.125,  -1.25, -1.75,  2.0,    -0.25,  0.25,
    2.0,    -2.0,   -0.375, 1.25,   -1.125, 0.75,   -0.375, 0.5,   0.25,   0.625,  1.0,    1.125,
    1.0,    -1.75,  1.125,  -1.0,   -1.75,  1.875,  -0.25,  0.5,   2.375,  -1.625, -0.25,  0.625,
    -0.625, -1.125, -0.375, 0.375,  0.25,   0.375,  1.0,    1.0,   0.25,   -1.125, -0.375, -1.125,
    -2.25,  0.625,  -0.25,  0.75,   2.375,  -1.75,  -0.25,  0.875, -1.75,  0.25,   1.125,  -1.75,
    -2.5,   1.375,  0.25,   -0.25,  2.0,    -1.75,  -1.25,  1.125, -1.375, 1.0,    1.375,  -3.0,
    1.375,  0.25,   -0.25,  1.125,  -1.75,  0.125,  1.125,  -1.5,  1.0,    2.125,  -3.0,   1.375,
    1.0,    0.625,  -0.375, -1.375, 0.25,   -0.375, -0.375, 0.625, 3.0,    -1.875, -0.375, 1.25,
    0.875,  -1.5,   1.125,  -1.25,  -1.75,  2.0,    -0.25,  0.25,  2.375,  -4.25,  1.125,  -1.0,
    -0.25,  -1.25,  -0.375, 0.5,    0.25,   0.625,  1.0,    1.125, -2.5,   -2.25,  -0.375, 0.375,
    -2.375, 0.875,  -0.25,  0.5,    2.375,  -1.625, -0.25,  0.625, -4.5,   1.75,   -0.25,  0.75};
// conv2d_transpose (2, 7, 7, 2) valid stride 2: shape (2, 7, 7, 2)
const std::vector<double> kTransposeValid = {
    0.125,  0.125, 1.375, -3.0,   2.125,  1.0,    -1.5,   1.125,  0.125,  -1.75,  1.125,  -0.25,
    0.25,   1.375, 0.125, 1.375,  -3.0,   1.375,  1.0,    -1.375, 1.125,  -1.25,  -1.75,  2.0,
    -0.25,  0.25,  1.375, -2.5,   2.0,    -2.0,   -0.375, 1.25,   -1.125, 0.75,   -0.375, 0.5,
    0.25,   0.625, 1.0,   1.125,  -1.875, -1.125, 1.0,    -1.75,  1.125,  -1.0,   -1.75,  1.875,
    -0.25,  0.5,   2.375, -1.625, -0.25,  0.625,  -2.25,  1.125,  -0.625, -1.125, -0.375, 0.375,
    0.25,   0.375, 1.0,   1.0,    0.25,   -1.125, -0.375, -1.125, -0.625, 1.75,   -2.25,  0.625,
    -0.25,  0.75,  2.375, -1.75,  -0.25,  0.875,  -1.75,  0.25,   1.125,  -1.75,  1.0,    0.625,
    0.625,  -0.25, 0.75,  1.125,  -1.75,  0.375,  0.875,  -2.375, 0.25,   1.625,  -1.75,  1.0,
    0.625,  -1.0,  -2.5,  1.375,  0.25,   -0.25,  2.0,    -1.75,  -1.25,  1.125,  -1.375, 1.0,
    1.375,  -3.0,  1.375, 0.125,  1.375,  0.25,   -0.25,  1.125,  -1.75,  0.125,  1.125,  -1.5,
    1.0,    2.125, -3.0,  1.375,  0.125,  0.125,  1.0,    0.625,  -0.375, -1.375, 0.25,   -0.375,
    -0.375, 0.625, 3.0,   -1.875, -0.375, 1.25,   -0.875, 2.0,    0.875,  -1.5,   1.125,  -1.25,
    -1.75,  2.0,   -0.25, 0.25,   2.375,  -4.25,  1.125,  -1.0,   0.625,  1.0,    -0.25,  -1.25,
    -0.375, 0.5,   0.25,  0.625,  1.0,    1.125,  -2.5,   -2.25,  -0.375, 0.375,  1.75,   -0.625,
    -2.375, 0.875, -0.25, 0.5,    2.375,  -1.625, -0.25,  0.625,  -4.5,   1.75,   -0.25,  0.75,
    1.125,  -2.25, 0.875, -0.25,  0.5,    1.25,   -1.625, 0.625,  0.625,  -2.25,  1.75,   0.5,
    0.75,   1.125, -2.25, 0.625};
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

// ---- forward values ------------------------------------------------------------------------

TEST(ConvForward, Conv2dValidAndSameWithStrides) {
  const NDArray x = ramp({2, 5, 5, 3}), w = ramp({3, 3, 3, 4}, 5, 0.5);
  expect_forward([](const V& v) { return K::conv2d(v[0], v[1]); }, {x, w}, kConv2dValid,
                 {2, 3, 3, 4});
  expect_forward(
      [](const V& v) {
        return K::conv2d(v[0], v[1], {.strides = {2, 2}, .padding = "same"});
      },
      {x, w}, kConv2dSameStride2, {2, 3, 3, 4});
}

TEST(ConvForward, EvenKernelSameAndDilatedSame) {
  const NDArray x = ramp({2, 5, 5, 3});
  expect_forward([](const V& v) { return K::conv2d(v[0], v[1], {.padding = "same"}); },
                 {x, ramp({2, 2, 3, 2}, 9, 0.5)}, kConv2dEvenSame, {2, 5, 5, 2});
  expect_forward(
      [](const V& v) {
        return K::conv2d(v[0], v[1], {.padding = "same", .dilation_rate = {2, 2}});
      },
      {x, ramp({3, 3, 3, 4}, 5, 0.5)}, kConv2dDilatedSame, {2, 5, 5, 4});
}

TEST(ConvForward, ChannelsFirst) {
  expect_forward(
      [](const V& v) {
        return K::conv2d(v[0], v[1],
                         {.strides = {2, 2}, .padding = "same", .data_format = "channels_first"});
      },
      {ramp({2, 3, 5, 5}), ramp({3, 3, 3, 4}, 5, 0.5)}, kConv2dChannelsFirst, {2, 4, 3, 3});
}

TEST(ConvForward, Conv1dCausalAndStrided) {
  const NDArray x = ramp({2, 7, 2}), w = ramp({3, 2, 3}, 5, 0.5);
  expect_forward(
      [](const V& v) { return K::conv1d(v[0], v[1], {.padding = "causal", .dilation_rate = {2}}); },
      {x, w}, kConv1dCausalDilated, {2, 7, 3});
  expect_forward(
      [](const V& v) { return K::conv1d(v[0], v[1], {.strides = {3}, .padding = "same"}); }, {x, w},
      kConv1dSameStride3, {2, 3, 3});
}

TEST(ConvForward, Conv3d) {
  expect_forward(
      [](const V& v) {
        return K::conv3d(v[0], v[1], {.strides = {2, 1, 2}, .padding = "same"});
      },
      {ramp({1, 4, 3, 4, 2}), ramp({2, 2, 3, 2, 2}, 5, 0.5)}, kConv3dSame, {1, 2, 3, 2, 2});
}

TEST(ConvForward, Depthwise) {
  expect_forward(
      [](const V& v) {
        return K::depthwise_conv2d(v[0], v[1], {.strides = {2, 2}, .padding = "same"});
      },
      {ramp({2, 5, 5, 3}), ramp({3, 3, 3, 2}, 5, 0.5)}, kDepthwiseSame, {2, 3, 3, 6});
}

TEST(ConvForward, SeparableIsDepthwiseThenPointwise) {
  // By hand: one pixel with channels (2, 3); the 1x1 depthwise kernel (1, 2) gives (2, 6); the
  // pointwise kernel (10, 100) sums them to 2*10 + 6*100.
  const NDArray x = NDArray::from_values({2, 3}, Shape{1, 1, 1, 2}, DType::float64);
  const NDArray dk = NDArray::from_values({1, 2}, Shape{1, 1, 2, 1}, DType::float64);
  const NDArray pk = NDArray::from_values({10, 100}, Shape{1, 1, 2, 1}, DType::float64);
  expect_forward([](const V& v) { return K::separable_conv2d(v[0], v[1], v[2]); }, {x, dk, pk},
                 {2 * 1 * 10 + 3 * 2 * 100}, {1, 1, 1, 1});
}

TEST(ConvForward, TransposeValues) {
  const NDArray x = ramp({2, 3, 3, 4}), w = ramp({3, 3, 2, 4}, 5, 0.5);
  expect_forward(
      [](const V& v) {
        return K::conv2d_transpose(v[0], v[1], {2, 6, 6, 2},
                                   {.strides = {2, 2}, .padding = "same"});
      },
      {x, w}, kTransposeSame, {2, 6, 6, 2});
  expect_forward(
      [](const V& v) {
        return K::conv2d_transpose(v[0], v[1], {K::None, 7, 7, 2}, {.strides = {2, 2}});
      },
      {x, w}, kTransposeValid, {2, 7, 7, 2});
}

// <conv(y, k), x> == <y, conv_transpose(x, k)> for every configuration: the transpose is the
// adjoint of the forward conv.
TEST(ConvForward, TransposeIsTheAdjointOfConv) {
  struct Case {
    std::string name;
    int rank;
    Shape y, k;
    K::ConvOptions o;
  };
  const std::vector<Case> cases = {
      {"2d valid s2", 2, {2, 7, 6, 3}, {3, 2, 3, 4}, {.strides = {2, 2}}},
      {"2d same s2", 2, {2, 7, 6, 3}, {3, 3, 3, 4}, {.strides = {2, 2}, .padding = "same"}},
      {"2d same s3 cf",
       2,
       {2, 3, 8, 7},
       {2, 3, 3, 2},
       {.strides = {3, 2}, .padding = "same", .data_format = "channels_first"}},
      {"2d dilated", 2, {1, 9, 9, 2}, {3, 3, 2, 3}, {.padding = "same", .dilation_rate = {2, 2}}},
      {"3d same", 3, {1, 5, 4, 6, 2}, {2, 3, 2, 2, 3}, {.strides = {2, 1, 2}, .padding = "same"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    for (const char* b : {"cpu", "reference"}) {
      SCOPED_TRACE(b);
      const NDArray yv = normal(c.y, 1), kv = normal(c.k, 2);
      auto y = K::placeholder(c.y, {.dtype = "float64"});
      auto k = K::placeholder(c.k, {.dtype = "float64"});
      const Tensor fwd = c.rank == 2 ? K::conv2d(y, k, c.o) : K::conv3d(y, k, c.o);
      const NDArray xv = normal(fwd.shape(), 3);
      auto x = K::placeholder(fwd.shape(), {.dtype = "float64"});
      // conv kernel (window..., in, out) is the transpose's (window..., out, in).
      const Tensor back = c.rank == 2 ? K::conv2d_transpose(x, k, c.y.dims(), c.o)
                                      : K::conv3d_transpose(x, k, c.y.dims(), c.o);
      auto f = K::function({y, k, x}, {K::sum(fwd * x), K::sum(y * back)}, {}, {.backend = b});
      const auto out = f({yv, kv, xv});
      EXPECT_NEAR(out[0].item(0), out[1].item(0), 1e-9 * (1 + std::abs(out[0].item(0))));
    }
  }
}

TEST(PoolForward, MaxAndAvgSameCountOnlyCellsInside) {
  const NDArray x = ramp({1, 5, 5, 2}, 13);
  expect_forward(
      [](const V& v) {
        return K::pool2d(v[0], {3, 3}, {.strides = {2, 2}, .padding = "same"});
      },
      {x}, kMaxPoolSame, {1, 3, 3, 2});
  expect_forward(
      [](const V& v) {
        return K::pool2d(v[0], {3, 3}, {.strides = {2, 2}, .padding = "same", .pool_mode = "avg"});
      },
      {x}, kAvgPoolSame, {1, 3, 3, 2});
  expect_forward(
      [](const V& v) {
        return K::pool2d(v[0], {2, 2},
                         {.strides = {2, 2}, .data_format = "channels_first", .pool_mode = "avg"});
      },
      {ramp({1, 2, 5, 5}, 13)}, kAvgPoolValidCF, {1, 2, 2, 2});
  expect_forward(
      [](const V& v) {
        return K::pool3d(v[0], {2, 2, 2}, {.strides = {2, 2, 2}, .padding = "same"});
      },
      {ramp({1, 3, 3, 3, 2}, 13)}, kMaxPool3dSame, {1, 2, 2, 2, 2});
}

TEST(PoolForward, AvgSameCornerByHand) {
  // 3x3 input 1..9, 2x2 window, stride 2, same: out 2x2; the bottom-right window holds only 9
  // (its other cells are padding), so it averages to 9, not 9 / 4.
  const NDArray x =
      NDArray::from_values({1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{1, 3, 3, 1}, DType::float64);
  expect_forward(
      [](const V& v) {
        return K::pool2d(v[0], {2, 2}, {.strides = {2, 2}, .padding = "same", .pool_mode = "avg"});
      },
      {x}, {(1 + 2 + 4 + 5) / 4.0, (3 + 6) / 2.0, (7 + 8) / 2.0, 9}, {1, 2, 2, 1});
}

TEST(NormForward, BiasAddByHand) {
  const NDArray x = NDArray::full({2, 3, 2}, 1.0, DType::float64);
  // channels_last rank-1 bias on the last axis.
  expect_forward([](const V& v) { return K::bias_add(v[0], v[1]); },
                 {x, NDArray::from_values({10, 20}, Shape{2}, DType::float64)},
                 {11, 21, 11, 21, 11, 21, 11, 21, 11, 21, 11, 21}, {2, 3, 2});
  // channels_first rank-1 bias on axis 1.
  expect_forward([](const V& v) { return K::bias_add(v[0], v[1], "channels_first"); },
                 {x, NDArray::from_values({10, 20, 30}, Shape{3}, DType::float64)},
                 {11, 11, 21, 21, 31, 31, 11, 11, 21, 21, 31, 31}, {2, 3, 2});
  // channels_first full bias: (steps=2, C=3) data reshaped (not transposed) to (3, 2).
  expect_forward([](const V& v) { return K::bias_add(v[0], v[1], "channels_first"); },
                 {x, NDArray::from_values({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::float64)},
                 {2, 3, 4, 5, 6, 7, 2, 3, 4, 5, 6, 7}, {2, 3, 2});
}

TEST(NormForward, BatchNormalizationAndMomentsByHand) {
  // x (4, 2): column 0 = 1, 2, 3, 4 (mean 2.5, biased var 1.25), column 1 = 2, 2, 2, 2.
  const NDArray x = NDArray::from_values({1, 2, 2, 2, 3, 2, 4, 2}, Shape{4, 2}, DType::float64);
  const NDArray gamma = NDArray::from_values({2, 3}, Shape{2}, DType::float64);
  const NDArray beta = NDArray::from_values({0.5, -1}, Shape{2}, DType::float64);
  for (const char* b : {"cpu", "reference"}) {
    SCOPED_TRACE(b);
    auto xp = K::placeholder({4, 2}, {.dtype = "float64"});
    auto gp = K::placeholder({2}, {.dtype = "float64"});
    auto bp = K::placeholder({2}, {.dtype = "float64"});
    const auto r = K::normalize_batch_in_training(xp, gp, bp, {0});
    const auto out =
        K::function({xp, gp, bp}, {r.normed, r.mean, r.var}, {}, {.backend = b})({x, gamma, beta});
    EXPECT_TRUE(Near(out[1], {2.5, 2}, {2}));
    EXPECT_TRUE(Near(out[2], {1.25, 0}, {2}));
    const double s0 = std::sqrt(1.25 + 1e-3), s1 = std::sqrt(1e-3);
    std::vector<double> want;
    for (double v : {1.0, 2.0, 3.0, 4.0}) {
      want.push_back((v - 2.5) / s0 * 2 + 0.5);
      want.push_back(0.0 / s1 * 3 - 1);
    }
    EXPECT_TRUE(Near(out[0], want, {4, 2}));
  }
  // batch_normalization on axis 1 of an NCHW-like tensor with rank-1 parameters.
  const NDArray x4 = NDArray::from_values({1, 2, 3, 4}, Shape{1, 2, 1, 2}, DType::float64);
  expect_forward(
      [](const V& v) {
        return K::batch_normalization(v[0], v[1], v[2], v[3], v[4], {.axis = 1, .epsilon = 0});
      },
      {x4, NDArray::from_values({1, 3}, Shape{2}, DType::float64),
       NDArray::from_values({4, 1}, Shape{2}, DType::float64),
       NDArray::from_values({0, 10}, Shape{2}, DType::float64),
       NDArray::from_values({2, 1}, Shape{2}, DType::float64)},
      {(1 - 1) / 2.0 * 2, (2 - 1) / 2.0 * 2, (3 - 3) + 10.0, (4 - 3) + 10.0}, {1, 2, 1, 2});
}

TEST(ImageForward, PaddingResizeByHand) {
  const NDArray x = NDArray::from_values({1, 2, 3, 4}, Shape{1, 2, 2, 1}, DType::float64);
  expect_forward(
      [](const V& v) {
        return K::spatial_2d_padding(v[0], {{{1, 0}, {0, 2}}});
      },
      {x}, {0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0}, {1, 3, 4, 1});
  expect_forward([](const V& v) { return K::resize_images(v[0], 2, 1, "channels_last"); }, {x},
                 {1, 2, 1, 2, 3, 4, 3, 4}, {1, 4, 2, 1});
  // TF 1.x bilinear, factor 2 on a row (1, 2): src = dst / 2 -> 1, 1.5, 2, 2 (last clamps).
  expect_forward(
      [](const V& v) { return K::resize_images(v[0], 1, 2, "channels_last", "bilinear"); }, {x},
      {1, 1.5, 2, 2, 3, 3.5, 4, 4}, {1, 2, 4, 1});
  expect_forward(
      [](const V& v) {
        return K::temporal_padding(v[0], {2, 1});
      },
      {NDArray::from_values({5, 6}, Shape{1, 1, 2}, DType::float64)}, {0, 0, 0, 0, 5, 6, 0, 0},
      {1, 4, 2});
  expect_forward([](const V& v) { return K::repeat_elements(v[0], 3, 1); },
                 {NDArray::from_values({1, 2, 3, 4}, Shape{2, 2}, DType::float64)},
                 {1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4}, {2, 6});
}

TEST(ConvForward, LocalConvByHand) {
  // local_conv1d: inputs (1, 3, 1) = (1, 2, 3), k 2, stride 1 -> 2 steps with their own kernels
  // (2, 2, 1): step 0 (1, 10) . (1, 2) = 21; step 1 (100, 1000) . (2, 3) = 3200.
  expect_forward([](const V& v) { return K::local_conv1d(v[0], v[1], 2, 1); },
                 {NDArray::from_values({1, 2, 3}, Shape{1, 3, 1}, DType::float64),
                  NDArray::from_values({1, 10, 100, 1000}, Shape{2, 2, 1}, DType::float64)},
                 {21, 3200}, {1, 2, 1});
  // local_conv2d channels_last: 2x2 input, 1x1 kernels, output 2x2, one weight per position.
  expect_forward(
      [](const V& v) {
        return K::local_conv2d(v[0], v[1], {1, 1}, {1, 1}, {2, 2});
      },
      {NDArray::from_values({1, 2, 3, 4}, Shape{1, 2, 2, 1}, DType::float64),
       NDArray::from_values({1, 10, 100, 1000}, Shape{4, 1, 1}, DType::float64)},
      {1, 20, 300, 4000}, {1, 2, 2, 1});
}

// ---- gradients and parity ------------------------------------------------------------------

struct Case {
  std::string name;
  Fn f;
  std::vector<NDArray> inputs;  // float64
  bool second_order = false;    // also gradcheck the gradient (through K::gradients)
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  const K::ConvOptions same2{.strides = {2, 2}, .padding = "same"};
  const K::ConvOptions cf{.strides = {2, 1}, .padding = "same", .data_format = "channels_first"};
  std::vector<Case> c = {
      {"conv1d_valid",
       [](const V& v) { return K::conv1d(v[0], v[1]); },
       {normal({2, 6, 3}, 1), normal({3, 3, 2}, 2)}},
      {"conv1d_causal_dilated",
       [](const V& v) {
         return K::conv1d(v[0], v[1], {.padding = "causal", .dilation_rate = {2}});
       },
       {normal({2, 6, 2}, 3), normal({2, 2, 3}, 4)}},
      {"conv1d_same_stride2",
       [](const V& v) { return K::conv1d(v[0], v[1], {.strides = {2}, .padding = "same"}); },
       {normal({1, 7, 2}, 5), normal({3, 2, 2}, 6)}},
      {"conv2d_valid",
       [](const V& v) { return K::conv2d(v[0], v[1]); },
       {normal({2, 5, 4, 3}, 7), normal({3, 2, 3, 2}, 8)},
       true},
      {"conv2d_same_stride2",
       [same2](const V& v) { return K::conv2d(v[0], v[1], same2); },
       {normal({2, 5, 6, 2}, 9), normal({3, 3, 2, 3}, 10)}},
      {"conv2d_even_same",
       [](const V& v) { return K::conv2d(v[0], v[1], {.padding = "same"}); },
       {normal({1, 4, 5, 2}, 11), normal({2, 2, 2, 2}, 12)}},
      {"conv2d_dilated_same",
       [](const V& v) {
         return K::conv2d(v[0], v[1], {.padding = "same", .dilation_rate = {2, 1}});
       },
       {normal({1, 5, 4, 2}, 13), normal({3, 2, 2, 2}, 14)}},
      {"conv2d_channels_first",
       [cf](const V& v) { return K::conv2d(v[0], v[1], cf); },
       {normal({2, 3, 5, 4}, 15), normal({3, 3, 3, 2}, 16)},
       true},
      {"conv3d_same",
       [](const V& v) {
         return K::conv3d(v[0], v[1], {.strides = {2, 1, 2}, .padding = "same"});
       },
       {normal({1, 4, 3, 4, 2}, 17), normal({2, 2, 2, 2, 2}, 18)}},
      {"conv2d_transpose_same",
       [same2](const V& v) {
         return K::conv2d_transpose(v[0], v[1], {2, 6, 5, 2}, same2);
       },
       {normal({2, 3, 3, 3}, 19), normal({3, 3, 2, 3}, 20)},
       true},
      {"conv2d_transpose_valid_cf",
       [](const V& v) {
         return K::conv2d_transpose(v[0], v[1], {1, 2, 7, 6},
                                    {.strides = {2, 2}, .data_format = "channels_first"});
       },
       {normal({1, 3, 3, 2}, 21), normal({3, 3, 2, 3}, 22)}},
      {"conv2d_transpose_dilated",
       [](const V& v) {
         return K::conv2d_transpose(v[0], v[1], {1, 6, 6, 2},
                                    {.padding = "same", .dilation_rate = {2, 2}});
       },
       {normal({1, 6, 6, 2}, 23), normal({2, 2, 2, 2}, 24)}},
      {"conv3d_transpose",
       [](const V& v) {
         return K::conv3d_transpose(v[0], v[1], {1, 4, 3, 4, 2},
                                    {.strides = {2, 1, 2}, .padding = "same"});
       },
       {normal({1, 2, 3, 2, 2}, 25), normal({2, 2, 2, 2, 2}, 26)}},
      {"depthwise_conv2d",
       [same2](const V& v) { return K::depthwise_conv2d(v[0], v[1], same2); },
       {normal({2, 5, 4, 3}, 27), normal({3, 3, 3, 2}, 28)}},
      {"depthwise_conv2d_cf",
       [cf](const V& v) { return K::depthwise_conv2d(v[0], v[1], cf); },
       {normal({1, 2, 4, 4}, 29), normal({2, 2, 2, 3}, 30)}},
      {"separable_conv2d",
       [](const V& v) { return K::separable_conv2d(v[0], v[1], v[2], {.padding = "same"}); },
       {normal({1, 4, 4, 2}, 31), normal({3, 3, 2, 2}, 32), normal({1, 1, 4, 3}, 33)}},
      {"separable_conv1d",
       [](const V& v) { return K::separable_conv1d(v[0], v[1], v[2], {.strides = {2}}); },
       {normal({2, 7, 2}, 34), normal({3, 2, 2}, 35), normal({1, 4, 3}, 36)}},
      {"local_conv1d",
       [](const V& v) { return K::local_conv1d(v[0], v[1], 2, 2); },
       {normal({2, 6, 2}, 37), normal({3, 4, 3}, 38)}},
      {"local_conv2d_cf",
       [](const V& v) {
         return K::local_conv2d(v[0], v[1], {2, 2}, {1, 2}, {2, 2}, "channels_first");
       },
       {normal({2, 2, 3, 4}, 39), normal({4, 8, 2}, 40)}},
      {"pool2d_max_same",
       [](const V& v) {
         return K::pool2d(v[0], {3, 3}, {.strides = {2, 2}, .padding = "same"});
       },
       {distinct({2, 5, 5, 2}, 41)},
       true},
      {"pool2d_avg_same_cf",
       [](const V& v) {
         return K::pool2d(v[0], {2, 3},
                          {.strides = {2, 2},
                           .padding = "same",
                           .data_format = "channels_first",
                           .pool_mode = "avg"});
       },
       {normal({2, 2, 5, 5}, 42)},
       true},
      {"pool2d_max_valid_cf",
       [](const V& v) {
         return K::pool2d(v[0], {2, 2}, {.strides = {1, 2}, .data_format = "channels_first"});
       },
       {distinct({1, 3, 4, 5}, 43)}},
      {"pool3d_avg",
       [](const V& v) {
         return K::pool3d(v[0], {2, 2, 2},
                          {.strides = {2, 2, 2}, .padding = "same", .pool_mode = "avg"});
       },
       {normal({1, 3, 4, 3, 2}, 44)}},
      {"pool3d_max",
       [](const V& v) {
         return K::pool3d(v[0], {2, 2, 2}, {.strides = {1, 2, 2}});
       },
       {distinct({1, 3, 4, 4, 2}, 45)}},
      {"bias_add_cl",
       [](const V& v) { return K::bias_add(v[0], v[1]); },
       {normal({2, 3, 4}, 46), normal({4}, 47)}},
      {"bias_add_cf_full",
       [](const V& v) { return K::bias_add(v[0], v[1], "channels_first"); },
       {normal({2, 3, 2, 4}, 48), normal({2, 4, 3}, 49)}},
      {"batch_normalization",
       [](const V& v) {
         return K::batch_normalization(v[0], v[1], K::exp(v[2]), v[3], v[4], {.axis = 1});
       },
       {normal({2, 3, 2}, 50), normal({3}, 51), normal({3}, 52), normal({3}, 53), normal({3}, 54)}},
      {"normalize_batch_in_training",
       [](const V& v) {
         const auto r = K::normalize_batch_in_training(v[0], v[1], v[2], {0, 1});
         return r.normed + K::expand_dims(K::expand_dims(r.mean * r.var, 0), 0);
       },
       {normal({3, 2, 3}, 55), normal({3}, 56), normal({3}, 57)}},
      {"normalize_batch_cf",
       [](const V& v) {
         const auto r = K::normalize_batch_in_training(v[0], v[1], v[2], {0, 2, 3});
         return K::sum(r.normed * r.normed * v[0]) + K::sum(r.mean + K::sqrt(r.var));
       },
       {normal({2, 2, 2, 3}, 58), normal({2}, 59), normal({2}, 60)}},
      {"spatial_3d_padding_cf",
       [](const V& v) {
         return K::spatial_3d_padding(v[0], {{{1, 0}, {0, 2}, {1, 1}}}, "channels_first");
       },
       {normal({1, 2, 2, 2, 3}, 61)}},
      {"resize_bilinear",
       [](const V& v) { return K::resize_images(v[0], 3, 2, "channels_first", "bilinear"); },
       {normal({1, 2, 3, 2}, 62)}},
      {"resize_volumes",
       [](const V& v) { return K::resize_volumes(v[0], 2, 1, 2, "channels_last"); },
       {normal({1, 2, 2, 2, 2}, 63)}},
  };
  return c;
}

class ConvGrad : public ::testing::TestWithParam<Case> {};

TEST_P(ConvGrad, MatchesFiniteDifferences) {
  const Case& k = GetParam();
  for (const char* b : {"cpu", "reference"}) {
    const auto r = ktape::gradcheck(k.f, k.inputs, {.backend = b});
    EXPECT_TRUE(r.ok) << b << ": " << r.report << " (max_error " << r.max_error << ")";
  }
}

class ConvSecondOrder : public ::testing::TestWithParam<Case> {};

TEST_P(ConvSecondOrder, GradientOfGradientMatchesFiniteDifferences) {
  const Case& k = GetParam();
  // The gradient of sum(f^2) with respect to every input, itself gradchecked.
  for (std::size_t i = 0; i < k.inputs.size(); ++i) {
    const Fn g = [&](const V& v) {
      const Tensor y = k.f(v);
      return K::gradients(K::sum(y * y), {v[i]})[0];
    };
    const auto r = ktape::gradcheck(g, k.inputs);
    EXPECT_TRUE(r.ok) << "d/d input " << i << ": " << r.report;
  }
}

// cpu against reference in float32 and float64: the forward value and the gradient of a fixed
// projection with respect to every input.
TEST_P(ConvGrad, CpuMatchesReference) {
  const Case& k = GetParam();
  for (const DType dt : {DType::float32, DType::float64}) {
    const std::string dn(ktape::dtype_name(dt));
    SCOPED_TRACE(dn);
    V phs;
    std::vector<NDArray> feed;
    for (const auto& in : k.inputs) {
      phs.push_back(K::placeholder(in.shape(), {.dtype = dn}));
      feed.push_back(in.astype(dt));
    }
    const Tensor y = k.f(phs);
    const Tensor r = K::constant(normal(y.shape(), 99), {.dtype = dn});
    V outs{y};
    for (const auto& g : K::gradients(K::sum(y * r), phs)) outs.push_back(g);
    const auto cpu = K::function(phs, outs, {}, {.backend = "cpu"})(feed);
    const auto ref = K::function(phs, outs, {}, {.backend = "reference"})(feed);
    const double tol = dt == DType::float32 ? 2e-5 : 1e-12;
    for (std::size_t o = 0; o < outs.size(); ++o) {
      ASSERT_EQ(cpu[o].shape(), ref[o].shape());
      double scale = 0;
      for (std::int64_t i = 0; i < ref[o].size(); ++i)
        scale = std::max(scale, std::abs(ref[o].item(i)));
      for (std::int64_t i = 0; i < ref[o].size(); ++i)
        ASSERT_NEAR(cpu[o].item(i), ref[o].item(i), tol * (1 + scale))
            << (o == 0 ? "forward" : "gradient " + std::to_string(o - 1)) << " element " << i;
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& i) { return i.param.name; }
std::vector<Case> second_order_cases() {
  std::vector<Case> r;
  for (const auto& c : cases())
    if (c.second_order) r.push_back(c);
  return r;
}
INSTANTIATE_TEST_SUITE_P(Ops, ConvGrad, ::testing::ValuesIn(cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Ops, ConvSecondOrder, ::testing::ValuesIn(second_order_cases()),
                         case_name);

// The backward ops differentiate too: gradcheck each directly (their own rules).
TEST(ConvGrad, BackwardOpsAreDifferentiable) {
  // d/dx of conv2d through gradients of gradients, with a dependence on the kernel too.
  const Fn f = [](const V& v) {
    const Tensor y = K::conv2d(v[0], v[1], {.strides = {2, 1}, .padding = "same"});
    const auto g = K::gradients(K::sum(K::tanh(y)), {v[0], v[1]});
    return K::sum(g[0] * g[0]) + K::sum(K::square(g[1]) * v[1]);
  };
  const auto r = ktape::gradcheck(f, {normal({1, 4, 3, 2}, 70), normal({2, 2, 2, 2}, 71)});
  EXPECT_TRUE(r.ok) << r.report;
}

// Shapes big enough for the cpu kernels' tiling: several tiles per image and several slots
// (tasks), in both data formats, against the reference kernels; and the same bits whatever
// the thread count.
struct Big {
  std::string name;
  Fn f;
  std::vector<NDArray> inputs;
};

std::vector<Big> big_cases() {
  return {
      {"conv2d_same",
       [](const V& v) { return K::conv2d(v[0], v[1], {.padding = "same"}); },
       {normal({3, 20, 19, 16}, 80), normal({3, 3, 16, 24}, 81, 0.2)}},
      {"conv2d_strided_cf",
       [](const V& v) {
         return K::conv2d(v[0], v[1],
                          {.strides = {2, 2}, .padding = "same", .data_format = "channels_first"});
       },
       {normal({2, 12, 23, 21}, 82), normal({5, 4, 12, 20}, 83, 0.2)}},
      {"pool_max_cl",
       [](const V& v) {
         return K::pool2d(v[0], {3, 3}, {.strides = {2, 2}, .padding = "same"});
       },
       {distinct({4, 21, 20, 16}, 84)}},
      {"pool_avg_cf",
       [](const V& v) {
         return K::pool2d(v[0], {2, 2},
                          {.strides = {2, 2}, .data_format = "channels_first", .pool_mode = "avg"});
       },
       {normal({3, 8, 22, 21}, 85)}},
  };
}

std::vector<NDArray> forward_and_gradients(const Big& k, const std::string& backend, DType dt) {
  const std::string dn(ktape::dtype_name(dt));
  V phs;
  std::vector<NDArray> feed;
  for (const auto& in : k.inputs) {
    phs.push_back(K::placeholder(in.shape(), {.dtype = dn}));
    feed.push_back(in.astype(dt));
  }
  const Tensor y = k.f(phs);
  V outs{y};
  for (const auto& g : K::gradients(K::sum(K::square(y)), phs)) outs.push_back(g);
  return K::function(phs, outs, {}, {.backend = backend})(feed);
}

TEST(ConvTiling, LargeShapesMatchTheReference) {
  for (const auto& k : big_cases()) {
    SCOPED_TRACE(k.name);
    const auto cpu = forward_and_gradients(k, "cpu", DType::float64);
    const auto ref = forward_and_gradients(k, "reference", DType::float64);
    for (std::size_t o = 0; o < cpu.size(); ++o)
      for (std::int64_t i = 0; i < cpu[o].size(); ++i)
        ASSERT_NEAR(cpu[o].item(i), ref[o].item(i), 1e-9 * (1 + std::abs(ref[o].item(i))))
            << "output " << o << " element " << i;
  }
}

TEST(ConvTiling, SameBitsAtAnyThreadCount) {
  for (const auto& k : big_cases()) {
    SCOPED_TRACE(k.name);
    const auto many = forward_and_gradients(k, "cpu", DType::float32);
    std::vector<NDArray> one;
    {
      tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
      one = forward_and_gradients(k, "cpu", DType::float32);
    }
    for (std::size_t o = 0; o < many.size(); ++o)
      ASSERT_EQ(0, std::memcmp(many[o].raw_data(), one[o].raw_data(), many[o].nbytes()))
          << "output " << o;
  }
}

// ---- errors --------------------------------------------------------------------------------

Tensor ph(const Shape& s, const std::string& dt = "float32") {
  return K::placeholder(s, {.dtype = dt});
}

TEST(ConvErrors, ArgumentsNameTheFunctionAndTheValues) {
  const Tensor x = ph({2, 5, 5, 3}), k = ph({3, 3, 3, 4});
  EXPECT_ERROR(ktape::ValueError, K::conv2d(x, k, {.data_format = "NHWC"}), "K::conv2d", "NHWC",
               "channels_first", "channels_last");
  EXPECT_ERROR(ktape::ValueError, K::conv2d(x, k, {.padding = "full"}), "K::conv2d",
               "Invalid padding", "full", "valid", "same");
  EXPECT_ERROR(ktape::ValueError, K::conv2d(x, k, {.padding = "causal"}), "causal", "valid");
  EXPECT_ERROR(ktape::ValueError,
               K::conv1d(ph({2, 5, 3}), ph({3, 3, 4}),
                         {.padding = "causal", .data_format = "channels_first"}),
               "K::conv1d", "causal", "channels_last");
  EXPECT_ERROR(ktape::ValueError, K::conv2d(x, ph({3, 3, 2, 4})), "K::conv2d", "(2, 5, 5, 3)",
               "(3, 3, 2, 4)", "3 channels");
  EXPECT_ERROR(ktape::ValueError, K::conv2d(x, ph({3, 3, 3})), "K::conv2d", "kernel", "(3, 3, 3)",
               "rank 4");
  EXPECT_ERROR(ktape::ValueError, K::conv2d(ph({5, 5, 3}), k), "K::conv2d", "(5, 5, 3)", "rank 4");
  EXPECT_ERROR(ktape::ValueError, K::conv2d(x, ph({3, K::None, 3, 4})), "K::conv2d", "known");
  EXPECT_ERROR(ktape::ValueError, K::conv2d(x, k, {.strides = {1, 2, 3}}), "K::conv2d", "strides",
               "(1, 2, 3)", "2 entries");
  EXPECT_ERROR(ktape::ValueError, K::conv2d(x, k, {.strides = {0, 1}}), "strides", "positive");
  EXPECT_ERROR(ktape::ValueError, K::conv2d(x, k, {.dilation_rate = {-1}}), "dilation_rate");
  EXPECT_ERROR(ktape::ValueError, K::conv2d(ph({2, 2, 5, 3}), k), "K::conv2d", "(2, 2, 5, 3)",
               "smaller than the window");
  EXPECT_ERROR(ktape::TypeError, K::conv2d(ph({2, 5, 5, 3}, "int32"), ph({3, 3, 3, 4}, "int32")),
               "K::conv2d", "float");
  EXPECT_ERROR(ktape::TypeError, K::conv2d(x, ph({3, 3, 3, 4}, "float64")), "K::conv2d", "dtypes");
  EXPECT_ERROR(ktape::ValueError, K::conv3d(x, k), "K::conv3d", "rank 5");
}

TEST(ConvErrors, TransposedConvs) {
  const Tensor x = ph({2, 3, 3, 4}), k = ph({3, 3, 2, 4});
  const K::ConvOptions s2{.strides = {2, 2}, .padding = "same"};
  EXPECT_ERROR(ktape::ValueError, K::conv2d_transpose(x, k, {2, 8, 8, 2}, s2),
               "K::conv2d_transpose", "output_shape", "(2, 8, 8, 2)", "inconsistent",
               "(2, 3, 3, 4)");
  EXPECT_ERROR(ktape::ValueError, K::conv2d_transpose(x, k, {2, 6, 6, 3}, s2),
               "K::conv2d_transpose", "3 channels", "(3, 3, 2, 4)");
  EXPECT_ERROR(ktape::ValueError, K::conv2d_transpose(x, k, {6, 6, 2}, s2), "4 entries");
  EXPECT_ERROR(ktape::ValueError, K::conv2d_transpose(x, k, {3, 6, 6, 2}, s2), "batch 3");
  EXPECT_ERROR(ktape::ValueError, K::conv2d_transpose(x, ph({3, 3, 2, 5}), {2, 6, 6, 2}, s2),
               "4 channels", "(3, 3, 2, 5)");
  EXPECT_ERROR(
      ktape::ValueError,
      K::conv2d_transpose(x, k, {2, 6, 6, 2}, {.strides = {2, 2}, .dilation_rate = {2, 2}}),
      "dilation_rate", "strides of 1");
  EXPECT_ERROR(ktape::ValueError,
               K::conv2d_transpose(x, k, {2, 6, 6, 2}, {.dilation_rate = {2, 1}}), "equal");
  EXPECT_ERROR(ktape::ValueError, K::conv2d_transpose(x, k, {2, K::None, 6, 2}, s2), "known");
  EXPECT_ERROR(ktape::ValueError,
               K::conv3d_transpose(ph({1, 2, 2, 2, 4}), ph({2, 2, 2, 2, 4}), {1, 3, 3, 3, 2},
                                   {.dilation_rate = {2}}),
               "K::conv3d_transpose", "dilation_rate");
}

TEST(ConvErrors, DepthwiseSeparableLocal) {
  const Tensor x = ph({2, 5, 5, 3});
  EXPECT_ERROR(ktape::ValueError, K::depthwise_conv2d(x, ph({3, 3, 2, 2})), "K::depthwise_conv2d",
               "(2, 5, 5, 3)", "(3, 3, 2, 2)");
  EXPECT_ERROR(ktape::ValueError, K::separable_conv2d(x, ph({3, 3, 3, 2}), ph({1, 1, 5, 4})),
               "K::separable_conv2d", "pointwise_kernel", "(1, 1, 5, 4)", "6");
  EXPECT_ERROR(ktape::ValueError, K::separable_conv2d(x, ph({3, 3, 3, 2}), ph({2, 1, 6, 4})),
               "pointwise_kernel");
  EXPECT_ERROR(ktape::ValueError, K::local_conv1d(ph({2, 6, 2}), ph({3, 5, 3}), 2, 2),
               "K::local_conv1d", "(3, 5, 3)");
  EXPECT_ERROR(ktape::ValueError, K::local_conv1d(ph({2, 6, 2}), ph({4, 4, 3}), 2, 2),
               "K::local_conv1d", "output steps");
  EXPECT_ERROR(ktape::ValueError,
               K::local_conv2d(ph({1, 4, 4, 2}), ph({4, 8, 2}), {2, 2}, {2, 2}, {3, 2}),
               "K::local_conv2d", "(4, 8, 2)");
}

TEST(PoolErrors, ModesSizesAndPadding) {
  const Tensor x = ph({2, 5, 5, 3});
  EXPECT_ERROR(ktape::ValueError, K::pool2d(x, {2, 2}, {.pool_mode = "min"}), "K::pool2d",
               "Invalid pooling mode", "min", "max", "avg");
  EXPECT_ERROR(ktape::ValueError, K::pool2d(x, {2, 2}, {.padding = "causal"}), "K::pool2d",
               "Invalid padding", "causal");
  EXPECT_ERROR(ktape::ValueError, K::pool2d(x, {2}), "pool_size", "(2,)", "2 entries");
  EXPECT_ERROR(ktape::ValueError, K::pool2d(x, {6, 2}), "K::pool2d", "smaller than the window");
  EXPECT_ERROR(ktape::ValueError, K::pool2d(x, {2, 2}, {.data_format = "channels_middle"}),
               "K::pool2d", "channels_middle");
  EXPECT_ERROR(ktape::ValueError, K::pool3d(x, {2, 2, 2}), "K::pool3d", "rank 5");
  EXPECT_ERROR(ktape::TypeError, K::pool2d(ph({2, 5, 5, 3}, "int32"), {2, 2}), "K::pool2d");
}

TEST(NormErrors, BiasAndBatchNorm) {
  const Tensor x = ph({2, 5, 3});
  EXPECT_ERROR(ktape::ValueError, K::bias_add(x, ph({2, 5, 3})), "K::bias_add",
               "Unexpected bias dimensions 3", "1 or 2");
  EXPECT_ERROR(ktape::ValueError, K::bias_add(x, ph({4})), "K::bias_add", "(4,)", "(2, 5, 3)");
  EXPECT_ERROR(ktape::ValueError, K::bias_add(x, ph({4}), "channels_first"), "(4,)", "axis 1");
  EXPECT_ERROR(ktape::ValueError, K::batch_normalization(x, ph({4}), ph({3}), ph({3}), ph({3})),
               "K::batch_normalization", "mean", "(4,)");
  EXPECT_ERROR(ktape::ValueError,
               K::batch_normalization(x, ph({3}), ph({3}), ph({3}), ph({3}), {.axis = 3}),
               "K::batch_normalization");
  EXPECT_ERROR(ktape::ValueError, K::normalize_batch_in_training(x, Tensor(), Tensor(), {}),
               "K::normalize_batch_in_training", "reduction_axes");
  EXPECT_ERROR(ktape::ValueError, K::normalize_batch_in_training(x, Tensor(), Tensor(), {0, -3}),
               "repeat");
}

TEST(ImageErrors, PaddingAndResize) {
  EXPECT_ERROR(ktape::ValueError, K::temporal_padding(ph({2, 5}), {1, 1}), "K::temporal_padding",
               "rank 3");
  EXPECT_ERROR(ktape::ValueError, K::spatial_2d_padding(ph({1, 4, 4, 2}), {{{-1, 0}, {0, 0}}}),
               "K::spatial_2d_padding", "non-negative");
  EXPECT_ERROR(ktape::ValueError,
               K::resize_images(ph({1, 4, 4, 2}), 2, 2, "channels_last", "cubic"),
               "K::resize_images", "nearest", "bilinear", "cubic");
  EXPECT_ERROR(ktape::ValueError, K::resize_images(ph({1, 4, 4, 2}), 0, 2, "channels_last"),
               "height_factor");
  EXPECT_ERROR(ktape::ValueError, K::resize_images(ph({1, 4, 4, 2}), 2, 2, "NHWC"), "NHWC");
  EXPECT_ERROR(ktape::ValueError,
               K::resize_images(ph({1, K::None, 4, 2}), 2, 2, "channels_last", "bilinear"),
               "known");
  EXPECT_ERROR(ktape::ValueError, K::resize_volumes(ph({1, 4, 4, 2}), 2, 2, 2, "channels_last"),
               "K::resize_volumes", "rank 5");
  EXPECT_ERROR(ktape::ValueError, K::repeat_elements(ph({2, 3}), -1, 0), "K::repeat_elements",
               "-1");
  EXPECT_ERROR(ktape::ValueError, K::repeat_elements(ph({2, 3}), 2, 2), "K::repeat_elements");
}

// Empty batches, empty channel sets and empty outputs: shapes and zeros, never a crash.
TEST(ConvForward, ZeroSizedOperands) {
  for (const char* b : {"cpu", "reference"}) {
    SCOPED_TRACE(b);
    const Fn conv = [](const V& v) { return K::conv2d(v[0], v[1], {.padding = "same"}); };
    EXPECT_EQ(run(conv, {normal({0, 5, 5, 3}, 1), normal({3, 3, 3, 4}, 2)}, b).shape(),
              Shape({0, 5, 5, 4}));
    const NDArray none = run(conv, {normal({2, 5, 5, 0}, 1), normal({3, 3, 0, 4}, 2)}, b);
    EXPECT_EQ(none.shape(), Shape({2, 5, 5, 4}));
    for (std::int64_t i = 0; i < none.size(); ++i) ASSERT_EQ(none.item(i), 0.0);
    // Gradients with an empty batch: the kernel gradient is all zeros.
    const Fn grad = [](const V& v) {
      return K::gradients(K::sum(K::conv2d(v[0], v[1], {.padding = "same"})), {v[1]})[0];
    };
    const NDArray g = run(grad, {normal({0, 5, 5, 3}, 1), normal({3, 3, 3, 4}, 2)}, b);
    EXPECT_EQ(g.shape(), Shape({3, 3, 3, 4}));
    for (std::int64_t i = 0; i < g.size(); ++i) ASSERT_EQ(g.item(i), 0.0);
    const Fn pool = [](const V& v) {
      return K::pool2d(v[0], {2, 2}, {.strides = {2, 2}, .pool_mode = "avg"});
    };
    EXPECT_EQ(run(pool, {normal({0, 4, 4, 2}, 3)}, b).shape(), Shape({0, 2, 2, 2}));
  }
}

// data_format unset means image_data_format(), read when the op is built.
TEST(ConvForward, DataFormatDefaultsToTheConfiguredOne) {
  const std::string saved = K::image_data_format();
  K::set_image_data_format("channels_first");
  const Tensor y = K::conv2d(ph({2, 3, 7, 6}), ph({3, 3, 3, 5}));
  const Tensor p = K::pool2d(ph({2, 3, 7, 6}), {2, 2}, {.strides = {2, 2}});
  K::set_image_data_format(saved);
  EXPECT_EQ(y.shape(), Shape({2, 5, 5, 4}));
  EXPECT_EQ(p.shape(), Shape({2, 3, 3, 3}));
  EXPECT_EQ(K::conv2d(ph({2, 7, 6, 3}), ph({3, 3, 3, 5})).shape(), Shape({2, 5, 4, 5}));
}

// A placeholder with unknown spatial dims: the window is checked when the shapes are fed.
TEST(ConvErrors, RuntimeShapesAreCheckedAtCallTime) {
  auto x = ph({K::None, K::None, K::None, 3});
  auto f = K::function({x}, {K::conv2d(x, K::variable(NDArray::full({3, 3, 3, 2}, 0.5)))});
  EXPECT_EQ(f({NDArray::full({1, 4, 4, 3}, 1.0)})[0].shape(), Shape({1, 2, 2, 2}));
  EXPECT_ERROR(ktape::ValueError, f({NDArray::full({1, 2, 4, 3}, 1.0)}), "K::conv2d",
               "smaller than the window");
  EXPECT_ERROR(ktape::ValueError, f({NDArray::full({1, 4, 4, 2}, 1.0)}), "was fed", "(1, 4, 4, 2)");
}

}  // namespace
