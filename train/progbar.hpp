// Progbar: the Keras 2.x progress bar for one epoch of training.
//   Interactive (a terminal): the line is redrawn in place with '\r', at most every 0.05 s and
//   always at the end:   384/60000 [>.............................] - ETA: 12s - loss: 0.5432
//   and finishes as      60000/60000 [==============================] - 7s 120us/step - loss: ...
//   Non-interactive (a file or pipe): nothing until the end, then one line (like Keras
//   verbose=2):          60000/60000 - 7s - loss: 0.4000 - acc: 0.8600
// Metrics are averaged over the epoch, each value weighted by the steps it covers, except
// "stateful" ones, which are shown as last given. The clock is injectable for tests.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

namespace ktape::train {

using Metrics = std::vector<std::pair<std::string, double>>;

class Progbar {
 public:
  using Clock = std::function<double()>;  // seconds on any monotonic scale

  // Writes to std::cout; interactive if stdout is a terminal (isatty).
  explicit Progbar(std::int64_t target);
  // `target` is the number of steps (samples or batches) in the epoch, >= 0. An empty `clock`
  // means std::chrono::steady_clock.
  Progbar(std::int64_t target, std::ostream& out, bool interactive, Clock clock = {});

  // `current` steps are done; `values` are the metrics of the steps since the previous update
  // (weighted by current - previous, at least 1). The epoch line is finished by the first
  // update with current >= target, so pass validation metrics in that last update (as Keras's
  // ProgbarLogger does); later updates are ignored.
  void update(std::int64_t current, const Metrics& values = {});
  // Metrics shown as given instead of averaged (Keras's stateful_metrics).
  void set_stateful_metrics(std::vector<std::string> names);

  bool finished() const { return finished_; }
  // The value shown for `name`: its running average (or last value if stateful); NaN if unseen.
  double value(const std::string& name) const;

 private:
  struct Entry {
    std::string name;
    double sum = 0, weight = 0;  // averaged metrics
    double last = 0;             // stateful metrics
    bool stateful = false;
  };
  std::string metrics_text() const;
  std::string bar_text(std::int64_t current) const;

  std::int64_t target_;
  std::ostream& out_;
  bool interactive_;
  Clock clock_;
  double start_;
  double last_draw_;
  std::int64_t seen_ = 0;
  std::size_t drawn_width_ = 0;  // length of the line currently on the terminal
  bool finished_ = false;
  std::vector<Entry> values_;
  std::vector<std::string> stateful_;
};

// "Epoch 3/10\n", the line Keras prints before each epoch's bar.
void print_epoch_header(std::ostream& out, int epoch, int epochs);

// Keras's ETA text: "1:02:03" above an hour, "2:03" above a minute, else "45s" (truncated).
std::string format_eta(double seconds);

}  // namespace ktape::train
