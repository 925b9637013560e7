// Trains a 784-256-128-10 MLP on Fashion-MNIST with a Keras optimizer, showing Keras's progress
// bar, and optionally logs a CSV history, plots it as SVG and checkpoints after every epoch.
//   fashion_mlp [--optimizer sgd|momentum|nesterov|rmsprop|adagrad|adadelta|adam|adamax|nadam]
//               [--epochs 10] [--batch-size 128] [--lr X] [--dropout 0.2] [--seed 1]
//               [--limit N] [--data-dir /usr/share/datasets/fashion-mnist]
//               [--save FILE.npz] [--load FILE.npz] [--history FILE.csv] [--plot FILE.svg]
// --epochs counts from the start of training, so `--load` of a checkpoint saved after epoch 2
// with `--epochs 4` trains epochs 3 and 4, exactly as the uninterrupted run would have.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "examples/common/mlp.hpp"
#include "train/flags.hpp"
#include "train/progbar.hpp"
#include "train/svg_plot.hpp"

namespace {

constexpr const char* kUsage =
    "usage: fashion_mlp [--optimizer NAME] [--epochs N] [--batch-size N] [--lr X] [--dropout X]\n"
    "                   [--seed N] [--limit N] [--data-dir DIR] [--save FILE.npz]\n"
    "                   [--load FILE.npz] [--history FILE.csv] [--plot FILE.svg]\n"
    "  --optimizer  sgd (default), momentum, nesterov, rmsprop, adagrad, adadelta, adam, adamax,\n"
    "               nadam; --lr defaults to sgd 0.1, momentum/nesterov 0.01 (momentum 0.9),\n"
    "               rmsprop 0.001, adagrad 0.01, adadelta 1.0, adam 0.001, adamax/nadam 0.002\n"
    "  --epochs     total epochs, counting those of a --load'ed checkpoint (default 10)\n"
    "  --limit      use only the first N training and N test samples\n"
    "  --save       write a checkpoint (weights, optimizer state, RNG state, history) after\n"
    "               every epoch\n"
    "  --load       resume from a checkpoint of the same --optimizer and --seed; its learning\n"
    "               rate is used unless --lr is given\n"
    "  --history    write the per-epoch CSV log (epoch,loss,acc,val_loss,val_acc,seconds)\n"
    "  --plot       write the loss/accuracy curves as an SVG image\n"
    "The validation (val_) metrics are those of the test set.\n";

}  // namespace

int main(int argc, char** argv) {
  int epochs = 10;
  std::int64_t limit = -1;
  std::string data_dir = ktape::data::default_fashion_mnist_dir();
  std::string save_path, load_path, history_path, plot_path;
  ktape::examples::MlpConfig cfg;
  ktape::train::FlagParser flags("fashion_mlp", kUsage);
  flags.integer("--epochs", epochs, 0);
  flags.integer("--batch-size", cfg.batch_size, 1);
  flags.number("--lr", cfg.lr, {.min = 0, .min_inclusive = false});
  flags.number("--dropout", cfg.dropout, {.min = 0, .max = 1, .max_inclusive = false});
  flags.text("--optimizer", cfg.optimizer, ktape::examples::optimizer_names());
  flags.integer("--seed", cfg.seed);
  flags.integer("--limit", limit, 1);
  flags.text("--data-dir", data_dir);
  flags.text("--save", save_path);
  flags.text("--load", load_path);
  flags.text("--history", history_path);
  flags.text("--plot", plot_path);
  flags.parse(argc, argv);
  try {
    namespace K = ktape::backend;
    namespace T = ktape::train;
    // Output paths fail now, not after the first epoch has trained.
    if (!save_path.empty()) T::check_writable("--save", save_path);
    if (!history_path.empty()) T::check_writable("--history", history_path);
    if (!plot_path.empty()) T::check_writable("--plot", plot_path);
    K::set_random_seed(cfg.seed);
    const auto train = ktape::data::load_fashion_mnist(data_dir, "train", limit);
    const auto test = ktape::data::load_fashion_mnist(data_dir, "t10k", limit);
    const std::int64_t n = train.images.shape()[0];
    std::cout << "Fashion-MNIST: " << n << " train, " << test.images.shape()[0]
              << " test samples; backend " << K::backend() << '\n';
    ktape::examples::Mlp mlp(cfg);
    if (!load_path.empty()) {
      mlp.load_checkpoint(load_path);
      std::cout << "Resumed from " << load_path << " after epoch " << mlp.epochs_done() << '\n';
    }
    std::printf("MLP 784-%d-%d-10 (%lld parameters), %s lr %g, batch %d, dropout %g\n", cfg.hidden1,
                cfg.hidden2, static_cast<long long>(mlp.num_params()), cfg.optimizer.c_str(),
                mlp.lr(), cfg.batch_size, cfg.dropout);
    std::fflush(stdout);
    if (mlp.epochs_done() >= epochs && epochs > 0)
      std::cout << "The checkpoint is already at epoch " << mlp.epochs_done() << " of " << epochs
                << "; nothing to train.\n";

    T::Metrics batch_metrics{{"loss", 0.0}, {"acc", 0.0}};  // reused: no allocation per batch
    double val_acc = 0;
    bool trained = false;
    for (int e = mlp.epochs_done() + 1; e <= epochs; ++e) {
      T::print_epoch_header(std::cout, e, epochs);
      T::Progbar bar(n);
      double last_loss = 0, last_acc = 0;
      const auto r = mlp.fit_epoch(train, test, [&](std::int64_t done, double loss, double acc) {
        if (done < n) {
          batch_metrics[0].second = loss;
          batch_metrics[1].second = acc;
          bar.update(done, batch_metrics);
        } else {  // the last batch goes with the validation metrics, as in Keras
          last_loss = loss;
          last_acc = acc;
        }
      });
      bar.update(n, {{"loss", last_loss},
                     {"acc", last_acc},
                     {"val_loss", r.val.loss},
                     {"val_acc", r.val.acc}});
      val_acc = r.val.acc;
      trained = true;
      if (!save_path.empty()) mlp.save_checkpoint(save_path);
      if (!history_path.empty()) mlp.history().write_csv(history_path);
      if (!plot_path.empty())
        T::write_history_svg(mlp.history(), plot_path,
                             "Fashion-MNIST MLP, " + cfg.optimizer + " (val = test set)");
    }
    if (!trained) val_acc = mlp.evaluate(test).acc;
    std::printf("Final test accuracy: %.4f\n", val_acc);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "fashion_mlp: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mlp: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
