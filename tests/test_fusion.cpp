// Elementwise fusion in Function (engine/fusion.hpp): a fused plan must give exactly the values
// of the unfused plan on the same backend (the same kernels compute the same elements), agree
// with the reference backend, and launch fewer kernels.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "ktape/ktape.hpp"
#include "test_util.hpp"

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;

namespace {

using ktape::testing_util::expect_identical;
using ktape::testing_util::ramp;

void expect_close(const NDArray& a, const NDArray& b, double rtol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (std::int64_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a.item(i), b.item(i), rtol * (1.0 + std::abs(b.item(i)))) << what << " @" << i;
}

// An Adam-like step on one parameter: 3 committed values, intermediates in between.
struct AdamChain {
  Tensor g, p, m, v, lr;
  std::vector<Tensor> outputs, updates;
  AdamChain(std::int64_t n, DType dt) {
    const std::string d(ktape::dtype_name(dt));
    g = K::placeholder({n}, {.dtype = d});
    lr = K::placeholder({}, {.dtype = d});
    p = K::variable(ramp(Shape{n}, 1.0, 0.0, dt), {.dtype = d});
    m = K::variable(ramp(Shape{n}, 0.1, 0.05, dt), {.dtype = d});
    v = K::variable(ramp(Shape{n}, 0.01, 0.02, dt), {.dtype = d});
    auto m_t = 0.9 * m + 0.1 * g;
    auto v_t = 0.999 * v + 0.001 * K::square(g);
    auto p_t = p - lr * m_t / (K::sqrt(v_t) + 1e-7);
    outputs = {m_t};
    updates = {K::update(m, m_t), K::update(v, v_t), K::update(p, p_t)};
  }
};

std::string plan;  // describe_plan() of the last run_adam

std::vector<NDArray> run_adam(std::int64_t n, DType dt, ktape::FunctionOptions opt,
                              std::size_t* steps = nullptr) {
  K::clear_session();
  AdamChain c(n, dt);
  auto f = K::function({c.g, c.lr}, c.outputs, c.updates, opt);
  NDArray gv = ramp(Shape{n}, 0.5, 0.1, dt);
  NDArray lrv = NDArray::scalar(0.01, dt);
  std::vector<NDArray> outs;
  for (int step = 0; step < 3; ++step) outs = f({gv, lrv});
  if (steps) *steps = f.num_steps();
  plan = f.describe_plan();
  if (std::getenv("KTAPE_TEST_VERBOSE")) std::printf("%s\n", f.describe_plan().c_str());
  return {outs[0], K::get_value(c.p), K::get_value(c.m), K::get_value(c.v)};
}

// Fused steps of a plan: lines of describe_plan() with "[fused:", and all its steps.
std::pair<int, int> fused_and_all_steps(const ktape::Function& f) {
  const std::string plan = f.describe_plan();
  int fused = 0, all = 0;
  for (std::size_t at = 0; (at = plan.find('\n', at)) != std::string::npos; ++at) ++all;
  for (std::size_t at = 0; (at = plan.find("[fused:", at)) != std::string::npos; ++at) ++fused;
  return {fused, all - 1};  // the last line counts commits
}

// `outs` of the fused plan (in `fused`) on `feed`, checked against the unfused plan (the same
// bits) and the reference backend (within rtol).
std::vector<NDArray> run_checked(const std::vector<Tensor>& ins, const std::vector<Tensor>& outs,
                                 const std::vector<NDArray>& feed, double rtol,
                                 const std::string& what, ktape::Function& fused) {
  fused = K::function(ins, outs);
  auto plain = K::function(ins, outs, {}, {.fuse = false});
  auto ref = K::function(ins, outs, {}, {.backend = "reference"});
  auto r = fused(feed);
  auto u = plain(feed);
  auto e = ref(feed);
  for (std::size_t k = 0; k < outs.size(); ++k) {
    expect_identical(r[k], u[k], what);
    expect_close(r[k], e[k], rtol, what);
  }
  return r;
}

}  // namespace

TEST(Fusion, AdamChainIsOnePassAndIdenticalToUnfused) {
  // 3 full chunks plus a ragged tail, and a size that takes the parallel path.
  for (std::int64_t n : {2048 * 3 + 7, 200000}) {
    for (DType dt : {DType::float32, DType::float64}) {
      std::size_t fused_steps = 0, plain_steps = 0;
      auto fused = run_adam(n, dt, {.backend = "cpu"}, &fused_steps);
      const std::string fused_plan = plan;
      auto plain = run_adam(n, dt, {.backend = "cpu", .fuse = false}, &plain_steps);
      auto ref = run_adam(n, dt, {.backend = "reference"});
      const char* names[] = {"m_t output", "p", "m", "v"};
      for (int k = 0; k < 4; ++k) {
        expect_identical(fused[static_cast<std::size_t>(k)], plain[static_cast<std::size_t>(k)],
                         names[k]);
        expect_close(fused[static_cast<std::size_t>(k)], ref[static_cast<std::size_t>(k)],
                     dt == DType::float32 ? 1e-5 : 1e-12, names[k]);
      }
      // 13 elementwise kernels unfused (K::sqrt clips at 0 first, as Keras does); one fused
      // pass (the scalar lr is fed, not computed).
      EXPECT_EQ(plain_steps, 13u);
      EXPECT_EQ(fused_steps, 1u);
      // v and p are written into their variables by the pass; m_t is also an output, so m is
      // committed by a copy after the call.
      EXPECT_NE(fused_plan.find("commits: 1 copied, 2 written in place"), std::string::npos)
          << fused_plan;
      // The 10 intermediates share registers: at most 3 live at once, each a chunk of 2,048
      // elements (one per intermediate would be 80 KB in float32, more than L1).
      const std::size_t at = fused_plan.find(" KB of registers]");
      ASSERT_NE(at, std::string::npos) << fused_plan;
      const std::size_t from = fused_plan.rfind(' ', at - 1) + 1;
      const int kb = std::stoi(fused_plan.substr(from, at - from));
      EXPECT_LE(kb, 3 * 2 * static_cast<int>(ktape::dtype_size(dt))) << fused_plan;
    }
  }
}

TEST(Fusion, AdamChainHandValues) {
  // Element 0 by hand: g = 0.1, p = 0, m = 0.05, v = 0.02 (ramp at i = 0 is the offset).
  auto r = run_adam(5000, DType::float64, {.backend = "cpu"});
  double m = 0.05, v = 0.02, p = 0.0;
  for (int s = 0; s < 3; ++s) {
    m = 0.9 * m + 0.1 * 0.1;
    v = 0.999 * v + 0.001 * 0.01;
    p = p - 0.01 * m / (std::sqrt(v) + 1e-7);
  }
  EXPECT_NEAR(r[0].item(0), m, 1e-15);
  EXPECT_NEAR(r[1].item(0), p, 1e-15);
  EXPECT_NEAR(r[3].item(0), v, 1e-15);
}

TEST(Fusion, IntermediatesUsedElsewhereAreWrittenOut) {
  // t = exp(x) * 2 feeds a reduction and is an output; u = t + x continues the chain;
  // a comparison and a select put a bool intermediate inside the group.
  for (const char* be : {"cpu", "reference"}) {
    K::clear_session();
    const std::int64_t n = 4099;
    auto x = K::placeholder({K::None});
    auto t = K::exp(x) * 2.0;
    auto u = t + x;
    auto w = K::switch_(K::greater(u, 1.0), u, K::square(x));
    auto s = K::sum(t);
    auto f1 = K::function({x}, {w, s, t}, {}, {.backend = be});
    auto f0 = K::function({x}, {w, s, t}, {}, {.backend = be, .fuse = false});
    NDArray xv = ramp(Shape{n}, 1.5, -0.5);
    auto a = f1({xv});
    auto b = f0({xv});
    for (int k = 0; k < 3; ++k)
      expect_identical(a[static_cast<std::size_t>(k)], b[static_cast<std::size_t>(k)], be);
    for (std::int64_t i = 0; i < n; i += 997) {
      const double xi = xv.item(i), ti = static_cast<float>(std::exp(xi)) * 2.0, ui = ti + xi;
      EXPECT_NEAR(a[0].item(i), ui > 1.0 ? ui : xi * xi, 1e-5 * (1 + std::abs(ui))) << i;
      EXPECT_NEAR(a[2].item(i), ti, 1e-5 * ti) << i;
    }
    if (std::string(be) == "cpu") {
      EXPECT_LT(f1.num_steps(), f0.num_steps());
    } else {
      EXPECT_EQ(f1.num_steps(), f0.num_steps());  // the oracle runs one kernel per node
    }
  }
}

TEST(Fusion, RegistersReadLateKeepTheirValues) {
  // Registers are reused once read for the last time: `a` is read again after four more
  // intermediates come and go, and `bits` (bool, a narrower register) sits between them. A slot
  // handed out too early would change the fused result; by hand at a few elements as well.
  K::clear_session();
  const std::int64_t n = 2048 * 2 + 5;
  auto x = K::placeholder({K::None});
  auto a = K::exp(x * 0.5);
  auto bits = K::greater(x, 0.25);
  auto b = K::square(a + 1.0) * 0.5 - x;
  auto y = K::switch_(bits, b - a, a * 3.0) + K::tanh(x);
  auto f1 = K::function({x}, {y});
  auto f0 = K::function({x}, {y}, {}, {.fuse = false});
  NDArray xv = ramp(Shape{n}, 1.5, -0.5);
  auto r1 = f1({xv});
  auto r0 = f0({xv});
  EXPECT_EQ(f1.num_steps(), 1u) << f1.describe_plan();
  expect_identical(r1[0], r0[0], "fused vs unfused");
  for (std::int64_t i = 0; i < n; i += 409) {
    const double xi = static_cast<float>(xv.item(i)), ai = std::exp(0.5 * xi);
    const double bi = 0.5 * (ai + 1) * (ai + 1) - xi;
    const double yi = (xi > 0.25 ? bi - ai : 3 * ai) + std::tanh(xi);
    EXPECT_NEAR(r1[0].item(i), yi, 1e-5 * (1 + std::abs(yi))) << i;
  }
}

// The concatenation of fused chains' results (an LSTM's gate gradients): each pass writes its
// rows straight into the output and the concatenation runs no kernel, with the values of the
// unfused plan (the same kernels) and of the reference backend.
struct ConcatCase {
  std::vector<Tensor> in;
  Tensor out;
  std::vector<NDArray> feed;
};

ConcatCase chains_concatenated(int axis, DType dt, bool read_twice) {
  const std::string d(ktape::dtype_name(dt));
  ConcatCase c;
  // Widths 128, 64 and 256 along the last axis; 16 and 48 rows along axis 0 (of 2-D inputs
  // (16, 128), (48, 128)); a middle axis of (4, r, 128).
  const std::vector<Shape> shapes = axis == 1 ? std::vector<Shape>{{40, 128}, {40, 64}, {40, 256}}
                                    : axis == 0
                                        ? std::vector<Shape>{{16, 128}, {48, 128}, {8, 128}}
                                        : std::vector<Shape>{{4, 3, 128}, {4, 5, 128}, {4, 2, 128}};
  std::vector<Tensor> parts;
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    auto x = K::placeholder(shapes[k], {.dtype = d});
    c.in.push_back(x);
    c.feed.push_back(ramp(shapes[k], 1.0 + 0.5 * static_cast<double>(k), 0.1, dt));
    auto a = K::sigmoid(x) * (1.0 - K::sigmoid(x));  // a fused chain
    parts.push_back(a * x + 0.25);
  }
  const int ax = axis == 2 ? 1 : axis;
  c.out = K::concatenate(parts, ax);
  if (read_twice) c.out = c.out + K::sum(parts[1]);  // part 1 is also read outside the concat
  c.out = K::tanh(c.out);
  return c;
}

TEST(Fusion, ConcatenatedChainsAreWrittenInPlace) {
  for (int axis : {1, 0, 2})
    for (DType dt : {DType::float32, DType::float64})
      for (bool read_twice : {false, true}) {
        const std::string what = "axis " + std::to_string(axis) + " " +
                                 std::string(ktape::dtype_name(dt)) +
                                 (read_twice ? " read twice" : "");
        K::clear_session();
        auto c = chains_concatenated(axis, dt, read_twice);
        auto fused = K::function(c.in, {c.out});
        auto plain = K::function(c.in, {c.out}, {}, {.fuse = false});
        auto ref = K::function(c.in, {c.out}, {}, {.backend = "reference"});
        auto a = fused(c.feed);
        auto b = plain(c.feed);
        auto r = ref(c.feed);
        expect_identical(a[0], b[0], what);
        expect_close(a[0], r[0], dt == DType::float32 ? 1e-6 : 1e-14, what);
        const std::string plan = fused.describe_plan();
        // Placed: no Concat step. Part 1 read by a reduction too stays an array, and so the
        // concatenation stays a kernel.
        EXPECT_EQ(plan.find("Concat") == std::string::npos, !read_twice) << what << "\n" << plan;
      }
}

TEST(Fusion, ConcatenationPlacedByHand) {
  // concatenate([2x + 1, x * x], -1) of x = [[1, 2], [3, 4]] (2 x 2 each): rows
  // [3, 5, 1, 4] and [7, 9, 9, 16]; fed twice, then the second feed [[0, -1], [5, 0.5]].
  K::clear_session();
  auto x = K::placeholder({K::None, 2});
  auto y = K::concatenate({x * 2.0 + 1.0, K::square(x) * 1.0}, -1);
  auto f = K::function({x}, {y});
  auto r = f({NDArray::from_values({1, 2, 3, 4}, Shape{2, 2}, DType::float32)});
  const std::vector<double> want = {3, 5, 1, 4, 7, 9, 9, 16};
  for (std::int64_t i = 0; i < 8; ++i) EXPECT_EQ(r[0].item(i), want[static_cast<std::size_t>(i)]);
  EXPECT_EQ(f.describe_plan().find("Concat"), std::string::npos) << f.describe_plan();
  r = f({NDArray::from_values({0, -1, 5, 0.5}, Shape{2, 2}, DType::float32)});
  const std::vector<double> want2 = {1, -1, 0, 1, 11, 2, 25, 0.25};
  for (std::int64_t i = 0; i < 8; ++i) EXPECT_EQ(r[0].item(i), want2[static_cast<std::size_t>(i)]);
}

TEST(Fusion, OnePassPlacesTwoPartsOneOfThemNotItsResult) {
  // a (a member read again inside its pass) and b (the pass's result) are both placed by the
  // same pass; c by another. By hand at a few elements as well.
  K::clear_session();
  auto x = K::placeholder({K::None, 64});
  auto a = K::sigmoid(x) * 3.0;
  auto b = a * a + x;
  auto c = K::exp(x * 0.5) - 1.0;
  auto y = K::concatenate({a, c, b}, -1);
  auto fused = K::function({x}, {y});
  auto plain = K::function({x}, {y}, {}, {.fuse = false});
  NDArray xv = ramp(Shape{70, 64}, 2.0, 0.1);
  auto r = fused({xv});
  expect_identical(r[0], plain({xv})[0], "fused vs unfused");
  EXPECT_EQ(fused.describe_plan().find("Concat"), std::string::npos) << fused.describe_plan();
  for (std::int64_t row : {0, 33, 69})
    for (std::int64_t col : {0, 17, 63}) {
      const double xi = static_cast<float>(xv.item(row * 64 + col));
      const double ai = 3.0 / (1.0 + std::exp(-xi));
      const double want[3] = {ai, std::exp(0.5 * xi) - 1.0, ai * ai + xi};
      for (int k = 0; k < 3; ++k)
        EXPECT_NEAR(r[0].item(row * 192 + k * 64 + col), want[k], 1e-5 * (1 + std::abs(want[k])))
            << row << " " << col << " part " << k;
    }
}

TEST(Fusion, APlacedConcatenationNobodyReadsKeepsItsBufferUntilItsLastWriter) {
  // y is needed only as a control input: nothing reads its data. Its first part is written,
  // then qq (the size of y) is computed, then y's second part is written, then qq is read.
  // y's buffer must stay y's until its second writer, or that writer overwrites qq.
  K::clear_session();
  auto x = K::placeholder({32, 64});
  auto q = K::square(x) * 0.5 + 3.0;
  auto p1 = K::tanh(x) * 2.0 + 1.0;
  auto qq = K::concatenate({q, q}, -1);  // (32, 128), like y; not placed (q twice)
  auto p2 = K::sigmoid(x) * 4.0 - 1.0;
  auto y = K::concatenate({p1, p2}, -1);
  ktape::Tensor out;
  {
    auto deps = K::control_dependencies({y});
    out = qq * 1.0;
  }
  auto f = K::function({x}, {out});
  NDArray xv = ramp(Shape{32, 64}, 1.5, 0.2);
  auto r = f({xv});
  if (std::getenv("KTAPE_TEST_VERBOSE")) std::printf("%s\n", f.describe_plan().c_str());
  for (std::int64_t i = 0; i < 32 * 128; i += 7) {
    const double xi = static_cast<float>(xv.item((i / 128) * 64 + (i % 128) % 64));
    EXPECT_NEAR(r[0].item(i), 0.5 * xi * xi + 3.0, 1e-5 * (4 + xi * xi)) << i;
  }
}

TEST(Fusion, SlicesReadByFusedPassesAreGathered) {
  // An LSTM cell's gates: column blocks of z = x w (computed) or of a fed array, read by fused
  // passes that gather each chunk's elements from z; no Slice step runs. The fed case has 150
  // rows of width 24: its second chunk (2,048 elements in) starts inside a row. A slice also read
  // by a reduction keeps its kernel. Middle-axis blocks of a 3-D array too.
  for (int variant : {0, 1, 2, 3})
    for (DType dt : {DType::float32, DType::float64}) {
      const std::string d(ktape::dtype_name(dt));
      const std::string what = "variant " + std::to_string(variant) + " " + d;
      K::clear_session();
      const bool three_d = variant == 3;
      auto x = three_d ? K::placeholder({6, 10, 64}, {.dtype = d})
                       : K::placeholder({K::None, 96}, {.dtype = d});
      auto w = K::variable(ramp(Shape{96, 256}, 0.1, 0.0, dt), {.dtype = d});
      auto z = three_d ? x : variant == 1 ? x : K::dot(x, w);
      const std::int64_t width = three_d ? 2 : (variant == 1 ? 24 : 64);
      auto gate = [&](std::int64_t k) {
        return three_d ? K::slice(z, {0, k * width, 0}, {-1, width, -1})
                       : K::slice(z, {0, k * width}, {-1, width});
      };
      auto i = K::sigmoid(gate(0)), f = K::sigmoid(gate(1)), g = K::tanh(gate(2));
      auto c = f * 0.5 + i * g;
      auto y = K::sigmoid(gate(3)) * K::tanh(c);
      std::vector<Tensor> outs{y};
      if (variant == 2) outs.push_back(K::sum(gate(3)));
      NDArray xv = three_d ? ramp(Shape{6, 10, 64}, 1.5, 0.1, dt)
                           : ramp(Shape{variant == 1 ? 150 : 37, 96}, 1.5, 0.1, dt);
      ktape::Function fused;
      run_checked({x}, outs, {xv}, dt == DType::float32 ? 1e-5 : 1e-12, what, fused);
      const std::string plan = fused.describe_plan();
      int slices = 0;  // steps of the plan that are Slice kernels (one per line)
      for (std::size_t at = 0; at < plan.size(); at = plan.find('\n', at) + 1) {
        slices += plan.compare(at, 6, "Slice ") == 0;
        if (plan.find('\n', at) == std::string::npos) break;
      }
      EXPECT_EQ(slices, variant == 2 ? 1 : 0) << what << "\n" << plan;
    }
}

TEST(Fusion, GatheredSliceByHand) {
  // x = [[1, 2, 3, 4], [5, 6, 7, 8]]; a = x[:, 0:2], b = x[:, 2:4]; y = a * b + a (fed, so the
  // block is gathered from the caller's array): [[1*3+1, 2*4+2], [5*7+5, 6*8+6]].
  K::clear_session();
  auto x = K::placeholder({K::None, 4});
  auto a = K::slice(x, {0, 0}, {-1, 2}), b = K::slice(x, {0, 2}, {-1, 2});
  auto f = K::function({x}, {a * b + a});
  auto r = f({NDArray::from_values({1, 2, 3, 4, 5, 6, 7, 8}, Shape{2, 4}, DType::float32)});
  EXPECT_EQ(r[0].to_vector(), (std::vector<double>{4, 10, 40, 54}));
  EXPECT_EQ(f.describe_plan().find("Slice"), std::string::npos) << f.describe_plan();
}

TEST(Fusion, ASumReadOnlyThroughGatheredSlicesIsComputedByItsReader) {
  // An LSTM cell's gate sum z = a + b + bias, read only through its four gate slices by the cell
  // pass: the cell pass computes the rows of z each chunk needs and runs no pass of z's own. 150
  // rows of gates 32 wide: the cell's chunks of 2,048 elements need z's rows 0-63, 64-127 and
  // 128-149. Against the unfused plan (identical), the reference backend and hand values. Not
  // computed by the reader: z also read whole (variant 1), blocks whose width does not divide
  // the reader's chunk (variant 2, 24 wide), a gate also read by a reduction (variant 3: its slice
  // is not gathered).
  for (int variant : {0, 1, 2, 3})
    for (DType dt : {DType::float32, DType::float64}) {
      const std::string d(ktape::dtype_name(dt));
      const std::string what = "variant " + std::to_string(variant) + " " + d;
      K::clear_session();
      const std::int64_t w = variant == 2 ? 24 : 32, rows = 150;
      auto a = K::placeholder({K::None, 4 * w}, {.dtype = d});
      auto b = K::placeholder({K::None, 4 * w}, {.dtype = d});
      auto c0 = K::placeholder({K::None, w}, {.dtype = d});
      auto bias = K::variable(ramp(Shape{4 * w}, 0.5, 0.1, dt), {.dtype = d});
      auto z = a + b + bias;
      auto gate = [&](std::int64_t k) { return K::slice(z, {0, k * w}, {-1, w}); };
      auto i = K::sigmoid(gate(0)), f = K::sigmoid(gate(1)), g = K::tanh(gate(2));
      auto c = f * c0 + i * g;
      auto h = K::sigmoid(gate(3)) * K::tanh(c);
      std::vector<Tensor> outs{h, c};
      if (variant == 1) outs.push_back(K::sum(z, 1));
      if (variant == 3) outs.push_back(K::sum(gate(1), 1));
      const std::vector<NDArray> feed{ramp(Shape{rows, 4 * w}, 1.5, 0.1, dt),
                                      ramp(Shape{rows, 4 * w}, -0.7, 0.2, dt),
                                      ramp(Shape{rows, w}, 0.9, -0.1, dt)};
      ktape::Function fused;
      auto r =
          run_checked({a, b, c0}, outs, feed, dt == DType::float32 ? 1e-5 : 1e-12, what, fused);
      const std::string plan = fused.describe_plan();
      const bool computed = plan.find("1 input(s) computed per chunk") != std::string::npos;
      EXPECT_EQ(computed, variant == 0) << what << "\n" << plan;
      if (variant == 0) {  // one pass: the cell, computing z inside
        EXPECT_EQ(fused_and_all_steps(fused), (std::pair<int, int>{1, 1})) << what << "\n" << plan;
        EXPECT_NE(fused.plan_dot().find("1 computed inputs"), std::string::npos) << what;
      }
      // Hand values (std::exp, std::tanh) at rows 0, 63, 64, 127, 128 and 149.
      for (std::int64_t row : {0, 63, 64, 127, 128, 149})
        for (std::int64_t col : {std::int64_t{0}, w - 1}) {
          auto zk = [&](std::int64_t k) {
            const std::int64_t at = row * 4 * w + k * w + col;
            return feed[0].item(at) + feed[1].item(at) + K::get_value(bias).item(k * w + col);
          };
          auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
          const double cv =
              sig(zk(1)) * feed[2].item(row * w + col) + sig(zk(0)) * std::tanh(zk(2));
          const double hv = sig(zk(3)) * std::tanh(cv);
          const double tol = dt == DType::float32 ? 1e-5 : 1e-12;
          EXPECT_NEAR(r[0].item(row * w + col), hv, tol) << what << " row " << row;
          EXPECT_NEAR(r[1].item(row * w + col), cv, tol) << what << " row " << row;
        }
    }
}

TEST(Fusion, PassesOfOneSizeMergeIntoOne) {
  // Three ways for two chains to share one pass, each against the unfused plan (identical),
  // the reference backend and hand values:
  //  0: both read a = x * y, an elementwise step of their size (an LSTM's gate gradients all
  //     read dh): a joins the merged pass;
  //  1: independent chains (x, and y) of the same size: siblings merge;
  //  2: a row operand (a bias) in one chain, none in the other.
  for (int kind : {0, 1, 2})
    for (DType dt : {DType::float32, DType::float64}) {
      const std::string what =
          "kind " + std::to_string(kind) + " " + std::string(ktape::dtype_name(dt));
      const std::string d(ktape::dtype_name(dt));
      K::clear_session();
      auto x = K::placeholder({K::None, 48}, {.dtype = d});
      auto y = K::placeholder({K::None, 48}, {.dtype = d});
      auto bias = K::variable(ramp(Shape{48}, 0.5, 0.0, dt), {.dtype = d});
      Tensor a = kind == 0 ? x * y : x;
      Tensor c1 = K::sigmoid(a) * 2.0 + (kind == 2 ? bias : K::constant(1.0, {.dtype = d}));
      Tensor c2 = K::tanh(kind == 0 ? a : y) * 3.0 - 1.0;
      const std::vector<NDArray> feed{ramp(Shape{100, 48}, 2.0, 0.1, dt),
                                      ramp(Shape{100, 48}, -1.5, 0.3, dt)};
      ktape::Function fused;
      auto r =
          run_checked({x, y}, {c1, c2}, feed, dt == DType::float32 ? 1e-6 : 1e-14, what, fused);
      EXPECT_EQ(fused_and_all_steps(fused), (std::pair<int, int>{1, 1})) << what << "\n"
                                                                         << fused.describe_plan();
      for (std::int64_t i : {0, 47, 2000, 4799}) {
        const double xi = feed[0].item(i), yi = feed[1].item(i);
        const double ai = kind == 0 ? xi * yi : xi;
        const double b = kind == 2 ? 0.5 * std::sin(0.37 * static_cast<double>(i % 48)) : 1.0;
        const double want1 = 2.0 / (1.0 + std::exp(-ai)) + b;
        const double want2 = 3.0 * std::tanh(kind == 0 ? ai : yi) - 1.0;
        EXPECT_NEAR(r[0].item(i), want1, 1e-5 * (1 + std::abs(want1))) << what << " @" << i;
        EXPECT_NEAR(r[1].item(i), want2, 1e-5 * (1 + std::abs(want2))) << what << " @" << i;
      }
    }
}

TEST(Fusion, APassReadBeforeALaterOneRunsDoesNotMergeIntoIt) {
  // u's pass feeds a reduction whose result the later pass v reads: merging u into v's pass
  // (which runs where v's last member does) would run the reduction before u exists. In case 1
  // the two chains also share a = x * 2, whose readers then cannot all merge either. In case 2
  // the reduction reads a itself: u and v merge, but a must not join them.
  for (int kind : {0, 1, 2}) {
    K::clear_session();
    auto x = K::placeholder({K::None, 32});
    Tensor a = kind >= 1 ? x * 2.0 : x;
    Tensor s = kind == 2 ? K::sum(a) : Tensor();  // built first: it runs before u
    auto u = K::sigmoid(a) * 2.0 + 1.0;
    if (kind != 2) s = K::sum(u);
    auto v = K::tanh(a * 0.5) * s - 1.0;
    auto f = K::function({x}, {v, u});
    NDArray xv = ramp(Shape{64, 32}, 1.5, 0.2);
    auto r = f({xv});
    double sum = 0;
    for (std::int64_t i = 0; i < xv.size(); ++i) {
      const double ai = static_cast<float>(xv.item(i)) * (kind >= 1 ? 2.0 : 1.0);
      sum += kind == 2 ? ai : 2.0 / (1.0 + std::exp(-ai)) + 1.0;
    }
    for (std::int64_t i = 0; i < xv.size(); i += 97) {
      const double ai = static_cast<float>(xv.item(i)) * (kind >= 1 ? 2.0 : 1.0);
      const double want = std::tanh(ai * 0.5) * sum - 1.0;
      EXPECT_NEAR(r[0].item(i), want, 1e-5 * (1 + std::abs(want))) << kind << " @" << i;
    }
    EXPECT_EQ(fused_and_all_steps(f).first, kind == 2 ? 1 : 2) << f.describe_plan();
  }
}

TEST(Fusion, RowOperandsAndSmallArraysMatchReference) {
  K::clear_session();
  auto x = K::placeholder({K::None, 300});
  auto b = K::variable(ramp(Shape{300}, 0.3, 0.0));
  auto y = K::relu(x + b) * 3.0 - 1.0;  // x + b broadcasts a row (fused with a row operand)
  auto f = K::function({x}, {y});
  auto r = K::function({x}, {y}, {}, {.backend = "reference"});
  for (std::int64_t rows : {1, 2, 40}) {  // 300 and 600 elements are below the fusion size
    NDArray xv = ramp(Shape{rows, 300}, 1.0, 0.0);
    expect_close(f({xv})[0], r({xv})[0], 1e-6, "rows " + std::to_string(rows));
  }
}

TEST(Fusion, GradientsThroughFusedChainsMatchReference) {
  K::clear_session();
  auto x = K::placeholder({64, 64});
  auto W = K::variable(ramp(Shape{64, 64}, 0.2, 0.0));
  auto h = K::tanh(K::dot(x, W)) * K::sigmoid(K::dot(x, W) - 0.5);
  auto loss = K::mean(K::square(h - 0.25));
  auto g = K::gradients(loss, {W})[0];
  NDArray xv = ramp(Shape{64, 64}, 1.0, 0.1);
  auto a = K::function({x}, {loss, g})({xv});
  auto b = K::function({x}, {loss, g}, {}, {.backend = "cpu", .fuse = false})({xv});
  auto c = K::function({x}, {loss, g}, {}, {.backend = "reference"})({xv});
  expect_identical(a[1], b[1], "gradient fused vs unfused");
  expect_close(a[1], c[1], 1e-5, "gradient vs reference");
  EXPECT_NEAR(a[0].item(0), c[0].item(0), 1e-6);
}

TEST(Fusion, BiasAndActivationAfterAGemmAreOnePass) {
  // relu(x W + b) * 2 - 1 with b a row: one GEMM, then one fused pass that broadcasts b over
  // the rows, for widths that do and do not divide the chunk, and with gradients.
  for (std::int64_t width : {10, 7, 256, 100}) {
    K::clear_session();
    auto x = K::placeholder({K::None, 16});
    auto W = K::variable(ramp(Shape{16, width}, 0.3, 0.0));
    auto b = K::variable(ramp(Shape{width}, 0.5, 0.1));
    auto y = K::relu(K::dot(x, W) + b) * 2.0 - 1.0;
    auto g = K::gradients(K::sum(K::tanh(y)), {W, b});
    std::vector<ktape::Tensor> outs{y, g[0], g[1]};
    auto f1 = K::function({x}, outs);
    auto f0 = K::function({x}, outs, {}, {.backend = "cpu", .fuse = false});
    auto fr = K::function({x}, outs, {}, {.backend = "reference"});
    for (std::int64_t rows : {300, 257}) {
      NDArray xv = ramp(Shape{rows, 16}, 1.0, -0.2);
      auto a = f1({xv});
      auto c = f0({xv});
      auto r = fr({xv});
      for (std::size_t k = 0; k < 3; ++k) {
        expect_identical(a[k], c[k],
                         "width " + std::to_string(width) + " out " + std::to_string(k));
        expect_close(a[k], r[k], 1e-4, "vs reference, width " + std::to_string(width));
      }
      // By hand, element (1, 2): relu(sum_k x[1,k] W[k,2] + b[2]) * 2 - 1.
      const NDArray Wv = K::get_value(W);
      double z = K::get_value(b).item(2);
      for (int k = 0; k < 16; ++k) z += xv.item(16 + k) * Wv.item(k * width + 2);
      EXPECT_NEAR(a[0].item(width + 2), std::max(z, 0.0) * 2 - 1, 1e-4);
    }
    EXPECT_LT(f1.num_steps(), f0.num_steps()) << "width " << width;
  }
}

TEST(Fusion, APlainReluPassWritesNoPreActivationForItsGradient) {
  // h = relu(x W + b), then a second layer: a plain relu's gradient reads h (as TF's ReluGrad
  // does), so the forward bias + relu pass writes h alone; a leaky relu's gradient needs
  // x W + b, a second output of the pass. Both against the reference backend.
  for (const double alpha : {0.0, 0.1}) {
    K::clear_session();
    auto x = K::placeholder({K::None, 16});
    auto W = K::variable(ramp(Shape{16, 24}, 0.3, 0.0));
    auto b = K::variable(ramp(Shape{24}, 0.5, 0.1));
    auto V = K::variable(ramp(Shape{24, 5}, 0.2, 0.05));
    auto h = K::relu(K::dot(x, W) + b, {.alpha = alpha});
    auto g = K::gradients(K::sum(K::square(K::dot(h, V))), {W, b});
    std::vector<ktape::Tensor> outs{g[0], g[1]};
    auto f = K::function({x}, outs);
    auto fr = K::function({x}, outs, {}, {.backend = "reference"});
    NDArray xv = ramp(Shape{40, 16}, 1.0, -0.2);
    auto a = f({xv});
    auto r = fr({xv});
    for (std::size_t k = 0; k < 2; ++k)
      expect_close(a[k], r[k], 1e-5, "alpha " + std::to_string(alpha));
    // The forward pass: the first fused step, ending in the relu (a pass of its own, or the
    // epilogue of the product x W).
    const std::string plan = f.describe_plan();
    const std::size_t at = plan.find("Relu ");
    ASSERT_NE(at, std::string::npos) << plan;
    const std::string pass = plan.substr(at, plan.find('\n', at) - at);
    EXPECT_NE(pass.find(alpha == 0 ? " 1 outputs" : " 2 outputs"), std::string::npos)
        << "alpha " << alpha << "\n"
        << plan;
  }
}

TEST(Fusion, ChannelsFirstBiasAndActivationAfterAConvAreOnePass) {
  // tanh(relu(conv(x) + b) * 2 - 1), channels_first: b is a column (C, 1, 1), one value per run
  // of rows * cols elements. One fused pass, bit-identical to the unfused plan, close to the
  // reference, for runs that do and do not divide the chunk, and with gradients.
  for (std::int64_t side : {9, 26, 13}) {
    K::clear_session();
    auto x = K::placeholder({K::None, 3, side + 2, side + 2});
    auto k = K::variable(ramp(Shape{3, 3, 3, 5}, 0.3, 0.0));
    auto b = K::variable(ramp(Shape{5}, 0.5, 0.1));
    auto y = K::tanh(K::relu(K::bias_add(K::conv2d(x, k, {.data_format = "channels_first"}), b,
                                         "channels_first")) *
                         2.0 -
                     1.0);
    auto g = K::gradients(K::sum(y), {k, b});
    std::vector<ktape::Tensor> outs{y, g[0], g[1]};
    auto f1 = K::function({x}, outs);
    auto f0 = K::function({x}, outs, {}, {.backend = "cpu", .fuse = false});
    auto fr = K::function({x}, outs, {}, {.backend = "reference"});
    const NDArray xv = ramp(Shape{3, 3, side + 2, side + 2}, 1.0, -0.2);
    auto a = f1({xv});
    auto c = f0({xv});
    auto r = fr({xv});
    for (std::size_t o = 0; o < 3; ++o) {
      expect_identical(a[o], c[o], "side " + std::to_string(side) + " out " + std::to_string(o));
      expect_close(a[o], r[o], 1e-4, "vs reference, side " + std::to_string(side));
    }
    EXPECT_NE(f1.describe_plan().find("Tanh"), std::string::npos);
    EXPECT_EQ(f1.describe_plan().find("\nAdd"), std::string::npos)
        << "the bias add should be fused:\n"
        << f1.describe_plan();
    EXPECT_LT(f1.num_steps(), f0.num_steps()) << "side " << side;
  }
}

TEST(Fusion, BigColumnChunksWithNestedParallelKernelsStayCorrect) {
  // 112 x 112 maps make column chunks of 12,544 elements, on which exp-like member kernels
  // split again (a nested parallel loop): a thread waiting there must not run another chunk of
  // the same pass over its thread-local registers. Fused == unfused, call after call.
  K::clear_session();
  auto x = K::placeholder({K::None, 16, 112, 112});
  auto b = K::variable(ramp(Shape{16}, 0.5, 0.1));
  auto y = K::tanh(K::sigmoid(K::bias_add(x, b, "channels_first")) * 2.0 - K::exp(x * 0.1));
  auto f1 = K::function({x}, {y});
  auto f0 = K::function({x}, {y}, {}, {.backend = "cpu", .fuse = false});
  const NDArray xv = ramp(Shape{8, 16, 112, 112}, 1.0, -0.2);
  const NDArray want = f0({xv})[0];
  for (int call = 0; call < 4; ++call)
    expect_identical(f1({xv})[0], want, "call " + std::to_string(call));
  EXPECT_LT(f1.num_steps(), f0.num_steps());
}

TEST(Fusion, ColumnValuesCycleAcrossChunks) {
  // A column (C, 1) against (N, C, inner) repeats its C values every C runs; with short runs a
  // chunk holds hundreds of runs and starts anywhere in that cycle (inner 2: chunks of 1,024
  // runs, C = 7 -> the second chunk starts at value 1024 % 7 = 2). Every element against its
  // definition, x * c[channel] + c[channel] computed in float as the kernels do, exactly; and
  // fused == unfused.
  for (std::int64_t inner : {2, 3, 5}) {
    K::clear_session();
    const std::int64_t n = 300, ch = 7;
    auto x = K::placeholder({n, ch, inner});
    auto c = K::placeholder({ch, 1});
    auto y = K::relu(x * c + c);
    auto f1 = K::function({x, c}, {y});
    auto f0 = K::function({x, c}, {y}, {}, {.backend = "cpu", .fuse = false});
    const NDArray xv = ramp(Shape{n, ch, inner}, 1.0, -0.3);
    const NDArray cv = ramp(Shape{ch, 1}, 2.0, -0.5);
    const NDArray got = f1({xv, cv})[0];
    expect_identical(got, f0({xv, cv})[0], "inner " + std::to_string(inner));
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < got.size(); ++i) {
      const auto cx = static_cast<float>(cv.item((i / inner) % ch));
      const volatile float prod = static_cast<float>(xv.item(i)) * cx;  // rounded: no FMA
      const float want = std::max(0.0f, prod + cx);
      bad += static_cast<float>(got.item(i)) != want;
    }
    EXPECT_EQ(bad, 0) << "inner " << inner;
    EXPECT_LT(f1.num_steps(), f0.num_steps()) << f1.describe_plan();
  }
}

TEST(Fusion, ConstantSubgraphsAreFoldedAtCompile) {
  K::clear_session();
  auto a = K::constant(NDArray::from_values({1.0, 2.0, 3.0}, Shape{3}));
  auto folded = K::exp(a * 0.0) + K::square(a);  // [2, 5, 10], computed once
  auto x = K::placeholder({3});
  auto y = x * folded;
  auto f = K::function({x}, {y});
  auto f0 = K::function({x}, {y}, {}, {.fuse = false, .fold = false});
  auto out = f({NDArray::from_values({1.0, -1.0, 0.5}, Shape{3})});
  EXPECT_EQ(out[0].item(0), 2.0);
  EXPECT_EQ(out[0].item(1), -5.0);
  EXPECT_EQ(out[0].item(2), 5.0);
  f0({NDArray::from_values({1.0, -1.0, 0.5}, Shape{3})});
  EXPECT_EQ(f.num_steps(), 1u) << f.describe_plan();
  EXPECT_EQ(f0.num_steps(), 5u) << f0.describe_plan();
  // Variables are never folded: a later set_value is seen.
  auto v = K::variable(NDArray::from_values({1.0, 1.0, 1.0}, Shape{3}));
  auto g = K::function({x}, {x * (v + 1.0)});
  EXPECT_EQ(g({NDArray::from_values({1.0, 1.0, 1.0}, Shape{3})})[0].item(0), 2.0);
  K::set_value(v, NDArray::from_values({3.0, 3.0, 3.0}, Shape{3}));
  EXPECT_EQ(g({NDArray::from_values({1.0, 1.0, 1.0}, Shape{3})})[0].item(0), 4.0);
}
