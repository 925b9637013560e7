#include "examples/common/train/history.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "examples/common/train/atomic_file.hpp"

namespace ktape::train {
namespace {

std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + '"';
}

const double* find_metric(const Metrics& m, const std::string& name) {
  for (const auto& [k, v] : m)
    if (k == name) return &v;
  return nullptr;
}

}  // namespace

void History::add_epoch(int epoch, const Metrics& metrics, double seconds) {
  records_.push_back({epoch, metrics, seconds});
}

std::vector<double> History::series(const std::string& name) const {
  std::vector<double> out;
  out.reserve(records_.size());
  for (const auto& r : records_) {
    const double* v = find_metric(r.metrics, name);
    out.push_back(v ? *v : std::numeric_limits<double>::quiet_NaN());
  }
  return out;
}

bool History::has(const std::string& name) const {
  return std::any_of(records_.begin(), records_.end(),
                     [&](const EpochRecord& r) { return find_metric(r.metrics, name) != nullptr; });
}

std::vector<std::string> History::columns() const {
  std::vector<std::string> cols = {"epoch", "loss", "acc", "val_loss", "val_acc", "seconds"};
  for (const auto& r : records_)
    for (const auto& [k, v] : r.metrics)
      if (std::find(cols.begin(), cols.end(), k) == cols.end()) cols.push_back(k);
  return cols;
}

std::string History::to_csv() const {
  const auto cols = columns();
  std::string out;
  for (std::size_t i = 0; i < cols.size(); ++i) {
    if (i) out += ',';
    out += csv_field(cols[i]);
  }
  out += '\n';
  for (const auto& r : records_) {
    out += std::to_string(r.epoch);
    for (std::size_t i = 1; i < cols.size(); ++i) {
      out += ',';
      if (cols[i] == "seconds") {
        out += format_number(r.seconds);
      } else {
        const double* v = find_metric(r.metrics, cols[i]);
        out += v ? format_number(*v) : "NA";
      }
    }
    out += '\n';
  }
  return out;
}

void History::write_csv(const std::string& path) const { write_file_atomically(path, to_csv()); }

}  // namespace ktape::train
