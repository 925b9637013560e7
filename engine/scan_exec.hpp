// Internal to Function and Scan: the concrete layout of a Scan node for one input-shape signature
// (time steps, part shapes and offsets in the flat buffer, the body's compiled plan), and the
// engine kernels of Scan, ScanPart and ScanEmbed. Not a public header.
#pragma once

#include <memory>
#include <vector>

#include "engine/plan.hpp"
#include "engine/scan.hpp"

namespace ktape {

struct ScanLayout {
  const ScanBody* body = nullptr;
  const Function* fn = nullptr;  // the body compiled for the enclosing Function's options
  std::unique_ptr<Plan> plan;    // its plan for these shapes, owned by this layout
  std::int64_t T = 0;
  std::vector<Shape> parts;          // outputs, stored carries, final carries
  std::vector<std::int64_t> offset;  // element offset of each part
  std::int64_t total = 0;
  std::vector<std::size_t> seq_step_bytes, out_step_bytes, carry_bytes;
  std::vector<void*> fed, outs;  // per-step pointer scratch
};

// Layout for a Scan node given its inputs' concrete shapes; ValueError for inconsistent shapes.
// The body runs on the enclosing Function's backend with its fuse/fold options.
std::shared_ptr<ScanLayout> scan_layout(const Node& scan, const std::vector<Shape>& in_shapes,
                                        const std::string& backend, bool fuse, bool fold);
// Shape of part `part` (-1: the whole flat buffer).
Shape scan_layout_shape(const ScanLayout& l, int part);

void run_scan(const KernelCall& c);
void run_scan_part(const KernelCall& c);
void run_scan_embed(const KernelCall& c);

}  // namespace ktape
