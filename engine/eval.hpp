/// \file
/// Evaluation of concrete tensors outside a Function (K::eval, eager scopes). Declared apart from
/// Function so that the tape (graph.cpp) can evaluate eagerly without including the executor.
#pragma once

#include "engine/ndarray.hpp"

namespace ktape {

class Tensor;

/// Evaluates a tensor that needs no fed placeholder (K::eval). Evaluating an update runs it.
NDArray evaluate(const Tensor& t);

/// Eager scopes: inside one, every node that needs no placeholder is evaluated when it is built.
bool in_eager_scope();
class EagerScope {
 public:
  explicit EagerScope(bool eager = true);
  ~EagerScope();
  EagerScope(const EagerScope&) = delete;
  EagerScope& operator=(const EagerScope&) = delete;

 private:
  int previous_;
};

}  // namespace ktape
