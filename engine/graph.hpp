// The graph is the tape: every K:: call appends one Node. Node ids grow with creation, so
// id order is a topological order. Node, the op table (OpDef) and the node builders are engine
// and op-family internals: not a public header (users see engine/tensor.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "engine/dtype.hpp"
#include "engine/kernel_abi.hpp"
#include "engine/ndarray.hpp"
#include "engine/op_list.hpp"
#include "engine/shape.hpp"
#include "engine/tensor.hpp"

namespace ktape {

struct Node : std::enable_shared_from_this<Node> {
  std::int64_t id = 0;
  Op op = Op::Identity;
  std::vector<Tensor> inputs;
  Attrs attrs;
  DType dtype = DType::float32;
  Shape shape;
  std::string name;
  // Constant: the value. Variable: the persistent storage (updated in place by Functions).
  NDArray value;
  // Variable only: taken shared by every call that reads the storage and exclusive by every call
  // that assigns it, for the whole call (engine/function.hpp), and by get_value / set_value.
  std::unique_ptr<std::shared_mutex> storage_lock;
  // Set when the value can be computed without any fed placeholder (constants, variables,
  // random ops, and anything built only from those).
  bool concrete = true;
  bool uses_learning_phase = false;  // Keras's _uses_learning_phase
  bool is_learning_phase = false;    // the learning-phase placeholder: fed as any numeric scalar
  bool keras_history = false;        // Keras's _keras_history: set only by layer code, never by K::
  std::uint64_t seed = 0;            // random ops
  std::atomic<std::uint64_t> counter{0};            // random ops: calls so far
  NDArray eager_value;                              // computed at creation inside an eager scope
  std::function<Tensor(const Tensor&)> constraint;  // Variable only (Keras's `constraint`)
  // Data of the op's own (a loop's body, a print hook), opaque to the engine.
  std::shared_ptr<const struct NodeExtra> extra;
  // K::control_dependencies: nodes a Function evaluates (and commits, for updates) whenever it
  // evaluates this one. They carry no data and no gradient.
  std::vector<Tensor> control_inputs;
};

// Base of the op-specific data a node may own (Node::extra). Nodes with extra data are never
// hash-consed.
struct NodeExtra {
  virtual ~NodeExtra() = default;
};

// A gradient rule: given the node, its output tensor y and the incoming gradient g, returns one
// tensor per input (a null Tensor where the input gets no gradient).
using GradFn = std::vector<Tensor> (*)(const Node& node, const Tensor& y, const Tensor& g);
// Shape inference, used at build time (static shapes with None) and again when a Function
// compiles for concrete input shapes. Throws ValueError for bad arguments.
using ShapeFn = Shape (*)(const Node& node, const std::vector<Shape>& in);

// The compile hook (as Theano's make_thunk): what an op decides when a Function compiles it for
// concrete input shapes, beyond its shape rule. Ops with a `prepare` are compiled by it alone.
struct PrepareArgs {
  const Node& node;
  const std::vector<Shape>& in_shapes;     // concrete
  const std::vector<const void*>& in_ctx;  // each input's prepared context (null if none)
  const std::string& backend;              // the enclosing Function's backend and options
  bool fuse = true, fold = true;
  // The plan's nodes that read this one; null when the node is also an output or an update
  // (read whole).
  const std::vector<const Node*>* readers = nullptr;
  // Whether the plan reads a node's data, not only its dims (OpDef::shape_only): true for an
  // output or an update. Null: assume it does.
  const std::function<bool(const Node&)>* data_read = nullptr;
  // Inputs (bit i: input i, below 32) that are a loop body's statics: the same arrays, unchanged,
  // on every step of one run of the loop. What a kernel derives from them (a packed weight) can
  // be kept while *loop_run is unchanged; loop_run is the plan's run counter (Plan::loop_run).
  unsigned invariant_inputs = 0;
  const std::uint64_t* loop_run = nullptr;
};
struct Prepared {
  Shape shape;                    // the concrete output shape
  std::shared_ptr<void> ctx;      // KernelCall::ctx of the op's step, owned by the plan
  std::size_t scratch_bytes = 0;  // KernelCall::scratch: arena bytes live during the step only
  KernelFn kernel = nullptr;      // runs instead of the backend's kernel for this op
  // The output is the bytes from view_offset of input view_input's buffer (no step runs) when
  // that buffer lives in the arena; otherwise the kernel runs and copies.
  int view_input = -1;
  std::size_t view_offset = 0;
};
using PrepareFn = Prepared (*)(const PrepareArgs& args);
// Two nodes of one op that a plan may run as one step (OpDef::pair): their concrete input
// shapes, and the enclosing Function's backend.
struct PairArgs {
  const Node& first;
  const Node& second;
  const std::vector<Shape>& first_in;
  const std::vector<Shape>& second_in;
  const std::string& backend;
};
struct Paired {
  KernelFn kernel = nullptr;      // null: the two run apart
  std::size_t scratch_bytes = 0;  // KernelCall::scratch of the joint step
};
using PairFn = Paired (*)(const PairArgs& args);
// A set of a node's inputs: bit i stands for input i.
using InputMaskFn = unsigned (*)(const Node& node);
using AxisFn = int (*)(const Node& node);
// A block of an array: `rows` runs of `width` elements, `pitch` elements apart, the first at
// element `offset`. rows 0: not a block.
struct Block {
  std::int64_t rows = 0, width = 0, pitch = 0, offset = 0;
};
using BlockFn = Block (*)(const Node& node, const Shape& in, const Shape& out);

// Everything the engine and autodiff know about one op kind, in one record defined next to the
// op's builder (define_op with designated initializers). Fields left out keep these defaults.
struct OpDef {
  ShapeFn shape = nullptr;  // required for every op but the sources
  GradFn grad = nullptr;    // nullptr: not differentiable (every input gets a null gradient)
  bool pure = true;         // may be hash-consed (same op, inputs, attrs -> same node)
  // Draws random numbers: Function advances the node's counter on every call (fresh draws), and
  // a loop's reverse pass reuses the forward pass's draws instead of drawing again.
  bool random = false;
  // The output shares the buffer of this input (reshape-like ops, assignments): no kernel runs.
  int alias_input = -1;
  // The output shares input 0's buffer when their concrete shapes are equal (sum_to, broadcast_to).
  bool alias_if_same_shape = false;
  // Which input's dtype selects the kernel; -1 selects by the output dtype.
  int dispatch_input = 0;
  // The kernel computes each output element from the same element of its inputs (numpy
  // broadcasting of size-1 inputs only matters at the edges): Function may fuse it and run it
  // on chunks of the arrays. Such a kernel must also be safe in place (its output buffer may be
  // one of its inputs): it reads every input element before writing that output element.
  bool elementwise = false;
  // The kernel may throw on bad values (a label out of range): Function writes no update into
  // its variable before such a step, so a failed call leaves every variable as it was.
  bool may_throw = false;
  PrepareFn prepare = nullptr;  // the compile hook (see PrepareArgs); null: the shape rule only
  // Two nodes of this op that read the same data through input `pair_input` may run as one
  // step, at the first one's place (the cpu MatMul packs a shared operand once for both
  // products): `pair` gives that step's kernel and scratch, or no kernel (other attributes,
  // another backend). The joint kernel sees the first node's inputs, then the second's, then
  // the second's output as one more input, which it writes; its output is the first's.
  int pair_input = -1;
  PairFn pair = nullptr;

  // How the op composes with a loop's steps (ops/loops), for ops worth handling specially.
  // Expensive to run once per step (a GEMM): a loop runs it once over every step where
  // stack_map allows, and stores its per-step values for the reverse pass when it reads the
  // loop's state.
  bool costly = false;
  // A transcendental whose gradient reads its output (sigmoid, tanh): a loop stores its
  // per-step values for the reverse pass, which then recomputes neither it nor what feeds it.
  bool store_in_loops = false;
  // The inputs that may be per-step tensors stacked on a new leading axis such that the op on
  // the stacks is the stack of its per-step results (the other inputs loop-invariant).
  InputMaskFn stack_map = nullptr;
  // The inputs that may be stacked so that the op on the stacks is the sum of its per-step
  // results (e.g. the weight gradient x^T g): a loop's gradient sums them in one op afterwards.
  InputMaskFn stack_sum = nullptr;
  // The inputs whose data the kernel never reads, only their dims (the reference of SumToLike,
  // SlicePad, FillLike): a plan computes such an input only if something else reads its data,
  // so a loop's reverse pass does not recompute forward values its gradient needs only the
  // shape of. The kernel sees the input's dims; its data is unspecified.
  InputMaskFn shape_only = nullptr;
  // Runs for its effect (print_tensor): a plan that holds the node computes it even when nothing
  // reads its data.
  bool side_effect = false;
  // The output is its inputs placed one after another along this (non-negative) axis, all of
  // the output's dtype (concatenate): Function may let the fused passes that compute the inputs
  // write each one straight into its place in the output, and run no kernel for the node.
  AxisFn concat_axis = nullptr;
  // The output is a block of input 0 (a slice along one axis), of the same dtype: output
  // element e is input element (e / width) * pitch + offset + e % width. Function may let the
  // fused passes that read the output gather it from input 0 chunk by chunk instead, and run no
  // kernel for the node.
  BlockFn block_of = nullptr;
};

// The op table: one record per op kind, read-only once registered. ensure_ops_registered fills
// it on first use by calling register_all_ops (ops/registry.cpp, one call per family), then
// checks that every op kind got a record.
const OpDef& op_def(Op op);
void ensure_ops_registered();
// Defines the record of `op`; a second definition of one op is a logic error (std::logic_error
// naming the op). Only during registration.
void define_op(Op op, const OpDef& def);
// Implemented by the op families (ops/registry.cpp).
void register_all_ops();

// Appends a node (or returns an identical pure node already on the tape). Infers the shape.
Tensor make_node(Op op, std::vector<Tensor> inputs, Attrs attrs, DType dtype,
                 const std::string& name = "");
// A node that owns op-specific data (a loop body, a print hook). Never shared by hash-consing;
// evaluated eagerly (inside an eager scope) only when `eager` says so.
Tensor make_node_with_extra(Op op, std::vector<Tensor> inputs, Attrs attrs, DType dtype,
                            const std::string& name, std::shared_ptr<const NodeExtra> extra,
                            bool eager = false);
// A copy of `n` on new inputs: same op, attrs, dtype, name, seed and extra data.
Tensor clone_node(const Node& n, std::vector<Tensor> inputs);
// Source nodes (placeholder, variable, constant) with a given static shape.
Tensor make_source(Op op, const Shape& shape, DType dtype, const std::string& name,
                   NDArray value = {});

// Holds a variable's storage lock — shared to read it, exclusive to write it — for direct
// access outside a Function (K::get_value, K::set_value). No-op inside a call, which holds it.
class VariableAccess {
 public:
  VariableAccess(const Node& var, bool write);
  ~VariableAccess();
  VariableAccess(const VariableAccess&) = delete;
  VariableAccess& operator=(const VariableAccess&) = delete;

 private:
  std::shared_mutex* mu_;
  bool write_;
};

// Scopes of the calling thread (K::name_scope, K::control_dependencies): nodes created while one
// is open get its name prefix ("outer/inner/") or its control inputs. Nested scopes add up.
void push_name_scope(const std::string& name);
void pop_name_scope();
std::string scoped_name(const std::string& name);  // the name with the open scopes' prefix
void push_control_inputs(std::vector<Tensor> inputs);
void pop_control_inputs();

// Tape bookkeeping.
std::int64_t next_node_id();
void reset_tape();  // clear_session: forgets the hash-cons table; ids keep growing

}  // namespace ktape
