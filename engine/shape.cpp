#include "engine/shape.hpp"

#include "engine/errors.hpp"

namespace ktape {

bool Shape::is_fully_defined() const {
  for (auto d : dims_)
    if (d < 0) return false;
  return true;
}

std::int64_t Shape::num_elements() const {
  std::int64_t n = 1;
  bool overflow = false, empty = false;
  for (auto d : dims_) {
    if (d < 0) return None;
    empty = empty || d == 0;
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  if (empty) return 0;
  if (overflow)
    throw ValueError("shape " + str() + " has more elements than fit in a 64-bit count");
  return n;
}

std::string Shape::str() const {
  std::string s = "(";
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += dims_[i] < 0 ? std::string("None") : std::to_string(dims_[i]);
  }
  if (dims_.size() == 1) s += ",";
  return s + ")";
}

int normalize_axis(std::int64_t axis, int ndim, const char* where) {
  const std::int64_t a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim)
    throw ValueError(std::string(where) + ": axis " + std::to_string(axis) +
                     " is out of range for a tensor of rank " + std::to_string(ndim));
  return static_cast<int>(a);
}

}  // namespace ktape
