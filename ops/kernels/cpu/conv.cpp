// cpu convolutions (float32, float64): tiles of pixels gathered into a matrix (im2col) and one
// Eigen GEMM per tile, in oneTBB tasks with their scratch from the Function's arena
// (ops/kernels/conv_plan.hpp). Both data formats natively: channels_last tiles are rows of the
// output, channels_first tiles are column blocks of each image's (channels x pixels) matrix.
//   forward:         Y[tile]  = gather(x)[tile]  . W            W  = kernel as (cells*in, out)
//   backprop input:  dX[tile] = gather(dy)[tile] . Wt           Wt = kernel as (cells*out, in)
//   backprop filter: dW       = sum over tiles of gather(x)[tile]^T . dY[tile]  (fixed order)
// The backprop-input gather reads, for each input pixel and window cell, the output pixel whose
// window put that cell there (zero where none did), so every tile writes only its own pixels.
// Groupings other than one group (depthwise) run a direct loop, parallel over output elements;
// so does a call without the planned scratch (a kernel run outside a compiled Function).
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include <cstring>

#include "engine/backend.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/conv_plan.hpp"
#include "ops/kernels/cpu/cpu.hpp"
#include "ops/kernels/window.hpp"

namespace ktape::kernels {

namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MapC = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;
template <class T>
using MapM = Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>;

// Where (n, pixel p, channel c) sits in an array of `pixels` pixels and `ch` channels.
struct Layout {
  bool cf;
  std::int64_t pixels, ch;
  std::int64_t image(std::int64_t n) const { return n * pixels * ch; }
  std::int64_t pixel_step() const { return cf ? 1 : ch; }
  std::int64_t channel_step() const { return cf ? pixels : 1; }
};

// Copies `count` channels of one pixel (channel stride cs) into dst, or zeros.
template <class T>
inline void copy_channels(T* dst, const T* src, std::int64_t count, std::int64_t cs) {
  if (!src) {
    std::memset(dst, 0, static_cast<std::size_t>(count) * sizeof(T));
  } else if (cs == 1) {
    std::memcpy(dst, src, static_cast<std::size_t>(count) * sizeof(T));
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
  std::int64_t from[3], k[3];
  for (std::int64_t r = 0; r < rows; ++r) {
    unflatten(p0 + r, g.r, ext, from);
    T* row = col + r * cols;
    for (std::int64_t cell = 0; cell < g.k_count; ++cell) {
      unflatten(cell, g.r, g.k, k);
      const std::int64_t sp = window_source(g, backward, from, k);
      copy_channels(row + cell * sl.ch, sp < 0 ? nullptr : img + sp * sl.pixel_step(), sl.ch,
                    sl.channel_step());
    }
  }
}

// out[tile] = col . M for rows [p0, p0 + rows) of image n of an array with layout ol.
template <class T>
void tile_product(const T* col, std::int64_t rows, std::int64_t cols, const T* m,
                  std::int64_t out_cols, T* out, const Layout& ol, std::int64_t n,
                  std::int64_t p0) {
  const MapC<T> C(col, rows, cols, Eigen::OuterStride<>(cols));
  const MapC<T> M(m, cols, out_cols, Eigen::OuterStride<>(out_cols));
  T* base = out + ol.image(n);
  if (!ol.cf) {
    MapM<T> Y(base + p0 * out_cols, rows, out_cols, Eigen::OuterStride<>(out_cols));
    Y.noalias() = C * M;
  } else {
    MapM<T> Yt(base + p0, out_cols, rows, Eigen::OuterStride<>(ol.pixels));
    Yt.noalias() = M.transpose() * C.transpose();
  }
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
      tile_product(col, rows, p.cols, m, p.out_cols, out, ol, n, p0);
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
  // Wt[(cell, out), in] = w[cell, in, out].
  T* wt = static_cast<T*>(c.scratch);
  for (std::int64_t cell = 0; cell < g.k_count; ++cell)
    for (std::int64_t ci = 0; ci < g.cx; ++ci)
      for (std::int64_t co = 0; co < g.cy; ++co)
        wt[(cell * g.cy + co) * g.cx + ci] = w[(cell * g.cx + ci) * g.cy + co];
  run_tiles(p, static_cast<char*>(c.scratch), true, g, dy, Layout{g.cf, g.out_pixels, g.cy}, wt, dx,
            Layout{g.cf, g.in_pixels, g.cx});
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
    MapM<T> acc(partial(slot), p.cols, p.out_cols, Eigen::OuterStride<>(p.out_cols));
    acc.setZero();
    const std::int64_t t1 = std::min(p.tiles, (slot + 1) * p.tiles_per_slot);
    for (std::int64_t t = slot * p.tiles_per_slot; t < t1; ++t) {
      const std::int64_t n = t / p.tiles_per_image;
      const std::int64_t p0 = (t % p.tiles_per_image) * p.rows;
      const std::int64_t rows = std::min(p.rows, g.out_pixels - p0);
      gather(g, false, x, xl, n, p0, rows, col);
      const MapC<T> C(col, rows, p.cols, Eigen::OuterStride<>(p.cols));
      const T* dimg = dy + yl.image(n);
      if (!g.cf) {
        const MapC<T> D(dimg + p0 * g.cy, rows, g.cy, Eigen::OuterStride<>(g.cy));
        acc.noalias() += C.transpose() * D;
      } else {
        const MapC<T> Dt(dimg + p0, g.cy, rows, Eigen::OuterStride<>(g.out_pixels));
        acc.noalias() += C.transpose() * Dt.transpose();
      }
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
