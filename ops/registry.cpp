// Fills the op table: one explicit call per op family (no static self-registration, which
// linkers drop from static libraries).
#include <mutex>

#include "engine/graph.hpp"
#include "engine/scan.hpp"
#include "ops/op_util.hpp"

namespace ktape {

void ensure_ops_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    ops::register_core_ops();
    ops::register_elementwise_ops();
    ops::register_reduction_ops();
    ops::register_nn_ops();
    ops::register_layout_ops();
    ops::register_control_ops();
    register_scan_ops();
    // Ops whose kernels compute element i from element i of each input (size-1 inputs
    // broadcast): Function may fuse chains of them (engine/fusion.hpp).
    for (Op op :
         {Op::Neg,     Op::Square,       Op::Sqrt,    Op::Exp,       Op::Log,    Op::Abs,
          Op::Sign,    Op::Round,        Op::Sigmoid, Op::Tanh,      Op::Relu,   Op::ReluGrad,
          Op::Clip,    Op::ClipGrad,     Op::Pow,     Op::Cast,      Op::Add,    Op::Sub,
          Op::Mul,     Op::Div,          Op::Maximum, Op::Minimum,   Op::Equal,  Op::NotEqual,
          Op::Greater, Op::GreaterEqual, Op::Less,    Op::LessEqual, Op::Select, Op::AddN})
      op_def(op).elementwise = true;
  });
}

}  // namespace ktape
