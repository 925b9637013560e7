// Command-line flags for the example programs: `--name value` pairs and `--name` switches.
// --help / -h prints the usage and exits 0; an unknown flag, a missing or unparsable value
// prints the problem and the usage to stderr and exits 2.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ktape::train {

struct Flag {
  std::string name;                             // "--epochs"
  std::function<void(const std::string&)> set;  // parses the value (std::stoi ...), may throw
  bool is_switch = false;                       // takes no value; set("") is called
};

void parse_flags(int argc, char** argv, const std::string& program, const char* usage,
                 const std::vector<Flag>& flags);

// Prints "<program>: <message>" and the usage to stderr, then exits 2.
[[noreturn]] void usage_error(const std::string& program, const char* usage,
                              const std::string& message);

}  // namespace ktape::train
