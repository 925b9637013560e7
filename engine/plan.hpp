// Internal to Function: the compiled plan of one input-shape signature (values, steps, arena,
// commits), the compiler that builds it (engine/compile.cpp) and nested execution (loops run
// their body's plan). Not a public header.
#pragma once

#include <cstddef>
#include <memory>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "engine/backend.hpp"
#include "engine/function.hpp"
#include "engine/graph.hpp"
#include "engine/kernel_abi.hpp"

namespace ktape {

enum class Kind { kArena, kExternal, kFed };

struct Value {
  Node* node = nullptr;
  Shape shape;
  DType dtype = DType::float32;
  std::int64_t size = 0;
  std::size_t bytes = 0;
  Kind kind = Kind::kArena;
  std::size_t offset = 0;
  void* ext = nullptr;
  int fed = -1;
  int root = -1;                 // value that owns the buffer (itself unless an alias)
  std::size_t alias_offset = 0;  // bytes into the root's buffer (ScanPart views a flat buffer)
  int last_use = -1;
  bool pinned = false;
  // From the op's compile hook (OpDef::prepare): its kernel context, an engine-independent
  // kernel, and the scratch bytes its step needs.
  std::shared_ptr<void> ctx;
  KernelFn kernel = nullptr;
  std::size_t scratch_bytes = 0;
};

struct FusedProgram;
struct MatMulEpilogue;

struct Step {
  KernelFn fn = nullptr;
  KernelCall call;
  bool random = false;  // OpDef::random: the node's counter advances on every call
  std::vector<ArrayRef> ins;
  Node* node = nullptr;
  int out = -1;
  std::vector<int> in_values;
  std::size_t scratch_offset = 0;  // in the arena, when the value asks for scratch
  // A fused elementwise group (engine/fusion.hpp): the other values it writes, and its program.
  std::vector<int> extra_outs;
  std::unique_ptr<FusedProgram> fused;
  // A MatMul that also runs a fused pass over its product (engine/fusion.hpp MatMulEpilogue):
  // the pass's inputs follow the MatMul's two in in_values, its outputs are in extra_outs.
  std::unique_ptr<MatMulEpilogue> epilogue;
};

struct Commit {
  void* dst;
  int value;
  std::size_t bytes;
};

struct Plan {
  Plan() = default;
  ~Plan();  // in function.cpp, where FusedProgram is complete
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  std::vector<Shape> sig;
  std::vector<Value> values;
  std::vector<Step> steps;
  std::shared_ptr<void> arena;
  std::size_t arena_bytes = 0;
  std::vector<std::vector<ArrayRef*>> fed_refs;  // per fed input: step inputs to patch
  std::vector<int> outputs;                      // value index of each output
  std::vector<Commit> commits;
  int commits_in_place = 0;  // updates written straight into their variable (no commit copy)
  std::vector<void*> fed_ptrs;
  bool lp_byte = false;
  // function_execute_raw, and Function::run given reusable output arrays: outputs computed
  // into the caller's buffer directly (every pointer that refers to the output's arena slot, or
  // to a view into it at the byte offset in out_loc_offsets), instead of a copy after the run.
  std::vector<std::vector<void**>> out_locs;
  std::vector<std::vector<std::size_t>> out_loc_offsets;
  std::vector<char*> out_into;  // per output, the caller's buffer it is computed into, or null
  std::unordered_map<Node*, NDArray> folded;  // constant subgraphs evaluated at compile
  std::vector<int> out_same;  // an earlier redirected output with the same value, else -1
  // The storage locks of the variables a call reads (shared) or assigns (exclusive), in node-id
  // order, held for the whole call.
  std::vector<std::pair<std::shared_mutex*, bool>> var_locks;
  // A plan runs one call at a time: concurrent calls of one Function take other plans of the
  // same signature (FunctionImpl's pool). Guarded by the FunctionImpl's mutex.
  bool busy = false;
  // A loop body's plan: advanced by the loop once per run of the loop (before its first step),
  // so that kernels can tell when what they keep of the loop's statics is stale.
  std::uint64_t loop_run = 0;
};

// The buffer of value v.
inline void* value_ptr(const Plan& p, int v) {
  const Value& val = p.values[static_cast<std::size_t>(v)];
  const Value& root = p.values[static_cast<std::size_t>(val.root)];
  switch (root.kind) {
    case Kind::kArena:
      return static_cast<char*>(p.arena.get()) + root.offset + val.alias_offset;
    case Kind::kExternal:
      return static_cast<char*>(root.ext) + val.alias_offset;
    case Kind::kFed:
      return static_cast<char*>(p.fed_ptrs[static_cast<std::size_t>(root.fed)]) + val.alias_offset;
  }
  return nullptr;
}

struct CompileRequest {
  const std::vector<Tensor>& inputs;
  const std::vector<Tensor>& outputs;
  const std::vector<Tensor>& updates;
  const std::vector<Node*>& assigns;  // every Assign the updates hold
  const Backend& backend;
  bool fuse = true, fold = true;
  const std::vector<Shape>& fed;  // the input-shape signature
  int loop_statics = -1;          // FunctionOptions::loop_statics
};
// The plan as a Graphviz DOT digraph (engine/dot.cpp; Function::plan_dot).
std::string plan_dot(const Plan& p);

// Builds the plan (engine/compile.cpp). ValueError for shapes that do not fit together,
// NotImplementedError for a missing kernel, ResourceExhaustedError for an arena too large.
std::unique_ptr<Plan> compile_plan(const CompileRequest& request);

// Function internals for nested execution (a Scan runs its body's plan once per step).
struct FunctionAccess {
  static const struct FunctionImpl& impl(const Function& f) { return *f.impl_; }
};
// A new plan for these input shapes, owned by the caller (each enclosing plan owns the plans of
// its loop bodies, so concurrent calls never share one).
std::unique_ptr<Plan> function_compile(const Function& f, const std::vector<Shape>& shapes);
// Runs `p` on raw input pointers and copies each output into outs[i]. No allocation.
void function_execute_raw(const Function& f, Plan& p, void* const* fed, void* const* outs);

}  // namespace ktape
