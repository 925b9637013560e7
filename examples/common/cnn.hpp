// The Fashion-MNIST CNN shared by examples/fashion_cnn, its end-to-end test and bench/:
// conv 32 (3x3) relu -> max-pool 2 -> conv 64 (3x3) relu -> max-pool 2 -> flatten -> dense 128
// relu -> dropout -> dense 10 softmax (valid convolutions: 28 -> 26 -> 13 -> 11 -> 5). Keras
// initialisation (glorot-uniform kernels, zero biases); trained as every example Classifier
// (examples/common/classifier.hpp), Adam by default. Either data format: the images are fed as
// (28, 28, 1) or (1, 28, 28).
#pragma once

#include "examples/common/classifier.hpp"

namespace ktape::examples {

struct CnnConfig {
  int filters1 = 32;
  int filters2 = 64;
  int dense = 128;
  double dropout = 0.25;
  std::string optimizer = "adam";  // see TrainConfig
  std::optional<double> lr;        // unset: default_lr(optimizer)
  int batch_size = 128;
  std::uint64_t seed = 1;
  std::string data_format = "channels_last";  // or "channels_first"
  std::string padding = "same";               // of both convolutions: "same" or "valid"
};

// The layers' variables are named as Keras names them: conv2d_1/kernel, conv2d_1/bias,
// conv2d_2/..., dense_1/..., dense_2/....
class Cnn : public Classifier {
 public:
  // ValueError as Classifier, for sizes <= 0 or another data format.
  explicit Cnn(const CnnConfig& config);
  const CnnConfig& config() const { return cfg_; }

 private:
  CnnConfig cfg_;
};

// The model alone (for benchmarks): its ModelSpec.
ModelSpec cnn_spec(const CnnConfig& config);

}  // namespace ktape::examples
