#include "examples/common/train/flags.hpp"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace ktape::train {

void usage_error(const std::string& program, const char* usage, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n%s", program.c_str(), message.c_str(), usage);
  std::exit(2);
}

void parse_flags(int argc, char** argv, const std::string& program, const char* usage,
                 const std::vector<Flag>& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    }
    const Flag* f = nullptr;
    for (const auto& flag : flags)
      if (flag.name == a) f = &flag;
    if (!f) usage_error(program, usage, "unknown flag " + a);
    std::string value;
    if (!f->is_switch) {
      if (i + 1 >= argc) usage_error(program, usage, "missing value for " + a);
      value = argv[++i];
    }
    try {
      f->set(value);
    } catch (const std::logic_error&) {
      usage_error(program, usage, "bad value for " + a + ": '" + value + "'");
    }
  }
}

}  // namespace ktape::train
