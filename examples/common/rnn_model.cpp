#include "examples/common/rnn_model.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include "distributed/distributed.hpp"

namespace ktape::examples {

namespace K = ktape::backend;
using V = std::vector<Tensor>;

namespace {

Tensor glorot_uniform(std::int64_t fan_in, std::int64_t fan_out, std::uint64_t seed) {
  const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return K::random_uniform_variable({fan_in, fan_out}, -limit, limit, {.seed = seed});
}

// Keras's orthogonal initializer for a (rows, cols) kernel with rows <= cols: a Gaussian matrix
// whose rows are made orthonormal (Gram-Schmidt, the Q of its QR factorisation).
Tensor orthogonal(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> a(static_cast<std::size_t>(rows * cols));
  for (auto& v : a) v = normal(gen);
  for (std::int64_t i = 0; i < rows; ++i) {
    double* ri = a.data() + i * cols;
    for (int pass = 0; pass < 2; ++pass) {  // twice for numerical orthogonality
      for (std::int64_t j = 0; j < i; ++j) {
        const double* rj = a.data() + j * cols;
        double d = 0;
        for (std::int64_t k = 0; k < cols; ++k) d += ri[k] * rj[k];
        for (std::int64_t k = 0; k < cols; ++k) ri[k] -= d * rj[k];
      }
    }
    double n = 0;
    for (std::int64_t k = 0; k < cols; ++k) n += ri[k] * ri[k];
    n = std::sqrt(n);
    for (std::int64_t k = 0; k < cols; ++k) ri[k] /= n;
  }
  NDArray q(Shape{rows, cols}, DType::float32);
  float* p = q.data<float>();
  for (std::size_t i = 0; i < a.size(); ++i) p[i] = static_cast<float>(a[i]);
  return K::variable(q);
}

// Copies rows `idx[begin..end)` of images/labels into the batch arrays; xb is (n, T, F).
void gather_batch(const data::Dataset& d, const std::vector<std::int64_t>& idx, std::size_t begin,
                  std::size_t end, std::int64_t T, std::int64_t F, NDArray& xb, NDArray& tb) {
  const std::int64_t n = static_cast<std::int64_t>(end - begin);
  const std::int64_t w = T * F;
  if (d.images.shape()[1] != w)
    throw ValueError("RnnClassifier: images of " + std::to_string(d.images.shape()[1]) +
                     " pixels, expected timesteps * features = " + std::to_string(w));
  if (!xb.defined() || xb.shape()[0] != n) {
    xb = NDArray(Shape{n, T, F}, DType::float32);
    tb = NDArray(Shape{n}, DType::int32);
  }
  const std::uint8_t* src = d.images.data<std::uint8_t>();
  const std::int32_t* lab = d.labels.data<std::int32_t>();
  float* dst = xb.data<float>();
  std::int32_t* t = tb.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = idx[begin + static_cast<std::size_t>(i)];
    data::pixels_to_float(src + r * w, w, dst + i * w);
    t[i] = lab[r];
  }
}

}  // namespace

K::StepFunction lstm_step(const V& w, std::int64_t H) {
  return [w, H](const Tensor& x, const V& s) -> std::pair<Tensor, V> {
    const Tensor z = K::dot(x, w[0]) + K::dot(s[0], w[1]) + w[2];
    auto gate = [&](std::int64_t k) { return K::slice(z, {0, k * H}, {-1, H}); };
    const Tensor i = K::sigmoid(gate(0)), f = K::sigmoid(gate(1)), g = K::tanh(gate(2)),
                 o = K::sigmoid(gate(3));
    const Tensor c = f * s[1] + i * g;
    const Tensor h = o * K::tanh(c);
    return {h, {h, c}};
  };
}

K::StepFunction gru_step(const V& w, std::int64_t H) {
  return [w, H](const Tensor& x, const V& s) -> std::pair<Tensor, V> {
    const Tensor xz = K::dot(x, w[0]) + w[2];
    const Tensor hz = K::dot(s[0], w[1]) + w[3];
    auto col = [&](const Tensor& t, std::int64_t k) { return K::slice(t, {0, k * H}, {-1, H}); };
    const Tensor z = K::sigmoid(col(xz, 0) + col(hz, 0));
    const Tensor r = K::sigmoid(col(xz, 1) + col(hz, 1));
    const Tensor hh = K::tanh(col(xz, 2) + r * col(hz, 2));
    const Tensor h = z * s[0] + (1.0 - z) * hh;
    return {h, {h}};
  };
}

std::vector<Tensor> make_rnn_weights(const std::string& cell, std::int64_t F, std::int64_t H,
                                     std::uint64_t seed) {
  if (cell != "lstm" && cell != "gru")
    throw ValueError("unknown cell '" + cell + "' (expected lstm or gru)");
  const std::int64_t g = cell == "lstm" ? 4 : 3;
  V w{glorot_uniform(F, g * H, seed * 5 + 1), orthogonal(H, g * H, seed * 5 + 2)};
  NDArray b = NDArray::full(Shape{g * H}, 0.0);
  if (cell == "lstm")  // unit_forget_bias: the forget gate (columns H..2H) starts at 1
    std::fill(b.data<float>() + H, b.data<float>() + 2 * H, 1.0f);
  w.push_back(K::variable(b));
  if (cell == "gru") w.push_back(K::zeros({g * H}));  // the recurrent bias of reset_after
  return w;
}

Tensor rnn_logits(const std::string& cell, const Tensor& x, const V& w, std::int64_t H,
                  bool unroll) {
  const bool lstm = cell == "lstm";
  const std::size_t n_cell = lstm ? 3 : 4;
  const V cw(w.begin(), w.begin() + static_cast<long>(n_cell));
  // Zero initial states of shape (samples, H), as Keras builds them from the inputs.
  const Tensor h0 =
      K::zeros_like(K::expand_dims(K::sum(x, {.axis = std::vector<int>{1, 2}}))) + K::zeros({H});
  V init{h0};
  if (lstm) init.push_back(h0);
  const auto r = K::rnn(lstm ? lstm_step(cw, H) : gru_step(cw, H), x, init, {.unroll = unroll});
  return K::dot(r.last_output, w[n_cell]) + w[n_cell + 1];
}

RnnClassifier::RnnClassifier(const RnnConfig& c) : cfg_(c), rng_(c.seed) {
  if (c.hidden <= 0 || c.timesteps <= 0 || c.features <= 0 || c.batch_size <= 0)
    throw ValueError("RnnClassifier: hidden, timesteps, features and batch_size must be > 0");
  if (c.lr && !(*c.lr > 0)) throw ValueError("RnnClassifier: lr must be > 0");
  const std::int64_t H = c.hidden, T = c.timesteps, F = c.features;
  params_ = make_rnn_weights(c.cell, F, H, c.seed);
  params_.push_back(glorot_uniform(H, 10, c.seed * 5 + 3));
  params_.push_back(K::zeros({10}));

  nlohmann::json conf = nlohmann::json::object();
  if (c.lr) conf["lr"] = *c.lr;
  if (c.clipnorm) conf["clipnorm"] = *c.clipnorm;
  opt_ = optimizers::from_config({{"class_name", c.optimizer}, {"config", conf}});
  // Under mpirun every rank averages its gradients with the others' inside the step.
  if (distributed::size() > 1) distributed::distributed_optimizer(*opt_);

  const auto x = K::placeholder({K::None, T, F}, {.name = "images"});
  const auto t = K::placeholder({K::None}, {.dtype = "int32", .name = "labels"});
  const auto p = K::softmax(rnn_logits(c.cell, x, params_, H, c.unroll));
  const auto loss = K::mean(K::sparse_categorical_crossentropy(t, p));
  const auto acc = K::mean(K::cast(K::equal(K::argmax(p, -1), K::cast(t, "int64")), "float32"));
  if (distributed::size() == 1) {
    train_fn_ = K::function({x, t}, {loss, acc}, opt_->get_updates(loss, params_));
  } else {
    // Each rank's loss weighted by its share of an unevenly split last global batch.
    const auto w = K::placeholder(Shape{}, {.name = "loss_weight"});
    train_fn_ = K::function({x, t, w}, {loss, acc}, opt_->get_updates(loss * w, params_));
  }
  eval_fn_ = K::function({x, t}, {loss, acc});
  if (distributed::size() > 1) distributed::broadcast_variables(params_);
}

RnnClassifier::~RnnClassifier() = default;

std::int64_t RnnClassifier::num_params() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += K::count_params(p);
  return n;
}

double RnnClassifier::lr() const { return K::get_value(opt_->lr).item(0); }

RnnEpochStats RnnClassifier::train_epoch(const data::Dataset& train,
                                         const RnnBatchCallback& on_batch) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t n = static_cast<std::size_t>(train.images.shape()[0]);
  std::vector<std::int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::shuffle(idx.begin(), idx.end(), rng_);
  // Under mpirun each rank takes its slice of every global batch (distributed::shard_batches).
  std::vector<std::int64_t> shard, sizes;
  std::vector<double> weights;
  distributed::shard_batches(idx, cfg_.batch_size, shard, sizes, &weights);
  NDArray xb, tb, wb = NDArray::scalar(1.0);
  double loss = 0, acc = 0;
  std::size_t b = 0;
  const auto global = static_cast<std::int64_t>(cfg_.batch_size) * distributed::size();
  for (std::size_t step = 0; step < sizes.size(); ++step) {
    const std::size_t e = b + static_cast<std::size_t>(sizes[step]);
    gather_batch(train, shard, b, e, cfg_.timesteps, cfg_.features, xb, tb);
    if (distributed::size() == 1) {
      train_fn_.run({xb, tb}, outs_);
    } else {
      wb.set_item(0, weights[step]);
      train_fn_.run({xb, tb, wb}, outs_);
    }
    const double l = outs_[0].item(0), a = outs_[1].item(0);
    loss += l * static_cast<double>(e - b);
    acc += a * static_cast<double>(e - b);
    const bool last = step + 1 == sizes.size();
    if (on_batch)
      on_batch(last ? static_cast<std::int64_t>(n)
                    : std::min(static_cast<std::int64_t>(n),
                               static_cast<std::int64_t>(step + 1) * global),
               l, a);
    b = e;
  }
  const std::vector<double> sums = distributed::allreduce({loss, acc, static_cast<double>(b)});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {sums[0] / sums[2], sums[1] / sums[2], secs};
}

RnnEpochStats RnnClassifier::evaluate(const data::Dataset& test) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t n = static_cast<std::size_t>(test.images.shape()[0]);
  std::vector<std::int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  NDArray xb, tb;
  double loss = 0, acc = 0;
  const std::size_t bs = 1000;
  // Under mpirun each rank evaluates a contiguous slice; the means are over every sample.
  const auto ranks = static_cast<std::size_t>(distributed::size());
  const auto r = static_cast<std::size_t>(distributed::rank());
  const std::size_t from = n * r / ranks, to = n * (r + 1) / ranks;
  for (std::size_t b = from; b < to; b += bs) {
    const std::size_t e = std::min(to, b + bs);
    gather_batch(test, idx, b, e, cfg_.timesteps, cfg_.features, xb, tb);
    eval_fn_.run({xb, tb}, outs_);
    loss += outs_[0].item(0) * static_cast<double>(e - b);
    acc += outs_[1].item(0) * static_cast<double>(e - b);
  }
  const std::vector<double> sums = distributed::allreduce({loss, acc});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {sums[0] / static_cast<double>(n), sums[1] / static_cast<double>(n), secs};
}

}  // namespace ktape::examples
