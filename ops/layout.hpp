/// \file
/// K:: linear algebra and layout: dot, transpose, permute_dimensions, reshape, flatten,
/// batch_flatten, expand_dims, squeeze, concatenate, slice, stack.
#pragma once

#include <vector>

#include "engine/tensor.hpp"

namespace ktape::backend {

/// 2-D: matrix product. n-D (Theano/numpy semantics): contracts x's last axis with y's
/// second-to-last; result shape x.shape[:-1] + y.shape[:-2] + y.shape[-1:].
Tensor dot(const Tensor& x, const Tensor& y);
Tensor transpose(const Tensor& x);  ///< reverses all axes
Tensor permute_dimensions(const Tensor& x, const std::vector<int>& pattern);
/// One dim may be -1 (inferred at run time). Shares the input's buffer.
Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape);
Tensor flatten(const Tensor& x);        ///< rank 1
Tensor batch_flatten(const Tensor& x);  ///< (batch, prod(rest))
Tensor expand_dims(const Tensor& x, int axis = -1);
Tensor squeeze(const Tensor& x, int axis);  ///< the axis must have size 1
Tensor concatenate(const std::vector<Tensor>& tensors, int axis = -1);
/// Keras-on-TF `slice`: `size` elements from `start` on every axis; a size of -1 takes the rest
/// of the axis. ValueError when a slice leaves the tensor.
Tensor slice(const Tensor& x, const std::vector<std::int64_t>& start,
             const std::vector<std::int64_t>& size);
/// Each slice along `axis` repeated `rep` times in place (numpy's repeat): (2, 3) with rep 2 on
/// axis 0 gives rows 0, 0, 1, 1. Besides the batch dim, at most one dim may be unknown.
Tensor repeat_elements(const Tensor& x, int rep, int axis);
/// Stacks tensors of one shape along a new axis (Keras `stack`).
Tensor stack(const std::vector<Tensor>& tensors, int axis = 0);

}  // namespace ktape::backend
