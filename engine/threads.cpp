#include "engine/threads.hpp"

#include <tbb/global_control.h>
#include <tbb/info.h>

#include <charconv>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "engine/errors.hpp"

namespace ktape {

namespace {

std::mutex g_mu;
std::unique_ptr<tbb::global_control> g_limit;
int g_threads = 0;        // 0: no limit
bool g_env_done = false;  // KTAPE_NUM_THREADS applied, or overridden by set_num_threads

void set_locked(int n) {
  g_limit.reset();
  g_threads = n;
  if (n > 0)
    g_limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                    static_cast<std::size_t>(n));
}

}  // namespace

void set_num_threads(int n) {
  if (n < 0)
    throw ValueError("ktape::set_num_threads: n must be >= 0 (0: every core), got " +
                     std::to_string(n));
  std::lock_guard<std::mutex> lock(g_mu);
  g_env_done = true;
  set_locked(n);
}

int num_threads() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_threads > 0) return g_threads;
  return static_cast<int>(
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
}

void apply_thread_environment() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_env_done) return;
  const char* env = std::getenv("KTAPE_NUM_THREADS");
  int n = 0;
  if (env && *env) {
    const std::string v(env);
    const auto parsed = std::from_chars(v.data(), v.data() + v.size(), n);
    if (parsed.ec != std::errc() || parsed.ptr != v.data() + v.size() || n < 0)
      throw ValueError(  // thrown on every use until fixed: nothing is marked done
          "KTAPE_NUM_THREADS must be a non-negative integer (0: every core), got '" + v + "'");
  }
  g_env_done = true;
  set_locked(n);
}

}  // namespace ktape
