// The blocked product's data movement (gemm_blis.cpp): packing a panel of A or B into BLIS's
// micro-panel layout (with AVX transposes of small blocks where the panel's rows are
// contiguous), and adding a temporary micro-tile into C. Internal to gemm_blis.cpp.
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ktape::kernels::blis::detail {

// Transposes of small blocks: d[j * ld + i] = s[i * ls + j] for an R x C block of s.
#if defined(__AVX__)
inline void transpose_block(const float* s, std::int64_t ls, float* d, std::int64_t ld,
                            std::integral_constant<int, 8>) {  // 8 x 8
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * ls);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(d + i * ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(d + (i + 4) * ld, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

inline void transpose_block(const double* s, std::int64_t ls, double* d, std::int64_t ld,
                            std::integral_constant<int, 4>) {  // 4 x 4
  __m256d r[4], t[4];
  for (int i = 0; i < 4; ++i) r[i] = _mm256_loadu_pd(s + i * ls);
  t[0] = _mm256_unpacklo_pd(r[0], r[1]);
  t[1] = _mm256_unpackhi_pd(r[0], r[1]);
  t[2] = _mm256_unpacklo_pd(r[2], r[3]);
  t[3] = _mm256_unpackhi_pd(r[2], r[3]);
  _mm256_storeu_pd(d, _mm256_permute2f128_pd(t[0], t[2], 0x20));
  _mm256_storeu_pd(d + ld, _mm256_permute2f128_pd(t[1], t[3], 0x20));
  _mm256_storeu_pd(d + 2 * ld, _mm256_permute2f128_pd(t[0], t[2], 0x31));
  _mm256_storeu_pd(d + 3 * ld, _mm256_permute2f128_pd(t[1], t[3], 0x31));
}
inline void transpose_block(const float* s, std::int64_t ls, float* d, std::int64_t ld,
                            std::integral_constant<int, 4>) {  // 4 x 4
  __m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + ls), r2 = _mm_loadu_ps(s + 2 * ls),
         r3 = _mm_loadu_ps(s + 3 * ls);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(d, r0);
  _mm_storeu_ps(d + ld, r1);
  _mm_storeu_ps(d + 2 * ld, r2);
  _mm_storeu_ps(d + 3 * ld, r3);
}

inline void transpose_block(const double* s, std::int64_t ls, double* d, std::int64_t ld,
                            std::integral_constant<int, 2>) {  // 2 x 2
  const __m128d r0 = _mm_loadu_pd(s), r1 = _mm_loadu_pd(s + ls);
  _mm_storeu_pd(d, _mm_unpacklo_pd(r0, r1));
  _mm_storeu_pd(d + ld, _mm_unpackhi_pd(r0, r1));
}

// The block sides, largest first.
template <class T>
constexpr int kTransposeSide = sizeof(T) == 4 ? 8 : 4;
#else
template <class T>
constexpr int kTransposeSide = 0;
#endif

// Rows [r0, r0 + B * n) of a panel through B x B transposes (see pack_panel); returns the rows
// left.
template <int B, class T>
std::int64_t transpose_rows(const T* src, std::int64_t rs, std::int64_t r0, std::int64_t rows,
                            std::int64_t kc, std::int64_t packmr, T* dst) {
  if constexpr (B > 0) {
    for (; r0 + B <= rows; r0 += B) {
      std::int64_t p = 0;
      for (; p + B <= kc; p += B)
        transpose_block(src + r0 * rs + p, rs, dst + p * packmr + r0, packmr,
                        std::integral_constant<int, B>{});
      for (; p < kc; ++p)
        for (std::int64_t r = r0; r < r0 + B; ++r) dst[p * packmr + r] = src[r * rs + p];
    }
  }
  return r0;
}

// Rows [0, rows) and depths [0, kc) of a panel's source (element (r, p) at src[r * rs + p * cs])
// into BLIS's packed micro-panel: element (r, p) at dst[p * packmr + r], rows [rows, fill) zero.
// (A panel whose rows come from two parts is packed a part at a time, dst offset by its rows.)
template <class T>
void pack_panel(const T* src, std::int64_t rs, std::int64_t cs, std::int64_t rows, std::int64_t kc,
                std::int64_t packmr, std::int64_t fill, T* dst) {
  if (rs == 1) {  // a column of the panel is contiguous
    for (std::int64_t p = 0; p < kc; ++p) {
      const T* s = src + p * cs;
      T* d = dst + p * packmr;
      for (std::int64_t r = 0; r < rows; ++r) d[r] = s[r];
      for (std::int64_t r = rows; r < fill; ++r) d[r] = T(0);
    }
    return;
  }
  // A row of the panel is contiguous (cs == 1): square blocks transposed in registers.
  constexpr int B = kTransposeSide<T>;
  std::int64_t r0 = transpose_rows<B>(src, rs, 0, rows, kc, packmr, dst);
  r0 = transpose_rows<B / 2>(src, rs, r0, rows, kc, packmr, dst);
  for (std::int64_t p = 0; p < kc; ++p) {
    for (std::int64_t r = r0; r < rows; ++r) dst[p * packmr + r] = src[r * rs + p * cs];
    for (std::int64_t r = rows; r < fill; ++r) dst[p * packmr + r] = T(0);
  }
}

// C (m x n at (rs, cs)) = or += the temporary tile t (at (trs, tcs)). C's inner loop runs along
// C's unit stride.
template <class T>
void tile_into(const T* t, std::int64_t trs, std::int64_t tcs, std::int64_t m, std::int64_t n,
               bool add, T* c, std::int64_t rs, std::int64_t cs) {
  if (cs == 1 || rs != 1) {
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        T& dst = c[i * rs + j * cs];
        dst = add ? dst + t[i * trs + j * tcs] : t[i * trs + j * tcs];
      }
    return;
  }
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t i = 0; i < m; ++i) {
      T& dst = c[i + j * cs];
      dst = add ? dst + t[i * trs + j * tcs] : t[i * trs + j * tcs];
    }
}

}  // namespace ktape::kernels::blis::detail
