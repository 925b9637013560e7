// The per-row arithmetic of softmax, log-softmax and the sparse softmax cross-entropy, shared
// by the reference kernels (serial) and the cpu kernels (rows split over threads), so both give
// the same bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "ops/kernels/common.hpp"
#include "ops/kernels/functors.hpp"

namespace ktape::kernels {

// y = softmax (or log-softmax) of the n values x[0], x[inner], x[2 inner], ...
template <class T, bool Log>
void softmax_row(const T* x, T* y, std::int64_t n, std::int64_t inner) {
  using C = Compute<T>;
  C m = -std::numeric_limits<C>::infinity();
  for (std::int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<C>(x[j * inner]));
  C s = 0;
  if constexpr (Log) {
    for (std::int64_t j = 0; j < n; ++j) s += std::exp(static_cast<C>(x[j * inner]) - m);
    const C ls = std::log(s);
    for (std::int64_t j = 0; j < n; ++j)
      y[j * inner] = static_cast<T>(static_cast<C>(x[j * inner]) - m - ls);
  } else if constexpr (std::is_same_v<T, C>) {  // each exp once, kept in y until the sum is known
    for (std::int64_t j = 0; j < n; ++j) {
      const C e = std::exp(static_cast<C>(x[j * inner]) - m);
      y[j * inner] = e;
      s += e;
    }
    for (std::int64_t j = 0; j < n; ++j) y[j * inner] = y[j * inner] / s;
  } else {  // a narrower T would round the kept exp: compute it again
    for (std::int64_t j = 0; j < n; ++j) s += std::exp(static_cast<C>(x[j * inner]) - m);
    for (std::int64_t j = 0; j < n; ++j)
      y[j * inner] = static_cast<T>(std::exp(static_cast<C>(x[j * inner]) - m) / s);
  }
}

// logsumexp(row[0, n)) - row[t]: one row's sparse softmax cross-entropy (t already checked).
template <class T>
T sparse_softmax_ce_row(const T* row, std::int64_t n, std::int64_t t) {
  using C = Compute<T>;
  C m = -std::numeric_limits<C>::infinity();
  for (std::int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<C>(row[j]));
  C s = 0;
  for (std::int64_t j = 0; j < n; ++j) s += std::exp(static_cast<C>(row[j]) - m);
  return static_cast<T>(m + std::log(s) - static_cast<C>(row[t]));
}

}  // namespace ktape::kernels
