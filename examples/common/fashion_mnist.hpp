// Fashion-MNIST loader for the ktape examples: reads the (gzip-compressed or plain) IDX files
// of the dataset into NDArrays, images as their uint8 pixels (N, 784) — a quarter of float32's
// memory; batches convert with pixels_to_float — and labels as int32 (N,). Missing or malformed
// files raise ktape::IOError with a message saying why.
#pragma once

#include <cstdint>
#include <string>

#include "engine/ndarray.hpp"

namespace ktape::data {

struct Dataset {
  NDArray images;  // uint8 (N, rows*cols), the file's pixels
  NDArray labels;  // int32 (N,)
};

// Reads one IDX image file (magic 0x00000803; header N, rows, cols, big-endian) into a uint8
// (N, rows*cols) array. limit < 0 reads all N images; a limit above N reads N.
NDArray read_idx_images(const std::string& path, std::int64_t limit = -1);

// dst[i] = src[i] / 255 in float32: the model's input in [0, 1].
void pixels_to_float(const std::uint8_t* src, std::int64_t n, float* dst);

// Reads one IDX label file (magic 0x00000801; header N, big-endian) into an int32 (N,) array.
NDArray read_idx_labels(const std::string& path, std::int64_t limit = -1);

// Loads the "train" or "t10k" split from `dir` (files <split>-images-idx3-ubyte.gz and
// <split>-labels-idx1-ubyte.gz; the uncompressed names are tried if the .gz files are absent).
// Throws IOError if the files are missing or malformed or their counts differ, ValueError for
// another split name.
Dataset load_fashion_mnist(const std::string& dir, const std::string& split,
                           std::int64_t limit = -1);

// "/usr/share/datasets/fashion-mnist", where the dataset-fashion-mnist package installs it.
std::string default_fashion_mnist_dir();

}  // namespace ktape::data
