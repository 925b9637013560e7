// One Function called from several threads at once: every call returns its own inputs' results,
// updates are committed atomically and none is lost (calls are serializable), readers never see
// a half-written variable, loops run concurrently, and get_value / set_value are safe beside
// calls. Also built with -fsanitize=thread in CI (scripts/sanitize.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "ktape/ktape.hpp"

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;

namespace {

constexpr int kThreads = 4;

#ifdef KTAPE_TSAN
constexpr int kCalls = 200;  // TSan runs code ~10x slower
#else
constexpr int kCalls = 2000;
#endif

// Runs body(t) on kThreads threads at once and joins them.
template <class F>
void run_threads(F body) {
  std::vector<std::thread> ts;
  std::atomic<int> ready{0};
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      body(t);
    });
  for (auto& th : ts) th.join();
}

NDArray input_for(int t, std::int64_t n) {
  NDArray a(Shape{1, n}, DType::float32);
  for (std::int64_t i = 0; i < n; ++i) a.set_item(i, 0.01 * static_cast<double>((t + 1) * (i % 7)));
  return a;
}

}  // namespace

TEST(Concurrency, EachCallComputesItsOwnInputs) {
  K::clear_session();
  const std::int64_t n = 64;
  auto x = K::placeholder({K::None, n});
  auto W = K::variable(NDArray::full({n, 32}, 0.05));
  auto y = K::tanh(K::dot(x, W)) * 2.0 + 1.0;
  auto f = K::function({x}, {K::sum(y, 1), y});
  std::vector<std::vector<NDArray>> expected(kThreads);
  for (int t = 0; t < kThreads; ++t) expected[static_cast<std::size_t>(t)] = f({input_for(t, n)});
  std::atomic<int> wrong{0};
  run_threads([&](int t) {
    const NDArray in = input_for(t, n);
    std::vector<NDArray> out;
    for (int k = 0; k < kCalls; ++k) {
      f.run({in}, out);
      const auto& e = expected[static_cast<std::size_t>(t)];
      if (out[0].to_vector() != e[0].to_vector() || out[1].to_vector() != e[1].to_vector())
        wrong.fetch_add(1);
    }
  });
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(f.num_plans(), static_cast<std::size_t>(kThreads));  // one pool, grown on demand
}

TEST(Concurrency, UpdatesAreAtomicAndNoneIsLost) {
  K::clear_session();
  // Each call adds its thread's number to every element of c and to the scalar total, and
  // returns the values it read: a serial execution would give exactly these sums.
  auto c = K::variable(NDArray::full({1000}, 0.0, DType::float64), {.dtype = "float64"});
  auto total = K::variable(0.0, {.dtype = "float64"});
  auto inc = K::placeholder({}, {.dtype = "float64"});
  auto f = K::function({inc}, {K::max(c) - K::min(c)},
                       {K::update_add(c, K::ones_like(c) * inc), K::update_add(total, inc)});
  std::atomic<int> torn{0};
  run_threads([&](int t) {
    const NDArray v = NDArray::scalar(t + 1, DType::float64);
    std::vector<NDArray> out;
    for (int k = 0; k < kCalls; ++k) {
      f.run({v}, out);
      if (out[0].item() != 0.0) torn.fetch_add(1);  // saw a half-committed c
    }
  });
  const double want = kCalls * (1 + 2 + 3 + 4);
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(K::get_value(total).item(), want);
  const NDArray cv = K::get_value(c);
  for (std::int64_t i = 0; i < cv.size(); ++i) ASSERT_EQ(cv.item(i), want) << i;
}

TEST(Concurrency, ReadersNeverSeeATornVariable) {
  K::clear_session();
  // A trainer rewrites all of W (every element equal) while other threads read it through a
  // second Function and through get_value, and another sets it with set_value.
  const std::int64_t n = 1 << 16;
  auto W = K::variable(NDArray::full({n}, 0.0));
  auto one = K::placeholder(Shape{});
  auto train = K::function({one}, {}, {K::update(W, W + one)});
  auto read = K::function({}, {K::max(W) - K::min(W), W * 1.0});
  std::atomic<int> torn{0};
  std::atomic<bool> done{false};
  auto uniform = [](const NDArray& a) {
    const float* p = a.data<float>();
    for (std::int64_t i = 1; i < a.size(); ++i)
      if (p[i] != p[0]) return false;
    return true;
  };
  run_threads([&](int t) {
    const int calls = kCalls / 10;
    if (t == 0) {
      for (int k = 0; k < calls; ++k) train({NDArray::scalar(1.0)});
      done = true;
    } else if (t == 1) {
      for (int k = 0; k < calls && !done; ++k) K::set_value(W, NDArray::full({n}, -k));
    } else {
      std::vector<NDArray> out;
      for (int k = 0; k < calls; ++k) {
        read.run({}, out);
        if (out[0].item() != 0.0 || !uniform(out[1])) torn.fetch_add(1);
        if (!uniform(K::get_value(W))) torn.fetch_add(1);
      }
    }
  });
  EXPECT_EQ(torn.load(), 0);
  EXPECT_TRUE(uniform(K::get_value(W)));
}

TEST(Concurrency, LoopsRunConcurrently) {
  K::clear_session();
  // A symbolic rnn (a Scan with its own body plan) and its gradient, called from every thread.
  auto x = K::placeholder({K::None, 6, 3});
  auto W = K::variable(NDArray::full({3, 5}, 0.1));
  auto U = K::variable(NDArray::full({5, 5}, 0.05));
  auto step = [&](const Tensor& xt,
                  const std::vector<Tensor>& s) -> std::pair<Tensor, std::vector<Tensor>> {
    Tensor h = K::tanh(K::dot(xt, W) + K::dot(s[0], U));
    return {h, {h}};
  };
  auto h0 = K::dot(K::sum(x, 1), W) * 0.0;  // (samples, 5) zeros
  auto r = K::rnn(step, x, {h0});
  auto loss = K::sum(r.last_output);
  auto g = K::gradients(loss, {W, U});
  auto f = K::function({x}, {loss, g[0], g[1]});
  auto in = [](int t) {
    NDArray a(Shape{2, 6, 3}, DType::float32);
    for (std::int64_t i = 0; i < a.size(); ++i)
      a.set_item(i, 0.1 * std::sin(static_cast<double>(i * (t + 1))));
    return a;
  };
  std::vector<std::vector<NDArray>> expected(kThreads);
  for (int t = 0; t < kThreads; ++t) expected[static_cast<std::size_t>(t)] = f({in(t)});
  std::atomic<int> wrong{0};
  run_threads([&](int t) {
    const NDArray a = in(t);
    std::vector<NDArray> out;
    for (int k = 0; k < kCalls; ++k) {
      f.run({a}, out);
      for (std::size_t i = 0; i < out.size(); ++i)
        if (out[i].to_vector() != expected[static_cast<std::size_t>(t)][i].to_vector())
          wrong.fetch_add(1);
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Concurrency, TrainingStepsFromTwoThreadsMatchTheSameStepsInSomeOrder) {
  K::clear_session();
  // SGD on a linear model: with every thread feeding the same batch, any serial order of the
  // same number of steps gives the same weights; a lost or torn update would not.
  auto x = K::placeholder({K::None, 4}, {.dtype = "float64"});
  auto W = K::variable(NDArray::full({4, 1}, 0.0, DType::float64), {.dtype = "float64"});
  auto loss = K::mean(K::square(K::dot(x, W) - 1.0));
  auto gW = K::gradients(loss, {W})[0];
  auto step = K::function({x}, {loss}, {K::update_sub(W, gW * 0.01)});
  NDArray batch(Shape{8, 4}, DType::float64);
  for (std::int64_t i = 0; i < batch.size(); ++i)
    batch.set_item(i, 0.1 * static_cast<double>(i % 5));
  const int steps = kCalls / 10;
  run_threads([&](int) {
    for (int k = 0; k < steps; ++k) step({batch});
  });
  const NDArray parallel = K::get_value(W);
  K::set_value(W, NDArray::full({4, 1}, 0.0, DType::float64));
  for (int k = 0; k < steps * kThreads; ++k) step({batch});
  EXPECT_EQ(parallel.to_vector(), K::get_value(W).to_vector());
}
