#include "examples/common/run.hpp"

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "distributed/distributed.hpp"

#include "train/progbar.hpp"
#include "train/svg_plot.hpp"

namespace ktape::examples {

void add_run_flags(train::FlagParser& flags, RunFlags& run) {
  flags.integer("--epochs", run.epochs, 0);
  flags.integer("--threads", run.threads, 0, 4096);
  flags.integer("--limit", run.limit, 1);
  flags.text("--data-dir", run.data_dir);
  flags.text("--save", run.save_path);
  flags.text("--load", run.load_path);
  flags.text("--history", run.history_path);
  flags.text("--plot", run.plot_path);
}

bool start_rank(int threads) {
  namespace D = ktape::distributed;
  D::init();
  if (threads > 0)
    ktape::set_num_threads(threads);
  else if (D::local_size() > 1 && !std::getenv("KTAPE_NUM_THREADS"))
    ktape::set_num_threads(D::threads_per_rank());  // the ranks on a machine share its cores
  return D::rank() == 0;
}

void describe_ranks(std::ostream& out) {
  namespace D = ktape::distributed;
  if (D::size() > 1)
    out << D::size() << " processes (MPI) of " << ktape::num_threads()
        << " kernel thread(s), each on its slice of every global batch of " << D::size()
        << " x --batch-size samples\n";
}

int run_classifier(const std::string& program, const RunFlags& run,
                   const std::function<std::unique_ptr<Classifier>()>& make,
                   const std::function<std::string(const Classifier&)>& describe,
                   const std::string& plot_title) {
  namespace D = ktape::distributed;
  try {
    namespace K = ktape::backend;
    namespace T = ktape::train;
    // Under mpirun: one rank per process, rank 0 alone prints and writes files.
    const bool lead = start_rank(run.threads);
    std::ostringstream quiet;
    std::ostream& out = lead ? std::cout : quiet;
    // Output paths fail now, not after the first epoch has trained.
    if (lead && !run.save_path.empty()) T::check_writable("--save", run.save_path);
    if (lead && !run.history_path.empty()) T::check_writable("--history", run.history_path);
    if (lead && !run.plot_path.empty()) T::check_writable("--plot", run.plot_path);
    const auto train = data::load_fashion_mnist(run.data_dir, "train", run.limit);
    const auto test = data::load_fashion_mnist(run.data_dir, "t10k", run.limit);
    const std::int64_t n = train.images.shape()[0];
    out << "Fashion-MNIST: " << n << " train, " << test.images.shape()[0]
        << " test samples; backend " << K::backend() << '\n';
    describe_ranks(out);
    const auto model = make();
    if (!run.load_path.empty()) {
      if (D::size() > 1) {
        // Rank 0 reads the checkpoint and sends it: the file need not exist on other machines.
        const std::string bytes = D::broadcast_file(run.load_path);
        if (lead) {
          model->load_checkpoint(run.load_path);
        } else {
          const std::string local = "/tmp/ktape_checkpoint_" + std::to_string(::getpid()) + ".npz";
          std::ofstream(local, std::ios::binary) << bytes;
          try {
            model->load_checkpoint(local);
          } catch (...) {
            std::remove(local.c_str());
            throw;
          }
          std::remove(local.c_str());
        }
      } else {
        model->load_checkpoint(run.load_path);
      }
      out << "Resumed from " << run.load_path << " after epoch " << model->epochs_done() << '\n';
    }
    out << describe(*model) << '\n';
    out.flush();
    if (model->epochs_done() >= run.epochs && run.epochs > 0)
      out << "The checkpoint is already at epoch " << model->epochs_done() << " of " << run.epochs
          << "; nothing to train.\n";

    T::Metrics batch_metrics{{"loss", 0.0}, {"acc", 0.0}};  // reused: no allocation per batch
    double val_acc = 0;
    bool trained = false;
    for (int e = model->epochs_done() + 1; e <= run.epochs; ++e) {
      T::print_epoch_header(out, e, run.epochs);
      T::Progbar bar(n, out, lead && ::isatty(STDOUT_FILENO) != 0);
      double last_loss = 0, last_acc = 0;
      const auto r = model->fit_epoch(train, test, [&](std::int64_t done, double loss, double acc) {
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
      if (!lead) continue;
      if (!run.save_path.empty()) model->save_checkpoint(run.save_path);
      if (!run.history_path.empty()) model->history().write_csv(run.history_path);
      if (!run.plot_path.empty()) T::write_history_svg(model->history(), run.plot_path, plot_title);
    }
    if (!trained) val_acc = model->evaluate(test).acc;
    if (lead) std::printf("Final test accuracy: %.4f\n", val_acc);
    D::finalize();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of memory\n", program.c_str());
    return 1;
  } catch (const std::exception& e) {
    // Under mpirun, a rank that returns early ends the job (mpirun stops the others).
    if (D::size() > 1)
      std::fprintf(stderr, "%s (rank %d): error: %s\n", program.c_str(), D::rank(), e.what());
    else
      std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
    return 1;
  }
  return 0;
}

}  // namespace ktape::examples
