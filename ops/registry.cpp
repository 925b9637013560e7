// Fills the op table: one explicit call per op family (no static self-registration, which
// linkers drop from static libraries).
#include <mutex>

#include "engine/graph.hpp"
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
  });
}

}  // namespace ktape
