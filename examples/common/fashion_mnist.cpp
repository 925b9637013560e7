#include "examples/common/fashion_mnist.hpp"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "engine/errors.hpp"

namespace ktape::data {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;
constexpr std::uint32_t kLabelsMagic = 0x00000801;

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", static_cast<unsigned>(v));
  return buf;
}

[[noreturn]] void throw_not_found(const std::string& path) {
  throw IOError("Fashion-MNIST not found at " + path +
                ". Install it with: sudo apt-get install dataset-fashion-mnist (or pass "
                "--data-dir)");
}

// An open gzip (or plain) file, closed on destruction.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw_not_found(path);
    if (std::filesystem::is_directory(path, ec))
      throw IOError("IDX file " + path + " is a directory, not a file");
    f_ = gzopen(path.c_str(), "rb");
    if (!f_) throw IOError("cannot open IDX file " + path);
    gzbuffer(f_, 1 << 17);
  }
  ~GzFile() {
    if (f_) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads up to `n` bytes into `dst`; returns how many were read (fewer at end of data).
  // Throws IOError on a zlib error other than a truncated stream.
  std::size_t read(void* dst, std::size_t n) {
    auto* p = static_cast<unsigned char*>(dst);
    std::size_t got = 0;
    while (got < n) {
      const auto chunk = static_cast<unsigned>(std::min<std::size_t>(n - got, INT_MAX / 2));
      const int r = gzread(f_, p + got, chunk);
      if (r < 0) throw IOError("error reading IDX file " + path_ + ": " + zlib_error());
      if (r == 0) break;
      got += static_cast<std::size_t>(r);
    }
    return got;
  }

  std::string zlib_error() {
    int errnum = Z_OK;
    const char* msg = gzerror(f_, &errnum);
    if (errnum == Z_OK || !msg) return "";
    return msg;
  }

  // Reads one big-endian uint32 header field named `what`.
  std::uint32_t read_u32(const char* what) {
    unsigned char b[4];
    const std::size_t got = read(b, 4);
    if (got != 4)
      throw IOError("IDX file " + path_ + " is truncated: expected 4 bytes of header field '" +
                    what + "', found " + std::to_string(got) + suffix());
    return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
           std::uint32_t{b[3]};
  }

  // " (zlib: ...)" when zlib reported a problem, else "".
  std::string suffix() {
    const std::string e = zlib_error();
    return e.empty() ? "" : " (zlib: " + e + ")";
  }

  // Reads exactly `n` payload bytes of `what`, or throws IOError saying how many were found.
  // The buffer grows with the data actually read (a chunk at a time), never with what the
  // header claims: a corrupt header cannot make it allocate more than the file holds.
  std::vector<unsigned char> read_payload(std::size_t n, const std::string& what) {
    std::size_t chunk = std::size_t{1} << 16;  // doubles up to 4 MiB per read
    std::vector<unsigned char> buf;
    std::size_t got = 0;
    while (got < n) {
      const std::size_t want = std::min(chunk, n - got);
      chunk = std::min(chunk * 2, std::size_t{1} << 22);
      buf.resize(got + want);
      const std::size_t r = read(buf.data() + got, want);
      got += r;
      if (r < want) break;
    }
    if (got != n)
      throw IOError("IDX file " + path_ + " is truncated: expected " + std::to_string(n) +
                    " bytes of " + what + " (as its header says), found " + std::to_string(got) +
                    suffix());
    return buf;
  }

  void check_magic(std::uint32_t expected, const char* kind) {
    const std::uint32_t magic = read_u32("magic");
    if (magic != expected)
      throw IOError("IDX file " + path_ + " has a bad magic number: expected " + hex32(expected) +
                    " (" + kind + "), found " + hex32(magic));
  }

 private:
  std::string path_;
  gzFile f_ = nullptr;
};

std::int64_t clamp_count(std::int64_t n, std::int64_t limit) {
  return limit < 0 ? n : std::min(n, limit);
}

// Reads the images and reports the file's full image count in `total`.
NDArray read_images(const std::string& path, std::int64_t limit, std::int64_t* total) {
  GzFile f(path);
  f.check_magic(kImagesMagic, "images");
  const std::int64_t n = f.read_u32("image count");
  const std::int64_t rows = f.read_u32("rows");
  const std::int64_t cols = f.read_u32("cols");
  if (total) *total = n;
  const std::int64_t count = clamp_count(n, limit);
  std::int64_t pixels = 0, total_bytes = 0;
  if (rows == 0 || cols == 0 || __builtin_mul_overflow(rows, cols, &pixels) ||
      __builtin_mul_overflow(count, pixels, &total_bytes))
    throw IOError("IDX file " + path + " has an implausible header: " + std::to_string(count) +
                  " images of " + std::to_string(rows) + "x" + std::to_string(cols));
  const auto bytes = f.read_payload(static_cast<std::size_t>(total_bytes),
                                    "pixel data for " + std::to_string(count) + " images of " +
                                        std::to_string(rows) + "x" + std::to_string(cols));
  NDArray out(Shape{count, pixels}, DType::uint8);
  if (!bytes.empty()) std::memcpy(out.data<std::uint8_t>(), bytes.data(), bytes.size());
  return out;
}

NDArray read_labels(const std::string& path, std::int64_t limit, std::int64_t* total) {
  GzFile f(path);
  f.check_magic(kLabelsMagic, "labels");
  const std::int64_t n = f.read_u32("label count");
  if (total) *total = n;
  const std::int64_t count = clamp_count(n, limit);
  const auto bytes = f.read_payload(static_cast<std::size_t>(count),
                                    "label data for " + std::to_string(count) + " labels");
  NDArray out(Shape{count}, DType::int32);
  std::int32_t* dst = out.data<std::int32_t>();
  for (std::size_t i = 0; i < bytes.size(); ++i) dst[i] = bytes[i];
  return out;
}

// <dir>/<name>.gz, or <dir>/<name> if only the uncompressed file exists.
std::string resolve(const std::string& dir, const std::string& name) {
  const std::filesystem::path base = std::filesystem::path(dir) / name;
  const std::string gz = base.string() + ".gz";
  std::error_code ec;
  if (!std::filesystem::exists(gz, ec) && std::filesystem::exists(base, ec)) return base.string();
  return gz;
}

}  // namespace

void pixels_to_float(const std::uint8_t* src, std::int64_t n, float* dst) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
}

NDArray read_idx_images(const std::string& path, std::int64_t limit) {
  return read_images(path, limit, nullptr);
}

NDArray read_idx_labels(const std::string& path, std::int64_t limit) {
  return read_labels(path, limit, nullptr);
}

Dataset load_fashion_mnist(const std::string& dir, const std::string& split, std::int64_t limit) {
  if (split != "train" && split != "t10k")
    throw ValueError("load_fashion_mnist: split must be 'train' or 't10k', got '" + split + "'");
  const std::string images_path = resolve(dir, split + "-images-idx3-ubyte");
  const std::string labels_path = resolve(dir, split + "-labels-idx1-ubyte");
  std::int64_t n_images = 0, n_labels = 0;
  Dataset ds;
  ds.images = read_images(images_path, limit, &n_images);
  ds.labels = read_labels(labels_path, limit, &n_labels);
  if (n_images != n_labels)
    throw IOError("Fashion-MNIST count mismatch: " + images_path + " holds " +
                  std::to_string(n_images) + " images but " + labels_path + " holds " +
                  std::to_string(n_labels) + " labels (expected the same count)");
  return ds;
}

std::string default_fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }

}  // namespace ktape::data
