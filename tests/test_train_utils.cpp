// Tests for the ktape_train utilities: the Keras-style Progbar (exact text in interactive and
// non-interactive mode, with an injected clock), History's CSV and the SVG training plot (checked
// with a small XML well-formedness parser: root <svg>, one <polyline> per curve, one point per
// finite value).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "train/history.hpp"
#include "train/progbar.hpp"
#include "train/svg_plot.hpp"

namespace fs = std::filesystem;
using ktape::train::format_eta;
using ktape::train::History;
using ktape::train::Progbar;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts(1);
  for (char c : s) {
    if (c == sep)
      parts.emplace_back();
    else
      parts.back() += c;
  }
  return parts;
}

// A clock the test moves by hand.
struct FakeClock {
  double now = 0;
  Progbar::Clock fn() {
    return [this] { return now; };
  }
};

// One epoch of 60000 samples: two early batches, one in the middle, the end with validation.
void run_epoch(Progbar& bar, FakeClock& clock) {
  clock.now = 0.1;
  bar.update(384, {{"loss", 0.6}, {"acc", 0.5}});
  clock.now = 0.12;  // within 0.05 s of the last draw: not redrawn, but averaged
  bar.update(768, {{"loss", 0.6}, {"acc", 0.5}});
  clock.now = 2.0;
  bar.update(30000, {{"loss", 0.4}, {"acc", 0.75}});
  clock.now = 7.2;
  bar.update(60000, {{"loss", 0.2}, {"acc", 1.0}, {"val_loss", 0.35}, {"val_acc", 0.87}});
}
// Step-weighted means: loss (0.6*768 + 0.4*29232 + 0.2*30000) / 60000 = 0.30256,
// acc (0.5*768 + 0.75*29232 + 1.0*30000) / 60000 = 0.8718.
const char* const kFinalMetrics =
    " - loss: 0.3026 - acc: 0.8718 - val_loss: 0.3500 - val_acc: 0.8700";

TEST(Progbar, InteractiveRedrawsWithCarriageReturnAndEndsLikeKeras) {
  std::ostringstream out;
  FakeClock clock;
  Progbar bar(60000, out, true, clock.fn());
  run_epoch(bar, clock);
  const auto lines = split(out.str(), '\r');
  ASSERT_EQ(lines.size(), 4u) << out.str();  // "" before the first '\r', then three draws
  EXPECT_EQ(lines[0], "");
  // 0.1 s for 384 samples: ETA 0.1 / 384 * 59616 = 15.5 s. Keras draws no '>' below 1/30.
  EXPECT_EQ(lines[1],
            "  384/60000 [..............................] - ETA: 15s - loss: 0.6000 - acc: 0.5000");
  // At 30000: loss (0.6*768 + 0.4*29232) / 30000 = 0.40512, acc 0.7436; one trailing space
  // erases the last character of the longer previous line.
  EXPECT_EQ(lines[2],
            "30000/60000 [==============>...............] - ETA: 2s - loss: 0.4051 - acc: 0.7436 ");
  EXPECT_EQ(lines[3], "60000/60000 [==============================] - 7s 120us/step" +
                          std::string(kFinalMetrics) + "\n");
  EXPECT_TRUE(bar.finished());
  EXPECT_NEAR(bar.value("loss"), 0.30256, 1e-12);
  EXPECT_NEAR(bar.value("val_acc"), 0.87, 1e-12);
  EXPECT_TRUE(std::isnan(bar.value("nope")));
  // Updates after the end are ignored.
  bar.update(60000, {{"loss", 9.0}});
  EXPECT_EQ(split(out.str(), '\r').size(), 4u);
}

TEST(Progbar, NonInteractivePrintsOneLineAtTheEnd) {
  std::ostringstream out;
  FakeClock clock;
  Progbar bar(60000, out, false, clock.fn());
  clock.now = 1;
  bar.update(30000, {{"loss", 0.4}});
  EXPECT_EQ(out.str(), "");
  std::ostringstream out2;
  FakeClock clock2;
  Progbar bar2(60000, out2, false, clock2.fn());
  run_epoch(bar2, clock2);
  EXPECT_EQ(out2.str(), "60000/60000 - 7s" + std::string(kFinalMetrics) + "\n");
  EXPECT_EQ(out2.str().find('\r'), std::string::npos);
  EXPECT_EQ(out2.str().find('\b'), std::string::npos);
}

TEST(Progbar, EtaFormats) {
  EXPECT_EQ(format_eta(0), "0s");
  EXPECT_EQ(format_eta(12.9), "12s");
  EXPECT_EQ(format_eta(60), "60s");
  EXPECT_EQ(format_eta(61), "1:01");
  EXPECT_EQ(format_eta(599.5), "9:59");
  EXPECT_EQ(format_eta(3600), "60:00");
  EXPECT_EQ(format_eta(3661.7), "1:01:01");
  EXPECT_EQ(format_eta(36000 + 7322), "12:02:02");

  // Through the bar: 1 of 1000 steps in 3.7 s leaves 999 * 3.7 = 3696.3 s; then 125 s.
  std::ostringstream out;
  FakeClock clock;
  Progbar bar(1000, out, true, clock.fn());
  clock.now = 3.7;
  bar.update(1);
  clock.now = 50;
  bar.update(400);  // 50 / 400 * 600 = 75 s
  clock.now = 100;
  bar.update(999);  // 100 / 999 * 1 = 0.1 s
  const auto lines = split(out.str(), '\r');
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[1], "   1/1000 [..............................] - ETA: 1:01:36");
  // Shorter lines are padded with spaces to erase the end of the previous one.
  EXPECT_EQ(lines[2], " 400/1000 [===========>..................] - ETA: 1:15   ");
  EXPECT_EQ(lines[3], " 999/1000 [============================>.] - ETA: 0s  ");
}

TEST(Progbar, SmallValuesStatefulMetricsAndStepTimes) {
  std::ostringstream out;
  FakeClock clock;
  Progbar bar(10, out, false, clock.fn());
  bar.set_stateful_metrics({"lr"});
  clock.now = 1;
  bar.update(5, {{"loss", 2e-5}, {"lr", 0.5}});
  clock.now = 20;
  bar.update(10, {{"loss", 0.0}, {"lr", 0.25}});
  EXPECT_EQ(out.str(), "10/10 - 20s - loss: 1.0000e-05 - lr: 0.2500\n");

  std::ostringstream slow;
  Progbar bar2(10, slow, true, clock.fn());
  clock.now = 45;
  bar2.update(10);
  EXPECT_EQ(slow.str(), "\r10/10 [==============================] - 25s 2s/step\n");
  std::ostringstream fast;
  Progbar bar3(100, fast, true, clock.fn());
  clock.now = 45.5;
  bar3.update(100);
  EXPECT_EQ(fast.str(), "\r100/100 [==============================] - 0s 5ms/step\n");
  std::ostringstream empty;
  Progbar bar4(0, empty, true, clock.fn());
  bar4.update(0);
  EXPECT_EQ(empty.str(), "\r0/0 [==============================] - 0s 0us/step\n");
  EXPECT_THROW(Progbar(-1, empty, true), ktape::ValueError);
}

TEST(Progbar, EpochHeader) {
  std::ostringstream out;
  ktape::train::print_epoch_header(out, 3, 10);
  EXPECT_EQ(out.str(), "Epoch 3/10\n");
}

// ---------------------------------------------------------------------------------------------

class TrainFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ktape_train_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::size_t file_count() const {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++n;
    return n;
  }
  fs::path dir_;
};

History three_epochs() {
  History h;
  h.add_epoch(1, {{"loss", 0.5}, {"acc", 0.8125}, {"val_loss", 0.625}, {"val_acc", 0.75}}, 7.25);
  h.add_epoch(2, {{"loss", 0.375}, {"acc", 0.875}, {"val_loss", 0.5}, {"val_acc", 0.8}}, 6.5);
  h.add_epoch(3, {{"loss", 0.25}, {"acc", 0.9}, {"val_loss", 0.45}, {"val_acc", 0.85}}, 6.0);
  return h;
}

TEST_F(TrainFilesTest, HistoryCsv) {
  const History h = three_epochs();
  EXPECT_EQ(h.series("loss"), (std::vector<double>{0.5, 0.375, 0.25}));
  const auto p = path("history.csv");
  h.write_csv(p);
  EXPECT_EQ(read(p),
            "epoch,loss,acc,val_loss,val_acc,seconds\n"
            "1,0.5,0.8125,0.625,0.75,7.25\n"
            "2,0.375,0.875,0.5,0.8,6.5\n"
            "3,0.25,0.9,0.45,0.85,6\n");
  EXPECT_EQ(file_count(), 1u);  // no temp file left

  // Missing values are NA, NaN is nan, other metrics follow the standard columns.
  History g;
  g.add_epoch(1, {{"loss", 2.302585092994046}, {"lr", 0.1}}, 1.5);
  g.add_epoch(2, {{"loss", kNaN}, {"acc", 0.1}, {"top,5", 1e-7}}, 0.001);
  g.write_csv(p);
  EXPECT_EQ(read(p),
            "epoch,loss,acc,val_loss,val_acc,seconds,lr,\"top,5\"\n"
            "1,2.302585092994046,NA,NA,NA,1.5,0.1,NA\n"
            "2,nan,0.1,NA,NA,0.001,NA,1e-07\n");
  EXPECT_EQ(History().to_csv(), "epoch,loss,acc,val_loss,val_acc,seconds\n");
  EXPECT_THROW(h.write_csv(path("no/such/dir/h.csv")), ktape::IOError);
}

TEST(History, FromCsvRoundTrips) {
  History g;
  g.add_epoch(1, {{"loss", 2.302585092994046}, {"lr", 0.1}}, 1.5);
  g.add_epoch(2, {{"loss", kNaN}, {"acc", 0.1}, {"top,5", 1e-7}, {"q\"x", -1.0 / 3}}, 0.001);
  g.add_epoch(3, {{"loss", std::numeric_limits<double>::infinity()}, {"acc", 0.1 + 0.2}}, 0);
  const History back = History::from_csv(g.to_csv());
  EXPECT_EQ(back.to_csv(), g.to_csv());
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back.records()[1].epoch, 2);
  EXPECT_EQ(back.series("acc")[2], 0.1 + 0.2);  // bit-exact
  EXPECT_TRUE(std::isnan(back.series("loss")[1]));
  EXPECT_TRUE(std::isnan(back.series("acc")[0]));  // NA: absent
  EXPECT_FALSE(back.has("val_loss"));
  EXPECT_EQ(back.series("q\"x")[1], -1.0 / 3);
  EXPECT_EQ(History::from_csv(three_epochs().to_csv()).to_csv(), three_epochs().to_csv());
  EXPECT_TRUE(History::from_csv(History().to_csv()).empty());

  EXPECT_THROW(History::from_csv(""), ktape::ValueError);
  EXPECT_THROW(History::from_csv("loss,acc\n"), ktape::ValueError);  // no epoch column
  EXPECT_THROW(History::from_csv("epoch,loss,seconds\n1,0.5\n"), ktape::ValueError);
  EXPECT_THROW(History::from_csv("epoch,loss,seconds\n1,x,2\n"), ktape::ValueError);
  EXPECT_THROW(History::from_csv("epoch,loss,seconds\n1.5,1,2\n"), ktape::ValueError);
  try {
    History::from_csv("epoch,loss,seconds\n1,0.5,1\n2,0.4z,1\n");
    FAIL() << "no error";
  } catch (const ktape::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
}

// A small XML checker: well-formed tags, quoted attributes, entities; returns the elements.
struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
};

bool valid_entities(const std::string& text) {
  for (std::size_t i = text.find('&'); i != std::string::npos; i = text.find('&', i + 1)) {
    const std::size_t end = text.find(';', i);
    if (end == std::string::npos) return false;
    const std::string ent = text.substr(i + 1, end - i - 1);
    if (ent != "amp" && ent != "lt" && ent != "gt" && ent != "quot" && ent != "apos") return false;
  }
  return text.find('<') == std::string::npos;
}

std::vector<Element> parse_xml(const std::string& s) {
  std::vector<Element> elements;
  std::vector<std::string> open;
  int roots = 0;
  std::size_t i = 0;
  auto fail = [&](const std::string& why) {
    ADD_FAILURE() << "bad XML at " << i << ": " << why << " near '" << s.substr(i, 40) << "'";
    return std::vector<Element>{};
  };
  while (i < s.size()) {
    if (s[i] != '<') {
      const std::size_t next = std::min(s.find('<', i), s.size());
      if (!valid_entities(s.substr(i, next - i))) return fail("bad text");
      if (open.empty() && s.substr(i, next - i).find_first_not_of(" \n") != std::string::npos)
        return fail("text outside the root");
      i = next;
      continue;
    }
    if (s.compare(i, 2, "<?") == 0) {
      i = s.find("?>", i);
      if (i == std::string::npos) return fail("unterminated <?");
      i += 2;
      continue;
    }
    if (s.compare(i, 2, "</") == 0) {
      const std::size_t end = s.find('>', i);
      if (end == std::string::npos) return fail("unterminated close tag");
      const std::string name = s.substr(i + 2, end - i - 2);
      if (open.empty() || open.back() != name) return fail("mismatched </" + name + ">");
      open.pop_back();
      i = end + 1;
      continue;
    }
    ++i;
    Element e;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '-'))
      e.name += s[i++];
    if (e.name.empty()) return fail("no tag name");
    for (;;) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) return fail("unterminated tag");
      if (s[i] == '>' || s.compare(i, 2, "/>") == 0) break;
      std::string attr;
      while (i < s.size() && s[i] != '=' && !std::isspace(static_cast<unsigned char>(s[i])))
        attr += s[i++];
      if (i + 1 >= s.size() || s[i] != '=' || s[i + 1] != '"') return fail("unquoted attribute");
      const std::size_t end = s.find('"', i + 2);
      if (end == std::string::npos) return fail("unterminated attribute");
      const std::string value = s.substr(i + 2, end - i - 2);
      if (!valid_entities(value)) return fail("bad attribute value");
      if (!e.attrs.emplace(attr, value).second) return fail("duplicate attribute " + attr);
      i = end + 1;
    }
    if (open.empty()) ++roots;
    if (s[i] == '>') {
      open.push_back(e.name);
      ++i;
    } else {
      i += 2;
    }
    elements.push_back(std::move(e));
  }
  if (!open.empty()) return fail("unclosed <" + open.back() + ">");
  if (roots != 1) return fail("need exactly one root element");
  return elements;
}

std::vector<const Element*> all_named(const std::vector<Element>& els, const std::string& name) {
  std::vector<const Element*> r;
  for (const auto& e : els)
    if (e.name == name) r.push_back(&e);
  return r;
}

std::size_t point_count(const Element& polyline) {
  std::istringstream in(polyline.attrs.at("points"));
  std::string xy;
  std::size_t n = 0;
  while (in >> xy) {
    EXPECT_NE(xy.find(','), std::string::npos) << xy;
    ++n;
  }
  return n;
}

// Every coordinate attribute is a plain number (no nan/inf slipped through).
void expect_finite_coordinates(const std::vector<Element>& els) {
  for (const auto& e : els)
    for (const auto& [name, value] : e.attrs) {
      if (name == "points" || name == "x" || name == "y" || name == "x1" || name == "y1" ||
          name == "x2" || name == "y2" || name == "cx" || name == "cy") {
        EXPECT_EQ(value.find_first_not_of("0123456789.,- "), std::string::npos)
            << e.name << " " << name << "=" << value;
      }
    }
}

TEST_F(TrainFilesTest, SvgHasTwoPanelsFourCurvesAndAPointPerEpoch) {
  History h;
  for (int e = 1; e <= 12; ++e)
    h.add_epoch(e,
                {{"loss", 1.0 / e},
                 {"acc", 1 - 0.5 / e},
                 {"val_loss", 1.2 / e},
                 {"val_acc", 0.95 - 0.5 / e}},
                3.0);
  const auto p = path("history.svg");
  ktape::train::write_history_svg(h, p, "Fashion-MNIST MLP <SGD & dropout>");
  const std::string svg = read(p);
  EXPECT_EQ(svg, ktape::train::history_svg(h, "Fashion-MNIST MLP <SGD & dropout>"));
  EXPECT_EQ(file_count(), 1u);
  const auto els = parse_xml(svg);
  ASSERT_FALSE(els.empty());
  EXPECT_EQ(els[0].name, "svg");
  EXPECT_EQ(els[0].attrs.at("xmlns"), "http://www.w3.org/2000/svg");
  const auto lines = all_named(els, "polyline");
  ASSERT_EQ(lines.size(), 4u);
  for (const auto* l : lines) EXPECT_EQ(point_count(*l), 12u);
  EXPECT_EQ(all_named(els, "circle").size(), 48u);
  EXPECT_NE(svg.find("Fashion-MNIST MLP &lt;SGD &amp; dropout&gt;"), std::string::npos);
  for (const char* label : {">Loss<", ">Accuracy<", ">epoch<", ">train loss<", ">validation loss<",
                            ">train acc<", ">validation acc<"})
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  expect_finite_coordinates(els);
}

TEST_F(TrainFilesTest, SvgOneEpochNaNAndEmpty) {
  History one;
  one.add_epoch(1, {{"loss", 0.7}, {"acc", 0.75}, {"val_loss", 0.7}, {"val_acc", 0.75}}, 2);
  auto els = parse_xml(ktape::train::history_svg(one));
  const auto lines = all_named(els, "polyline");
  ASSERT_EQ(lines.size(), 4u);
  for (const auto* l : lines) EXPECT_EQ(point_count(*l), 1u);
  EXPECT_EQ(all_named(els, "circle").size(), 4u);  // so a single epoch is visible

  // NaN and inf points are skipped; a curve without finite values is not drawn.
  History bad;
  for (int e = 1; e <= 5; ++e)
    bad.add_epoch(e,
                  {{"loss", e == 3 ? kNaN : 1.0 / e},
                   {"acc", e == 5 ? std::numeric_limits<double>::infinity() : 0.5},
                   {"val_loss", kNaN}},
                  1);
  const std::string svg = ktape::train::history_svg(bad);
  els = parse_xml(svg);
  const auto curves = all_named(els, "polyline");
  ASSERT_EQ(curves.size(), 2u);
  EXPECT_EQ(point_count(*curves[0]), 4u);
  EXPECT_EQ(point_count(*curves[1]), 4u);
  expect_finite_coordinates(els);

  // No epochs at all: two empty panels saying so.
  const std::string empty = ktape::train::history_svg(History());
  els = parse_xml(empty);
  EXPECT_EQ(all_named(els, "polyline").size(), 0u);
  EXPECT_NE(empty.find(">no data<"), std::string::npos);

  // tf.keras names are used when acc/val_acc are absent.
  History tf;
  tf.add_epoch(1, {{"loss", 1}, {"accuracy", 0.5}, {"val_accuracy", 0.4}}, 1);
  els = parse_xml(ktape::train::history_svg(tf));
  EXPECT_EQ(all_named(els, "polyline").size(), 3u);
  EXPECT_THROW(ktape::train::write_history_svg(tf, path("no/dir/x.svg")), ktape::IOError);
}

}  // namespace
