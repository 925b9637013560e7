// The same MLP training step as BM_MlpStep, in LibTorch, so both are measured in one run.
//   BM_TorchMlpStep/<batch>/<threads, 0 = every core>: 784-256-128-10 relu MLP, softmax
//   crossentropy, plain SGD (lr 0.01)
// and the LSTM step of BM_LstmStep (bench_rnn.cpp):
//   BM_TorchLstmStep/<batch>/<threads, 0 = every core>: torch::nn::LSTM(28, 128, batch_first) on
//   (batch, 28, 28), its last output -> Linear(128, 10), cross_entropy, plain SGD (lr 0.01)
// and the CNN step of BM_CnnStep (bench_cnn.cpp):
//   BM_TorchCnnStep/<batch>/<threads, 0 = every core>: Conv2d(1, 32, 3) relu, max_pool2d 2,
//   Conv2d(32, 64, 3) relu, max_pool2d 2, Linear(1600, 128) relu, Linear(128, 10) on
//   (batch, 1, 28, 28) (PyTorch's native NCHW), cross_entropy, plain SGD (lr 0.01)
// Built only when find_package(Torch) finds LibTorch (Debian: libtorch-dev).
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <dlfcn.h>

#include <memory>
#include <thread>

#include "bench/bench_util.hpp"

namespace {

struct TorchMlp : torch::nn::Module {
  torch::nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr};
  TorchMlp() {
    l1 = register_module("l1", torch::nn::Linear(784, 256));
    l2 = register_module("l2", torch::nn::Linear(256, 128));
    l3 = register_module("l3", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(l1->forward(x));
    h = torch::relu(l2->forward(h));
    return l3->forward(h);
  }
};

// One SGD step (lr 0.01) of `model` on a fixed batch, timed; state.range(1) is the thread count
// (0: every core, as many as oneTBB uses for ktape; 1: LibTorch single-threaded).
template <class Model>
void time_sgd_steps(benchmark::State& state, std::shared_ptr<Model> model, const torch::Tensor& x) {
  const auto batch = state.range(0);
  auto t = torch::arange(batch, torch::kLong).remainder(10);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01));
  auto step = [&] {
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), t);
    loss.backward();
    opt.step();
    return loss;
  };
  step();
  for (auto _ : state) benchmark::DoNotOptimize(step());
  state.SetItemsProcessed(state.iterations() * batch);
  state.SetLabel("libtorch " + std::to_string(torch::get_num_threads()) + " threads");
}

void set_threads(const benchmark::State& state) {
  const auto threads = state.range(1);
  const int n = threads > 0 ? static_cast<int>(threads)
                            : static_cast<int>(std::thread::hardware_concurrency());
  torch::set_num_threads(n);
  // Debian's LibTorch calls the system BLAS (OpenBLAS), whose own thread pool set_num_threads
  // does not bound: bound it too, or a "1 thread" step runs its GEMMs on every core.
  using SetThreads = void (*)(int);
  if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
  torch::manual_seed(1);
}

void BM_TorchMlpStep(benchmark::State& state) {
  set_threads(state);
  time_sgd_steps(state, std::make_shared<TorchMlp>(), torch::full({state.range(0), 784}, 0.5f));
}
BENCHMARK(BM_TorchMlpStep)
    ->ArgsProduct({{32, 128}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);

struct TorchLstm : torch::nn::Module {
  torch::nn::LSTM lstm{nullptr};
  torch::nn::Linear fc{nullptr};
  TorchLstm() {
    lstm =
        register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(28, 128).batch_first(true)));
    fc = register_module("fc", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto out = std::get<0>(lstm->forward(x));  // (batch, T, 128)
    return fc->forward(out.select(1, out.size(1) - 1));
  }
};

void BM_TorchLstmStep(benchmark::State& state) {
  set_threads(state);
  time_sgd_steps(state, std::make_shared<TorchLstm>(), torch::rand({state.range(0), 28, 28}));
}
BENCHMARK(BM_TorchLstmStep)
    ->ArgsProduct({{32, 128}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);

struct TorchCnn : torch::nn::Module {
  torch::nn::Conv2d c1{nullptr}, c2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  TorchCnn() {
    c1 = register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
    c2 = register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
    fc1 = register_module("fc1", torch::nn::Linear(1600, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::max_pool2d(torch::relu(c1->forward(x)), 2);
    h = torch::max_pool2d(torch::relu(c2->forward(h)), 2);
    return fc2->forward(torch::relu(fc1->forward(h.flatten(1))));
  }
};

void BM_TorchCnnStep(benchmark::State& state) {
  set_threads(state);
  time_sgd_steps(state, std::make_shared<TorchCnn>(),
                 torch::full({state.range(0), 1, 28, 28}, 0.5f));
}
BENCHMARK(BM_TorchCnnStep)
    ->ArgsProduct({{32, 128}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);

}  // namespace
