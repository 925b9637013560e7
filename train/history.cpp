#include "train/history.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include "engine/errors.hpp"
#include "io/atomic_file.hpp"

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

// Splits one CSV line into fields (RFC 4180 quoting, as csv_field writes it).
std::vector<std::string> split_csv_line(const std::string& line, int line_no) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c != '"') {
        fields.back() += c;
      } else if (i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else {
        quoted = false;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  if (quoted)
    throw ValueError("History::from_csv: line " + std::to_string(line_no) + ": unclosed quote");
  return fields;
}

double parse_number(const std::string& s, int line_no, const std::string& column) {
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  double v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
    throw ValueError("History::from_csv: line " + std::to_string(line_no) + ": column '" + column +
                     "' is not a number: '" + s + "'");
  return v;
}

}  // namespace

History History::from_csv(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  if (lines.empty()) throw ValueError("History::from_csv: no header line");
  const auto cols = split_csv_line(lines[0], 1);
  const auto find_col = [&](const char* name) {
    const auto it = std::find(cols.begin(), cols.end(), name);
    if (it == cols.end())
      throw ValueError(std::string("History::from_csv: the header has no '") + name +
                       "' column: " + lines[0]);
    return static_cast<std::size_t>(it - cols.begin());
  };
  const std::size_t epoch_col = find_col("epoch");
  const std::size_t seconds_col = find_col("seconds");
  History h;
  for (std::size_t l = 1; l < lines.size(); ++l) {
    const int line_no = static_cast<int>(l + 1);
    if (lines[l].empty()) continue;
    const auto fields = split_csv_line(lines[l], line_no);
    if (fields.size() != cols.size())
      throw ValueError("History::from_csv: line " + std::to_string(line_no) + " has " +
                       std::to_string(fields.size()) + " fields, the header " +
                       std::to_string(cols.size()));
    const double epoch = parse_number(fields[epoch_col], line_no, "epoch");
    if (!(epoch == std::floor(epoch) && std::fabs(epoch) < 1e9))
      throw ValueError("History::from_csv: line " + std::to_string(line_no) +
                       ": the epoch is not an integer: '" + fields[epoch_col] + "'");
    Metrics metrics;
    for (std::size_t i = 0; i < cols.size(); ++i)
      if (i != epoch_col && i != seconds_col && fields[i] != "NA")
        metrics.emplace_back(cols[i], parse_number(fields[i], line_no, cols[i]));
    const double seconds =
        fields[seconds_col] == "NA" ? 0.0 : parse_number(fields[seconds_col], line_no, "seconds");
    h.add_epoch(static_cast<int>(epoch), metrics, seconds);
  }
  return h;
}

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

void History::write_csv(const std::string& path) const {
  ktape::write_file_atomically(path, to_csv());
}

}  // namespace ktape::train
