// Thread control (engine/threads.hpp) and results independent of the thread count: the same
// training steps of an MLP, an LSTM loop and a CNN give the same bits at 1, 2 and 16 threads.
// Each run is made in a oneTBB arena of that many slots, so 16 threads really run even on a
// machine with fewer cores (a global limit alone would cap them at the core count).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <tbb/task_arena.h>

#include <algorithm>
#include <mutex>

#include "engine/parallel.hpp"

#include "ktape/ktape.hpp"
#include "test_util.hpp"
#include "thread_util.hpp"

namespace {

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;
using V = std::vector<Tensor>;
using ktape::thread_util::expect_reference_bits;
using ktape::thread_util::in_arena;
using ktape::thread_util::pattern;

NDArray labels(std::int64_t n) {
  NDArray t(Shape{n}, DType::int32);
  for (std::int64_t i = 0; i < n; ++i) t.data<std::int32_t>()[i] = static_cast<int>((i * 7) % 10);
  return t;
}

// Builds a model's training step (SGD) fresh, runs `steps` steps at `threads` threads and
// returns the final weights and the last loss.
std::vector<NDArray> train_here(const std::string& model, int threads, int steps) {
  ktape::set_num_threads(threads);
  std::vector<Tensor> params;
  Tensor x, loss;
  NDArray xv;
  auto t = K::placeholder({K::None}, {.dtype = "int32"});
  auto glorot = [](std::int64_t a, std::int64_t b, std::uint64_t seed) {
    return K::random_uniform_variable({a, b}, -0.1, 0.1, {.seed = seed});
  };
  if (model == "mlp") {
    x = K::placeholder({K::None, 784});
    auto W1 = glorot(784, 256, 1), W2 = glorot(256, 10, 2);
    auto b1 = K::zeros({256});
    params = {W1, b1, W2};
    loss = K::mean(
        K::sparse_categorical_crossentropy(t, K::softmax(K::dot(K::relu(K::dot(x, W1) + b1), W2))));
    xv = pattern({200, 784});
  } else if (model == "lstm") {
    x = K::placeholder({K::None, 12, 16});
    auto W = glorot(16, 128, 3), U = glorot(32, 128, 4), Wd = glorot(32, 10, 5);
    auto b = K::zeros({128});
    params = {W, U, b, Wd};
    auto step = [&](const Tensor& xt, const V& s) {
      auto z = K::dot(xt, W) + K::dot(s[0], U) + b;
      auto gate = [&](int k) { return K::slice(z, {0, 32 * k}, {-1, 32}); };
      auto c = K::sigmoid(gate(1)) * s[1] + K::sigmoid(gate(0)) * K::tanh(gate(2));
      auto h = K::sigmoid(gate(3)) * K::tanh(c);
      return std::pair<Tensor, V>{h, {h, c}};
    };
    auto h0 = K::zeros_like(K::dot(K::sum(x, 1), K::zeros({16, 32})));
    loss = K::mean(K::sparse_categorical_crossentropy(
        t, K::softmax(K::dot(K::rnn(step, x, {h0, h0}).last_output, Wd))));
    xv = pattern({96, 12, 16});
  } else {
    x = K::placeholder({K::None, 28, 28, 1});
    auto k1 = K::random_uniform_variable({3, 3, 1, 16}, -0.2, 0.2, {.seed = 6});
    auto k2 = K::random_uniform_variable({3, 3, 16, 32}, -0.1, 0.1, {.seed = 7});
    auto Wd = glorot(5 * 5 * 32, 10, 8);
    params = {k1, k2, Wd};
    auto block = [](const Tensor& h, const Tensor& k) {
      return K::pool2d(K::relu(K::conv2d(h, k)), {2, 2}, {.strides = {2, 2}});
    };
    loss = K::mean(K::sparse_categorical_crossentropy(
        t, K::softmax(K::dot(K::batch_flatten(block(block(x, k1), k2)), Wd))));
    xv = pattern({64, 28, 28, 1});
  }
  const auto g = K::gradients(loss, params);
  std::vector<Tensor> ups;
  for (std::size_t i = 0; i < params.size(); ++i)
    ups.push_back(K::update_sub(params[i], 0.05 * g[i]));
  auto f = K::function({x, t}, {loss}, ups);
  std::vector<NDArray> out;
  const NDArray tv = labels(xv.shape()[0]);
  for (int s = 0; s < steps; ++s) out = f({xv, tv});
  for (const auto& p : params) out.push_back(K::get_value(p));
  ktape::set_num_threads(0);
  return out;
}

std::vector<NDArray> train(const std::string& model, int threads, int steps) {
  tbb::task_arena arena(threads);
  std::vector<NDArray> out;
  arena.execute([&] {
    EXPECT_EQ(tbb::this_task_arena::max_concurrency(), threads);
    out = train_here(model, threads, steps);
  });
  return out;
}

class SameBits : public ::testing::TestWithParam<const char*> {};

TEST_P(SameBits, AtOneTwoAndSixteenThreads) {
  const auto one = train(GetParam(), 1, 3);
  for (int threads : {2, 16}) {
    const auto many = train(GetParam(), threads, 3);
    ASSERT_EQ(one.size(), many.size());
    for (std::size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(0, std::memcmp(one[i].raw_data(), many[i].raw_data(), one[i].nbytes()))
          << (i == 0 ? std::string("the loss") : "weight " + std::to_string(i - 1)) << " at "
          << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SameBits, ::testing::Values("mlp", "lstm", "cnn"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param);
                         });

// The bias gradient's column sums (SumToLike) split by row blocks with partial sums (512 and
// 32 wide), by columns (5000 wide rows) or not at all (tiny): the same bits at 1, 2 and 16
// threads, and within float32 rounding of a double sum computed here.
TEST(Threads, BiasGradientSumsGiveTheSameBitsAtAnyThreadCount) {
  for (const Shape& shape : {Shape{3000, 512}, Shape{90000, 32}, Shape{40, 5000}, Shape{7, 3}}) {
    const std::int64_t w = shape[1], rows = shape[0];
    const NDArray yv = pattern(shape);
    std::vector<NDArray> got;
    for (int threads : {1, 2, 16}) {
      tbb::task_arena arena(threads);
      arena.execute([&] {
        ktape::set_num_threads(threads);
        K::clear_session();
        auto y = K::placeholder({K::None, w});
        auto b = K::variable(NDArray::full(Shape{w}, 0.0));
        auto g = K::gradients(K::sum((y + b) * y), {b})[0];  // d/db = column sums of y
        got.push_back(K::function({y}, {g})({yv})[0]);
        ktape::set_num_threads(0);
      });
    }
    for (std::size_t k = 1; k < got.size(); ++k)
      EXPECT_EQ(0, std::memcmp(got[0].raw_data(), got[k].raw_data(), got[0].nbytes()))
          << shape.str() << " run " << k;
    for (std::int64_t j = 0; j < w; j += (w > 64 ? 37 : 1)) {
      double want = 0;
      for (std::int64_t r = 0; r < rows; ++r) want += static_cast<double>(yv.item(r * w + j));
      EXPECT_NEAR(got[0].item(j), want, 1e-5 * static_cast<double>(rows))
          << shape.str() << " " << j;
    }
  }
}

// The grain policy (engine/parallel.hpp) cuts even chunks, the same at any thread count:
// 32 items of cost 4096 give four chunks of 8 (not 9, 9, 9, 5); 65536 of cost 2 at alignment 64
// four of 16384 (not three of 20032 and one of 5440); 100 of cost 1000 three of 34, 34, 32; work
// below two tasks' worth one chunk.
TEST(Threads, TheGrainPolicyCutsEvenChunksAtAnyThreadCount) {
  struct Case {
    std::int64_t n;
    double cost;
    std::int64_t align;
    std::vector<std::int64_t> ends;  // of the chunks, in order
  };
  const std::vector<Case> cases = {
      {32, 4096, 1, {8, 16, 24, 32}},
      {65536, 2, 64, {16384, 32768, 49152, 65536}},
      {100, 1000, 1, {34, 68, 100}},  // grain 40: 3 chunks of 34, 34, 32 (not 40, 40, 20)
      {10, 1000, 1, {10}}};           // below two tasks' worth: serial
  for (const Case& c : cases)
    for (int threads : {1, 2, 16}) {
      tbb::task_arena arena(threads);
      std::mutex mu;
      std::vector<std::pair<std::int64_t, std::int64_t>> cuts;
      arena.execute([&] {
        ktape::parallel_for(
            c.n, c.cost,
            [&](std::int64_t b, std::int64_t e) {
              std::lock_guard<std::mutex> lock(mu);
              cuts.emplace_back(b, e);
            },
            c.align);
      });
      std::sort(cuts.begin(), cuts.end());
      ASSERT_EQ(cuts.size(), c.ends.size()) << c.n << " " << threads;
      for (std::size_t i = 0; i < cuts.size(); ++i)
        EXPECT_EQ(cuts[i],
                  (std::pair<std::int64_t, std::int64_t>(i == 0 ? 0 : c.ends[i - 1], c.ends[i])))
            << c.n << " " << threads;
    }
}

// Rows longer than the softmax kernels' block of exps (2,048 values: ops/kernels/softmax.hpp)
// take another path, row by row: softmax, log-softmax (a crossentropy from logits) and the sparse
// crossentropy over 3,000 classes give the reference's bits too, and sum to what they should.
TEST(Threads, SoftmaxLongRowsGiveTheReferenceBits) {
  const NDArray xv = pattern({6, 3000}, 9.0);
  NDArray tv(Shape{6}, DType::int32);
  for (std::int64_t i = 0; i < tv.size(); ++i)
    tv.data<std::int32_t>()[i] = static_cast<std::int32_t>(i * 499);
  auto run = [&](const char* backend, int threads) {
    return in_arena(threads, [&] {
      auto x = K::placeholder({K::None, 3000});
      auto t = K::placeholder({K::None}, {.dtype = "int32"});
      const std::vector<Tensor> outs{
          K::softmax(x), K::categorical_crossentropy(K::softmax(x), x, {.from_logits = true}),
          K::sparse_categorical_crossentropy(t, x, {.from_logits = true})};
      return K::function({x, t}, outs, {}, {.backend = backend})({xv, tv});
    });
  };
  const auto ref = expect_reference_bits(run, {1, 2});
  for (std::int64_t r = 0; r < 6; ++r) {  // against sums in double
    double mx = -1e300, s = 0.0, total = 0.0;
    for (std::int64_t j = 0; j < 3000; ++j) mx = std::max(mx, xv.item(r * 3000 + j));
    for (std::int64_t j = 0; j < 3000; ++j) s += std::exp(xv.item(r * 3000 + j) - mx);
    for (std::int64_t j = 0; j < 3000; ++j) total += ref[0].item(r * 3000 + j);
    EXPECT_NEAR(total, 1.0, 1e-5) << r;
    const double ce = mx + std::log(s) - xv.item(r * 3000 + r * 499);
    EXPECT_NEAR(ref[2].item(r), ce, 1e-5 * ce) << r;
  }
}

// K::max and K::min over the last axes take runs of 32 or more values 16 lanes at a time on the
// cpu backend (ops/kernels/cpu/reduce.cpp): the reference's bits, whose in-order walk keeps the
// first of equal values. Hand rows of 40 (and runs of 7 x 8 over two axes): zeros of both signs
// in either order (the first one wins), a NaN in the tail, -inf, a tied maximum; float32,
// float64, int32 and int64.
TEST(Threads, MaxMinOfLongRowsGiveTheReferenceBits) {
  constexpr std::int64_t kRows = 7, kLen = 40;
  std::vector<double> v(kRows * kLen);
  for (std::int64_t r = 0; r < kRows; ++r)
    for (std::int64_t j = 0; j < kLen; ++j)
      v[r * kLen + j] = r == 0 ? static_cast<double>((j * 17) % kLen + 1)  // a permutation of 1..40
                        : r == 4 ? 1.0 + static_cast<double>(j % 7)
                                 : -1.0 - static_cast<double>((j * 13) % 11);
  v[1 * kLen + 3] = -0.0, v[1 * kLen + 20] = 0.0;   // max -0: the first zero
  v[2 * kLen + 5] = 0.0, v[2 * kLen + 35] = -0.0;   // max +0
  v[3 * kLen + 33] = std::nan("");                  // max and min NaN
  v[4 * kLen + 10] = 0.0, v[4 * kLen + 19] = -0.0;  // min +0 (the -0 in an earlier lane)
  v[5 * kLen + 17] = -std::numeric_limits<double>::infinity();
  v[6 * kLen + 2] = 7.5, v[6 * kLen + 30] = 7.5;
  for (const char* dtype : {"float32", "float64", "int32", "int64"}) {
    const bool ints = std::string(dtype) == "int32" || std::string(dtype) == "int64";
    const std::string dt(dtype);
    NDArray xv(Shape{kRows, kLen}, dt == "int32"     ? DType::int32
                                   : dt == "int64"   ? DType::int64
                                   : dt == "float32" ? DType::float32
                                                     : DType::float64);
    for (std::int64_t i = 0; i < xv.size(); ++i) {
      const double e = !ints || std::isfinite(v[i]) ? v[i] : std::isnan(v[i]) ? 3.0 : -100.0;
      if (dt == "int32")
        xv.data<std::int32_t>()[i] = static_cast<std::int32_t>(e * 2);
      else if (dt == "int64")
        xv.data<std::int64_t>()[i] = static_cast<std::int64_t>(e * 2) << 33;
      else if (xv.dtype() == DType::float32)
        xv.data<float>()[i] = static_cast<float>(e);
      else
        xv.data<double>()[i] = e;
    }
    auto run = [&](const char* backend, int threads) {
      return in_arena(threads, [&] {
        auto x = K::placeholder({kRows, kLen}, {.dtype = dtype});
        auto x3 = K::reshape(x, {5, 7, 8});
        return K::function(
            {x},
            {K::max(x, {.axis = std::vector<int>{-1}}), K::min(x, {.axis = std::vector<int>{-1}}),
             K::max(x3, {.axis = std::vector<int>{1, 2}}),
             K::min(x3, {.axis = std::vector<int>{1, 2}})},
            {}, {.backend = backend})({xv});
      });
    };
    const auto ref = expect_reference_bits(run, {1, 2}, dtype);
    if (ints) continue;
    const NDArray& mx = ref[0];
    const NDArray& mn = ref[1];
    EXPECT_EQ(mx.item(0), 40.0);
    EXPECT_EQ(mn.item(0), 1.0);
    EXPECT_TRUE(mx.item(1) == 0.0 && std::signbit(mx.item(1))) << mx.item(1);
    EXPECT_TRUE(mx.item(2) == 0.0 && !std::signbit(mx.item(2))) << mx.item(2);
    EXPECT_TRUE(std::isnan(mx.item(3)) && std::isnan(mn.item(3)));
    EXPECT_TRUE(mn.item(4) == 0.0 && !std::signbit(mn.item(4))) << mn.item(4);
    EXPECT_EQ(mn.item(5), -std::numeric_limits<double>::infinity());
    EXPECT_EQ(mx.item(6), 7.5);
  }
}

// A float sum of everything (K::sum, K::mean with no axis) adds blocks of 1,024 or more values in
// 16 lanes on the cpu backend (lane_sum in ops/kernels/cpu/reduce.cpp): exact where every partial
// sum is (0..1060, whose sum 562,330 a float holds), the lanes' own rounding by hand, the same
// bits at any thread count, and within rounding of the reference's in-order sum and of a sum in
// double.
TEST(Threads, SumOfEverythingInLanes) {
  auto run = [](const NDArray& xv, const char* backend, int threads) {
    return in_arena(threads, [&] {
      auto x = K::placeholder({K::None});
      return K::function({x}, {K::sum(x), K::mean(x)}, {}, {.backend = backend})({xv});
    });
  };
  NDArray small(Shape{1061}, DType::float32);
  for (std::int64_t i = 0; i < small.size(); ++i) small.data<float>()[i] = static_cast<float>(i);
  for (const char* backend : {"cpu", "reference"}) {
    const auto out = run(small, backend, 2);
    EXPECT_EQ(out[0].item(0), 562330.0) << backend;
    EXPECT_EQ(out[1].item(0), 530.0) << backend;
  }
  // 2^24 then 1,023 ones: in order, each one rounds away (2^24 + 1 is a tie, to even); in lanes
  // only lane 0's 63 do, and the other lanes' 15 x 64 ones are added exactly.
  NDArray ones(Shape{1024}, DType::float32);
  for (std::int64_t i = 0; i < ones.size(); ++i)
    ones.data<float>()[i] = i == 0 ? 16777216.0f : 1.0f;
  EXPECT_EQ(run(ones, "cpu", 1)[0].item(0), 16777216.0 + 960.0);
  EXPECT_EQ(run(ones, "reference", 1)[0].item(0), 16777216.0);
  NDArray big(Shape{200003}, DType::float32);  // two blocks and a tail of 3 values
  double exact = 0.0;
  for (std::int64_t i = 0; i < big.size(); ++i) {
    big.data<float>()[i] = static_cast<float>(i % 1000) * 0.001f + 0.5f;
    exact += static_cast<double>(big.data<float>()[i]);
  }
  const auto one = run(big, "cpu", 1), two = run(big, "cpu", 2), ref = run(big, "reference", 1);
  for (std::size_t k = 0; k < 2; ++k)
    EXPECT_EQ(0, std::memcmp(one[k].raw_data(), two[k].raw_data(), one[k].nbytes())) << k;
  EXPECT_NEAR(one[0].item(0), exact, 1e-6 * exact);
  EXPECT_NEAR(one[0].item(0), ref[0].item(0), 1e-4 * exact);
  EXPECT_NEAR(one[1].item(0), exact / 200003.0, 1e-6 * exact / 200003.0);
}

// Softmax (over the last axis and over a middle one), log-softmax (in a crossentropy from logits
// over the middle axis) and the sparse softmax
// cross-entropy split their rows over threads on the cpu backend: the same bits as the serial
// reference backend at 1, 2 and 16 threads; a bad label is reported for its first row.
TEST(Threads, SoftmaxRowsSplitGiveTheReferenceBits) {
  const NDArray xv = pattern({600, 7, 40}, 6.0);
  NDArray tv(Shape{4200}, DType::int32);
  for (std::int64_t i = 0; i < tv.size(); ++i)
    tv.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 13) % 40);
  auto run = [&](const char* backend, int threads) {
    return in_arena(threads, [&] {
      auto x = K::placeholder({K::None, 7, 40});
      auto t = K::placeholder({K::None}, {.dtype = "int32"});
      auto logits = K::reshape(x, {-1, 40});
      const std::vector<Tensor> outs{
          K::softmax(x), K::softmax(x, 1),
          K::categorical_crossentropy(K::softmax(x, 1) * 0.5, x, {.from_logits = true, .axis = 1}),
          K::sparse_categorical_crossentropy(t, logits, {.from_logits = true})};
      return K::function({x, t}, outs, {}, {.backend = backend})({xv, tv});
    });
  };
  expect_reference_bits(run, {1, 2, 16});
  // One row by hand: softmax([0, ln 2, ln 5]) = [1/8, 2/8, 5/8].
  const double third = std::log(5.0);
  K::clear_session();
  auto v = K::placeholder({K::None, 3});
  auto sm = K::function({v}, {K::softmax(v)})(
      {NDArray::from_values({0.0, std::log(2.0), third}, Shape{1, 3}, DType::float32)});
  EXPECT_NEAR(sm[0].item(0), 0.125, 1e-6);
  EXPECT_NEAR(sm[0].item(2), 0.625, 1e-6);
  // In float64 with log-softmax: the crossentropy of class 2 from those logits is -ln(5/8).
  K::clear_session();
  auto v64 = K::placeholder({K::None, 3}, {.dtype = "float64"});
  auto t64 = K::placeholder({K::None, 3}, {.dtype = "float64"});
  auto ce = K::function(
      {v64, t64}, {K::softmax(v64), K::categorical_crossentropy(t64, v64, {.from_logits = true})})(
      {NDArray::from_values({0.0, std::log(2.0), third}, Shape{1, 3}, DType::float64),
       NDArray::from_values({0.0, 0.0, 1.0}, Shape{1, 3}, DType::float64)});
  EXPECT_NEAR(ce[0].item(1), 0.25, 1e-15);
  EXPECT_NEAR(ce[1].item(0), -std::log(0.625), 1e-15);
  // Rows 5 and 3000 out of range: the message names row 5 at any thread count.
  tv.data<std::int32_t>()[3000] = 40;
  tv.data<std::int32_t>()[5] = -1;
  for (int threads : {1, 2, 16}) {
    tbb::task_arena arena(threads);
    arena.execute([&] {
      K::clear_session();
      auto x = K::placeholder({K::None, 40});
      auto t = K::placeholder({K::None}, {.dtype = "int32"});
      auto f =
          K::function({x, t}, {K::sparse_categorical_crossentropy(t, x, {.from_logits = true})});
      const std::string msg = ktape::testing_util::error_of<ktape::ValueError>([&] {
        f({pattern({4200, 40}), tv});
      });
      EXPECT_HAS(msg, "target -1 at row 5 is out of range [0, 40)");
    });
  }
}

// Sum, mean, max, min and prod over every set of axes of an (80, 60, 50) array split their outputs
// over threads on the cpu backend: the same bits at 1, 2 and 16 threads, and the reference
// backend's (each output takes its inputs in the same order), except float sums, products and
// means over axes {0, 1} (few outputs along the kept last axis) and {0, 1, 2} (one value), whose
// reduced positions split into blocks: within rounding of it. float32, float64, int32 and int64;
// a NaN wins max and min.
TEST(Threads, ReductionsOverAxesGiveTheReferenceBits) {
  const std::vector<std::vector<int>> axes_sets = {{2},    {0},    {1},      {0, 2},
                                                   {1, 2}, {0, 1}, {0, 1, 2}};
  for (const char* dt : {"float32", "float64", "int32", "int64"}) {
    const bool ints = std::string(dt) == "int32" || std::string(dt) == "int64";
    NDArray xv(Shape{80, 60, 50}, ktape::dtype_from_name(dt));
    for (std::int64_t i = 0; i < xv.size(); ++i)
      xv.set_item(i, ints ? static_cast<double>((i * 7919) % 201 - 100)
                          : 1.0 + 0.01 * std::sin(0.37 * static_cast<double>(i)));
    if (!ints) xv.set_item(777, std::nan(""));
    auto run = [&](const char* backend, int threads) {
      std::vector<NDArray> out;
      tbb::task_arena arena(threads);
      arena.execute([&] {
        K::clear_session();
        auto x = K::placeholder({K::None, 60, 50}, {.dtype = dt});
        std::vector<Tensor> outs;
        for (const auto& axes : axes_sets) {
          const K::ReduceOptions o{.axis = axes, .keepdims = axes.size() == 2};
          outs.push_back(K::sum(x, o));
          outs.push_back(K::max(x, o));
          outs.push_back(K::min(x, o));
          outs.push_back(K::prod(x, o));
          if (!ints) outs.push_back(K::mean(x, o));
        }
        out = K::function({x}, outs, {}, {.backend = backend})({xv});
      });
      return out;
    };
    const auto ref = run("reference", 1);
    const auto one = run("cpu", 1);
    for (int threads : {1, 2, 16}) {
      const auto cpu = run("cpu", threads);
      ASSERT_EQ(cpu.size(), ref.size());
      for (std::size_t k = 0; k < ref.size(); ++k) {
        ASSERT_EQ(cpu[k].shape(), ref[k].shape()) << dt << " output " << k;
        EXPECT_EQ(0, std::memcmp(cpu[k].raw_data(), one[k].raw_data(), one[k].nbytes()))
            << dt << " output " << k << " at " << threads << " threads vs 1";
        // Axes {0, 1} keep 50 outputs along the last axis and axes {0, 1, 2} one: the reduced
        // positions split into blocks, so float sums, products and means are within rounding
        // of the reference.
        const std::size_t per = ints ? 4 : 5, op = k % per;
        const bool blocked = k / per >= 5 && !ints && (op == 0 || op == 3 || op == 4);
        if (!blocked) {
          EXPECT_EQ(0, std::memcmp(cpu[k].raw_data(), ref[k].raw_data(), ref[k].nbytes()))
              << dt << " output " << k << " at " << threads << " threads";
          continue;
        }
        for (std::int64_t i = 0; i < ref[k].size(); ++i)
          if (!std::isnan(ref[k].item(i)) || !std::isnan(cpu[k].item(i))) {
            EXPECT_NEAR(cpu[k].item(i), ref[k].item(i),
                        (std::string(dt) == "float32" ? 1e-5 : 1e-13) * std::abs(ref[k].item(i)))
                << dt << " output " << k << " @" << i;
          }
      }
    }
    if (ints) {  // sum over axis 2 of row (0, 0), by hand
      std::int64_t want = 0;
      for (std::int64_t j = 0; j < 50; ++j) want += (j * 7919) % 201 - 100;
      EXPECT_EQ(ref[0].item(0), static_cast<double>(want)) << dt;
    } else {  // element 777 is (0, 15, 27): max and min over axis 2 of row (0, 15) are NaN
      const auto cpu = run("cpu", 2);
      for (std::size_t k : {1, 2}) {
        EXPECT_TRUE(std::isnan(ref[k].item(15))) << dt << " " << k;
        EXPECT_TRUE(std::isnan(cpu[k].item(15))) << dt << " " << k;
      }
    }
  }
}

// K::sum and K::mean of a whole (300, 1000) float32 array: contiguous blocks fixed by the size,
// the same bits at 1, 2 and 16 threads, within rounding of a double sum computed here.
TEST(Threads, WholeArrayReductionsGiveTheSameBitsAtAnyThreadCount) {
  const NDArray xv = pattern({300, 1000});
  double want = 0;
  for (std::int64_t i = 0; i < xv.size(); ++i) want += xv.item(i);
  std::vector<std::vector<NDArray>> got;
  for (int threads : {1, 2, 16}) {
    tbb::task_arena arena(threads);
    arena.execute([&] {
      K::clear_session();
      auto x = K::placeholder({K::None, 1000});
      got.push_back(K::function({x}, {K::sum(x), K::mean(x), K::max(x)})({xv}));
    });
  }
  for (std::size_t t = 1; t < got.size(); ++t)
    for (std::size_t k = 0; k < 3; ++k)
      EXPECT_EQ(0, std::memcmp(got[0][k].raw_data(), got[t][k].raw_data(), got[0][k].nbytes()))
          << "output " << k << " run " << t;
  EXPECT_NEAR(got[0][0].item(0), want, 1e-2);
  EXPECT_NEAR(got[0][1].item(0), want / 300000.0, 1e-8);
  EXPECT_NEAR(got[0][2].item(0), 1.0, 1e-6);  // sin reaches 1 within float32 rounding
}

TEST(Threads, SetAndQueryTheLimit) {
  ktape::set_num_threads(1);
  EXPECT_EQ(ktape::num_threads(), 1);
  ktape::set_num_threads(0);
  EXPECT_GE(ktape::num_threads(), 1);
  const std::string msg =
      ktape::testing_util::error_of<ktape::ValueError>([] { ktape::set_num_threads(-2); });
  EXPECT_HAS(msg, "ktape::set_num_threads: n must be >= 0 (0: every core), got -2");
}

}  // namespace
