// Internal helpers for building nodes in the ops/ families: argument checks with Keras-style
// messages, scalar constants, and the shape rules shared between families. Not public.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/graph.hpp"

namespace ktape::ops {

// "K::add" style name of an op for messages (CamelCase op name -> snake_case).
std::string fn_name(Op op);

void check_float(const char* fn, const char* arg, const Tensor& x);
void check_same_dtype(const char* fn, const Tensor& a, const Tensor& b);
// A scalar constant of `dtype` (hash-consed: the same value gives the same node).
Tensor scalar(double v, DType dtype);
// numpy broadcasting of static shapes (None-aware). Throws ValueError naming fn.
Shape broadcast_shapes(const char* fn, const Shape& a, const Shape& b);

// "(2, 3)" for messages.
std::string dims_str(std::span<const std::int64_t> v);
// Arguments of the sliding-window ops (conv, pooling, padding), with Keras's messages prefixed
// by fn. data_format unset: image_data_format(). A spatial tuple: empty -> all 1, one value ->
// that value on every spatial dim, else exactly `rank` positive values.
bool channels_first(const char* fn, const std::optional<std::string>& data_format);
std::vector<std::int64_t> spatial_tuple(const char* fn, const char* arg,
                                        const std::vector<std::int64_t>& v, int rank);
// The largest stride, dilation, window dim or padding amount the sliding-window ops take: their
// arithmetic (dilated windows, cells per window, padded extents) then stays far from overflow.
inline constexpr std::int64_t kMaxWindowValue = std::int64_t{1} << 24;
// "valid" -> attrs::Window::kValid, "same" -> kSame, "causal" (only where causal_ok) -> kCausal.
inline constexpr int kCausal = 3;
int padding_mode(const char* fn, const std::string& padding, bool causal_ok);

// Shape rules usable as OpDef::shape.
Shape same_as_input0(const Node& n, const std::vector<Shape>& in);
Shape broadcast_rule(const Node& n, const std::vector<Shape>& in);
Shape scalar_rule(const Node& n, const std::vector<Shape>& in);
// OpDef::shape_only masks.
inline unsigned input0_shape_only(const Node&) { return 1u; }
inline unsigned input1_shape_only(const Node&) { return 2u; }
inline unsigned all_shape_only(const Node&) { return ~0u; }

// Registration of each family (called once from ensure_ops_registered).
void register_core_ops();
void register_elementwise_ops();
void register_reduction_ops();
void register_nn_ops();
void register_layout_ops();
void register_indexing_ops();
void register_ctc_ops();
void register_control_ops();
void register_conv_ops();
void register_pool_ops();
void register_image_ops();
void register_sparse_ops();
void register_collective_ops();

// Sparse tensors (ops/sparse.cpp): a SparseTensor node over its parts (indices (nnz, rank)
// int64, values (nnz,), a zero-size carrier shaped (dense shape..., 0)), and the builders that
// K::placeholder, K::dot, K::concatenate and K::ctc_label_dense_to_sparse call.
Tensor sparse_from_parts(const Tensor& indices, const Tensor& values, const Tensor& carrier);
Tensor sparse_placeholder(const Shape& shape, DType dtype, const std::string& name);
Tensor sparse_dot(const Tensor& x, const Tensor& y);
Tensor sparse_concatenate(const std::vector<Tensor>& tensors, int axis);

}  // namespace ktape::ops
