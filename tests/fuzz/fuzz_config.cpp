// keras.json parsing on arbitrary bytes: the fuzz input is $KERAS_HOME/keras.json, reloaded.
// A ktape::Error (ValueError naming the key) or a valid configuration, never anything else.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "engine/config.hpp"
#include "engine/errors.hpp"

namespace {
std::string g_path;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir =
      std::string(tmp && *tmp ? tmp : "/tmp") + "/ktape_fuzz_home_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  setenv("KERAS_HOME", dir.c_str(), 1);
  unsetenv("KERAS_BACKEND");
  g_path = dir + "/keras.json";
  spdlog::set_level(spdlog::level::off);  // malformed files warn on every run
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(g_path.c_str(), "wb");
  if (!f) std::abort();
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  namespace cfg = ktape::config;
  try {
    cfg::reload();
    const double eps = cfg::epsilon();
    if (!std::isfinite(eps) || eps < 0) std::abort();  // a loaded epsilon must be sane
    const std::string fx = cfg::floatx();
    if (fx != "float16" && fx != "float32" && fx != "float64") std::abort();
    const std::string df = cfg::image_data_format();
    if (df != "channels_last" && df != "channels_first") std::abort();
    (void)cfg::backend_name();
  } catch (const ktape::Error&) {
  }
  return 0;
}
