// The Keras optimizers: the Optimizer base (gradients with clipping, state, config), the update
// rules of SGD, RMSprop, Adagrad, Adadelta, Adam, Adamax and Nadam, and serialization. Every
// rule is written with K:: functions only, in the order Keras 2.2.4's keras/optimizers.py uses.
#include "optim/optimizers.hpp"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "ops/control.hpp"
#include "ops/core.hpp"
#include "ops/elementwise.hpp"
#include "ops/reductions.hpp"

namespace ktape::optimizers {

namespace K = ktape::backend;
using json = nlohmann::json;

namespace {

// ---- helpers: the pieces every Keras update rule repeats ------------------------------------

// A floatx scalar variable holding a hyperparameter (Keras: K.variable(value, name=...)).
Tensor hyper(double value, const char* name) { return K::variable(value, {.name = name}); }

// float(K.get_value(v)), for get_config.
double value_of(const Tensor& v) { return K::get_value(v).item(0); }

// epsilon=None -> K.epsilon(), read when the optimizer is made.
double resolve_epsilon(const std::optional<double>& epsilon) {
  return epsilon ? *epsilon : K::epsilon();
}

// K.zeros(K.int_shape(p)) (floatx), or with dtype=K.dtype(p) when param_dtype; named
// "<p's name>/<suffix>".
Tensor slot(const Tensor& p, const char* suffix, bool param_dtype) {
  return K::zeros(K::int_shape(p),
                  {.dtype = param_dtype ? K::dtype(p) : "", .name = p.name() + "/" + suffix});
}

// Keras: `if getattr(p, 'constraint', None) is not None: new_p = p.constraint(new_p)`.
Tensor constrained(const Tensor& p, const Tensor& new_p) {
  const auto& c = K::variable_constraint(p);
  return c ? c(new_p) : new_p;
}

// lr * (1 / (1 + decay * cast(iterations, dtype(decay)))) when the initial decay was > 0.
Tensor decayed_lr(const Tensor& lr, const Tensor& decay, double initial_decay,
                  const Tensor& iterations) {
  if (!(initial_decay > 0)) return lr;
  return lr * (1.0 / (1.0 + decay * K::cast(iterations, K::dtype(decay))));
}

// t = cast(iterations, floatx) + 1: the step being taken (iterations is read before its +1).
Tensor step_number(const Tensor& iterations) { return K::cast(iterations, K::floatx()) + 1.0; }

// Keras's K.pow(base, t) with a tensor exponent (tf.pow). K::pow takes a double exponent, so
// this is exp(t * log(base)) evaluated in float64 and cast back to base's dtype: within an ulp
// or two of pow in float64, and pow correctly rounded in float32 but for rare ties.
// base = 0 gives exp(-inf) = 0 for t > 0, as pow does.
Tensor power(const Tensor& base, const Tensor& exponent) {
  const std::string dt = K::dtype(base);
  const auto f64 = [](const Tensor& x) {
    return K::dtype(x) == "float64" ? x : K::cast(x, "float64");
  };
  const Tensor r = K::exp(f64(exponent) * K::log(f64(base)));
  return dt == "float64" ? r : K::cast(r, dt);
}

// Keras 2.3.1's upgrade of a 2.2.4 RMSprop/Adagrad/Adadelta weight list: iterations = 0 first.
void prepend_iterations(std::vector<NDArray>& weights) {
  weights.insert(weights.begin(), NDArray::scalar(0.0, DType::int64));
}

// Reads a Keras optimizer config ({"lr": 0.01, ...}) as the optimizer's Python constructor
// reads its keyword arguments. Besides `keys`, every optimizer accepts "lr", "learning_rate"
// (Keras 2.3), "clipnorm" and "clipvalue"; any other key is Keras's TypeError.
class ConfigReader {
 public:
  ConfigReader(const json& config, const char* class_name, std::initializer_list<const char*> keys);
  double number(const char* key, double fallback) const;
  // Missing or null -> nullopt.
  std::optional<double> optional_number(const char* key) const;
  bool boolean(const char* key, bool fallback) const;
  // "lr", else "learning_rate", else fallback.
  double lr(double fallback) const;

 private:
  const json* find(const char* key) const;
  double as_number(const char* key, const json& v) const;

  const json& config_;
  std::string class_name_;
};

// ---- ConfigReader ---------------------------------------------------------------------------

ConfigReader::ConfigReader(const json& config, const char* class_name,
                           std::initializer_list<const char*> keys)
    : config_(config), class_name_(class_name) {
  if (!config_.is_object())
    throw TypeError(class_name_ + ".from_config: the config must be a JSON object, got " +
                    config_.dump());
  for (auto it = config_.begin(); it != config_.end(); ++it) {
    const std::string& k = it.key();
    const bool known = k == "lr" || k == "learning_rate" || k == "clipnorm" || k == "clipvalue" ||
                       std::any_of(keys.begin(), keys.end(), [&](const char* a) { return k == a; });
    if (!known) throw TypeError("Unexpected keyword argument passed to optimizer: " + k);
  }
}

const json* ConfigReader::find(const char* key) const {
  auto it = config_.find(key);
  return it == config_.end() ? nullptr : &*it;
}

double ConfigReader::as_number(const char* key, const json& v) const {
  if (!v.is_number())
    throw TypeError(class_name_ + ".from_config: '" + key + "' must be a number, got " + v.dump());
  return v.get<double>();
}

double ConfigReader::number(const char* key, double fallback) const {
  const json* v = find(key);
  return v ? as_number(key, *v) : fallback;
}

std::optional<double> ConfigReader::optional_number(const char* key) const {
  const json* v = find(key);
  if (!v || v->is_null()) return std::nullopt;
  return as_number(key, *v);
}

bool ConfigReader::boolean(const char* key, bool fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number()) return v->get<double>() != 0.0;
  throw TypeError(class_name_ + ".from_config: '" + key + "' must be a boolean, got " + v->dump());
}

double ConfigReader::lr(double fallback) const {
  // Keras 2.3: learning_rate = kwargs.pop('lr', learning_rate).
  if (find("lr")) return number("lr", fallback);
  return number("learning_rate", fallback);
}

}  // namespace

// ---- Optimizer ------------------------------------------------------------------------------

Optimizer::Optimizer(double lr_value, std::optional<double> clipnorm_value,
                     std::optional<double> clipvalue_value)
    : iterations(K::variable(0.0, {.dtype = "int64", .name = "iterations"})),
      lr(K::variable(lr_value, {.name = "lr"})),
      clipnorm(clipnorm_value),
      clipvalue(clipvalue_value) {}

Optimizer::~Optimizer() = default;

std::vector<Tensor> Optimizer::get_gradients(const Tensor& loss,
                                             const std::vector<Tensor>& params) const {
  std::vector<Tensor> grads = K::gradients(loss, params);
  std::string missing;
  for (std::size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].defined()) missing += (missing.empty() ? "'" : ", '") + params[i].name() + "'";
  if (!missing.empty())
    throw ValueError(
        "An operation has `None` for gradient. Please make sure that all of your ops have a "
        "gradient defined (i.e. are differentiable). Common ops without gradient: K.argmax, "
        "K.round, K.eval. (No gradient reaches parameter(s) " +
        missing + ".)");
  if (clipnorm && *clipnorm > 0 && !grads.empty()) {
    const double c = *clipnorm;
    Tensor total;
    for (const Tensor& g : grads) {
      const Tensor s = K::sum(K::square(g));
      total = total.defined() ? total + s : s;
    }
    const Tensor norm = K::sqrt(total);
    // Keras on TF: tf.cond(norm >= c, scalar_mul(c / norm, g), g).
    for (Tensor& g : grads) g = K::switch_(K::greater_equal(norm, c), g * (c / norm), g);
  }
  if (clipvalue && *clipvalue > 0)
    for (Tensor& g : grads) g = K::clip(g, -*clipvalue, *clipvalue);
  return grads;
}

std::vector<Tensor> Optimizer::get_updates(const Tensor& loss, const std::vector<Tensor>& params) {
  std::vector<Tensor> grads = get_gradients(loss, params);
  if (gradient_transform_) {
    grads = gradient_transform_(std::move(grads), params);
    if (grads.size() != params.size())
      throw ValueError("Optimizer::get_updates: the gradient transform returned " +
                       std::to_string(grads.size()) + " gradients for " +
                       std::to_string(params.size()) + " parameters");
  }
  std::vector<Tensor> updates{K::update_add(iterations, K::constant(1.0, {.dtype = "int64"}))};
  std::vector<Tensor> weights{iterations};
  build(params, grads, updates, weights);
  updates_ = std::move(updates);
  weights_ = std::move(weights);
  return updates_;
}

void Optimizer::set_gradient_transform(GradientTransform transform) {
  gradient_transform_ = std::move(transform);
}

std::vector<NDArray> Optimizer::get_weights() const { return K::batch_get_value(weights_); }

void Optimizer::set_weights(const std::vector<NDArray>& weights) {
  std::vector<NDArray> w = weights;
  if (w.size() + 1 == weights_.size()) upgrade_legacy_weights(w);
  if (w.size() != weights_.size())
    throw ValueError("Length of the specified weight list (" + std::to_string(w.size()) +
                     ") does not match the number of weights of the optimizer (" +
                     std::to_string(weights_.size()) + ")");
  std::vector<std::pair<Tensor, NDArray>> tuples;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const Shape have = weights_[i].shape();
    const Shape given = w[i].defined() ? w[i].shape() : Shape{};
    if (!w[i].defined() || have != given)
      throw ValueError("Optimizer weight shape " + have.str() +
                       " not compatible with provided weight shape " +
                       (w[i].defined() ? given.str() : std::string("(empty)")));
    tuples.emplace_back(weights_[i], w[i]);
  }
  K::batch_set_value(tuples);
}

void Optimizer::upgrade_legacy_weights(std::vector<NDArray>&) const {}

json Optimizer::get_config() const {
  json c = json::object();
  if (clipnorm) c["clipnorm"] = *clipnorm;
  if (clipvalue) c["clipvalue"] = *clipvalue;
  return c;
}

// ---- SGD ------------------------------------------------------------------------------------

SGD::SGD(const SGDOptions& o)
    : Optimizer(o.lr, o.clipnorm, o.clipvalue),
      momentum(hyper(o.momentum, "momentum")),
      decay(hyper(o.decay, "decay")),
      initial_decay(o.decay),
      nesterov(o.nesterov) {}

void SGD::build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                std::vector<Tensor>& updates, std::vector<Tensor>& weights) {
  const Tensor lr_t = decayed_lr(lr, decay, initial_decay, iterations);
  std::vector<Tensor> moments;
  for (const Tensor& p : params) moments.push_back(slot(p, "moment", false));
  weights.insert(weights.end(), moments.begin(), moments.end());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor &p = params[i], &g = grads[i], &m = moments[i];
    const Tensor v = momentum * m - lr_t * g;  // velocity
    updates.push_back(K::update(m, v));
    const Tensor new_p = nesterov ? p + momentum * v - lr_t * g : p + v;
    updates.push_back(K::update(p, constrained(p, new_p)));
  }
}

json SGD::get_config() const {
  json c = Optimizer::get_config();
  c["lr"] = value_of(lr);
  c["momentum"] = value_of(momentum);
  c["decay"] = value_of(decay);
  c["nesterov"] = nesterov;
  return c;
}

std::unique_ptr<SGD> SGD::from_config(const json& config) {
  const ConfigReader r(config, "SGD", {"momentum", "decay", "nesterov"});
  SGDOptions o;
  o.lr = r.lr(o.lr);
  o.momentum = r.number("momentum", o.momentum);
  o.decay = r.number("decay", o.decay);
  o.nesterov = r.boolean("nesterov", o.nesterov);
  o.clipnorm = r.optional_number("clipnorm");
  o.clipvalue = r.optional_number("clipvalue");
  return std::make_unique<SGD>(o);
}

// ---- RMSprop --------------------------------------------------------------------------------

RMSprop::RMSprop(const RMSpropOptions& o)
    : Optimizer(o.lr, o.clipnorm, o.clipvalue),
      rho(hyper(o.rho, "rho")),
      decay(hyper(o.decay, "decay")),
      epsilon(resolve_epsilon(o.epsilon)),
      initial_decay(o.decay) {}

void RMSprop::build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    std::vector<Tensor>& updates, std::vector<Tensor>& weights) {
  std::vector<Tensor> accumulators;
  for (const Tensor& p : params) accumulators.push_back(slot(p, "accumulator", true));
  weights.insert(weights.end(), accumulators.begin(), accumulators.end());
  const Tensor lr_t = decayed_lr(lr, decay, initial_decay, iterations);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor &p = params[i], &g = grads[i], &a = accumulators[i];
    const Tensor new_a = rho * a + (1.0 - rho) * K::square(g);
    updates.push_back(K::update(a, new_a));
    const Tensor new_p = p - lr_t * g / (K::sqrt(new_a) + epsilon);
    updates.push_back(K::update(p, constrained(p, new_p)));
  }
}

void RMSprop::upgrade_legacy_weights(std::vector<NDArray>& weights) const {
  prepend_iterations(weights);
}

json RMSprop::get_config() const {
  json c = Optimizer::get_config();
  c["lr"] = value_of(lr);
  c["rho"] = value_of(rho);
  c["decay"] = value_of(decay);
  c["epsilon"] = epsilon;
  return c;
}

std::unique_ptr<RMSprop> RMSprop::from_config(const json& config) {
  const ConfigReader r(config, "RMSprop", {"rho", "epsilon", "decay"});
  RMSpropOptions o;
  o.lr = r.lr(o.lr);
  o.rho = r.number("rho", o.rho);
  o.epsilon = r.optional_number("epsilon");
  o.decay = r.number("decay", o.decay);
  o.clipnorm = r.optional_number("clipnorm");
  o.clipvalue = r.optional_number("clipvalue");
  return std::make_unique<RMSprop>(o);
}

// ---- Adagrad --------------------------------------------------------------------------------

Adagrad::Adagrad(const AdagradOptions& o)
    : Optimizer(o.lr, o.clipnorm, o.clipvalue),
      decay(hyper(o.decay, "decay")),
      epsilon(resolve_epsilon(o.epsilon)),
      initial_decay(o.decay) {}

void Adagrad::build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    std::vector<Tensor>& updates, std::vector<Tensor>& weights) {
  std::vector<Tensor> accumulators;
  for (const Tensor& p : params) accumulators.push_back(slot(p, "accumulator", false));
  weights.insert(weights.end(), accumulators.begin(), accumulators.end());
  const Tensor lr_t = decayed_lr(lr, decay, initial_decay, iterations);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor &p = params[i], &g = grads[i], &a = accumulators[i];
    const Tensor new_a = a + K::square(g);
    updates.push_back(K::update(a, new_a));
    const Tensor new_p = p - lr_t * g / (K::sqrt(new_a) + epsilon);
    updates.push_back(K::update(p, constrained(p, new_p)));
  }
}

void Adagrad::upgrade_legacy_weights(std::vector<NDArray>& weights) const {
  prepend_iterations(weights);
}

json Adagrad::get_config() const {
  json c = Optimizer::get_config();
  c["lr"] = value_of(lr);
  c["decay"] = value_of(decay);
  c["epsilon"] = epsilon;
  return c;
}

std::unique_ptr<Adagrad> Adagrad::from_config(const json& config) {
  const ConfigReader r(config, "Adagrad", {"epsilon", "decay"});
  AdagradOptions o;
  o.lr = r.lr(o.lr);
  o.epsilon = r.optional_number("epsilon");
  o.decay = r.number("decay", o.decay);
  o.clipnorm = r.optional_number("clipnorm");
  o.clipvalue = r.optional_number("clipvalue");
  return std::make_unique<Adagrad>(o);
}

// ---- Adadelta -------------------------------------------------------------------------------

Adadelta::Adadelta(const AdadeltaOptions& o)
    : Optimizer(o.lr, o.clipnorm, o.clipvalue),
      decay(hyper(o.decay, "decay")),
      rho(o.rho),
      epsilon(resolve_epsilon(o.epsilon)),
      initial_decay(o.decay) {}

void Adadelta::build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     std::vector<Tensor>& updates, std::vector<Tensor>& weights) {
  std::vector<Tensor> accumulators, delta_accumulators;
  for (const Tensor& p : params) accumulators.push_back(slot(p, "accumulator", false));
  for (const Tensor& p : params) delta_accumulators.push_back(slot(p, "delta_accumulator", false));
  weights.insert(weights.end(), accumulators.begin(), accumulators.end());
  weights.insert(weights.end(), delta_accumulators.begin(), delta_accumulators.end());
  const Tensor lr_t = decayed_lr(lr, decay, initial_decay, iterations);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor &p = params[i], &g = grads[i], &a = accumulators[i], &d_a = delta_accumulators[i];
    const Tensor new_a = rho * a + (1.0 - rho) * K::square(g);
    updates.push_back(K::update(a, new_a));
    // The new accumulator and the *old* delta accumulator.
    const Tensor update = g * K::sqrt(d_a + epsilon) / K::sqrt(new_a + epsilon);
    const Tensor new_p = p - lr_t * update;
    updates.push_back(K::update(p, constrained(p, new_p)));
    const Tensor new_d_a = rho * d_a + (1.0 - rho) * K::square(update);
    updates.push_back(K::update(d_a, new_d_a));
  }
}

void Adadelta::upgrade_legacy_weights(std::vector<NDArray>& weights) const {
  prepend_iterations(weights);
}

json Adadelta::get_config() const {
  json c = Optimizer::get_config();
  c["lr"] = value_of(lr);
  c["rho"] = rho;
  c["decay"] = value_of(decay);
  c["epsilon"] = epsilon;
  return c;
}

std::unique_ptr<Adadelta> Adadelta::from_config(const json& config) {
  const ConfigReader r(config, "Adadelta", {"rho", "epsilon", "decay"});
  AdadeltaOptions o;
  o.lr = r.lr(o.lr);
  o.rho = r.number("rho", o.rho);
  o.epsilon = r.optional_number("epsilon");
  o.decay = r.number("decay", o.decay);
  o.clipnorm = r.optional_number("clipnorm");
  o.clipvalue = r.optional_number("clipvalue");
  return std::make_unique<Adadelta>(o);
}

// ---- Adam -----------------------------------------------------------------------------------

Adam::Adam(const AdamOptions& o)
    : Optimizer(o.lr, o.clipnorm, o.clipvalue),
      beta_1(hyper(o.beta_1, "beta_1")),
      beta_2(hyper(o.beta_2, "beta_2")),
      decay(hyper(o.decay, "decay")),
      epsilon(resolve_epsilon(o.epsilon)),
      initial_decay(o.decay),
      amsgrad(o.amsgrad) {}

void Adam::build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 std::vector<Tensor>& updates, std::vector<Tensor>& weights) {
  const Tensor lr_d = decayed_lr(lr, decay, initial_decay, iterations);
  const Tensor t = step_number(iterations);
  const Tensor lr_t = lr_d * (K::sqrt(1.0 - power(beta_2, t)) / (1.0 - power(beta_1, t)));
  std::vector<Tensor> ms, vs, vhats;
  for (const Tensor& p : params) ms.push_back(slot(p, "m", true));
  for (const Tensor& p : params) vs.push_back(slot(p, "v", true));
  for (const Tensor& p : params)
    vhats.push_back(amsgrad ? slot(p, "vhat", true)
                            : K::zeros({1}, {.name = p.name() + "/vhat"}));  // unused dummy
  for (const auto* list : {&ms, &vs, &vhats})
    weights.insert(weights.end(), list->begin(), list->end());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor &p = params[i], &g = grads[i], &m = ms[i], &v = vs[i], &vhat = vhats[i];
    const Tensor m_t = (beta_1 * m) + (1.0 - beta_1) * g;
    const Tensor v_t = (beta_2 * v) + (1.0 - beta_2) * K::square(g);
    Tensor p_t;
    if (amsgrad) {
      const Tensor vhat_t = K::maximum(vhat, v_t);
      p_t = p - lr_t * m_t / (K::sqrt(vhat_t) + epsilon);
      updates.push_back(K::update(vhat, vhat_t));
    } else {
      p_t = p - lr_t * m_t / (K::sqrt(v_t) + epsilon);
    }
    updates.push_back(K::update(m, m_t));
    updates.push_back(K::update(v, v_t));
    updates.push_back(K::update(p, constrained(p, p_t)));
  }
}

json Adam::get_config() const {
  json c = Optimizer::get_config();
  c["lr"] = value_of(lr);
  c["beta_1"] = value_of(beta_1);
  c["beta_2"] = value_of(beta_2);
  c["decay"] = value_of(decay);
  c["epsilon"] = epsilon;
  c["amsgrad"] = amsgrad;
  return c;
}

std::unique_ptr<Adam> Adam::from_config(const json& config) {
  const ConfigReader r(config, "Adam", {"beta_1", "beta_2", "epsilon", "decay", "amsgrad"});
  AdamOptions o;
  o.lr = r.lr(o.lr);
  o.beta_1 = r.number("beta_1", o.beta_1);
  o.beta_2 = r.number("beta_2", o.beta_2);
  o.epsilon = r.optional_number("epsilon");
  o.decay = r.number("decay", o.decay);
  o.amsgrad = r.boolean("amsgrad", o.amsgrad);
  o.clipnorm = r.optional_number("clipnorm");
  o.clipvalue = r.optional_number("clipvalue");
  return std::make_unique<Adam>(o);
}

// ---- Adamax ---------------------------------------------------------------------------------

Adamax::Adamax(const AdamaxOptions& o)
    : Optimizer(o.lr, o.clipnorm, o.clipvalue),
      beta_1(hyper(o.beta_1, "beta_1")),
      beta_2(hyper(o.beta_2, "beta_2")),
      decay(hyper(o.decay, "decay")),
      epsilon(resolve_epsilon(o.epsilon)),
      initial_decay(o.decay) {}

void Adamax::build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                   std::vector<Tensor>& updates, std::vector<Tensor>& weights) {
  const Tensor lr_d = decayed_lr(lr, decay, initial_decay, iterations);
  const Tensor t = step_number(iterations);
  const Tensor lr_t = lr_d / (1.0 - power(beta_1, t));
  std::vector<Tensor> ms, us;
  for (const Tensor& p : params) ms.push_back(slot(p, "m", false));
  for (const Tensor& p : params) us.push_back(slot(p, "u", false));
  weights.insert(weights.end(), ms.begin(), ms.end());
  weights.insert(weights.end(), us.begin(), us.end());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor &p = params[i], &g = grads[i], &m = ms[i], &u = us[i];
    const Tensor m_t = (beta_1 * m) + (1.0 - beta_1) * g;
    const Tensor u_t = K::maximum(beta_2 * u, K::abs(g));
    const Tensor p_t = p - lr_t * m_t / (u_t + epsilon);
    updates.push_back(K::update(m, m_t));
    updates.push_back(K::update(u, u_t));
    updates.push_back(K::update(p, constrained(p, p_t)));
  }
}

json Adamax::get_config() const {
  json c = Optimizer::get_config();
  c["lr"] = value_of(lr);
  c["beta_1"] = value_of(beta_1);
  c["beta_2"] = value_of(beta_2);
  c["decay"] = value_of(decay);
  c["epsilon"] = epsilon;
  return c;
}

std::unique_ptr<Adamax> Adamax::from_config(const json& config) {
  const ConfigReader r(config, "Adamax", {"beta_1", "beta_2", "epsilon", "decay"});
  AdamaxOptions o;
  o.lr = r.lr(o.lr);
  o.beta_1 = r.number("beta_1", o.beta_1);
  o.beta_2 = r.number("beta_2", o.beta_2);
  o.epsilon = r.optional_number("epsilon");
  o.decay = r.number("decay", o.decay);
  o.clipnorm = r.optional_number("clipnorm");
  o.clipvalue = r.optional_number("clipvalue");
  return std::make_unique<Adamax>(o);
}

// ---- Nadam ----------------------------------------------------------------------------------

Nadam::Nadam(const NadamOptions& o)
    : Optimizer(o.lr, o.clipnorm, o.clipvalue),
      beta_1(hyper(o.beta_1, "beta_1")),
      beta_2(hyper(o.beta_2, "beta_2")),
      m_schedule(hyper(1.0, "m_schedule")),
      epsilon(resolve_epsilon(o.epsilon)),
      schedule_decay(o.schedule_decay) {}

void Nadam::build(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  std::vector<Tensor>& updates, std::vector<Tensor>& weights) {
  const Tensor t = step_number(iterations);
  // The warming momentum schedule of Dozat's report.
  const Tensor c096 = K::constant(0.96);  // K.cast_to_floatx(0.96)
  const Tensor mc_t = beta_1 * (1.0 - 0.5 * power(c096, t * schedule_decay));
  const Tensor mc_t1 = beta_1 * (1.0 - 0.5 * power(c096, (t + 1.0) * schedule_decay));
  const Tensor m_schedule_new = m_schedule * mc_t;
  const Tensor m_schedule_next = m_schedule * mc_t * mc_t1;
  updates.push_back(K::update(m_schedule, m_schedule_new));
  std::vector<Tensor> ms, vs;
  for (const Tensor& p : params) ms.push_back(slot(p, "m", false));
  for (const Tensor& p : params) vs.push_back(slot(p, "v", false));
  weights.push_back(m_schedule);
  weights.insert(weights.end(), ms.begin(), ms.end());
  weights.insert(weights.end(), vs.begin(), vs.end());
  const Tensor v_correction = 1.0 - power(beta_2, t);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor &p = params[i], &g = grads[i], &m = ms[i], &v = vs[i];
    const Tensor g_prime = g / (1.0 - m_schedule_new);
    const Tensor m_t = beta_1 * m + (1.0 - beta_1) * g;
    const Tensor m_t_prime = m_t / (1.0 - m_schedule_next);
    const Tensor v_t = beta_2 * v + (1.0 - beta_2) * K::square(g);
    const Tensor v_t_prime = v_t / v_correction;
    const Tensor m_t_bar = (1.0 - mc_t) * g_prime + mc_t1 * m_t_prime;
    updates.push_back(K::update(m, m_t));
    updates.push_back(K::update(v, v_t));
    const Tensor p_t = p - lr * m_t_bar / (K::sqrt(v_t_prime) + epsilon);
    updates.push_back(K::update(p, constrained(p, p_t)));
  }
}

void Nadam::upgrade_legacy_weights(std::vector<NDArray>& weights) const {
  // Keras 2.3.1: a 2.2.4 list lacks m_schedule; it restarts at 1.
  if (!weights.empty())
    weights.insert(weights.begin() + 1, NDArray::scalar(1.0, m_schedule.dtype()));
}

json Nadam::get_config() const {
  json c = Optimizer::get_config();
  c["lr"] = value_of(lr);
  c["beta_1"] = value_of(beta_1);
  c["beta_2"] = value_of(beta_2);
  c["epsilon"] = epsilon;
  c["schedule_decay"] = schedule_decay;
  return c;
}

std::unique_ptr<Nadam> Nadam::from_config(const json& config) {
  const ConfigReader r(config, "Nadam", {"beta_1", "beta_2", "epsilon", "schedule_decay"});
  NadamOptions o;
  o.lr = r.lr(o.lr);
  o.beta_1 = r.number("beta_1", o.beta_1);
  o.beta_2 = r.number("beta_2", o.beta_2);
  o.epsilon = r.optional_number("epsilon");
  o.schedule_decay = r.number("schedule_decay", o.schedule_decay);
  o.clipnorm = r.optional_number("clipnorm");
  o.clipvalue = r.optional_number("clipvalue");
  return std::make_unique<Nadam>(o);
}

// ---- serialization --------------------------------------------------------------------------

namespace {

using Factory = std::unique_ptr<Optimizer> (*)(const json&);

template <class T>
std::unique_ptr<Optimizer> make(const json& config) {
  return T::from_config(config);
}

struct Entry {
  const char* name;
  Factory factory;
};

constexpr Entry kRegistry[] = {
    {"SGD", &make<SGD>},           {"RMSprop", &make<RMSprop>}, {"Adagrad", &make<Adagrad>},
    {"Adadelta", &make<Adadelta>}, {"Adam", &make<Adam>},       {"Adamax", &make<Adamax>},
    {"Nadam", &make<Nadam>},
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

json serialize(const Optimizer& optimizer) {
  return json{{"class_name", optimizer.class_name()}, {"config", optimizer.get_config()}};
}

std::unique_ptr<Optimizer> from_config(const json& j) {
  if (j.is_string()) {
    json parsed;
    try {
      parsed = json::parse(j.get<std::string>());
    } catch (const json::exception& e) {  // a syntax error, a number out of range, ...
      throw ValueError(std::string("optimizers::from_config: invalid JSON: ") + e.what());
    }
    return from_config(parsed);
  }
  if (!j.is_object() || !j.contains("class_name") || !j.contains("config"))
    throw ValueError("Improper config format: " + j.dump());
  if (!j["class_name"].is_string())
    throw ValueError("Improper config format: class_name must be a string, got " +
                     j["class_name"].dump());
  const std::string name = j["class_name"].get<std::string>();
  const std::string key = lower(name);
  for (const Entry& e : kRegistry)
    if (lower(e.name) == key) return e.factory(j["config"]);
  if (key == "tfoptimizer")
    throw NotImplementedError(
        "TFOptimizer wraps a TensorFlow optimizer and cannot be built from a config");
  std::string valid;
  for (const Entry& e : kRegistry) valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  throw ValueError("Unknown optimizer: " + name +
                   ". Valid optimizers (case-insensitive): " + valid);
}

std::unique_ptr<Optimizer> deserialize(const json& j) { return from_config(j); }

std::unique_ptr<Optimizer> get(const std::string& identifier) {
  return from_config(json{{"class_name", identifier}, {"config", json::object()}});
}

}  // namespace ktape::optimizers
