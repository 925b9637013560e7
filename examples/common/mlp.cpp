#include "examples/common/mlp.hpp"

namespace ktape::examples {

namespace K = ktape::backend;

namespace {

TrainConfig to_train_config(const MlpConfig& c) {
  if (c.hidden1 <= 0 || c.hidden2 <= 0) throw ValueError("fashion_mlp: hidden sizes must be > 0");
  return {.optimizer = c.optimizer,
          .lr = c.lr,
          .batch_size = c.batch_size,
          .dropout = c.dropout,
          .seed = c.seed};
}

ModelSpec mlp_spec(const MlpConfig& c) {
  ModelSpec s;
  s.program = "fashion_mlp";
  s.description = "MLP 784-" + std::to_string(c.hidden1) + "-" + std::to_string(c.hidden2) + "-10";
  s.sample_shape = Shape{784};
  s.build = [c](const Tensor& x, const Dropout& drop) {
    const std::int64_t h1 = c.hidden1, h2 = c.hidden2;
    const auto W1 = glorot_uniform({784, h1}, 784, h1, c.seed * 3 + 1, "dense_1/kernel");
    const auto W2 = glorot_uniform({h1, h2}, h1, h2, c.seed * 3 + 2, "dense_2/kernel");
    const auto W3 = glorot_uniform({h2, 10}, h2, 10, c.seed * 3 + 3, "dense_3/kernel");
    const auto b1 = K::zeros({h1}, {.name = "dense_1/bias"});
    const auto b2 = K::zeros({h2}, {.name = "dense_2/bias"});
    const auto b3 = K::zeros({10}, {.name = "dense_3/bias"});
    const auto a1 = drop(K::relu(K::dot(x, W1) + b1), 1);
    const auto a2 = drop(K::relu(K::dot(a1, W2) + b2), 2);
    return Model{K::softmax(K::dot(a2, W3) + b3), {W1, b1, W2, b2, W3, b3}};
  };
  return s;
}

}  // namespace

Mlp::Mlp(const MlpConfig& c) : Classifier(to_train_config(c), mlp_spec(c)), cfg_(c) {}

}  // namespace ktape::examples
