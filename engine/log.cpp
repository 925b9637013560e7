#include "engine/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace ktape {

namespace {
std::shared_ptr<spdlog::logger> logger() {
  static std::shared_ptr<spdlog::logger> l = [] {
    auto existing = spdlog::get("ktape");
    if (existing) return existing;
    auto lg = spdlog::stderr_logger_mt("ktape");
    lg->set_pattern("%v");
    return lg;
  }();
  return l;
}
}  // namespace

void log_debug(const std::string& msg) { logger()->debug(msg); }
void log_info(const std::string& msg) { logger()->info(msg); }
void log_warn(const std::string& msg) { logger()->warn("Warning: " + msg); }

}  // namespace ktape
