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
#include <type_traits>
#include <variant>
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
  /// Loop bodies: the inputs from this index on are the loop's statics, fed the same arrays on
  /// every step of one run of the loop (-1: none). Kernels may keep what they derive from them
  /// for the rest of that run (PrepareArgs::invariant_inputs).
  int loop_statics = -1;
};

/// The value of a sparse tensor in COO form, as TF's SparseTensorValue: entry k is values[k]
/// at position indices[k, :]; positions not listed are 0, and a position listed twice holds the
/// sum of its values (as scipy's COO matrices).
struct SparseValue {
  NDArray indices;    ///< (nnz, rank), int64 or int32
  NDArray values;     ///< (nnz,), of the sparse placeholder's dtype
  Shape dense_shape;  ///< concrete
};

/// One value fed to a Function: an array, or a SparseValue for a sparse placeholder.
class Feed {
 public:
  Feed(NDArray array) : v_(std::move(array)) {}        // NOLINT(google-explicit-constructor)
  Feed(SparseValue sparse) : v_(std::move(sparse)) {}  // NOLINT(google-explicit-constructor)
  bool is_sparse() const { return std::holds_alternative<SparseValue>(v_); }
  const NDArray& array() const { return std::get<NDArray>(v_); }
  const SparseValue& sparse() const { return std::get<SparseValue>(v_); }

 private:
  std::variant<NDArray, SparseValue> v_;
};

class Function {
 public:
  Function() = default;
  Function(std::vector<Tensor> inputs, std::vector<Tensor> outputs, std::vector<Tensor> updates,
           FunctionOptions options = {});

  /// Feeds `inputs` (same order as the placeholders) and returns the outputs.
  std::vector<NDArray> operator()(const std::vector<NDArray>& inputs) const;
  /// Writes the outputs into `outputs`, reusing arrays whose shape and dtype already match: an
  /// array no other NDArray shares is computed into directly (no copy after the run), so a call
  /// that throws may leave such arrays partly written (variables are left as they were).
  /// `outputs` may be `inputs` itself.
  void run(const std::vector<NDArray>& inputs, std::vector<NDArray>& outputs) const;
  /// The same with feeds that may be sparse: a sparse placeholder takes a SparseValue (checked:
  /// indices of the right rank and in range, else ValueError). Its entries are copied and padded
  /// with zero entries to a power-of-two count, so a Function compiles one plan per power of
  /// two, not one per entry count. A sparse output is returned dense, as K::eval does. (These
  /// are templates only so that a braced list of NDArrays still picks the overloads above.)
  template <class F = Feed, class = std::enable_if_t<std::is_same_v<F, Feed>>>
  std::vector<NDArray> operator()(const std::vector<F>& inputs) const {
    std::vector<NDArray> out;
    run_feeds(inputs, out);
    return out;
  }
  template <class F = Feed, class = std::enable_if_t<std::is_same_v<F, Feed>>>
  void run(const std::vector<F>& inputs, std::vector<NDArray>& outputs) const {
    run_feeds(inputs, outputs);
  }

  const std::vector<Tensor>& inputs() const;  ///< as given (a sparse placeholder is one input)
  const std::vector<Tensor>& outputs() const;
  /// Number of compiled plans: one per distinct input-shape signature seen so far, plus one per
  /// call that ran while another call of the same signature was in progress.
  std::size_t num_plans() const;
  /// Arena bytes of the most recently used plan (for tests and benchmarks).
  std::size_t arena_bytes() const;
  /// Kernel launches per call of the most recently used plan (after fusion and joint steps).
  std::size_t num_steps() const;
  /// One line per step of that plan: op, shape, dtype, node name; a fused group lists its members,
  /// a joint step (two products sharing an operand) its second node.
  std::string describe_plan() const;
  /// That plan as a Graphviz DOT digraph: a box per step (fused groups list their members), an
  /// ellipse per fed, variable or constant input, edges for data flow, commits as dashed edges.
  std::string plan_dot() const;

 private:
  void run_feeds(const std::vector<Feed>& inputs, std::vector<NDArray>& outputs) const;
  friend struct FunctionAccess;  ///< engine internals (engine/plan.hpp)
  std::shared_ptr<struct FunctionImpl> impl_;
};

}  // namespace ktape
