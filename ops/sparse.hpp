/// \file
/// K:: sparse tensors, as Keras on TF's SparseTensor: made by placeholder({.sparse = true}) (fed
/// a K::SparseValue: COO indices, values, dense shape), by concatenate of sparse tensors and by
/// ctc_label_dense_to_sparse. Of the K:: functions, to_dense, dot (sparse x), concatenate,
/// is_sparse, is_placeholder, shape, size, int_shape, ndim and dtype take one; any other op
/// given a sparse tensor is a TypeError (TF 1.x also maps cast, abs, negative, sign and square
/// over a SparseTensor's values: here convert with to_dense first). A Function output or
/// K::eval of a sparse tensor is its dense value. Entries are in any order, and a position
/// listed twice holds the sum of its values (TF's to_dense refuses unsorted or repeated indices;
/// its sparse_tensor_dense_matmul sums them, as here). Rank 1 to 11.
#pragma once

#include "engine/function.hpp"
#include "engine/tensor.hpp"

namespace ktape::backend {

using ktape::Feed;
using ktape::SparseValue;

/// The dense tensor (zeros where no entry is listed); a dense x is returned as is (Keras).
Tensor to_dense(const Tensor& x);

}  // namespace ktape::backend
