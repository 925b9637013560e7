#include "io/npz.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "engine/errors.hpp"
#include "io/atomic_file.hpp"

namespace ktape {
namespace {

constexpr std::uint32_t kLocalSig = 0x04034b50;
constexpr std::uint32_t kCentralSig = 0x02014b50;
constexpr std::uint32_t kEndSig = 0x06054b50;
constexpr std::uint32_t kZip64EndSig = 0x06064b50;
constexpr std::uint32_t kZip64LocatorSig = 0x07064b50;
constexpr std::size_t kLocalHeaderSize = 30;
constexpr std::size_t kCentralHeaderSize = 46;
constexpr std::size_t kEndSize = 22;
constexpr std::uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01, as numpy writes
constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr std::size_t kNpyMagicLen = 6;
constexpr std::size_t kNpyAlign = 64;
constexpr std::size_t kGrowthAxisDigits = 21;  // numpy pads the header for growing axis 0

std::string errno_text() { return std::strerror(errno); }

// ---------------------------------------------------------------------------------------------
// Little-endian byte helpers.

void put_u16(std::string& s, std::uint32_t v) {
  s += static_cast<char>(v & 0xff);
  s += static_cast<char>((v >> 8) & 0xff);
}
void put_u32(std::string& s, std::uint32_t v) {
  put_u16(s, v & 0xffff);
  put_u16(s, v >> 16);
}
std::uint16_t get_u16(const unsigned char* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
std::uint32_t get_u32(const unsigned char* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) |
         (std::uint32_t{p[3]} << 24);
}
std::uint64_t get_u64(const unsigned char* p) {
  return std::uint64_t{get_u32(p)} | (std::uint64_t{get_u32(p + 4)} << 32);
}

void byteswap_elements(void* data, std::int64_t count, std::size_t itemsize) {
  auto* p = static_cast<unsigned char*>(data);
  if (itemsize < 2) return;
  for (std::int64_t i = 0; i < count; ++i, p += itemsize) std::reverse(p, p + itemsize);
}

// ---------------------------------------------------------------------------------------------
// NPY header: encoding (byte-identical to numpy 1.24's np.save) and parsing.

struct DescrInfo {
  DType dtype;
  const char* descr;  // as written
};
constexpr DescrInfo kDescrs[] = {
    {DType::float16, "<f2"}, {DType::float32, "<f4"}, {DType::float64, "<f8"},
    {DType::int8, "|i1"},    {DType::int16, "<i2"},   {DType::int32, "<i4"},
    {DType::int64, "<i8"},   {DType::uint8, "|u1"},   {DType::bool_, "|b1"}};

const char* descr_of(DType d) {
  for (const auto& e : kDescrs)
    if (e.dtype == d) return e.descr;
  throw TypeError("npy: no descr for dtype " + std::string(dtype_name(d)));
}

// The full preamble (magic, version, header length, header dict, padding, '\n') of an array.
std::string npy_preamble(const Shape& shape, DType dtype) {
  std::string dict = std::string("{'descr': '") + descr_of(dtype) +
                     "', 'fortran_order': False, 'shape': " + shape.str() + ", }";
  if (shape.ndim() > 0) {
    const std::size_t digits = std::to_string(shape[0]).size();
    if (digits < kGrowthAxisDigits) dict.append(kGrowthAxisDigits - digits, ' ');
  }
  // Version 1.0 has a 16-bit header length, 2.0 a 32-bit one.
  for (int version = 1; version <= 2; ++version) {
    const std::size_t len_bytes = version == 1 ? 2 : 4;
    const std::size_t hlen = dict.size() + 1;  // + '\n'
    const std::size_t pad = kNpyAlign - ((kNpyMagicLen + 2 + len_bytes + hlen) % kNpyAlign);
    const std::size_t total = hlen + pad;
    if (version == 1 && total > 0xffff) continue;
    std::string out(kNpyMagic, kNpyMagicLen);
    out += static_cast<char>(version);
    out += '\0';
    if (version == 1)
      put_u16(out, static_cast<std::uint32_t>(total));
    else
      put_u32(out, static_cast<std::uint32_t>(total));
    out += dict;
    out.append(pad, ' ');
    out += '\n';
    return out;
  }
  throw ValueError("npy: header for shape " + shape.str() + " is too long");
}

struct NpyHeader {
  DType dtype = DType::float32;
  bool swap = false;  // stored in the other byte order than this machine's
  bool fortran_order = false;
  Shape shape;
};

// Parses the Python-literal header dict of an .npy file. `where` names the file/entry.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& where) : s_(text), where_(where) {}

  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_fortran = false, have_shape = false;
    expect('{');
    for (;;) {
      skip_ws();
      if (peek() == '}') break;
      const std::string key = parse_string();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (peek() != '\'' && peek() != '"')
          fail("a structured dtype (descr is not a string), which ktape cannot load");
        set_dtype(parse_string(), h);
        have_descr = true;
      } else if (key == "fortran_order") {
        const std::string w = parse_word();
        if (w != "True" && w != "False") fail("fortran_order is '" + w + "', not True or False");
        h.fortran_order = w == "True";
        have_fortran = true;
      } else if (key == "shape") {
        h.shape = parse_shape();
        have_shape = true;
      } else {
        fail("unexpected key '" + key + "'");
      }
      skip_ws();
      if (peek() == ',') ++i_;
    }
    ++i_;
    skip_ws();
    if (i_ != s_.size()) fail("unexpected text after the dict");
    if (!have_descr || !have_fortran || !have_shape)
      fail("the dict needs the keys 'descr', 'fortran_order' and 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw IOError(where_ + ": bad .npy header: " + what + " (header: " + s_ + ")");
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_;
  }
  void expect(char c) {
    skip_ws();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string parse_string() {
    skip_ws();
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    const std::size_t end = s_.find(q, i_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string r = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return r;
  }
  std::string parse_word() {
    const std::size_t b = i_;
    while (i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_]))) ++i_;
    return s_.substr(b, i_ - b);
  }
  Shape parse_shape() {
    expect('(');
    std::vector<std::int64_t> dims;
    for (;;) {
      skip_ws();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("bad shape");
      std::int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10) fail("shape dim too large");
        v = v * 10 + (s_[i_++] - '0');
      }
      if (peek() == 'L') ++i_;  // Python 2 long
      dims.push_back(v);
      skip_ws();
      if (peek() == ',')
        ++i_;
      else if (peek() != ')')
        fail("bad shape");
    }
    ++i_;
    return Shape(std::move(dims));
  }
  void set_dtype(const std::string& descr, NpyHeader& h) const {
    std::size_t k = 0;
    char order = '|';
    if (!descr.empty() && std::strchr("<>|=", descr[0])) order = descr[k++];
    const std::string code = descr.substr(k);
    static const std::map<std::string, DType> codes = {
        {"f2", DType::float16}, {"f4", DType::float32}, {"f8", DType::float64},
        {"i1", DType::int8},    {"i2", DType::int16},   {"i4", DType::int32},
        {"i8", DType::int64},   {"u1", DType::uint8},   {"b1", DType::bool_}};
    const auto it = codes.find(code);
    if (it == codes.end()) {
      std::string why = "unsupported dtype descr '" + descr + "'";
      if (code == "O") why += " (object arrays)";
      throw IOError(where_ + ": " + why +
                    "; ktape reads <f2 <f4 <f8 |i1 <i2 <i4 <i8 |u1 |b1 (and their '>' forms)");
    }
    h.dtype = it->second;
    const bool little = std::endian::native == std::endian::little;
    h.swap = dtype_size(h.dtype) > 1 && ((order == '<' && !little) || (order == '>' && little));
  }

  const std::string& s_;
  const std::string& where_;
  std::size_t i_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Reading: a byte source over one span of a file, stored or deflate-compressed.

class File {
 public:
  File(const std::string& path, const char* mode) : path_(path) {
    f_ = std::fopen(path.c_str(), mode);
  }
  ~File() {
    if (f_) std::fclose(f_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  std::FILE* get() const { return f_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

// Opens `path` for reading; throws IOError naming the file if it is missing or unreadable.
std::unique_ptr<File> open_for_reading(const std::string& path, std::uint64_t& size) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw IOError(path + " is a directory, not a file");
  auto f = std::make_unique<File>(path, "rb");
  if (!f->get()) throw IOError("cannot open " + path + ": " + errno_text());
  if (fseeko(f->get(), 0, SEEK_END) != 0) throw IOError("cannot seek in " + path);
  const off_t end = ftello(f->get());
  if (end < 0) throw IOError("cannot seek in " + path);
  size = static_cast<std::uint64_t>(end);
  return f;
}

class SpanReader {
 public:
  // `compressed` bytes at `offset` of `file` hold `size` bytes of data, stored as-is
  // (method 0) or deflated (method 8). `where` names the file/entry in errors.
  SpanReader(std::FILE* file, std::uint64_t offset, std::uint64_t compressed, std::uint64_t size,
             bool deflated, std::string where)
      : f_(file),
        comp_left_(compressed),
        left_(size),
        deflated_(deflated),
        where_(std::move(where)) {
    if (fseeko(f_, static_cast<off_t>(offset), SEEK_SET) != 0)
      throw IOError(where_ + ": cannot seek: " + errno_text());
    if (deflated_) {
      std::memset(&zs_, 0, sizeof zs_);
      if (inflateInit2(&zs_, -MAX_WBITS) != Z_OK) throw IOError(where_ + ": inflateInit failed");
      inflating_ = true;
      inbuf_.resize(1 << 16);
    }
  }
  ~SpanReader() {
    if (inflating_) inflateEnd(&zs_);
  }
  SpanReader(const SpanReader&) = delete;
  SpanReader& operator=(const SpanReader&) = delete;

  std::uint64_t remaining() const { return left_; }
  std::uint32_t crc() const { return static_cast<std::uint32_t>(crc_); }

  // Reads exactly n bytes; `what` says what they are, for the error if there are fewer.
  void read(void* dst, std::uint64_t n, const char* what) {
    if (n > left_)
      throw IOError(where_ + " is truncated: " + what + " needs " + std::to_string(n) +
                    " bytes, only " + std::to_string(left_) + " left");
    auto* out = static_cast<unsigned char*>(dst);
    if (!deflated_) {
      if (n > 0 && std::fread(out, 1, n, f_) != n)
        throw IOError(where_ + " is truncated: the file ends inside " + what);
    } else {
      inflate_into(out, n, what);
    }
    crc_ = crc32_z(crc_, out, n);
    left_ -= n;
  }

 private:
  void inflate_into(unsigned char* out, std::uint64_t n, const char* what) {
    while (n > 0) {
      if (zs_.avail_in == 0 && comp_left_ > 0) {
        const std::size_t chunk =
            static_cast<std::size_t>(std::min<std::uint64_t>(comp_left_, inbuf_.size()));
        if (std::fread(inbuf_.data(), 1, chunk, f_) != chunk)
          throw IOError(where_ + " is truncated: the file ends inside " + what);
        comp_left_ -= chunk;
        zs_.next_in = inbuf_.data();
        zs_.avail_in = static_cast<uInt>(chunk);
      }
      const uInt step = static_cast<uInt>(std::min<std::uint64_t>(n, 1u << 30));
      zs_.next_out = out;
      zs_.avail_out = step;
      const int r = inflate(&zs_, Z_NO_FLUSH);
      const uInt produced = step - zs_.avail_out;
      out += produced;
      n -= produced;
      if (r == Z_STREAM_END && n > 0)
        throw IOError(where_ + " is corrupted: the compressed data ends inside " + what);
      if (r == Z_NEED_DICT || r == Z_DATA_ERROR || r == Z_MEM_ERROR)
        throw IOError(where_ + " is corrupted: cannot decompress (" +
                      (zs_.msg ? zs_.msg : "zlib error " + std::to_string(r)) + ")");
      if (r == Z_BUF_ERROR && produced == 0 && zs_.avail_in == 0 && comp_left_ == 0)
        throw IOError(where_ + " is truncated: the compressed data ends inside " + what);
    }
  }

  std::FILE* f_;
  std::uint64_t comp_left_;
  std::uint64_t left_;
  bool deflated_;
  std::string where_;
  uLong crc_ = crc32_z(0, nullptr, 0);
  z_stream zs_{};
  bool inflating_ = false;
  std::vector<unsigned char> inbuf_;
};

// Reads one .npy image (all of `in`'s bytes) into an array.
NDArray read_npy(SpanReader& in, const std::string& where) {
  unsigned char pre[kNpyMagicLen + 2];
  if (in.remaining() < sizeof pre)
    throw IOError(where + " is not an .npy file (only " + std::to_string(in.remaining()) +
                  " bytes)");
  in.read(pre, sizeof pre, "the .npy magic");
  if (std::memcmp(pre, kNpyMagic, kNpyMagicLen) != 0)
    throw IOError(where + " is not an .npy file (no \\x93NUMPY magic)");
  const int major = pre[kNpyMagicLen];
  if (major < 1 || major > 3)
    throw IOError(where + ": unsupported .npy format version " + std::to_string(major) + "." +
                  std::to_string(pre[kNpyMagicLen + 1]));
  unsigned char lenb[4] = {0, 0, 0, 0};
  std::uint32_t hlen = 0;
  if (major == 1) {
    in.read(lenb, 2, "the .npy header length");
    hlen = get_u16(lenb);
  } else {
    in.read(lenb, 4, "the .npy header length");
    hlen = get_u32(lenb);
  }
  if (hlen > in.remaining())
    throw IOError(where + " is truncated: the .npy header needs " + std::to_string(hlen) +
                  " bytes, only " + std::to_string(in.remaining()) + " left");
  std::string text(hlen, '\0');
  in.read(text.data(), hlen, "the .npy header");
  const NpyHeader h = HeaderParser(text, where).parse();

  const std::size_t itemsize = dtype_size(h.dtype);
  std::uint64_t count = 1;
  for (auto d : h.shape.dims())
    if (__builtin_mul_overflow(count, static_cast<std::uint64_t>(d), &count))
      throw IOError(where + ": shape " + h.shape.str() + " is too large");
  std::uint64_t nbytes = 0;
  if (__builtin_mul_overflow(count, itemsize, &nbytes) ||
      nbytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    throw IOError(where + ": shape " + h.shape.str() + " is too large");
  if (nbytes > in.remaining())
    throw IOError(where + " is truncated: shape " + h.shape.str() + " " +
                  std::string(dtype_name(h.dtype)) + " needs " + std::to_string(nbytes) +
                  " data bytes, only " + std::to_string(in.remaining()) + " present");
  if (nbytes < in.remaining())
    throw IOError(where + ": " + std::to_string(in.remaining() - nbytes) +
                  " unexpected bytes after the data of shape " + h.shape.str());

  NDArray a(h.shape, h.dtype);
  in.read(a.raw_data(), nbytes, "the array data");
  if (h.swap) byteswap_elements(a.raw_data(), a.size(), itemsize);
  if (h.dtype == DType::bool_) {
    auto* p = static_cast<unsigned char*>(a.raw_data());
    for (std::int64_t i = 0; i < a.size(); ++i) p[i] = p[i] != 0;
  }
  if (h.fortran_order && h.shape.ndim() > 1) {
    // Element (i0, .., in-1) sits at sum(ik * fstride_k), fstride_k = d0 * .. * d(k-1).
    const int nd = h.shape.ndim();
    std::vector<std::int64_t> fstride(nd), idx(nd, 0);
    std::int64_t s = 1;
    for (int k = 0; k < nd; ++k) fstride[k] = s, s *= h.shape[k];
    NDArray c(h.shape, h.dtype);
    const auto* src = static_cast<const unsigned char*>(a.raw_data());
    auto* dst = static_cast<unsigned char*>(c.raw_data());
    std::int64_t off = 0;
    for (std::int64_t i = 0; i < c.size(); ++i) {
      std::memcpy(dst + i * itemsize, src + off * itemsize, itemsize);
      for (int k = nd - 1; k >= 0; --k) {
        off += fstride[k];
        if (++idx[k] < h.shape[k]) break;
        off -= fstride[k] * idx[k];
        idx[k] = 0;
      }
    }
    return c;
  }
  return a;
}

// ---------------------------------------------------------------------------------------------
// Zip archive reading.

struct ZipEntry {
  std::string name;
  std::uint16_t method = 0;
  std::uint16_t flags = 0;
  std::uint32_t crc = 0;
  std::uint64_t csize = 0, usize = 0, local_offset = 0;
};

class ZipReader {
 public:
  explicit ZipReader(const std::string& path) : path_(path) {
    file_ = open_for_reading(path, size_);
    read_directory();
  }
  const std::vector<ZipEntry>& entries() const { return entries_; }

  NDArray read_array(const ZipEntry& e) {
    const std::string where = path_ + ": entry '" + e.name + "'";
    unsigned char lh[kLocalHeaderSize];
    if (e.local_offset > dir_offset_ || dir_offset_ - e.local_offset < kLocalHeaderSize)
      truncated("entry '" + e.name + "'");
    read_at(e.local_offset, lh, sizeof lh);
    if (get_u32(lh) != kLocalSig)
      throw IOError(where + " is corrupted: no local header at offset " +
                    std::to_string(e.local_offset));
    const std::uint64_t data =
        e.local_offset + kLocalHeaderSize + get_u16(lh + 26) + get_u16(lh + 28);
    if (data > dir_offset_ || e.csize > dir_offset_ - data) truncated("entry '" + e.name + "'");
    SpanReader in(file_->get(), data, e.csize, e.usize, e.method == 8, where);
    NDArray a = read_npy(in, where);
    if (in.crc() != e.crc) {
      char buf[80];
      std::snprintf(buf, sizeof buf, " (stored 0x%08x, computed 0x%08x)", e.crc, in.crc());
      throw IOError(where + " is corrupted: CRC-32 mismatch" + std::string(buf));
    }
    return a;
  }

  static std::string array_name(const ZipEntry& e) {
    return e.name.substr(0, e.name.size() - 4);  // checked to end in ".npy"
  }

 private:
  [[noreturn]] void truncated(const std::string& what) const {
    throw IOError(path_ + " is truncated or corrupted: " + what + " extends past the data (" +
                  std::to_string(size_) + " bytes)");
  }
  void read_at(std::uint64_t offset, void* dst, std::size_t n) {
    if (offset > size_ || n > size_ - offset) truncated("a zip record");
    if (fseeko(file_->get(), static_cast<off_t>(offset), SEEK_SET) != 0 ||
        std::fread(dst, 1, n, file_->get()) != n)
      throw IOError("cannot read " + path_ + ": " + errno_text());
  }

  [[noreturn]] void not_npz() {
    std::string why = "not a zip archive";
    unsigned char head[6] = {0, 0, 0, 0, 0, 0};
    if (size_ == 0) {
      why = "the file is empty";
    } else {
      read_at(0, head, static_cast<std::size_t>(std::min<std::uint64_t>(size_, 6)));
      if (size_ >= 6 && std::memcmp(head, kNpyMagic, kNpyMagicLen) == 0)
        why = "it is an .npy file; use load_npy";
      else if (size_ >= 4 && get_u32(head) == kLocalSig)
        why = "zip data without its central directory: the file is truncated";
    }
    throw IOError(path_ + " is not an .npz file (" + why + ")");
  }

  void read_directory() {
    // The end-of-central-directory record is the last 22 bytes plus an optional comment.
    const std::uint64_t tail_len = std::min<std::uint64_t>(size_, kEndSize + 0xffff);
    if (tail_len < kEndSize) not_npz();
    std::vector<unsigned char> tail(tail_len);
    read_at(size_ - tail_len, tail.data(), tail.size());
    std::int64_t pos = -1;
    for (std::int64_t i = static_cast<std::int64_t>(tail_len - kEndSize); i >= 0; --i) {
      const unsigned char* p = tail.data() + i;
      if (get_u32(p) == kEndSig &&
          static_cast<std::uint64_t>(i) + kEndSize + get_u16(p + 20) <= tail_len) {
        pos = i;
        break;
      }
    }
    if (pos < 0) not_npz();
    const unsigned char* end = tail.data() + pos;
    const std::uint64_t end_offset = size_ - tail_len + static_cast<std::uint64_t>(pos);
    if (get_u16(end + 4) != 0 || get_u16(end + 6) != 0)
      throw IOError(path_ + ": multi-disk zip archives are not supported");
    std::uint64_t count = get_u16(end + 10);
    std::uint64_t dir_size = get_u32(end + 12);
    std::uint64_t dir_offset = get_u32(end + 16);
    std::uint64_t dir_end = end_offset;
    if (count == 0xffff || dir_size == 0xffffffff || dir_offset == 0xffffffff) {
      // ZIP64: a locator just before the end record points at the zip64 end record.
      unsigned char loc[20], z[56];
      if (end_offset < sizeof loc) truncated("the zip64 locator");
      read_at(end_offset - sizeof loc, loc, sizeof loc);
      if (get_u32(loc) == kZip64LocatorSig) {
        const std::uint64_t z_offset = get_u64(loc + 8);
        if (z_offset > end_offset - sizeof loc || end_offset - sizeof loc - z_offset < sizeof z)
          truncated("the zip64 end record");
        read_at(z_offset, z, sizeof z);
        if (get_u32(z) != kZip64EndSig)
          throw IOError(path_ + " is corrupted: bad zip64 end record");
        count = get_u64(z + 32);
        dir_size = get_u64(z + 40);
        dir_offset = get_u64(z + 48);
        dir_end = z_offset;
      }
    }
    if (dir_offset > dir_end || dir_size > dir_end - dir_offset) truncated("the central directory");
    dir_offset_ = dir_offset;

    std::vector<unsigned char> dir(dir_size);
    read_at(dir_offset, dir.data(), dir.size());
    std::set<std::string> seen;
    std::size_t p = 0;
    for (std::uint64_t i = 0; i < count; ++i) {
      if (p + kCentralHeaderSize > dir.size() || get_u32(&dir[p]) != kCentralSig)
        throw IOError(path_ + " is corrupted: bad central directory entry " + std::to_string(i));
      const unsigned char* h = &dir[p];
      ZipEntry e;
      e.flags = get_u16(h + 8);
      e.method = get_u16(h + 10);
      e.crc = get_u32(h + 16);
      e.csize = get_u32(h + 20);
      e.usize = get_u32(h + 24);
      const std::size_t nlen = get_u16(h + 28), xlen = get_u16(h + 30), clen = get_u16(h + 32);
      e.local_offset = get_u32(h + 42);
      if (p + kCentralHeaderSize + nlen + xlen + clen > dir.size())
        throw IOError(path_ + " is corrupted: central directory entry " + std::to_string(i) +
                      " overruns the directory");
      e.name.assign(reinterpret_cast<const char*>(h + kCentralHeaderSize), nlen);
      parse_zip64_extra(h + kCentralHeaderSize + nlen, xlen, e);
      p += kCentralHeaderSize + nlen + xlen + clen;

      const std::string where = path_ + ": entry '" + e.name + "'";
      if (e.name.size() < 5 || e.name.compare(e.name.size() - 4, 4, ".npy") != 0)
        throw IOError(where + " is not an .npy file (an .npz holds only <name>.npy entries)");
      if (e.flags & 1) throw IOError(where + " is encrypted, which is not supported");
      if (e.method != 0 && e.method != 8)
        throw IOError(where + " uses zip compression method " + std::to_string(e.method) +
                      "; only stored (0) and deflate (8) are supported");
      if (e.method == 0 && e.csize != e.usize)
        throw IOError(where + " is corrupted: stored sizes differ");
      if (e.method == 8 && e.usize / 1032 > e.csize + 1)  // deflate expands at most ~1032x
        throw IOError(where + " is corrupted: impossible uncompressed size");
      if (!seen.insert(e.name).second) throw IOError(where + " appears twice");
      entries_.push_back(std::move(e));
    }
  }

  void parse_zip64_extra(const unsigned char* x, std::size_t len, ZipEntry& e) const {
    std::size_t q = 0;
    while (q + 4 <= len) {
      const std::uint16_t id = get_u16(x + q), sz = get_u16(x + q + 2);
      if (q + 4 + sz > len) break;
      if (id == 0x0001) {
        const unsigned char* v = x + q + 4;
        std::size_t k = 0;
        auto take = [&](std::uint64_t& field) {
          if (field != 0xffffffff) return;
          if (k + 8 > sz) throw IOError(path_ + ": entry '" + e.name + "' has a bad zip64 extra");
          field = get_u64(v + k);
          k += 8;
        };
        take(e.usize);
        take(e.csize);
        take(e.local_offset);
      }
      q += 4 + sz;
    }
  }

  std::string path_;
  std::unique_ptr<File> file_;
  std::uint64_t size_ = 0;
  std::uint64_t dir_offset_ = 0;
  std::vector<ZipEntry> entries_;
};

// ---------------------------------------------------------------------------------------------
// Writing: through an AtomicFile (io/atomic_file.hpp).

// The array's bytes in little-endian order (a swapped copy only on big-endian machines).
struct LittleEndianBytes {
  explicit LittleEndianBytes(const NDArray& a) : data(a.raw_data()), size(a.nbytes()) {
    if constexpr (std::endian::native != std::endian::little) {
      copy.assign(static_cast<const char*>(a.raw_data()),
                  static_cast<const char*>(a.raw_data()) + a.nbytes());
      byteswap_elements(copy.data(), a.size(), dtype_size(a.dtype()));
      data = copy.data();
    }
  }
  const void* data;
  std::size_t size;
  std::vector<char> copy;
};

void check_array(const std::string& what, const NDArray& a) {
  if (!a.defined()) throw ValueError(what + " is undefined");
}

}  // namespace

// ---------------------------------------------------------------------------------------------

void save_npz(const std::string& path, const NamedArrays& arrays) {
  std::set<std::string> names;
  for (const auto& [name, a] : arrays) {
    if (name.empty()) throw ValueError("save_npz(" + path + "): an array has an empty name");
    if (name.find('\0') != std::string::npos || name.size() > 0xffff - 4)
      throw ValueError("save_npz(" + path + "): invalid array name '" + name + "'");
    if (!names.insert(name).second)
      throw ValueError("save_npz(" + path + "): duplicate array name '" + name + "'");
    check_array("save_npz(" + path + "): array '" + name + "'", a);
  }
  if (arrays.size() >= 0xffff)
    throw ValueError("save_npz(" + path + "): " + std::to_string(arrays.size()) +
                     " arrays; at most 65534 are supported (no ZIP64)");

  AtomicFile out(path);
  std::string central;
  for (const auto& [name, a] : arrays) {
    const std::string entry = name + ".npy";
    const std::string pre = npy_preamble(a.shape(), a.dtype());
    const LittleEndianBytes bytes(a);
    const std::uint64_t size = pre.size() + bytes.size;
    const std::uint64_t offset = out.offset();
    if (size >= 0xffffffffULL || offset + size + 30 + entry.size() >= 0xffffffffULL)
      throw ValueError("save_npz(" + path + "): the archive would exceed 4 GiB at array '" + name +
                       "'; ZIP64 is not supported by this writer");
    uLong crc = crc32_z(0, nullptr, 0);
    crc = crc32_z(crc, reinterpret_cast<const Bytef*>(pre.data()), pre.size());
    crc = crc32_z(crc, static_cast<const Bytef*>(bytes.data), bytes.size);
    const bool utf8 = std::any_of(entry.begin(), entry.end(),
                                  [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
    const std::uint32_t flags = utf8 ? 0x800 : 0;

    // Fields shared by the local header and the central directory entry, from "version
    // needed" through the extra field length.
    std::string common;
    put_u16(common, 20);  // version needed: 2.0
    put_u16(common, flags);
    put_u16(common, 0);  // stored
    put_u16(common, 0);  // time 00:00
    put_u16(common, kDosDate1980);
    put_u32(common, static_cast<std::uint32_t>(crc));
    put_u32(common, static_cast<std::uint32_t>(size));
    put_u32(common, static_cast<std::uint32_t>(size));
    put_u16(common, static_cast<std::uint32_t>(entry.size()));
    put_u16(common, 0);  // extra length

    std::string local;
    put_u32(local, kLocalSig);
    local += common;
    local += entry;
    out.write(local);
    out.write(pre);
    out.write(bytes.data, bytes.size);

    put_u32(central, kCentralSig);
    put_u16(central, (3 << 8) | 20);  // made by: Unix, zip 2.0
    central += common;
    put_u16(central, 0);               // comment length
    put_u16(central, 0);               // disk
    put_u16(central, 0);               // internal attributes
    put_u32(central, 0100644u << 16);  // external: regular file rw-r--r--
    put_u32(central, static_cast<std::uint32_t>(offset));
    central += entry;
  }
  const std::uint64_t dir_offset = out.offset();
  if (dir_offset + central.size() + kEndSize >= 0xffffffffULL)
    throw ValueError("save_npz(" + path +
                     "): the archive would exceed 4 GiB; ZIP64 is not supported by this writer");
  std::string end;
  put_u32(end, kEndSig);
  put_u16(end, 0);
  put_u16(end, 0);
  put_u16(end, static_cast<std::uint32_t>(arrays.size()));
  put_u16(end, static_cast<std::uint32_t>(arrays.size()));
  put_u32(end, static_cast<std::uint32_t>(central.size()));
  put_u32(end, static_cast<std::uint32_t>(dir_offset));
  put_u16(end, 0);  // comment length
  out.write(central);
  out.write(end);
  out.commit();
}

NamedArrays load_npz(const std::string& path) {
  ZipReader zip(path);
  NamedArrays result;
  result.reserve(zip.entries().size());
  for (const auto& e : zip.entries())
    result.emplace_back(ZipReader::array_name(e), zip.read_array(e));
  return result;
}

void load_npz_into(const std::string& path,
                   const std::vector<std::pair<std::string, NDArray*>>& targets) {
  ZipReader zip(path);
  std::vector<NDArray> loaded;
  loaded.reserve(targets.size());
  for (const auto& [name, target] : targets) {
    const std::string where = "load_npz_into(" + path + "): '" + name + "'";
    if (!target || !target->defined()) throw ValueError(where + ": the target array is undefined");
    const ZipEntry* found = nullptr;
    for (const auto& e : zip.entries())
      if (ZipReader::array_name(e) == name) found = &e;
    if (!found) {
      std::string have;
      for (const auto& e : zip.entries())
        have += (have.empty() ? "" : ", ") + ZipReader::array_name(e);
      throw ValueError(where + " is missing from the file (it has: " +
                       (have.empty() ? "no arrays" : have) + ")");
    }
    NDArray a = zip.read_array(*found);
    if (a.shape() != target->shape() || a.dtype() != target->dtype())
      throw ValueError(where + ": expected shape " + target->shape().str() + " " +
                       std::string(dtype_name(target->dtype())) + ", found shape " +
                       a.shape().str() + " " + std::string(dtype_name(a.dtype())));
    loaded.push_back(std::move(a));
  }
  for (std::size_t i = 0; i < targets.size(); ++i)
    std::memcpy(targets[i].second->raw_data(), loaded[i].raw_data(), loaded[i].nbytes());
}

void save_npy(const std::string& path, const NDArray& array) {
  check_array("save_npy(" + path + "): the array", array);
  AtomicFile out(path);
  out.write(npy_preamble(array.shape(), array.dtype()));
  const LittleEndianBytes bytes(array);
  out.write(bytes.data, bytes.size);
  out.commit();
}

NDArray load_npy(const std::string& path) {
  std::uint64_t size = 0;
  auto f = open_for_reading(path, size);
  SpanReader in(f->get(), 0, size, size, false, path);
  return read_npy(in, path);
}

}  // namespace ktape
