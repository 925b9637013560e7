/// \file
/// K:: control: Function, gradients, stop_gradient, update ops, the learning phase, switch and
/// in_train_phase / in_test_phase.
#pragma once

#include <functional>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "autodiff/gradients.hpp"
#include "engine/function.hpp"
#include "engine/tensor.hpp"

namespace ktape::backend {

using ktape::Function;
using ktape::FunctionOptions;

/// K.function(inputs, outputs, updates). See engine/function.hpp for the semantics: outputs and
/// new values from pre-call state, then all assignments; two updates of one variable are an
/// error. Feeding a wrong number, shape or dtype of values is a ValueError.
Function function(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                  const std::vector<Tensor>& updates = {}, const FunctionOptions& options = {});

using ktape::gradients;
Tensor stop_gradient(const Tensor& x);
std::vector<Tensor> stop_gradient(const std::vector<Tensor>& xs);

// ---- updates: tensors to pass in K::function's `updates` (or to K::eval, which runs them) ----
/// `x` must be a variable (TypeError). The new value of update, and the increment / decrement
/// of update_add / update_sub, must have x's shape exactly, as TF's assign, assign_add and
/// assign_sub require (no broadcasting): ValueError naming the variable and both shapes, when
/// the update is built or, for dims unknown then, when a Function first runs with those shapes.
/// moving_average_update's `value` broadcasts against x, as TF's assign_moving_average.
Tensor update(const Tensor& x, const Tensor& new_x);
Tensor update_add(const Tensor& x, const Tensor& increment);
Tensor update_sub(const Tensor& x, const Tensor& decrement);
struct MovingAverageOptions {
  /// true: Keras 2.2.4/2.2.5 on TF (zero-debiased: hidden `biased` and `local_step` variables,
  /// x = biased / (1 - momentum^step), so x's initial value is ignored). false: Keras 2.3.1,
  /// x -= (x - value) * (1 - momentum).
  bool zero_debias = true;
};
Tensor moving_average_update(const Tensor& x, const Tensor& value, double momentum,
                             const MovingAverageOptions& options = {});

// ---- learning phase ------------------------------------------------------------------------
/// Dynamic by default: a bool scalar placeholder that defaults to 0 (test) when not fed, like
/// TF's placeholder_with_default(False). Feed it as an input of K::function (any numeric scalar
/// is accepted for it). After set_learning_phase(0|1) it is a constant and branches fold away
/// in graphs built afterwards.
Tensor learning_phase();
void set_learning_phase(int value);  ///< ValueError unless 0 or 1
void reset_learning_phase();         ///< dynamic again (clear_session)

/// A tensor or a callable producing one (Keras accepts both for branches).
class TensorOrFn {
 public:
  TensorOrFn(Tensor t) : t_(std::move(t)) {}  // NOLINT(google-explicit-constructor)
  template <class F, class = std::enable_if_t<std::is_invocable_r_v<Tensor, F> &&
                                              !std::is_convertible_v<F, Tensor>>>
  TensorOrFn(F f) : f_(std::move(f)) {}  // NOLINT(google-explicit-constructor)
  Tensor get() const { return f_ ? f_() : t_; }

 private:
  Tensor t_;
  std::function<Tensor()> f_;
};

/// K.switch (a C++ keyword, hence the underscore). The condition is cast to bool; a condition of
/// lower rank is padded with size-1 axes on the right and broadcast (a rank-1 condition selects
/// rows). Both branches are computed.
Tensor switch_(const Tensor& condition, const TensorOrFn& then_expression,
               const TensorOrFn& else_expression);
/// Keras's in_train_phase: `training` defaults to learning_phase(). A static 0/1 (or a constant
/// learning phase) picks one branch at build time, calling only that callable; a dynamic phase
/// builds a switch (then the branches must have compatible shapes).
Tensor in_train_phase(const TensorOrFn& x, const TensorOrFn& alt);
Tensor in_train_phase(const TensorOrFn& x, const TensorOrFn& alt, int training);
Tensor in_train_phase(const TensorOrFn& x, const TensorOrFn& alt, const Tensor& training);
Tensor in_test_phase(const TensorOrFn& x, const TensorOrFn& alt);
Tensor in_test_phase(const TensorOrFn& x, const TensorOrFn& alt, int training);
Tensor in_test_phase(const TensorOrFn& x, const TensorOrFn& alt, const Tensor& training);

}  // namespace ktape::backend
