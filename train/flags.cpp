#include "train/flags.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "engine/errors.hpp"

namespace ktape::train {

namespace {

std::string quoted(const std::string& v) { return "'" + v + "'"; }

std::string fmt(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// The whole of `v` as a base-10 integer, or a ValidationError naming the flag.
template <class I>
I parse_integer(const std::string& name, const std::string& v) {
  I out{};
  const char* first = v.data();
  const char* last = v.data() + v.size();
  const auto [p, err] = std::from_chars(first, last, out);
  if (v.empty() || p != last || err == std::errc::invalid_argument) {
    if (std::is_unsigned_v<I> && !v.empty() && v[0] == '-')
      throw CLI::ValidationError(name, quoted(v) + " must be a non-negative integer");
    throw CLI::ValidationError(name, quoted(v) + " is not an integer");
  }
  if (err == std::errc::result_out_of_range)
    throw CLI::ValidationError(name, quoted(v) + " is out of range");
  return out;
}

}  // namespace

struct FlagParser::Impl {
  Impl(std::string p, const char* u) : program(std::move(p)), usage(u) {}
  std::string program;
  const char* usage;
  CLI::App app;
};

FlagParser::FlagParser(std::string program, const char* usage)
    : impl_(std::make_unique<Impl>(std::move(program), usage)) {
  impl_->app.set_help_flag();  // --help prints our usage text (see parse)
}
FlagParser::~FlagParser() = default;

void FlagParser::integer(const std::string& name, int& dst, std::int64_t min, std::int64_t max) {
  impl_->app.add_option_function<std::string>(name, [name, &dst, min, max](const std::string& v) {
    const auto x = parse_integer<std::int64_t>(name, v);
    if (x < min || x > max)
      throw CLI::ValidationError(name, quoted(v) + " must be an integer in [" +
                                           std::to_string(min) + ", " + std::to_string(max) + "]");
    dst = static_cast<int>(x);
  });
}

void FlagParser::integer(const std::string& name, std::int64_t& dst, std::int64_t min,
                         std::int64_t max) {
  impl_->app.add_option_function<std::string>(name, [name, &dst, min, max](const std::string& v) {
    const auto x = parse_integer<std::int64_t>(name, v);
    if (x < min || x > max)
      throw CLI::ValidationError(name, quoted(v) + " must be an integer in [" +
                                           std::to_string(min) + ", " + std::to_string(max) + "]");
    dst = x;
  });
}

void FlagParser::integer(const std::string& name, std::uint64_t& dst) {
  impl_->app.add_option_function<std::string>(
      name, [name, &dst](const std::string& v) { dst = parse_integer<std::uint64_t>(name, v); });
}

namespace {
double parse_number(const std::string& name, const std::string& v, const FlagParser::Range& r) {
  double x = 0;
  const char* last = v.data() + v.size();
  const auto [p, err] = std::from_chars(v.data(), last, x);
  if (v.empty() || p != last || err == std::errc::invalid_argument)
    throw CLI::ValidationError(name, quoted(v) + " is not a number");
  std::string want;
  if (std::isfinite(r.min)) want += (r.min_inclusive ? " >= " : " > ") + fmt(r.min);
  if (std::isfinite(r.max))
    want +=
        (want.empty() ? " " : " and ") + std::string(r.max_inclusive ? "<= " : "< ") + fmt(r.max);
  const bool in_range = std::isfinite(x) && err != std::errc::result_out_of_range &&
                        (r.min_inclusive ? x >= r.min : x > r.min) &&
                        (r.max_inclusive ? x <= r.max : x < r.max);
  if (!in_range) throw CLI::ValidationError(name, quoted(v) + " must be a finite number" + want);
  return x;
}
}  // namespace

void FlagParser::number(const std::string& name, double& dst, Range range) {
  impl_->app.add_option_function<std::string>(
      name, [name, &dst, range](const std::string& v) { dst = parse_number(name, v, range); });
}

void FlagParser::number(const std::string& name, std::optional<double>& dst, Range range) {
  impl_->app.add_option_function<std::string>(
      name, [name, &dst, range](const std::string& v) { dst = parse_number(name, v, range); });
}

void FlagParser::text(const std::string& name, std::string& dst, std::vector<std::string> choices) {
  impl_->app.add_option_function<std::string>(
      name, [name, &dst, choices = std::move(choices)](const std::string& v) {
        if (!choices.empty() && std::find(choices.begin(), choices.end(), v) == choices.end()) {
          std::string list;
          for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
          throw CLI::ValidationError(name, quoted(v) + " is not one of " + list);
        }
        dst = v;
      });
}

void FlagParser::toggle(const std::string& name, bool& dst) { impl_->app.add_flag(name, dst); }

void FlagParser::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      std::fputs(impl_->usage, stdout);
      std::exit(0);
    }
  }
  try {
    impl_->app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    usage_error(impl_->program, impl_->usage, e.what());
  }
}

void usage_error(const std::string& program, const char* usage, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n%s", program.c_str(), message.c_str(), usage);
  std::exit(2);
}

void check_writable(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  if (path.empty()) throw IOError(flag + ": the path is empty");
  if (fs::is_directory(p, ec))
    throw IOError(flag + ": cannot write " + quoted(path) + ": it is a directory");
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw IOError(flag + ": cannot write " + quoted(path) + ": directory " + quoted(dir.string()) +
                  " does not exist");
  if (::access(dir.c_str(), W_OK) != 0)
    throw IOError(flag + ": cannot write " + quoted(path) + ": directory " + quoted(dir.string()) +
                  " is not writable");
}

}  // namespace ktape::train
