// The CNN of examples/fashion_cnn, and its two convolutions alone:
//   BM_CnnStep/<batch>/<threads, 0 = every core>/<0 default GEMM (LIBXSMM + BLIS), 1 Eigen's, 2
//   BLIS's>: one SGD step (lr 0.01) of conv 32 (3x3, valid) relu
//     -> max-pool 2 -> conv 64 (3x3) relu -> max-pool 2 -> dense 128 relu -> dense 10 softmax
//     (no dropout, as BM_TorchCnnStep), channels_last, sparse categorical crossentropy
//   BM_Pool2d/<layer 1|2>/<0 forward, 1 gradient, 2 gradient through relu>/<batch>: the CNN's
//     two max-pools alone
//   BM_Conv2d/<layer 1|2>/<pass 0 forward, 1 input gradient, 2 kernel gradient>/<batch>/<0 default
//     GEMM (LIBXSMM + BLIS), 1 Eigen's, 2 BLIS's>: the
//     CNN's layer shapes (1: 28x28x1 -> 26x26x32, 2: 13x13x32 -> 11x11x64), FLOP/s counters;
//     the Function returns one element of the result rather than a copy of it
// BM_TorchCnnStep (bench_torch.cpp) is the same step in LibTorch.
#include <benchmark/benchmark.h>

#include "bench/bench_util.hpp"
#include "examples/common/cnn.hpp"
#include "ktape/ktape.hpp"

namespace K = ktape::backend;
using ktape::NDArray;
using ktape::Shape;

namespace {

using ktape::bench::limit_threads;

void BM_CnnStep(benchmark::State& state) {
  const auto batch = state.range(0);
  const auto threads = limit_threads(state.range(1));
  const ktape::bench::GemmChoice gemm(state.range(2));
  const auto spec = ktape::examples::cnn_spec({.padding = "valid"});  // as BM_TorchCnnStep
  auto x = K::placeholder({K::None, 28, 28, 1});
  auto t = K::placeholder({K::None}, {.dtype = "int32"});
  const auto m = spec.build(x, [](const ktape::Tensor& h, std::uint64_t) { return h; });
  auto loss = K::mean(K::sparse_categorical_crossentropy(t, m.probs));
  auto g = K::gradients(loss, m.params);
  std::vector<ktape::Tensor> ups;
  for (std::size_t i = 0; i < m.params.size(); ++i)
    ups.push_back(K::update_sub(m.params[i], 0.01 * g[i]));
  auto f = K::function({x, t}, {loss}, ups);
  NDArray xb = NDArray::full(Shape{batch, 28, 28, 1}, 0.5);
  NDArray tb(Shape{batch}, ktape::DType::int32);
  for (std::int64_t i = 0; i < batch; ++i) tb.data<std::int32_t>()[i] = static_cast<int>(i % 10);
  std::vector<NDArray> ins{xb, tb}, outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  state.SetItemsProcessed(state.iterations() * batch);
  state.SetLabel(gemm.name() + ", " + ktape::bench::threads_label(state.range(1)));
}
BENCHMARK(BM_CnnStep)
    ->ArgsProduct({{32, 128}, {1, 2}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);

// One element of t: what a benchmark Function returns so that copying out the result costs
// nothing.
ktape::Tensor corner(const ktape::Tensor& t) {
  return K::slice(t, std::vector<std::int64_t>(static_cast<std::size_t>(t.ndim()), 0),
                  std::vector<std::int64_t>(static_cast<std::size_t>(t.ndim()), 1));
}

void BM_Conv2d(benchmark::State& state) {
  const int layer = static_cast<int>(state.range(0));
  const int pass = static_cast<int>(state.range(1));
  const auto batch = state.range(2);
  const ktape::bench::GemmChoice gemm(state.range(3));
  const std::int64_t hw = layer == 1 ? 28 : 13, cin = layer == 1 ? 1 : 32,
                     cout = layer == 1 ? 32 : 64, out = hw - 2;
  auto x = K::placeholder({batch, hw, hw, cin});
  auto k = K::variable(NDArray::full(Shape{3, 3, cin, cout}, 0.01));
  auto y = K::conv2d(x, k);
  ktape::Tensor target = y;
  if (pass > 0) {
    auto dy = K::placeholder({batch, out, out, cout});
    target = K::gradients({y}, {pass == 1 ? x : k}, {dy})[0];
    auto f = K::function({x, dy}, {corner(target)});
    std::vector<NDArray> ins{NDArray::full(Shape{batch, hw, hw, cin}, 0.5),
                             NDArray::full(Shape{batch, out, out, cout}, 0.25)},
        outs;
    f.run(ins, outs);
    for (auto _ : state) f.run(ins, outs);
  } else {
    auto f = K::function({x}, {corner(target)});
    std::vector<NDArray> ins{NDArray::full(Shape{batch, hw, hw, cin}, 0.5)}, outs;
    f.run(ins, outs);
    for (auto _ : state) f.run(ins, outs);
  }
  const double flops = 2.0 * static_cast<double>(batch * out * out * cout * 9 * cin);
  state.counters["FLOP/s"] = benchmark::Counter(flops * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
  static const char* passes[] = {"forward", "input gradient", "kernel gradient"};
  state.SetLabel(std::string("layer ") + std::to_string(layer) + " " + passes[pass] + ", " +
                 gemm.name());
}
BENCHMARK(BM_Conv2d)
    ->ArgsProduct({{1, 2}, {0, 1, 2}, {128}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);

// BM_Pool2d/<layer 1|2>/<pass>/<batch>: the CNN's max-pools (2x2, stride 2, channels_last) on
// 26x26x32 and 11x11x64 inputs of distinct-ish values. Pass 0: forward; 1: its gradient
// (MaxPoolGrad); 2: the gradient for x of pool(relu(x)), half of x negative (relu's gradient and
// the pool's, one MaxPoolReluGrad; the relu itself runs too).
void BM_Pool2d(benchmark::State& state) {
  const int layer = static_cast<int>(state.range(0));
  const int pass = static_cast<int>(state.range(1));
  const bool grad = pass != 0;
  const auto batch = state.range(2);
  const std::int64_t hw = layer == 1 ? 26 : 11, ch = layer == 1 ? 32 : 64, out = hw / 2;
  NDArray xv(Shape{batch, hw, hw, ch}, ktape::DType::float32);
  for (std::int64_t i = 0; i < xv.size(); ++i)
    xv.set_item(i, static_cast<double>((i * 7919) % 1000) - (pass == 2 ? 500.0 : 0.0));
  auto x = K::placeholder({batch, hw, hw, ch});
  auto y = K::pool2d(pass == 2 ? K::relu(x) : x, {2, 2}, {.strides = {2, 2}});
  std::vector<NDArray> ins{xv}, outs;
  ktape::Tensor target = y;
  std::vector<ktape::Tensor> feeds{x};
  if (grad) {
    auto dy = K::placeholder({batch, out, out, ch});
    target = K::gradients({y}, {x}, {dy})[0];
    feeds.push_back(dy);
    ins.push_back(NDArray::full(Shape{batch, out, out, ch}, 0.25));
  }
  auto f = K::function(feeds, {corner(target)});
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  static const char* passes[] = {" forward", " gradient", " gradient through relu"};
  state.SetLabel(std::string("layer ") + std::to_string(layer) + passes[pass]);
}
BENCHMARK(BM_Pool2d)
    ->ArgsProduct({{1, 2}, {0, 1, 2}, {32, 128}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

// BM_Relu/<0 default options (the vectorized functors), 1 the general path (max_value 1e30:
// the same values for these inputs)>/<0 relu, 1 its gradient>: on the Fashion CNN's first
// activation (128, 26, 26, 32), so the two paths compare side by side in one run.
void BM_Relu(benchmark::State& state) {
  const bool general = state.range(0) == 1, grad = state.range(1) == 1;
  const Shape s{128, 26, 26, 32};
  auto x = K::placeholder(s);
  const K::ReluOptions o = general ? K::ReluOptions{.max_value = 1e30} : K::ReluOptions{};
  auto y = K::relu(x, o);
  auto dy = K::placeholder(s);
  auto target = grad ? K::gradients({y}, {x}, {dy})[0] : y;
  auto f = K::function({x, dy}, {corner(target)});
  NDArray xs(s, ktape::DType::float32), g = NDArray::full(s, 0.25);
  for (std::int64_t i = 0; i < xs.size(); ++i)
    xs.data<float>()[i] = static_cast<float>(i % 7) - 3.0f;  // negatives, zeros, positives
  std::vector<NDArray> ins{xs, g}, outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  state.SetItemsProcessed(state.iterations() * s.num_elements());
  state.SetLabel(std::string(general ? "general path" : "default options") +
                 (grad ? ", gradient" : ", forward"));
}
BENCHMARK(BM_Relu)->ArgsProduct({{0, 1}, {0, 1}})->Apply(ktape::bench::real_time_min);

}  // namespace
