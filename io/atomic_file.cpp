#include "io/atomic_file.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "engine/errors.hpp"

namespace ktape {

namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

int remove_stale_temp_files(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp-";
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const char* first = name.data() + prefix.size();
    const char* last = name.data() + name.size();
    long pid = 0;
    const auto [p, err] = std::from_chars(first, last, pid);
    if (err != std::errc() || p != last || pid <= 0 || pid == ::getpid()) continue;
    // ESRCH: no such process. EPERM (another user's live process) and success keep the file.
    if (::kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH) {
      std::error_code rm;
      if (fs::remove(it->path(), rm)) ++removed;
    }
  }
  return removed;
}

AtomicFile::AtomicFile(const std::string& path)
    : path_(path), tmp_(path + ".tmp-" + std::to_string(::getpid())) {
  remove_stale_temp_files(path);
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) throw IOError("cannot write " + path_ + ": cannot create " + tmp_ + ": " + errno_text());
}

AtomicFile::~AtomicFile() {
  if (f_) std::fclose(f_);
  if (!committed_) std::remove(tmp_.c_str());
}

void AtomicFile::write(const void* data, std::size_t n) {
  if (n > 0 && std::fwrite(data, 1, n, f_) != n)
    throw IOError("cannot write " + path_ + ": " + errno_text());
  offset_ += n;
}

void AtomicFile::commit() {
  if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0)
    throw IOError("cannot write " + path_ + ": " + errno_text());
  const int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) throw IOError("cannot write " + path_ + ": " + errno_text());
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw IOError("cannot write " + path_ + ": rename from " + tmp_ + " failed: " + errno_text());
  committed_ = true;
}

void write_file_atomically(const std::string& path, const std::string& content) {
  AtomicFile f(path);
  f.write(content);
  f.commit();
}

}  // namespace ktape
