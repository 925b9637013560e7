// cpu convolutions (float32, float64): tiles of pixels gathered into a matrix (im2col) and one
// GEMM per tile (gemm.hpp), in oneTBB tasks with their scratch from the Function's arena
// (ops/kernels/conv_plan.hpp). Both data formats natively: channels_last tiles are rows of the
// output, channels_first tiles are column blocks of each image's (channels x pixels) matrix.
//   forward:         Y[tile]  = gather(x)[tile]  . W            W  = kernel as (cells*in, out)
//   backprop input:  channels_last, batch >= 16: dX += scatter(dY[tile] . W^T) (a slot runs
//                                    whole images)
//                    otherwise:      dX[tile] = gather(dy)[tile] . Wt,  Wt = kernel as
//                                    (cells*out, in)
//   backprop filter: dW       = sum over tiles of gather(x)[tile]^T . dY[tile]  (fixed order)
// The scatter adds each output pixel's cell values into the input pixel the window read them
// from: no gathered copy of dy, and no products with the zeros of a padded dy (CNN layer 2 at
// batch 128: 571 instead of 797 MFLOP). The backprop-input gather reads, for each input pixel and
// window cell, the output pixel whose window put that cell there (zero where none did), so every
// tile writes only its own pixels.
// Groupings other than one group (depthwise) run a direct loop, parallel over output elements;
// so does a call without the planned scratch (a kernel run outside a compiled Function).
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "engine/backend.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/conv_plan.hpp"
#include "ops/kernels/cpu/cpu.hpp"
#include "ops/kernels/cpu/gemm.hpp"
#include "ops/kernels/window.hpp"

namespace ktape::kernels {

namespace {

// Where (n, pixel p, channel c) sits in an array of `pixels` pixels and `ch` channels.
struct Layout {
  bool cf;
  std::int64_t pixels, ch;
  std::int64_t image(std::int64_t n) const { return n * pixels * ch; }
  std::int64_t pixel_step() const { return cf ? 1 : ch; }
  std::int64_t channel_step() const { return cf ? pixels : 1; }
};

// memcpy / memset of `count` elements; short runs (a first layer's pixel of 1-3 channels) as a
// plain loop, which beats a library call there (GCC would turn the loops back into calls).
#if defined(__GNUC__) && !defined(__clang__)
#define KTAPE_NO_LIBCALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define KTAPE_NO_LIBCALLS
#endif
template <class T>
KTAPE_NO_LIBCALLS inline void copy_n(T* dst, const T* src, std::int64_t count) {
  if (count <= 16) {
    for (std::int64_t i = 0; i < count; ++i) dst[i] = src[i];
  } else {
    std::memcpy(dst, src, static_cast<std::size_t>(count) * sizeof(T));
  }
}
template <class T>
KTAPE_NO_LIBCALLS inline void zero_n(T* dst, std::int64_t count) {
  if (count <= 16) {
    for (std::int64_t i = 0; i < count; ++i) dst[i] = T(0);
  } else {
    std::memset(dst, 0, static_cast<std::size_t>(count) * sizeof(T));
  }
}

// copy_n and zero_n of a short run (a first layer's window row of 1-3 channels), inlined: up
// to one vector's worth as a masked move (masked-off lanes are neither read nor written).
template <class T>
[[gnu::always_inline]] inline void copy_short(T* dst, const T* src, std::int64_t count) {
#if defined(__AVX512F__)
  if constexpr (sizeof(T) == 4) {
    if (count <= 16) {
      const auto m = static_cast<__mmask16>((1u << count) - 1);
      return _mm512_mask_storeu_ps(dst, m, _mm512_maskz_loadu_ps(m, src));
    }
  } else if constexpr (sizeof(T) == 8) {
    if (count <= 8) {
      const auto m = static_cast<__mmask8>((1u << count) - 1);
      return _mm512_mask_storeu_pd(dst, m, _mm512_maskz_loadu_pd(m, src));
    }
  }
#endif
  copy_n(dst, src, count);
}
template <class T>
[[gnu::always_inline]] inline void zero_short(T* dst, std::int64_t count) {
#if defined(__AVX512F__)
  if constexpr (sizeof(T) == 4) {
    if (count <= 16)
      return _mm512_mask_storeu_ps(dst, static_cast<__mmask16>((1u << count) - 1),
                                   _mm512_setzero_ps());
  } else if constexpr (sizeof(T) == 8) {
    if (count <= 8)
      return _mm512_mask_storeu_pd(dst, static_cast<__mmask8>((1u << count) - 1),
                                   _mm512_setzero_pd());
  }
#endif
  zero_n(dst, count);
}

// Copies `count` channels of one pixel (channel stride cs) into dst, or zeros.
template <class T>
inline void copy_channels(T* dst, const T* src, std::int64_t count, std::int64_t cs) {
  if (!src) {
    zero_n(dst, count);
  } else if (cs == 1) {
    copy_n(dst, src, count);
  } else {
    for (std::int64_t c = 0; c < count; ++c) dst[c] = src[c * cs];
  }
}

// Pixel coordinates of `from` (extents ef) mapped through the window: forward reads input
// coordinate o*s - pb + k*d; the backprop-input gather reads output coordinate
// (i + pb - k*d) / s where that divides exactly. -1: no pixel (padding, or between strides).
inline std::int64_t window_source(const WindowDims& g, bool backward, const std::int64_t* from,
                                  const std::int64_t* k) {
  std::int64_t p = 0;
  for (int i = 0; i < g.r; ++i) {
    std::int64_t v;
    if (!backward) {
      v = from[i] * g.s[i] - g.pb[i] + k[i] * g.d[i];
      if (v < 0 || v >= g.in[i]) return -1;
      p = p * g.in[i] + v;
    } else {
      const std::int64_t t = from[i] + g.pb[i] - k[i] * g.d[i];
      if (t < 0 || t % g.s[i] != 0 || t / g.s[i] >= g.out[i]) return -1;
      p = p * g.out[i] + t / g.s[i];
    }
  }
  return p;
}

// Gathers rows [p0, p0 + rows) of image n into col (rows x k_count*src.ch): row p, column
// (cell, c) holds src at the pixel the window maps (p, cell) to, or 0.
template <class T>
void gather(const WindowDims& g, bool backward, const T* src, const Layout& sl, std::int64_t n,
            std::int64_t p0, std::int64_t rows, T* col) {
  const std::int64_t* ext = backward ? g.in : g.out;
  const std::int64_t cols = g.k_count * sl.ch;
  const T* img = src + sl.image(n);
  const int r = g.r, last = g.r - 1;
  std::int64_t from[3], k[3];
  if (backward || sl.cf) {
    for (std::int64_t i = 0; i < rows; ++i) {
      unflatten(p0 + i, r, ext, from);
      T* row = col + i * cols;
      for (std::int64_t cell = 0; cell < g.k_count; ++cell) {
        unflatten(cell, r, g.k, k);
        const std::int64_t sp = window_source(g, backward, from, k);
        copy_channels(row + cell * sl.ch, sp < 0 ? nullptr : img + sp * sl.pixel_step(), sl.ch,
                      sl.channel_step());
      }
    }
    return;
  }
  // Forward, channels_last: the cells of one kernel row (the last spatial dim) read a run of
  // input pixels; with dilation 1 the part inside the input is one contiguous copy. The pixels
  // of a tile go an output row at a time: the outer cells' input rows are found once per output
  // row (from a table of their offsets, made once), and a pixel whose window lies inside the
  // row copies its short runs (a first layer's 3 cells of 1-3 channels) with one masked move
  // each. Divisions, bounds and calls per pixel and cell cost more than those copies.
  const std::int64_t kl = g.k[last], dl = g.d[last], ch = sl.ch, run_len = kl * ch;
  const std::int64_t outer_cells = g.k_count / kl;
  std::int64_t stride[3];
  stride[last] = 1;
  for (int i = last - 1; i >= 0; --i) stride[i] = stride[i + 1] * g.in[i + 1];
  constexpr std::int64_t kTable = 64;
  std::int64_t koff[kTable][2] = {};  // per outer cell, its offset along each outer dim
  const T* row_of[kTable];            // per outer cell, its input row for this output row
  const bool table = outer_cells <= kTable && last <= 2;
  auto outer_offset = [&](std::int64_t oc, int d) {
    if (table) return koff[oc][d];
    std::int64_t rest = oc;
    for (int e = last - 1; e > d; --e) rest /= g.k[e];
    return (rest % g.k[d]) * g.d[d];
  };
  if (table)
    for (std::int64_t oc = 0; oc < outer_cells; ++oc) {
      std::int64_t rest = oc;
      for (int d = last - 1; d >= 0; --d) {
        koff[oc][d] = (rest % g.k[d]) * g.d[d];
        rest /= g.k[d];
      }
    }
  // The input row (pixel 0 of the last dim) that outer cell oc reads for output row `from`, or
  // null where that row lies outside the input.
  auto input_row = [&](std::int64_t oc) -> const T* {
    std::int64_t base = 0;
    for (int d = last - 1; d >= 0; --d) {
      const std::int64_t v = from[d] * g.s[d] - g.pb[d] + outer_offset(oc, d);
      if (v < 0 || v >= g.in[d]) return nullptr;
      base += v * stride[d];
    }
    return img + base * ch;
  };
  unflatten(p0, r, ext, from);
  for (std::int64_t i = 0; i < rows;) {
    const std::int64_t run = std::min(rows - i, ext[last] - from[last]);  // in this output row
    if (table)
      for (std::int64_t oc = 0; oc < outer_cells; ++oc) row_of[oc] = input_row(oc);
    for (const std::int64_t end = i + run; i < end; ++i, ++from[last]) {
      T* out = col + i * cols;
      const std::int64_t start = from[last] * g.s[last] - g.pb[last];
      if (dl == 1 && start >= 0 && start + kl <= g.in[last]) {  // the window's row lies inside
        for (std::int64_t oc = 0; oc < outer_cells; ++oc, out += run_len) {
          const T* in_row = table ? row_of[oc] : input_row(oc);
          if (in_row)
            copy_short(out, in_row + start * ch, run_len);
          else  // outside the input: the whole run is zero
            zero_short(out, run_len);
        }
        continue;
      }
      // Cells j in [lo, hi) land inside: start + j*dl in [0, in).
      const std::int64_t lo = start < 0 ? std::min(kl, (-start + dl - 1) / dl) : 0;
      const std::int64_t hi = std::max(
          lo, std::min(kl, (g.in[last] - 1 - start) < 0 ? std::int64_t{0}
                                                        : (g.in[last] - 1 - start) / dl + 1));
      for (std::int64_t oc = 0; oc < outer_cells; ++oc, out += run_len) {
        const T* in_row = table ? row_of[oc] : input_row(oc);
        if (!in_row) {
          zero_short(out, run_len);
          continue;
        }
        const T* in = in_row + start * ch;
        if (lo > 0) zero_n(out, lo * ch);
        if (hi < kl) zero_n(out + hi * ch, (kl - hi) * ch);
        if (dl == 1) {
          if (hi > lo) copy_n(out + lo * ch, in + lo * ch, (hi - lo) * ch);
        } else {
          for (std::int64_t j = lo; j < hi; ++j) copy_n(out + j * ch, in + j * dl * ch, ch);
        }
      }
    }
    if (from[last] == ext[last]) {  // the next output row
      from[last] = 0;
      for (int d = last - 1; d >= 0 && ++from[d] == ext[d]; --d) from[d] = 0;
    }
  }
}

// Adds a scatter tile (ConvPlan::scatter: rows [p0, p0 + rows) of one image's dy times the
// kernel, each window cell's cx values side by side) into that image's dx: output pixel o's
// cell k goes to input pixel o*s - pb + k*d, where that lies inside. Rows, then cells, in order.
template <class T>
void scatter_tile(const WindowDims& g, const T* tile, std::int64_t rows, std::int64_t p0,
                  T* dximg) {
  const std::int64_t cx = g.cx, width = g.k_count * cx;
  constexpr std::int64_t kCells = 64;
  std::int64_t cells[kCells][3] = {};  // each cell's coordinates, for up to kCells cells
  const bool table = g.k_count <= kCells;
  if (table)
    for (std::int64_t cell = 0; cell < g.k_count; ++cell) unflatten(cell, g.r, g.k, cells[cell]);
  std::int64_t from[3] = {}, k[3] = {};
  unflatten(p0, g.r, g.out, from);
  for (std::int64_t i = 0; i < rows; ++i) {
    const T* row = tile + i * width;
    for (std::int64_t cell = 0; cell < g.k_count; ++cell) {
      const std::int64_t* kc = cells[table ? cell : 0];
      if (!table) {
        unflatten(cell, g.r, g.k, k);
        kc = k;
      }
      const std::int64_t sp = window_source(g, false, from, kc);
      if (sp < 0) continue;
      T* d = dximg + sp * cx;
      const T* v = row + cell * cx;
      for (std::int64_t c = 0; c < cx; ++c) d[c] += v[c];
    }
    for (int d = g.r - 1; d >= 0 && ++from[d] == g.out[d]; --d) from[d] = 0;  // the next pixel
  }
}

// Products with at most this many columns (window cells x input channels) skip the GEMM.
constexpr std::int64_t kDirectCols = 16;

// out[tile] = col . M for rows [p0, p0 + rows) of image n of an array with layout ol.
template <class T>
void tile_product(const T* col, std::int64_t rows, std::int64_t cols, const T* m,
                  std::int64_t out_cols, T* out, const Layout& ol, std::int64_t n, std::int64_t p0,
                  void* gemm_scratch, std::size_t gemm_bytes) {
  T* base = out + ol.image(n);
  if (cols == 0) {  // no input channels: the sums are empty
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t o = 0; o < out_cols; ++o)
        base[ol.cf ? o * ol.pixels + p0 + r : (p0 + r) * out_cols + o] = T(0);
  } else if (!ol.cf && cols <= kDirectCols) {
    // A thin product (a first layer's few input channels): a GEMM's packing would cost more
    // than the arithmetic, so each output row is a short sum of kernel rows, accumulated in
    // registers kBlock output channels at a time.
    constexpr std::int64_t kBlock = 32;
    for (std::int64_t r = 0; r < rows; ++r) {
      T* y = base + (p0 + r) * out_cols;
      const T* a = col + r * cols;
      std::int64_t o0 = 0;
      using Block = Eigen::Matrix<T, 1, kBlock>;
      for (; o0 + kBlock <= out_cols; o0 += kBlock) {
        Block acc = a[0] * Eigen::Map<const Block>(m + o0);
        for (std::int64_t j = 1; j < cols; ++j)
          acc.noalias() += a[j] * Eigen::Map<const Block>(m + j * out_cols + o0);
        Eigen::Map<Block>(y + o0) = acc;
      }
      for (std::int64_t o = o0; o < out_cols; ++o) {
        T v = 0;
        for (std::int64_t j = 0; j < cols; ++j) v += a[j] * m[j * out_cols + o];
        y[o] = v;
      }
    }
  } else {
    // channels_first: the tile's output is column-stored (a channel's pixels are contiguous).
    const MatRef<T> y =
        ol.cf ? MatRef<T>{base + p0, 1, ol.pixels} : row_major(base + p0 * out_cols, out_cols);
    gemm<T>(rows, out_cols, cols, row_major(col, cols), row_major(m, out_cols), y, false,
            gemm_scratch, gemm_bytes);
  }
}

// A thin kernel gradient (a first layer's few input channels, cols <= kDirectCols): acc
// (cols x out_cols) += col^T dY for a channels_last tile, row by row, with one register of
// output channels per window cell (a GEMM of 9 rows would cost far more in packing than in
// arithmetic: 19 GFLOP/s for the CNN's first layer at batch 128). Each element sums its rows in
// order.
template <class T, int C>
void thin_filter_tile(const T* col, const T* dy, std::int64_t rows, std::int64_t out_cols, T* acc) {
  constexpr std::int64_t kBlock = 64 / sizeof(T);
  using Block = Eigen::Matrix<T, 1, kBlock>;
  std::int64_t o0 = 0;
  for (; o0 + kBlock <= out_cols; o0 += kBlock) {
    Block a[C];
    for (int j = 0; j < C; ++j) a[j] = Eigen::Map<const Block>(acc + j * out_cols + o0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const Block d = Eigen::Map<const Block>(dy + r * out_cols + o0);
      const T* cr = col + r * C;
      for (int j = 0; j < C; ++j) a[j].noalias() += cr[j] * d;
    }
    for (int j = 0; j < C; ++j) Eigen::Map<Block>(acc + j * out_cols + o0) = a[j];
  }
  for (std::int64_t o = o0; o < out_cols; ++o)
    for (int j = 0; j < C; ++j) {
      T v = acc[j * out_cols + o];
      for (std::int64_t r = 0; r < rows; ++r) v += col[r * C + j] * dy[r * out_cols + o];
      acc[j * out_cols + o] = v;
    }
}

template <class T, int C = 1>
void thin_filter(const T* col, std::int64_t cols, const T* dy, std::int64_t rows,
                 std::int64_t out_cols, T* acc) {
  if constexpr (C < kDirectCols) {
    if (cols != C) return thin_filter<T, C + 1>(col, cols, dy, rows, out_cols, acc);
  }
  thin_filter_tile<T, C>(col, dy, rows, out_cols, acc);
}

template <class T>
void run_tiles(const ConvPlan& p, char* scratch, bool backward, const WindowDims& g, const T* src,
               const Layout& sl, const T* m, T* out, const Layout& ol) {
  parallel_slots(p.slots, [&](std::int64_t slot) {
    T* col = reinterpret_cast<T*>(scratch + p.shared_bytes +
                                  static_cast<std::size_t>(slot) * p.slot_bytes);
    const std::int64_t t1 = std::min(p.tiles, (slot + 1) * p.tiles_per_slot);
    for (std::int64_t t = slot * p.tiles_per_slot; t < t1; ++t) {
      const std::int64_t n = t / p.tiles_per_image;
      const std::int64_t p0 = (t % p.tiles_per_image) * p.rows;
      const std::int64_t rows = std::min(p.rows, ol.pixels - p0);
      gather(g, backward, src, sl, n, p0, rows, col);
      tile_product(col, rows, p.cols, m, p.out_cols, out, ol, n, p0,
                   reinterpret_cast<char*>(col) + p.gemm_offset, p.gemm_bytes);
    }
  });
}

// ---- direct loops for grouped (depthwise) convolutions ------------------------------------

inline std::int64_t at(const Layout& l, std::int64_t n, std::int64_t p, std::int64_t c) {
  return l.image(n) + p * l.pixel_step() + c * l.channel_step();
}

template <class T>
void grouped_forward(const WindowDims& g, const T* x, const T* w, T* y) {
  const Layout xl{g.cf, g.in_pixels, g.cx}, yl{g.cf, g.out_pixels, g.cy};
  const std::int64_t cin_g = g.cx / g.groups, cout_g = g.cy / g.groups;
  const std::int64_t items = g.n * g.out_pixels;
  parallel_for(
      items, static_cast<double>(g.k_count * cin_g * g.cy),
      [&](std::int64_t i0, std::int64_t i1) {
        std::int64_t o[3], k[3];
        for (std::int64_t i = i0; i < i1; ++i) {
          const std::int64_t n = i / g.out_pixels, op = i % g.out_pixels;
          unflatten(op, g.r, g.out, o);
          for (std::int64_t co = 0; co < g.cy; ++co) y[at(yl, n, op, co)] = T(0);
          for (std::int64_t cell = 0; cell < g.k_count; ++cell) {
            unflatten(cell, g.r, g.k, k);
            const std::int64_t ip = window_source(g, false, o, k);
            if (ip < 0) continue;
            for (std::int64_t co = 0; co < g.cy; ++co) {
              const std::int64_t grp = co / cout_g;
              T s = 0;
              for (std::int64_t ci = 0; ci < cin_g; ++ci)
                s += x[at(xl, n, ip, grp * cin_g + ci)] * w[(cell * cin_g + ci) * g.cy + co];
              y[at(yl, n, op, co)] += s;
            }
          }
        }
      },
      1);
}

template <class T>
void grouped_backprop_input(const WindowDims& g, const T* dy, const T* w, T* dx) {
  const Layout xl{g.cf, g.in_pixels, g.cx}, yl{g.cf, g.out_pixels, g.cy};
  const std::int64_t cin_g = g.cx / g.groups, cout_g = g.cy / g.groups;
  const std::int64_t items = g.n * g.in_pixels;
  parallel_for(
      items, static_cast<double>(g.k_count * cout_g * g.cx),
      [&](std::int64_t i0, std::int64_t i1) {
        std::int64_t q[3], k[3];
        for (std::int64_t i = i0; i < i1; ++i) {
          const std::int64_t n = i / g.in_pixels, ip = i % g.in_pixels;
          unflatten(ip, g.r, g.in, q);
          for (std::int64_t c = 0; c < g.cx; ++c) dx[at(xl, n, ip, c)] = T(0);
          for (std::int64_t cell = 0; cell < g.k_count; ++cell) {
            unflatten(cell, g.r, g.k, k);
            const std::int64_t op = window_source(g, true, q, k);
            if (op < 0) continue;
            for (std::int64_t c = 0; c < g.cx; ++c) {
              const std::int64_t grp = c / cin_g, ci = c % cin_g;
              T s = 0;
              for (std::int64_t co = grp * cout_g; co < (grp + 1) * cout_g; ++co)
                s += dy[at(yl, n, op, co)] * w[(cell * cin_g + ci) * g.cy + co];
              dx[at(xl, n, ip, c)] += s;
            }
          }
        }
      },
      1);
}

template <class T>
void grouped_backprop_filter(const WindowDims& g, const T* x, const T* dy, T* dw) {
  const Layout xl{g.cf, g.in_pixels, g.cx}, yl{g.cf, g.out_pixels, g.cy};
  const std::int64_t cin_g = g.cx / g.groups, cout_g = g.cy / g.groups;
  const std::int64_t items = g.k_count * cin_g * g.cy;
  parallel_for(
      items, static_cast<double>(g.n * g.out_pixels),
      [&](std::int64_t i0, std::int64_t i1) {
        std::int64_t o[3], k[3];
        for (std::int64_t i = i0; i < i1; ++i) {
          const std::int64_t co = i % g.cy, ci = (i / g.cy) % cin_g, cell = i / (g.cy * cin_g);
          const std::int64_t grp = co / cout_g;
          unflatten(cell, g.r, g.k, k);
          T s = 0;
          for (std::int64_t n = 0; n < g.n; ++n)
            for (std::int64_t op = 0; op < g.out_pixels; ++op) {
              unflatten(op, g.r, g.out, o);
              const std::int64_t ip = window_source(g, false, o, k);
              if (ip >= 0) s += x[at(xl, n, ip, grp * cin_g + ci)] * dy[at(yl, n, op, co)];
            }
          dw[i] = s;
        }
      },
      1);
}

// ---- kernels ------------------------------------------------------------------------------

template <class T>
void conv_kernel(const KernelCall& c) {
  const WindowDims g = window_dims(attrs::Window::of(*c.attrs), c.in[0], c.out);
  const T* x = ptr<T>(c.in[0]);
  const T* w = ptr<T>(c.in[1]);
  T* y = ptr<T>(c.out);
  if (!conv_uses_gemm(g) || !c.scratch) return grouped_forward(g, x, w, y);
  const ConvPlan p = conv_plan(ConvPass::kForward, g, sizeof(T));
  run_tiles(p, static_cast<char*>(c.scratch), false, g, x, Layout{g.cf, g.in_pixels, g.cx}, w, y,
            Layout{g.cf, g.out_pixels, g.cy});
}

template <class T>
void conv_backprop_input_kernel(const KernelCall& c) {
  const WindowDims g = window_dims(attrs::Window::of(*c.attrs), c.out, c.in[0]);
  const T* dy = ptr<T>(c.in[0]);
  const T* w = ptr<T>(c.in[1]);
  T* dx = ptr<T>(c.out);
  if (!conv_uses_gemm(g) || !c.scratch) return grouped_backprop_input(g, dy, w, dx);
  const ConvPlan p = conv_plan(ConvPass::kBackpropInput, g, sizeof(T));
  if (p.scatter) {  // channels_last: dy's tiles times the kernel, scattered into dx
    const std::int64_t image = g.in_pixels * g.cx;
    if (p.tiles == 0) return std::fill(dx, dx + g.n * image, T(0));
    // The kernel as (cells*cx, cy) row-major, transposed once into the shared scratch
    // (cy x cells*cx): every tile's product then reads both operands row-major, as LIBXSMM's
    // kernels take them (read in place as a transpose, it went to BLIS, which packs it again for
    // every tile).
    T* const wcopy = static_cast<T*>(c.scratch);
    parallel_transpose<T>(w, g.cy, p.out_cols, p.cols, wcopy, p.out_cols);
    const MatRef<const T> wt = row_major<const T>(wcopy, p.out_cols);
    char* const scratch = static_cast<char*>(c.scratch) + p.shared_bytes;
    parallel_slots(p.slots, [&](std::int64_t slot) {
      char* const mine = scratch + static_cast<std::size_t>(slot) * p.slot_bytes;
      T* const tile = reinterpret_cast<T*>(mine);
      const std::int64_t t1 = std::min(p.tiles, (slot + 1) * p.tiles_per_slot);
      for (std::int64_t t = slot * p.tiles_per_slot; t < t1; ++t) {
        const std::int64_t n = t / p.tiles_per_image;
        const std::int64_t p0 = (t % p.tiles_per_image) * p.rows;
        const std::int64_t rows = std::min(p.rows, g.out_pixels - p0);
        T* const dximg = dx + n * image;
        if (p0 == 0) std::fill(dximg, dximg + image, T(0));
        gemm<T>(rows, p.out_cols, p.cols, row_major(dy + (n * g.out_pixels + p0) * g.cy, g.cy), wt,
                row_major(tile, p.out_cols), false, mine + p.gemm_offset, p.gemm_bytes);
        scatter_tile(g, tile, rows, p0, dximg);
      }
    });
    return;
  }
  bool unit_strides = true;
  for (int i = 0; i < g.r; ++i) unit_strides = unit_strides && g.s[i] == 1;
  // With unit strides the input gradient is a forward conv of dy, padded by (k - 1) * d - pb,
  // with the kernel's cells reversed (flipped) and its channels swapped (channels_last takes the
  // forward conv's run-copying gather; channels_first gathers pixel by pixel either way).
  // Wt[(cell', out), in] = w[cell, in, out] with cell' = cell (strided) or the reversed cell.
  T* wt = static_cast<T*>(c.scratch);
  for (std::int64_t cell = 0; cell < g.k_count; ++cell) {
    const std::int64_t dst = unit_strides ? g.k_count - 1 - cell : cell;
    for (std::int64_t ci = 0; ci < g.cx; ++ci)
      for (std::int64_t co = 0; co < g.cy; ++co)
        wt[(dst * g.cy + co) * g.cx + ci] = w[(cell * g.cx + ci) * g.cy + co];
  }
  const Layout dyl{g.cf, g.out_pixels, g.cy}, dxl{g.cf, g.in_pixels, g.cx};
  if (!unit_strides) {
    run_tiles(p, static_cast<char*>(c.scratch), true, g, dy, dyl, wt, dx, dxl);
    return;
  }
  WindowDims f = g;  // the forward conv dy -> dx
  f.cx = g.cy;
  f.cy = g.cx;
  f.in_pixels = g.out_pixels;
  f.out_pixels = g.in_pixels;
  for (int i = 0; i < g.r; ++i) {
    f.in[i] = g.out[i];
    f.out[i] = g.in[i];
    f.pb[i] = (g.k[i] - 1) * g.d[i] - g.pb[i];
  }
  run_tiles(p, static_cast<char*>(c.scratch), false, f, dy, dyl, wt, dx, dxl);
}

template <class T>
void conv_backprop_filter_kernel(const KernelCall& c) {
  const WindowDims g = window_dims(attrs::Window::of(*c.attrs), c.in[0], c.in[1]);
  const T* x = ptr<T>(c.in[0]);
  const T* dy = ptr<T>(c.in[1]);
  T* dw = ptr<T>(c.out);
  if (!conv_uses_gemm(g) || !c.scratch) return grouped_backprop_filter(g, x, dy, dw);
  const ConvPlan p = conv_plan(ConvPass::kBackpropFilter, g, sizeof(T));
  const Layout xl{g.cf, g.in_pixels, g.cx}, yl{g.cf, g.out_pixels, g.cy};
  char* scratch = static_cast<char*>(c.scratch);
  const std::size_t col_bytes = round64(static_cast<std::size_t>(p.rows * p.cols) * sizeof(T));
  auto partial = [&](std::int64_t slot) {
    return reinterpret_cast<T*>(scratch + static_cast<std::size_t>(slot) * p.slot_bytes +
                                col_bytes);
  };
  parallel_slots(p.slots, [&](std::int64_t slot) {
    T* col = reinterpret_cast<T*>(scratch + static_cast<std::size_t>(slot) * p.slot_bytes);
    T* acc = partial(slot);
    std::fill(acc, acc + p.cols * p.out_cols, T(0));
    const std::int64_t t1 = std::min(p.tiles, (slot + 1) * p.tiles_per_slot);
    for (std::int64_t t = slot * p.tiles_per_slot; t < t1; ++t) {
      const std::int64_t n = t / p.tiles_per_image;
      const std::int64_t p0 = (t % p.tiles_per_image) * p.rows;
      const std::int64_t rows = std::min(p.rows, g.out_pixels - p0);
      gather(g, false, x, xl, n, p0, rows, col);
      const T* dimg = dy + yl.image(n);
      if (!g.cf && p.cols > 0 && p.cols <= kDirectCols) {
        thin_filter<T>(col, p.cols, dimg + p0 * g.cy, rows, p.out_cols, acc);
        continue;
      }
      const MatRef<const T> d =
          g.cf ? MatRef<const T>{dimg + p0, 1, g.out_pixels} : row_major(dimg + p0 * g.cy, g.cy);
      gemm<T>(p.cols, p.out_cols, rows, row_major<const T>(col, p.cols).t(), d,
              row_major(acc, p.out_cols), true,
              scratch + static_cast<std::size_t>(slot) * p.slot_bytes + p.gemm_offset,
              p.gemm_bytes);
    }
  });
  // The slots' partial sums, added in slot order.
  const std::int64_t size = p.cols * p.out_cols;
  if (p.slots == 0 || p.tiles == 0) {
    std::fill(dw, dw + size, T(0));
    return;
  }
  std::memcpy(dw, partial(0), static_cast<std::size_t>(size) * sizeof(T));
  for (std::int64_t s = 1; s < p.slots; ++s) {
    const T* ps = partial(s);
    for (std::int64_t i = 0; i < size; ++i) dw[i] += ps[i];
  }
}

template <class T>
void reg(Backend& b) {
  const DType dt = dtype_of<T>;
  b.set(Op::Conv, dt, &conv_kernel<T>);
  b.set(Op::ConvBackpropInput, dt, &conv_backprop_input_kernel<T>);
  b.set(Op::ConvBackpropFilter, dt, &conv_backprop_filter_kernel<T>);
}

}  // namespace

void register_cpu_conv(Backend& b) {
  reg<float>(b);
  reg<double>(b);
}

}  // namespace ktape::kernels
