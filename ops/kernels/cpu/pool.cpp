// cpu pooling (float32, float64), both data formats: the forward pass and MaxPoolGradGrad
// parallel over output pixels with the channels innermost; the two backward passes scatter
// window by window within one image per task (images never share a cell), in the window order
// of the reference kernels. Max pooling's argmax is the first maximum in scan order (a NaN
// counts as the maximum), as in ops/kernels/reference/window.cpp. channels_last windows that all
// lie inside the input (valid padding) run register-blocked loops, and MaxPoolGrad over such
// windows that share no cell (the window no larger than the stride: pool 2, stride 2) writes
// each cell of dx once instead of scattering adds into a zeroed dx (zeroed first only when some
// cells lie outside every window); both give the general loops' bits. MaxPoolReluGrad is
// MaxPoolGrad times (x > 0) (relu's gradient of it, x relu's output), in the same passes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engine/backend.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/cpu/cpu.hpp"
#include "ops/kernels/functors.hpp"
#include "ops/kernels/window.hpp"

namespace ktape::kernels {

namespace {

struct Layout {
  bool cf;
  std::int64_t pixels, ch;
  std::int64_t at(std::int64_t n, std::int64_t p, std::int64_t c) const {
    return cf ? (n * ch + c) * pixels + p : (n * pixels + p) * ch + c;
  }
};

// The window of output pixel op clipped to the input: kernel indices [lo, hi) per spatial dim.
struct Box {
  int r;
  std::int64_t start[3], lo[3], hi[3], d[3], in[3];
  std::int64_t count;
};

inline Box window_box(const WindowDims& g, std::int64_t op) {
  Box b;
  b.r = g.r;
  b.count = 1;
  std::int64_t o[3];
  unflatten(op, g.r, g.out, o);
  for (int i = 0; i < g.r; ++i) {
    b.start[i] = o[i] * g.s[i] - g.pb[i];
    b.d[i] = g.d[i];
    b.in[i] = g.in[i];
    b.lo[i] = b.start[i] < 0 ? (-b.start[i] + g.d[i] - 1) / g.d[i] : 0;
    const std::int64_t last = g.in[i] - 1 - b.start[i];  // largest k*d inside
    b.hi[i] = last < 0 ? 0 : std::min(g.k[i], last / g.d[i] + 1);
    b.count *= std::max<std::int64_t>(0, b.hi[i] - b.lo[i]);
  }
  return b;
}

// Calls f(input pixel) for every cell of the box, in the scan order of the kernel's cells.
template <class F>
inline void for_each_cell(const Box& b, F&& f) {
  if (b.count == 0) return;
  std::int64_t k[3] = {b.lo[0], b.lo[1], b.lo[2]};
  for (;;) {
    std::int64_t ip = 0;
    for (int i = 0; i < b.r; ++i) ip = ip * b.in[i] + b.start[i] + k[i] * b.d[i];
    f(ip);
    int i = b.r - 1;
    for (; i >= 0; --i) {
      if (++k[i] < b.hi[i]) break;
      k[i] = b.lo[i];
    }
    if (i < 0) return;
  }
}

// The windows of one 2-D plane (pooling has no dilation) in scan order: f(op, y0, y1, x0, x1)
// with the window clipped to the input, rows [y0, y1) and columns [x0, x1).
template <class F>
inline void for_each_window_2d(const WindowDims& g, F&& f) {
  for (std::int64_t oy = 0; oy < g.out[0]; ++oy) {
    const std::int64_t ys = oy * g.s[0] - g.pb[0];
    const std::int64_t y0 = std::max<std::int64_t>(ys, 0), y1 = std::min(ys + g.k[0], g.in[0]);
    for (std::int64_t ox = 0; ox < g.out[1]; ++ox) {
      const std::int64_t xs = ox * g.s[1] - g.pb[1];
      const std::int64_t x0 = std::max<std::int64_t>(xs, 0), x1 = std::min(xs + g.k[1], g.in[1]);
      f(oy * g.out[1] + ox, y0, y1, x0, x1);
    }
  }
}

template <class T>
inline bool beats(T v, T best) {
  return v > best || (std::isnan(v) && !std::isnan(best));
}

// The max of the scan so far, best, after seeing v: beats() as a select that vectorizes.
template <class T>
inline T pick(T v, T best) {
  const bool take = (v > best) | ((v != v) & (best == best));
  return take ? v : best;
}

template <class T>
std::int64_t argmax_cell(const T* x, const Layout& xl, std::int64_t n, std::int64_t c,
                         const Box& box) {
  std::int64_t best = -1;
  T bv = 0;
  for_each_cell(box, [&](std::int64_t ip) {
    const T v = x[xl.at(n, ip, c)];
    if (best < 0 || beats(v, bv)) best = ip, bv = v;
  });
  return best;
}

// Channels per register block of the channels_last fast paths: two AVX-512 vectors.
template <class T>
constexpr std::int64_t kRegisterChannels = 128 / sizeof(T);

// Calls block(c, width) for the register blocks of cx channels: whole blocks with a width known
// at compile time, then the tail.
template <class T, class F>
inline void for_register_blocks(std::int64_t cx, F&& block) {
  constexpr std::int64_t B = kRegisterChannels<T>;
  std::int64_t c = 0;
  for (; c + B <= cx; c += B) block(c, std::integral_constant<std::int64_t, B>{});
  if (c < cx) block(c, cx - c);
}

// The first cell's contribution to a window's result: itself for a max, 0 + it for an average
// (an average sums from +0, as the reference does: four -0 cells average to +0).
template <class T>
inline T first_cell(bool max, T v) {
  return max ? v : T(0) + v;
}

// The register-blocked passes below read (and MaxPoolGrad's write) k0 rows of the image at once,
// each a stream that crosses a 4 KiB page every few windows, where the hardware prefetchers stop:
// a CNN's (128, 26, 26, 32) activations, 11 MB and out of cache by the time a pool reads them,
// came through at a quarter of a plain pass's rate. So each window asks for the lines a page
// further along its rows that the windows there add (`span` bytes from `at` on each of `rows`
// rows `pitch` bytes apart). The addresses are integers: near an array's end they may lie past
// it, which a prefetch ignores.
constexpr std::int64_t kPrefetchAhead = 4096;
inline void prefetch_rows(const void* at, std::int64_t rows, std::int64_t pitch, std::int64_t span,
                          bool write) {
  const std::uintptr_t base = reinterpret_cast<std::uintptr_t>(at) + kPrefetchAhead;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t b = 0; b < span; b += 64) {
      const auto* line =
          reinterpret_cast<const char*>(base + static_cast<std::uintptr_t>(r * pitch + b));
      if (write)
        __builtin_prefetch(line, 1, 3);
      else
        __builtin_prefetch(line, 0, 3);
    }
}

// Whether every window of a channels_last plane lies inside the input (no padding reaches it).
inline bool unclipped(const WindowDims& g) {
  for (int i = 0; i < 2; ++i)
    if (g.pb[i] != 0 || (g.out[i] - 1) * g.s[i] + g.k[i] > g.in[i]) return false;
  return true;
}
// Whether windows never share a cell (the window no larger than the stride), and a window's
// cells fit the 32-bit numbers max_pool_grad_apart gives them for floats.
inline bool apart(const WindowDims& g) {
  return g.k[0] <= g.s[0] && g.k[1] <= g.s[1] && g.k_count <= INT32_MAX;
}

// Output rows [r0, r1) (image x output row) of a channels_last 2-D pooling whose windows all lie
// inside the input: each window's cells combined in the kernel's scan order, a block of
// channels at a time in registers (the same arithmetic, in the same order, as the general loop).
template <class T, bool Max>
void pool_rows_unclipped(const WindowDims& g, const T* __restrict x, T* __restrict y,
                         std::int64_t r0, std::int64_t r1) {
  constexpr std::int64_t B = kRegisterChannels<T>;
  const std::int64_t cx = g.cx, in_w = g.in[1], out_h = g.out[0], out_w = g.out[1];
  const std::int64_t k0 = g.k[0], k1 = g.k[1];
  const T count = static_cast<T>(k0 * k1);
  const std::int64_t pitch = in_w * cx * static_cast<std::int64_t>(sizeof(T));
  const std::int64_t span = std::min(k1, g.s[1]) * cx * static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t r = r0; r < r1; ++r) {
    const std::int64_t n = r / out_h, oy = r % out_h;
    const T* img = x + n * g.in_pixels * cx;
    for (std::int64_t ox = 0; ox < out_w; ++ox) {
      const T* w0 = img + (oy * g.s[0] * in_w + ox * g.s[1]) * cx;
      T* out = y + ((n * out_h + oy) * out_w + ox) * cx;
      prefetch_rows(w0, k0, pitch, span, false);
      auto block = [&](std::int64_t c, auto width) {
        T acc[B];
        for (std::int64_t j = 0; j < width; ++j) acc[j] = first_cell(Max, w0[c + j]);
        for (std::int64_t ky = 0; ky < k0; ++ky)
          for (std::int64_t kx = ky == 0 ? 1 : 0; kx < k1; ++kx) {
            const T* src = w0 + (ky * in_w + kx) * cx + c;
            for (std::int64_t j = 0; j < width; ++j)
              acc[j] = Max ? pick(src[j], acc[j]) : acc[j] + src[j];
          }
        for (std::int64_t j = 0; j < width; ++j) out[c + j] = Max ? acc[j] : acc[j] / count;
      };
      for_register_blocks<T>(cx, block);
    }
  }
}

// MaxPoolGrad of one channels_last image whose windows lie inside it and never share a cell:
// each cell of a window gets its gradient written once, dy at the window's argmax (the first
// maximum in scan order, as argmax_cell) and 0 elsewhere, a block of channels at a time; no
// scattered adds. Cells outside every window must be zeroed by the caller. The values are those
// of adding dy into a zeroed dx: 0 + dy (times (x > 0) for MaxPoolReluGrad: Relu).
template <class T, bool Relu>
void max_pool_grad_apart(const WindowDims& g, const T* __restrict img, const T* __restrict dy,
                         T* __restrict dimg) {
  constexpr std::int64_t B = kRegisterChannels<T>;
  const std::int64_t cx = g.cx, in_w = g.in[1], out_w = g.out[1];
  const std::int64_t k0 = g.k[0], k1 = g.k[1];
  const std::int64_t pitch = in_w * cx * static_cast<std::int64_t>(sizeof(T));
  const std::int64_t span = k1 * cx * static_cast<std::int64_t>(sizeof(T));  // k1 <= stride
  for (std::int64_t oy = 0; oy < g.out[0]; ++oy)
    for (std::int64_t ox = 0; ox < out_w; ++ox) {
      const std::int64_t first = (oy * g.s[0] * in_w + ox * g.s[1]) * cx;
      const T* w0 = img + first;
      T* d0 = dimg + first;
      const T* gv = dy + (oy * out_w + ox) * cx;
      prefetch_rows(w0, k0, pitch, span, false);
      prefetch_rows(d0, k0, pitch, span, true);
      auto block = [&](std::int64_t c, auto width) {
        // Lanes as wide as T's, so that the selects vectorize.
        using I = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
        T best[B];
        I at_cell[B];  // the first cell, in scan order, holding the window's max
        for (std::int64_t j = 0; j < width; ++j) best[j] = w0[c + j];
        for (std::int64_t ky = 0; ky < k0; ++ky)
          for (std::int64_t kx = ky == 0 ? 1 : 0; kx < k1; ++kx) {
            const T* src = w0 + (ky * in_w + kx) * cx + c;
            for (std::int64_t j = 0; j < width; ++j) best[j] = pick(src[j], best[j]);
          }
        // The max is a copy of its first cell, and no earlier cell compares equal to it (it
        // would have been kept), so the first cell with its bits is that cell (a NaN too).
        I best_bits[B];
        std::memcpy(best_bits, best, sizeof(T) * static_cast<std::size_t>(width));
        for (std::int64_t j = 0; j < width; ++j) at_cell[j] = 0;
        for (std::int64_t cell = k0 * k1 - 1; cell >= 0; --cell) {  // the last hit is the first
          const T* src = w0 + ((cell / k1) * in_w + cell % k1) * cx + c;
          I bits[B];
          std::memcpy(bits, src, sizeof(T) * static_cast<std::size_t>(width));
          for (std::int64_t j = 0; j < width; ++j)
            at_cell[j] = bits[j] == best_bits[j] ? static_cast<I>(cell) : at_cell[j];
        }
        for (std::int64_t cell = 0; cell < k0 * k1; ++cell) {
          const std::int64_t at = ((cell / k1) * in_w + cell % k1) * cx + c;
          T* d = d0 + at;
          if constexpr (Relu) {
            const T* src = w0 + at;
            for (std::int64_t j = 0; j < width; ++j)
              d[j] = at_cell[j] == static_cast<I>(cell) ? ReluGradPlainF{}(src[j], T(0) + gv[c + j])
                                                        : T(0);
          } else {
            for (std::int64_t j = 0; j < width; ++j)
              d[j] = at_cell[j] == static_cast<I>(cell) ? T(0) + gv[c + j] : T(0);
          }
        }
      };
      for_register_blocks<T>(cx, block);
    }
}

template <class T>
void pool_kernel(const KernelCall& c) {
  const auto w = attrs::Window::of(*c.attrs);
  const WindowDims g = window_dims(w, c.in[0], c.out);
  const T* x = ptr<T>(c.in[0]);
  T* y = ptr<T>(c.out);
  const Layout xl{g.cf, g.in_pixels, g.cx}, yl{g.cf, g.out_pixels, g.cy};
  const bool max = w.mode == attrs::Window::kMax;
  if (g.cf) {
    // channels_first: one (image, channel) plane after another, its windows read within it.
    parallel_for(
        g.n * g.cx, static_cast<double>(g.out_pixels * g.k_count),
        [&](std::int64_t p0, std::int64_t p1) {
          for (std::int64_t plane = p0; plane < p1; ++plane) {
            const T* xp = x + plane * g.in_pixels;
            T* yp = y + plane * g.out_pixels;
            if (g.r == 2) {
              const std::int64_t w = g.in[1];
              for_each_window_2d(g, [&](std::int64_t op, std::int64_t y0, std::int64_t y1,
                                        std::int64_t x0, std::int64_t x1) {
                T v = first_cell(max, xp[y0 * w + x0]);
                for (std::int64_t yy = y0; yy < y1; ++yy)
                  for (std::int64_t xx = x0; xx < x1; ++xx) {
                    if (yy == y0 && xx == x0) continue;
                    const T u = xp[yy * w + xx];
                    v = max ? (beats(u, v) ? u : v) : v + u;
                  }
                yp[op] = max ? v : v / static_cast<T>((y1 - y0) * (x1 - x0));
              });
              continue;
            }
            for (std::int64_t op = 0; op < g.out_pixels; ++op) {
              const Box box = window_box(g, op);
              T v = 0;
              bool first = true;
              for_each_cell(box, [&](std::int64_t ip) {
                const T u = xp[ip];
                if (first)
                  v = first_cell(max, u), first = false;
                else if (max)
                  v = beats(u, v) ? u : v;
                else
                  v += u;
              });
              yp[op] = max ? v : v / static_cast<T>(box.count);
            }
          }
        },
        1);
    return;
  }
  if (g.r == 2 && unclipped(g)) {
    parallel_for(
        g.n * g.out[0], static_cast<double>(g.out[1] * g.k_count * g.cx),
        [&](std::int64_t r0, std::int64_t r1) {
          if (max)
            pool_rows_unclipped<T, true>(g, x, y, r0, r1);
          else
            pool_rows_unclipped<T, false>(g, x, y, r0, r1);
        },
        1);
    return;
  }
  if (g.r == 2) {
    // channels_last planes: a task takes rows of output pixels; each window's cells are rows of
    // channels, combined in the kernel's scan order by loops that vectorize over the channels.
    const std::int64_t cx = g.cx, in_w = g.in[1], out_h = g.out[0], out_w = g.out[1];
    parallel_for(
        g.n * out_h, static_cast<double>(out_w * g.k_count * cx),
        [&](std::int64_t r0, std::int64_t r1) {
          for (std::int64_t r = r0; r < r1; ++r) {
            const std::int64_t n = r / out_h, oy = r % out_h;
            const std::int64_t ys = oy * g.s[0] - g.pb[0];
            const std::int64_t y0 = std::max<std::int64_t>(ys, 0),
                               y1 = std::min(ys + g.k[0], g.in[0]);
            const T* img = x + n * g.in_pixels * cx;
            for (std::int64_t ox = 0; ox < out_w; ++ox) {
              const std::int64_t xs = ox * g.s[1] - g.pb[1];
              const std::int64_t x0 = std::max<std::int64_t>(xs, 0),
                                 x1 = std::min(xs + g.k[1], in_w);
              T* row = y + ((n * out_h + oy) * out_w + ox) * cx;
              if (y0 >= y1 || x0 >= x1) {  // a window outside the input (padding only)
                for (std::int64_t ch = 0; ch < cx; ++ch) row[ch] = max ? T(0) : T(0) / T(0);
                continue;
              }
              const T* first = img + (y0 * in_w + x0) * cx;
              for (std::int64_t ch = 0; ch < cx; ++ch) row[ch] = first_cell(max, first[ch]);
              for (std::int64_t yy = y0; yy < y1; ++yy)
                for (std::int64_t xx = yy == y0 ? x0 + 1 : x0; xx < x1; ++xx) {
                  const T* src = img + (yy * in_w + xx) * cx;
                  if (max)
                    for (std::int64_t ch = 0; ch < cx; ++ch) row[ch] = pick(src[ch], row[ch]);
                  else
                    for (std::int64_t ch = 0; ch < cx; ++ch) row[ch] += src[ch];
                }
              if (!max) {
                const T count = static_cast<T>((y1 - y0) * (x1 - x0));
                for (std::int64_t ch = 0; ch < cx; ++ch) row[ch] /= count;
              }
            }
          }
        },
        1);
    return;
  }
  parallel_for(
      g.n * g.out_pixels, static_cast<double>(g.k_count * g.cx),
      [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) {
          const std::int64_t n = i / g.out_pixels, op = i % g.out_pixels;
          const Box box = window_box(g, op);
          // Channels innermost: each cell adds one contiguous row of channels.
          T* row = y + yl.at(n, op, 0);
          bool first = true;
          for_each_cell(box, [&](std::int64_t ip) {
            const T* src = x + xl.at(n, ip, 0);
            if (first) {
              for (std::int64_t ch = 0; ch < g.cx; ++ch) row[ch] = first_cell(max, src[ch]);
              first = false;
            } else if (max) {
              for (std::int64_t ch = 0; ch < g.cx; ++ch)
                row[ch] = beats(src[ch], row[ch]) ? src[ch] : row[ch];
            } else {
              for (std::int64_t ch = 0; ch < g.cx; ++ch) row[ch] += src[ch];
            }
          });
          if (!max)
            for (std::int64_t ch = 0; ch < g.cx; ++ch) row[ch] /= static_cast<T>(box.count);
        }
      },
      1);
}

// MaxPoolGrad(x, dy) and AvgPoolGrad(dy, like) -> dx, one image per task. channels_last max:
// each window finds the argmax of a block of channels at once (channels innermost).
// MaxPoolReluGrad (Relu): MaxPoolGrad's dx times (x > 0), relu's gradient of it with x relu's
// output, the same bits as the two ops: written so where windows share no cell, else applied
// to a task's images once their dx is summed.
constexpr std::int64_t kChannelBlock = 256;

template <class T, bool Max, bool Relu = false>
void pool_grad_kernel(const KernelCall& c) {
  const ArrayRef& dyr = Max ? c.in[1] : c.in[0];
  const WindowDims g = window_dims(attrs::Window::of(*c.attrs), c.out, dyr);
  const T* x = ptr<T>(c.in[0]);
  const T* dy = ptr<T>(dyr);
  T* dx = ptr<T>(c.out);
  const Layout xl{g.cf, g.in_pixels, g.cx}, yl{g.cf, g.out_pixels, g.cy};
  const std::int64_t image = g.in_pixels * g.cx;
  parallel_for(
      g.n, static_cast<double>(g.out_pixels * g.k_count * g.cx),
      [&](std::int64_t n0, std::int64_t n1) {
        if constexpr (Max) {
          if (!g.cf && g.r == 2 && unclipped(g) && apart(g)) {
            // Every cell in at most one window: written once. Only windows that tile the image
            // exactly leave no cell to zero first.
            const bool tiled = g.k[0] == g.s[0] && g.k[1] == g.s[1] &&
                               g.out[0] * g.s[0] == g.in[0] && g.out[1] * g.s[1] == g.in[1];
            if (!tiled)
              std::memset(dx + n0 * image, 0,
                          static_cast<std::size_t>((n1 - n0) * image) * sizeof(T));
            for (std::int64_t n = n0; n < n1; ++n)
              max_pool_grad_apart<T, Relu>(g, x + n * image, dy + n * g.out_pixels * g.cx,
                                           dx + n * image);
            return;
          }
        }
        std::memset(dx + n0 * image, 0, static_cast<std::size_t>((n1 - n0) * image) * sizeof(T));
        T best_v[kChannelBlock];
        std::int64_t best_p[kChannelBlock];
        // One output element's gradient into its window: to the argmax (max) or shared (avg).
        auto scatter = [&](std::int64_t n, std::int64_t op, std::int64_t ch, const Box& box) {
          const T gv = dy[yl.at(n, op, ch)];
          if constexpr (Max) {
            dx[xl.at(n, argmax_cell(x, xl, n, ch, box), ch)] += gv;
          } else {
            const T share = gv / static_cast<T>(box.count);
            for_each_cell(box, [&](std::int64_t ip) { dx[xl.at(n, ip, ch)] += share; });
          }
        };
        // channels_last planes: each window's argmax (or share) for a block of channels at once,
        // its cells walked in the kernel's scan order by loops that vectorize over channels.
        for (std::int64_t n = n0; !g.cf && g.r == 2 && n < n1; ++n) {
          const std::int64_t cx = g.cx, in_w = g.in[1];
          const T* img = x + n * g.in_pixels * cx;
          T* dimg = dx + n * g.in_pixels * cx;
          for_each_window_2d(g, [&](std::int64_t op, std::int64_t y0, std::int64_t y1,
                                    std::int64_t x0, std::int64_t x1) {
            if (y0 >= y1 || x0 >= x1) return;
            const T* gv = dy + (n * g.out_pixels + op) * cx;
            if constexpr (Max) {
              for (std::int64_t c0 = 0; c0 < cx; c0 += kChannelBlock) {
                const std::int64_t cn = std::min(kChannelBlock, cx - c0);
                const std::int64_t first = y0 * in_w + x0;
                const T* v0 = img + first * cx + c0;
                for (std::int64_t j = 0; j < cn; ++j) best_v[j] = v0[j], best_p[j] = first;
                for (std::int64_t yy = y0; yy < y1; ++yy)
                  for (std::int64_t xx = yy == y0 ? x0 + 1 : x0; xx < x1; ++xx) {
                    const std::int64_t ip = yy * in_w + xx;
                    const T* v = img + ip * cx + c0;
                    for (std::int64_t j = 0; j < cn; ++j) {
                      const bool take =
                          (v[j] > best_v[j]) | ((v[j] != v[j]) & (best_v[j] == best_v[j]));
                      best_v[j] = take ? v[j] : best_v[j];
                      best_p[j] = take ? ip : best_p[j];
                    }
                  }
                for (std::int64_t j = 0; j < cn; ++j) dimg[best_p[j] * cx + c0 + j] += gv[c0 + j];
              }
            } else {
              const T count = static_cast<T>((y1 - y0) * (x1 - x0));
              for (std::int64_t yy = y0; yy < y1; ++yy)
                for (std::int64_t xx = x0; xx < x1; ++xx) {
                  T* d = dimg + (yy * in_w + xx) * cx;
                  for (std::int64_t ch = 0; ch < cx; ++ch) d[ch] += gv[ch] / count;
                }
            }
          });
        }
        for (std::int64_t n = n0; !g.cf && g.r != 2 && n < n1; ++n)
          for (std::int64_t op = 0; op < g.out_pixels; ++op) {
            const Box box = window_box(g, op);
            if (Max) {
              for (std::int64_t c0 = 0; c0 < g.cx; c0 += kChannelBlock) {
                const std::int64_t cn = std::min(kChannelBlock, g.cx - c0);
                bool first = true;
                for_each_cell(box, [&](std::int64_t ip) {
                  const T* v = x + xl.at(n, ip, c0);
                  if (first) {
                    for (std::int64_t j = 0; j < cn; ++j) best_v[j] = v[j], best_p[j] = ip;
                    first = false;
                    return;
                  }
                  for (std::int64_t j = 0; j < cn; ++j)
                    if (beats(v[j], best_v[j])) best_v[j] = v[j], best_p[j] = ip;
                });
                const T* gv = dy + yl.at(n, op, c0);
                for (std::int64_t j = 0; j < cn; ++j) dx[xl.at(n, best_p[j], c0 + j)] += gv[j];
              }
              continue;
            }
            for (std::int64_t ch = 0; ch < g.cx; ++ch) scatter(n, op, ch, box);
          }
        // channels_first: each (image, channel) plane's windows, in the same window order.
        for (std::int64_t n = n0; g.cf && g.r == 2 && n < n1; ++n)
          for (std::int64_t ch = 0; ch < g.cx; ++ch) {
            const std::int64_t plane = n * g.cx + ch, w = g.in[1];
            const T* xp = x + plane * g.in_pixels;
            const T* gp = dy + plane * g.out_pixels;
            T* dp = dx + plane * g.in_pixels;
            for_each_window_2d(g, [&](std::int64_t op, std::int64_t y0, std::int64_t y1,
                                      std::int64_t x0, std::int64_t x1) {
              if constexpr (Max) {
                std::int64_t best = y0 * w + x0;
                for (std::int64_t yy = y0; yy < y1; ++yy)
                  for (std::int64_t xx = x0; xx < x1; ++xx)
                    if (beats(xp[yy * w + xx], xp[best])) best = yy * w + xx;
                dp[best] += gp[op];
              } else {
                const T share = gp[op] / static_cast<T>((y1 - y0) * (x1 - x0));
                for (std::int64_t yy = y0; yy < y1; ++yy)
                  for (std::int64_t xx = x0; xx < x1; ++xx) dp[yy * w + xx] += share;
              }
            });
          }
        for (std::int64_t n = n0; g.cf && g.r != 2 && n < n1; ++n)
          for (std::int64_t ch = 0; ch < g.cx; ++ch)
            for (std::int64_t op = 0; op < g.out_pixels; ++op)
              scatter(n, op, ch, window_box(g, op));
        if constexpr (Relu)
          for (std::int64_t i = n0 * image; i < n1 * image; ++i)
            dx[i] = ReluGradPlainF{}(x[i], dx[i]);
      },
      1);
}

// MaxPoolGradGrad(x, h) -> (y's shape): h at each window's argmax.
template <class T>
void max_pool_grad_grad_kernel(const KernelCall& c) {
  const WindowDims g = window_dims(attrs::Window::of(*c.attrs), c.in[0], c.out);
  const T* x = ptr<T>(c.in[0]);
  const T* h = ptr<T>(c.in[1]);
  T* y = ptr<T>(c.out);
  const Layout xl{g.cf, g.in_pixels, g.cx}, yl{g.cf, g.out_pixels, g.cy};
  parallel_for(
      g.n * g.out_pixels, static_cast<double>(g.k_count * g.cx),
      [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) {
          const std::int64_t n = i / g.out_pixels, op = i % g.out_pixels;
          const Box box = window_box(g, op);
          for (std::int64_t ch = 0; ch < g.cx; ++ch)
            y[yl.at(n, op, ch)] = h[xl.at(n, argmax_cell(x, xl, n, ch, box), ch)];
        }
      },
      1);
}

}  // namespace

void register_cpu_pool(Backend& b) {
  b.set(Op::Pool, DType::float32, &pool_kernel<float>);
  b.set(Op::Pool, DType::float64, &pool_kernel<double>);
  b.set(Op::MaxPoolGrad, DType::float32, &pool_grad_kernel<float, true>);
  b.set(Op::MaxPoolGrad, DType::float64, &pool_grad_kernel<double, true>);
  b.set(Op::AvgPoolGrad, DType::float32, &pool_grad_kernel<float, false>);
  b.set(Op::AvgPoolGrad, DType::float64, &pool_grad_kernel<double, false>);
  b.set(Op::MaxPoolReluGrad, DType::float32, &pool_grad_kernel<float, true, true>);
  b.set(Op::MaxPoolReluGrad, DType::float64, &pool_grad_kernel<double, true, true>);
  b.set(Op::MaxPoolGradGrad, DType::float32, &max_pool_grad_grad_kernel<float>);
  b.set(Op::MaxPoolGradGrad, DType::float64, &max_pool_grad_grad_kernel<double>);
}

}  // namespace ktape::kernels
