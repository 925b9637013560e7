// Command-line flags of the example programs, parsed with CLI11 (`--name value`, `--name=value`
// and switches). Values are parsed strictly — the whole value must be a number of the flag's
// kind, finite, within the flag's range — and every error names the flag and the value:
//   fashion_mlp: --epochs: '1abc' is not an integer
//   fashion_mlp: --lr: 'inf' must be a finite number > 0
// --help / -h prints the usage and exits 0; any bad flag (unknown, repeated, missing or bad
// value) prints "<program>: <problem>" and the usage to stderr and exits 2.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ktape::train {

class FlagParser {
 public:
  FlagParser(std::string program, const char* usage);
  ~FlagParser();
  FlagParser(const FlagParser&) = delete;
  FlagParser& operator=(const FlagParser&) = delete;

  // An integer in [min, max].
  void integer(const std::string& name, int& dst, std::int64_t min,
               std::int64_t max = std::numeric_limits<int>::max());
  void integer(const std::string& name, std::int64_t& dst, std::int64_t min,
               std::int64_t max = std::numeric_limits<std::int64_t>::max());
  void integer(const std::string& name, std::uint64_t& dst);  // any value >= 0 (seeds)
  // A finite number in (min, max) or [min, max) etc., as the inclusive flags say.
  struct Range {
    double min = -std::numeric_limits<double>::infinity();
    bool min_inclusive = true;
    double max = std::numeric_limits<double>::infinity();
    bool max_inclusive = true;
  };
  void number(const std::string& name, double& dst, Range range);
  void number(const std::string& name, std::optional<double>& dst, Range range);
  // Free text; with `choices`, one of them.
  void text(const std::string& name, std::string& dst, std::vector<std::string> choices = {});
  void toggle(const std::string& name, bool& dst);

  // Parses argv, filling the registered variables; exits as described above on --help or error.
  void parse(int argc, char** argv);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Prints "<program>: <message>" and the usage to stderr, then exits 2.
[[noreturn]] void usage_error(const std::string& program, const char* usage,
                              const std::string& message);

// Fails early, before any training, if `path` (the value of `flag`) cannot be written: its
// directory must exist and be writable and the path must not be a directory. Nothing is
// created. Throws ktape::IOError naming the flag and the path.
void check_writable(const std::string& flag, const std::string& path);

}  // namespace ktape::train
