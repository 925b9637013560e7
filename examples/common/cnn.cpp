#include "examples/common/cnn.hpp"

namespace ktape::examples {

namespace K = ktape::backend;

namespace {

TrainConfig to_train_config(const CnnConfig& c) {
  return {.optimizer = c.optimizer,
          .lr = c.lr,
          .batch_size = c.batch_size,
          .dropout = c.dropout,
          .seed = c.seed};
}

}  // namespace

ModelSpec cnn_spec(const CnnConfig& c) {
  if (c.filters1 <= 0 || c.filters2 <= 0 || c.dense <= 0)
    throw ValueError("fashion_cnn: filters and dense sizes must be > 0");
  if (c.padding != "same" && c.padding != "valid")
    throw ValueError("fashion_cnn: padding must be same or valid, got '" + c.padding + "'");
  if (c.data_format != "channels_last" && c.data_format != "channels_first")
    throw ValueError("fashion_cnn: data_format must be channels_last or channels_first, got '" +
                     c.data_format + "'");
  const bool cf = c.data_format == "channels_first";
  ModelSpec s;
  s.program = "fashion_cnn";
  s.description = "CNN conv" + std::to_string(c.filters1) + "-pool-conv" +
                  std::to_string(c.filters2) + "-pool-dense" + std::to_string(c.dense) + "-10, " +
                  c.padding + " padding, " + c.data_format;
  s.sample_shape = cf ? Shape{1, 28, 28} : Shape{28, 28, 1};
  s.build = [c](const Tensor& x, const Dropout& drop) {
    const std::int64_t f1 = c.filters1, f2 = c.filters2, d = c.dense;
    // 28 -> 28 (same) or 26 (valid) -> 14 / 13 -> 14 / 11 -> 7 / 5.
    const std::int64_t side = c.padding == "same" ? 7 : 5;
    const std::int64_t flat = side * side * f2;
    const auto k1 = glorot_uniform({3, 3, 1, f1}, 9, 9 * f1, c.seed * 5 + 1, "conv2d_1/kernel");
    const auto b1 = K::zeros({f1}, {.name = "conv2d_1/bias"});
    const auto k2 =
        glorot_uniform({3, 3, f1, f2}, 9 * f1, 9 * f2, c.seed * 5 + 2, "conv2d_2/kernel");
    const auto b2 = K::zeros({f2}, {.name = "conv2d_2/bias"});
    const auto w3 = glorot_uniform({flat, d}, flat, d, c.seed * 5 + 3, "dense_1/kernel");
    const auto b3 = K::zeros({d}, {.name = "dense_1/bias"});
    const auto w4 = glorot_uniform({d, 10}, d, 10, c.seed * 5 + 4, "dense_2/kernel");
    const auto b4 = K::zeros({10}, {.name = "dense_2/bias"});
    const std::string df = c.data_format;
    auto conv_block = [&](const Tensor& h, const Tensor& k, const Tensor& b) {
      const Tensor a =
          K::relu(K::bias_add(K::conv2d(h, k, {.padding = c.padding, .data_format = df}), b, df));
      return K::pool2d(a, {2, 2}, {.strides = {2, 2}, .data_format = df});
    };
    const Tensor h = K::batch_flatten(conv_block(conv_block(x, k1, b1), k2, b2));
    const Tensor a = drop(K::relu(K::dot(h, w3) + b3), 1);
    return Model{K::softmax(K::dot(a, w4) + b4), {k1, b1, k2, b2, w3, b3, w4, b4}};
  };
  return s;
}

Cnn::Cnn(const CnnConfig& c) : Classifier(to_train_config(c), cnn_spec(c)), cfg_(c) {}

}  // namespace ktape::examples
