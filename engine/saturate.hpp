// saturate_cast: ktape's defined conversion from a floating-point value to any element type,
// where C++'s static_cast would be undefined. NaN -> 0; a value beyond the target's range ->
// the target's lowest / max; any other value truncates toward zero (as static_cast). To a
// floating-point type, values beyond its range become +-inf and NaN stays NaN. Every float ->
// integer conversion in ktape (K::cast, NDArray::from_values / full / set_item, integer
// constants, float labels read as class indices) goes through it.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace ktape {

template <class To, class From>
To saturate_cast(From v) {
  if constexpr (!std::is_floating_point_v<From> || std::is_same_v<To, bool>) {
    return static_cast<To>(v);
  } else if constexpr (std::is_floating_point_v<To>) {
    if (sizeof(To) >= sizeof(From) || std::isnan(v)) return static_cast<To>(v);
    constexpr auto hi = static_cast<From>(std::numeric_limits<To>::max());
    if (v > hi) return std::numeric_limits<To>::infinity();
    if (v < -hi) return -std::numeric_limits<To>::infinity();
    return static_cast<To>(v);
  } else if constexpr (std::is_integral_v<To>) {
    if (std::isnan(v)) return To(0);
    // lowest() is a power of two (or 0), exactly representable; max() + 1 too.
    constexpr auto lo = static_cast<From>(std::numeric_limits<To>::lowest());
    constexpr auto hi_excl = static_cast<From>(std::numeric_limits<To>::max() / 2 + 1) * From(2);
    if (v <= lo) return std::numeric_limits<To>::lowest();
    if (v >= hi_excl) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);  // Half and other class types define their own conversion
  }
}

}  // namespace ktape
