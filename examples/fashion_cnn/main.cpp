// Trains a small CNN on Fashion-MNIST (conv 32 3x3 relu, max-pool 2, conv 64 3x3 relu, max-pool
// 2, dense 128 relu, dropout, dense 10 softmax; see examples/common/cnn.hpp) with a Keras
// optimizer, showing Keras's progress bar, and optionally logs a CSV history, plots it as SVG
// and checkpoints after every epoch.
//   fashion_cnn [--optimizer adam] [--epochs 15] [--batch-size 128] [--lr X] [--dropout 0.25]
//               [--data-format channels_last|channels_first] [--seed 1] [--limit N]
//               [--data-dir DIR] [--save FILE.npz] [--load FILE.npz] [--history FILE.csv]
//               [--plot FILE.svg]
#include <cstdio>
#include <string>

#include "examples/common/cnn.hpp"
#include "examples/common/run.hpp"

namespace {

constexpr const char* kUsage =
    "usage: fashion_cnn [--optimizer NAME] [--epochs N] [--batch-size N] [--lr X] [--dropout X]\n"
    "                   [--data-format channels_last|channels_first] [--seed N] [--limit N]\n"
    "                   [--threads N]\n"
    "                   [--data-dir DIR] [--save FILE.npz] [--load FILE.npz]\n"
    "                   [--history FILE.csv] [--plot FILE.svg]\n"
    "  --optimizer    adam (default), sgd, momentum, nesterov, rmsprop, adagrad, adadelta,\n"
    "                 adamax, nadam; --lr defaults to adam 0.001, sgd 0.1, momentum/nesterov\n"
    "                 0.01 (momentum 0.9), rmsprop 0.001, adagrad 0.01, adadelta 1.0,\n"
    "                 adamax/nadam 0.002\n"
    "  --epochs       total epochs, counting those of a --load'ed checkpoint (default 15)\n"
    "  --threads      threads for the kernels (default 0: every core, or KTAPE_NUM_THREADS); the\n"
    "                 results are the same at any count; under mpirun, each machine's cores\n"
    "                 are divided among its ranks\n"
    "  --dropout      the rate after the dense 128 layer (default 0.25)\n"
    "  --data-format  channels_last (default: images fed as 28x28x1) or channels_first (1x28x28)\n"
    "  --limit        use only the first N training and N test samples\n"
    "  --save         write a checkpoint (weights, optimizer state, RNG state, history) after\n"
    "                 every epoch\n"
    "  --load         resume from a checkpoint of the same --optimizer, --seed and --dropout;\n"
    "                 its learning rate is used unless --lr is given\n"
    "  --history      write the per-epoch CSV log (epoch,loss,acc,val_loss,val_acc,seconds)\n"
    "  --plot         write the loss/accuracy curves as an SVG image\n"
    "The validation (val_) metrics are those of the test set.\n";

}  // namespace

int main(int argc, char** argv) {
  ktape::examples::RunFlags run;
  run.epochs = 15;
  ktape::examples::CnnConfig cfg;
  ktape::train::FlagParser flags("fashion_cnn", kUsage);
  ktape::examples::add_run_flags(flags, run);
  flags.integer("--batch-size", cfg.batch_size, 1);
  flags.number("--lr", cfg.lr, {.min = 0, .min_inclusive = false});
  flags.number("--dropout", cfg.dropout, {.min = 0, .max = 1, .max_inclusive = false});
  flags.text("--optimizer", cfg.optimizer, ktape::examples::optimizer_names());
  flags.text("--data-format", cfg.data_format, {"channels_last", "channels_first"});
  flags.text("--padding", cfg.padding, {"same", "valid"});
  flags.integer("--seed", cfg.seed);
  flags.parse(argc, argv);
  return ktape::examples::run_classifier(
      "fashion_cnn", run,
      [&] {
        ktape::backend::set_random_seed(cfg.seed);
        return std::make_unique<ktape::examples::Cnn>(cfg);
      },
      [&](const ktape::examples::Classifier& m) {
        char line[256];
        std::snprintf(line, sizeof line, "%s (%lld parameters), %s lr %g, batch %d, dropout %g",
                      m.spec().description.c_str(), static_cast<long long>(m.num_params()),
                      cfg.optimizer.c_str(), m.lr(), cfg.batch_size, cfg.dropout);
        return std::string(line);
      },
      "Fashion-MNIST CNN, " + cfg.optimizer + ", " + cfg.data_format + " (val = test set)");
}
