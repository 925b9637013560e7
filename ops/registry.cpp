// Fills the op table: one explicit call per op family (no static self-registration, which
// linkers drop from static libraries). Each family defines the records of its ops next to
// their builders (define_op in its .cpp).
#include "engine/graph.hpp"
#include "ops/loops/scan.hpp"
#include "ops/op_util.hpp"

namespace ktape {

void register_all_ops() {
  ops::register_core_ops();
  ops::register_elementwise_ops();
  ops::register_reduction_ops();
  ops::register_nn_ops();
  ops::register_layout_ops();
  ops::register_indexing_ops();
  ops::register_ctc_ops();
  ops::register_control_ops();
  ops::register_conv_ops();
  ops::register_pool_ops();
  ops::register_image_ops();
  ops::register_sparse_ops();
  ops::register_collective_ops();
  register_loop_ops();
}

}  // namespace ktape
