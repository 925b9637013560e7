// Trains a 784-256-128-10 MLP on Fashion-MNIST with plain SGD written with K::update_sub.
//   fashion_mlp [--epochs 10] [--batch-size 128] [--lr 0.1] [--seed 1] [--limit N]
//               [--data-dir /usr/share/datasets/fashion-mnist]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "examples/common/mlp.hpp"

namespace {

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "fashion_mlp: %s\nusage: fashion_mlp [--epochs N] [--batch-size N] [--lr X] "
               "[--seed N] [--limit N] [--data-dir DIR]\n",
               msg);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int epochs = 10;
  std::int64_t limit = -1;
  std::string data_dir = ktape::data::default_fashion_mnist_dir();
  ktape::examples::MlpConfig cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    try {
      if (a == "--epochs")
        epochs = std::stoi(value());
      else if (a == "--batch-size")
        cfg.batch_size = std::stoi(value());
      else if (a == "--lr")
        cfg.lr = std::stod(value());
      else if (a == "--seed")
        cfg.seed = std::stoull(value());
      else if (a == "--limit")
        limit = std::stoll(value());
      else if (a == "--data-dir")
        data_dir = value();
      else if (a == "--help" || a == "-h")
        usage("help");
      else
        usage(("unknown flag " + a).c_str());
    } catch (const std::logic_error&) {
      usage(("bad value for " + a).c_str());
    }
  }
  if (epochs < 0 || cfg.batch_size <= 0 || !(cfg.lr > 0))
    usage("epochs >= 0, batch-size > 0, lr > 0");
  try {
    namespace K = ktape::backend;
    K::set_random_seed(cfg.seed);
    const auto train = ktape::data::load_fashion_mnist(data_dir, "train", limit);
    const auto test = ktape::data::load_fashion_mnist(data_dir, "t10k", limit);
    std::printf("Fashion-MNIST: %lld train, %lld test samples; backend %s\n",
                static_cast<long long>(train.images.shape()[0]),
                static_cast<long long>(test.images.shape()[0]), K::backend().c_str());
    ktape::examples::Mlp mlp(cfg);
    std::printf("MLP 784-%d-%d-10 (%lld parameters), SGD lr %g, batch %d, dropout %g\n",
                cfg.hidden1, cfg.hidden2, static_cast<long long>(mlp.num_params()), cfg.lr,
                cfg.batch_size, cfg.dropout);
    std::mt19937_64 rng(cfg.seed);
    ktape::examples::EpochStats ev;
    for (int e = 1; e <= epochs; ++e) {
      const auto st = mlp.train_epoch(train, rng);
      ev = mlp.evaluate(test);
      std::printf(
          "Epoch %d/%d - %.2fs - loss: %.4f - acc: %.4f - test_loss: %.4f - test_acc: %.4f\n", e,
          epochs, st.seconds, st.loss, st.acc, ev.loss, ev.acc);
      std::fflush(stdout);
    }
    if (epochs == 0) ev = mlp.evaluate(test);
    std::printf("Final test accuracy: %.4f\n", ev.acc);
  } catch (const ktape::Error& e) {
    std::fprintf(stderr, "fashion_mlp: %s\n", e.what());
    return 1;
  }
  return 0;
}
