// Small helpers shared by the test executables.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace ktape::testing_util {

// The variable's value, or nullopt when unset.
inline std::optional<std::string> get_env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

// Puts back what get_env returned (unsets when it was unset).
inline void restore_env(const char* name, const std::optional<std::string>& v) {
  if (v) {
    setenv(name, v->c_str(), 1);
  } else {
    unsetenv(name);
  }
}

}  // namespace ktape::testing_util
