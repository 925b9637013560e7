/// \file
/// K::rnn, map_fn, foldl, foldr: loops over the first (time) axis. The symbolic forms build one
/// Scan node (engine/scan.hpp): the step function is called once, on placeholders, and its body
/// runs T times inside a Function; its gradient is a reverse Scan. K::rnn with unroll=true
/// builds the plain graph instead (needs a static time dimension).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.hpp"

namespace ktape::backend {

/// step_function(input_t, states + constants) -> (output_t, new_states).
using StepFunction = std::function<std::pair<Tensor, std::vector<Tensor>>(
    const Tensor& input_t, const std::vector<Tensor>& states)>;

struct RnnOptions {
  bool go_backwards = false;
  /// (samples, time), bool or 0/1. A masked step keeps every state and repeats the previous
  /// output (zeros before the first step), or outputs zeros with zero_output_for_mask. This is
  /// Keras 2.2.5/2.3 semantics (2.2.4's symbolic TF path repeated states[0] instead).
  Tensor mask;
  std::vector<Tensor> constants;  ///< appended to the states passed to every step
  bool unroll = false;
  std::optional<std::int64_t> input_length;  ///< a hint only, as on TensorFlow
  bool time_major = false;                   ///< inputs and outputs (time, samples, ...)
  bool zero_output_for_mask = false;
};

struct RnnResult {
  Tensor last_output;              ///< (samples, ...): outputs at the last iteration
  Tensor outputs;                  ///< (samples, time, ...) in iteration order
  std::vector<Tensor> new_states;  ///< the states after the last step
};

/// Keras K.rnn. ValueError: inputs below 3-D, unroll with an unknown time dimension, a mask that
/// is not 2-D or whose (samples, time) differ from the inputs' (at build time where both are
/// known, else when a Function runs), a step function returning the wrong number of states.
RnnResult rnn(const StepFunction& step_function, const Tensor& inputs,
              const std::vector<Tensor>& initial_states, const RnnOptions& options = {});

struct MapFnOptions {
  std::string name = "map_fn";
  std::string dtype;  ///< "" = the dtype fn returns; else the result is cast
};
/// fn applied to every elems[i] (along axis 0); the results stacked.
Tensor map_fn(const std::function<Tensor(const Tensor&)>& fn, const Tensor& elems,
              const MapFnOptions& options = {});

struct FoldOptions {
  Tensor initializer;  ///< null: elems[0] (foldl) or elems[-1] (foldr)
  std::string name;
};
/// acc = fn(acc, elems[i]) from left to right (foldl) or right to left (foldr).
Tensor foldl(const std::function<Tensor(const Tensor&, const Tensor&)>& fn, const Tensor& elems,
             const FoldOptions& options = {});
Tensor foldr(const std::function<Tensor(const Tensor&, const Tensor&)>& fn, const Tensor& elems,
             const FoldOptions& options = {});

}  // namespace ktape::backend
