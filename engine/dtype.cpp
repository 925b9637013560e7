#include "engine/dtype.hpp"

#include <cstring>

#include "engine/errors.hpp"

namespace ktape {

namespace {
constexpr std::string_view kNames[kNumDTypes] = {"float16", "float32", "float64", "int8", "int16",
                                                 "int32",   "int64",   "uint8",   "bool"};
constexpr std::size_t kSizes[kNumDTypes] = {2, 4, 8, 1, 2, 4, 8, 1, 1};
}  // namespace

Half::Half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    bits = static_cast<std::uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
    return;
  }
  if (absx >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    bits = static_cast<std::uint16_t>(sign | 0x7c00u);
    return;
  }
  if (absx < 0x38800000u) {  // subnormal half or zero
    if (absx < 0x33000000u) {
      bits = static_cast<std::uint16_t>(sign);
      return;
    }
    const std::uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(absx >> 23);  // value = mant * 2^(e-150) = h * 2^-24
    std::uint32_t h = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1);
    const std::uint32_t half_ulp = 1u << (shift - 1);
    if (rem > half_ulp || (rem == half_ulp && (h & 1u))) ++h;
    bits = static_cast<std::uint16_t>(sign | h);
    return;
  }
  std::uint32_t h = ((absx - 0x38000000u) >> 13);
  const std::uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  bits = static_cast<std::uint16_t>(sign | h);
}

Half::operator float() const {
  const std::uint32_t sign = (static_cast<std::uint32_t>(bits) & 0x8000u) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1fu;
  std::uint32_t mant = bits & 0x3ffu;
  std::uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      x = sign | ((112u - static_cast<std::uint32_t>(e)) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

std::string_view dtype_name(DType d) { return kNames[static_cast<int>(d)]; }

DType dtype_from_name(std::string_view name, std::string_view where) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kNames[i] == name) return static_cast<DType>(i);
  throw TypeError(std::string(where) + ": unsupported dtype '" + std::string(name) +
                  "'; expected one of float16, float32, float64, int8, int16, int32, int64, "
                  "uint8, bool");
}

std::size_t dtype_size(DType d) { return kSizes[static_cast<int>(d)]; }
bool is_floating(DType d) {
  return d == DType::float16 || d == DType::float32 || d == DType::float64;
}
bool is_integer(DType d) { return !is_floating(d) && d != DType::bool_; }

}  // namespace ktape
