/// \file
/// K:: convolutions (Keras 2.2.4 / 2.3.1 on TensorFlow): conv1d/2d/3d, the transposed convs,
/// depthwise and separable convs, and the locally connected (unshared) convs.
///
/// Conventions, as TF: convolutions are cross-correlations (no kernel flip). Kernel layouts do not
/// depend on data_format: conv (window..., in, out); transposed (window..., out, in); depthwise
/// (kh, kw, in, multiplier) with output channel c * multiplier + m. `data_format` unset means
/// image_data_format(). Padding "valid", "same" (TF SAME: out = ceil(in / stride), the odd extra
/// cell at the end) or, for conv1d only, "causal" (dilation * (k - 1) zeros on the left).
/// Strides and dilation_rate: empty means all 1; one value is used for every spatial dim.
/// A kernel's spatial dims and channel dims must be known when the op is built.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.hpp"

namespace ktape::backend {

struct ConvOptions {
  std::vector<std::int64_t> strides;  ///< empty: 1 on every spatial dim
  std::string padding = "valid";      ///< "valid", "same"; conv1d also "causal"
  std::optional<std::string> data_format;
  std::vector<std::int64_t> dilation_rate;  ///< empty: 1 on every spatial dim
};

/// x (batch, steps, in) [channels_first: (batch, in, steps)], kernel (k, in, out).
Tensor conv1d(const Tensor& x, const Tensor& kernel, const ConvOptions& options = {});
/// x (batch, rows, cols, in) [channels_first: (batch, in, rows, cols)], kernel (kh, kw, in, out).
Tensor conv2d(const Tensor& x, const Tensor& kernel, const ConvOptions& options = {});
/// x (batch, d, h, w, in) [channels_first: (batch, in, d, h, w)], kernel (kd, kh, kw, in, out).
Tensor conv3d(const Tensor& x, const Tensor& kernel, const ConvOptions& options = {});

/// The transpose (adjoint) of conv2d: kernel (kh, kw, out, in); `output_shape` is the full
/// output shape in data_format's layout, batch included (None or -1: x's batch). It must be a
/// shape whose conv2d with the same strides and padding gives x's spatial dims. Dilation needs
/// strides of 1 (as TF's atrous transpose).
Tensor conv2d_transpose(const Tensor& x, const Tensor& kernel,
                        const std::vector<std::int64_t>& output_shape,
                        const ConvOptions& options = {});
/// As conv2d_transpose in 3-D: kernel (kd, kh, kw, out, in). Keras has no dilation here.
Tensor conv3d_transpose(const Tensor& x, const Tensor& kernel,
                        const std::vector<std::int64_t>& output_shape,
                        const ConvOptions& options = {});

/// Depthwise: every input channel convolved with its own `multiplier` filters; kernel
/// (kh, kw, in, multiplier), output channels in * multiplier.
Tensor depthwise_conv2d(const Tensor& x, const Tensor& depthwise_kernel,
                        const ConvOptions& options = {});
/// Depthwise (strides and dilation apply here) then a pointwise 1x1 conv:
/// depthwise (kh, kw, in, m), pointwise (1, 1, in * m, out).
Tensor separable_conv2d(const Tensor& x, const Tensor& depthwise_kernel,
                        const Tensor& pointwise_kernel, const ConvOptions& options = {});
/// As separable_conv2d in 1-D: depthwise (k, in, m), pointwise (1, in * m, out).
Tensor separable_conv1d(const Tensor& x, const Tensor& depthwise_kernel,
                        const Tensor& pointwise_kernel, const ConvOptions& options = {});

/// Locally connected 1-D (unshared weights, valid windows): inputs (batch, steps, in), kernel
/// (out_steps, k * in, filters): out[b, i, f] = sum_{t<k, c} inputs[b, i*stride + t, c] *
/// kernel[i, t*in + c, f]. data_format is ignored (channels_last), as in Keras on TF.
Tensor local_conv1d(const Tensor& inputs, const Tensor& kernel, std::int64_t kernel_size,
                    std::int64_t stride, const std::optional<std::string>& data_format = {});
/// Locally connected 2-D: kernel (out_rows * out_cols, kh * kw * in, filters); patch
/// p = i * out_cols + j, flattened in (kh, kw, in) order for channels_last and (in, kh, kw) for
/// channels_first; the output (batch, out_rows, out_cols, filters) or channels_first.
Tensor local_conv2d(const Tensor& inputs, const Tensor& kernel,
                    const std::vector<std::int64_t>& kernel_size,
                    const std::vector<std::int64_t>& strides,
                    const std::vector<std::int64_t>& output_shape,
                    const std::optional<std::string>& data_format = {});

}  // namespace ktape::backend
