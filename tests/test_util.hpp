// Small helpers shared by the test executables.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/ndarray.hpp"

namespace ktape::testing_util {

// The variable's value, or nullopt when unset.
inline std::optional<std::string> get_env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::optional<std::string>(v) : std::nullopt;
}

// Puts back what get_env returned (unsets when it was unset).
inline void restore_env(const char* name, const std::optional<std::string>& v) {
  if (v) {
    setenv(name, v->c_str(), 1);
  } else {
    unsetenv(name);
  }
}

// The message of the E (by default any ktape::Error) that `f` throws, or "" when it throws
// nothing; any other exception propagates and fails the test.
template <class E = ktape::Error>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Element-wise comparison against expected values: NaN matches NaN, infinities must match
// exactly, otherwise |got - want| <= rtol * |want| + atol. The shape must match.
inline ::testing::AssertionResult Close(const ktape::NDArray& got, const std::vector<double>& want,
                                        const ktape::Shape& shape, double rtol = 1e-6,
                                        double atol = 1e-7) {
  if (got.shape() != shape)
    return ::testing::AssertionFailure()
           << "shape " << got.shape().str() << ", expected " << shape.str();
  if (got.size() != static_cast<std::int64_t>(want.size()))
    return ::testing::AssertionFailure() << "size " << got.size() << ", expected " << want.size();
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double g = got.item(static_cast<std::int64_t>(i));
    const double w = want[i];
    bool ok;
    if (std::isnan(w))
      ok = std::isnan(g);
    else if (std::isinf(w))
      ok = g == w;
    else
      ok = std::abs(g - w) <= rtol * std::abs(w) + atol;
    if (!ok)
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << g << ", expected " << w << "\n  array " << got.str();
  }
  return ::testing::AssertionSuccess();
}

// A deterministic, irregular array: offset + scale * sin(0.37 i).
inline ktape::NDArray ramp(const ktape::Shape& s, double scale, double offset,
                           ktape::DType dt = ktape::DType::float32) {
  ktape::NDArray a(s, dt);
  for (std::int64_t i = 0; i < a.size(); ++i)
    a.set_item(i, offset + scale * std::sin(0.37 * static_cast<double>(i)));
  return a;
}

// The same shape, dtype and bits, element by element (so -0 differs from +0 and a NaN matches
// the same NaN); names the first element that differs.
inline void expect_identical(const ktape::NDArray& a, const ktape::NDArray& b,
                             const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  const std::size_t es = ktape::dtype_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(a.raw_data());
  const auto* pb = static_cast<const unsigned char*>(b.raw_data());
  for (std::int64_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(0, std::memcmp(pa + static_cast<std::size_t>(i) * es,
                             pb + static_cast<std::size_t>(i) * es, es))
        << what << " element " << i << ": " << a.item(i) << " vs " << b.item(i);
}

}  // namespace ktape::testing_util

// The message `msg` contains `part`.
#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)
