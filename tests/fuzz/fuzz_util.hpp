// Helpers shared by the libFuzzer targets: a scratch file per process for the readers that take
// a path, and quiet logging.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace ktape::fuzz {

// Writes the fuzz input to this process's scratch file (in /tmp, or $TMPDIR) and returns its path.
inline const std::string& scratch_file(const std::uint8_t* data, std::size_t size,
                                       const char* suffix) {
  static const std::string path = [&] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/ktape_fuzz_" + std::to_string(::getpid()) +
           suffix;
  }();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

}  // namespace ktape::fuzz
