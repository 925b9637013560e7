/// \file
/// Collectives inside a compiled step: an Allreduce node sums (or averages) its input over the
/// processes of a Communicator when its Function runs, so a data-parallel training step stays
/// one Function call. The core knows only the Communicator interface; ktape/distributed
/// (distributed/distributed.hpp) provides the MPI one and the user-facing API.
///
/// Every process must run the same collectives in the same order: build the same graph on
/// every process and call the Function the same number of times. Plans run their steps in graph
/// order, so two processes that built the same step agree on the order.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/dtype.hpp"
#include "engine/tensor.hpp"

namespace ktape {

/// A group of processes that sum arrays together.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Replaces data[0..count) (float32 or float64) by its elementwise sum over every process of
  /// the group; every process calls it with the same count and dtype (ValueError on every
  /// process when they differ).
  virtual void allreduce_sum(void* data, std::int64_t count, DType dtype) const = 0;
};

/// The group of this process alone (rank 0 of 1): every reduction leaves the data as it is.
std::shared_ptr<const Communicator> local_communicator();

enum class ReduceOp { average, sum };

/// x summed or averaged over `comm`'s processes, elementwise, when the Function runs (a float32
/// or float64 tensor of any shape; every process feeds the same shape). Its gradient is the
/// same reduction of the incoming gradient (Horovod's rule: d(avg_r x_r)/dx_self summed over
/// the ranks' losses). TypeError for another dtype, ValueError for a null communicator.
Tensor allreduce(const Tensor& x, std::shared_ptr<const Communicator> comm,
                 ReduceOp op = ReduceOp::average);

/// The same reduction of several tensors, packed into buckets of about `bucket_bytes` (in the
/// given order; a tensor larger than a bucket gets its own): one collective per bucket, whose
/// results are sliced back into the tensors' shapes. Null tensors stay null.
std::vector<Tensor> allreduce(const std::vector<Tensor>& xs,
                              std::shared_ptr<const Communicator> comm,
                              ReduceOp op = ReduceOp::average, std::int64_t bucket_bytes = 4 << 20);

}  // namespace ktape
