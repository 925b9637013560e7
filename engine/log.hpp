// Logging through spdlog to stderr, under the logger name "ktape".
#pragma once

#include <string>

namespace ktape {
void log_info(const std::string& msg);
void log_warn(const std::string& msg);
}  // namespace ktape
