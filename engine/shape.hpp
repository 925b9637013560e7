/// \file
/// Shape: a list of dimensions where an unknown dimension is `None` (-1), as Keras's int_shape.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace ktape {

inline constexpr std::int64_t None = -1;
/// The largest rank a tensor of the graph may have (kernels index with fixed-size arrays).
inline constexpr int kMaxRank = 12;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {}

  int ndim() const { return static_cast<int>(dims_.size()); }
  std::int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(i)]; }
  std::int64_t& operator[](int i) { return dims_[static_cast<std::size_t>(i)]; }
  const std::vector<std::int64_t>& dims() const { return dims_; }
  std::vector<std::int64_t>& dims() { return dims_; }
  auto begin() const { return dims_.begin(); }
  auto end() const { return dims_.end(); }
  bool is_fully_defined() const;
  /// Product of the dims; None if any dim is unknown. A scalar has one element. ValueError
  /// naming the shape when the product does not fit in int64.
  std::int64_t num_elements() const;
  /// "(None, 784)" like Python's tuple repr.
  std::string str() const;
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }

 private:
  std::vector<std::int64_t> dims_;
};

/// Normalises a possibly negative axis for a tensor of rank `ndim`; throws ValueError naming
/// `where`.
int normalize_axis(std::int64_t axis, int ndim, const char* where);

}  // namespace ktape
