/// \file
/// K:: reductions. `axis` is an int or a list of ints (negative allowed); no axis reduces over
/// everything. argmax/argmin return int64 (TF).
#pragma once

#include <optional>
#include <vector>

#include "engine/tensor.hpp"

namespace ktape::backend {

struct ReduceOptions {
  std::optional<std::vector<int>> axis;  ///< nullopt: all axes
  bool keepdims = false;
};

Tensor sum(const Tensor& x, const ReduceOptions& options = {});
Tensor sum(const Tensor& x, int axis, bool keepdims = false);
/// Float tensors; a bool tensor is cast to floatx first (Keras). Integer tensors: TypeError.
Tensor mean(const Tensor& x, const ReduceOptions& options = {});
Tensor mean(const Tensor& x, int axis, bool keepdims = false);
Tensor max(const Tensor& x, const ReduceOptions& options = {});
Tensor max(const Tensor& x, int axis, bool keepdims = false);
Tensor min(const Tensor& x, const ReduceOptions& options = {});
Tensor min(const Tensor& x, int axis, bool keepdims = false);
Tensor argmax(const Tensor& x, int axis = -1);
Tensor argmin(const Tensor& x, int axis = -1);

}  // namespace ktape::backend
