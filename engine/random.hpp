// Counter-based random numbers: element i of call c of a node with seed s is a pure function of
// (s, c, i), so kernels can split work across threads and a fixed seed gives the same bits.
#pragma once

#include <cmath>
#include <cstdint>

namespace ktape::rng {

inline std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The key of one call of one node; element i then costs a single mix.
inline std::uint64_t stream_key(std::uint64_t seed, std::uint64_t counter) {
  return mix64(seed ^ mix64(counter + 0x632be59bd9b4e019ULL));
}
inline std::uint64_t bits_at(std::uint64_t key, std::uint64_t index) { return mix64(key + index); }
inline double uniform_at(std::uint64_t key, std::uint64_t index) {
  return static_cast<double>(bits_at(key, index) >> 11) * 0x1.0p-53;
}

// Uniform in [0, 1) with 53 random bits.
inline double uniform(std::uint64_t seed, std::uint64_t counter, std::uint64_t index) {
  return uniform_at(stream_key(seed, counter), index);
}

// Standard normal (Box-Muller on two independent uniforms drawn for this index).
inline double normal(std::uint64_t seed, std::uint64_t counter, std::uint64_t index) {
  const double u1 = 1.0 - uniform(seed, counter, 2 * index);  // (0, 1]
  const double u2 = uniform(seed, counter, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Standard normal re-drawn until |x| <= 2 (TF's truncated_normal).
inline double truncated_normal(std::uint64_t seed, std::uint64_t counter, std::uint64_t index) {
  for (std::uint64_t k = 0;; ++k) {
    const double x = normal(seed, counter + (k << 40), index);
    if (x >= -2.0 && x <= 2.0) return x;
  }
}

// Element `index` of one call of a random op: Kind 0 uniform in [a, b), 1 normal of mean a and
// standard deviation b, 2 the same truncated at two deviations, 3 Bernoulli with p = a.
template <int Kind>
inline double draw(std::uint64_t seed, std::uint64_t counter, std::uint64_t index, double a,
                   double b) {
  if constexpr (Kind == 0)
    return a + (b - a) * uniform(seed, counter, index);
  else if constexpr (Kind == 1)
    return a + b * normal(seed, counter, index);
  else if constexpr (Kind == 2)
    return a + b * truncated_normal(seed, counter, index);
  else
    return uniform(seed, counter, index) <= a ? 1.0 : 0.0;
}

}  // namespace ktape::rng
