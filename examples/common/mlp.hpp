// The Fashion-MNIST MLP shared by examples/fashion_mlp and the end-to-end test:
// 784-256-128-10, relu, dropout through K::in_train_phase, glorot-uniform weights, plain SGD
// written with K::update_sub, sparse categorical crossentropy on softmax outputs.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "examples/common/fashion_mnist.hpp"
#include "ktape/ktape.hpp"

namespace ktape::examples {

struct MlpConfig {
  int hidden1 = 256;
  int hidden2 = 128;
  double dropout = 0.2;
  double lr = 0.1;
  int batch_size = 128;
  std::uint64_t seed = 1;
};

struct EpochStats {
  double loss = 0;
  double acc = 0;
  double seconds = 0;
};

class Mlp {
 public:
  explicit Mlp(const MlpConfig& config);
  // One pass over `train` in a shuffled order drawn from `rng`.
  EpochStats train_epoch(const data::Dataset& train, std::mt19937_64& rng);
  // Mean loss and accuracy in test mode (no dropout).
  EpochStats evaluate(const data::Dataset& test);
  std::int64_t num_params() const;

 private:
  MlpConfig cfg_;
  std::vector<Tensor> params_;
  Function train_fn_, eval_fn_;
  std::vector<NDArray> outs_;
};

}  // namespace ktape::examples
