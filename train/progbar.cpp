#include "train/progbar.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

#include "engine/errors.hpp"

namespace ktape::train {
namespace {

constexpr int kWidth = 30;
constexpr double kInterval = 0.05;

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string printf_string(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// Keras: '%.4f' unless the value is tiny, then '%.4e'.
std::string format_value(double v) {
  return printf_string(std::fabs(v) > 1e-3 ? " %.4f" : " %.4e", v);
}

std::string format_step_time(double per_step) {
  if (per_step >= 1) return printf_string(" %.0fs/step", per_step);
  if (per_step >= 1e-3) return printf_string(" %.0fms/step", per_step * 1e3);
  return printf_string(" %.0fus/step", per_step * 1e6);
}

}  // namespace

std::string format_eta(double seconds) {
  const auto e = static_cast<long long>(std::max(0.0, seconds));
  char buf[64];
  if (seconds > 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", e / 3600, (e % 3600) / 60, e % 60);
  else if (seconds > 60)
    std::snprintf(buf, sizeof buf, "%lld:%02lld", e / 60, e % 60);
  else
    std::snprintf(buf, sizeof buf, "%llds", e);
  return buf;
}

void print_epoch_header(std::ostream& out, int epoch, int epochs) {
  out << "Epoch " << epoch << '/' << epochs << '\n';
  out.flush();
}

Progbar::Progbar(std::int64_t target) : Progbar(target, std::cout, ::isatty(STDOUT_FILENO) != 0) {}

Progbar::Progbar(std::int64_t target, std::ostream& out, bool interactive, Clock clock)
    : target_(target),
      out_(out),
      interactive_(interactive),
      clock_(clock ? std::move(clock) : Clock(steady_seconds)),
      start_(clock_()),
      last_draw_(-std::numeric_limits<double>::infinity()) {
  if (target < 0) throw ValueError("Progbar: target must be >= 0, got " + std::to_string(target));
}

void Progbar::set_stateful_metrics(std::vector<std::string> names) {
  stateful_ = std::move(names);
  for (auto& e : values_)
    e.stateful = std::find(stateful_.begin(), stateful_.end(), e.name) != stateful_.end();
}

double Progbar::value(const std::string& name) const {
  for (const auto& e : values_)
    if (e.name == name) return e.stateful ? e.last : e.sum / std::max(1.0, e.weight);
  return std::numeric_limits<double>::quiet_NaN();
}

void Progbar::update(std::int64_t current, const Metrics& values) {
  if (finished_) return;
  const double weight = static_cast<double>(std::max<std::int64_t>(current - seen_, 1));
  for (const auto& [name, v] : values) {
    const std::string& key = name;  // clang 14 cannot capture a structured binding
    auto it = std::find_if(values_.begin(), values_.end(),
                           [&key](const Entry& e) { return e.name == key; });
    if (it == values_.end()) {
      Entry e;
      e.name = name;
      e.stateful = std::find(stateful_.begin(), stateful_.end(), name) != stateful_.end();
      values_.push_back(e);
      it = values_.end() - 1;
    }
    it->sum += v * weight;
    it->weight += weight;
    it->last = v;
  }
  seen_ = current;

  const double now = clock_();
  const bool done = current >= target_;
  const double elapsed = now - start_;
  const std::string total_time = printf_string(" - %.0fs", elapsed);
  if (!interactive_) {
    if (!done) return;
    out_ << std::to_string(current) << '/' << target_ << total_time << metrics_text() << '\n';
    out_.flush();
    finished_ = true;
    return;
  }
  if (!done && now - last_draw_ < kInterval) return;
  last_draw_ = now;

  std::string line = bar_text(current);
  const double per_step = current > 0 ? elapsed / static_cast<double>(current) : 0.0;
  if (!done)
    line += " - ETA: " + format_eta(per_step * static_cast<double>(target_ - current));
  else
    line += total_time + format_step_time(per_step);
  line += metrics_text();
  const std::size_t width = line.size();
  if (width < drawn_width_) line.append(drawn_width_ - width, ' ');  // erase the old tail
  drawn_width_ = width;
  out_ << '\r' << line;
  if (done) {
    out_ << '\n';
    finished_ = true;
  }
  out_.flush();
}

std::string Progbar::bar_text(std::int64_t current) const {
  const int digits = static_cast<int>(std::to_string(target_).size());
  std::string s = std::to_string(current);
  if (static_cast<int>(s.size()) < digits) s.insert(0, digits - s.size(), ' ');
  s += '/' + std::to_string(target_) + " [";
  const double prog = target_ > 0 ? static_cast<double>(current) / static_cast<double>(target_) : 1;
  const int filled = std::clamp(static_cast<int>(kWidth * prog), 0, kWidth);
  if (filled > 0) {
    s.append(filled - 1, '=');
    s += current < target_ ? '>' : '=';
  }
  s.append(kWidth - filled, '.');
  return s + ']';
}

std::string Progbar::metrics_text() const {
  std::string s;
  for (const auto& e : values_) s += " - " + e.name + ":" + format_value(value(e.name));
  return s;
}

}  // namespace ktape::train
