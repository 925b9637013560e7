// The per-row arithmetic of softmax, log-softmax and the sparse softmax cross-entropy, shared
// by the reference kernels (serial) and the cpu kernels (rows split over threads), so both give
// the same bits.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "ops/kernels/common.hpp"
#include "ops/kernels/functors.hpp"

namespace ktape::kernels {

// e^x in float, branch-free so that GCC vectorizes a loop of it (glibc's expf is one call per
// value): x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two parts), e^r by its Taylor series to
// r^7 / 7!, times 2^n in two steps (so that results below 2^-126 round as denormals). Every
// multiply-add is an explicit fma, so a value gets the same bits in vector code and in scalar
// code. Within 1 ulp of e^x rounded to float; inf above 88.7228 (where expf overflows), 0 below
// -104, NaN for NaN.
inline float exp_float(float x) {
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float xc = std::min(std::max(x, -104.0f), 88.75f);  // NaN stays NaN
  const float t = std::fma(xc, 1.44269504088896341f, kShift);
  const float n = t - kShift;
  float r = std::fma(n, -0.693359375f, xc);  // ln 2 = 0.693359375 - 2.12194440e-4
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.0f / 5040.0f;
  p = std::fma(p, r, 1.0f / 720.0f);
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  const float e = std::fma(p, r * r, r) + 1.0f;
  const auto ni = static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(t) -
                                            std::bit_cast<std::uint32_t>(kShift));
  const std::int32_t n1 = ni / 2, n2 = ni - n1;  // each within [-75, 64]
  const float s1 = std::bit_cast<float>(static_cast<std::uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<std::uint32_t>(n2 + 127) << 23);
  const float y = e * s1 * s2;
  return x > 88.72283935546875f ? std::numeric_limits<float>::infinity() : y;
}

// The exp of the softmax family: exp_float in float where the target has fused multiply-adds
// (without them each std::fma is a call, and glibc's expf is faster), std::exp otherwise. The
// reference and cpu kernels are compiled alike, so they agree either way.
template <class C>
inline C softmax_exp(C x) {
#if defined(__FMA__)
  if constexpr (std::is_same_v<C, float>) return exp_float(x);
#endif
  return std::exp(x);
}

// e[i] = softmax_exp(e[i]) for i < len (a vectorized loop with exp_float).
template <class C>
void softmax_exps(C* e, std::int64_t len) {
  for (std::int64_t i = 0; i < len; ++i) e[i] = softmax_exp(e[i]);
}

// y = softmax (or log-softmax) of the n values x[0], x[inner], x[2 inner], ...
template <class T, bool Log>
void softmax_row(const T* x, T* y, std::int64_t n, std::int64_t inner) {
  using C = Compute<T>;
  C m = -std::numeric_limits<C>::infinity();
  for (std::int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<C>(x[j * inner]));
  C s = 0;
  if constexpr (Log) {
    for (std::int64_t j = 0; j < n; ++j) s += softmax_exp(static_cast<C>(x[j * inner]) - m);
    const C ls = std::log(s);
    for (std::int64_t j = 0; j < n; ++j)
      y[j * inner] = static_cast<T>(static_cast<C>(x[j * inner]) - m - ls);
  } else if constexpr (std::is_same_v<T, C>) {  // each exp once, kept in y until the sum is known
    for (std::int64_t j = 0; j < n; ++j) {
      const C e = softmax_exp(static_cast<C>(x[j * inner]) - m);
      y[j * inner] = e;
      s += e;
    }
    for (std::int64_t j = 0; j < n; ++j) y[j * inner] = y[j * inner] / s;
  } else {  // a narrower T would round the kept exp: compute it again
    for (std::int64_t j = 0; j < n; ++j) s += softmax_exp(static_cast<C>(x[j * inner]) - m);
    for (std::int64_t j = 0; j < n; ++j)
      y[j * inner] = static_cast<T>(softmax_exp(static_cast<C>(x[j * inner]) - m) / s);
  }
}

// logsumexp(row[0, n)) - row[t]: one row's sparse softmax cross-entropy (t already checked).
template <class T>
T sparse_softmax_ce_row(const T* row, std::int64_t n, std::int64_t t) {
  using C = Compute<T>;
  C m = -std::numeric_limits<C>::infinity();
  for (std::int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<C>(row[j]));
  C s = 0;
  for (std::int64_t j = 0; j < n; ++j) s += softmax_exp(static_cast<C>(row[j]) - m);
  return static_cast<T>(m + std::log(s) - static_cast<C>(row[t]));
}

// The values softmax_row_exps' buffer on the stack holds; longer rows go row by row.
inline constexpr std::int64_t kSoftmaxBlock = 2048;

// The exps of rows [0, rows) of float x (n contiguous values each, 0 < n <= kSoftmaxBlock), a
// block of rows at a time in one vectorized pass, then row(r, m, s, e) for each row r in order:
// m its max, e[j] = softmax_exp(x[r][j] - m), s their sum in order of j.
template <class T, class F>
void softmax_row_exps(const T* x, std::int64_t rows, std::int64_t n, F&& row) {
  alignas(64) T e[kSoftmaxBlock];
  T m[kSoftmaxBlock];
  const std::int64_t per = kSoftmaxBlock / n;
  for (std::int64_t r0 = 0; r0 < rows; r0 += per) {
    const std::int64_t rb = std::min(per, rows - r0);
    const T* xb = x + r0 * n;
    for (std::int64_t r = 0; r < rb; ++r) {
      T mx = -std::numeric_limits<T>::infinity();
      for (std::int64_t j = 0; j < n; ++j) mx = std::max(mx, xb[r * n + j]);
      m[r] = mx;
      for (std::int64_t j = 0; j < n; ++j) e[r * n + j] = xb[r * n + j] - mx;
    }
    softmax_exps(e, rb * n);
    for (std::int64_t r = 0; r < rb; ++r) {
      T s = 0;
      for (std::int64_t j = 0; j < n; ++j) s += e[r * n + j];
      row(r0 + r, m[r], s, static_cast<const T*>(e + r * n));
    }
  }
}

// Rows [0, rows) of n contiguous values each (an innermost axis), each to the bits softmax_row
// gives it (the same exps, summed in the same order): in float, their exps taken by
// softmax_row_exps; in double (no vector exp) and half, row by row.
template <class T, bool Log>
void softmax_rows(const T* x, T* y, std::int64_t rows, std::int64_t n) {
  if (!std::is_same_v<T, float> || n > kSoftmaxBlock || n == 0) {
    for (std::int64_t r = 0; r < rows; ++r) softmax_row<T, Log>(x + r * n, y + r * n, n, 1);
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    softmax_row_exps(x, rows, n, [&](std::int64_t r, T m, T s, const T* e) {
      T* yr = y + r * n;
      if constexpr (Log) {
        const T ls = std::log(s);
        const T* xr = x + r * n;
        for (std::int64_t j = 0; j < n; ++j) yr[j] = xr[j] - m - ls;
      } else {
        for (std::int64_t j = 0; j < n; ++j) yr[j] = e[j] / s;
      }
    });
}

// y[r] = sparse_softmax_ce_row(row r of z, n, label(r)) for r < rows (labels asked in row
// order), the exps taken as softmax_rows takes them (the same bits).
template <class T, class Label>
void sparse_softmax_ce_rows(const T* z, T* y, std::int64_t rows, std::int64_t n, Label&& label) {
  if (!std::is_same_v<T, float> || n > kSoftmaxBlock || n == 0) {
    for (std::int64_t r = 0; r < rows; ++r) y[r] = sparse_softmax_ce_row(z + r * n, n, label(r));
    return;
  }
  if constexpr (std::is_same_v<T, float>)
    softmax_row_exps(z, rows, n, [&](std::int64_t r, T m, T s, const T*) {
      y[r] = m + std::log(s) - z[r * n + label(r)];
    });
}

}  // namespace ktape::kernels
