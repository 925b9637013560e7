// Logging through spdlog to stderr, under the logger name "ktape": every log line of the library
// goes through these (never spdlog's default logger, which writes to stdout).
#pragma once

#include <string>

namespace ktape {
void log_debug(const std::string& msg);
void log_info(const std::string& msg);
void log_warn(const std::string& msg);
}  // namespace ktape
