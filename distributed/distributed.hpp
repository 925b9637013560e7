/// \file
/// ktape/distributed: data-parallel training over processes and machines on MPI (Open MPI), in
/// Horovod's way: the same training program launched with `mpirun -np N`, each process (rank)
/// training on its shard of the data, the gradients averaged over all ranks inside the compiled
/// step before the optimizer's update, so every rank keeps the same weights.
///
///   namespace D = ktape::distributed;
///   D::init();                                     // size 1 when not launched by mpirun
///   auto opt = D::distributed_optimizer(std::make_unique<ktape::optimizers::Adam>());
///   auto train = K::function({x, y}, {loss}, opt->get_updates(loss, params));
///   D::broadcast_variables(params);                // every rank starts from rank 0's weights
///   ... each rank feeds its own batch of size b: the step equals one process with batch N * b
///   D::finalize();
///
/// Without MPI (a build with KTAPE_WITH_MPI=OFF, or a process not started by mpirun) everything
/// works as one process: rank 0 of 1, reductions leave their data as it is.
///
/// Failures: a rank that exits early makes mpirun end every rank (Open MPI's default). A rank
/// that stays alive but stops calling the collectives (a hang, a rank in another branch) would
/// block the others forever; instead every collective here waits at most
/// KTAPE_DISTRIBUTED_TIMEOUT seconds (read by init; default 300), then prints which collective
/// timed out on which rank and ends that process (exit code 70), and mpirun ends the others:
/// the communicator's state is undefined after a half-done collective, so there is nothing to
/// recover. (A watchdog thread keeps the deadline; the collectives are MPI's blocking ones.)
/// Collectives must be called from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/ndarray.hpp"
#include "engine/tensor.hpp"
#include "ops/collective.hpp"
#include "optim/optimizers.hpp"

namespace ktape::distributed {

using ktape::ReduceOp;

/// Starts MPI (thread level serialized) when the process was launched by an MPI launcher
/// (Open MPI's, or a PMI/PMIx one) and ktape was built with MPI; otherwise one process.
/// Idempotent. Returns size().
int init();
/// Ends MPI if init started it (after a barrier). Safe without init and when called twice.
void finalize();
/// Whether this build has MPI (KTAPE_WITH_MPI).
bool built_with_mpi();
/// Whether init started MPI (size() may still be 1: mpirun -np 1).
bool mpi_active();
int rank();        ///< 0-based; 0 before init
int size();        ///< 1 before init
int local_rank();  ///< the rank among the processes on this machine
int local_size();
/// This machine's cores divided among its ranks (at least 1): a kernel thread count that does
/// not oversubscribe a machine several ranks share (oneTBB further keeps within a rank's CPU
/// binding). The examples use it when neither --threads nor KTAPE_NUM_THREADS is given.
int threads_per_rank();
/// The ranks of the job (MPI_COMM_WORLD), for ktape::allreduce.
std::shared_ptr<const Communicator> communicator();
/// The collectives' timeout in seconds: KTAPE_DISTRIBUTED_TIMEOUT, default 300.
double timeout_seconds();

/// Sets every variable to root's value (after init, before training). ValueError if a
/// variable is not a variable, or (on the rank that differs) if the ranks' variables differ in
/// number, shape or dtype, naming it.
void broadcast_variables(const std::vector<Tensor>& variables, int root = 0);
/// root's array on every rank (same shape and dtype everywhere, else ValueError).
NDArray broadcast(const NDArray& x, int root = 0);
/// The elementwise sum or average over the ranks of float32/float64 arrays of one shape.
NDArray allreduce(const NDArray& x, ReduceOp op = ReduceOp::average);
std::vector<double> allreduce(const std::vector<double>& x, ReduceOp op = ReduceOp::sum);
/// In the graph (see ops/collective.hpp): reduced when the Function runs.
Tensor allreduce(const Tensor& x, ReduceOp op = ReduceOp::average);
std::vector<Tensor> allreduce(const std::vector<Tensor>& xs, ReduceOp op = ReduceOp::average,
                              std::int64_t bucket_bytes = 4 << 20);
/// Waits until every rank has called it.
void barrier();
/// The bytes of root's file, on every rank: root reads `path` (IOError if it cannot), the others
/// receive it. For checkpoints that live on rank 0's machine only.
std::string broadcast_file(const std::string& path, int root = 0);

struct DistributedOptions {
  ReduceOp op = ReduceOp::average;
  std::int64_t bucket_bytes = 4 << 20;  ///< gradients are reduced in buckets of about this size
};
/// Horovod's DistributedOptimizer: `opt`'s get_updates averages the gradients (after its
/// clipping, as Horovod wraps get_gradients) over every rank, in buckets, inside the step, then
/// applies its own rule. Returns opt. With one rank it changes nothing.
std::unique_ptr<optimizers::Optimizer> distributed_optimizer(
    std::unique_ptr<optimizers::Optimizer> opt, const DistributedOptions& options = {});
optimizers::Optimizer& distributed_optimizer(optimizers::Optimizer& opt,
                                             const DistributedOptions& options = {});

/// This rank's part of `order` when it is cut into global batches of size() * batch samples and
/// each global batch into size() slices: rank r takes slice r of every batch, so that N ranks
/// with batch b see, step by step, the samples of one process with batch N * b. A last global
/// batch of L < N * b samples is split as evenly as possible (slices differ by at most one
/// sample); when L < N it is dropped on every rank (a rank needs a sample to take a step). The
/// shard goes to `shard` (cleared first) and the per-step slice sizes to `batches`. `weights`,
/// if given, gets each step's loss weight count * N / L (1 for full batches): a rank that
/// multiplies its mean loss by it makes the averaged gradient the mean over all L samples even
/// when the slices differ in size.
void shard_batches(const std::vector<std::int64_t>& order, std::int64_t batch,
                   std::vector<std::int64_t>& shard, std::vector<std::int64_t>& batches,
                   std::vector<double>* weights = nullptr);

}  // namespace ktape::distributed
