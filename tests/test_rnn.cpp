// K::rnn, map_fn, foldl, foldr on the Scan op: the symbolic loop equals the unrolled graph
// (forward and gradients) for SimpleRNN, LSTM and GRU steps under every option; float64
// gradchecks; second order through a 2-step scan; masking against hand-computed values; errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <string>

#include "ktape/ktape.hpp"
#include "ops/kernels/cpu/gemm.hpp"
#include "test_util.hpp"

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;
using V = std::vector<Tensor>;

namespace {

NDArray rnd(const Shape& s, std::uint64_t seed, double scale = 0.5) {
  NDArray a(s, DType::float64);
  std::uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    a.set_item(i, scale * (static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0));
  }
  return a;
}

using ktape::testing_util::error_of;

void expect_close(const NDArray& a, const NDArray& b, double tol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (std::int64_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a.item(i), b.item(i), tol * (1 + std::abs(b.item(i)))) << what << " @" << i;
}

class Float64 : public ::testing::Test {
 protected:
  void SetUp() override {
    K::clear_session();
    K::set_floatx("float64");
  }
  void TearDown() override { K::set_floatx("float32"); }
};

// Cells written as step functions. `w` = {W, U, b} (SimpleRNN), {W, U, b} with 4H / 3H columns.
K::StepFunction simple_rnn(const V& w, bool relu = false) {
  return [w, relu](const Tensor& x, const V& s) -> std::pair<Tensor, V> {
    const Tensor z = K::dot(x, w[0]) + K::dot(s[0], w[1]) + w[2];
    Tensor h = relu ? K::relu(z) : K::tanh(z);  // relu's gradient reads h
    return {h, {h}};
  };
}
K::StepFunction lstm(const V& w, std::int64_t H) {
  return [w, H](const Tensor& x, const V& s) -> std::pair<Tensor, V> {
    Tensor z = K::dot(x, w[0]) + K::dot(s[0], w[1]) + w[2];
    auto part = [&](int k) { return K::slice(z, {0, k * H}, {-1, H}); };
    Tensor i = K::sigmoid(part(0)), f = K::sigmoid(part(1)), g = K::tanh(part(2)),
           o = K::sigmoid(part(3));
    Tensor c = f * s[1] + i * g;
    Tensor h = o * K::tanh(c);
    return {h, {h, c}};
  };
}
K::StepFunction gru(const V& w, std::int64_t H) {
  return [w, H](const Tensor& x, const V& s) -> std::pair<Tensor, V> {
    Tensor xz = K::dot(x, w[0]) + w[2];
    Tensor hz = K::dot(s[0], w[1]);
    auto col = [&](const Tensor& t, int k) { return K::slice(t, {0, k * H}, {-1, H}); };
    Tensor z = K::sigmoid(col(xz, 0) + col(hz, 0));
    Tensor r = K::sigmoid(col(xz, 1) + col(hz, 1));
    Tensor hh = K::tanh(col(xz, 2) + r * col(hz, 2));
    Tensor h = z * s[0] + (1.0 - z) * hh;
    return {h, {h}};
  };
}

struct Case {
  std::string cell;
  bool mask = false, backwards = false, constants = false, time_major = false, zero_out = false;
};

// "lstm_mask_backwards": the cell and the options that are on (the test name).
std::string name_of(const Case& c) {
  return c.cell + (c.mask ? "_mask" : "") + (c.backwards ? "_backwards" : "") +
         (c.constants ? "_constants" : "") + (c.time_major ? "_timemajor" : "") +
         (c.zero_out ? "_zeroout" : "");
}
void PrintTo(const Case& c, std::ostream* os) { *os << name_of(c); }

// Builds the rnn on placeholders [x, h0, (c0), W, U, b, (mask), (const)] and returns a scalar
// loss over every result, so gradients reach every input.
Tensor build(const Case& c, const V& in, bool unroll) {
  const std::int64_t H = 3;
  V w{in[2], in[3], in[4]};
  K::StepFunction cell;
  std::size_t n_states = 1;
  if (c.cell == "simple") cell = simple_rnn(w);
  if (c.cell == "simple_relu") cell = simple_rnn(w, true);
  if (c.cell == "lstm") cell = lstm(w, H), n_states = 2;
  if (c.cell == "gru") cell = gru(w, H);
  V init{in[1]};
  if (n_states == 2) init.push_back(in[1] * 0.5);
  K::RnnOptions o{.go_backwards = c.backwards,
                  .unroll = unroll,
                  .time_major = c.time_major,
                  .zero_output_for_mask = c.zero_out};
  std::size_t k = 5;
  if (c.mask) o.mask = in[k++];
  K::StepFunction step = cell;
  if (c.constants) {
    o.constants = {in[k++]};
    step = [cell, n_states](const Tensor& x, const V& s) {
      V states(s.begin(), s.begin() + static_cast<long>(n_states));
      return cell(x * s.back(), states);  // the constant scales the input
    };
  }
  auto r = K::rnn(step, in[0], init, o);
  Tensor loss = K::sum(K::square(r.outputs)) + K::sum(r.last_output * 0.7);
  for (const auto& s : r.new_states) loss = loss + K::sum(s * 1.3);
  return loss;
}

std::vector<NDArray> data(const Case& c) {
  const std::int64_t B = 2, T = 4, F = 2, H = 3;
  const std::int64_t G = c.cell == "lstm" ? 4 * H : c.cell == "gru" ? 3 * H : H;
  std::vector<NDArray> d{rnd(c.time_major ? Shape{T, B, F} : Shape{B, T, F}, 1, 1.0),
                         rnd(Shape{B, H}, 2), rnd(Shape{F, G}, 3), rnd(Shape{H, G}, 4),
                         rnd(Shape{G}, 5)};
  if (c.mask) {
    NDArray m(Shape{B, T}, DType::float64);
    const double mv[] = {1, 0, 1, 1, 0, 1, 1, 0};  // sample 1 starts masked, ends masked
    for (int i = 0; i < 8; ++i) m.set_item(i, mv[i]);
    if (c.time_major) {
      NDArray mt(Shape{T, B}, DType::float64);
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) mt.set_item(t * B + b, mv[b * T + t]);
      m = mt;
    }
    d.push_back(m);
  }
  if (c.constants) d.push_back(rnd(Shape{B, F}, 6, 1.0));
  return d;
}

std::vector<NDArray> run(const Case& c, bool unroll) {
  auto d = data(c);
  V ph;
  for (auto& a : d) ph.push_back(K::placeholder(a.shape(), {.dtype = "float64"}));
  Tensor loss = build(c, ph, unroll);
  V wrt(ph.begin(), ph.begin() + 5);
  auto g = K::gradients(loss, wrt);
  V outs{loss};
  outs.insert(outs.end(), g.begin(), g.end());
  return K::function(ph, outs)(d);
}

}  // namespace

class RnnEquivalence : public Float64, public ::testing::WithParamInterface<Case> {};

TEST_P(RnnEquivalence, SymbolicLoopEqualsUnrolledGraph) {
  const Case c = GetParam();
  auto sym = run(c, false);
  auto unr = run(c, true);
  const char* names[] = {"loss", "d/dx", "d/dh0", "d/dW", "d/dU", "d/db"};
  for (std::size_t i = 0; i < sym.size(); ++i) expect_close(sym[i], unr[i], 1e-12, names[i]);
}

TEST_P(RnnEquivalence, GradcheckSymbolic) {
  const Case c = GetParam();
  auto d = data(c);
  std::vector<NDArray> diff(d.begin(), d.begin() + 5);
  std::vector<NDArray> fixed(d.begin() + 5, d.end());
  auto r = ktape::gradcheck(
      [&](const V& x) {
        V in = x;
        for (auto& f : fixed) in.push_back(K::constant(f, {.dtype = "float64"}));
        return build(c, in, false);
      },
      diff);
  EXPECT_TRUE(r.ok) << r.report;
}

INSTANTIATE_TEST_SUITE_P(Cells, RnnEquivalence,
                         ::testing::Values(Case{"simple"}, Case{"lstm"}, Case{"gru"},
                                           Case{"simple", true}, Case{"lstm", true},
                                           Case{"gru", true, true}, Case{"simple", false, true},
                                           Case{"lstm", false, false, true},
                                           Case{"gru", false, false, false, true},
                                           Case{"lstm", true, true, true, true},
                                           Case{"simple", true, false, false, false, true},
                                           Case{"gru", true, true, false, true, true},
                                           Case{"simple_relu"}, Case{"simple_relu", true}),
                         [](const auto& info) { return name_of(info.param); });

// A running sum (output = state = h + x) with a mask, by hand:
// x = [1, 2, 3, 4], mask = [1, 0, 1, 0]: states 1, 1, 4, 4; outputs 1, 1, 4, 4 (repeat previous),
// with zero_output_for_mask: 1, 0, 4, 0 and last_output 0.
TEST_F(Float64, MaskingSemanticsByHand) {
  NDArray x = NDArray::from_values({1.0, 2.0, 3.0, 4.0}, Shape{1, 4, 1}, DType::float64);
  NDArray m = NDArray::from_values({1.0, 0.0, 1.0, 0.0}, Shape{1, 4}, DType::float64);
  auto step = [](const Tensor& xt, const V& s) -> std::pair<Tensor, V> {
    Tensor h = s[0] + xt;
    return {h, {h}};
  };
  for (bool unroll : {false, true}) {
    for (bool zero : {false, true}) {
      auto xp = K::placeholder({1, 4, 1}, {.dtype = "float64"});
      auto mp = K::placeholder({1, 4}, {.dtype = "float64"});
      auto r = K::rnn(step, xp, {K::zeros_like(K::sum(xp, 1))},
                      {.mask = mp, .unroll = unroll, .zero_output_for_mask = zero});
      auto out = K::function({xp, mp}, {r.outputs, r.last_output, r.new_states[0]})({x, m});
      const std::vector<double> want =
          zero ? std::vector<double>{1, 0, 4, 0} : std::vector<double>{1, 1, 4, 4};
      for (int t = 0; t < 4; ++t) EXPECT_EQ(out[0].item(t), want[static_cast<std::size_t>(t)]);
      EXPECT_EQ(out[1].item(0), want[3]);
      EXPECT_EQ(out[2].item(0), 4.0);  // the state is kept through masked steps
    }
  }
}

TEST_F(Float64, GoBackwardsOutputsInIterationOrder) {
  // Running sum over [1, 2, 3] backwards: 3, 5, 6 (outputs[:, 0] is the last input step).
  NDArray x = NDArray::from_values({1.0, 2.0, 3.0}, Shape{1, 3, 1}, DType::float64);
  auto xp = K::placeholder({1, K::None, 1}, {.dtype = "float64"});
  auto r = K::rnn(
      [](const Tensor& xt, const V& s) -> std::pair<Tensor, V> {
        return {s[0] + xt, {s[0] + xt}};
      },
      xp, {K::zeros_like(K::sum(xp, 1))}, {.go_backwards = true});
  auto out = K::function({xp}, {r.outputs, r.last_output})({x});
  EXPECT_EQ(out[0].item(0), 3.0);
  EXPECT_EQ(out[0].item(1), 5.0);
  EXPECT_EQ(out[0].item(2), 6.0);
  EXPECT_EQ(out[1].item(0), 6.0);
}

TEST_F(Float64, UnknownTimeDimensionRunsThroughOneFunction) {
  auto xp = K::placeholder({K::None, K::None, 2}, {.dtype = "float64"});
  auto W = K::variable(rnd(Shape{2, 3}, 7), {.dtype = "float64"});
  auto U = K::variable(rnd(Shape{3, 3}, 8), {.dtype = "float64"});
  auto b = K::variable(rnd(Shape{3}, 9), {.dtype = "float64"});
  auto h0 = K::zeros_like(K::dot(K::sum(xp, 1), W));
  auto r = K::rnn(simple_rnn({W, U, b}), xp, {h0});
  auto g = K::gradients(K::sum(r.outputs), {W, U, b});
  auto f = K::function({xp}, {r.outputs, g[0], g[1], g[2]});
  for (std::int64_t T : {1, 5, 2}) {
    auto out = f({rnd(Shape{3, T, 2}, 10 + static_cast<std::uint64_t>(T), 1.0)});
    EXPECT_EQ(out[0].shape(), (Shape{3, T, 3}));
  }
  EXPECT_EQ(f.num_plans(), 3u);
  EXPECT_EQ(error_of([&] {
              K::rnn(simple_rnn({W, U, b}), xp, {h0}, {.unroll = true});
            }),
            "K::rnn: Unrolling requires a fixed number of timesteps.");
}

TEST_F(Float64, APrintOfTheProjectionInALoopBody) {
  // A print of h.U (the projection a loop stores per step for its reverse pass) in the step
  // function: the gradients equal the unrolled graph's, and each step prints once.
  auto x = K::variable(rnd(Shape{2, 4, 2}, 31, 1.0), {.dtype = "float64"});
  auto W = K::variable(rnd(Shape{2, 3}, 32), {.dtype = "float64"});
  auto U = K::variable(rnd(Shape{3, 3}, 33), {.dtype = "float64"});
  auto step = [&](const Tensor& xt, const V& s) -> std::pair<Tensor, V> {
    Tensor h = K::tanh(K::dot(xt, W) + K::print_tensor(K::dot(s[0], U), "hU "));
    return {h, {h}};
  };
  auto h0 = K::zeros({2, 3}, {.dtype = "float64"});
  std::vector<NDArray> got, want;
  std::string loop_log;
  for (bool unroll : {false, true}) {
    auto r = K::rnn(step, x, {h0}, {.unroll = unroll});
    const auto g = K::gradients(K::sum(r.last_output), {W, U});
    auto f = K::function({}, {g[0], g[1]});
    testing::internal::CaptureStderr();
    (unroll ? want : got) = f({});
    const std::string log = testing::internal::GetCapturedStderr();
    if (!unroll) loop_log = log;
  }
  for (std::size_t i = 0; i < got.size(); ++i)
    for (std::int64_t k = 0; k < got[i].size(); ++k)
      EXPECT_NEAR(got[i].item(k), want[i].item(k), 1e-12) << i << "[" << k << "]";
  // The forward pass prints each step's h.U once (the reverse pass takes the stored values
  // and needs no print: print_tensor's gradient is the identity).
  std::size_t prints = 0;
  for (std::size_t at = loop_log.find("hU "); at != std::string::npos;
       at = loop_log.find("hU ", at + 1))
    ++prints;
  EXPECT_EQ(prints, 4u) << loop_log;
}

TEST_F(Float64, Errors) {
  auto x2 = K::placeholder({2, 3}, {.dtype = "float64"});
  auto id = [](const Tensor& xt, const V& s) -> std::pair<Tensor, V> { return {xt, s}; };
  EXPECT_NE(error_of([&] { K::rnn(id, x2, {}); }).find("Input should be at least 3D"),
            std::string::npos);
  auto x3 = K::placeholder({2, 4, 3}, {.dtype = "float64"});
  auto bad_mask = K::placeholder({2, 4, 1}, {.dtype = "float64"});
  EXPECT_NE(error_of([&] {
              K::rnn(id, x3, {}, {.mask = bad_mask});
            }).find("mask should have `shape=(samples, time)`, got (2, 4, 1)"),
            std::string::npos);
  auto h = K::placeholder({2, 3}, {.dtype = "float64"});
  auto two = [](const Tensor& xt, const V& s) -> std::pair<Tensor, V> {
    return {xt, {s[0], s[0]}};
  };
  EXPECT_NE(error_of([&] { K::rnn(two, x3, {h}); }).find("returned 2 states for 1 initial states"),
            std::string::npos);
  auto grow = [](const Tensor& xt, const V& s) -> std::pair<Tensor, V> {
    return {xt, {K::concatenate({s[0], s[0]}, -1)}};
  };
  const std::string grown = error_of([&] { K::rnn(grow, x3, {h}); });
  EXPECT_NE(grown.find("state 0 comes back as"), std::string::npos) << grown;
}

TEST_F(Float64, MapFnFoldlFoldrByHand) {
  NDArray e = NDArray::from_values({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, Shape{3, 2}, DType::float64);
  auto ep = K::placeholder({K::None, 2}, {.dtype = "float64"});
  auto sq = K::map_fn([](const Tensor& x) { return K::square(x) + 1.0; }, ep);
  auto sub = [](const Tensor& acc, const Tensor& x) { return acc * 2.0 - x; };
  auto l = K::foldl(sub, ep);  // acc = [1,2]; then 2*acc - [3,4] = [-1,0]; 2*acc - [5,6] = [-7,-6]
  auto r = K::foldl(
      sub, ep,
      {.initializer = K::constant(NDArray::from_values({0.5, 0.5}, Shape{2}, DType::float64),
                                  {.dtype = "float64"})});
  auto fr = K::foldr(sub, K::constant(e, {.dtype = "float64"}));
  auto out = K::function({ep}, {sq, l, r})({e});
  const double want_sq[] = {2, 5, 10, 17, 26, 37};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[0].item(i), want_sq[i]);
  EXPECT_EQ(out[1].item(0), -7.0);
  EXPECT_EQ(out[1].item(1), -6.0);
  // [0.5,0.5] -> 2*[0.5,0.5]-[1,2] = [0,-1] -> [-3,-6] -> [-11,-18]
  EXPECT_EQ(out[2].item(0), -11.0);
  EXPECT_EQ(out[2].item(1), -18.0);
  // foldr: acc = [5,6]; 2*[5,6]-[3,4] = [7,8]; 2*[7,8]-[1,2] = [13,14]
  auto frv = K::eval(fr);
  EXPECT_EQ(frv.item(0), 13.0);
  EXPECT_EQ(frv.item(1), 14.0);
}

TEST_F(Float64, GradcheckMapFnFoldlFoldr) {
  std::vector<NDArray> in{rnd(Shape{4, 3}, 11, 1.0), rnd(Shape{3}, 12, 1.0)};
  auto fm = ktape::gradcheck(
      [](const V& x) {
        return K::map_fn([&](const Tensor& e) { return K::tanh(e * x[1]); }, x[0]);
      },
      in);
  EXPECT_TRUE(fm.ok) << fm.report;
  auto fl = ktape::gradcheck(
      [](const V& x) {
        return K::foldl([&](const Tensor& a, const Tensor& e) { return K::tanh(a * e + x[1]); },
                        x[0], {.initializer = x[1] * 0.5});
      },
      in);
  EXPECT_TRUE(fl.ok) << fl.report;
  auto fr = ktape::gradcheck(
      [](const V& x) {
        return K::foldr([&](const Tensor& a, const Tensor& e) { return K::tanh(a) * e + a; }, x[0]);
      },
      in);
  EXPECT_TRUE(fr.ok) << fr.report;
}

TEST_F(Float64, SecondOrderThroughTwoStepScan) {
  // f(w) = sum(h_2), h_t = tanh(w * h_{t-1} + x_t): d2f/dw2 by symbolic loop vs unrolled.
  NDArray xv = NDArray::from_values({0.3, -0.4}, Shape{1, 2, 1}, DType::float64);
  NDArray wv = NDArray::from_values({0.7}, Shape{1, 1}, DType::float64);
  std::vector<double> res;
  for (bool unroll : {false, true}) {
    auto x = K::placeholder({1, 2, 1}, {.dtype = "float64"});
    auto w = K::placeholder({1, 1}, {.dtype = "float64"});
    auto h0 = K::placeholder({1, 1}, {.dtype = "float64"});
    auto r = K::rnn(
        [&](const Tensor& xt, const V& s) -> std::pair<Tensor, V> {
          Tensor h = K::tanh(K::dot(s[0], w) + xt);
          return {h, {h}};
        },
        x, {h0}, {.unroll = unroll});
    Tensor f = K::sum(r.last_output);
    Tensor g = K::gradients(f, {w})[0];
    Tensor gg = K::gradients(K::sum(g), {w})[0];
    ASSERT_TRUE(gg.defined());
    auto out = K::function(
        {x, w, h0}, {g, gg})({xv, wv, NDArray::from_values({0.5}, Shape{1, 1}, DType::float64)});
    res.push_back(out[0].item(0));
    res.push_back(out[1].item(0));
  }
  EXPECT_NEAR(res[0], res[2], 1e-12);
  EXPECT_NEAR(res[1], res[3], 1e-12);
  // By hand: h1 = tanh(0.35 + 0.3), h2 = tanh(0.7 h1 - 0.4); df/dw = (1-h2^2)(h1 + w (1-h1^2) h0).
  const double h1 = std::tanh(0.7 * 0.5 + 0.3), h2 = std::tanh(0.7 * h1 - 0.4);
  EXPECT_NEAR(res[0], (1 - h2 * h2) * (h1 + 0.7 * (1 - h1 * h1) * 0.5), 1e-12);
}

TEST_F(Float64, RandomDrawsInABodyAreTheSameInTheGradient) {
  // y = dropout(e) * w per element: d sum(y) / dw must equal sum(y) / w exactly, which holds only
  // if the reverse scan sees the forward step's masks (it must not draw again).
  auto x = K::placeholder({6, 40}, {.dtype = "float64"});
  auto w = K::variable(NDArray::from_values({1.5}, Shape{}, DType::float64), {.dtype = "float64"});
  auto y = K::map_fn([&](const Tensor& e) { return K::dropout(e, 0.5, {.seed = 3}) * w; }, x);
  auto loss = K::sum(y);
  auto f = K::function({x}, {loss, K::gradients(loss, {w})[0]});
  for (int call = 0; call < 3; ++call) {
    auto out = f({rnd(Shape{6, 40}, 20 + static_cast<std::uint64_t>(call), 1.0)});
    EXPECT_NEAR(out[1].item(0), out[0].item(0) / 1.5, 1e-12) << "call " << call;
  }
}

TEST(RnnMemory, AnEvaluationStoresNoGradientResiduals) {
  // The forward loop of an LSTM keeps, for its gradient, every step's gates and the carries h and
  // c (it once kept tanh(c) and h.U too), counted below as 10 H floats per sample and step. A
  // Function that only evaluates needs none of them. Per sample (the difference between batch 64
  // and 32, so that weights and per-call constants cancel), its arena holds the input (T F), the
  // hoisted projection x.W (T 4H), and buffers of single steps: far below T (F + 4H) + T 10 H.
  const std::int64_t T = 20, F = 8, H = 16;
  auto x = K::placeholder({K::None, T, F});
  auto W = K::random_uniform_variable({F, 4 * H}, -0.1, 0.1, {.seed = 1});
  auto U = K::random_uniform_variable({H, 4 * H}, -0.1, 0.1, {.seed = 2});
  auto b = K::zeros({4 * H});
  auto h0 = K::zeros_like(K::dot(K::sum(x, 1), K::zeros({F, H})));
  auto r = K::rnn(lstm({W, U, b}, H), x, {h0, h0});
  auto eval = K::function({x}, {r.last_output});
  auto train = K::function({x}, {K::gradients(K::sum(r.last_output), {U})[0]});
  auto per_sample = [&](const ktape::Function& f) {
    (void)f({NDArray::full(Shape{32, T, F}, 0.1)});
    const double b32 = static_cast<double>(f.arena_bytes());
    (void)f({NDArray::full(Shape{64, T, F}, 0.1)});
    return (static_cast<double>(f.arena_bytes()) - b32) / 32.0 / 4.0;  // floats per sample
  };
  const double eval_floats = per_sample(eval), train_floats = per_sample(train);
  const double needed = static_cast<double>(T * (F + 4 * H));
  const double residuals = static_cast<double>(T * 10 * H);
  EXPECT_LT(eval_floats, needed + residuals / 8) << "eval " << eval_floats;
  EXPECT_GT(train_floats, needed + residuals) << "train " << train_floats;
  // The reverse pass reads h.U (T 4H = 1,280 floats per sample) only as the shape reference of
  // its gradient's SumToLike, so the forward loop stores it for no step (OpDef::shape_only of the
  // reverse Scan): measured 6,432 floats per sample while it was stored, 5,216 since. With BLIS's
  // kernels the hoisted weight gradients (over a depth of T x batch) pack their operands into
  // arena scratch, which grows with the batch: for dU, 4H and H rows padded to whole panels
  // (64 + 24 floats per depth), T 88 = 1,760 floats per sample (measured 7,296 in all). Since
  // the stacked projection x W, which the reverse loop reads only for its dims, no longer stays
  // alive for it, and the arena places its largest buffers first, its space holds the reverse
  // loop's buffer: measured 5,808. tanh(c_t) is no longer stored (the reverse pass recomputes it
  // from c_t, which it rebuilds from the gates it reads anyway): T H = 320 floats less, measured
  // 5,488.
  // (Scratch is sized for BLIS's blocked product whenever the build has BLIS's kernels, whichever
  // library runs: a plan may be compiled before a switch.)
  const bool blis_scratch = ktape::kernels::parallel_gemm_scratch(64, 16, 100, 4) > 0;
  const double packs = blis_scratch ? static_cast<double>(T * 88) : 0.0;
  EXPECT_LT(train_floats, static_cast<double>(5808 - T * 88 - T * H / 2) + packs)
      << "train " << train_floats;
}

TEST(RnnMemory, AGradientBuiltEagerlyMatchesTheLazyOne) {
  // Built in an eager scope, the gradient evaluates the loop's flat gradient (ScanEmbed) in a
  // Function of its own, which must see the loop's full layout (no part shared or shrunk).
  auto x = K::variable(NDArray::full(Shape{2, 5, 3}, 0.1));
  auto W = K::random_uniform_variable({3, 4}, -0.5, 0.5, {.seed = 4});
  auto U = K::random_uniform_variable({4, 4}, -0.5, 0.5, {.seed = 5});
  auto b = K::zeros({4});
  auto r = K::rnn(simple_rnn({W, U, b}), x, {K::zeros({2, 4})});
  auto loss = K::sum(K::square(r.outputs));
  Tensor eager;
  {
    ktape::EagerScope scope;
    eager = K::gradients(loss, {U})[0];
  }
  const NDArray lazy = K::eval(K::gradients(loss, {U})[0]);
  const NDArray got = K::eval(eager);
  ASSERT_EQ(got.shape(), lazy.shape());
  for (std::int64_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got.item(i), lazy.item(i), 1e-6) << i;
}

namespace {

bool same_bits(const NDArray& a, const NDArray& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(),
                     static_cast<std::size_t>(a.size()) * ktape::dtype_size(a.dtype())) == 0;
}

// A loop body packs a weight it reads as a static once per run of the loop and keeps the packs
// for the run's other steps (ops/kernels/cpu/gemm.hpp, GemmKeep). A new run must pack again:
// the variable set between two calls, and a static computed from a fed scale, which sits at the
// same arena address in every call. Each call is compared bit for bit with a Function compiled
// afresh for those values, and the changed runs with the first one (they must differ).
TEST(RnnKeptPacks, AStaticChangedBetweenCallsIsPackedAgain) {
  for (const std::string dt : {"float32", "float64"}) {
    const std::int64_t T = 6, F = 5, H = 40;  // 4H = 160: several micro-tiles both ways
    auto x = K::placeholder({K::None, T, F}, {.dtype = dt});
    auto s = K::placeholder({}, {.dtype = dt});
    auto W = K::random_uniform_variable({F, 4 * H}, -0.3, 0.3, {.dtype = dt, .seed = 11});
    auto U = K::random_uniform_variable({H, 4 * H}, -0.3, 0.3, {.dtype = dt, .seed = 12});
    auto b = K::zeros({4 * H}, {.dtype = dt});
    auto h0 = K::zeros_like(K::dot(K::sum(x, 1), K::zeros({F, H}, {.dtype = dt})));
    auto build = [&] {
      auto r = K::rnn(lstm({W, U * s, b}, H), x, {h0, h0});
      auto loss = K::sum(K::square(r.last_output));
      return K::function({x, s}, {r.last_output, K::gradients(loss, {U})[0]});
    };
    auto f = build();
    NDArray xb = NDArray::full(Shape{9, T, F}, 0.2, ktape::dtype_from_name(dt));
    for (std::int64_t i = 0; i < xb.size(); ++i) xb.set_item(i, 0.05 * static_cast<double>(i % 13));
    auto scale = [&](double v) { return NDArray::full(Shape{}, v, ktape::dtype_from_name(dt)); };
    const auto first = f({xb, scale(1.0)});
    const NDArray U0 = K::get_value(U);
    // 1. The fed scale changes: the static U * s is recomputed into the same arena buffer.
    const auto scaled = f({xb, scale(0.5)});
    const auto scaled_fresh = build()({xb, scale(0.5)});
    // 2. The variable changes between calls.
    NDArray U1 = U0.clone();
    for (std::int64_t i = 0; i < U1.size(); ++i) U1.set_item(i, -U0.item(i));
    K::set_value(U, U1);
    const auto flipped = f({xb, scale(1.0)});
    const auto flipped_fresh = build()({xb, scale(1.0)});
    for (std::size_t o = 0; o < 2; ++o) {
      EXPECT_TRUE(same_bits(scaled[o], scaled_fresh[o])) << dt << " output " << o;
      EXPECT_TRUE(same_bits(flipped[o], flipped_fresh[o])) << dt << " output " << o;
      EXPECT_FALSE(same_bits(scaled[o], first[o])) << dt << " output " << o;
      EXPECT_FALSE(same_bits(flipped[o], first[o])) << dt << " output " << o;
    }
    K::set_value(U, U0);
  }
}

}  // namespace
