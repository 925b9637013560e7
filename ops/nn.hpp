/// \file
/// K:: neural-network ops: activations, softmax, dropout and the crossentropies (Keras 2.2+
/// argument order: target first).
#pragma once

#include <optional>
#include <vector>

#include "engine/tensor.hpp"

namespace ktape::backend {

struct ReluOptions {
  double alpha = 0.0;
  std::optional<double> max_value;
  double threshold = 0.0;
};
/// Keras's relu: x above the threshold (clipped to [0, max_value] when set), alpha * (x -
/// threshold) below it, 0 at it. NaN stays NaN, as on TF. With alpha 0 every value at or below
/// the threshold gives +0, as tf.nn.relu does for the default options (relu(-inf) = 0); Keras's
/// own threshold path, x * (x > threshold), would give NaN for -inf and -0 for negatives.
Tensor relu(const Tensor& x, const ReluOptions& options = {});
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor softmax(const Tensor& x, int axis = -1);
/// x above 0, alpha * (exp(x) - 1) at or below (TF's formula; the gradient at 0 is alpha).
Tensor elu(const Tensor& x, double alpha = 1.0);
/// log(1 + exp(x)) as TF computes it: x above -log(eps) - 2, exp(x) below log(eps) + 2, so it
/// neither overflows for large x nor rounds to 0 for very negative x.
Tensor softplus(const Tensor& x);
Tensor softsign(const Tensor& x);      ///< x / (1 + |x|)
Tensor hard_sigmoid(const Tensor& x);  ///< clip(0.2 x + 0.5, 0, 1) (Keras)
/// x / sqrt(max(sum(square(x), axis, keepdims), 1e-12)) (TF's l2_normalize; no axis: all axes).
Tensor l2_normalize(const Tensor& x, std::optional<std::vector<int>> axis = std::nullopt);
Tensor l2_normalize(const Tensor& x, int axis);

struct DropoutOptions {
  std::optional<Shape> noise_shape;  ///< broadcastable to x's shape; None dims are taken from x
  std::optional<std::uint64_t> seed;
};
/// Inverted dropout: kept entries scaled by 1/(1-level). Unconditional (wrap in in_train_phase).
/// ValueError unless 0 <= level < 1. Each evaluation draws a fresh mask.
Tensor dropout(const Tensor& x, double level, const DropoutOptions& options = {});

struct CrossentropyOptions {
  bool from_logits = false;
  int axis = -1;
};
/// Non-logits: output / sum(output, axis), clipped to [eps, 1-eps], then -sum(target*log, axis).
/// Logits: -sum(target * log_softmax(output, axis), axis) (TF ignored `axis` here; ktape honours
/// it).
Tensor categorical_crossentropy(const Tensor& target, const Tensor& output,
                                const CrossentropyOptions& options = {});
/// target: integer class ids of shape output.shape without the class axis (a trailing size-1 axis
/// is accepted, as Keras flattens it). Non-logits: log(clip(output, eps, 1-eps)) is used as the
/// logits (Keras 2.2.4 on TF). A class id outside [0, classes) is a ValueError at run time.
Tensor sparse_categorical_crossentropy(const Tensor& target, const Tensor& output,
                                       const CrossentropyOptions& options = {});
/// Keras 2.2.4 on TF, elementwise: a non-logits output is clipped to [eps, 1 - eps] and turned
/// into logits log(p / (1 - p)); then TF's sigmoid_cross_entropy_with_logits,
/// max(x, 0) - x * target + softplus(-|x|). target and output must have the same shape
/// (ValueError otherwise, as TF). Differentiable in both.
Tensor binary_crossentropy(const Tensor& target, const Tensor& output, bool from_logits = false);
/// float32 one-hot rows of length num_classes (dtype "" = float32); out-of-range ids give zeros.
Tensor one_hot(const Tensor& indices, int num_classes, const std::string& dtype = "");

}  // namespace ktape::backend
