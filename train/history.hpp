// History: per-epoch training records (epoch number, named metrics, wall time), as Keras's
// History callback collects them, and their CSV form (Keras CSVLogger style):
//   epoch,loss,acc,val_loss,val_acc,seconds[,other metrics in first-seen order]
// The six standard columns always come first, in that order; a value an epoch lacks is
// written "NA", NaN as "nan", numbers in their shortest round-trip form.
#pragma once

#include <string>
#include <vector>

#include "train/progbar.hpp"

namespace ktape::train {

struct EpochRecord {
  int epoch = 0;    // as printed in "Epoch N/M" (1-based in the examples)
  Metrics metrics;  // e.g. {{"loss", 0.4}, {"acc", 0.86}, {"val_loss", 0.45}, {"val_acc", 0.84}}
  double seconds = 0;
};

class History {
 public:
  // Appends one epoch's record.
  void add_epoch(int epoch, const Metrics& metrics, double seconds);

  const std::vector<EpochRecord>& records() const { return records_; }
  std::size_t size() const { return records_.size(); }
  bool empty() const { return records_.empty(); }
  // `name`'s value at each epoch, NaN where an epoch lacks it.
  std::vector<double> series(const std::string& name) const;
  // True if some epoch has a value for `name`.
  bool has(const std::string& name) const;

  // The CSV header columns, then the whole file as text.
  std::vector<std::string> columns() const;
  std::string to_csv() const;
  // Parses what to_csv writes, so that from_csv(h.to_csv()).to_csv() == h.to_csv(): "NA" is a
  // metric the epoch lacks, "nan"/"inf"/"-inf" and shortest round-trip numbers come back as the
  // same doubles. Needs the "epoch" and "seconds" columns; every other column is a metric.
  // Throws ValueError naming the line for malformed text.
  static History from_csv(const std::string& text);
  // Writes to_csv() to `path` through a temp file and a rename; calling it after every epoch
  // keeps an up-to-date log that a crash cannot corrupt. Throws IOError on failure.
  void write_csv(const std::string& path) const;

 private:
  std::vector<EpochRecord> records_;
};

}  // namespace ktape::train
