#include "engine/ndarray.hpp"

#include <sys/mman.h>
#include <sys/sysinfo.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "engine/arena.hpp"
#include "engine/saturate.hpp"

namespace ktape {

namespace {

// RAM + swap of this machine, in bytes (0 if unknown: then only the allocator decides).
std::size_t memory_limit() {
  static const std::size_t limit = [] {
    struct sysinfo si {};
    if (sysinfo(&si) != 0) return std::size_t{0};
    const unsigned long long unit = si.mem_unit ? si.mem_unit : 1;
    return static_cast<std::size_t>((static_cast<unsigned long long>(si.totalram) +
                                     static_cast<unsigned long long>(si.totalswap)) *
                                    unit);
  }();
  return limit;
}

[[noreturn]] void exhausted(std::size_t bytes, const char* why) {
  throw ResourceExhaustedError("ktape: cannot allocate " + std::to_string(bytes) + " bytes (" +
                               std::to_string(bytes >> 20) + " MiB): " + why);
}

#if defined(__SANITIZE_ADDRESS__)
#define KTAPE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KTAPE_ASAN 1
#endif
#endif
#ifdef KTAPE_ASAN
constexpr bool kMapHuge = false;  // ASan's redzones around allocator blocks catch overflows
#else
constexpr bool kMapHuge = true;
#endif
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kHugeFrom = std::size_t{4} << 20;  // the least block mapped on huge pages
std::atomic<bool> g_huge_pages{true};

// `rounded` bytes mapped on their own, from a 2 MiB boundary, advised as transparent huge pages
// (MADV_HUGEPAGE: Debian's default THP mode, "madvise", gives them only to advised memory).
// Anonymous pages are zero. Null when the kernel refuses the mapping.
std::shared_ptr<void> huge_page_buffer(std::size_t rounded) {
  const std::size_t len = (rounded + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
  void* map = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return nullptr;
  const auto at = (reinterpret_cast<std::uintptr_t>(map) + kHugePage - 1) & ~(kHugePage - 1);
  void* p = reinterpret_cast<void*>(at);
  (void)madvise(p, len - kHugePage, MADV_HUGEPAGE);  // best effort: 4 KB pages otherwise
  return std::shared_ptr<void>(p, [map, len](void*) { munmap(map, len); });  // unmaps if it throws
}

}  // namespace

std::size_t array_bytes(const Shape& shape, DType dtype, const char* where) {
  const std::int64_t n = shape.num_elements();  // ValueError on an overflowing count
  if (n < 0)
    throw ValueError(std::string(where) + ": shape " + shape.str() +
                     " must have known, non-negative dims");
  const auto es = static_cast<std::int64_t>(dtype_size(dtype));
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(n, es, &bytes) || bytes > PTRDIFF_MAX - 128)
    throw ValueError(std::string(where) + ": shape " + shape.str() + " of " +
                     std::string(dtype_name(dtype)) + " needs more bytes than an array can hold");
  return static_cast<std::size_t>(bytes);
}

void set_huge_pages(bool on) { g_huge_pages.store(on, std::memory_order_relaxed); }

std::shared_ptr<void> aligned_buffer(std::size_t bytes) {
  if (bytes > PTRDIFF_MAX - 128) exhausted(bytes, "larger than any object");
  const std::size_t rounded = bytes == 0 ? 64 : ((bytes + 63) / 64) * 64;
  const std::size_t limit = memory_limit();
  if (limit != 0 && rounded > limit)
    exhausted(bytes,
              ("more than this machine's " + std::to_string(limit >> 20) + " MiB of RAM and swap")
                  .c_str());
  if (kMapHuge && rounded >= kHugeFrom && g_huge_pages.load(std::memory_order_relaxed))
    if (auto p = huge_page_buffer(rounded)) return p;
  // calloc: zero pages of large blocks come from the kernel untouched. Over-allocate by 64 to
  // align by hand.
  void* raw = std::calloc(1, rounded + 64);
  if (!raw) exhausted(bytes, "out of memory");
  const auto addr = reinterpret_cast<std::uintptr_t>(raw);
  void* p = reinterpret_cast<void*>((addr + 63) & ~std::uintptr_t{63});
  return std::shared_ptr<void>(p, [raw](void*) { std::free(raw); });
}

NDArray::NDArray(const Shape& shape, DType dtype) : shape_(shape), dtype_(dtype) {
  for (auto d : shape.dims())
    if (d < 0)
      throw ValueError("NDArray: shape " + shape.str() + " must have known, non-negative dims");
  const std::size_t bytes = array_bytes(shape, dtype);
  size_ = shape.num_elements();
  try {
    storage_ = aligned_buffer(bytes);
  } catch (const ResourceExhaustedError& e) {
    throw ResourceExhaustedError(std::string(e.what()) + " (NDArray of shape " + shape.str() +
                                 ", " + std::string(dtype_name(dtype)) + ")");
  }
  ptr_ = storage_.get();
}

void NDArray::check_count(std::size_t given, std::int64_t expected) {
  if (static_cast<std::int64_t>(given) != expected)
    throw ValueError("NDArray: " + std::to_string(given) + " values given for a shape of " +
                     std::to_string(expected) + " elements");
}

NDArray NDArray::from_values(const std::vector<double>& values, const Shape& shape, DType dtype) {
  NDArray a(shape, dtype);
  check_count(values.size(), a.size());
  for (std::size_t i = 0; i < values.size(); ++i)
    a.set_item(static_cast<std::int64_t>(i), values[i]);
  return a;
}

NDArray NDArray::scalar(double v, DType dtype) { return from_values({v}, Shape{}, dtype); }

NDArray NDArray::full(const Shape& shape, double v, DType dtype) {
  NDArray a(shape, dtype);
  for (std::int64_t i = 0; i < a.size(); ++i) a.set_item(i, v);
  return a;
}

void NDArray::check_type(DType requested) const {
  if (requested != dtype_)
    throw TypeError("NDArray::data: requested " + std::string(dtype_name(requested)) +
                    " from an array of dtype " + std::string(dtype_name(dtype_)));
}

std::int64_t NDArray::offset_of(std::initializer_list<std::int64_t> idx) const {
  if (static_cast<int>(idx.size()) != ndim())
    throw ValueError("NDArray::at: " + std::to_string(idx.size()) +
                     " indices for an array of rank " + std::to_string(ndim()));
  std::int64_t off = 0;
  int i = 0;
  for (auto v : idx) {
    if (v < 0 || v >= shape_[i])
      throw ValueError("NDArray::at: index " + std::to_string(v) + " out of range for axis " +
                       std::to_string(i) + " of shape " + shape_.str());
    off = off * shape_[i] + v;
    ++i;
  }
  return off;
}

double NDArray::item(std::int64_t flat) const {
  if (flat < 0 || flat >= size_)
    throw ValueError("NDArray::item: index " + std::to_string(flat) + " out of range for " +
                     std::to_string(size_) + " elements");
  return visit_dtype(dtype_, [&](auto t) -> double {
    using T = decltype(t);
    return static_cast<double>(static_cast<const T*>(ptr_)[flat]);
  });
}

void NDArray::set_item(std::int64_t flat, double v) {
  if (flat < 0 || flat >= size_)
    throw ValueError("NDArray::set_item: index " + std::to_string(flat) + " out of range for " +
                     std::to_string(size_) + " elements");
  visit_dtype(dtype_, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, bool>)
      static_cast<T*>(ptr_)[flat] = v != 0.0;
    else if constexpr (std::is_same_v<T, Half>)
      static_cast<T*>(ptr_)[flat] = Half(saturate_cast<float>(v));
    else
      static_cast<T*>(ptr_)[flat] = saturate_cast<T>(v);
  });
}

NDArray NDArray::astype(DType dtype) const {
  NDArray r(shape_, dtype);
  for (std::int64_t i = 0; i < size_; ++i) r.set_item(i, item(i));
  return r;
}

NDArray NDArray::clone() const {
  if (!defined()) return {};
  NDArray r(shape_, dtype_);
  std::memcpy(r.ptr_, ptr_, nbytes());
  return r;
}

NDArray NDArray::reshaped(const Shape& shape) const {
  if (shape.num_elements() != size_)
    throw ValueError("NDArray::reshaped: cannot reshape " + shape_.str() + " to " + shape.str());
  NDArray r = *this;
  r.shape_ = shape;
  return r;
}

std::vector<double> NDArray::to_vector() const {
  std::vector<double> v(static_cast<std::size_t>(size_));
  for (std::int64_t i = 0; i < size_; ++i) v[static_cast<std::size_t>(i)] = item(i);
  return v;
}

std::string NDArray::str() const {
  std::ostringstream os;
  os << "array(";
  const auto v = to_vector();
  os << "[";
  for (std::size_t i = 0; i < v.size() && i < 20; ++i) os << (i ? ", " : "") << v[i];
  if (v.size() > 20) os << ", ...";
  os << "], shape=" << shape_.str() << ", dtype=" << dtype_name(dtype_) << ")";
  return os.str();
}

}  // namespace ktape
