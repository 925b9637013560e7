/// \file
/// K:: linear algebra and layout: dot, batch_dot, transpose, permute_dimensions, reshape, flatten,
/// batch_flatten, expand_dims, squeeze, concatenate, slice, stack.
#pragma once

#include <vector>

#include "engine/tensor.hpp"

namespace ktape::backend {

/// 2-D: matrix product. n-D (Theano/numpy semantics): contracts x's last axis with y's
/// second-to-last; result shape x.shape[:-1] + y.shape[:-2] + y.shape[-1:]. A sparse x (rank
/// 2, with a rank-2 y) gives a dense product, differentiable with respect to y (TF's
/// sparse_tensor_dense_matmul).
Tensor dot(const Tensor& x, const Tensor& y);
/// Keras 2.3.1's batch_dot: for each sample i, tensordot(x[i], y[i]) over axes[0] of x and
/// axes[1] of y (one int: the same axis of both). Result (batch,) + x.shape[1:] without axes[0]
/// + y.shape[1:] without axes[1]; a rank-1 result becomes (batch, 1). Default axes: the last of
/// x and the last of y when y is 2-D, else its second-to-last. ValueError for rank < 2, axis 0,
/// more than two axes, or batch / contracted sizes that differ. Computed as a broadcast product
/// summed over the contracted axis (memory batch x |x rest| x K x |y rest|).
Tensor batch_dot(const Tensor& x, const Tensor& y, std::vector<int> axes = {});
Tensor batch_dot(const Tensor& x, const Tensor& y, int axis);
Tensor transpose(const Tensor& x);  ///< reverses all axes
Tensor permute_dimensions(const Tensor& x, const std::vector<int>& pattern);
/// One dim may be -1 (inferred at run time). Shares the input's buffer.
Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape);
Tensor flatten(const Tensor& x);        ///< rank 1
Tensor batch_flatten(const Tensor& x);  ///< (batch, prod(rest))
Tensor expand_dims(const Tensor& x, int axis = -1);
Tensor squeeze(const Tensor& x, int axis);  ///< the axis must have size 1
/// Sparse tensors only: a sparse result (tf.sparse_concat); sparse and dense mixed: dense.
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
