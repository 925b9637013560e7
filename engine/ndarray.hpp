/// \file
/// NDArray: an owned, contiguous, row-major array with a dtype and a concrete shape. Its buffer
/// is 64-byte aligned and shared between copies (copying an NDArray is cheap, like a numpy
/// view of the whole array); clone() makes an independent copy.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/dtype.hpp"
#include "engine/errors.hpp"
#include "engine/shape.hpp"

namespace ktape {

class NDArray {
 public:
  NDArray() = default;
  /// A zero-filled array. ValueError if the shape has unknown or negative dims or more bytes than
  /// an object can have; ResourceExhaustedError if the machine cannot give the memory.
  NDArray(const Shape& shape, DType dtype);

  /// From values given as doubles, converted to `dtype`; values.size() must match the shape.
  static NDArray from_values(const std::vector<double>& values, const Shape& shape,
                             DType dtype = DType::float32);
  template <class T>
  static NDArray from_vector(const std::vector<T>& values, const Shape& shape) {
    NDArray a(shape, dtype_of<T>);
    check_count(values.size(), a.size());
    T* p = a.data<T>();
    for (std::size_t i = 0; i < values.size(); ++i) p[i] = values[i];
    return a;
  }
  static NDArray scalar(double v, DType dtype = DType::float32);
  static NDArray full(const Shape& shape, double v, DType dtype = DType::float32);

  bool defined() const { return storage_ != nullptr; }
  /// Whether no other NDArray shares this one's buffer.
  bool sole_owner() const { return storage_ != nullptr && storage_.use_count() == 1; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int ndim() const { return shape_.ndim(); }
  std::int64_t size() const { return size_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(size_) * dtype_size(dtype_); }

  void* raw_data() { return ptr_; }
  const void* raw_data() const { return ptr_; }
  template <class T>
  T* data() {
    check_type(dtype_of<T>);
    return static_cast<T*>(ptr_);
  }
  template <class T>
  const T* data() const {
    check_type(dtype_of<T>);
    return static_cast<const T*>(ptr_);
  }
  /// Element access by multi-index, bounds-checked (ValueError).
  template <class T>
  T& at(std::initializer_list<std::int64_t> idx) {
    return data<T>()[offset_of(idx)];
  }
  template <class T>
  const T& at(std::initializer_list<std::int64_t> idx) const {
    return data<T>()[offset_of(idx)];
  }
  /// Element `flat` (row-major) of any dtype, as double.
  double item(std::int64_t flat = 0) const;
  void set_item(std::int64_t flat, double v);

  NDArray astype(DType dtype) const;
  NDArray clone() const;
  NDArray reshaped(const Shape& shape) const;  ///< shares the buffer
  std::vector<double> to_vector() const;
  std::string str() const;

 private:
  static void check_count(std::size_t given, std::int64_t expected);
  void check_type(DType requested) const;
  std::int64_t offset_of(std::initializer_list<std::int64_t> idx) const;

  std::shared_ptr<void> storage_;
  void* ptr_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::float32;
  std::int64_t size_ = 0;
};

/// Bytes of an array of `shape` and `dtype`; ValueError naming the shape (and `where`) when the
/// element count or the byte count does not fit (more than PTRDIFF_MAX bytes).
std::size_t array_bytes(const Shape& shape, DType dtype, const char* where = "NDArray");

/// Allocates `bytes` (rounded up to 64), zero-filled and aligned to 64 bytes; freed by the
/// returned pointer. ResourceExhaustedError naming the bytes when the machine cannot give them:
/// a request above its RAM + swap is refused without trying (so an overcommitting kernel never
/// hands out memory that would be killed on first touch). 4 MiB or more are mapped from a
/// 2 MiB boundary and advised as transparent huge pages (not under ASan): a Function's arena
/// (an LSTM loop's stored gates, 22 MB at batch 128) is then walked with far fewer TLB misses.
std::shared_ptr<void> aligned_buffer(std::size_t bytes);

}  // namespace ktape
