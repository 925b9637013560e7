/// \file
/// AtomicFile: writes a file so that a crash or a kill never leaves a half-written file at its
/// path. The bytes go to `<path>.tmp-<pid>` beside it; commit() syncs that file and renames it
/// onto `path`. A writer destroyed without commit() (an exception) removes its temp file. A
/// process killed while writing cannot clean up, so every new AtomicFile first removes the temp
/// files `<path>.tmp-<pid>` whose process no longer exists (a pid that is alive, or reused by
/// another process, keeps its file). Errors are IOError naming the file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace ktape {

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t n);
  void write(const std::string& s) { write(s.data(), s.size()); }
  std::uint64_t offset() const { return offset_; }
  void commit();

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  std::uint64_t offset_ = 0;
  bool committed_ = false;
};

/// The whole of `content` written through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& content);

/// Removes `<path>.tmp-<pid>` files left by processes that no longer exist; returns how many.
int remove_stale_temp_files(const std::string& path);

}  // namespace ktape
