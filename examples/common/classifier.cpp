#include "examples/common/classifier.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "distributed/distributed.hpp"
#include "io/npz.hpp"

namespace ktape::examples {

namespace K = ktape::backend;
namespace D = ktape::distributed;

namespace {

namespace O = ktape::optimizers;

struct OptimizerChoice {
  const char* name;
  double lr;
};
constexpr OptimizerChoice kOptimizers[] = {
    {"sgd", 0.1},       {"momentum", 0.01}, {"nesterov", 0.01},
    {"rmsprop", 0.001}, {"adagrad", 0.01},  {"adadelta", 1.0},
    {"adam", 0.001},    {"adamax", 0.002},  {"nadam", 0.002}};

std::string valid_names() {
  std::string s;
  for (const auto& o : kOptimizers) s += (s.empty() ? "" : ", ") + std::string(o.name);
  return s;
}

std::unique_ptr<O::Optimizer> make_optimizer(const std::string& name, double lr) {
  if (name == "sgd") return std::make_unique<O::SGD>(O::SGDOptions{.lr = lr});
  if (name == "momentum") return std::make_unique<O::SGD>(O::SGDOptions{.lr = lr, .momentum = 0.9});
  if (name == "nesterov")
    return std::make_unique<O::SGD>(O::SGDOptions{.lr = lr, .momentum = 0.9, .nesterov = true});
  if (name == "rmsprop") return std::make_unique<O::RMSprop>(O::RMSpropOptions{.lr = lr});
  if (name == "adagrad") return std::make_unique<O::Adagrad>(O::AdagradOptions{.lr = lr});
  if (name == "adadelta") return std::make_unique<O::Adadelta>(O::AdadeltaOptions{.lr = lr});
  if (name == "adam") return std::make_unique<O::Adam>(O::AdamOptions{.lr = lr});
  if (name == "adamax") return std::make_unique<O::Adamax>(O::AdamaxOptions{.lr = lr});
  if (name == "nadam") return std::make_unique<O::Nadam>(O::NadamOptions{.lr = lr});
  throw ValueError("unknown optimizer '" + name + "' (valid: " + valid_names() + ")");
}

// Copies rows [begin, end) of `d` — through `order` if given, else consecutive — into ins[0]
// (images, each of `sample` shape) and ins[1] (labels), reallocating them only when the batch
// size changes.
void gather_batch(const data::Dataset& d, const Shape& sample, const std::int64_t* order,
                  std::int64_t begin, std::int64_t end, std::vector<NDArray>& ins) {
  const std::int64_t n = end - begin;
  const std::int64_t w = d.images.shape()[1];
  if (sample.num_elements() != w)
    throw ValueError("images of " + std::to_string(w) + " pixels, the model reads " + sample.str());
  if (!ins[0].defined() || ins[0].shape()[0] != n) {
    std::vector<std::int64_t> dims{n};
    dims.insert(dims.end(), sample.dims().begin(), sample.dims().end());
    ins[0] = NDArray(Shape(std::move(dims)), DType::float32);
    ins[1] = NDArray(Shape{n}, DType::int32);
  }
  const std::uint8_t* src = d.images.data<std::uint8_t>();
  const std::int32_t* lab = d.labels.data<std::int32_t>();
  float* dst = ins[0].data<float>();
  std::int32_t* t = ins[1].data<std::int32_t>();
  if (!order) {
    data::pixels_to_float(src + begin * w, n * w, dst);
    std::memcpy(t, lab + begin, static_cast<std::size_t>(n) * sizeof(std::int32_t));
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = order[begin + i];
    data::pixels_to_float(src + r * w, w, dst + i * w);
    t[i] = lab[r];
  }
}

NDArray text_array(const std::string& s) {
  NDArray a(Shape{static_cast<std::int64_t>(s.size())}, DType::uint8);
  if (!s.empty()) std::memcpy(a.raw_data(), s.data(), s.size());
  return a;
}

NDArray int64_scalar(std::uint64_t bits) {
  NDArray a = NDArray::scalar(0, DType::int64);
  std::memcpy(a.raw_data(), &bits, sizeof bits);
  return a;
}

// A rate as the user typed it: 0.2, not 0.200000.
std::string fmt_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path) : path_(path), arrays_(load_npz(path)) {}

  const NDArray* find(const std::string& name) const {
    for (const auto& [k, v] : arrays_)
      if (k == name) return &v;
    return nullptr;
  }
  const NDArray& get(const std::string& name) const {
    const NDArray* a = find(name);
    if (!a) fail("has no '" + name + "' entry");
    return *a;
  }
  std::string text(const std::string& name) const {
    const NDArray& a = get(name);
    if (a.dtype() != DType::uint8 || a.ndim() != 1)
      fail("entry '" + name + "' should be uint8 text, found " + a.shape().str() + " " +
           std::string(dtype_name(a.dtype())));
    return std::string(static_cast<const char*>(a.raw_data()), static_cast<std::size_t>(a.size()));
  }
  std::uint64_t int64(const std::string& name) const {
    const NDArray& a = get(name);
    if (a.dtype() != DType::int64 || a.ndim() != 0)
      fail("entry '" + name + "' should be an int64 scalar, found " + a.shape().str() + " " +
           std::string(dtype_name(a.dtype())));
    std::uint64_t v = 0;
    std::memcpy(&v, a.raw_data(), sizeof v);
    return v;
  }
  double float64(const std::string& name) const {
    const NDArray& a = get(name);
    if (a.dtype() != DType::float64 || a.ndim() != 0)
      fail("entry '" + name + "' should be a float64 scalar, found " + a.shape().str() + " " +
           std::string(dtype_name(a.dtype())));
    return a.item();
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw ValueError("checkpoint " + path_ + ": " + what);
  }

 private:
  std::string path_;
  NamedArrays arrays_;
};

}  // namespace

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& o : kOptimizers) v.emplace_back(o.name);
    return v;
  }();
  return names;
}

double default_lr(const std::string& optimizer) {
  for (const auto& o : kOptimizers)
    if (optimizer == o.name) return o.lr;
  throw ValueError("unknown optimizer '" + optimizer + "' (valid: " + valid_names() + ")");
}

Tensor glorot_uniform(const Shape& shape, std::int64_t fan_in, std::int64_t fan_out,
                      std::uint64_t seed, const std::string& name) {
  const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return K::random_uniform_variable(shape, -limit, limit, {.seed = seed, .name = name});
}

Classifier::Classifier(const TrainConfig& c, ModelSpec spec)
    : train_cfg_(c), spec_(std::move(spec)), shuffle_rng_(c.seed) {
  const std::string who = spec_.program + ": ";
  const double lr = c.lr ? *c.lr : default_lr(c.optimizer);
  if (!(lr > 0)) throw ValueError(who + "the learning rate must be > 0, got " + std::to_string(lr));
  if (c.batch_size <= 0)
    throw ValueError(who + "the batch size must be > 0, got " + std::to_string(c.batch_size));
  if (!(c.dropout >= 0 && c.dropout < 1))
    throw ValueError(who + "the dropout rate must be in [0, 1), got " + std::to_string(c.dropout));
  opt_ = make_optimizer(c.optimizer, lr);
  // Under mpirun every rank averages its gradients with the others' inside the step.
  if (D::size() > 1) D::distributed_optimizer(*opt_);

  std::vector<std::int64_t> dims{K::None};
  dims.insert(dims.end(), spec_.sample_shape.dims().begin(), spec_.sample_shape.dims().end());
  const auto x = K::placeholder(Shape(std::move(dims)), {.name = "images"});
  const auto t = K::placeholder({K::None}, {.dtype = "int32", .name = "labels"});
  // Dropout through the learning phase: a K::switch fed 1 by train_epoch and 0 by evaluate.
  // Each rank draws its own dropout masks.
  const std::uint64_t seed = c.seed * 7 + 7919 * static_cast<std::uint64_t>(D::rank());
  const double rate = c.dropout;
  const Dropout drop = [=](const Tensor& h, std::uint64_t k) {
    return K::in_train_phase([=] { return K::dropout(h, rate, {.seed = seed + k}); }, h);
  };
  const Model m = spec_.build(x, drop);
  params_ = m.params;
  const Tensor& p = m.probs;
  auto loss = K::mean(K::sparse_categorical_crossentropy(t, p));
  auto acc = K::mean(K::cast(K::equal(K::argmax(p, -1), K::cast(t, "int64")), "float32"));
  const auto lp = K::learning_phase();
  if (D::size() == 1) {
    train_fn_ = K::function({x, t, lp}, {loss, acc}, opt_->get_updates(loss, params_));
  } else {
    // Each rank's mean loss is weighted by count * N / L (distributed::shard_batches), so the
    // averaged gradient of a last global batch split unevenly is still the mean over it.
    const auto w = K::placeholder(Shape{}, {.name = "loss_weight"});
    train_fn_ = K::function({x, t, lp, w}, {loss, acc}, opt_->get_updates(loss * w, params_));
  }
  if (D::size() > 1) D::broadcast_variables(params_);  // the same start on every rank
  eval_fn_ = K::function({x, t, lp}, {loss, acc});
  random_nodes_ = K::random_sources({loss, acc});
  train_full_ = {NDArray(), NDArray(), NDArray::scalar(1.0, DType::bool_)};
  if (D::size() > 1) train_full_.push_back(NDArray::scalar(1.0));  // the loss weight
  train_tail_ = train_full_;
  eval_full_ = {NDArray(), NDArray(), NDArray::scalar(0.0, DType::bool_)};
  eval_tail_ = eval_full_;
}

Classifier::~Classifier() = default;

std::int64_t Classifier::num_params() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += K::count_params(p);
  return n;
}

double Classifier::lr() const { return K::get_value(opt_->lr).item(0); }

EpochStats Classifier::train_epoch(const data::Dataset& train, const BatchCallback& on_batch) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t n = train.images.shape()[0];
  order_.resize(static_cast<std::size_t>(n));
  std::iota(order_.begin(), order_.end(), 0);
  std::shuffle(order_.begin(), order_.end(), shuffle_rng_);
  const std::int64_t bs = train_cfg_.batch_size;
  // Under mpirun each rank takes its slice of every global batch of size() * bs samples.
  D::shard_batches(order_, bs, shard_, batch_sizes_, &loss_weights_);
  double loss = 0, acc = 0;
  std::int64_t b = 0, seen = 0;
  for (std::size_t step = 0; step < batch_sizes_.size(); ++step) {
    const std::int64_t e = b + batch_sizes_[step];
    std::vector<NDArray>& ins = e - b == bs ? train_full_ : train_tail_;
    gather_batch(train, spec_.sample_shape, shard_.data(), b, e, ins);
    if (ins.size() > 3) ins[3].set_item(0, loss_weights_[step]);
    train_fn_.run(ins, outs_);
    const double bl = outs_[0].item(0), ba = outs_[1].item(0);
    loss += bl * static_cast<double>(e - b);
    acc += ba * static_cast<double>(e - b);
    seen += e - b;
    // Progress counts every rank's samples: the global batches done so far (all at the last).
    const bool last = step + 1 == batch_sizes_.size();
    if (on_batch)
      on_batch(last ? n
                    : std::min<std::int64_t>(n, static_cast<std::int64_t>(step + 1) * bs *
                                                    static_cast<std::int64_t>(D::size())),
               bl, ba);
    b = e;
  }
  // The epoch's means over every rank's samples.
  const std::vector<double> sums = D::allreduce({loss, acc, static_cast<double>(seen)});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double dn = std::max(sums[2], 1.0);
  return {sums[0] / dn, sums[1] / dn, secs};
}

EpochStats Classifier::evaluate(const data::Dataset& test) {
  const auto t0 = std::chrono::steady_clock::now();
  // Under mpirun each rank evaluates a contiguous slice of the samples.
  const std::int64_t all = test.images.shape()[0], ranks = D::size(), r = D::rank();
  const std::int64_t from = all * r / ranks, to = all * (r + 1) / ranks;
  double loss = 0, acc = 0;
  const std::int64_t bs = 1000;
  for (std::int64_t b = from; b < to; b += bs) {
    const std::int64_t e = std::min(to, b + bs);
    std::vector<NDArray>& ins = e - b == bs ? eval_full_ : eval_tail_;
    gather_batch(test, spec_.sample_shape, nullptr, b, e, ins);
    eval_fn_.run(ins, outs_);
    loss += outs_[0].item(0) * static_cast<double>(e - b);
    acc += outs_[1].item(0) * static_cast<double>(e - b);
  }
  const std::vector<double> sums = D::allreduce({loss, acc});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double dn = static_cast<double>(std::max<std::int64_t>(all, 1));
  return {sums[0] / dn, sums[1] / dn, secs};
}

EpochResult Classifier::fit_epoch(const data::Dataset& train, const data::Dataset& val,
                                  const BatchCallback& on_batch) {
  EpochResult r;
  r.train = train_epoch(train, on_batch);
  r.val = evaluate(val);
  r.epoch = ++epochs_done_;
  history_.add_epoch(r.epoch,
                     {{"loss", r.train.loss},
                      {"acc", r.train.acc},
                      {"val_loss", r.val.loss},
                      {"val_acc", r.val.acc}},
                     r.train.seconds + r.val.seconds);
  return r;
}

void Classifier::save_checkpoint(const std::string& path) const {
  NamedArrays a;
  for (const auto& p : params_) a.emplace_back(p.name() + ":0", K::get_value(p));
  const auto& ow = opt_->weights();
  for (const auto& w : ow) a.emplace_back("optimizer/" + w.name() + ":0", K::get_value(w));
  a.emplace_back("optimizer/lr:0", K::get_value(opt_->lr));
  a.emplace_back("training/optimizer", text_array(train_cfg_.optimizer));
  a.emplace_back("training/optimizer_config", text_array(O::serialize(*opt_).dump()));
  a.emplace_back("training/seed", int64_scalar(train_cfg_.seed));
  a.emplace_back("training/dropout", NDArray::scalar(train_cfg_.dropout, DType::float64));
  a.emplace_back("training/epochs_done", int64_scalar(static_cast<std::uint64_t>(epochs_done_)));
  std::ostringstream rng;
  rng << shuffle_rng_;
  a.emplace_back("training/shuffle_rng", text_array(rng.str()));
  NDArray counters(Shape{static_cast<std::int64_t>(random_nodes_.size())}, DType::int64);
  for (std::size_t i = 0; i < random_nodes_.size(); ++i) {
    const std::uint64_t c = K::random_counter(random_nodes_[i]);
    std::memcpy(static_cast<char*>(counters.raw_data()) + i * sizeof c, &c, sizeof c);
  }
  a.emplace_back("training/dropout_counters", counters);
  a.emplace_back("training/history.csv", text_array(history_.to_csv()));
  save_npz(path, a);
}

void Classifier::load_checkpoint(const std::string& path) {
  const CheckpointReader ck(path);  // IOError if the file is not a readable .npz
  if (!ck.find("training/epochs_done"))
    ck.fail("not a " + spec_.program + " checkpoint (it has no 'training/epochs_done' entry)");
  const std::string optimizer = ck.text("training/optimizer");
  if (optimizer != train_cfg_.optimizer)
    ck.fail("it was written with --optimizer " + optimizer + ", this run uses --optimizer " +
            train_cfg_.optimizer + " (the optimizer state does not carry over)");
  const std::uint64_t seed = ck.int64("training/seed");
  if (seed != train_cfg_.seed)
    ck.fail("it was written with --seed " + std::to_string(seed) + ", this run uses --seed " +
            std::to_string(train_cfg_.seed) + " (resume with the same seed)");
  if (!ck.find("training/dropout"))
    ck.fail("it does not record its dropout rate (written by an older " + spec_.program +
            "), so --dropout " + fmt_number(train_cfg_.dropout) + " cannot be checked against it");
  const double dropout = ck.float64("training/dropout");
  if (dropout != train_cfg_.dropout)
    ck.fail("it was written with --dropout " + fmt_number(dropout) + ", this run uses --dropout " +
            fmt_number(train_cfg_.dropout) + " (resume with the same dropout)");
  const std::uint64_t epochs = ck.int64("training/epochs_done");
  train::History history;
  try {
    history = train::History::from_csv(ck.text("training/history.csv"));
  } catch (const ValueError& e) {
    ck.fail(std::string("bad 'training/history.csv': ") + e.what());
  }
  if (epochs > 1000000 || history.size() != epochs)
    ck.fail("'training/epochs_done' is " + std::to_string(epochs) + " but the history has " +
            std::to_string(history.size()) + " epochs");
  std::mt19937_64 rng;
  std::istringstream rng_text(ck.text("training/shuffle_rng"));
  rng_text >> rng;
  if (rng_text.fail()) ck.fail("'training/shuffle_rng' is not a std::mt19937_64 state");

  // Every array, shape- and dtype-checked against this model before anything is changed.
  std::vector<NDArray> values;
  std::vector<std::string> names;
  for (const auto& p : params_) {
    names.push_back(p.name() + ":0");
    values.push_back(K::get_value(p));
  }
  for (const auto& w : opt_->weights()) {
    names.push_back("optimizer/" + w.name() + ":0");
    values.push_back(K::get_value(w));
  }
  names.push_back("optimizer/lr:0");
  values.push_back(K::get_value(opt_->lr));
  names.push_back("training/dropout_counters");
  values.emplace_back(Shape{static_cast<std::int64_t>(random_nodes_.size())}, DType::int64);
  std::vector<std::pair<std::string, NDArray*>> targets;
  for (std::size_t i = 0; i < values.size(); ++i) targets.emplace_back(names[i], &values[i]);
  try {
    load_npz_into(path, targets);
  } catch (const ValueError& e) {
    ck.fail("it does not fit this model (" + spec_.description + ", dropout " +
            (random_nodes_.empty() ? "off" : "on") + ", optimizer " + train_cfg_.optimizer +
            "): " + e.what());
  }

  std::size_t k = 0;
  for (const auto& p : params_) K::set_value(p, values[k++]);
  std::vector<NDArray> ow;
  for (std::size_t i = 0; i < opt_->weights().size(); ++i) ow.push_back(values[k++]);
  opt_->set_weights(ow);
  const NDArray& lr = values[k++];
  if (!train_cfg_.lr) K::set_value(opt_->lr, lr);  // else the configured lr stays
  const NDArray& counters = values[k++];
  for (std::size_t i = 0; i < random_nodes_.size(); ++i) {
    std::uint64_t c = 0;
    std::memcpy(&c, static_cast<const char*>(counters.raw_data()) + i * sizeof c, sizeof c);
    K::set_random_counter(random_nodes_[i], c);
  }
  shuffle_rng_ = rng;
  epochs_done_ = static_cast<int>(epochs);
  history_ = std::move(history);
}

}  // namespace ktape::examples
