// BM_LstmStep/<batch>/<0 = K::rnn symbolic loop (Scan), 1 = unrolled graph, 2 = the loop with its
// deep weight-gradient products one after the other (before session 39: gemm.hpp
// set_gemm_schedule), 3 = the loop with its buffers on 4 KB pages (before session 39:
// engine/arena.hpp set_huge_pages)>/<threads, 0 = every core>/<0 default GEMM (LIBXSMM + BLIS), 1
// Eigen's, 2 BLIS's>: one training step (forward, backward, update) of an LSTM classifier, T = 28
// steps of F = 28 features, hidden 128, last output -> dense 10 -> softmax -> sparse categorical
// crossentropy, plain SGD (lr 0.01, K::update_sub) as BM_TorchLstmStep does. FLOPS: the step's GEMM
// FLOPs (forward x W and h U, their weight gradients and the gradient for h: about 1.6 GFLOP at
// batch 128) / time. The cell is the K:: step function of examples/common/rnn_model.cpp: gates = x
// W (F x 4H) + h U (H x 4H) + b, cut with K::slice.
#include <benchmark/benchmark.h>

#include <cmath>

#include "bench/bench_util.hpp"
#include "ktape/ktape.hpp"

namespace {

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;
using V = std::vector<Tensor>;

void BM_LstmStep(benchmark::State& state) {
  const std::int64_t B = state.range(0), T = 28, F = 28, H = 128;
  const bool unroll = state.range(1) == 1;
  const ktape::bench::GemmSchedule schedule(true, true, state.range(1) != 2);
  const ktape::bench::SmallPages pages(state.range(1) == 3);
  const auto limit = ktape::bench::limit_threads(state.range(2));
  const ktape::bench::GemmChoice gemm(state.range(3));
  K::clear_session();
  auto glorot = [](std::int64_t a, std::int64_t b, std::uint64_t s) {
    const double l = std::sqrt(6.0 / static_cast<double>(a + b));
    return K::random_uniform_variable({a, b}, -l, l, {.seed = s});
  };
  const Tensor W = glorot(F, 4 * H, 1), U = glorot(H, 4 * H, 2), b = K::zeros({4 * H});
  const Tensor Wd = glorot(H, 10, 3), bd = K::zeros({10});
  auto step = [&](const Tensor& x, const V& s) -> std::pair<Tensor, V> {
    const Tensor z = K::dot(x, W) + K::dot(s[0], U) + b;
    auto gate = [&](std::int64_t k) { return K::slice(z, {0, k * H}, {-1, H}); };
    const Tensor i = K::sigmoid(gate(0)), f = K::sigmoid(gate(1)), g = K::tanh(gate(2)),
                 o = K::sigmoid(gate(3));
    const Tensor c = f * s[1] + i * g;
    const Tensor h = o * K::tanh(c);
    return {h, {h, c}};
  };
  const auto x = K::placeholder({K::None, T, F});
  const auto t = K::placeholder({K::None}, {.dtype = "int32"});
  const Tensor h0 =
      K::zeros_like(K::expand_dims(K::sum(x, {.axis = std::vector<int>{1, 2}}))) + K::zeros({H});
  const auto r = K::rnn(step, x, {h0, h0}, {.unroll = unroll});
  const auto p = K::softmax(K::dot(r.last_output, Wd) + bd);
  const auto loss = K::mean(K::sparse_categorical_crossentropy(t, p));
  const V params{W, U, b, Wd, bd};
  const auto g = K::gradients(loss, params);
  V ups;
  for (std::size_t k = 0; k < params.size(); ++k)
    ups.push_back(K::update_sub(params[k], 0.01 * g[k]));
  auto fn = K::function({x, t}, {loss}, ups);
  NDArray xb(Shape{B, T, F}, DType::float32), tb(Shape{B}, DType::int32);
  for (std::int64_t k = 0; k < xb.size(); ++k)
    xb.data<float>()[k] = static_cast<float>((k * 37) % 101) / 101.0f;
  for (std::int64_t k = 0; k < B; ++k)
    tb.data<std::int32_t>()[k] = static_cast<std::int32_t>(k % 10);
  std::vector<NDArray> ins{xb, tb}, outs;
  fn.run(ins, outs);
  for (auto _ : state) fn.run(ins, outs);
  state.SetItemsProcessed(state.iterations() * B);
  state.counters["steps"] = static_cast<double>(fn.num_steps());
  const double per_step = 2.0 * static_cast<double>(B * 4 * H) *
                          (2.0 * static_cast<double>(F + H) + static_cast<double>(H));
  ktape::bench::set_flops(state, per_step * static_cast<double>(T));
  state.SetLabel(std::string(unroll                ? "unrolled"
                             : state.range(1) == 2 ? "symbolic loop, parts one after the other"
                             : state.range(1) == 3 ? "symbolic loop, 4 KB pages"
                                                   : "symbolic loop") +
                 ", " + gemm.name() + ", " + ktape::bench::threads_label(state.range(2)));
}
BENCHMARK(BM_LstmStep)
    ->ArgsProduct({{32, 128}, {0, 1}, {1, 2}, {0, 1, 2}})
    ->ArgsProduct({{32, 128}, {2, 3}, {1, 2}, {0}})
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);

}  // namespace
