/// \file
/// K:: neural-network ops: activations, softmax, dropout and the crossentropies (Keras 2.2+
/// argument order: target first).
#pragma once

#include <optional>

#include "engine/tensor.hpp"

namespace ktape::backend {

struct ReluOptions {
  double alpha = 0.0;
  std::optional<double> max_value;
  double threshold = 0.0;
};
Tensor relu(const Tensor& x, const ReluOptions& options = {});
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor softmax(const Tensor& x, int axis = -1);

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
/// float32 one-hot rows of length num_classes (dtype "" = float32); out-of-range ids give zeros.
Tensor one_hot(const Tensor& indices, int num_classes, const std::string& dtype = "");

}  // namespace ktape::backend
