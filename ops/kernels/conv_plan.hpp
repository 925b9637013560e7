// How the cpu convolution kernels split one call: tiles of pixels gathered into a matrix (im2col)
// and multiplied by the kernel with a GEMM, a fixed number of slots (tasks) each working through
// a run of tiles with its own piece of scratch. Shared by the ops' compile hook, which reserves
// the scratch in the Function's arena, and by the kernels, so both agree on the bytes. The split
// depends only on the shapes: results are the same at any thread count. Not a public header.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "engine/parallel.hpp"
#include "ops/kernels/cpu/gemm.hpp"
#include "ops/kernels/window.hpp"

namespace ktape::kernels {

enum class ConvPass { kForward, kBackpropInput, kBackpropFilter };

struct ConvPlan {
  // The input gradient of a channels_last conv over a batch of at least kScatterBatch scatters
  // instead of gathering: each tile of dy's pixels (rows x cy, read in place) times the kernel
  // gives every window cell's contribution (rows x cells*cx, the slot's tile), which is added
  // into dx. Tiles of one image overlap in dx, so a slot runs whole images (hence the batch:
  // below it, the gather's tiles within an image feed more threads). Then cols = cy (the
  // product's depth) and out_cols = cells*cx.
  bool scatter = false;
  std::int64_t rows = 1;      // pixels per tile: rows of the gathered matrix
  std::int64_t cols = 1;      // its columns: window cells x channels read per pixel (scatter: cy)
  std::int64_t out_cols = 1;  // channels each pixel produces (scatter: cells x cx)
  std::int64_t tiles_per_image = 1;  // tiles never straddle two images
  std::int64_t tiles = 1;
  std::int64_t slots = 1;
  std::int64_t tiles_per_slot = 1;
  std::size_t shared_bytes = 0;  // at the start of the scratch (the reordered or transposed kernel)
  std::size_t slot_bytes = 0;    // then one piece per slot (a tile; a partial kernel gradient;
                                 // the tile GEMM's packs, from gemm_offset)
  std::size_t gemm_offset = 0, gemm_bytes = 0;
  std::size_t bytes() const { return shared_bytes + static_cast<std::size_t>(slots) * slot_bytes; }
};

// Whether the GEMM path serves this geometry (one group); other groupings run a direct loop.
inline bool conv_uses_gemm(const WindowDims& g) { return g.groups == 1; }

inline std::size_t round64(std::size_t b) { return (b + 63) / 64 * 64; }

// The smallest batch whose channels_last input gradient scatters (ConvPlan::scatter).
constexpr std::int64_t kScatterBatch = 16;

inline ConvPlan conv_plan(ConvPass pass, const WindowDims& g, std::size_t elem) {
  ConvPlan p;
  if (!conv_uses_gemm(g)) {
    p.slots = 0;
    return p;
  }
  const bool input = pass == ConvPass::kBackpropInput;
  p.scatter = input && !g.cf && g.n >= kScatterBatch;
  const std::int64_t pixels = input && !p.scatter ? g.in_pixels : g.out_pixels;
  p.cols = p.scatter ? g.cy : g.k_count * (input ? g.cy : g.cx);
  p.out_cols = p.scatter ? g.k_count * g.cx : input ? g.cx : g.cy;
  const std::int64_t width = p.scatter ? p.out_cols : p.cols;  // of the slot's tile
  // A tile of about 96 KiB stays in L2 next to the kernel panel.
  const auto budget = static_cast<std::int64_t>(192 * 1024 / elem);
  p.rows = std::clamp<std::int64_t>(budget / std::max<std::int64_t>(width, 1), 4, 512);
  p.rows = std::max<std::int64_t>(1, std::min(p.rows, pixels));
  // Tiles of an image as equal as the budget allows: 169 pixels in 3 tiles of 57 rather than
  // 83 + 83 + 3 (a 3-row GEMM packs the whole kernel for little work).
  if (pixels > 0) {
    const std::int64_t count = (pixels + p.rows - 1) / p.rows;
    p.rows = (pixels + count - 1) / count;
  }
  p.tiles_per_image = pixels == 0 ? 0 : (pixels + p.rows - 1) / p.rows;
  p.tiles = g.n * p.tiles_per_image;
  const double flops = 2.0 * static_cast<double>(g.n) * static_cast<double>(pixels) *
                       static_cast<double>(p.cols) * static_cast<double>(p.out_cols);
  if (p.scatter) {  // whole images per slot
    p.slots = slot_count(flops / 8.0, g.n, 64);
    const std::int64_t images = g.n == 0 ? 0 : (g.n + p.slots - 1) / p.slots;
    p.tiles_per_slot = images * p.tiles_per_image;
  } else {
    p.slots = slot_count(flops / 8.0, p.tiles, 64);
    p.tiles_per_slot = p.tiles == 0 ? 0 : (p.tiles + p.slots - 1) / p.slots;
  }
  if (p.tiles > 0) p.slots = (p.tiles + p.tiles_per_slot - 1) / p.tiles_per_slot;
  p.slot_bytes = round64(static_cast<std::size_t>(p.rows * width) * elem);
  if (pass == ConvPass::kBackpropFilter)
    p.slot_bytes += round64(static_cast<std::size_t>(p.cols * p.out_cols) * elem);
  // The tile GEMM's packs, for a full tile and for an image's last, shorter one (the bytes do
  // not shrink with the shape: a smaller product may keep more depth blocks at once).
  auto tile_gemm = [&](std::int64_t rows) {
    return pass == ConvPass::kBackpropFilter ? gemm_scratch(p.cols, p.out_cols, rows, elem)
                                             : gemm_scratch(rows, p.out_cols, p.cols, elem);
  };
  const std::int64_t last_rows =
      p.tiles_per_image > 0 ? pixels - (p.tiles_per_image - 1) * p.rows : p.rows;
  p.gemm_offset = p.slot_bytes;
  p.gemm_bytes = round64(std::max(tile_gemm(p.rows), tile_gemm(last_rows)));
  p.slot_bytes += p.gemm_bytes;
  if (input)  // the reordered kernel (scatter: transposed)
    p.shared_bytes = round64(static_cast<std::size_t>(p.cols * p.out_cols) * elem);
  return p;
}

}  // namespace ktape::kernels
