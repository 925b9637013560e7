/// \file
/// Function: the compiled, cached executor behind K::function. One plan per input-shape
/// signature: pruned to what the outputs and updates need, kernels resolved once, buffers
/// planned by liveness in one 64-byte-aligned arena. A call allocates nothing but the arrays it
/// returns, and run() into caller-owned arrays allocates nothing at all.
/// Updates follow Keras: outputs and all new values are computed from the values variables had
/// when the call started; then every assignment is committed.
/// Threads: a Function may be called from several threads at once. Each concurrent call runs on
/// its own plan (a pool per signature, grown on demand, so steady-state calls still allocate
/// nothing), and holds its variables' locks for the whole call — shared for those it reads,
/// exclusive for those it assigns, taken in one global order — so concurrent calls are
/// serializable: each sees the variables as some sequence of whole calls left them, and every
/// call's assignments are committed atomically (none is lost or torn).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/eval.hpp"
#include "engine/ndarray.hpp"
#include "engine/tensor.hpp"

namespace ktape {

struct FunctionOptions {
  std::string backend;  ///< "" = the active backend; else "cpu", "reference" or a plugin path
  bool fuse = true;     ///< fuse elementwise chains where the backend supports it
  bool fold = true;     ///< evaluate pure nodes computed only from constants once, at compile
  /// Loop bodies (ops/loops): inputs may be any node, fed instead of computed (a stored
  /// intermediate); the plan does not compute what only feeds them.
  bool feed_intermediates = false;
};

class Function {
 public:
  Function() = default;
  Function(std::vector<Tensor> inputs, std::vector<Tensor> outputs, std::vector<Tensor> updates,
           FunctionOptions options = {});

  /// Feeds `inputs` (same order as the placeholders) and returns the outputs.
  std::vector<NDArray> operator()(const std::vector<NDArray>& inputs) const;
  /// Writes the outputs into `outputs`, reusing arrays whose shape and dtype already match.
  void run(const std::vector<NDArray>& inputs, std::vector<NDArray>& outputs) const;

  const std::vector<Tensor>& inputs() const;
  const std::vector<Tensor>& outputs() const;
  /// Number of compiled plans: one per distinct input-shape signature seen so far, plus one per
  /// call that ran while another call of the same signature was in progress.
  std::size_t num_plans() const;
  /// Arena bytes of the most recently used plan (for tests and benchmarks).
  std::size_t arena_bytes() const;
  /// Kernel launches per call of the most recently used plan (after fusion).
  std::size_t num_steps() const;
  /// One line per step of that plan: op, shape, dtype, node name; a fused group lists its members.
  std::string describe_plan() const;
  /// That plan as a Graphviz DOT digraph: a box per step (fused groups list their members), an
  /// ellipse per fed, variable or constant input, edges for data flow, commits as dashed edges.
  std::string plan_dot() const;

 private:
  friend struct FunctionAccess;  ///< engine internals (engine/plan.hpp)
  std::shared_ptr<struct FunctionImpl> impl_;
};

}  // namespace ktape
