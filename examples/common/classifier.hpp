// A Fashion-MNIST classifier trained the Keras way, shared by the MLP and CNN examples and their
// end-to-end tests: a model (built by a ModelBuilder from an images placeholder) whose softmax
// output goes into sparse categorical crossentropy, trained by one of the Keras optimizers of
// optim/optimizers.hpp (their get_updates builds the step), dropout through K::in_train_phase,
// a per-epoch History, and checkpoints from which training resumes exactly.
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
#include "train/history.hpp"

namespace ktape::examples {

struct TrainConfig {
  // One of optimizer_names(): sgd (plain SGD), momentum / nesterov (SGD with momentum 0.9,
  // Nesterov's variant for the latter), rmsprop, adagrad, adadelta, adam, adamax, nadam; each
  // with Keras's defaults for everything but the learning rate.
  std::string optimizer = "sgd";
  std::optional<double> lr;  // unset: default_lr(optimizer)
  int batch_size = 128;
  double dropout = 0.2;
  // Seeds the initial weights, the dropout masks and the shuffle order: a fixed seed gives the
  // same training, bit for bit, on the same machine and build.
  std::uint64_t seed = 1;
};

// The accepted TrainConfig::optimizer names, in the order listed above.
const std::vector<std::string>& optimizer_names();
// The learning rate used when TrainConfig::lr is unset: sgd 0.1, momentum and nesterov 0.01,
// rmsprop 0.001, adagrad 0.01, adadelta 1.0, adam 0.001, adamax 0.002, nadam 0.002.
// ValueError (listing the valid names) for another name.
double default_lr(const std::string& optimizer);

// What a ModelBuilder makes from the images placeholder: the class probabilities (samples, 10)
// and the trainable variables, named as Keras names a Sequential's layers (dense_1/kernel, ...).
struct Model {
  Tensor probs;
  std::vector<Tensor> params;
};
// Builds the model on x (None, sample_shape...); `drop(h, k)` applies the configured dropout
// to h through the learning phase (k numbers the dropout layers, for their seeds).
using Dropout = std::function<Tensor(const Tensor& h, std::uint64_t k)>;
using ModelBuilder = std::function<Model(const Tensor& x, const Dropout& drop)>;

struct ModelSpec {
  std::string program;      // "fashion_mlp": in checkpoint messages
  std::string description;  // "MLP 784-256-128-10": in checkpoint messages
  Shape sample_shape;       // one image as the model reads it, 784 pixels in all
  ModelBuilder build;
};

struct EpochStats {
  double loss = 0;  // mean over the samples (each batch's mean weighted by its size)
  double acc = 0;
  double seconds = 0;
};

struct EpochResult {
  int epoch = 0;     // 1-based number of the epoch just trained
  EpochStats train;  // training loss/accuracy (with dropout), averaged over the epoch
  EpochStats val;    // loss/accuracy on the validation set after the epoch (no dropout)
};

// Called after each training batch: samples done so far in the epoch, and that batch's mean
// loss and accuracy.
using BatchCallback = std::function<void(std::int64_t done, double loss, double acc)>;

class Classifier {
 public:
  // Builds the model, the optimizer and the train/eval Functions. ValueError for an unknown
  // optimizer, a learning rate <= 0, a batch size <= 0 or a dropout outside [0, 1).
  Classifier(const TrainConfig& config, ModelSpec spec);
  virtual ~Classifier();
  Classifier(const Classifier&) = delete;
  Classifier& operator=(const Classifier&) = delete;

  // One pass over `train` in a shuffled order drawn from the model's shuffle generator (a
  // std::mt19937_64 seeded with config.seed, advanced by every epoch). Allocates nothing per
  // batch beyond what `on_batch` does.
  // Under mpirun (ktape/distributed, size() > 1) every rank shuffles the same way and takes its
  // slice of each global batch of size() * batch_size samples (distributed::shard_batches);
  // the optimizer averages the gradients over the ranks, so the weights follow those of one
  // process with that global batch. The returned means are over every rank's samples;
  // `on_batch` sees this rank's batch metrics and the samples of every rank done so far.
  // A last global batch split unevenly weights each rank's loss by its share (see
  // distributed::shard_batches). Each rank draws its own dropout masks.
  EpochStats train_epoch(const data::Dataset& train, const BatchCallback& on_batch = {});
  // Mean loss and accuracy in test mode (learning phase 0: no dropout), in batches of 1000.
  // K::switch computes both branches, so the dropout nodes still draw and their counters
  // advance (once per batch): evaluating changes the masks later training draws, exactly as
  // in the version of this example with hand-written SGD, whose numbers `sgd` reproduces.
  // Under mpirun each rank evaluates its contiguous slice and the means are over all samples.
  EpochStats evaluate(const data::Dataset& test);
  // train_epoch, then evaluate on `val`, then one History record {loss, acc, val_loss, val_acc}
  // with the whole epoch's seconds; epochs_done() grows by one.
  EpochResult fit_epoch(const data::Dataset& train, const data::Dataset& val,
                        const BatchCallback& on_batch = {});

  // Epochs completed: fit_epoch calls, plus those recorded in a loaded checkpoint.
  int epochs_done() const { return epochs_done_; }
  const train::History& history() const { return history_; }
  std::int64_t num_params() const;
  const TrainConfig& train_config() const { return train_cfg_; }
  const ModelSpec& spec() const { return spec_; }
  // The optimizer's current learning rate (its `lr` variable).
  double lr() const;
  optimizers::Optimizer& optimizer() { return *opt_; }
  const std::vector<Tensor>& params() const { return params_; }

  // Writes a checkpoint (save_npz: a temp file renamed into place, so a crash leaves the previous
  // file intact). Entries, numpy-readable with np.load:
  //   <param name>:0                    the weights (float32), e.g. dense_1/kernel:0
  //   optimizer/<weight name>:0         every optimizer weight: optimizer/iterations:0 (int64),
  //                                     then its slots, e.g. optimizer/dense_1/kernel/m:0
  //   optimizer/lr:0                    the learning rate variable
  //   training/optimizer                the TrainConfig::optimizer name (uint8 text)
  //   training/optimizer_config         Keras's serialized optimizer JSON (uint8 text)
  //   training/seed                     TrainConfig::seed (int64)
  //   training/dropout                  TrainConfig::dropout (float64)
  //   training/epochs_done              (int64)
  //   training/shuffle_rng              the shuffle generator's state (uint8 text, std::ostream
  //                                     form of std::mt19937_64)
  //   training/dropout_counters         the dropout nodes' call counters (int64 bit patterns)
  //   training/history.csv              History::to_csv() (uint8 text)
  void save_checkpoint(const std::string& path) const;
  // Restores everything save_checkpoint wrote, so the next fit_epoch continues exactly as the
  // run that wrote the file would have (bit-identical losses). The learning rate comes from the
  // checkpoint unless TrainConfig::lr is set, which then wins. Nothing is changed if the file
  // is not a checkpoint of this model: IOError if it is not a readable .npz file, ValueError if
  // it is not a checkpoint, was written with another optimizer, seed or dropout rate (or
  // records no rate), or has weights or optimizer slots of other shapes or dtypes (naming the
  // entry).
  void load_checkpoint(const std::string& path);

 private:
  TrainConfig train_cfg_;
  ModelSpec spec_;
  std::vector<Tensor> params_;
  std::unique_ptr<optimizers::Optimizer> opt_;
  std::vector<Tensor> random_nodes_;  // the DropoutMask nodes of the training graph, by id
  Function train_fn_, eval_fn_;
  std::mt19937_64 shuffle_rng_;
  int epochs_done_ = 0;
  train::History history_;
  // Reused across batches and epochs, so a step allocates nothing: the shuffled order, the fed
  // arrays of full and last (shorter) batches, the outputs.
  std::vector<std::int64_t> order_, shard_, batch_sizes_;
  std::vector<double> loss_weights_;
  std::vector<NDArray> train_full_, train_tail_, eval_full_, eval_tail_;
  std::vector<NDArray> outs_;
};

// Keras's glorot_uniform for a kernel of `shape` whose fans are fan_in and fan_out.
Tensor glorot_uniform(const Shape& shape, std::int64_t fan_in, std::int64_t fan_out,
                      std::uint64_t seed, const std::string& name);

}  // namespace ktape::examples
