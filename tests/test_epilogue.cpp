// MatMul epilogues (engine/fusion.hpp MatMulEpilogue, step 3e of Function's compile): an exact
// elementwise pass that reads a product runs inside the MatMul (over each band of rows as its
// tiles finish on one thread, or on more where the tiles are whole rows; else after the product).
// A plan with epilogues must give exactly the bits of the unfused plan (the same kernels compute
// the same elements) on every GEMM library and at any thread count, and a pass must stay out of
// the product when running it early would change what anything reads.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "ktape/ktape.hpp"
#include "ops/kernels/cpu/gemm.hpp"
#include "test_util.hpp"

namespace K = ktape::backend;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;
using ktape::kernels::GemmLibrary;
namespace kk = ktape::kernels;

namespace {

using ktape::testing_util::expect_identical;
using ktape::testing_util::ramp;

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The GEMM libraries this build and CPU have; restores the default when done.
struct Libraries {
  GemmLibrary saved = kk::gemm_library();
  std::vector<GemmLibrary> all;
  Libraries() {
    for (auto lib : {GemmLibrary::xsmm, GemmLibrary::blis, GemmLibrary::eigen})
      if (kk::set_gemm_library(lib)) all.push_back(lib);
    kk::set_gemm_library(saved);
  }
  ~Libraries() { kk::set_gemm_library(saved); }
};

// f() run in a oneTBB arena of n threads, oneTBB's limit raised (or lowered) to n for it, so
// that 16 threads really run on a 2-core machine. One thread runs an epilogue band by band; more
// do so only where the product's tiles are whole rows, else after the product (gemm.hpp
// GemmDone).
template <class F>
auto in_threads(int n, F&& f) {
  const tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                                  static_cast<std::size_t>(n));
  tbb::task_arena arena(n);
  return arena.execute(std::forward<F>(f));
}

// run(fuse, plan) unfused, then fused in an arena of `threads`: every result the same bits, and
// `epilogues` epilogues in the fused plan. run returns an NDArray or a vector of them.
std::vector<NDArray> as_list(NDArray a) { return {std::move(a)}; }
std::vector<NDArray> as_list(std::vector<NDArray> a) { return a; }
template <class Run>
void expect_unfused_bits(Run&& run, int threads, std::size_t epilogues, const std::string& what) {
  const auto want = as_list(run(false, nullptr));
  std::string plan;
  const auto got = as_list(in_threads(threads, [&] { return run(true, &plan); }));
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t k = 0; k < got.size(); ++k)
    expect_identical(got[k], want[k],
                     what + ", " + std::to_string(threads) + " threads, result " +
                         std::to_string(k) + "\n" + plan);
  EXPECT_EQ(count(plan, "[epilogue:"), epilogues) << what << "\n" << plan;
}

// A two-layer relu MLP on fresh variables, trained with plain SGD for `steps` steps: the
// losses, then every parameter.
std::vector<NDArray> train_mlp(std::int64_t batch, std::int64_t in, std::int64_t hidden, bool fuse,
                               int steps, std::string* plan = nullptr,
                               ktape::DType dt = ktape::DType::float32) {
  K::clear_session();
  const std::string d(ktape::dtype_name(dt));
  auto x = K::placeholder({K::None, in}, {.dtype = d});
  auto y = K::placeholder({K::None, 3}, {.dtype = d});
  auto W1 = K::variable(ramp(Shape{in, hidden}, 0.2, 0.01, dt), {.dtype = d});
  auto b1 = K::variable(ramp(Shape{hidden}, 0.1, 0.02, dt), {.dtype = d});
  auto W2 = K::variable(ramp(Shape{hidden, 3}, 0.3, -0.01, dt), {.dtype = d});
  auto b2 = K::variable(ramp(Shape{3}, 0.1, 0.0, dt), {.dtype = d});
  auto h = K::relu(K::dot(x, W1) + b1);
  auto loss = K::mean(K::square(K::dot(h, W2) + b2 - y));
  const std::vector<Tensor> params{W1, b1, W2, b2};
  auto g = K::gradients(loss, params);
  std::vector<Tensor> ups;
  for (std::size_t i = 0; i < params.size(); ++i)
    ups.push_back(K::update_sub(params[i], 0.05 * g[i]));
  auto f = K::function({x, y}, {loss}, ups, {.fuse = fuse});
  std::vector<NDArray> got;
  for (int s = 0; s < steps; ++s)
    got.push_back(
        f({ramp(Shape{batch, in}, 1.0, 0.1 * s, dt), ramp(Shape{batch, 3}, 0.5, 0.0, dt)})[0]);
  for (const auto& p : params) got.push_back(K::get_value(p));
  if (plan) *plan = f.describe_plan();
  return got;
}

}  // namespace

TEST(Epilogue, SgdStepsGiveTheUnfusedPlansBitsOnEveryLibraryAndThreadCount) {
  // (batch, in, hidden): tiles narrower than a row, so that a band is final only after several
  // tiles (the MLP's shapes: the weight gradient's 64 x 64 tiles of 784 x 256, the forward
  // product's 32 x 32 or 64 x 32), a deep weight gradient (batch >= 1024: depth slices, finished
  // where they are summed), whole-row tiles. One thread runs the epilogues band by band.
  const std::int64_t shapes[][3] = {{128, 784, 256}, {64, 300, 160}, {1100, 40, 48}, {96, 24, 32}};
  Libraries libs;
  for (const auto& s : shapes)
    for (GemmLibrary lib : libs.all) {
      ASSERT_TRUE(kk::set_gemm_library(lib));
      const std::string what = std::string(kk::gemm_library_name(lib)) + " batch " +
                               std::to_string(s[0]) + " in " + std::to_string(s[1]) + " hidden " +
                               std::to_string(s[2]);
      const auto want = train_mlp(s[0], s[1], s[2], false, 3);
      for (int threads : {1, 2, 16}) {
        std::string plan;
        const auto got =
            in_threads(threads, [&] { return train_mlp(s[0], s[1], s[2], true, 3, &plan); });
        // The bias + relu, the output's bias and error, the relu's gradient, the two weight
        // updates.
        EXPECT_EQ(count(plan, "[epilogue:"), 5u) << what << "\n" << plan;
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t k = 0; k < got.size(); ++k)
          expect_identical(
              got[k], want[k],
              what + ", " + std::to_string(threads) + " threads, result " + std::to_string(k));
      }
    }
  // float64, on the default library.
  kk::set_gemm_library(libs.saved);
  const auto want = train_mlp(128, 784, 256, false, 2, nullptr, ktape::DType::float64);
  for (int threads : {1, 2}) {
    std::string plan;
    const auto got = in_threads(
        threads, [&] { return train_mlp(128, 784, 256, true, 2, &plan, ktape::DType::float64); });
    EXPECT_EQ(count(plan, "[epilogue:"), 5u) << plan;
    for (std::size_t k = 0; k < got.size(); ++k)
      expect_identical(
          got[k], want[k],
          "float64, " + std::to_string(threads) + " threads, result " + std::to_string(k));
  }
}

TEST(Epilogue, AnUpdateStaysAfterALaterReadOfItsVariable) {
  // W's update reads dW = x^T g, but y2 = the column sums of W, made after the gradient (so
  // computed after it), reads W's old value (outputs before updates): the update must not run
  // inside the product dW.
  auto run = [](bool fuse, std::string* plan) {
    K::clear_session();
    auto x = K::placeholder({K::None, 40});
    auto W = K::variable(ramp(Shape{40, 70}, 0.2, 0.01));
    auto loss = K::sum(K::square(K::dot(x, W)));
    auto g = K::gradients(loss, {W});
    auto y2 = K::sum(W, {.axis = std::vector<int>{0}});
    auto up = K::update_sub(W, 0.01 * g[0]);
    auto f = K::function({x}, {y2}, {up}, {.fuse = fuse});
    auto out = f({ramp(Shape{50, 40}, 1.0, 0.0)});
    out.push_back(K::get_value(W));
    if (plan) *plan = f.describe_plan();
    return out;
  };
  for (int threads : {1, 2}) expect_unfused_bits(run, threads, 0, "later read");
}

TEST(Epilogue, APassNeverWritesAnOperandOfItsProduct) {
  // W <- W - 0.1 A W: the update reads the product A W and writes W, which the product's later
  // tiles read; run inside the product band by band (as on one thread) it would feed them rows
  // already updated.
  auto run = [](bool fuse, std::string* plan) {
    K::clear_session();
    auto A = K::placeholder({160, 160});
    auto W = K::variable(ramp(Shape{160, 160}, 0.05, 0.01));
    auto up = K::update_sub(W, 0.1 * K::dot(A, W));
    auto f = K::function({A}, {}, {up}, {.fuse = fuse});
    f({ramp(Shape{160, 160}, 0.1, 0.0)});
    if (plan) *plan = f.describe_plan();
    return K::get_value(W);
  };
  Libraries libs;
  for (GemmLibrary lib : libs.all) {
    ASSERT_TRUE(kk::set_gemm_library(lib));
    expect_unfused_bits(run, 1, 0, kk::gemm_library_name(lib));
  }
}

TEST(Epilogue, APassWaitsForAnInputComputedAfterTheProduct) {
  // W <- W - 0.01 s dW, with s = sum(x2^2) made after the gradient (so computed after dW): the
  // update cannot run inside the product dW, before s exists.
  auto run = [](bool fuse, std::string* plan) {
    K::clear_session();
    auto x = K::placeholder({K::None, 40});
    auto x2 = K::placeholder({K::None, 5});
    auto W = K::variable(ramp(Shape{40, 70}, 0.2, 0.01));
    auto g = K::gradients(K::sum(K::square(K::dot(x, W))), {W});
    auto s = K::sum(K::square(x2));
    auto f = K::function({x, x2}, {}, {K::update_sub(W, 0.01 * s * g[0])}, {.fuse = fuse});
    for (int call = 0; call < 2; ++call)
      f({ramp(Shape{50, 40}, 1.0, 0.1 * call), ramp(Shape{4, 5}, 0.3, 0.2 * call)});
    if (plan) *plan = f.describe_plan();
    return K::get_value(W);
  };
  for (int threads : {1, 2}) expect_unfused_bits(run, threads, 0, "input after the product");
}

TEST(Epilogue, APassReadingPartOfTheProductStaysOut) {
  // relu(P + P[0]): the product's first row, a view of it, is a row operand of the pass, which
  // must see the whole product final (bands run out of order would read row 0 too early). Here
  // one thread finishes the bands in order, so only the plan can show it kept out.
  auto run = [](bool fuse, std::string* plan) {
    K::clear_session();
    auto x = K::placeholder({256, 40});
    auto W = K::variable(ramp(Shape{40, 96}, 0.2, 0.0));
    auto P = K::dot(x, W);
    auto f = K::function({x}, {K::relu(P + K::slice(P, {0, 0}, {1, 96}))}, {}, {.fuse = fuse});
    auto out = f({ramp(Shape{256, 40}, 1.0, 0.1)});
    if (plan) *plan = f.describe_plan();
    return out[0];
  };
  for (int threads : {1, 2}) expect_unfused_bits(run, threads, 0, "part of the product");
}

TEST(Epilogue, RowOperandsRunOnlyWhereTheirWidthDividesTheProductsRows) {
  // A bias of 32 added to the product viewed as rows of 32: the product's rows of 64 hold two
  // (an epilogue; bands start on a bias row), rows of 48 do not (a pass of its own: a band
  // would start mid-row of the bias).
  for (const std::int64_t n : {64, 48}) {
    auto run = [n](bool fuse, std::string* plan) {
      K::clear_session();
      auto x = K::placeholder({96, 30});
      auto W = K::variable(ramp(Shape{30, n}, 0.2, 0.0));
      auto b = K::variable(ramp(Shape{32}, 0.3, 0.05));
      auto h = K::relu(K::reshape(K::dot(x, W), {-1, 32}) + b);
      auto f = K::function({x}, {h}, {}, {.fuse = fuse});
      auto out = f({ramp(Shape{96, 30}, 1.0, 0.1)});
      if (plan) *plan = f.describe_plan();
      return out[0];
    };
    for (int threads : {1, 2})
      expect_unfused_bits(run, threads, n == 64 ? 1 : 0, "rows of " + std::to_string(n));
  }
}

TEST(Epilogue, HalfCastsAndALoopsStepGiveTheUnfusedBits) {
  // A float16 cast in the pass (its kernel splits a chunk over tasks), at 16 threads; and a
  // simple recurrent step relu(x W + h U), its gradients included, at 1 and 16.
  auto cast_run = [](bool fuse) {
    K::clear_session();
    auto x = K::placeholder({K::None, 64});
    auto W = K::variable(ramp(Shape{64, 4096}, 0.1, 0.0));
    auto f = K::function({x}, {K::cast(K::relu(K::dot(x, W)), "float16")}, {}, {.fuse = fuse});
    return f({ramp(Shape{8, 64}, 1.0, 0.0)})[0];
  };
  const NDArray cast_want = cast_run(false);
  for (int threads : {1, 16})
    expect_identical(in_threads(threads, [&] { return cast_run(true); }), cast_want,
                     "float16 cast at " + std::to_string(threads));
  auto rnn_run = [](bool fuse) {
    K::clear_session();
    auto x = K::placeholder({K::None, 6, 20});
    auto W = K::variable(ramp(Shape{20, 48}, 0.2, 0.0));
    auto U = K::variable(ramp(Shape{48, 48}, 0.1, 0.01));
    auto step = [&](const Tensor& xt, const std::vector<Tensor>& st) {
      auto h = K::relu(K::dot(xt, W) + K::dot(st[0], U));
      return std::make_pair(h, std::vector<Tensor>{h});
    };
    auto r = K::rnn(step, x, {K::zeros_like(K::dot(K::sum(x, 1), W))});
    auto g = K::gradients(K::sum(K::square(r.last_output)), {W, U});
    auto f = K::function({x}, {r.last_output, g[0], g[1]}, {}, {.fuse = fuse});
    return f({ramp(Shape{64, 6, 20}, 1.0, 0.0)});
  };
  const auto want = rnn_run(false);
  for (int threads : {1, 16}) {
    const auto got = in_threads(threads, [&] { return rnn_run(true); });
    for (std::size_t k = 0; k < got.size(); ++k)
      expect_identical(got[k], want[k],
                       "rnn result " + std::to_string(k) + " at " + std::to_string(threads));
  }
}

TEST(Epilogue, SeveralThreadsRunThePassOnWholeRowTilesAndAfterNarrowerOnes) {
  // The gradient of sum((relu(x W1 + b) W2)^2) for x: the relu's gradient follows dY W2^T, whose
  // transposed W2 LIBXSMM's path copies, and whose tiles (80 x 64 on LIBXSMM and Eigen) are
  // narrower than the 256-wide rows, so on several threads the pass runs after the product (as
  // the forward bias + relu does); relu(x V + c) with V 32 x 128 over 256 rows: two tiles of 128
  // whole rows (LIBXSMM's and Eigen's), each taken on by the thread that computed it. On every
  // library (BLIS's blocked product runs the pass after the product), at 2 and 16 threads. (A
  // CPU without LIBXSMM's vector kernels leaves its copied-B path untested here.)
  Libraries libs;
  for (GemmLibrary lib : libs.all) {
    ASSERT_TRUE(kk::set_gemm_library(lib));
    const std::string name = kk::gemm_library_name(lib);
    for (int threads : {2, 16}) {
      expect_unfused_bits(
          [](bool fuse, std::string* plan) {
            K::clear_session();
            auto x = K::placeholder({K::None, 128});
            auto W1 = K::variable(ramp(Shape{128, 256}, 0.05, 0.01));
            auto b = K::variable(ramp(Shape{256}, -0.5, 0.004));
            auto W2 = K::variable(ramp(Shape{256, 128}, -0.2, 0.003));
            auto h = K::relu(K::dot(x, W1) + b);
            auto loss = K::sum(K::square(K::dot(h, W2)));
            auto f = K::function({x}, {K::gradients(loss, {x})[0]}, {}, {.fuse = fuse});
            auto out = f({ramp(Shape{160, 128}, 1.0, 0.01)})[0];
            if (plan) *plan = f.describe_plan();
            return out;
          },
          threads, 2, name + ", dY W2^T");
      expect_unfused_bits(
          [](bool fuse, std::string* plan) {
            K::clear_session();
            auto x = K::placeholder({K::None, 32});
            auto V = K::variable(ramp(Shape{32, 128}, 0.1, -0.002));
            auto c = K::variable(ramp(Shape{128}, -0.3, 0.005));
            auto f = K::function({x}, {K::relu(K::dot(x, V) + c)}, {}, {.fuse = fuse});
            auto out = f({ramp(Shape{256, 32}, 1.0, 0.02)})[0];
            if (plan) *plan = f.describe_plan();
            return out;
          },
          threads, 1, name + ", whole-row tiles");
    }
  }
}

TEST(Epilogue, AnOutputComputedByAnEpilogueReachesTheCallersBuffer) {
  // h = relu(x W + b), computed by the product's epilogue, is an output, and so are its row sums:
  // with reusable output arrays, h is computed straight into the caller's array, where the sums
  // then read it, call after call.
  auto build = [](bool fuse) {
    K::clear_session();
    auto x = K::placeholder({K::None, 30});
    auto W = K::variable(ramp(Shape{30, 200}, 0.2, 0.0));
    auto b = K::variable(ramp(Shape{200}, 0.1, 0.05));
    auto h = K::relu(K::dot(x, W) + b);
    return K::function({x}, {h, K::sum(h, {.axis = std::vector<int>{1}})}, {}, {.fuse = fuse});
  };
  auto fused = build(true);
  auto plain = build(false);
  std::vector<NDArray> outs, want;
  for (int call = 0; call < 3; ++call) {
    const std::vector<NDArray> ins{ramp(Shape{70, 30}, 1.0, 0.2 * call)};
    fused.run(ins, outs);
    plain.run(ins, want);
    ASSERT_EQ(outs.size(), 2u);
    for (std::size_t k = 0; k < 2; ++k)
      expect_identical(outs[k], want[k],
                       "call " + std::to_string(call) + " output " + std::to_string(k));
  }
  EXPECT_EQ(count(fused.describe_plan(), "[epilogue:"), 1u) << fused.describe_plan();
}
