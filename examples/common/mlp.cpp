#include "examples/common/mlp.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

namespace ktape::examples {

namespace K = ktape::backend;

namespace {

Tensor glorot_uniform(std::int64_t fan_in, std::int64_t fan_out, std::uint64_t seed) {
  const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return K::random_uniform_variable({fan_in, fan_out}, -limit, limit, {.seed = seed});
}

// Copies rows `idx[begin..end)` of images/labels into the batch arrays.
void gather_batch(const data::Dataset& d, const std::vector<std::int64_t>& idx, std::size_t begin,
                  std::size_t end, NDArray& xb, NDArray& tb) {
  const std::int64_t n = static_cast<std::int64_t>(end - begin);
  const std::int64_t w = d.images.shape()[1];
  if (!xb.defined() || xb.shape()[0] != n) {
    xb = NDArray(Shape{n, w}, DType::float32);
    tb = NDArray(Shape{n}, DType::int32);
  }
  const float* src = d.images.data<float>();
  const std::int32_t* lab = d.labels.data<std::int32_t>();
  float* dst = xb.data<float>();
  std::int32_t* t = tb.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = idx[begin + static_cast<std::size_t>(i)];
    std::memcpy(dst + i * w, src + r * w, static_cast<std::size_t>(w) * sizeof(float));
    t[i] = lab[r];
  }
}

}  // namespace

Mlp::Mlp(const MlpConfig& c) : cfg_(c) {
  const auto x = K::placeholder({K::None, 784}, {.name = "images"});
  const auto t = K::placeholder({K::None}, {.dtype = "int32", .name = "labels"});
  const auto W1 = glorot_uniform(784, c.hidden1, c.seed * 3 + 1);
  const auto W2 = glorot_uniform(c.hidden1, c.hidden2, c.seed * 3 + 2);
  const auto W3 = glorot_uniform(c.hidden2, 10, c.seed * 3 + 3);
  const auto b1 = K::zeros({c.hidden1});
  const auto b2 = K::zeros({c.hidden2});
  const auto b3 = K::zeros({10});
  params_ = {W1, b1, W2, b2, W3, b3};
  const std::uint64_t seed = c.seed;
  const double rate = c.dropout;
  auto drop = [rate, seed](const Tensor& h, std::uint64_t k) {
    return K::in_train_phase([=] { return K::dropout(h, rate, {.seed = seed * 7 + k}); }, h);
  };
  auto h1 = drop(K::relu(K::dot(x, W1) + b1), 1);
  auto h2 = drop(K::relu(K::dot(h1, W2) + b2), 2);
  auto p = K::softmax(K::dot(h2, W3) + b3);
  auto loss = K::mean(K::sparse_categorical_crossentropy(t, p));
  auto acc = K::mean(K::cast(K::equal(K::argmax(p, -1), K::cast(t, "int64")), "float32"));
  auto grads = K::gradients(loss, params_);
  std::vector<Tensor> updates;
  for (std::size_t i = 0; i < params_.size(); ++i)
    updates.push_back(K::update_sub(params_[i], c.lr * grads[i]));
  const auto lp = K::learning_phase();
  train_fn_ = K::function({x, t, lp}, {loss, acc}, updates);
  eval_fn_ = K::function({x, t, lp}, {loss, acc});
}

std::int64_t Mlp::num_params() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += K::count_params(p);
  return n;
}

EpochStats Mlp::train_epoch(const data::Dataset& train, std::mt19937_64& rng) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t n = static_cast<std::size_t>(train.images.shape()[0]);
  std::vector<std::int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::shuffle(idx.begin(), idx.end(), rng);
  const NDArray phase = NDArray::scalar(1.0, DType::bool_);
  NDArray xb, tb;
  double loss = 0, acc = 0;
  const std::size_t bs = static_cast<std::size_t>(cfg_.batch_size);
  for (std::size_t b = 0; b < n; b += bs) {
    const std::size_t e = std::min(n, b + bs);
    gather_batch(train, idx, b, e, xb, tb);
    train_fn_.run({xb, tb, phase}, outs_);
    loss += outs_[0].item(0) * static_cast<double>(e - b);
    acc += outs_[1].item(0) * static_cast<double>(e - b);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {loss / static_cast<double>(n), acc / static_cast<double>(n), secs};
}

EpochStats Mlp::evaluate(const data::Dataset& test) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t n = static_cast<std::size_t>(test.images.shape()[0]);
  std::vector<std::int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  const NDArray phase = NDArray::scalar(0.0, DType::bool_);
  NDArray xb, tb;
  double loss = 0, acc = 0;
  const std::size_t bs = 1000;
  for (std::size_t b = 0; b < n; b += bs) {
    const std::size_t e = std::min(n, b + bs);
    gather_batch(test, idx, b, e, xb, tb);
    eval_fn_.run({xb, tb, phase}, outs_);
    loss += outs_[0].item(0) * static_cast<double>(e - b);
    acc += outs_[1].item(0) * static_cast<double>(e - b);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {loss / static_cast<double>(n), acc / static_cast<double>(n), secs};
}

}  // namespace ktape::examples
