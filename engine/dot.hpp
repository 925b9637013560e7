/// \file
/// Graphviz DOT renderings of what ktape built, to look at with `dot -Tsvg`: the graph behind
/// some tensors (what K::gradients added, say) and, through Function::plan_dot, a compiled plan.
#pragma once

#include <string>
#include <vector>

#include "engine/tensor.hpp"

namespace ktape {

/// The nodes `roots` depend on, as a digraph in tape order: a box per op (op kind, shape, dtype,
/// name), an ellipse per placeholder, variable or constant, an edge per input.
std::string graph_dot(const std::vector<Tensor>& roots);

}  // namespace ktape
