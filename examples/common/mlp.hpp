// The Fashion-MNIST MLP shared by examples/fashion_mlp and the end-to-end test: 784-256-128-10,
// relu, dropout after each hidden layer through K::in_train_phase, glorot-uniform weights, zero
// biases, softmax output; trained as every example Classifier (examples/common/classifier.hpp).
#pragma once

#include "examples/common/classifier.hpp"

namespace ktape::examples {

struct MlpConfig {
  int hidden1 = 256;
  int hidden2 = 128;
  double dropout = 0.2;
  std::string optimizer = "sgd";  // see TrainConfig
  std::optional<double> lr;       // unset: default_lr(optimizer)
  int batch_size = 128;
  std::uint64_t seed = 1;
};

// The trainable variables are named as Keras names a Sequential of 3 Dense layers:
// "dense_1/kernel", "dense_1/bias", ..., "dense_3/bias".
class Mlp : public Classifier {
 public:
  // ValueError as Classifier, or for hidden sizes <= 0.
  explicit Mlp(const MlpConfig& config);
  const MlpConfig& config() const { return cfg_; }

 private:
  MlpConfig cfg_;
};

}  // namespace ktape::examples
