// Data-parallel scaling (ktape/distributed): one training step of the examples' MLP and CNN on
// every rank, the gradients averaged over the ranks inside the step when launched by mpirun.
//   BM_DistributedStep/<0 MLP 784-256-128-10, 1 CNN (BM_CnnStep's)>/<batch per rank>/<0 the
//     gradients averaged over the ranks, 1 no collective (each rank alone: what running N
//     processes side by side costs the machine, without communication)>
// Each process runs one kernel thread. Counter `samples/s` counts every rank's samples, so the
// scaling efficiency at N ranks is samples/s(N) / (N x samples/s(1)); scripts/bench_distributed.sh
// runs both and prints it. Iteration counts are fixed (every rank must run the same number of
// collectives), and only rank 0 reports.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "bench/bench_util.hpp"
#include "distributed/distributed.hpp"
#include "examples/common/cnn.hpp"
#include "ktape/ktape.hpp"

namespace K = ktape::backend;
namespace D = ktape::distributed;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;

namespace {

struct Model {
  Tensor x, probs;
  std::vector<Tensor> params;
  Shape sample;
};

Model mlp() {
  Model m;
  m.x = K::placeholder({K::None, 784});
  auto glorot = [](std::int64_t a, std::int64_t b, std::uint64_t s) {
    const double l = std::sqrt(6.0 / static_cast<double>(a + b));
    return K::random_uniform_variable({a, b}, -l, l, {.seed = s});
  };
  auto w1 = glorot(784, 256, 1), w2 = glorot(256, 128, 2), w3 = glorot(128, 10, 3);
  auto b1 = K::zeros({256}), b2 = K::zeros({128}), b3 = K::zeros({10});
  auto h = K::relu(K::bias_add(K::dot(m.x, w1), b1));
  h = K::relu(K::bias_add(K::dot(h, w2), b2));
  m.probs = K::softmax(K::bias_add(K::dot(h, w3), b3));
  m.params = {w1, b1, w2, b2, w3, b3};
  m.sample = Shape{784};
  return m;
}

Model cnn() {
  Model m;
  const auto spec = ktape::examples::cnn_spec({.padding = "valid"});
  m.x = K::placeholder({K::None, 28, 28, 1});
  const auto built = spec.build(m.x, [](const Tensor& h, std::uint64_t) { return h; });
  m.probs = built.probs;
  m.params = built.params;
  m.sample = Shape{28, 28, 1};
  return m;
}

void BM_DistributedStep(benchmark::State& state) {
  const auto batch = state.range(1);
  const auto threads = ktape::bench::limit_threads(1);
  const Model m = state.range(0) == 0 ? mlp() : cnn();
  auto t = K::placeholder({K::None}, {.dtype = "int32"});
  auto loss = K::mean(K::sparse_categorical_crossentropy(t, m.probs));
  auto opt = std::make_unique<ktape::optimizers::SGD>(ktape::optimizers::SGDOptions{.lr = 0.01});
  const bool averaged = state.range(2) == 0;
  if (D::size() > 1 && averaged) D::distributed_optimizer(*opt);
  auto f = K::function({m.x, t}, {loss}, opt->get_updates(loss, m.params));
  D::broadcast_variables(m.params);
  std::vector<std::int64_t> dims{batch};
  dims.insert(dims.end(), m.sample.dims().begin(), m.sample.dims().end());
  NDArray xb = NDArray::full(Shape(dims), 0.5);
  NDArray tb(Shape{batch}, ktape::DType::int32);
  for (std::int64_t i = 0; i < batch; ++i) tb.data<std::int32_t>()[i] = static_cast<int>(i % 10);
  std::vector<NDArray> ins{xb, tb}, outs;
  f.run(ins, outs);
  D::barrier();
  for (auto _ : state) f.run(ins, outs);
  D::barrier();
  state.counters["samples/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * batch * D::size()), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(state.range(0) == 0 ? "MLP" : "CNN") + ", " +
                 std::to_string(D::size()) + (D::size() == 1 ? " process" : " processes") +
                 " x 1 thread" + (averaged ? "" : ", no collective"));
}
// Fixed iteration counts, one registration per shape (Iterations applies to a whole family).
BENCHMARK(BM_DistributedStep)
    ->ArgsProduct({{0}, {128}, {0, 1}})
    ->Iterations(400)
    ->Repetitions(5)
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);
BENCHMARK(BM_DistributedStep)
    ->ArgsProduct({{1}, {32}, {0, 1}})
    ->Iterations(60)
    ->Repetitions(5)
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);
BENCHMARK(BM_DistributedStep)
    ->ArgsProduct({{1}, {128}, {0, 1}})
    ->Iterations(16)
    ->Repetitions(5)
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);

}  // namespace

int main(int argc, char** argv) {
  D::init();
  if (D::rank() != 0) std::freopen("/dev/null", "w", stdout);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  D::finalize();
  return 0;
}
