// Trains a 784-256-128-10 MLP on Fashion-MNIST with a Keras optimizer, showing Keras's progress
// bar, and optionally logs a CSV history, plots it as SVG and checkpoints after every epoch.
//   fashion_mlp [--optimizer adam|sgd|momentum|nesterov|rmsprop|adagrad|adadelta|adamax|nadam]
//               [--epochs 10] [--batch-size 128] [--lr X] [--dropout 0.2] [--seed 1]
//               [--limit N] [--data-dir /usr/share/datasets/fashion-mnist]
//               [--save FILE.npz] [--load FILE.npz] [--history FILE.csv] [--plot FILE.svg]
// --epochs counts from the start of training, so `--load` of a checkpoint saved after epoch 2
// with `--epochs 4` trains epochs 3 and 4, exactly as the uninterrupted run would have.
#include <cstdio>
#include <string>

#include "examples/common/mlp.hpp"
#include "examples/common/run.hpp"

namespace {

constexpr const char* kUsage =
    "usage: fashion_mlp [--optimizer NAME] [--epochs N] [--batch-size N] [--lr X] [--dropout X]\n"
    "                   [--threads N]\n"
    "                   [--seed N] [--limit N] [--data-dir DIR] [--save FILE.npz]\n"
    "                   [--load FILE.npz] [--history FILE.csv] [--plot FILE.svg]\n"
    "  --optimizer  adam (default), sgd, momentum, nesterov, rmsprop, adagrad, adadelta, adamax,\n"
    "               nadam; --lr defaults to sgd 0.1, momentum/nesterov 0.01 (momentum 0.9),\n"
    "               rmsprop 0.001, adagrad 0.01, adadelta 1.0, adam 0.001, adamax/nadam 0.002\n"
    "  --epochs     total epochs, counting those of a --load'ed checkpoint (default 10)\n"
    "  --threads    threads for the kernels (default 0: every core, or KTAPE_NUM_THREADS); the\n"
    "               results are the same at any count; under mpirun, each machine's cores\n"
    "               are divided among its ranks\n"
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
  ktape::examples::RunFlags run;
  ktape::examples::MlpConfig cfg;
  // Adam, as the CNN and RNN examples and Keras's own Fashion-MNIST tutorial: it reaches 0.88 in
  // 10 epochs at batch 128 and at 256 (mpirun -np 2), where plain SGD stays at 0.86 with 256.
  cfg.optimizer = "adam";
  ktape::train::FlagParser flags("fashion_mlp", kUsage);
  ktape::examples::add_run_flags(flags, run);
  flags.integer("--batch-size", cfg.batch_size, 1);
  flags.number("--lr", cfg.lr, {.min = 0, .min_inclusive = false});
  flags.number("--dropout", cfg.dropout, {.min = 0, .max = 1, .max_inclusive = false});
  flags.text("--optimizer", cfg.optimizer, ktape::examples::optimizer_names());
  flags.integer("--seed", cfg.seed);
  flags.parse(argc, argv);
  return ktape::examples::run_classifier(
      "fashion_mlp", run,
      [&] {
        ktape::backend::set_random_seed(cfg.seed);
        return std::make_unique<ktape::examples::Mlp>(cfg);
      },
      [&](const ktape::examples::Classifier& m) {
        char line[256];
        std::snprintf(line, sizeof line,
                      "MLP 784-%d-%d-10 (%lld parameters), %s lr %g, batch %d, dropout %g",
                      cfg.hidden1, cfg.hidden2, static_cast<long long>(m.num_params()),
                      cfg.optimizer.c_str(), m.lr(), cfg.batch_size, cfg.dropout);
        return std::string(line);
      },
      "Fashion-MNIST MLP, " + cfg.optimizer + " (val = test set)");
}
