// The blocked product's data movement (gemm_blis.cpp): packing a panel of A or B into BLIS's
// micro-panel layout (with AVX transposes of small blocks where the panel's rows are
// contiguous), and adding a temporary micro-tile into C. Internal to gemm_blis.cpp.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ktape::kernels::blis::detail {

// Transposes of small blocks: d[j * ld + i] = s[i * ls + j] for an R x C block of s.
#if defined(__AVX__)
[[gnu::always_inline]] inline void transpose_block(const float* s, std::int64_t ls, float* d,
                                                   std::int64_t ld,
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

[[gnu::always_inline]] inline void transpose_block(const double* s, std::int64_t ls, double* d,
                                                   std::int64_t ld,
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
// Half blocks: d[j * ld + i] = s[i * ls + j] for the B/2 x B block of s (4 rows of 8 floats,
// 2 rows of 4 doubles).
[[gnu::always_inline]] inline void transpose_half(const float* s, std::int64_t ls, float* d,
                                                  std::int64_t ld) {
  const __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ls),
               r2 = _mm256_loadu_ps(s + 2 * ls), r3 = _mm256_loadu_ps(s + 3 * ls);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
               t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  // Column j of the block in lane j / 4 of u[j % 4].
  const __m256 u[4] = {_mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
                       _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2))};
  for (int j = 0; j < 4; ++j) {
    _mm_storeu_ps(d + j * ld, _mm256_castps256_ps128(u[j]));
    _mm_storeu_ps(d + (j + 4) * ld, _mm256_extractf128_ps(u[j], 1));
  }
}

[[gnu::always_inline]] inline void transpose_half(const double* s, std::int64_t ls, double* d,
                                                  std::int64_t ld) {
  for (int j = 0; j < 4; j += 2) {
    const __m128d r0 = _mm_loadu_pd(s + j), r1 = _mm_loadu_pd(s + ls + j);
    _mm_storeu_pd(d + j * ld, _mm_unpacklo_pd(r0, r1));
    _mm_storeu_pd(d + (j + 1) * ld, _mm_unpackhi_pd(r0, r1));
  }
}

// The block side, B x B (and B/2 x B) blocks transposed in registers.
template <class T>
constexpr int kTransposeSide = sizeof(T) == 4 ? 8 : 4;

#if defined(__AVX512F__)
// 16 x 16 floats, in four rounds of shuffles: pairs of rows interleaved, then quads (lane j of
// row 4g + c holds column 4j + c of rows 4g..4g+3), then 128-bit lanes twice, which leaves
// column j in register j.
[[gnu::always_inline]] inline void transpose_block16(const float* s, std::int64_t ls, float* d,
                                                     std::int64_t ld) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(s + i * ls);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm512_shuffle_f32x4(r[c], r[c + 4], 0x88);
    t[c + 4] = _mm512_shuffle_f32x4(r[c], r[c + 4], 0xdd);
    t[c + 8] = _mm512_shuffle_f32x4(r[c + 8], r[c + 12], 0x88);
    t[c + 12] = _mm512_shuffle_f32x4(r[c + 8], r[c + 12], 0xdd);
  }
  for (int j = 0; j < 8; ++j) {
    _mm512_storeu_ps(d + j * ld, _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88));
    _mm512_storeu_ps(d + (j + 8) * ld, _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd));
  }
}
#endif
#else
template <class T>
constexpr int kTransposeSide = 0;
#endif

// A panel whose rows are each contiguous (cs == 1) into dst[p * packmr + r]: B depths at a time,
// all the panel's rows for those depths (B x B blocks, then a B/2 x B block, then single rows),
// so that each stretch of the packed panel is written at once.
template <class T>
void transpose_panel(const T* src, std::int64_t rs, std::int64_t rows, std::int64_t kc,
                     std::int64_t packmr, T* dst) {
  constexpr int B = kTransposeSide<T>;
  std::int64_t p = 0;
  if constexpr (B > 0) {
    for (; p + B <= kc; p += B) {
      std::int64_t r = 0;
      for (; r + B <= rows; r += B)
        transpose_block(src + r * rs + p, rs, dst + p * packmr + r, packmr,
                        std::integral_constant<int, B>{});
      if (r + B / 2 <= rows) {
        transpose_half(src + r * rs + p, rs, dst + p * packmr + r, packmr);
        r += B / 2;
      }
      for (; r < rows; ++r)
        for (std::int64_t q = p; q < p + B; ++q) dst[q * packmr + r] = src[r * rs + q];
    }
  }
  for (; p < kc; ++p)
    for (std::int64_t r = 0; r < rows; ++r) dst[p * packmr + r] = src[r * rs + p];
}

// A whole matrix into its transpose (parallel_transpose: LIBXSMM's copies of a transposed
// operand), dst[p * ld + r] = src[r * rs + p]: as transpose_panel, but 16 x 16 blocks first
// where the target has AVX-512 (BM_Transpose 20 % faster; the micro-panels, 12 and 32 wide,
// packed 10-40 % slower with them, so transpose_panel keeps its 8 x 8 blocks).
template <class T>
void transpose_matrix(const T* src, std::int64_t rs, std::int64_t rows, std::int64_t cols,
                      std::int64_t ld, T* dst) {
  std::int64_t p = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const std::int64_t rows16 = rows / 16 * 16;
    for (; p + 16 <= cols; p += 16)
      for (std::int64_t r = 0; r < rows16; r += 16)
        transpose_block16(src + r * rs + p, rs, dst + p * ld + r, ld);
    if (rows16 < rows)  // the last rows of those columns
      transpose_panel(src + rows16 * rs, rs, rows - rows16, p, ld, dst + rows16);
  }
#endif
  transpose_panel(src + p, rs, rows, cols - p, ld, dst + p * ld);
}

// A panel whose columns are contiguous (rs == 1), W rows that fill it: fixed-size copies.
template <int W, class T>
void copy_panel(const T* src, std::int64_t cs, std::int64_t kc, T* dst) {
  for (std::int64_t p = 0; p < kc; ++p) __builtin_memcpy(dst + p * W, src + p * cs, W * sizeof(T));
}

// copy_panel at the micro-kernels' widths Ws, when packmr is one of them (else false).
template <class T, int... Ws>
bool copy_fixed_panel(const T* src, std::int64_t cs, std::int64_t kc, std::int64_t packmr, T* dst,
                      std::integer_sequence<int, Ws...>) {
  return ((packmr == Ws && (copy_panel<Ws>(src, cs, kc, dst), true)) || ...);
}

// Rows [0, rows) and depths [0, kc) of a panel's source (element (r, p) at src[r * rs + p * cs])
// into BLIS's packed micro-panel: element (r, p) at dst[p * packmr + r], rows [rows, fill) zero.
// (A panel whose rows come from two parts is packed a part at a time, dst offset by its rows.)
template <class T>
void pack_panel(const T* src, std::int64_t rs, std::int64_t cs, std::int64_t rows, std::int64_t kc,
                std::int64_t packmr, std::int64_t fill, T* dst) {
  if (rs == 1) {  // a column of the panel is contiguous
    if (rows == packmr && fill == packmr &&
        copy_fixed_panel(src, cs, kc, packmr, dst,
                         std::integer_sequence<int, 6, 8, 12, 14, 16, 32>{}))
      return;
    for (std::int64_t p = 0; p < kc; ++p) {
      const T* s = src + p * cs;
      T* d = dst + p * packmr;
      for (std::int64_t r = 0; r < rows; ++r) d[r] = s[r];
      for (std::int64_t r = rows; r < fill; ++r) d[r] = T(0);
    }
    return;
  }
  // A row of the panel is contiguous (cs == 1): blocks transposed in registers.
  if (cs == 1)
    transpose_panel(src, rs, rows, kc, packmr, dst);
  else
    for (std::int64_t p = 0; p < kc; ++p)
      for (std::int64_t r = 0; r < rows; ++r) dst[p * packmr + r] = src[r * rs + p * cs];
  for (std::int64_t p = 0; p < kc; ++p)
    for (std::int64_t r = rows; r < fill; ++r) dst[p * packmr + r] = T(0);
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
