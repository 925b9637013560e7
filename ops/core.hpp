/// \file
/// K:: core: configuration, variables, constants, placeholders, introspection, value access,
/// tensor creation, casts and random tensors. Keras 2.2.4/2.3 semantics on TensorFlow unless a
/// comment says otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/function.hpp"
#include "engine/ndarray.hpp"
#include "engine/tensor.hpp"

namespace ktape::backend {

inline constexpr std::int64_t None = ktape::None;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;

// ---- configuration (keras.json, spec §1) --------------------------------------------------
std::string backend();  ///< the active backend's name: "cpu", "reference" or a plugin path
double epsilon();
void set_epsilon(double e);
std::string floatx();
void set_floatx(const std::string& floatx);
NDArray cast_to_floatx(const NDArray& x);
std::string image_data_format();
void set_image_data_format(const std::string& data_format);
std::string normalize_data_format(const std::optional<std::string>& value = std::nullopt);
std::string image_dim_ordering();
void set_image_dim_ordering(const std::string& dim_ordering);

// ---- bookkeeping ----------------------------------------------------------------------------
std::int64_t get_uid(const std::string& prefix = "");  // per-prefix counter starting at 1
void reset_uids();
/// Resets uids, the learning phase (dynamic again) and the tape's hash-cons table. Existing
/// tensors stay valid.
void clear_session();
/// Kept for API parity: ktape variables are always initialised at creation, so this only
/// records the flag (Keras-on-TF uses it to skip its lazy initialiser).
void manual_variable_initialization(bool value);
/// Seeds the generator that picks a seed for random ops built with seed = nullopt (Keras draws
/// it from numpy's global RNG at graph-construction time). Unseeded, it starts from a fixed 0.
void set_random_seed(std::uint64_t seed);

// ---- variables, constants, placeholders ----------------------------------------------------
struct VariableOptions {
  std::string dtype;  ///< "" = floatx()
  std::string name;
  std::function<Tensor(const Tensor&)> constraint;  ///< applied by optimizers after an update
};
Tensor variable(const NDArray& value, const VariableOptions& options = {});
Tensor variable(double value, const VariableOptions& options = {});

struct ConstantOptions {
  std::string dtype;           ///< "" = floatx()
  std::optional<Shape> shape;  ///< broadcasts a scalar value to this shape
  std::string name;
};
Tensor constant(const NDArray& value, const ConstantOptions& options = {});
Tensor constant(double value, const ConstantOptions& options = {});

struct PlaceholderOptions {
  std::optional<Shape> shape;  ///< for placeholder({.shape = ...}); the positional shape wins
  std::optional<int> ndim;     ///< used when no shape is given: every dim None
  std::string dtype;           ///< "" = floatx()
  bool sparse = false;         ///< a sparse placeholder (ops/sparse.hpp), fed a K::SparseValue
  std::string name;
};
/// placeholder({None, 784}) or placeholder({None}, {.dtype = "int32"}).
Tensor placeholder(const Shape& shape, const PlaceholderOptions& options = {});
/// placeholder({.ndim = 2}): a shape or ndim is required (ValueError otherwise).
Tensor placeholder(const PlaceholderOptions& options);

bool is_keras_tensor(const Tensor& x);  ///< ValueError for a null tensor
bool is_tensor(const Tensor& x);
bool is_variable(const Tensor& x);
bool is_placeholder(const Tensor& x);
bool is_sparse(const Tensor& x);  ///< a sparse tensor (ops/sparse.hpp)
Tensor shape(const Tensor& x);    ///< symbolic int32 shape (a sparse tensor's dense shape)
Shape int_shape(const Tensor& x);
int ndim(const Tensor& x);
Tensor size(const Tensor& x);  ///< int32 scalar: number of elements
std::string dtype(const Tensor& x);
std::int64_t count_params(const Tensor& x);  ///< ValueError if the shape is not fully known
Shape get_variable_shape(const Tensor& x);

// ---- values ---------------------------------------------------------------------------------
NDArray eval(const Tensor& x);  ///< evaluating an update op performs it
NDArray get_value(const Tensor& x);
void set_value(const Tensor& x, const NDArray& value);  ///< cast to x's dtype; shape must match
std::vector<NDArray> batch_get_value(const std::vector<Tensor>& xs);
void batch_set_value(const std::vector<std::pair<Tensor, NDArray>>& tuples);
/// Constraint of a variable (null function if none).
const std::function<Tensor(const Tensor&)>& variable_constraint(const Tensor& x);

// ---- creation -----------------------------------------------------------------------------
struct CreateOptions {
  std::string dtype;  ///< "" = floatx()
  std::string name;
};
/// Variables filled with 0/1 (Keras-on-TF: a variable if every dim is non-zero, else a constant).
Tensor zeros(const Shape& shape, const CreateOptions& options = {});
Tensor ones(const Shape& shape, const CreateOptions& options = {});
Tensor eye(std::int64_t size, const CreateOptions& options = {});
Tensor eye(std::int64_t rows, std::int64_t cols, const CreateOptions& options = {});
/// dtype "" keeps x's dtype (Keras 2.2.4).
Tensor zeros_like(const Tensor& x, const CreateOptions& options = {});
Tensor ones_like(const Tensor& x, const CreateOptions& options = {});
Tensor identity(const Tensor& x, const std::string& name = "");
Tensor cast(const Tensor& x, const std::string& dtype);

// ---- random ---------------------------------------------------------------------------------
struct RandomOptions {
  std::string dtype;  ///< "" = floatx()
  std::optional<std::uint64_t> seed;
  std::string name;
};
Tensor random_uniform_variable(const Shape& shape, double low, double high,
                               const RandomOptions& options = {});
Tensor random_normal_variable(const Shape& shape, double mean, double scale,
                              const RandomOptions& options = {});
/// Random tensors draw fresh values on every evaluation.
Tensor random_uniform(const Shape& shape, double minval = 0.0, double maxval = 1.0,
                      const RandomOptions& options = {});
Tensor random_normal(const Shape& shape, double mean = 0.0, double stddev = 1.0,
                     const RandomOptions& options = {});
Tensor truncated_normal(const Shape& shape, double mean = 0.0, double stddev = 1.0,
                        const RandomOptions& options = {});
/// 1 where a uniform draw in [0, 1) is <= p, else 0 (Keras 2.2.4 on TF: tf.where(random_uniform
/// <= p, ones, zeros)), so p <= 0 gives (almost surely) zeros and p >= 1 ones. A float dtype.
Tensor random_binomial(const Shape& shape, double p = 0.0, const RandomOptions& options = {});
/// Picks a seed as Keras does for seed=None (from the generator seeded by set_random_seed).
std::uint64_t draw_seed();

/// Identity whose evaluation logs `message` and the value through spdlog (stderr). Like TF's
/// tf.Print it fires only when the returned tensor is used.
Tensor print_tensor(const Tensor& x, const std::string& message = "");

// ---- random state (a ktape extension, for exact resumption) -----------------------------------
/// The random ops `outputs` depend on (dropout masks, random_uniform / random_normal /
/// truncated_normal draws), in creation order. Each draws fresh numbers on every call from its
/// seed and its call counter: saving the counters and restoring them makes a resumed run draw
/// exactly what the uninterrupted run would have.
std::vector<Tensor> random_sources(const std::vector<Tensor>& outputs);
std::uint64_t random_counter(const Tensor& random_op);  ///< ValueError if not a random op
void set_random_counter(const Tensor& random_op, std::uint64_t calls);

// ---- eager / symbolic ----------------------------------------------------------------------
/// Keras 2.3's decorators: wrap a callable so that its body runs in an eager scope (every node
/// that needs no placeholder is evaluated as it is built) or a symbolic one.
template <class F>
auto eager(F f) {
  return [f](auto&&... args) {
    EagerScope scope(true);
    return f(std::forward<decltype(args)>(args)...);
  };
}
template <class F>
auto symbolic(F f) {
  return [f](auto&&... args) {
    EagerScope scope(false);
    return f(std::forward<decltype(args)>(args)...);
  };
}
using ktape::EagerScope;

}  // namespace ktape::backend
