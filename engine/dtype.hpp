/// \file
/// DType: the element types of ktape arrays, named as Keras names them ('float32', 'int64',
/// 'bool').
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ktape {

enum class DType : std::uint8_t {
  float16,
  float32,
  float64,
  int8,
  int16,
  int32,
  int64,
  uint8,
  bool_
};
inline constexpr int kNumDTypes = 9;

/// IEEE binary16 storage. Arithmetic goes through float.
struct Half {
  std::uint16_t bits = 0;
  Half() = default;
  Half(float f);  // NOLINT(google-explicit-constructor): numeric conversion like a builtin type
  operator float() const;  // NOLINT(google-explicit-constructor)
};

std::string_view dtype_name(DType d);
/// Parses a Keras dtype name; throws TypeError naming `where` for anything else.
DType dtype_from_name(std::string_view name, std::string_view where = "dtype");
std::size_t dtype_size(DType d);
bool is_floating(DType d);
bool is_integer(DType d);  ///< int* and uint8 (not bool)

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::float16;
};
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::float32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::float64;
};
template <>
struct DTypeOf<std::int8_t> {
  static constexpr DType value = DType::int8;
};
template <>
struct DTypeOf<std::int16_t> {
  static constexpr DType value = DType::int16;
};
template <>
struct DTypeOf<std::int32_t> {
  static constexpr DType value = DType::int32;
};
template <>
struct DTypeOf<std::int64_t> {
  static constexpr DType value = DType::int64;
};
template <>
struct DTypeOf<std::uint8_t> {
  static constexpr DType value = DType::uint8;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::bool_;
};
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

/// Calls f(T{}) with T the C++ type of d (bool is stored as one byte holding 0 or 1).
template <class F>
decltype(auto) visit_dtype(DType d, F&& f) {
  switch (d) {
    case DType::float16:
      return f(Half{});
    case DType::float32:
      return f(float{});
    case DType::float64:
      return f(double{});
    case DType::int8:
      return f(std::int8_t{});
    case DType::int16:
      return f(std::int16_t{});
    case DType::int32:
      return f(std::int32_t{});
    case DType::int64:
      return f(std::int64_t{});
    case DType::uint8:
      return f(std::uint8_t{});
    case DType::bool_:
      return f(bool{});
  }
  return f(float{});
}

}  // namespace ktape
