/// \file
/// K:: padding and resizing of sequences, images and volumes (Keras 2.2.4 / 2.3.1 on TF):
/// temporal_padding, spatial_2d_padding, spatial_3d_padding (zeros), resize_images (nearest or
/// TF 1.x bilinear) and resize_volumes (nearest).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/tensor.hpp"

namespace ktape::backend {

using PadPair = std::array<std::int64_t, 2>;  ///< (before, after), non-negative

/// x (batch, steps, channels): zeros before and after axis 1.
Tensor temporal_padding(const Tensor& x, PadPair padding = {1, 1});
/// x 4-D: zeros around rows and cols (axes 1, 2; channels_first: 2, 3).
Tensor spatial_2d_padding(const Tensor& x, std::array<PadPair, 2> padding = {{{1, 1}, {1, 1}}},
                          const std::optional<std::string>& data_format = {});
/// x 5-D: zeros around the three spatial axes.
Tensor spatial_3d_padding(const Tensor& x,
                          std::array<PadPair, 3> padding = {{{1, 1}, {1, 1}, {1, 1}}},
                          const std::optional<std::string>& data_format = {});

/// Integer upscaling of rows and cols. "nearest": every pixel repeated (repeat_elements);
/// "bilinear": TF 1.x resize_bilinear without align_corners or half-pixel centers (source
/// coordinate dst / factor; neighbours floor and min(floor + 1, in - 1)), which needs the spatial
/// dims known. data_format is required, as in Keras.
Tensor resize_images(const Tensor& x, int height_factor, int width_factor,
                     const std::string& data_format, const std::string& interpolation = "nearest");
/// Nearest upscaling of the three spatial axes of a 5-D tensor.
Tensor resize_volumes(const Tensor& x, int depth_factor, int height_factor, int width_factor,
                      const std::string& data_format);

}  // namespace ktape::backend
