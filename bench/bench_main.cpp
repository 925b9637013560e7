// ktape benchmarks (Google Benchmark). Run: ./build/bench/bench_ktape
//   BM_MlpStep/<batch>/<0 cpu, 1 reference, 2 cpu unfused, 3 cpu on Eigen's GEMM, 4 cpu on
//   BLIS's, 5 cpu without MatMul epilogues>/<threads,
//     0 = every core>: one SGD step of the 784-256-128-10 MLP; FLOPS = its GEMM FLOPs / time
//   BM_Dispatch: a compiled Function of 1000 tiny ops (per-op dispatch cost = time / 1000)
//   BM_Gemm/<m>/<k>/<n>/<threads>/<0 default GEMM (LIBXSMM + BLIS), 1 Eigen's, 2 BLIS's>: MatMul at
//   the MLP's and
//     the LSTM's shapes
//   BM_GemmSharedB/<0 two products, 1 one joint product>/<threads>: an LSTM loop's weight
//     gradients h^T dZ and x^T dZ (128 and 28 rows, depth 3584, 512 columns), which share dZ
//   BM_PackPanel/<panel width>/<0 transposed, 1 copied>: packing a 128 x 256 operand into the
//     blocked product's micro-panels
//   BM_Transpose/<rows>/<cols>/<threads>: parallel_transpose of a float matrix (LIBXSMM's copies)
//   BM_FmaPeak/<threads> (bench_peak.cpp): the FMA peak, to read FLOPS counters against
//   BM_AdamStep/<0=cpu fused,1=cpu unfused,2=reference>: one Keras Adam step on the MLP's
//     parameters (235,146 floats) from fed gradients; BM_FedGradient/<same>: its baseline (the
//     gradient scaffolding that K::gradients adds, see FedGradients). Counters: `steps` = kernel
//     launches per call, `floats/s` = parameters updated per second
//   BM_DenseUpdate/<0 epilogue, 1 separate pass>/<threads>: W -= 0.01 x^T g at the MLP's first
//     layer, the update inside the product (a MatMul epilogue) or after it
//   BM_FusedPass/<elements>/<0 six mul/add, 1 an LSTM cell>/<threads>: one fused pass (the grain
//     policy at work)
//   BM_ElementCost/<op>: one elementwise op's cpu kernel on 16,384 floats, one thread, unfused;
//     the add's items_per_second (op 0) over the op's is the cost elem_cost charges
//   BM_ColumnSum/<rows>/<width>/<threads>: a bias gradient's column sums
//   BM_Softmax/<0 cpu, 1 reference>/<threads>: softmax of (4096, 1000)
//   BM_LearningPhaseSwitch/<0 cpu, 1 reference>/<threads>: K::in_train_phase over (128, 13, 13, 64)
//   BM_Reduce/<axis, 2 = K::sum of all>/<0 cpu, 1 reference>/<threads>: K::max over one axis of
//     (4096, 1000), or the sum of all of it
//   BM_ChannelMean/<0 cpu, 1 reference>/<threads>: a batch norm's means over 3 of 4 axes
//   BM_SumGradient/<axis 0, 1, 2 = all>/<0 cpu, 1 reference>/<threads>: the gradient of K::sum
//     over (784, 256), the incoming gradient broadcast back (BroadcastToLike)
//   BM_ReversePad/<0 reverse (28, 128, 128) along time, 1 pad (128, 28, 28, 1) by 2, 2 its
//     gradient>/<0 cpu, 1 reference>/<threads>
//   BM_Ctc/<0 cpu, 1 reference>/<threads>: K::ctc_batch_cost and its gradient, 32 samples of 50
//     steps over 30 classes
//   BM_Random/<0 uniform, 1 normal, 2 truncated normal, 3 binomial>/<0 cpu, 1 reference>/<threads>:
//     128 x 784 draws
//   BM_Embedding/<0 lookup, 1 its gradient>/<0 cpu, 1 reference>/<threads>: K::gather of 128 x 28
//     ids from a (10000, 128) table
//   BM_LayoutCopy/<0 concatenation, 1 its gradient, 2 slice, 3 its gradient, 4 ones_like, 5 28
//     small inputs concatenated>/<0 cpu, 1 reference>/<threads>: the shapes at the function
//   BM_Lines/<0 argmax, 1 cumsum, 2 one_hot, 3 cast>/<0 cpu, 1 reference>/<threads>: the
//     reference's line kernels run on ranges (shapes at the function)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "engine/backend.hpp"
#include "engine/fusion.hpp"
#include "engine/graph.hpp"
#include "ktape/ktape.hpp"
#include "ops/kernels/cpu/gemm.hpp"

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;

namespace {

const char* backend_name(int i) { return i == 1 ? "reference" : "cpu"; }

// Variants of BM_MlpStep: 0 cpu, 1 reference, 2 cpu without fusion, 3 cpu on Eigen's GEMM,
// 4 cpu on BLIS's alone, 5 cpu without MatMul epilogues (engine/fusion.hpp), 6 cpu with every
// product's tiles taken by rows, 7 cpu with every epilogue on several threads after its product
// (the schedules before session 38: gemm.hpp set_gemm_schedule).
const char* variant_label(int i) {
  static const char* labels[] = {
      "cpu",           "reference",        "cpu unfused",       "cpu eigen-gemm",
      "cpu blis-gemm", "cpu no epilogues", "cpu tiles by rows", "cpu epilogues after"};
  return labels[i];
}

void BM_MlpStep(benchmark::State& state) {
  const auto batch = state.range(0);
  const int variant = static_cast<int>(state.range(1));
  const char* be = backend_name(variant);
  const auto limit = ktape::bench::limit_threads(state.range(2));
  const ktape::bench::GemmChoice gemm(variant == 3 ? 1 : variant == 4 ? 2 : 0);
  const ktape::bench::GemmSchedule schedule(variant != 6, variant != 7);
  auto x = K::placeholder({K::None, 784});
  auto t = K::placeholder({K::None}, {.dtype = "int32"});
  auto glorot = [](std::int64_t a, std::int64_t b, std::uint64_t s) {
    const double l = std::sqrt(6.0 / static_cast<double>(a + b));
    return K::random_uniform_variable({a, b}, -l, l, {.seed = s});
  };
  auto W1 = glorot(784, 256, 1), W2 = glorot(256, 128, 2), W3 = glorot(128, 10, 3);
  auto b1 = K::zeros({256}), b2 = K::zeros({128}), b3 = K::zeros({10});
  auto h1 = K::relu(K::dot(x, W1) + b1);
  auto h2 = K::relu(K::dot(h1, W2) + b2);
  auto p = K::softmax(K::dot(h2, W3) + b3);
  auto loss = K::mean(K::sparse_categorical_crossentropy(t, p));
  std::vector<ktape::Tensor> params{W1, b1, W2, b2, W3, b3};
  auto g = K::gradients(loss, params);
  std::vector<ktape::Tensor> ups;
  for (std::size_t i = 0; i < params.size(); ++i)
    ups.push_back(K::update_sub(params[i], 0.01 * g[i]));
  auto f = K::function({x, t}, {loss}, ups, {.backend = be, .fuse = variant != 2});
  NDArray xb = NDArray::full(Shape{batch, 784}, 0.5), tb(Shape{batch}, DType::int32);
  for (std::int64_t i = 0; i < batch; ++i)
    tb.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 10);
  std::vector<NDArray> ins{xb, tb}, outs;
  const bool was = ktape::matmul_epilogues_enabled();
  ktape::set_matmul_epilogues(variant != 5);  // the plan is compiled by the first run
  f.run(ins, outs);
  ktape::set_matmul_epilogues(was);
  for (auto _ : state) f.run(ins, outs);
  state.SetItemsProcessed(state.iterations() * batch);
  // Forward and weight-gradient GEMMs of every layer, input gradients of layers 2 and 3.
  const double b = static_cast<double>(batch);
  ktape::bench::set_flops(
      state, 2.0 * b * (2.0 * (784 * 256 + 256 * 128 + 128 * 10) + (256 * 128 + 128 * 10)));
  state.SetLabel(std::string(variant_label(variant)) + ", " +
                 ktape::bench::threads_label(state.range(2)));
}
BENCHMARK(BM_MlpStep)
    ->ArgsProduct({{32, 128}, {0, 3, 4, 5, 6, 7}, {1, 2}})
    ->ArgsProduct({{32, 128}, {1, 2}, {0}})
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);

void BM_Dispatch(benchmark::State& state) {
  auto x = K::placeholder({1});
  ktape::Tensor y = x;
  for (int i = 0; i < 1000; ++i) y = (i % 2) ? y + 1.0 : y * 0.5;
  auto f = K::function({x}, {y});
  std::vector<NDArray> ins{NDArray::full(Shape{1}, 1.0)}, outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  state.counters["ns_per_op"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 1000.0,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Dispatch)->Unit(benchmark::kMicrosecond);

void BM_Gemm(benchmark::State& state) {
  const auto m = state.range(0), k = state.range(1), n = state.range(2);
  const auto limit = ktape::bench::limit_threads(state.range(3));
  const ktape::bench::GemmChoice gemm(state.range(4));
  auto a = K::placeholder({m, k});
  auto b = K::variable(NDArray::full(Shape{k, n}, 0.01));
  auto f = K::function({a}, {K::dot(a, b)});
  std::vector<NDArray> ins{NDArray::full(Shape{m, k}, 0.5)}, outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  ktape::bench::set_flops(state, 2.0 * static_cast<double>(m * k * n));
  state.SetLabel(gemm.name() + ", " + ktape::bench::threads_label(state.range(3)));
}
// The MLP's layers 1 and 2 (batch 128 and 32), the LSTM's per-step product (128 x 128 x 512)
// and its hoisted input projection over 28 steps (3584 x 28 x 512); two deep products whose
// depth parallel_gemm slices (the CNN's dense layer, 128 x 3136 x 128, and one of the shape of
// an LSTM loop's hoisted weight gradient, 128 x 3584 x 512).
BENCHMARK(BM_Gemm)
    ->ArgsProduct({{128}, {784}, {256}, {1, 2}, {0, 1, 2}})
    ->ArgsProduct({{128}, {256}, {128}, {1, 2}, {0, 1, 2}})
    ->ArgsProduct({{32}, {784}, {256}, {1, 2}, {0, 1, 2}})
    ->ArgsProduct({{128}, {128}, {512}, {1, 2}, {0, 1, 2}})
    ->ArgsProduct({{32}, {128}, {512}, {1, 2}, {0, 1, 2}})
    ->ArgsProduct({{3584}, {28}, {512}, {1, 2}, {0, 1, 2}})
    ->ArgsProduct({{128}, {3136}, {128}, {1, 2}, {0, 1, 2}})
    ->ArgsProduct({{128}, {3584}, {512}, {1, 2}, {0, 1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

void BM_GemmSharedB(benchmark::State& state) {
  namespace kk = ktape::kernels;
  const bool joint = state.range(0) != 0;
  const auto limit = ktape::bench::limit_threads(state.range(1));
  const std::int64_t k = 3584, n = 512, m0 = 128, m1 = 28;
  // h and x stacked over the steps (k x m, row-major): A = their transposes.
  std::vector<float> h(k * m0, 0.5f), x(k * m1, 0.25f), dz(k * n, 0.1f), c((m0 + m1) * n);
  const std::int64_t ms[2] = {m0, m1};
  std::vector<std::byte> scratch(kk::parallel_gemm_shared_b_scratch(ms, 2, n, k, sizeof(float)) +
                                 64);
  void* aligned = scratch.data();
  std::size_t space = scratch.size();
  std::align(64, 1, aligned, space);
  const kk::GemmPart<float> parts[2] = {{m0, {h.data(), 1, m0}, {c.data(), n, 1}},
                                        {m1, {x.data(), 1, m1}, {c.data() + m0 * n, n, 1}}};
  for (auto _ : state) {
    if (joint) {
      kk::parallel_gemm_shared_b<float>(parts, 2, n, k, {dz.data(), n, 1}, aligned);
    } else {
      for (const auto& p : parts)
        kk::parallel_gemm<float>(p.m, n, k, p.a, {dz.data(), n, 1}, p.c, false, aligned);
    }
  }
  ktape::bench::set_flops(state, 2.0 * static_cast<double>((m0 + m1) * k * n));
  state.SetLabel(std::string(joint ? "joint" : "two products") + ", " +
                 ktape::bench::threads_label(state.range(1)));
}
BENCHMARK(BM_GemmSharedB)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// Packing the blocked product's micro-panels (kernels::pack_micro_panel), as a 128 x 256 operand
// of the LSTM's and MLP's products is packed: <panel width: 12 = skx's B panels, 32 = its A
// panels>/<0 rows contiguous (transposed in registers), 1 columns contiguous (copied)>.
void BM_PackPanel(benchmark::State& state) {
  const std::int64_t w = state.range(0), rows = 128, depth = 256;
  const bool copy = state.range(1) != 0;
  const std::int64_t panels = (rows + w - 1) / w;
  std::vector<float> src(rows * depth, 0.5f), dst(panels * w * depth);
  for (auto _ : state) {
    for (std::int64_t i = 0; i < panels; ++i) {
      const std::int64_t r = std::min(w, rows - i * w);
      if (copy)  // the source stored depth-major (depth x rows): a panel's column is contiguous
        ktape::kernels::pack_micro_panel<float>(src.data() + i * w, 1, rows, r, depth, w, w,
                                                dst.data() + i * w * depth);
      else
        ktape::kernels::pack_micro_panel<float>(src.data() + i * w * depth, depth, 1, r, depth, w,
                                                w, dst.data() + i * w * depth);
    }
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * depth * 4);
  state.SetLabel(copy ? "copied" : "transposed");
}
BENCHMARK(BM_PackPanel)
    ->ArgsProduct({{12, 32}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

void BM_Transpose(benchmark::State& state) {
  const std::int64_t rows = state.range(0), cols = state.range(1);
  const auto limit = ktape::bench::limit_threads(state.range(2));
  std::vector<float> src(rows * cols, 0.5f), dst(rows * cols);
  for (auto _ : state) {
    ktape::kernels::parallel_transpose<float>(src.data(), cols, rows, cols, dst.data(), rows);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * 4);
  state.SetLabel(ktape::bench::threads_label(state.range(2)));
}
// The copies of a transposed right operand that LIBXSMM's products take (xsmm_copies_b): the
// MLP's dY2 W2^T (W2 256 x 128) and the CNN's dY W^T (W 1600 x 128).
BENCHMARK(BM_Transpose)
    ->ArgsProduct({{256}, {128}, {1, 2}})
    ->ArgsProduct({{1600}, {128}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// The MLP's parameters (784x256, 256, 256x128, 128, 128x10, 10: 235,146 floats) as variables,
// one fed gradient g_i per parameter, and a loss whose gradient for p_i is exactly g_i:
// sum_i sum(p_i * g_i), where a matrix term is reduced as dot(dot(ones(1, r), p_i * g_i),
// ones(c, 1)). K::gradients needs the loss's value (its seed is FillLike(loss)), so every
// Function built from it also runs that forward pass; the matmul form keeps it and the
// backward broadcast cheap (a K::sum of a matrix plus its BroadcastToLike cost ~5x more on cpu).
// BM_FedGradient measures this scaffolding alone: BM_AdamStep - BM_FedGradient is the update.
struct FedGradients {
  std::vector<ktape::Tensor> params, grads;
  ktape::Tensor loss;
  std::vector<NDArray> feed;
  std::int64_t floats = 0;

  FedGradients() {
    const std::vector<Shape> shapes = {{784, 256}, {256}, {256, 128}, {128}, {128, 10}, {10}};
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const Shape& s = shapes[i];
      params.push_back(K::random_uniform_variable(s, -0.05, 0.05, {.seed = i + 1}));
      grads.push_back(K::placeholder(s));
      const auto pg = params[i] * grads[i];
      const auto term = s.ndim() == 2
                            ? K::sum(K::dot(K::dot(K::ones({1, s[0]}), pg), K::ones({s[1], 1})))
                            : K::sum(pg);
      loss = loss.defined() ? loss + term : term;
      NDArray g(s, DType::float32);
      float* gp = g.data<float>();
      for (std::int64_t k = 0; k < g.size(); ++k) gp[k] = 1e-3f * static_cast<float>(k % 7 - 3);
      feed.push_back(g);
      floats += g.size();
    }
  }
};

ktape::FunctionOptions update_mode(int mode) {
  if (mode == 0) return {.backend = "cpu"};
  if (mode == 1) return {.backend = "cpu", .fuse = false};
  return {.backend = "reference"};
}
const char* update_mode_name(int mode) {
  return mode == 0 ? "cpu fused" : mode == 1 ? "cpu unfused" : "reference";
}

void run_update_bench(benchmark::State& state, const ktape::Function& f, FedGradients& fg,
                      int mode) {
  std::vector<NDArray> outs;
  f.run(fg.feed, outs);
  for (auto _ : state) f.run(fg.feed, outs);
  state.counters["steps"] = static_cast<double>(f.num_steps());
  state.counters["floats/s"] =
      benchmark::Counter(static_cast<double>(fg.floats) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.SetLabel(update_mode_name(mode));
}

// One dense layer's weight gradient and SGD update, W -= 0.01 x^T g (x 128 x 784 and g 128 x 256
// fed, W 784 x 256: the MLP's first layer), with the update run as the product's epilogue or as
// a pass of its own: <0 epilogue, 1 separate pass>/<threads>.
void BM_DenseUpdate(benchmark::State& state) {
  const auto limit = ktape::bench::limit_threads(state.range(1));
  auto x = K::placeholder({128, 784});
  auto g = K::placeholder({128, 256});
  auto W = K::variable(NDArray::full(Shape{784, 256}, 0.01));
  auto dW = K::dot(K::transpose(x), g);
  auto f = K::function({x, g}, {}, {K::update_sub(W, 0.01 * dW)});
  std::vector<NDArray> ins{NDArray::full(Shape{128, 784}, 0.5),
                           NDArray::full(Shape{128, 256}, 1e-3)},
      outs;
  const bool was = ktape::matmul_epilogues_enabled();
  ktape::set_matmul_epilogues(state.range(0) == 0);  // the plan is compiled by the first run
  f.run(ins, outs);
  ktape::set_matmul_epilogues(was);
  for (auto _ : state) f.run(ins, outs);
  ktape::bench::set_flops(state, 2.0 * 128 * 784 * 256);
  state.SetLabel(std::string(state.range(0) == 0 ? "epilogue, " : "separate pass, ") +
                 ktape::bench::threads_label(state.range(1)));
}
BENCHMARK(BM_DenseUpdate)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// One ktape::optimizers::Adam step (Keras 2.2.4 rules: iterations, m, v, the parameter) on the
// MLP's parameters from fed gradients: the Function of Adam::get_updates and nothing else.
void BM_AdamStep(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  FedGradients fg;
  ktape::optimizers::Adam adam({.lr = 1e-3});
  const auto f = K::function(fg.grads, {}, adam.get_updates(fg.loss, fg.params), update_mode(mode));
  run_update_bench(state, f, fg, mode);
}
BENCHMARK(BM_AdamStep)
    ->DenseRange(0, 2)
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// The baseline of BM_AdamStep: the same gradients, each simply assigned to its parameter.
void BM_FedGradient(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  FedGradients fg;
  const auto g = K::gradients(fg.loss, fg.params);
  std::vector<ktape::Tensor> ups;
  for (std::size_t i = 0; i < g.size(); ++i) ups.push_back(K::update(fg.params[i], g[i]));
  const auto f = K::function(fg.grads, {}, ups, update_mode(mode));
  run_update_bench(state, f, fg, mode);
}
BENCHMARK(BM_FedGradient)
    ->DenseRange(0, 2)
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// One fused elementwise pass over `elements` floats, the grain policy's subject: kind 0 is six
// cheap ops (mul/add), kind 1 an LSTM cell (sigmoids, tanh, products) on four inputs. Read with
// 1 and 2 threads side by side: no size may get slower with the second thread.
void BM_FusedPass(benchmark::State& state) {
  const auto n = state.range(0);
  const int kind = static_cast<int>(state.range(1));
  const auto limit = ktape::bench::limit_threads(state.range(2));
  std::vector<ktape::Tensor> xs;
  for (int i = 0; i < (kind == 0 ? 1 : 4); ++i) xs.push_back(K::placeholder({K::None}));
  ktape::Tensor y;
  if (kind == 0) {
    y = xs[0];
    for (int i = 0; i < 3; ++i) y = y * 1.0001 + 0.5;
  } else {
    y = K::sigmoid(xs[0]) * K::tanh(xs[1]) + K::sigmoid(xs[2]) * xs[3];
  }
  const auto f = K::function(xs, {y});
  std::vector<NDArray> ins, outs;
  for (std::size_t i = 0; i < xs.size(); ++i) ins.push_back(NDArray::full(Shape{n}, 0.25));
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  state.SetItemsProcessed(state.iterations() * n);
  state.SetLabel(std::string(kind == 0 ? "6 mul/add, " : "lstm cell, ") +
                 ktape::bench::threads_label(state.range(2)));
}
BENCHMARK(BM_FusedPass)
    ->ArgsProduct({{1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// One elementwise op's cpu kernel over 16,384 floats (in cache) on one thread, without fusion:
// the figures engine/parallel.hpp's elem_cost is rounded from (the add's items_per_second, op 0,
// over each op's).
void BM_ElementCost(benchmark::State& state) {
  const auto limit = ktape::bench::limit_threads(1);
  const std::int64_t n = 16384;
  const auto x = K::placeholder({K::None});
  const auto y = K::placeholder({K::None});
  const std::vector<std::pair<const char*, ktape::Tensor>> ops = {
      {"add", x + y},
      {"mul", x * y},
      {"exp", K::exp(x)},
      {"log", K::log(x)},
      {"tanh", K::tanh(x)},
      {"sigmoid", K::sigmoid(x)},
      {"sqrt", K::sqrt(x)},
      {"sin", K::sin(x)},
      {"softplus", K::softplus(x)},
      {"pow", K::pow(x, 1.7)},
      {"relu", K::relu(x)},
      {"abs", K::abs(x)},
      {"sigmoid_grad", ktape::make_node(ktape::Op::SigmoidGrad, {x, y}, {}, DType::float32)},
      {"tanh_grad", ktape::make_node(ktape::Op::TanhGrad, {x, y}, {}, DType::float32)}};
  const auto& [name, out] = ops[static_cast<std::size_t>(state.range(0))];
  const auto f = K::function({x, y}, {out}, {}, {.fuse = false});
  const std::vector<NDArray> ins = {NDArray::full(Shape{n}, 0.75), NDArray::full(Shape{n}, 0.5)};
  std::vector<NDArray> outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  state.SetItemsProcessed(state.iterations() * n);
  state.SetLabel(name);
}
BENCHMARK(BM_ElementCost)
    ->DenseRange(0, 13)
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// Softmax over the last axis of (4096, 1000) (a large vocabulary's logits) on the cpu backend
// (rows split over threads) or the serial reference one.
void BM_Softmax(benchmark::State& state) {
  const int be = static_cast<int>(state.range(0));
  const auto limit = ktape::bench::limit_threads(state.range(1));
  auto x = K::placeholder({K::None, 1000});
  const auto f = K::function({x}, {K::softmax(x)}, {}, {.backend = backend_name(be)});
  std::vector<NDArray> ins{NDArray::full(Shape{4096, 1000}, 0.25)}, outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  state.SetItemsProcessed(state.iterations() * 4096 * 1000);
  state.SetLabel(std::string(backend_name(be)) + ", " +
                 ktape::bench::threads_label(state.range(1)));
}
BENCHMARK(BM_Softmax)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);

// K::in_train_phase(x * 2, y) on (128, 13, 13, 64) activations, fed the learning phase 1 (the
// select a dropout layer builds), on the cpu backend or the serial reference one.
void BM_LearningPhaseSwitch(benchmark::State& state) {
  const int be = static_cast<int>(state.range(0));
  const auto limit = ktape::bench::limit_threads(state.range(1));
  auto x = K::placeholder({K::None, 13, 13, 64});
  auto y = K::placeholder({K::None, 13, 13, 64});
  const auto f = K::function({x, y, K::learning_phase()}, {K::in_train_phase(x * 2.0, y)}, {},
                             {.backend = backend_name(be)});
  std::vector<NDArray> ins{NDArray::full(Shape{128, 13, 13, 64}, 0.5),
                           NDArray::full(Shape{128, 13, 13, 64}, 0.25),
                           NDArray::full(Shape{}, 1.0)},
      outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  state.SetItemsProcessed(state.iterations() * 128 * 13 * 13 * 64);
  state.SetLabel(std::string(backend_name(be)) + ", " +
                 ktape::bench::threads_label(state.range(1)));
}
BENCHMARK(BM_LearningPhaseSwitch)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// K::max over axis 0 or 1 of (4096, 1000), or (2) K::sum of all of it, on the cpu backend (split
// over threads) or the serial reference one.
void BM_Reduce(benchmark::State& state) {
  const int axis = static_cast<int>(state.range(0)), be = static_cast<int>(state.range(1));
  const auto limit = ktape::bench::limit_threads(state.range(2));
  auto x = K::placeholder({K::None, 1000});
  const auto f = K::function({x}, {axis == 2 ? K::sum(x) : K::max(x, axis)}, {},
                             {.backend = backend_name(be)});
  std::vector<NDArray> ins{NDArray::full(Shape{4096, 1000}, 0.25)}, outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  state.SetItemsProcessed(state.iterations() * 4096 * 1000);
  state.SetLabel(std::string(backend_name(be)) + ", " +
                 ktape::bench::threads_label(state.range(2)));
}
BENCHMARK(BM_Reduce)
    ->ArgsProduct({{0, 1, 2}, {0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);

// A batch norm's channel means: K::mean over axes 0, 1, 2 of (128, 26, 26, 32) (32 outputs).
void BM_ChannelMean(benchmark::State& state) {
  const int be = static_cast<int>(state.range(0));
  const auto limit = ktape::bench::limit_threads(state.range(1));
  auto x = K::placeholder({K::None, 26, 26, 32});
  const auto f = K::function({x}, {K::mean(x, {.axis = std::vector<int>{0, 1, 2}})}, {},
                             {.backend = backend_name(be)});
  std::vector<NDArray> ins{NDArray::full(Shape{128, 26, 26, 32}, 0.25)}, outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  state.SetItemsProcessed(state.iterations() * 128 * 26 * 26 * 32);
  state.SetLabel(std::string(backend_name(be)) + ", " +
                 ktape::bench::threads_label(state.range(1)));
}
BENCHMARK(BM_ChannelMean)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);

// A bias gradient: the cpu backend's SumToLike kernel alone (column sums of a rows x width
// array), at the LSTM's (3584 x 512, the sequence's gate gradients) and a CNN layer's
// (86528 x 32) shapes.
void BM_ColumnSum(benchmark::State& state) {
  const std::int64_t dims[2] = {state.range(0), state.range(1)};
  const auto limit = ktape::bench::limit_threads(state.range(2));
  const ktape::KernelFn fn =
      ktape::find_kernel(ktape::cpu_backend(), ktape::Op::SumToLike, DType::float32);
  std::vector<float> g(static_cast<std::size_t>(dims[0] * dims[1]), 0.25f);
  std::vector<float> y(static_cast<std::size_t>(dims[1]));
  const ktape::ArrayRef in{g.data(), dims, 2, dims[0] * dims[1], DType::float32};
  ktape::KernelCall c;
  c.in = &in;
  c.n_in = 1;
  c.out = ktape::ArrayRef{y.data(), dims + 1, 1, dims[1], DType::float32};
  for (auto _ : state) {
    fn(c);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * dims[0] * dims[1]);
  state.SetLabel(ktape::bench::threads_label(state.range(2)));
}
BENCHMARK(BM_ColumnSum)
    ->ArgsProduct({{3584}, {512}, {1, 2}})
    ->ArgsProduct({{86528}, {32}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// The gradient of K::sum over x (784, 256) (a weight's L2 regularizer: one value broadcast to
// every weight; axis 1: the gradient of row sums, a value per row; axis 0: of column sums, a row
// copied to every row), through a Function, on the cpu or the reference backend.
void BM_SumGradient(benchmark::State& state) {
  const int axis = static_cast<int>(state.range(0));
  const int variant = static_cast<int>(state.range(1));
  const auto limit = ktape::bench::limit_threads(state.range(2));
  const Shape xs{784, 256};
  const Shape dys = axis == 2 ? Shape{1, 1} : axis == 1 ? Shape{784, 1} : Shape{1, 256};
  auto x = K::placeholder(xs);
  auto dy = K::placeholder(dys);
  K::ReduceOptions o{.keepdims = true};
  if (axis != 2) o.axis = std::vector<int>{axis};
  auto g = K::gradients({K::sum(x, o)}, {x}, {dy})[0];
  auto f = K::function({x, dy}, {g}, {}, {.backend = backend_name(variant)});
  std::vector<NDArray> ins{NDArray::full(xs, 0.5), NDArray::full(dys, 0.25)}, outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  state.SetItemsProcessed(state.iterations() * xs.num_elements());
  static const char* axes[] = {"column sums", "row sums", "sum of all"};
  state.SetLabel(std::string(axes[axis]) + ", " + backend_name(variant) + ", " +
                 ktape::bench::threads_label(state.range(2)));
}
BENCHMARK(BM_SumGradient)
    ->ArgsProduct({{0, 1, 2}, {0}, {1, 2}})
    ->ArgsProduct({{0, 1, 2}, {1}, {1}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// Layout copies that ran the reference's per-element kernels on the cpu backend before they had
// their own: kind 0 K::reverse of a time-major (28, 128, 128) along time (go_backwards), 1
// K::spatial_2d_padding of (128, 28, 28, 1) by 2 on every side, 2 its gradient (a crop).
void BM_ReversePad(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const int variant = static_cast<int>(state.range(1));
  const auto limit = ktape::bench::limit_threads(state.range(2));
  const Shape xs = kind == 0 ? Shape{28, 128, 128} : Shape{128, 28, 28, 1};
  auto x = K::placeholder(xs);
  ktape::Tensor y;
  if (kind == 0) {
    y = K::reverse(x, 0);
  } else {
    y = K::spatial_2d_padding(x, {{{2, 2}, {2, 2}}});
    if (kind == 2) {
      auto dy = K::placeholder({128, 32, 32, 1});
      y = K::gradients({y}, {x}, {dy})[0];
      x = dy;  // what the Function is fed
    }
  }
  auto f = K::function({x}, {y}, {}, {.backend = backend_name(variant)});
  std::vector<NDArray> ins{NDArray::full(kind == 2 ? Shape{128, 32, 32, 1} : xs, 0.5)}, outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  static const char* kinds[] = {"reverse time-major", "pad images", "pad's gradient"};
  state.SetLabel(std::string(kinds[kind]) + ", " + backend_name(variant) + ", " +
                 ktape::bench::threads_label(state.range(2)));
}
BENCHMARK(BM_ReversePad)
    ->ArgsProduct({{0, 1, 2}, {0}, {1, 2}})
    ->ArgsProduct({{0, 1, 2}, {1}, {1}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// Copies of contiguous runs: a channel concatenation of two (128, 14, 14, 32) feature maps (a
// DenseNet block's), its gradient (two ConcatParts), a crop of (128, 28, 28, 32) to 24 x 24, its
// gradient (SlicePad), ones_like of (128, 28, 28, 32) (FillLike), and 28 steps of (128, 1, 128)
// concatenated along time (an unrolled RNN's sequence output).
void BM_LayoutCopy(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const int variant = static_cast<int>(state.range(1));
  const auto limit = ktape::bench::limit_threads(state.range(2));
  const Shape half{128, 14, 14, 32}, whole{128, 14, 14, 64}, image{128, 28, 28, 32},
      crop{128, 24, 24, 32};
  std::vector<ktape::Tensor> feeds, outs_t;
  std::vector<NDArray> ins;
  auto feed = [&](const Shape& s) {
    feeds.push_back(K::placeholder(s));
    ins.push_back(NDArray::full(s, 0.5));
    return feeds.back();
  };
  if (kind <= 1) {
    auto a = feed(half), b = feed(half);
    auto y = K::concatenate({a, b});
    outs_t = kind == 0 ? std::vector<ktape::Tensor>{y} : K::gradients({y}, {a, b}, {feed(whole)});
  } else if (kind <= 3) {
    auto x = feed(image);
    auto y = K::slice(x, {0, 2, 2, 0}, {-1, 24, 24, -1});
    outs_t = kind == 2 ? std::vector<ktape::Tensor>{y} : K::gradients({y}, {x}, {feed(crop)});
  } else if (kind == 4) {
    outs_t = {K::ones_like(feed(image))};
  } else {
    std::vector<ktape::Tensor> steps;
    for (int t = 0; t < 28; ++t) steps.push_back(feed(Shape{128, 1, 128}));
    outs_t = {K::concatenate(steps, 1)};
  }
  auto f = K::function(feeds, outs_t, {}, {.backend = backend_name(variant)});
  std::vector<NDArray> outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  static const char* kinds[] = {"channel concatenation", "its gradient", "crop",
                                "crop's gradient",       "ones_like",    "28 steps concatenated"};
  state.SetLabel(std::string(kinds[kind]) + ", " + backend_name(variant) + ", " +
                 ktape::bench::threads_label(state.range(2)));
}
BENCHMARK(BM_LayoutCopy)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {0}, {1, 2}})
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {1}, {1}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// The reference's line kernels on ranges: argmax over the last axis of (4096, 1000) (a
// classifier's predictions), cumsum over it, one_hot of 4096 x 28 ids into 100 classes, and a
// cast of (128, 784) uint8 pixels to float32 (a batch of images).
void BM_Lines(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const int variant = static_cast<int>(state.range(1));
  const auto limit = ktape::bench::limit_threads(state.range(2));
  ktape::Tensor x, y;
  NDArray xv;
  if (kind <= 1) {
    x = K::placeholder({4096, 1000});
    y = kind == 0 ? K::argmax(x) : K::cumsum(x, 1);
    xv = NDArray::full(Shape{4096, 1000}, 0.5);
  } else if (kind == 2) {
    x = K::placeholder({4096, 28}, {.dtype = "int32"});
    y = K::one_hot(x, 100);
    xv = NDArray(Shape{4096, 28}, ktape::DType::int32);
    for (std::int64_t i = 0; i < xv.size(); ++i) xv.set_item(i, static_cast<double>(i % 100));
  } else {
    x = K::placeholder({128, 784}, {.dtype = "uint8"});
    y = K::cast(x, "float32");
    xv = NDArray(Shape{128, 784}, ktape::DType::uint8);
  }
  auto f = K::function({x}, {y}, {}, {.backend = backend_name(variant)});
  std::vector<NDArray> ins{xv}, outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  static const char* kinds[] = {"argmax", "cumsum", "one_hot", "cast"};
  state.SetLabel(std::string(kinds[kind]) + ", " + backend_name(variant) + ", " +
                 ktape::bench::threads_label(state.range(2)));
}
BENCHMARK(BM_Lines)
    ->ArgsProduct({{0, 1, 2, 3}, {0}, {1, 2}})
    ->ArgsProduct({{0, 1, 2, 3}, {1}, {1}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// K::ctc_batch_cost and its gradient for 32 samples of 50 steps over 30 classes (labels of 10),
// as an OCR model's loss: the per-sample dynamic programs, in order on the reference backend and
// as tasks on the cpu one.
void BM_Ctc(benchmark::State& state) {
  const int variant = static_cast<int>(state.range(0));
  const auto limit = ktape::bench::limit_threads(state.range(1));
  constexpr std::int64_t N = 32, T = 50, C = 30, L = 10;
  auto yt = K::placeholder({N, L}), yp = K::placeholder({N, T, C});
  auto il = K::placeholder({N, 1}), ll = K::placeholder({N, 1});
  auto loss = K::ctc_batch_cost(yt, K::softmax(yp), il, ll);
  auto g = K::gradients(K::mean(loss), {yp})[0];
  auto f =
      K::function({yt, yp, il, ll}, {K::mean(loss), g}, {}, {.backend = backend_name(variant)});
  NDArray tv(Shape{N, L}, DType::float32), pv(Shape{N, T, C}, DType::float32);
  for (std::int64_t i = 0; i < tv.size(); ++i)
    tv.set_item(i, static_cast<double>((i * 7) % (C - 1)));
  for (std::int64_t i = 0; i < pv.size(); ++i)
    pv.set_item(i, std::sin(0.37 * static_cast<double>(i)));
  std::vector<NDArray> ins{tv, pv, NDArray::full(Shape{N, 1}, T), NDArray::full(Shape{N, 1}, L)},
      outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  state.SetLabel(std::string(backend_name(variant)) + ", " +
                 ktape::bench::threads_label(state.range(1)));
}
BENCHMARK(BM_Ctc)
    ->Args({0, 1})
    ->Args({0, 2})
    ->Args({1, 1})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// A random op's draws (K::random_uniform, random_normal, truncated_normal, random_binomial: kind
// 0-3) of 128 x 784 floats, a noise layer's per step, through a Function: the element costs
// engine/parallel.hpp's grain policy charges them (read against BM_ElementCost's add).
void BM_Random(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const int variant = static_cast<int>(state.range(1));
  const auto limit = ktape::bench::limit_threads(state.range(2));
  const Shape s{128, 784};
  const K::RandomOptions o{.seed = 3};
  const ktape::Tensor t = kind == 0   ? K::random_uniform(s, -1.0, 1.0, o)
                          : kind == 1 ? K::random_normal(s, 0.0, 1.0, o)
                          : kind == 2 ? K::truncated_normal(s, 0.0, 1.0, o)
                                      : K::random_binomial(s, 0.5, o);
  auto f = K::function({}, {t}, {}, {.backend = backend_name(variant)});
  std::vector<NDArray> ins, outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  state.SetItemsProcessed(state.iterations() * s.num_elements());
  static const char* kinds[] = {"uniform", "normal", "truncated normal", "binomial"};
  state.SetLabel(std::string(kinds[kind]) + ", " + backend_name(variant) + ", " +
                 ktape::bench::threads_label(state.range(2)));
}
BENCHMARK(BM_Random)
    ->ArgsProduct({{0, 1, 2, 3}, {0}, {1, 2}})
    ->ArgsProduct({{0, 1, 2, 3}, {1}, {1}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// An embedding: K::gather of 128 x 28 token ids from a (10000, 128) table (pass 0), and its
// gradient for the table (pass 1: zeros, then the incoming rows added at the ids).
void BM_Embedding(benchmark::State& state) {
  const int pass = static_cast<int>(state.range(0));
  const int variant = static_cast<int>(state.range(1));
  const auto limit = ktape::bench::limit_threads(state.range(2));
  auto w = K::placeholder({10000, 128});
  auto ids = K::placeholder({128, 28}, {.dtype = "int32"});
  auto e = K::gather(w, ids);
  auto dy = K::placeholder({128, 28, 128});
  const std::vector<ktape::Tensor> outs_t{pass == 0 ? e : K::gradients({e}, {w}, {dy})[0]};
  auto f = K::function({w, ids, dy}, outs_t, {}, {.backend = backend_name(variant)});
  NDArray iv(Shape{128, 28}, DType::int32);
  for (std::int64_t i = 0; i < iv.size(); ++i)
    iv.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7919) % 10000);
  std::vector<NDArray> ins{NDArray::full(Shape{10000, 128}, 0.5), iv,
                           NDArray::full(Shape{128, 28, 128}, 0.25)},
      outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  state.SetLabel(std::string(pass == 0 ? "lookup, " : "gradient, ") + backend_name(variant) + ", " +
                 ktape::bench::threads_label(state.range(2)));
}
BENCHMARK(BM_Embedding)
    ->ArgsProduct({{0, 1}, {0}, {1, 2}})
    ->ArgsProduct({{0, 1}, {1}, {1}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

}  // namespace

BENCHMARK_MAIN();
