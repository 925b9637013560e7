// Registration entry points of the reference kernel families (one per file).
#pragma once

#include <cstdint>

#include "engine/kernel_abi.hpp"

namespace ktape {
struct Backend;
}

namespace ktape::kernels {
void register_reference_elementwise(Backend& b);
void register_reference_reduce(Backend& b);
void register_reference_nn(Backend& b);
void register_reference_layout(Backend& b);
void register_reference_window(Backend& b);
void register_reference_ctc(Backend& b);  // ops/kernels/ctc.cpp, shared with the cpu backend
void register_reference_sparse(Backend& b);
// Element i of an index array of any numeric dtype as int64 (floats saturate, NaN is -1).
std::int64_t read_index(const ArrayRef& a, std::int64_t i);
// The row of a gathered array that indices[i] names, checked against its `rows` (ValueError).
std::int64_t gather_row(const ArrayRef& indices, std::int64_t i, std::int64_t rows);
// Row r's label of a sparse softmax cross-entropy, checked against n_cls classes (ValueError).
std::int64_t sparse_ce_label(const ArrayRef& labels, std::int64_t r, std::int64_t n_cls);
// Every reference family: the complete table.
void register_reference_all(Backend& b);
}  // namespace ktape::kernels
