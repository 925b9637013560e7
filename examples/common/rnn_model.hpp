// The Fashion-MNIST recurrent classifier shared by examples/fashion_rnn and its end-to-end test:
// each 28x28 image is read as 28 time steps of 28 features (a (None, 28, 28) placeholder), fed
// to an LSTM or a GRU written as a step function with K:: ops and run by K::rnn (the symbolic
// Scan loop, or the unrolled graph), whose last output goes through dense(10) + softmax into
// sparse categorical crossentropy. Keras initialisation: glorot-uniform input kernel,
// orthogonal recurrent kernel, zero bias with the LSTM's forget-gate bias at 1
// (unit_forget_bias). Trained by a Keras optimizer from optim/optimizers.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "examples/common/fashion_mnist.hpp"
#include "ktape/ktape.hpp"
#include "optim/optimizers.hpp"

namespace ktape::examples {

struct RnnConfig {
  std::string cell = "lstm";  // "lstm" or "gru"
  int hidden = 128;
  int timesteps = 28;  // an image of timesteps * features pixels is read row by row
  int features = 28;
  // A Keras optimizer name (sgd, rmsprop, adagrad, adadelta, adam, adamax, nadam) with Keras's
  // defaults but for the learning rate and clipnorm.
  std::string optimizer = "adam";
  std::optional<double> lr;        // unset: the optimizer's Keras default (adam 0.001)
  std::optional<double> clipnorm;  // global-norm gradient clipping
  bool unroll = false;             // K::rnn's unroll: the plain graph instead of the Scan loop
  int batch_size = 128;
  // Seeds the initial weights and the shuffle order.
  std::uint64_t seed = 1;
};

struct RnnEpochStats {
  double loss = 0;  // mean over the samples (each batch's mean weighted by its size)
  double acc = 0;
  double seconds = 0;
};

// Called after each training batch: samples done so far in the epoch, that batch's mean loss
// and accuracy.
using RnnBatchCallback = std::function<void(std::int64_t done, double loss, double acc)>;

class RnnClassifier {
 public:
  // Builds the model, the optimizer and the train/eval Functions. ValueError for an unknown
  // cell or optimizer, or a non-positive size or learning rate.
  explicit RnnClassifier(const RnnConfig& config);
  ~RnnClassifier();
  RnnClassifier(const RnnClassifier&) = delete;
  RnnClassifier& operator=(const RnnClassifier&) = delete;

  // One pass over `train` (images (N, timesteps * features)) in a shuffled order drawn from the
  // model's generator (std::mt19937_64 seeded with config.seed).
  RnnEpochStats train_epoch(const data::Dataset& train, const RnnBatchCallback& on_batch = {});
  // Mean loss and accuracy over `test`, in batches of 1000.
  RnnEpochStats evaluate(const data::Dataset& test);

  std::int64_t num_params() const;
  double lr() const;
  const RnnConfig& config() const { return cfg_; }
  // [W (F x gH), U (H x gH), b (gH), (GRU: recurrent bias (gH)), dense kernel, dense bias],
  // g = 4 (LSTM, gates i, f, c, o) or 3 (GRU, gates z, r, h).
  const std::vector<Tensor>& params() const { return params_; }

 private:
  RnnConfig cfg_;
  std::vector<Tensor> params_;
  std::unique_ptr<optimizers::Optimizer> opt_;
  Function train_fn_, eval_fn_;
  std::vector<NDArray> outs_;
  std::mt19937_64 rng_;
};

// The step functions (K::rnn's step_function) of the two cells; `w` as in params().
//   LSTM: z = x W + h U + b split into i, f, c, o; c' = sig(f) c + sig(i) tanh(c~);
//         h' = sig(o) tanh(c'); states (h, c).
//   GRU (Keras reset_after=True): xz = x W + b, hz = h U + b_rec split into z, r, h;
//         h~ = tanh(xz_h + sig(r) hz_h); h' = sig(z) h + (1 - sig(z)) h~; states (h).
backend::StepFunction lstm_step(const std::vector<Tensor>& w, std::int64_t hidden);
backend::StepFunction gru_step(const std::vector<Tensor>& w, std::int64_t hidden);

// The Keras-initialised cell weights (see params()) for `cell` with `features` inputs.
std::vector<Tensor> make_rnn_weights(const std::string& cell, std::int64_t features,
                                     std::int64_t hidden, std::uint64_t seed);

// The logits (samples, 10) of the classifier on `x` (samples, T, F): K::rnn with `cell`'s step
// and zero initial states, then dense(10) on the last output. `w` = cell weights + {kernel,
// bias} of the dense layer.
Tensor rnn_logits(const std::string& cell, const Tensor& x, const std::vector<Tensor>& w,
                  std::int64_t hidden, bool unroll);

}  // namespace ktape::examples
