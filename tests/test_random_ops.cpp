// Random ops as the engine sees them: nothing but their record (OpDef::random) tells Function to
// advance their counter on every call and a loop's reverse pass to reuse the forward draws.
// K::random_binomial is registered only through that record (no list names it), so these tests
// fail if either fact is lost. Also its values (Keras 2.2.4: where(uniform <= p, 1, 0)).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ktape/ktape.hpp"

namespace {

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;
using V = std::vector<Tensor>;

std::int64_t count_ones(const NDArray& a) {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a.item(i) == 0.0 || a.item(i) == 1.0) << "element " << i << " = " << a.item(i);
    n += a.item(i) == 1.0 ? 1 : 0;
  }
  return n;
}

TEST(RandomBinomial, ValuesAreZeroOrOneWithProbabilityP) {
  for (double p : {0.1, 0.5, 0.9}) {
    const NDArray v = K::eval(K::random_binomial({20000}, p, {.seed = 5}));
    EXPECT_EQ(v.dtype(), DType::float32);
    EXPECT_EQ(v.shape(), Shape({20000}));
    // Binomial(20000, p): the standard deviation of the fraction is at most 0.0036.
    EXPECT_NEAR(static_cast<double>(count_ones(v)) / 20000.0, p, 0.02) << "p = " << p;
  }
}

TEST(RandomBinomial, BoundsOfPAndDtype) {
  EXPECT_EQ(count_ones(K::eval(K::random_binomial({1000}, 0.0, {.seed = 1}))), 0);
  EXPECT_EQ(count_ones(K::eval(K::random_binomial({1000}, -1.0, {.seed = 1}))), 0);
  EXPECT_EQ(count_ones(K::eval(K::random_binomial({1000}, 1.0, {.seed = 1}))), 1000);
  const NDArray d = K::eval(K::random_binomial({2, 3}, 0.5, {.dtype = "float64", .seed = 2}));
  EXPECT_EQ(d.dtype(), DType::float64);
  EXPECT_EQ(d.shape(), Shape({2, 3}));
}

TEST(RandomBinomial, Errors) {
  EXPECT_THROW(K::random_binomial({3}, 0.5, {.dtype = "int32"}), ktape::TypeError);
  EXPECT_THROW(K::random_binomial({K::None}, 0.5), ktape::ValueError);
  EXPECT_THROW(K::random_binomial({-2}, 0.5), ktape::ValueError);
  EXPECT_THROW(K::random_binomial({3}, std::numeric_limits<double>::quiet_NaN()),
               ktape::ValueError);
  try {
    K::random_binomial({3}, 0.5, {.dtype = "int32"});
  } catch (const ktape::TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("K::random_binomial"), std::string::npos) << e.what();
  }
}

TEST(RandomBinomial, EveryCallDrawsAgainAndASeedRepeatsTheSequence) {
  auto sequence = [](const std::string& backend) {
    auto r = K::random_binomial({500}, 0.5, {.seed = 77});
    auto f = K::function({}, {r}, {}, {.backend = backend});
    std::vector<NDArray> out;
    for (int call = 0; call < 3; ++call) out.push_back(f({})[0]);
    return out;
  };
  const auto cpu = sequence("cpu");
  const auto ref = sequence("reference");
  for (int call = 0; call < 3; ++call) {
    // The same seed gives the same bits on both backends, call for call.
    for (std::int64_t i = 0; i < 500; ++i) ASSERT_EQ(cpu[call].item(i), ref[call].item(i));
  }
  // Each call draws fresh values: two calls of 500 fair coins agree nowhere near everywhere.
  std::int64_t same = 0;
  for (std::int64_t i = 0; i < 500; ++i) same += cpu[0].item(i) == cpu[1].item(i) ? 1 : 0;
  EXPECT_LT(same, 350);
  EXPECT_GT(same, 150);
}

TEST(RandomBinomial, ALoopsReversePassReusesTheForwardDraws) {
  // y = e * mask * w per element, in a map_fn body: d sum(y) / dw == sum(y) / w exactly only if
  // the reverse scan multiplies by the very masks the forward scan drew.
  auto x = K::placeholder({5, 64}, {.dtype = "float64"});
  auto w = K::variable(NDArray::from_values({1.25}, Shape{}, DType::float64), {.dtype = "float64"});
  auto y = K::map_fn(
      [&](const Tensor& e) {
        return e * K::random_binomial({64}, 0.5, {.dtype = "float64", .seed = 11}) * w;
      },
      x);
  auto loss = K::sum(y);
  auto f = K::function({x}, {loss, K::gradients(loss, {w})[0]});
  NDArray xv(Shape{5, 64}, DType::float64);
  for (std::int64_t i = 0; i < xv.size(); ++i) xv.set_item(i, 1.0 + 0.01 * static_cast<double>(i));
  double previous = 0;
  for (int call = 0; call < 3; ++call) {
    auto out = f({xv});
    EXPECT_NEAR(out[1].item(0), out[0].item(0) / 1.25, 1e-12) << "call " << call;
    EXPECT_NE(out[0].item(0), previous) << "call " << call << " drew the same masks again";
    previous = out[0].item(0);
  }
}

}  // namespace
