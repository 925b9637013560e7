// Bad input never corrupts memory or results: update values checked against their variable on
// every signature, size overflow and unsatisfiable allocations, wrong acceptances, and integer
// kernels with defined results (wrap-around arithmetic, saturating float -> int casts).
// Expected values are worked by hand (two's-complement wrap-around, saturation limits).
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "ktape/ktape.hpp"
#include "test_util.hpp"

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;

namespace {

using ktape::testing_util::error_of;

class Backends : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { K::clear_session(); }
  K::FunctionOptions opts() const { return {.backend = GetParam()}; }
};

}  // namespace

// ---- 1. updates whose new value has an unknown dim -------------------------------------------

TEST_P(Backends, UpdateWithUnknownDimIsCheckedAtCallTime) {
  auto W = K::variable(NDArray::full({100000}, 0.0), {.name = "W"});
  auto x = K::placeholder({K::None});
  auto f = K::function({x}, {}, {K::update(W, x)}, opts());
  const std::string m = error_of<ktape::ValueError>([&] { f({NDArray::full({1}, 7.0)}); });
  EXPECT_HAS(m, "'W'");
  EXPECT_HAS(m, "(100000,)");
  EXPECT_HAS(m, "(1,)");
  EXPECT_EQ(K::get_value(W).item(0), 0.0);  // untouched
  EXPECT_EQ(K::get_value(W).item(99999), 0.0);
  // The right length still works, and a wrong one after it is still refused.
  f({NDArray::full({100000}, 2.0)});
  EXPECT_EQ(K::get_value(W).item(99999), 2.0);
  EXPECT_HAS(error_of<ktape::ValueError>([&] { f({NDArray::full({3}, 1.0)}); }), "(3,)");
  EXPECT_EQ(K::get_value(W).item(0), 2.0);
}

TEST_P(Backends, UpdateLongerOrReshapedValueIsRefused) {
  auto W = K::variable(NDArray::from_values({1, 2}, Shape{2}), {.name = "W2"});
  auto x = K::placeholder({K::None});
  auto f = K::function({x}, {}, {K::update(W, x)}, opts());
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               f({NDArray::from_values({5, 6, 7}, Shape{3})});
             }),
             "(3,)");
  EXPECT_EQ(K::get_value(W).to_vector(), (std::vector<double>{1, 2}));

  auto M = K::variable(NDArray::full({2, 2}, 1.0), {.name = "M"});
  auto y = K::placeholder({K::None, K::None});
  auto g = K::function({y}, {}, {K::update(M, y)}, opts());
  const std::string m = error_of<ktape::ValueError>([&] { g({NDArray::full({4, 1}, 3.0)}); });
  EXPECT_HAS(m, "(2, 2)");
  EXPECT_HAS(m, "(4, 1)");
  EXPECT_EQ(K::get_value(M).item(3), 1.0);
}

TEST_P(Backends, UpdateAddRefusesBroadcastIncrements) {
  // TF's assign_add requires the increment to have the variable's shape.
  auto W = K::variable(NDArray::from_values({1, 2}, Shape{2}), {.name = "Wa"});
  auto x = K::placeholder({K::None});
  auto f = K::function({x}, {}, {K::update_add(W, x)}, opts());
  const std::string m = error_of<ktape::ValueError>([&] { f({NDArray::full({1}, 5.0)}); });
  EXPECT_HAS(m, "K::update_add");
  EXPECT_HAS(m, "'Wa'");
  EXPECT_HAS(m, "(1,)");
  EXPECT_EQ(K::get_value(W).to_vector(), (std::vector<double>{1, 2}));
  f({NDArray::from_values({10, 20}, Shape{2})});
  EXPECT_EQ(K::get_value(W).to_vector(), (std::vector<double>{11, 22}));

  auto s = K::placeholder({K::None});
  auto g = K::function({s}, {}, {K::update_sub(W, s)}, opts());
  EXPECT_HAS(error_of<ktape::ValueError>([&] { g({NDArray::full({1}, 5.0)}); }), "K::update_sub");
  // Statically known mismatches fail when the update is built.
  EXPECT_HAS(
      error_of<ktape::ValueError>([&] { K::update_add(W, K::constant(NDArray::full({1}, 1.0))); }),
      "(1,)");
  // moving_average_update broadcasts its value, as TF's assign_moving_average does.
  EXPECT_NO_THROW(K::moving_average_update(W, K::constant(NDArray::full({1}, 1.0)), 0.9));
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               K::moving_average_update(W, K::constant(NDArray::full({2, 2}, 1.0)), 0.9);
             }),
             "(2, 2)");
}

INSTANTIATE_TEST_SUITE_P(Safety, Backends, ::testing::Values("cpu", "reference"),
                         [](const auto& info) { return std::string(info.param); });

// ---- 2. sizes ---------------------------------------------------------------------------------

TEST(Sizes, OverflowingShapesAreValueErrors) {
  const std::int64_t big = std::int64_t{1} << 40;
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               NDArray(Shape{big, big}, DType::float32);
             }),
             "(1099511627776, 1099511627776)");
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               (void)Shape({big, big}).num_elements();
             }),
             "1099511627776");
  // 2^61 float64 elements are 2^64 bytes: the element count fits, the byte count does not.
  EXPECT_HAS(
      error_of<ktape::ValueError>([&] { K::zeros({std::int64_t{1} << 61}, {.dtype = "float64"}); }),
      "(2305843009213693952,)");
  EXPECT_HAS(error_of<ktape::ValueError>([&] { NDArray::full({std::int64_t{1} << 62}, 1); }),
             "(4611686018427387904,)");
}

TEST(Sizes, UnsatisfiableAllocationIsResourceExhausted) {
  // 2^50 bytes (1 PiB): a valid size no machine can give.
  const std::string m = error_of<ktape::ResourceExhaustedError>(
      [&] { NDArray(Shape{std::int64_t{1} << 48}, DType::float32); });
  EXPECT_HAS(m, "1125899906842624 bytes");
}

TEST(Sizes, ComputedShapesThatOverflowFailAtCompile) {
  // Empty inputs whose product is enormous: (2^40, 0) . (0, 2^40).
  K::clear_session();
  auto a = K::placeholder({K::None, K::None});
  auto b = K::placeholder({K::None, K::None});
  auto f = K::function({a, b}, {K::dot(a, b)});
  const std::int64_t big = std::int64_t{1} << 40;
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               f({NDArray(Shape{big, 0}, DType::float32), NDArray(Shape{0, big}, DType::float32)});
             }),
             "(1099511627776, 1099511627776)");
  // 2^31 x 2^31 float32 elements: the count fits in int64, the bytes do not.
  const std::int64_t b31 = std::int64_t{1} << 31;
  EXPECT_NE(error_of<ktape::ValueError>([&] {
              f({NDArray(Shape{b31, 0}, DType::float32), NDArray(Shape{0, b31}, DType::float32)});
            }),
            "");
  // 2^20 x 2^20 float32: 4 TiB, a valid size that cannot be allocated.
  const std::int64_t b20 = std::int64_t{1} << 20;
  EXPECT_HAS(error_of<ktape::ResourceExhaustedError>([&] {
               f({NDArray(Shape{b20, 0}, DType::float32), NDArray(Shape{0, b20}, DType::float32)});
             }),
             "bytes");
  // The function still works afterwards.
  auto r = f({NDArray::full({1, 2}, 1.0), NDArray::full({2, 1}, 3.0)});
  EXPECT_EQ(r[0].item(0), 6.0);
}

TEST(Sizes, EvaluatingHugeTensorsIsAnErrorNotACrash) {
  K::clear_session();
  // Static shapes may be as large as the dims allow; evaluating them must fail cleanly.
  EXPECT_NE(error_of<ktape::ValueError>([&] {
              K::eval(K::random_uniform({std::int64_t{1} << 62, 4}));
            }),
            "");
  EXPECT_HAS(error_of<ktape::ResourceExhaustedError>(
                 [&] { K::eval(K::random_uniform({std::int64_t{1} << 40})); }),
             "4398046511104 bytes");
  auto x = K::placeholder({K::None});
  auto f = K::function({x}, {K::one_hot(K::cast(x, "int32"), 1 << 30)});
  EXPECT_NE(error_of<ktape::ResourceExhaustedError>(
                [&] { f({NDArray::full({std::int64_t{1} << 20}, 1.0)}); }),
            "");
}

// ---- 4. wrong acceptances ---------------------------------------------------------------------

TEST(Acceptance, GradientWithRespectToIntegerVariableIsNull) {
  K::clear_session();
  auto w = K::variable(NDArray::from_values({1, 2}, Shape{2}, DType::int32), {.dtype = "int32"});
  auto v = K::variable(NDArray::from_values({1, 2}, Shape{2}));
  auto loss = K::sum(K::cast(w, "float32") * v);
  auto g = K::gradients(loss, {w, v});
  EXPECT_FALSE(g[0].defined());
  ASSERT_TRUE(g[1].defined());
  EXPECT_EQ(K::eval(g[1]).to_vector(), (std::vector<double>{1, 2}));
  // An integer loss has no gradient at all.
  auto gi = K::gradients(K::sum(w), {w});
  EXPECT_FALSE(gi[0].defined());
}

TEST(Acceptance, UpdateOfAConstantIsATypeError) {
  K::clear_session();
  auto c = K::constant(NDArray::from_values({1, 2}, Shape{2}));
  auto v = K::constant(NDArray::from_values({3, 4}, Shape{2}));
  EXPECT_HAS(error_of<ktape::TypeError>([&] { K::update(c, v); }), "must be a variable");
  EXPECT_HAS(error_of<ktape::TypeError>([&] { K::update_add(c, v); }), "must be a variable");
  {
    ktape::EagerScope eager;
    auto ce = K::constant(NDArray::from_values({1, 2}, Shape{2}));
    EXPECT_HAS(error_of<ktape::TypeError>([&] { K::update(ce, v); }), "must be a variable");
  }
  auto p = K::placeholder({2});
  EXPECT_HAS(error_of<ktape::TypeError>([&] { K::update(p, v); }), "must be a variable");
  auto w = K::variable(NDArray::from_values({1, 2}, Shape{2}));
  EXPECT_HAS(error_of<ktape::TypeError>([&] { K::update(w * 1.0, v); }), "must be a variable");
}

TEST(Acceptance, RnnMaskTimeDimensionMustMatchInputs) {
  K::clear_session();
  auto x = K::placeholder({2, 5, 3});
  auto h0 = K::zeros({2, 4});
  auto W = K::variable(NDArray::full({3, 4}, 0.1));
  auto step = [&](const Tensor& xt,
                  const std::vector<Tensor>& s) -> std::pair<Tensor, std::vector<Tensor>> {
    Tensor h = K::tanh(K::dot(xt, W) + s[0]);
    return {h, {h}};
  };
  auto mask = K::placeholder({2, 4});
  const std::string m = error_of<ktape::ValueError>([&] { K::rnn(step, x, {h0}, {.mask = mask}); });
  EXPECT_HAS(m, "mask");
  EXPECT_HAS(m, "(2, 4)");
  EXPECT_HAS(m, "(2, 5, 3)");
  EXPECT_NE(
      error_of<ktape::ValueError>([&] { K::rnn(step, x, {h0}, {.mask = mask, .unroll = true}); }),
      "");
  // time_major: the mask is (time, samples).
  auto xt = K::placeholder({5, 2, 3});
  EXPECT_NE(error_of<ktape::ValueError>([&] {
              K::rnn(step, xt, {h0}, {.mask = K::placeholder({4, 2}), .time_major = true});
            }),
            "");
  // A batch mismatch too.
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               K::rnn(step, x, {h0}, {.mask = K::placeholder({3, 5})});
             }),
             "(3, 5)");
  // Unknown dims are checked when the shapes are fed.
  auto xu = K::placeholder({2, K::None, 3});
  auto mu = K::placeholder({2, K::None});
  auto r = K::rnn(step, xu, {h0}, {.mask = mu});
  auto f = K::function({xu, mu}, {r.last_output});
  EXPECT_NE(error_of<ktape::ValueError>([&] {
              f({NDArray::full({2, 5, 3}, 1.0), NDArray::full({2, 4}, 1.0, DType::float32)});
            }),
            "");
  EXPECT_NO_THROW(f({NDArray::full({2, 5, 3}, 1.0), NDArray::full({2, 5}, 1.0)}));
}

// ---- 5. integer kernels -----------------------------------------------------------------------

namespace {
NDArray i32(std::vector<std::int32_t> v) {
  const auto n = static_cast<std::int64_t>(v.size());
  return NDArray::from_vector<std::int32_t>(v, Shape{n});
}
std::vector<std::int32_t> ints(const NDArray& a) {
  std::vector<std::int32_t> r(a.data<std::int32_t>(), a.data<std::int32_t>() + a.size());
  return r;
}
}  // namespace

TEST_P(Backends, IntegerArithmeticWrapsAround) {
  const std::int32_t mx = INT_MAX, mn = INT_MIN;
  auto x = K::placeholder({K::None}, {.dtype = "int32"});
  auto y = K::placeholder({K::None}, {.dtype = "int32"});
  auto f = K::function({x, y},
                       {K::sum(x), K::abs(x), -x, x + y, x - y, x * y, K::square(x),
                        K::sum(K::reshape(x, {1, -1}), 0)},
                       {}, opts());
  auto r = f({i32({mx, 1, mn, -1}), i32({1, mx, -1, mn})});
  // sum: INT_MAX + 1 + INT_MIN - 1 = -1 (mod 2^32); intermediate INT_MAX + 1 wraps.
  EXPECT_EQ(ints(r[0]), (std::vector<std::int32_t>{-1}));
  EXPECT_EQ(ints(r[1]), (std::vector<std::int32_t>{mx, 1, mn, 1}));    // |INT_MIN| = INT_MIN
  EXPECT_EQ(ints(r[2]), (std::vector<std::int32_t>{-mx, -1, mn, 1}));  // -INT_MIN = INT_MIN
  EXPECT_EQ(ints(r[3]), (std::vector<std::int32_t>{mn, mn, mx, mx}));
  EXPECT_EQ(ints(r[4]), (std::vector<std::int32_t>{mx - 1, mn + 2, mn + 1, mx}));
  // INT_MAX * 1, 1 * INT_MAX, INT_MIN * -1 = INT_MIN, -1 * INT_MIN = INT_MIN
  EXPECT_EQ(ints(r[5]), (std::vector<std::int32_t>{mx, mx, mn, mn}));
  // INT_MAX^2 = 2^62 - 2^32 + 1 -> 1 (mod 2^32); INT_MIN^2 = 2^62 -> 0
  EXPECT_EQ(ints(r[6]), (std::vector<std::int32_t>{1, 1, 0, 1}));
  EXPECT_EQ(ints(r[7]), (std::vector<std::int32_t>{mx, 1, mn, -1}));
  // Two big elements summed over an axis of a matrix, and an int32 matmul.
  auto s = K::function(
      {x}, {K::sum(K::reshape(x, {2, 2}), 1), K::dot(K::reshape(x, {2, 2}), K::reshape(x, {2, 2}))},
      {}, opts());
  auto r2 = s({i32({mx, mx, 2, 3})});
  EXPECT_EQ(ints(r2[0]), (std::vector<std::int32_t>{-2, 5}));
  // [[M, M], [2, 3]]^2 = [[M*M + 2M, M*M + 3M], [2M + 6, 2M + 9]] mod 2^32, M = 2^31 - 1:
  // M*M = 1 (mod 2^32), 2M = -2, 3M = 2^31 - 3 -> INT_MAX - 2.
  EXPECT_EQ(ints(r2[1]), (std::vector<std::int32_t>{-1, mx - 1, 4, 7}));
}

TEST_P(Backends, FloatToIntCastSaturatesAndMapsNaNToZero) {
  // ktape's documented choice: NaN -> 0, values beyond the target range -> its min / max,
  // others truncate toward zero.
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto x = K::placeholder({K::None}, {.dtype = "float32"});
  auto f = K::function(
      {x}, {K::cast(x, "int32"), K::cast(x, "uint8"), K::cast(x, "int64"), K::cast(x, "int8")}, {},
      opts());
  auto r = f({NDArray::from_values({nan, inf, -inf, 3e9, -3e9, 2.9, -2.9, 300, -1}, Shape{9})});
  EXPECT_EQ(ints(r[0]),
            (std::vector<std::int32_t>{0, INT_MAX, INT_MIN, INT_MAX, INT_MIN, 2, -2, 300, -1}));
  EXPECT_EQ(r[1].to_vector(), (std::vector<double>{0, 255, 0, 255, 0, 2, 0, 255, 0}));
  EXPECT_EQ(r[2].to_vector()[1], 9223372036854775807.0);
  EXPECT_EQ(r[2].data<std::int64_t>()[1], std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(r[2].data<std::int64_t>()[2], std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(r[3].to_vector(), (std::vector<double>{0, 127, -128, 127, -128, 2, -2, 127, -1}));
}

TEST(IntegerValues, NDArrayFromDoublesSaturates) {
  auto a = NDArray::from_values({std::nan(""), 1e20, -1e20, 5.5}, Shape{4}, DType::int32);
  EXPECT_EQ(ints(a), (std::vector<std::int32_t>{0, INT_MAX, INT_MIN, 5}));
  auto b = NDArray::full({2}, 1e300, DType::int64);
  EXPECT_EQ(b.data<std::int64_t>()[0], std::numeric_limits<std::int64_t>::max());
  // Clip with bounds beyond the integer range keeps the values.
  K::clear_session();
  auto c =
      K::eval(K::clip(K::constant(i32({INT_MIN, 0, INT_MAX}), {.dtype = "int32"}), -1e12, 1e12));
  EXPECT_EQ(ints(c), (std::vector<std::int32_t>{INT_MIN, 0, INT_MAX}));
  // Float labels through sparse_categorical_crossentropy: NaN is an out-of-range target.
  auto t = K::constant(NDArray::from_values({std::nan("")}, Shape{1}));
  auto o = K::constant(NDArray::from_values({0.5, 0.5}, Shape{1, 2}));
  EXPECT_NE(error_of<ktape::ValueError>([&] { K::eval(K::sparse_categorical_crossentropy(t, o)); }),
            "");
}

// ---- ranks and failed calls ---------------------------------------------------------------------

TEST(Ranks, AboveTheMaximumRankIsAValueError) {
  K::clear_session();
  std::vector<std::int64_t> dims(ktape::kMaxRank + 1, 1);
  const std::string m = error_of<ktape::ValueError>([&] { K::placeholder(Shape(dims)); });
  EXPECT_HAS(m, "rank 13");
  EXPECT_HAS(m, "up to 12");
  EXPECT_NE(error_of<ktape::ValueError>([&] { K::variable(NDArray(Shape(dims), DType::float32)); }),
            "");
  dims.pop_back();
  auto x = K::placeholder(Shape(dims));
  EXPECT_HAS(error_of<ktape::ValueError>([&] { K::expand_dims(x); }), "rank 13");
  auto f = K::function({x}, {K::sum(x * 2.0)});  // rank 12 works
  EXPECT_EQ(f({NDArray::full(Shape(dims), 1.5)})[0].item(), 3.0);
}

TEST_P(Backends, ACallThatFailsLeavesEveryVariableAsItWas) {
  // V's update is an elementwise pass that runs before the loss kernel, which throws on a label
  // out of range: V must not have been written in place.
  auto V = K::variable(NDArray::from_values({1, 2}, Shape{2}), {.name = "V"});
  auto t = K::placeholder({K::None}, {.dtype = "int32"});
  auto z = K::placeholder({K::None, 3});
  auto new_v = V + 1.0;
  auto loss = K::mean(K::sparse_categorical_crossentropy(t, K::softmax(z)));
  auto f = K::function({t, z}, {loss}, {K::update(V, new_v)}, opts());
  const NDArray logits = NDArray::full({2, 3}, 0.5);
  EXPECT_HAS(error_of<ktape::ValueError>([&] {
               f({NDArray::from_vector<std::int32_t>({0, 3}, Shape{2}), logits});
             }),
             "out of range");
  EXPECT_EQ(K::get_value(V).to_vector(), (std::vector<double>{1, 2}));
  f({NDArray::from_vector<std::int32_t>({0, 2}, Shape{2}), logits});
  EXPECT_EQ(K::get_value(V).to_vector(), (std::vector<double>{2, 3}));
}

// argmax/argmin over an empty axis: a ValueError when the node is built from a known shape and
// when a Function is fed one (the reference's kernel would read the first element of nothing).
TEST(Acceptance, ArgOfAnEmptyAxisIsAValueError) {
  EXPECT_THROW((void)K::argmax(K::zeros({2, 0})), ktape::ValueError);
  auto x = K::placeholder({K::None, K::None});
  for (const std::string backend : {"cpu", "reference"}) {
    auto f = K::function({x}, {K::argmin(x, 1)}, {}, {.backend = backend});
    try {
      (void)f({NDArray(Shape{3, 0}, DType::float32)});
      ADD_FAILURE() << backend << ": no error";
    } catch (const ktape::ValueError& e) {
      EXPECT_NE(
          std::string(e.what()).find("K::argmin: axis 1 of a tensor of shape (3, 0) is empty"),
          std::string::npos)
          << e.what();
    }
    EXPECT_EQ(f({NDArray::full(Shape{3, 1}, 1.0)})[0].shape(), Shape{3});  // still usable
  }
}
