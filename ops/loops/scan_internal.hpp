// Shared by the loop family's files (build, gradient, execution). Not a public header.
// ScanPart / ScanEmbed attrs: ints = {part}: part number in the Scan's flat buffer (outputs,
// then stored carries, then final carries).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/graph.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/loops/scan.hpp"

namespace ktape::loops {

std::string describe(const Tensor& t);
int part_number(const ScanBody& b, ScanPartKind kind, int index);
// The part a ScanPart / ScanEmbed node cuts (its attrs).
int part_of(const Node& n);
Tensor part_node(Op op, const Tensor& buf, const Tensor& scan, int part);
Shape prepend(std::int64_t t, const Shape& s);
Shape drop_first(const Shape& s);

// The Scan's gradient rule (scan_grad.cpp).
std::vector<Tensor> scan_grad(const Node& n, const Tensor& y, const Tensor& g);
// The compile hooks of Scan, ScanPart and ScanEmbed (scan_exec.cpp).
Prepared prepare_scan(const PrepareArgs& a);
Prepared prepare_scan_part(const PrepareArgs& a);
Prepared prepare_scan_embed(const PrepareArgs& a);

}  // namespace ktape::loops
