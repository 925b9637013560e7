// Trains an LSTM (or GRU) classifier on Fashion-MNIST: every 28x28 image is a sequence of 28
// rows of 28 pixels, the cell is a K:: step function run by K::rnn, its last output goes through
// dense(10) + softmax. See examples/common/rnn_model.hpp.
//   fashion_rnn [--cell lstm|gru] [--hidden 128] [--optimizer adam] [--lr X] [--clipnorm X]
//               [--epochs 10] [--batch-size 128] [--unroll] [--seed 1] [--limit N]
//               [--data-dir /usr/share/datasets/fashion-mnist]
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include "distributed/distributed.hpp"
#include "examples/common/rnn_model.hpp"
#include "examples/common/run.hpp"
#include "train/flags.hpp"
#include "train/progbar.hpp"

namespace {

constexpr const char* kUsage =
    "usage: fashion_rnn [--cell lstm|gru] [--hidden N] [--optimizer NAME] [--lr X]\n"
    "                   [--clipnorm X] [--epochs N] [--batch-size N] [--unroll] [--seed N]\n"
    "                   [--limit N] [--threads N] [--data-dir DIR]\n"
    "  --cell       lstm (default) or gru (Keras reset_after=True)\n"
    "  --hidden     units of the cell (default 128)\n"
    "  --optimizer  adam (default), sgd, rmsprop, adagrad, adadelta, adamax, nadam; Keras's\n"
    "               defaults, so --lr defaults to adam 0.001, sgd 0.01, ...\n"
    "  --clipnorm   clip the gradients to this global norm\n"
    "  --epochs     default 10; --batch-size default 128\n"
    "  --unroll     K::rnn(unroll=true): the unrolled graph instead of the symbolic loop\n"
    "  --threads    threads for the kernels (default 0: every core, or KTAPE_NUM_THREADS); the\n"
    "               results are the same at any count; under mpirun, each machine's cores\n"
    "               are divided among its ranks\n"
    "  --limit      use only the first N training and N test samples\n"
    "The validation (val_) metrics are those of the test set.\n";

}  // namespace

int main(int argc, char** argv) {
  int epochs = 10;
  int threads = 0;
  std::int64_t limit = -1;
  std::string data_dir = ktape::data::default_fashion_mnist_dir();
  ktape::examples::RnnConfig cfg;
  ktape::train::FlagParser flags("fashion_rnn", kUsage);
  flags.integer("--epochs", epochs, 0);
  flags.integer("--batch-size", cfg.batch_size, 1);
  flags.number("--lr", cfg.lr, {.min = 0, .min_inclusive = false});
  flags.number("--clipnorm", cfg.clipnorm, {.min = 0, .min_inclusive = false});
  flags.text("--optimizer", cfg.optimizer,
             {"adam", "sgd", "rmsprop", "adagrad", "adadelta", "adamax", "nadam"});
  flags.text("--cell", cfg.cell, {"lstm", "gru"});
  flags.integer("--hidden", cfg.hidden, 1, 1 << 20);
  flags.toggle("--unroll", cfg.unroll);
  flags.integer("--seed", cfg.seed);
  flags.integer("--limit", limit, 1);
  flags.integer("--threads", threads, 0, 4096);
  flags.text("--data-dir", data_dir);
  flags.parse(argc, argv);
  namespace D = ktape::distributed;
  try {
    namespace K = ktape::backend;
    namespace T = ktape::train;
    // Under mpirun: one rank per process, each on its slice of every global batch; rank 0
    // alone prints.
    const bool lead = ktape::examples::start_rank(threads);
    std::ostringstream quiet;
    std::ostream& out = lead ? std::cout : quiet;
    K::set_random_seed(cfg.seed);
    const auto train = ktape::data::load_fashion_mnist(data_dir, "train", limit);
    const auto test = ktape::data::load_fashion_mnist(data_dir, "t10k", limit);
    const std::int64_t n = train.images.shape()[0];
    out << "Fashion-MNIST: " << n << " train, " << test.images.shape()[0]
        << " test samples; backend " << K::backend() << '\n';
    ktape::examples::describe_ranks(out);
    ktape::examples::RnnClassifier model(cfg);
    char line[512];
    std::snprintf(
        line, sizeof line,
        "%s(%d) over 28 steps of 28 features -> dense 10 (%lld parameters), %s, %s lr %g%s,"
        " batch %d\n",
        cfg.cell == "lstm" ? "LSTM" : "GRU", cfg.hidden, static_cast<long long>(model.num_params()),
        cfg.unroll ? "unrolled" : "symbolic loop", cfg.optimizer.c_str(), model.lr(),
        cfg.clipnorm ? (" clipnorm " + std::to_string(*cfg.clipnorm)).c_str() : "", cfg.batch_size);
    out << line;
    out.flush();

    T::Metrics batch_metrics{{"loss", 0.0}, {"acc", 0.0}};
    ktape::examples::RnnEpochStats val;
    for (int e = 1; e <= epochs; ++e) {
      T::print_epoch_header(out, e, epochs);
      T::Progbar bar(n, out, lead && ::isatty(STDOUT_FILENO) != 0);
      double last_loss = 0, last_acc = 0;
      const auto st = model.train_epoch(train, [&](std::int64_t done, double loss, double acc) {
        if (done < n) {
          batch_metrics[0].second = loss;
          batch_metrics[1].second = acc;
          bar.update(done, batch_metrics);
        } else {  // the last batch goes with the validation metrics, as in Keras
          last_loss = loss;
          last_acc = acc;
        }
      });
      val = model.evaluate(test);
      bar.update(
          n,
          {{"loss", last_loss}, {"acc", last_acc}, {"val_loss", val.loss}, {"val_acc", val.acc}});
      std::snprintf(line, sizeof line,
                    "  epoch %d: train %.1fs, test %.1fs - loss: %.4f - acc: %.4f - test_loss: %.4f"
                    " - test_acc: %.4f\n",
                    e, st.seconds, val.seconds, st.loss, st.acc, val.loss, val.acc);
      out << line;
      out.flush();
    }
    if (epochs == 0) val = model.evaluate(test);
    if (lead) std::printf("Final test accuracy: %.4f\n", val.acc);
    D::finalize();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "fashion_rnn: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    if (D::size() > 1)
      std::fprintf(stderr, "fashion_rnn (rank %d): error: %s\n", D::rank(), e.what());
    else
      std::fprintf(stderr, "fashion_rnn: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
