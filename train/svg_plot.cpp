#include "train/svg_plot.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string_view>
#include <vector>

#include "io/atomic_file.hpp"

namespace ktape::train {
namespace {

constexpr double kWidth = 960, kHeight = 450;
constexpr double kPanelWidth = kWidth / 2;
constexpr double kPlotTop = 80, kPlotBottom = 360;
constexpr double kPlotLeft = 75, kPlotRight = 455;  // within a panel
constexpr std::size_t kMaxDots = 60;
constexpr const char* kTrainColor = "#1f77b4";
constexpr const char* kValColor = "#ff7f0e";

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters other than tab/newline are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n')
          out += ' ';
        else
          out += c;
    }
  }
  return out;
}

// Fixed-point text, independent of the C locale.
std::string fixed(double v, int decimals) {
  char buf[400];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, decimals);
  if (r.ec != std::errc()) return "0";
  std::string_view s(buf, static_cast<std::size_t>(r.ptr - buf));
  if (s.find_first_not_of("-0.") == std::string_view::npos && s[0] == '-') s.remove_prefix(1);
  return std::string(s);  // "-0.00" printed as "0.00"
}

std::string num(double v) { return fixed(v, 2); }

struct Axis {
  double lo = 0, hi = 1, step = 0.2;
  std::vector<double> ticks;
};

// Round tick steps (1, 2, 5 x 10^k) covering [lo, hi] with about `n` intervals.
Axis nice_axis(double lo, double hi, int n, bool integer) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  if (integer) step = std::max(1.0, std::round(step));
  Axis a;
  a.step = step;
  a.lo = std::floor(lo / step + 1e-9) * step;
  a.hi = std::ceil(hi / step - 1e-9) * step;
  for (int i = 0; a.lo + i * step <= a.hi + step * 1e-9; ++i) a.ticks.push_back(a.lo + i * step);
  return a;
}

int tick_decimals(double step) {
  return std::clamp(static_cast<int>(-std::floor(std::log10(step) + 1e-9)), 0, 8);
}

struct Curve {
  std::string label;
  const char* color;
  bool dashed;
  std::vector<double> y;
};

void draw_panel(std::string& svg, double ox, const std::string& title, const std::string& ylabel,
                const std::vector<int>& epochs, const std::vector<Curve>& curves) {
  const double left = ox + kPlotLeft, right = ox + kPlotRight;
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin;
  double ymin = xmin, ymax = -xmin;
  for (const auto& c : curves)
    for (std::size_t i = 0; i < c.y.size(); ++i)
      if (std::isfinite(c.y[i])) {
        xmin = std::min<double>(xmin, epochs[i]);
        xmax = std::max<double>(xmax, epochs[i]);
        ymin = std::min(ymin, c.y[i]);
        ymax = std::max(ymax, c.y[i]);
      }
  const bool any = std::isfinite(xmin);
  if (!any) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  const Axis ax = nice_axis(xmin, xmax, 8, true);
  const double ypad = 0.05 * (ymax - ymin);  // keep points off the frame
  const Axis ay = nice_axis(ymin - ypad, ymax + ypad, 5, false);
  auto px = [&](double x) { return left + (x - ax.lo) / (ax.hi - ax.lo) * (right - left); };
  auto py = [&](double y) {
    return kPlotBottom - (y - ay.lo) / (ay.hi - ay.lo) * (kPlotBottom - kPlotTop);
  };

  svg += "<g class=\"panel\">\n";
  svg += "<text x=\"" + num((left + right) / 2) +
         "\" y=\"66\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" +
         xml_escape(title) + "</text>\n";
  // Grid lines and tick labels.
  const int ydec = tick_decimals(ay.step);
  for (double t : ay.ticks) {
    const std::string y = num(py(t));
    svg += "<line x1=\"" + num(left) + "\" y1=\"" + y + "\" x2=\"" + num(right) + "\" y2=\"" + y +
           "\" stroke=\"#e0e0e0\"/>\n";
    svg += "<text x=\"" + num(left - 6) + "\" y=\"" + y +
           "\" text-anchor=\"end\" dominant-baseline=\"middle\" font-size=\"11\">" +
           fixed(t, ydec) + "</text>\n";
  }
  for (double t : ax.ticks) {
    const std::string x = num(px(t));
    svg += "<line x1=\"" + x + "\" y1=\"" + num(kPlotBottom) + "\" x2=\"" + x + "\" y2=\"" +
           num(kPlotBottom + 5) + "\" stroke=\"#333\"/>\n";
    svg += "<text x=\"" + x + "\" y=\"" + num(kPlotBottom + 19) +
           "\" text-anchor=\"middle\" font-size=\"11\">" + fixed(t, 0) + "</text>\n";
  }
  svg += "<rect x=\"" + num(left) + "\" y=\"" + num(kPlotTop) + "\" width=\"" + num(right - left) +
         "\" height=\"" + num(kPlotBottom - kPlotTop) + "\" fill=\"none\" stroke=\"#333\"/>\n";
  svg += "<text x=\"" + num((left + right) / 2) + "\" y=\"" + num(kPlotBottom + 38) +
         "\" text-anchor=\"middle\" font-size=\"12\">epoch</text>\n";
  const std::string ly = num((kPlotTop + kPlotBottom) / 2), lx = num(ox + 22);
  svg += "<text x=\"" + lx + "\" y=\"" + ly + "\" text-anchor=\"middle\" font-size=\"12\" " +
         "transform=\"rotate(-90 " + lx + " " + ly + ")\">" + xml_escape(ylabel) + "</text>\n";
  if (!any)
    svg += "<text x=\"" + num((left + right) / 2) + "\" y=\"" + ly +
           "\" text-anchor=\"middle\" font-size=\"13\" fill=\"#888\">no data</text>\n";

  // Curves, then the legend for the curves drawn.
  double legend_x = left;
  for (const auto& c : curves) {
    std::string points, dots;
    std::size_t n = 0;
    for (std::size_t i = 0; i < c.y.size(); ++i) {
      if (!std::isfinite(c.y[i])) continue;
      const std::string x = num(px(epochs[i])), y = num(py(c.y[i]));
      points += (n++ ? " " : "") + x + "," + y;
      dots += "<circle cx=\"" + x + "\" cy=\"" + y + "\" r=\"3\" fill=\"" + c.color + "\"/>\n";
    }
    if (n == 0) continue;
    const std::string dash = c.dashed ? "\" stroke-dasharray=\"6 4" : "";
    svg += "<polyline fill=\"none\" stroke=\"" + std::string(c.color) + "\" stroke-width=\"2" +
           dash + "\" points=\"" + points + "\"/>\n";
    if (n <= kMaxDots) svg += dots;
    const std::string y = num(kPlotBottom + 62);
    svg += "<line x1=\"" + num(legend_x) + "\" y1=\"" + y + "\" x2=\"" + num(legend_x + 28) +
           "\" y2=\"" + y + "\" stroke=\"" + c.color + "\" stroke-width=\"2" + dash + "\"/>\n";
    svg += "<text x=\"" + num(legend_x + 34) + "\" y=\"" + y +
           "\" dominant-baseline=\"middle\" font-size=\"12\">" + xml_escape(c.label) + "</text>\n";
    legend_x += 34 + 7.0 * static_cast<double>(c.label.size()) + 24;
  }
  svg += "</g>\n";
}

}  // namespace

std::string history_svg(const History& history, const std::string& title) {
  std::vector<int> epochs;
  for (const auto& r : history.records()) epochs.push_back(r.epoch);
  const bool keras_acc = history.has("acc") || history.has("val_acc");
  const std::string acc = keras_acc ? "acc" : "accuracy";

  std::string svg;
  svg += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" +
         num(kHeight) + "\" viewBox=\"0 0 " + num(kWidth) + " " + num(kHeight) +
         "\" font-family=\"DejaVu Sans, Arial, Helvetica, sans-serif\">\n";
  svg += "<title>" + xml_escape(title) + "</title>\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + num(kWidth / 2) +
         "\" y=\"32\" text-anchor=\"middle\" font-size=\"20\" font-weight=\"bold\">" +
         xml_escape(title) + "</text>\n";
  draw_panel(svg, 0, "Loss", "loss", epochs,
             {{"train loss", kTrainColor, false, history.series("loss")},
              {"validation loss", kValColor, true, history.series("val_loss")}});
  draw_panel(svg, kPanelWidth, "Accuracy", "accuracy", epochs,
             {{"train " + acc, kTrainColor, false, history.series(acc)},
              {"validation " + acc, kValColor, true, history.series("val_" + acc)}});
  svg += "</svg>\n";
  return svg;
}

void write_history_svg(const History& history, const std::string& path, const std::string& title) {
  ktape::write_file_atomically(path, history_svg(history, title));
}

}  // namespace ktape::train
