/// \file
/// Reverse-mode differentiation over the tape. The results are ordinary graph tensors: they feed
/// updates, further ops and gradients() again (higher order works by construction).
#pragma once

#include <vector>

#include "engine/tensor.hpp"

namespace ktape {

/// Gradients of `loss` with respect to each of `xs` (any tensors, not only variables), aligned
/// with `xs`. A non-scalar loss is summed first (Keras on TensorFlow). A tensor the loss does not
/// depend on, or that is not floating point, gets a null Tensor (TF returns None).
std::vector<Tensor> gradients(const Tensor& loss, const std::vector<Tensor>& xs);
/// Vector-Jacobian products (TF's grad_ys): the gradients of sum_i sum(ys[i] * grad_ys[i]) with
/// respect to xs, without building that sum. A null grad_ys[i] stands for ones.
std::vector<Tensor> gradients(const std::vector<Tensor>& ys, const std::vector<Tensor>& xs,
                              const std::vector<Tensor>& grad_ys);

}  // namespace ktape
