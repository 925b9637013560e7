// The conv family beyond its op rows (tests/op_rows/conv_rows.cpp: forward values, gradchecks,
// parity, errors): the transposes as the adjoints of the forward convs, the cpu kernels' tiling
// at large sizes against the reference and bit-identical at any thread count, zero sizes, the
// default data format, shapes checked at call time, and second order through both conv inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <tbb/global_control.h>

#include "engine/graph.hpp"
#include "ktape/ktape.hpp"
#include "op_rows/op_row.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/conv_plan.hpp"
#include "test_util.hpp"

namespace {

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;
using V = std::vector<Tensor>;
using Fn = std::function<Tensor(const V&)>;

// Seeded float64 inputs (the op rows' generator).
NDArray normal(const Shape& s, std::uint64_t seed, double stddev = 1.0) {
  return ktape::op_rows::Gen(seed).normal(s, stddev);
}
// Distinct values (a shuffled grid): no ties inside a max-pool window.
NDArray distinct(const Shape& s, std::uint64_t seed) {
  return ktape::op_rows::Gen(seed).distinct(s, -2, 2);
}

// Runs f on float64 placeholders shaped like `inputs` with the given backend.
NDArray run(const Fn& f, const std::vector<NDArray>& inputs, const std::string& backend) {
  V phs;
  for (const auto& in : inputs) phs.push_back(K::placeholder(in.shape(), {.dtype = "float64"}));
  return K::function(phs, {f(phs)}, {}, {.backend = backend})(inputs)[0];
}

using ktape::testing_util::error_of;

// Values that test the edge cases of max and of relu: `nan` % each of NaN and -NaN, 2 % each of
// +inf and -inf, `zero` % each of +0 and -0, the rest in {-2, ..., 2} (so windows hold ties).
NDArray awkward(const Shape& s, DType dt, std::uint32_t seed, unsigned nan, unsigned zero) {
  std::mt19937 gen(seed);
  NDArray a(s, dt);
  for (std::int64_t i = 0; i < a.size(); ++i) {
    const unsigned r = gen() % 100;
    const unsigned inf = 2 * nan + 2;
    a.set_item(i, r < nan              ? std::nan("")
                  : r < 2 * nan        ? -std::nan("")
                  : r < inf            ? (r % 2 ? -HUGE_VAL : HUGE_VAL)
                  : r < inf + zero     ? 0.0
                  : r < inf + 2 * zero ? -0.0
                                       : static_cast<double>(r % 5) - 2.0);
  }
  return a;
}
// Every fifth value -0 (a gradient's -0 must reach dx as 0 + -0).
NDArray with_negative_zeros(NDArray a) {
  for (std::int64_t i = 0; i < a.size(); i += 5) a.set_item(i, -0.0);
  return a;
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
      // Few input channels (window cells x channels <= 16): the kernel gradient's thin path,
      // with output channels a whole number of registers and not.
      {"conv2d_thin_1ch",
       [](const V& v) { return K::conv2d(v[0], v[1]); },
       {normal({4, 27, 26, 1}, 86), normal({3, 3, 1, 32}, 87, 0.2)}},
      {"conv2d_thin_16_cells_strided",
       [](const V& v) {
         return K::conv2d(v[0], v[1], {.strides = {2, 1}, .padding = "same"});
       },
       {normal({3, 25, 22, 4}, 88), normal({2, 2, 4, 21}, 89, 0.2)}},
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

// The cpu kernels' output and gradients against the reference kernels', in float64.
void expect_reference_values(const Big& k) {
  const auto cpu = forward_and_gradients(k, "cpu", DType::float64);
  const auto ref = forward_and_gradients(k, "reference", DType::float64);
  for (std::size_t o = 0; o < cpu.size(); ++o)
    for (std::int64_t i = 0; i < cpu[o].size(); ++i)
      ASSERT_NEAR(cpu[o].item(i), ref[o].item(i), 1e-9 * (1 + std::abs(ref[o].item(i))))
          << "output " << o << " element " << i;
}

// The same bits on one thread as on all of them, in float32.
void expect_same_bits_on_one_thread(const Big& k) {
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

TEST(ConvTiling, LargeShapesMatchTheReference) {
  for (const auto& k : big_cases()) {
    SCOPED_TRACE(k.name);
    expect_reference_values(k);
  }
}

TEST(ConvTiling, SameBitsAtAnyThreadCount) {
  for (const auto& k : big_cases()) {
    SCOPED_TRACE(k.name);
    expect_same_bits_on_one_thread(k);
  }
}

// A batch of kScatterBatch or more: the channels_last input gradient scatters each tile's
// products into dx (ConvPlan::scatter), below it it gathers. Every geometry against the reference
// kernels, on both sides of the threshold (the same shapes with one image fewer gather), in
// float64; and the same bits at 1 thread and many in float32.
TEST(ConvTiling, InputGradientScatterMatchesTheReference) {
  const std::int64_t big = ktape::kernels::kScatterBatch;
  struct Case {
    std::string name;
    Fn f;
    Shape x, k;
  };
  const std::vector<Case> cases{
      {"conv1d_stride2_same",
       [](const V& v) { return K::conv1d(v[0], v[1], {.strides = {2}, .padding = "same"}); },
       {big, 17, 5},
       {4, 5, 6}},
      {"conv1d_causal_dilated",
       [](const V& v) {
         return K::conv1d(v[0], v[1], {.padding = "causal", .dilation_rate = {2}});
       },
       {big, 15, 3},
       {3, 3, 4}},
      {"conv2d_even_same_dilated",
       [](const V& v) {
         return K::conv2d(v[0], v[1], {.padding = "same", .dilation_rate = {2, 1}});
       },
       {big, 9, 8, 5},
       {2, 4, 5, 7}},
      {"conv2d_stride_wider_than_kernel",
       [](const V& v) {
         return K::conv2d(v[0], v[1], {.strides = {3, 2}});
       },
       {big, 11, 10, 3},
       {2, 2, 3, 6}},
      {"conv2d_81_cells",
       [](const V& v) { return K::conv2d(v[0], v[1], {.padding = "same"}); },
       {big, 10, 9, 2},
       {9, 9, 2, 3}},
      {"conv3d_strided_same",
       [](const V& v) {
         return K::conv3d(v[0], v[1], {.strides = {2, 1, 2}, .padding = "same"});
       },
       {big, 5, 4, 6, 2},
       {2, 3, 2, 2, 3}},
      {"conv2d_transpose_stride2", nullptr, {big, 5, 4, 6}, {3, 3, 4, 6}},  // built per batch
  };
  for (const auto& c : cases)
    for (const std::int64_t n : {big, big - 1}) {
      SCOPED_TRACE(c.name + ", batch " + std::to_string(n));
      std::vector<std::int64_t> xd(c.x.dims().begin(), c.x.dims().end());
      xd[0] = n;
      const Fn f = !c.f ? Fn([n](const V& v) {
        return K::conv2d_transpose(v[0], v[1], {n, 10, 8, 4},
                                   {.strides = {2, 2}, .padding = "same"});
      })
                        : c.f;
      const Big k{c.name, f, {normal(Shape(xd), 90), normal(c.k, 91, 0.3)}};
      expect_reference_values(k);
      expect_same_bits_on_one_thread(k);
    }
}

// The cpu conv kernels' slots hold their tile GEMM's packs; an image's last tile is shorter, and
// a shorter product can need more pack bytes than a full one (it keeps more depth blocks at once),
// so the plan sizes for both heights: a 3x3 256-channel conv on 14 x 14 images in float32 (21-row
// tiles, a last one of 7) overran its slot before. Every tile height a plan's slot serves must
// fit, for the forward and both gradient passes, in float32 and float64.
TEST(ConvTiling, EveryTileHeightsGemmFitsItsSlot) {
  using ktape::kernels::ConvPass;
  for (const std::int64_t c : {32, 64, 256})
    for (const std::int64_t hw : {7, 14, 28, 56})
      for (const std::size_t elem : {std::size_t{4}, std::size_t{8}})
        for (const ConvPass pass :
             {ConvPass::kForward, ConvPass::kBackpropInput, ConvPass::kBackpropFilter}) {
          ktape::kernels::WindowDims g;
          g.r = 2;
          g.n = 2;
          g.cx = g.cy = c;
          g.in[0] = g.in[1] = g.out[0] = g.out[1] = hw;  // 3x3, same
          g.k[0] = g.k[1] = 3;
          g.pb[0] = g.pb[1] = 1;
          g.in_pixels = g.out_pixels = hw * hw;
          g.k_count = 9;
          const auto p = ktape::kernels::conv_plan(pass, g, elem);
          const std::int64_t pixels = hw * hw;
          for (std::int64_t t = 0; t < p.tiles_per_image; ++t) {
            const std::int64_t rows = std::min(p.rows, pixels - t * p.rows);
            const std::size_t need =
                pass == ConvPass::kBackpropFilter
                    ? ktape::kernels::gemm_scratch(p.cols, p.out_cols, rows, elem)
                    : ktape::kernels::gemm_scratch(rows, p.out_cols, p.cols, elem);
            ASSERT_LE(need, p.gemm_bytes)
                << c << " channels, " << hw << "x" << hw << ", " << elem << "-byte, pass "
                << static_cast<int>(pass) << ", tile of " << rows << " rows";
            ASSERT_LE(p.gemm_offset + p.gemm_bytes, p.slot_bytes);
          }
        }
}

Tensor ph(const Shape& s, const std::string& dt = "float32") {
  return K::placeholder(s, {.dtype = dt});
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
    // The input gradient through a kernel of no output channels is all zeros (the arena's
    // buffer is not: the cpu kernel writes every element), scattered (batch 16) or gathered.
    const Fn dx = [](const V& v) {
      return K::gradients(K::sum(K::conv2d(v[0], v[1], {.padding = "same"})), {v[0]})[0];
    };
    for (const Shape& xs : {Shape{16, 5, 5, 3}, Shape{2, 5, 5, 3}, Shape{0, 5, 5, 3}}) {
      const NDArray gx = run(dx, {normal(xs, 1), normal({3, 3, 3, 0}, 2)}, b);
      EXPECT_EQ(gx.shape(), xs);
      for (std::int64_t i = 0; i < gx.size(); ++i) ASSERT_EQ(gx.item(i), 0.0);
    }
    const Fn pool = [](const V& v) {
      return K::pool2d(v[0], {2, 2}, {.strides = {2, 2}, .pool_mode = "avg"});
    };
    EXPECT_EQ(run(pool, {normal({0, 4, 4, 2}, 3)}, b).shape(), Shape({0, 2, 2, 2}));
  }
}

// Max and average pooling whose windows all lie inside a channels_last input take the cpu
// kernels' register-blocked paths, and MaxPoolGrad with windows that share no cell writes each
// cell once instead of adding into a zeroed dx. Both must give the reference kernels' bits,
// with ties (the first maximum in scan order takes the gradient), -0 against +0 (an average
// sums from +0), NaNs of both signs (the first NaN is the maximum, and is the result),
// infinities, and -0 in dy (dx gets 0 + dy). Windows: tiling the input exactly (26 -> 13;
// 12x18 by 2x3), leaving a last row and column out (11 -> 5) or a last column only (12x13),
// gaps between them (2x2 stride 3; 2x3 stride 3x4), and overlapping (3x3 stride 2; 2x3 stride
// 3x2: the forward path only). 40 channels (a block of registers and a tail) or 32 (whole
// blocks), float32 and float64. The cpu results are computed into the caller's arrays, filled
// with 7s beforehand.
TEST(Pooling, ChannelsLastWindowsInsideTheInputMatchTheReferenceBitForBit) {
  struct Case {
    std::int64_t h, w, k0, k1, s0, s1, ch;
  };
  const Case cases[] = {{26, 26, 2, 2, 2, 2, 40}, {12, 18, 2, 3, 2, 3, 32},
                        {11, 11, 2, 2, 2, 2, 32}, {8, 8, 2, 2, 3, 3, 40},
                        {10, 14, 2, 3, 3, 4, 40}, {9, 9, 3, 3, 2, 2, 40},
                        {10, 14, 2, 3, 3, 2, 32}, {12, 13, 2, 2, 2, 2, 32}};
  for (const Case& c : cases)
    for (DType dt : {DType::float32, DType::float64})
      for (const std::string mode : {"max", "avg"}) {
        const std::int64_t oh = (c.h - c.k0) / c.s0 + 1, ow = (c.w - c.k1) / c.s1 + 1;
        const std::string what = std::to_string(c.h) + "x" + std::to_string(c.w) + " k" +
                                 std::to_string(c.k0) + "x" + std::to_string(c.k1) + " s" +
                                 std::to_string(c.s0) + "x" + std::to_string(c.s1) + " " + mode +
                                 " " + std::string(ktape::dtype_name(dt));
        const Shape xs{3, c.h, c.w, c.ch};
        // Few distinct values, so windows hold ties; many windows hold two NaNs.
        const NDArray xv = awkward(xs, dt, static_cast<std::uint32_t>(c.h * 100 + c.w), 6, 20);
        const NDArray wv = with_negative_zeros(normal(Shape{3, oh, ow, c.ch}, 7).astype(dt));
        const std::string dn(ktape::dtype_name(dt));
        auto x = K::placeholder(xs, {.dtype = dn});
        auto w = K::placeholder(wv.shape(), {.dtype = dn});
        auto y = K::pool2d(x, {c.k0, c.k1}, {.strides = {c.s0, c.s1}, .pool_mode = mode});
        auto g = K::gradients(K::sum(y * w), {x})[0];
        std::vector<NDArray> cpu{NDArray::full(Shape{3, oh, ow, c.ch}, 7.0, dt),
                                 NDArray::full(xs, 7.0, dt)};
        K::function({x, w}, {y, g}, {}, {.backend = "cpu"}).run({xv, wv}, cpu);
        auto ref = K::function({x, w}, {y, g}, {}, {.backend = "reference"})({xv, wv});
        for (std::size_t o = 0; o < 2; ++o)
          for (std::int64_t i = 0; i < cpu[o].size(); ++i) {
            const double a = cpu[o].item(i), b = ref[o].item(i);
            // Overlapping windows add several contributions into a cell of dx, which the two
            // backends sum in different orders: there, dx agrees to rounding.
            const bool summed = o == 1 && (c.k0 > c.s0 || c.k1 > c.s1);
            // A max is a copy of its first NaN, sign and all; a sum of NaNs of both signs
            // has either sign (IEEE leaves it open).
            const bool nans = std::isnan(a) && std::isnan(b);
            const bool same = (nans && (mode == "avg" || std::signbit(a) == std::signbit(b))) ||
                              (a == b && std::signbit(a) == std::signbit(b));
            ASSERT_TRUE(same || (summed && std::abs(a - b) <= 1e-6 * (1 + std::abs(b))))
                << what << (o == 0 ? " y" : " dx") << " element " << i << ": " << a << " vs " << b;
          }
      }
}

// conv -> relu -> max-pool: relu's gradient of the pool's gradient is built as one op,
// MaxPoolReluGrad(y, dy), which must give the bits of the two ops it replaces,
// ReluGrad(y, MaxPoolGrad(y, dy)) (each built here by hand from the fused node's inputs), on
// both backends: windows tiling the input (the cpu kernel's write-once path, 32 channels: whole
// register blocks), leaving a row and column out (zeroed by the caller), with gaps, and
// overlapping (the summing path). x holds ties, NaNs of both signs, infinities and zeros of
// both signs before relu; dy holds -0. float32 and float64, and a batch of unknown size (the
// pool's gradient then reaches relu through a SumToLike to its shape).
TEST(Pooling, ReluThenMaxPoolGradientIsOneOpWithTheBitsOfTwo) {
  struct Case {
    std::int64_t h, w, k, s;
  };
  const Case cases[] = {{26, 26, 2, 2}, {11, 11, 2, 2}, {8, 8, 2, 3}, {9, 9, 3, 2}};
  const double inf = std::numeric_limits<double>::infinity();
  for (const Case& c : cases)
    for (DType dt : {DType::float32, DType::float64}) {
      const std::int64_t o = (c.h - c.k) / c.s + 1;
      const std::string dn(ktape::dtype_name(dt));
      const bool unknown_batch = dt == DType::float32;
      const std::string what =
          std::to_string(c.h) + " k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " " + dn;
      const Shape xs{2, c.h, c.w, 32};
      const NDArray xv = awkward(xs, dt, static_cast<std::uint32_t>(c.h * 10 + c.k), 4, 15);
      const NDArray wv = with_negative_zeros(normal(Shape{2, o, o, 32}, 11).astype(dt));
      auto x = K::placeholder(unknown_batch ? Shape{K::None, c.h, c.w, 32} : xs, {.dtype = dn});
      auto w = K::placeholder(unknown_batch ? Shape{K::None, o, o, 32} : wv.shape(), {.dtype = dn});
      auto p = K::pool2d(K::relu(x), {c.k, c.k}, {.strides = {c.s, c.s}});
      const Tensor gx = K::gradients(K::sum(p * w), {x})[0];
      // With an unknown batch, x's gradient is SumToLike(the fused op, x): the same values.
      const ktape::Node& fused =
          gx.node().op == ktape::Op::SumToLike ? gx.node().inputs[0].node() : gx.node();
      ASSERT_EQ(fused.op, ktape::Op::MaxPoolReluGrad) << what;
      const Tensor& y = fused.inputs[0];
      const Tensor& dy = fused.inputs[1];
      const Tensor two =
          ktape::make_node(ktape::Op::ReluGrad,
                           {y, ktape::make_node(ktape::Op::MaxPoolGrad, {y, dy}, fused.attrs, dt)},
                           ktape::attrs::Relu::make(0, inf, 0), dt);
      for (const std::string backend : {"cpu", "reference"}) {
        const auto r = K::function({x, w}, {gx, two}, {}, {.backend = backend})({xv, wv});
        for (std::int64_t i = 0; i < r[0].size(); ++i) {
          const double a = r[0].item(i), b = r[1].item(i);
          const bool same =
              (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
          ASSERT_TRUE(same) << what << " " << backend << " element " << i << ": " << a << " vs "
                            << b;
        }
      }
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
  const std::string small = error_of<ktape::ValueError>([&] {
    f({NDArray::full({1, 2, 4, 3}, 1.0)});
  });
  EXPECT_HAS(small, "K::conv2d: input of shape (1, 2, 4, 3) is smaller than the window");
  const std::string fed = error_of<ktape::ValueError>([&] {
    f({NDArray::full({1, 4, 4, 2}, 1.0)});
  });
  EXPECT_HAS(fed, "was fed an array of shape (1, 4, 4, 2)");
}

}  // namespace
