/// \file
/// K:: pooling (Keras 2.2.4 / 2.3.1 on TensorFlow): pool2d and pool3d, max or average.
/// Padding "valid" or "same" (TF SAME); average pooling with "same" divides by the number of
/// window cells inside the input (TF's avg_pool). The max gradient goes to the first maximum of
/// each window in scan order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.hpp"

namespace ktape::backend {

struct PoolOptions {
  std::vector<std::int64_t> strides;  ///< empty: 1 on every spatial dim (Keras's default)
  std::string padding = "valid";      ///< "valid" or "same"
  std::optional<std::string> data_format;
  std::string pool_mode = "max";  ///< "max" or "avg"
};

/// x (batch, rows, cols, channels) [channels_first: (batch, channels, rows, cols)].
Tensor pool2d(const Tensor& x, const std::vector<std::int64_t>& pool_size,
              const PoolOptions& options = {});
/// x (batch, d, h, w, channels) [channels_first: (batch, channels, d, h, w)].
Tensor pool3d(const Tensor& x, const std::vector<std::int64_t>& pool_size,
              const PoolOptions& options = {});

}  // namespace ktape::backend

namespace ktape::ops {

/// A plain relu's gradient for its output y when the gradient reaching y is max pooling's
/// gradient of y itself (conv -> relu -> max-pool): one MaxPoolReluGrad(y, dy), the pool's
/// gradient times (y > 0) in one pass, the same values as ReluGrad(y, MaxPoolGrad(y, dy)).
/// Undefined for any other gradient.
Tensor max_pool_relu_grad(const Tensor& y, const Tensor& g);

}  // namespace ktape::ops
