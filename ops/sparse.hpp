/// \file
/// K:: sparse tensors, as Keras on TF's SparseTensor: made by placeholder({.sparse = true}) (fed
/// a K::SparseValue: COO indices, values, dense shape), by concatenate of sparse tensors and by
/// ctc_label_dense_to_sparse. Of the K:: functions, to_dense, dot (sparse x), concatenate,
/// shape, int_shape, ndim, dtype and is_sparse take one; any other op given a sparse tensor is
/// a TypeError (TF does not densify implicitly either). A Function output or K::eval of a
/// sparse tensor is its dense value. Entries are in any order; a position listed twice holds
/// the sum of its values.
#pragma once

#include "engine/function.hpp"
#include "engine/tensor.hpp"

namespace ktape::backend {

using ktape::Feed;
using ktape::SparseValue;

/// The dense tensor (zeros where no entry is listed); a dense x is returned as is (Keras).
Tensor to_dense(const Tensor& x);

}  // namespace ktape::backend
