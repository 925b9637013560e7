/// \file
/// Keras optimizers (keras/optimizers.py, Keras 2.2.4), built only from K:: functions: gradients,
/// elementwise ops and update ops. An optimizer turns (loss, params) into update tensors for
/// K::function:
///
/// namespace K = ktape::backend;
/// ktape::optimizers::Adam opt({.lr = 1e-3});
/// auto train = K::function({x, y}, {loss}, opt.get_updates(loss, params));
///
/// Every update of a step is computed from the values the variables had when the call started,
/// then all are committed (K::function semantics), so `iterations` is read before its increment
/// exactly as Keras-on-Theano reads it (Keras-on-TF leaves that order unspecified).
///
/// The config API (get_config, from_config, serialize) speaks nlohmann::json. This header only
/// forward-declares it: include <nlohmann/json.hpp> where you build or read a config.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/ndarray.hpp"
#include "engine/tensor.hpp"

namespace ktape::optimizers {

/// Base of all optimizers (Keras's `Optimizer`). Not copyable: it owns K variables.
///
/// State (`weights()`, the list get_weights/set_weights use) always starts with `iterations`,
/// followed by the slots in Keras's order. This is the Keras 2.3.1 layout, which equals 2.2.4's
/// for SGD, Adam and Adamax; 2.2.4's RMSprop, Adagrad and Adadelta left out `iterations` and its
/// Nadam left out `m_schedule`, so their state could not be restored. set_weights accepts those
/// shorter 2.2.4 lists as 2.3.1 does (iterations = 0, m_schedule = 1).
///
/// Slots are K::zeros variables named "<param name>/<slot>" (e.g. "dense/kernel/m"); Keras 2.2.4
/// leaves them unnamed and 2.3.1 calls them "m_0", "v_0", ... by position.
class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Keras's get_updates: K::update_add(iterations, 1) first, then one update per slot and per
  /// parameter, in Keras's order. Each parameter's new value goes through its variable
  /// constraint (K::variable_constraint) when it has one. Creates fresh slots on every call
  /// (as Keras does) and makes them the optimizer's weights().
  std::vector<Tensor> get_updates(const Tensor& loss, const std::vector<Tensor>& params);

  /// K::gradients(loss, params), then global-norm clipping when clipnorm > 0 (the norm is
  /// sqrt(sum of sum(square(g))) over all gradients; every g becomes g * (clipnorm / norm) iff
  /// norm >= clipnorm), then K::clip(g, -clipvalue, clipvalue) when clipvalue > 0. A parameter
  /// the loss does not reach (a null gradient) is a ValueError with Keras's text, naming it.
  std::vector<Tensor> get_gradients(const Tensor& loss, const std::vector<Tensor>& params) const;

  /// A rewrite of the gradients between get_gradients and the update rule, for the
  /// get_updates calls that follow: ktape::distributed::distributed_optimizer installs one that
  /// averages them over processes (Horovod's DistributedOptimizer, which also sees the clipped
  /// gradients). It returns one tensor per parameter. An empty function removes it.
  using GradientTransform = std::function<std::vector<Tensor>(std::vector<Tensor> grads,
                                                              const std::vector<Tensor>& params)>;
  void set_gradient_transform(GradientTransform transform);

  /// The update tensors of the last get_updates call (Keras's `self.updates`).
  const std::vector<Tensor>& updates() const { return updates_; }
  /// The state variables (empty until get_updates has run, as in Keras).
  const std::vector<Tensor>& weights() const { return weights_; }
  std::vector<NDArray> get_weights() const;
  /// Values are cast to each variable's dtype. ValueError (Keras's messages) if the number of
  /// arrays or a shape does not match.
  void set_weights(const std::vector<NDArray>& weights);

  /// Keras's get_config: the hyperparameters under Keras 2.2.4's names ("lr", "decay", ...);
  /// variables are read with K::get_value, so a set_value shows. "clipnorm"/"clipvalue" appear
  /// only when they were given.
  virtual nlohmann::json get_config() const;
  /// "SGD", "RMSprop", "Adagrad", "Adadelta", "Adam", "Adamax" or "Nadam".
  virtual std::string class_name() const = 0;

  Tensor iterations;  ///< int64 scalar variable "iterations", +1 per step
  Tensor lr;          ///< floatx scalar variable "lr" (Keras 2.3's `learning_rate`)
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;

 protected:
  Optimizer(double lr, std::optional<double> clipnorm, std::optional<double> clipvalue);

  /// Appends the optimizer's slot and parameter updates to `updates` (which already holds the
  /// iterations update) and its state variables to `weights` (which already holds iterations).
  virtual void build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     std::vector<Tensor>& updates, std::vector<Tensor>& weights) = 0;
  /// Rewrites a Keras 2.2.4 weight list into this optimizer's layout (default: unchanged).
  virtual void upgrade_legacy_weights(std::vector<NDArray>& weights) const;

 private:
  std::vector<Tensor> updates_;
  std::vector<Tensor> weights_;
  GradientTransform gradient_transform_;
};

// ---- SGD ----------------------------------------------------------------------------------

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double decay = 0.0;  ///< lr * 1 / (1 + decay * iterations); built only if decay > 0 initially
  bool nesterov = false;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
};

/// Keras 2.2.4 SGD: v = momentum * m - lr * g; m <- v; p <- p + v, or with nesterov
/// p <- p + momentum * v - lr * g. The moments exist even when momentum is 0 (as in 2.2.4), so a
/// later K::set_value on `momentum` takes effect. weights(): [iterations] + moments.
class SGD final : public Optimizer {
 public:
  explicit SGD(const SGDOptions& options = {});
  /// The "config" part of Keras's JSON ({"lr": ..., "momentum": ...}); see from_config below.
  static std::unique_ptr<SGD> from_config(const nlohmann::json& config);
  std::string class_name() const override { return "SGD"; }
  nlohmann::json get_config() const override;

  Tensor momentum;  ///< floatx scalar variable
  Tensor decay;     ///< floatx scalar variable
  double initial_decay;
  bool nesterov;

 private:
  void build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
             std::vector<Tensor>& updates, std::vector<Tensor>& weights) override;
};

// ---- RMSprop, Adagrad, Adadelta ---------------------------------------------------------------

struct RMSpropOptions {
  double lr = 0.001;
  double rho = 0.9;
  std::optional<double> epsilon;  ///< nullopt: K::epsilon() when the optimizer is made
  double decay = 0.0;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
};

/// a_new = rho * a + (1 - rho) * g^2; a <- a_new; p <- p - lr * g / (sqrt(a_new) + epsilon).
/// Accumulators have the parameter's dtype. weights(): [iterations] + accumulators.
class RMSprop final : public Optimizer {
 public:
  explicit RMSprop(const RMSpropOptions& options = {});
  static std::unique_ptr<RMSprop> from_config(const nlohmann::json& config);
  std::string class_name() const override { return "RMSprop"; }
  nlohmann::json get_config() const override;

  Tensor rho;  ///< floatx scalar variable
  Tensor decay;
  double epsilon;
  double initial_decay;

 private:
  void build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
             std::vector<Tensor>& updates, std::vector<Tensor>& weights) override;
  void upgrade_legacy_weights(std::vector<NDArray>& weights) const override;
};

struct AdagradOptions {
  double lr = 0.01;
  std::optional<double> epsilon;
  double decay = 0.0;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
};

/// a_new = a + g^2 (accumulators start at 0, Keras 2.2.4); p <- p - lr * g / (sqrt(a_new) + eps).
/// weights(): [iterations] + accumulators.
class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(const AdagradOptions& options = {});
  static std::unique_ptr<Adagrad> from_config(const nlohmann::json& config);
  std::string class_name() const override { return "Adagrad"; }
  nlohmann::json get_config() const override;

  Tensor decay;
  double epsilon;
  double initial_decay;

 private:
  void build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
             std::vector<Tensor>& updates, std::vector<Tensor>& weights) override;
  void upgrade_legacy_weights(std::vector<NDArray>& weights) const override;
};

struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.95;
  std::optional<double> epsilon;
  double decay = 0.0;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
};

/// a_new = rho * a + (1 - rho) * g^2; u = g * sqrt(d + eps) / sqrt(a_new + eps) (the old d);
/// p <- p - lr * u; d <- rho * d + (1 - rho) * u^2. `rho` is a plain number here, as in Keras.
/// weights(): [iterations] + accumulators + delta_accumulators.
class Adadelta final : public Optimizer {
 public:
  explicit Adadelta(const AdadeltaOptions& options = {});
  static std::unique_ptr<Adadelta> from_config(const nlohmann::json& config);
  std::string class_name() const override { return "Adadelta"; }
  nlohmann::json get_config() const override;

  Tensor decay;
  double rho;
  double epsilon;
  double initial_decay;

 private:
  void build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
             std::vector<Tensor>& updates, std::vector<Tensor>& weights) override;
  void upgrade_legacy_weights(std::vector<NDArray>& weights) const override;
};

// ---- Adam, Adamax, Nadam ----------------------------------------------------------------------

struct AdamOptions {
  double lr = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  std::optional<double> epsilon;
  double decay = 0.0;
  bool amsgrad = false;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
};

/// t = iterations + 1; lr_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t);
/// m_t = beta_1 * m + (1 - beta_1) * g; v_t = beta_2 * v + (1 - beta_2) * g^2;
/// p <- p - lr_t * m_t / (sqrt(v_t) + eps) (eps outside the sqrt, not bias-corrected).
/// amsgrad: vhat_t = max(vhat, v_t) replaces v_t in the step. Slots have the parameter's dtype.
/// weights(): [iterations] + ms + vs + vhats (vhats are shape-(1,) dummies without amsgrad).
class Adam final : public Optimizer {
 public:
  explicit Adam(const AdamOptions& options = {});
  static std::unique_ptr<Adam> from_config(const nlohmann::json& config);
  std::string class_name() const override { return "Adam"; }
  nlohmann::json get_config() const override;

  Tensor beta_1;  ///< floatx scalar variables
  Tensor beta_2;
  Tensor decay;
  double epsilon;
  double initial_decay;
  bool amsgrad;

 private:
  void build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
             std::vector<Tensor>& updates, std::vector<Tensor>& weights) override;
};

struct AdamaxOptions {
  double lr = 0.002;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  std::optional<double> epsilon;
  double decay = 0.0;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
};

/// lr_t = lr / (1 - beta_1^t); m_t = beta_1 * m + (1 - beta_1) * g;
/// u_t = max(beta_2 * u, |g|); p <- p - lr_t * m_t / (u_t + eps). weights(): [iterations] + ms +
/// us.
class Adamax final : public Optimizer {
 public:
  explicit Adamax(const AdamaxOptions& options = {});
  static std::unique_ptr<Adamax> from_config(const nlohmann::json& config);
  std::string class_name() const override { return "Adamax"; }
  nlohmann::json get_config() const override;

  Tensor beta_1;
  Tensor beta_2;
  Tensor decay;
  double epsilon;
  double initial_decay;

 private:
  void build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
             std::vector<Tensor>& updates, std::vector<Tensor>& weights) override;
};

struct NadamOptions {
  double lr = 0.002;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  std::optional<double> epsilon;
  double schedule_decay = 0.004;
  std::optional<double> clipnorm;
  std::optional<double> clipvalue;
};

/// Keras 2.2.4 Nadam (no lr decay): with t = iterations + 1,
/// mc_t = beta_1 * (1 - 0.5 * 0.96^(t * schedule_decay)), mc_t1 the same at t + 1,
/// m_schedule <- m_schedule * mc_t; g' = g / (1 - m_schedule * mc_t);
/// m_t = beta_1 * m + (1 - beta_1) * g, m' = m_t / (1 - m_schedule * mc_t * mc_t1);
/// v_t = beta_2 * v + (1 - beta_2) * g^2, v' = v_t / (1 - beta_2^t);
/// p <- p - lr * ((1 - mc_t) * g' + mc_t1 * m') / (sqrt(v') + eps).
/// weights(): [iterations, m_schedule] + ms + vs (Keras 2.3.1's layout).
class Nadam final : public Optimizer {
 public:
  explicit Nadam(const NadamOptions& options = {});
  static std::unique_ptr<Nadam> from_config(const nlohmann::json& config);
  std::string class_name() const override { return "Nadam"; }
  nlohmann::json get_config() const override;

  Tensor beta_1;
  Tensor beta_2;
  Tensor m_schedule;  ///< floatx scalar variable, starts at 1
  double epsilon;
  double schedule_decay;

 private:
  void build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
             std::vector<Tensor>& updates, std::vector<Tensor>& weights) override;
  void upgrade_legacy_weights(std::vector<NDArray>& weights) const override;
};

// ---- serialization (keras.optimizers.serialize / deserialize / get) ------------------------

/// {"class_name": "Adam", "config": {...}} as Keras writes it in model JSON.
nlohmann::json serialize(const Optimizer& optimizer);

/// Builds an optimizer from {"class_name": ..., "config": {...}} (a JSON string value is parsed
/// first, so from_config(R"({"class_name": "SGD", "config": {}})") works). As in Keras:
/// - the class name is case-insensitive ("adam", "Adam"); an unknown one is a ValueError that
///   lists the valid names; "TFOptimizer" is a NotImplementedError;
/// - missing "class_name" or "config" is a ValueError ("Improper config format");
/// - config keys are the constructor's keyword arguments: 2.2.4's names, plus Keras 2.3's
///   "learning_rate" ("lr" wins when both are given), plus clipnorm/clipvalue. Any other key is a
///   TypeError("Unexpected keyword argument passed to optimizer: <key>"), as Keras raises it;
/// - a null epsilon means K::epsilon(); a null clipnorm/clipvalue means not set.
std::unique_ptr<Optimizer> from_config(const nlohmann::json& j);
std::unique_ptr<Optimizer> deserialize(const nlohmann::json& j);  ///< same as from_config
/// keras.optimizers.get("adam"): the named optimizer with its default configuration.
std::unique_ptr<Optimizer> get(const std::string& identifier);

}  // namespace ktape::optimizers
