// The command-line driver the classifier examples share (fashion_mlp, fashion_cnn): the common
// flags, then load Fashion-MNIST, build the model, resume from --load, train to --epochs with
// Keras's progress bar, write the checkpoint, CSV history and SVG plot after every epoch, and
// print the final test accuracy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "examples/common/classifier.hpp"
#include "train/flags.hpp"

namespace ktape::examples {

struct RunFlags {
  int epochs = 10;
  int threads = 0;  // 0: every core (or KTAPE_NUM_THREADS)
  std::int64_t limit = -1;
  std::string data_dir = data::default_fashion_mnist_dir();
  std::string save_path, load_path, history_path, plot_path;
};

// Registers --epochs, --threads, --limit, --data-dir, --save, --load, --history and --plot.
void add_run_flags(train::FlagParser& flags, RunFlags& run);

// Starts this process's rank (ktape/distributed: one process when not launched by mpirun) and
// sets its kernel threads: `threads` if > 0, else, when the machine runs several ranks and
// KTAPE_NUM_THREADS is unset, its cores divided among them. Returns whether this is rank 0, the
// one that prints and writes files.
bool start_rank(int threads);
// Under mpirun, the line saying how the ranks split every batch (nothing for one process).
void describe_ranks(std::ostream& out);

// Runs the training described above; `make` builds the model (after the data loaded),
// `describe` gives the line printed about it. Returns the exit code: every exception becomes
// "<program>: error: <message>" on stderr and 1.
int run_classifier(const std::string& program, const RunFlags& run,
                   const std::function<std::unique_ptr<Classifier>()>& make,
                   const std::function<std::string(const Classifier&)>& describe,
                   const std::string& plot_title);

}  // namespace ktape::examples
