// Scan: a symbolic loop. A Scan node owns a body sub-graph, closed over its own placeholders,
// that maps (slices of the sequences at step j, carries, statics) to (per-step outputs, new
// carries). It runs the body over the time axis (axis 0 of every sequence) in one step of the
// enclosing Function, without allocating per step, and its gradient is a second Scan running
// backwards that accumulates the gradients of everything the body captured (weights included).
// K::rnn, map_fn, foldl and foldr are built on it (ops/rnn.hpp). The loop family lives here in
// ops/loops: building (scan_build.cpp), the gradient (scan_grad.cpp) and execution through the
// compile hook (scan_exec.cpp); the engine runs it like any op. Not a public header.
//
// A Scan node's value is one flat buffer holding, in order: each per-step output stacked over
// time (T, ...), each carry as it was before every step (T, ...; (2, ...) scratch for a scan
// that does not store them), and each final carry. ScanPart
// nodes cut the parts out (build them with scan_part()).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/function.hpp"
#include "engine/graph.hpp"

namespace ktape {

// The loop body a Scan node owns (Node::extra).
struct ScanBody : NodeExtra {
  int n_seq = 0, n_carry = 0, n_static = 0, n_out = 0;
  int n_user_out = 0;  // outputs the caller asked for; the rest are stored for the gradient
  // Stored intermediates: output index -> body node (a recurrent projection h . U, a random
  // draw). The reverse scan feeds them instead of recomputing them.
  std::vector<std::pair<int, const Node*>> residuals;
  std::vector<char> seq_reverse;  // sequence i is read at T-1-j on step j
  std::vector<char> out_reverse;  // output m is written at T-1-j on step j
  std::vector<Tensor> params;     // placeholders: sequence slices, carries, statics
  std::vector<Tensor> results;    // n_out per-step outputs, then n_carry new carries
  DType dtype = DType::float32;   // of every output and carry (the flat buffer)
  // Keep every step's carries (needed by the gradient). Off for backward scans: their own
  // gradient recomputes them with a storing twin.
  bool store = true;
  // params -> results, compiled for the enclosing Function's backend and options.
  const Function& function_for(const std::string& backend, bool fuse, bool fold) const;
  // The Scan node's sequence and static inputs (bit i: input i, below 32) whose values the body
  // reads only for their dims (OpDef::shape_only of their readers in the body, e.g. a stored
  // forward value that only shapes a gradient): OpDef::shape_only of Scan. Carries never are
  // (the loop copies them into its storage).
  unsigned shape_only_inputs() const;

 private:
  struct Variant {
    std::string backend;
    bool fuse, fold;
    Function fn;
  };
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Variant>> variants_;
  mutable std::optional<unsigned> shape_only_;  // shape_only_inputs(), once computed (under mu_)
};

struct ScanSpec {
  // The body's placeholders and outer values. Sequences are time-major: (T, ...), and their
  // placeholders have the per-step shape. Statics are fed unchanged to every step.
  std::vector<Tensor> seq_params, seqs;
  std::vector<Tensor> carry_params, inits;
  std::vector<Tensor> static_params, statics;
  std::vector<Tensor> outputs;                 // per-step outputs, stacked over time
  std::vector<Tensor> new_carries;             // aligned with carry_params
  std::vector<char> seq_reverse, out_reverse;  // empty = all false
  std::string name = "scan";
  bool store_carries = true;
  // Hoist x_t . W out of the loop (one GEMM over all steps) when x_t is a sequence slice and W
  // an outer tensor; the body then reads the product as a sequence.
  bool hoist_input_projections = true;
};

struct ScanResult {
  Tensor node;                        // the Scan node (flat buffer)
  std::vector<Tensor> outputs;        // stacked (T, ...) per-step outputs
  std::vector<Tensor> final_carries;  // carries after the last step
};

// Builds a Scan. Any other tensor the body uses (variables, constants, outer tensors, the
// learning phase) is captured automatically as an extra static. Throws ValueError for a body
// that assigns variables or returns carries whose shape or dtype differ from the initial ones.
ScanResult make_scan(const ScanSpec& spec);

// Part k of a Scan node's flat buffer `buf` (the node itself or a gradient of it).
enum class ScanPartKind { kOutput, kStored, kFinal };
Tensor scan_part(const Tensor& buf, const Tensor& scan, ScanPartKind kind, int index);

// The body of a Scan node (ValueError if `scan` is not one).
const ScanBody& scan_body(const Node& scan);

// Registers Scan, ScanPart and ScanEmbed (called once from ops/registry.cpp).
void register_loop_ops();

}  // namespace ktape
