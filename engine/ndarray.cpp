#include "engine/ndarray.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace ktape {

std::shared_ptr<void> aligned_buffer(std::size_t bytes) {
  const std::size_t rounded = ((bytes + 63) / 64) * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded == 0 ? 64 : rounded);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

NDArray::NDArray(const Shape& shape, DType dtype) : shape_(shape), dtype_(dtype) {
  for (auto d : shape.dims())
    if (d < 0)
      throw ValueError("NDArray: shape " + shape.str() + " must have known, non-negative dims");
  size_ = shape.num_elements();
  storage_ = aligned_buffer(nbytes());
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
      static_cast<T*>(ptr_)[flat] = Half(static_cast<float>(v));
    else
      static_cast<T*>(ptr_)[flat] = static_cast<T>(v);
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
