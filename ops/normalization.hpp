/// \file
/// K:: bias_add and batch normalization (Keras 2.2.4 / 2.3.1 on TensorFlow). Both are
/// compositions of K:: elementwise ops and reductions: Function fuses their elementwise parts
/// into single passes, and their gradients (of any order) are those of the composition.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.hpp"

namespace ktape::backend {

/// Adds `bias` on the channel axis. A rank-1 bias (C,) goes on the last axis (channels_last) or
/// axis 1 (channels_first); x of rank 2 or above 5 always uses the last axis. A bias of rank
/// ndim(x) - 1 is given in channels_last layout (spatial..., C) and, for channels_first,
/// reshaped (not transposed) to (C, spatial...), exactly as Keras on TF. Any other bias rank is
/// a ValueError ("Unexpected bias dimensions").
Tensor bias_add(const Tensor& x, const Tensor& bias,
                const std::optional<std::string>& data_format = {});

struct BatchNormOptions {
  int axis = -1;          ///< the channel axis rank-1 parameters apply to
  double epsilon = 1e-3;  ///< Keras's default here is 1e-3, not K::epsilon()
};
/// (x - mean) / sqrt(var + epsilon) * gamma + beta, computed as TF does: x * inv + (beta -
/// mean * inv) with inv = gamma / sqrt(var + epsilon). Rank-1 parameters apply along
/// options.axis; parameters of x's rank broadcast as they are. A null beta / gamma means 0 / 1.
Tensor batch_normalization(const Tensor& x, const Tensor& mean, const Tensor& var,
                           const Tensor& beta, const Tensor& gamma,
                           const BatchNormOptions& options = {});

struct NormalizedBatch {
  Tensor normed, mean, var;
};
/// Moments over reduction_axes (mean and the biased variance, with the reduced shape, e.g.
/// (C,)) and x normalized with them; gamma / beta (null: 1 / 0) have the reduced shape or
/// broadcast against x. ktape always returns the biased variance: TF's fused path (4-D input
/// reduced over [0, 1, 2]) returns the Bessel-corrected one, a quirk not reproduced.
NormalizedBatch normalize_batch_in_training(const Tensor& x, const Tensor& gamma,
                                            const Tensor& beta,
                                            const std::vector<int>& reduction_axes,
                                            double epsilon = 1e-3);

}  // namespace ktape::backend
