// Reverse-mode differentiation over the tape. The results are ordinary graph tensors: they feed
// updates, further ops and gradients() again (higher order works by construction).
#pragma once

#include <vector>

#include "engine/graph.hpp"

namespace ktape {

// Gradients of `loss` with respect to each of `xs` (any tensors, not only variables), aligned
// with `xs`. A non-scalar loss is summed first (Keras on TensorFlow). A tensor the loss does not
// depend on, or that is not floating point, gets a null Tensor (TF returns None).
std::vector<Tensor> gradients(const Tensor& loss, const std::vector<Tensor>& xs);

}  // namespace ktape
