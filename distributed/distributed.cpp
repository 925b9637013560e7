#include "distributed/distributed.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "engine/errors.hpp"
#include "ops/core.hpp"

#if KTAPE_WITH_MPI
#include <mpi.h>
#endif

namespace ktape::distributed {

namespace K = ktape::backend;

namespace {

struct State {
  bool mpi = false;      // init set up the group on MPI
  bool started = false;  // ... and started MPI itself (else the program had)
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  double timeout = 300;  // timeout_seconds() when init ran
};
State g_state;
[[maybe_unused]] std::mutex g_mu;  // one collective at a time, and init/finalize

[[maybe_unused]] std::string where() {
  return "ktape::distributed (rank " + std::to_string(g_state.rank) + ")";
}

#if KTAPE_WITH_MPI

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::float32:
      return MPI_FLOAT;
    case DType::float64:
      return MPI_DOUBLE;
    default:
      throw TypeError(where() + ": allreduce needs float32 or float64 data, got " +
                      std::string(dtype_name(d)));
  }
}

// The collectives' timeout: a thread that sleeps until the deadline of the collective in
// progress and, if it is still in progress then, reports it and ends the process (exit code 70;
// mpirun then ends every rank). The collectives themselves are MPI's blocking ones (their
// shared-memory algorithms: an MLP step on 2 ranks took 2.52 ms with MPI_Iallreduce polled by
// MPI_Test, 2.16 ms with MPI_Allreduce). Arming allocates nothing: the description is kept as
// pieces and formatted only when the timeout fires.
class Watchdog {
 public:
  ~Watchdog() {
    {
      const std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  void arm(const char* what, std::int64_t count, const char* unit) {
    const std::lock_guard lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    what_ = what, count_ = count, unit_ = unit;
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(g_state.timeout));
    armed_ = true;
    if (idle_) cv_.notify_one();  // a thread already waiting for a deadline re-reads it then
  }
  void disarm() {
    const std::lock_guard lock(mu_);
    armed_ = false;
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      if (!armed_) {
        idle_ = true;
        cv_.wait(lock);
        idle_ = false;
        continue;
      }
      if (std::chrono::steady_clock::now() < deadline_) {
        cv_.wait_until(lock, deadline_);
        continue;
      }
      std::fprintf(stderr,
                   "%s: %s%s%s had no answer from every rank within %g s "
                   "(KTAPE_DISTRIBUTED_TIMEOUT): a rank has died or stopped calling the "
                   "training step. Ending this rank (exit code 70); mpirun ends the others.\n",
                   where().c_str(), what_,
                   count_ >= 0 ? (" of " + std::to_string(count_) + " ").c_str() : "",
                   count_ >= 0 ? unit_ : "", g_state.timeout);
      std::fflush(stderr);
      std::_Exit(70);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  bool armed_ = false, idle_ = false, stop_ = false;
  const char* what_ = "";
  const char* unit_ = "";
  std::int64_t count_ = -1;
  std::chrono::steady_clock::time_point deadline_;
};
Watchdog g_watchdog;

// Runs a blocking collective under the watchdog.
template <class F>
void guarded(const char* what, std::int64_t count, const char* unit, F f) {
  g_watchdog.arm(what, count, unit);
  f();
  g_watchdog.disarm();
}

// Large arrays go in pieces of at most INT_MAX elements (MPI counts are int).
template <class F>
void in_pieces(std::int64_t count, std::size_t elem, char* p, F f) {
  const std::int64_t piece = INT_MAX / 2;
  for (std::int64_t off = 0; off < count; off += piece)
    f(p + static_cast<std::size_t>(off) * elem, static_cast<int>(std::min(piece, count - off)));
}

void sum_in_place(void* data, std::int64_t count, DType dtype) {
  const MPI_Datatype t = mpi_type(dtype);
  const std::lock_guard lock(g_mu);
  // First every rank's count and dtype, in one small collective (max of x and of -x gives the
  // largest and the smallest): ranks that disagree would otherwise sum unrelated data, or
  // truncate. All ranks see the same extremes, so all throw together.
  std::int64_t shape[4] = {count, -count, static_cast<std::int64_t>(dtype),
                           -static_cast<std::int64_t>(dtype)};
  guarded("the size check of an allreduce", count, dtype_name(dtype).data(),
          [&] { MPI_Allreduce(MPI_IN_PLACE, shape, 4, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD); });
  if (shape[0] != -shape[1] || shape[2] != -shape[3])
    throw ValueError(where() + ": an allreduce got " + std::to_string(count) + " " +
                     std::string(dtype_name(dtype)) + " values here, but between " +
                     std::to_string(-shape[1]) + " and " + std::to_string(shape[0]) +
                     " values (or another dtype) on other ranks: every rank must reduce tensors "
                     "of one shape and dtype (are the ranks fed batches of different sizes to a "
                     "reduction of per-sample values?)");
  in_pieces(count, dtype_size(dtype), static_cast<char*>(data), [&](char* p, int n) {
    guarded("an allreduce", n, dtype_name(dtype).data(),
            [&] { MPI_Allreduce(MPI_IN_PLACE, p, n, t, MPI_SUM, MPI_COMM_WORLD); });
  });
}

void bcast_bytes(void* data, std::int64_t bytes, int root, const std::string& what) {
  const std::lock_guard lock(g_mu);
  in_pieces(bytes, 1, static_cast<char*>(data), [&](char* p, int n) {
    guarded(what.c_str(), n, "bytes", [&] { MPI_Bcast(p, n, MPI_BYTE, root, MPI_COMM_WORLD); });
  });
}

// Whether `flag` holds on any rank.
bool any_rank(bool flag, const char* what) {
  int v = flag ? 1 : 0;
  const std::lock_guard lock(g_mu);
  guarded(what, -1, "",
          [&] { MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD); });
  return v != 0;
}

#else

void sum_in_place(void*, std::int64_t, DType) {}
void bcast_bytes(void*, std::int64_t, int, const std::string&) {}
bool any_rank(bool flag, const char*) { return flag; }

#endif

class WorldCommunicator final : public Communicator {
 public:
  int rank() const override { return g_state.rank; }
  int size() const override { return g_state.size; }
  void allreduce_sum(void* data, std::int64_t count, DType dtype) const override {
    if (g_state.size > 1) sum_in_place(data, count, dtype);
  }
};

void check_root(int root, const char* fn) {
  if (root < 0 || root >= g_state.size)
    throw ValueError(std::string("ktape::distributed::") + fn + ": root " + std::to_string(root) +
                     " is not a rank of " + std::to_string(g_state.size));
}

// Every rank's description of its arrays must equal root's: root's is broadcast and compared,
// and whether any rank differs is reduced, so that every rank throws (none goes on to the next
// collective alone).
void check_same_everywhere(const std::vector<std::int64_t>& mine, int root, const char* fn,
                           const std::vector<std::string>& names) {
  std::int64_t n = static_cast<std::int64_t>(mine.size());
  bcast_bytes(&n, sizeof n, root, std::string(fn) + " (sizes)");
  std::vector<std::int64_t> theirs(static_cast<std::size_t>(n));
  if (g_state.rank == root) theirs = mine;
  bcast_bytes(theirs.data(), n * 8, root, std::string(fn) + " (shapes)");
  const bool differs = theirs != mine;
  if (!any_rank(differs, fn)) return;
  std::string which;
  for (const auto& s : names) which += (which.empty() ? "" : ", ") + s;
  throw ValueError("ktape::distributed::" + std::string(fn) + ": the ranks' arrays differ in " +
                   "number, shape or dtype from root " + std::to_string(root) + "'s (rank " +
                   std::to_string(g_state.rank) + (differs ? " differs" : " matches") +
                   "; it has: " + which + ")");
}

std::vector<std::int64_t> describe(const NDArray& a) {
  std::vector<std::int64_t> d{static_cast<std::int64_t>(a.dtype()), a.shape().ndim()};
  for (auto s : a.shape().dims()) d.push_back(s);
  return d;
}

}  // namespace

int init() {
#if KTAPE_WITH_MPI
  const std::lock_guard lock(g_mu);
  int started = 0, ended = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&ended);
  if (g_state.mpi || !launched_by_mpi()) return g_state.size;
  if (ended) throw Error("ktape::distributed::init: MPI was finalized; it cannot start again");
  const double timeout = timeout_seconds();  // a bad value throws before anything starts
  if (!started) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  }
  g_state.mpi = true;
  g_state.started = !started;
  g_state.timeout = timeout;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_state.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_state.size);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_state.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &g_state.local_rank);
  MPI_Comm_size(local, &g_state.local_size);
  MPI_Comm_free(&local);
#endif
  return g_state.size;
}

void finalize() {
#if KTAPE_WITH_MPI
  if (!g_state.mpi) return;
  barrier();
  const std::lock_guard lock(g_mu);
  int ended = 0;
  MPI_Finalized(&ended);
  if (!ended && g_state.started) MPI_Finalize();
  g_state = State{};
#endif
}

bool built_with_mpi() { return KTAPE_WITH_MPI != 0; }
bool mpi_active() { return g_state.mpi; }
int rank() { return g_state.rank; }
int size() { return g_state.size; }
int local_rank() { return g_state.local_rank; }
int local_size() { return g_state.local_size; }

int threads_per_rank() {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, g_state.local_size));
}

std::shared_ptr<const Communicator> communicator() {
  static const auto world = std::make_shared<const WorldCommunicator>();
  return world;
}

double timeout_seconds() {
  const char* v = std::getenv("KTAPE_DISTRIBUTED_TIMEOUT");
  if (v == nullptr || *v == '\0') return 300;
  char* end = nullptr;
  const double t = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(t > 0))
    throw ValueError("KTAPE_DISTRIBUTED_TIMEOUT must be a positive number of seconds, got '" +
                     std::string(v) + "'");
  return t;
}

void barrier() {
#if KTAPE_WITH_MPI
  if (!g_state.mpi || g_state.size == 1) return;
  const std::lock_guard lock(g_mu);
  guarded("a barrier", -1, "", [&] { MPI_Barrier(MPI_COMM_WORLD); });
#endif
}

NDArray broadcast(const NDArray& x, int root) {
  check_root(root, "broadcast");
  if (!x.defined()) throw ValueError("ktape::distributed::broadcast: x is an empty NDArray");
  if (g_state.size == 1) return x;
  check_same_everywhere(describe(x), root, "broadcast", {x.shape().str()});
  NDArray out = x.clone();
  bcast_bytes(out.raw_data(), static_cast<std::int64_t>(out.nbytes()), root, "a broadcast");
  return out;
}

void broadcast_variables(const std::vector<Tensor>& variables, int root) {
  check_root(root, "broadcast_variables");
  std::vector<std::int64_t> desc;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < variables.size(); ++i) {
    const Tensor& v = variables[i];
    if (!v.defined() || !K::is_variable(v))
      throw ValueError("ktape::distributed::broadcast_variables: variables[" + std::to_string(i) +
                       "] is not a variable");
    names.push_back(v.name() + " " + v.shape().str());
    desc.push_back(static_cast<std::int64_t>(v.dtype()));
    desc.push_back(v.shape().ndim());
    for (auto s : v.shape().dims()) desc.push_back(s);
  }
  if (g_state.size == 1) return;
  check_same_everywhere(desc, root, "broadcast_variables", names);
  std::vector<std::pair<Tensor, NDArray>> values;
  for (const Tensor& v : variables) {
    NDArray a = K::get_value(v);
    bcast_bytes(a.raw_data(), static_cast<std::int64_t>(a.nbytes()), root,
                "a broadcast of variable " + v.name());
    values.emplace_back(v, std::move(a));
  }
  K::batch_set_value(values);
}

NDArray allreduce(const NDArray& x, ReduceOp op) {
  if (!x.defined()) throw ValueError("ktape::distributed::allreduce: x is an empty NDArray");
  if (x.dtype() != DType::float32 && x.dtype() != DType::float64)
    throw TypeError("ktape::distributed::allreduce: x must be float32 or float64, got " +
                    std::string(dtype_name(x.dtype())));
  NDArray out = x.clone();
  if (g_state.size == 1) return out;
  sum_in_place(out.raw_data(), out.size(), out.dtype());  // checks every rank's count and dtype
  if (op == ReduceOp::average) {
    const double f = 1.0 / g_state.size;
    if (out.dtype() == DType::float32)
      for (std::int64_t i = 0; i < out.size(); ++i) out.data<float>()[i] *= static_cast<float>(f);
    else
      for (std::int64_t i = 0; i < out.size(); ++i) out.data<double>()[i] *= f;
  }
  return out;
}

std::vector<double> allreduce(const std::vector<double>& x, ReduceOp op) {
  NDArray a(Shape{static_cast<std::int64_t>(x.size())}, DType::float64);
  std::copy(x.begin(), x.end(), a.data<double>());
  const NDArray r = allreduce(a, op);
  return std::vector<double>(r.data<double>(), r.data<double>() + r.size());
}

Tensor allreduce(const Tensor& x, ReduceOp op) { return ktape::allreduce(x, communicator(), op); }

std::vector<Tensor> allreduce(const std::vector<Tensor>& xs, ReduceOp op,
                              std::int64_t bucket_bytes) {
  return ktape::allreduce(xs, communicator(), op, bucket_bytes);
}

std::string broadcast_file(const std::string& path, int root) {
  check_root(root, "broadcast_file");
  std::string bytes;
  std::int64_t n = -1;
  if (g_state.rank == root) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      if (!in.bad()) n = static_cast<std::int64_t>(bytes.size());
    }
  }
  if (g_state.size > 1) bcast_bytes(&n, sizeof n, root, "a broadcast of " + path + "'s size");
  if (n < 0)
    throw IOError("ktape::distributed::broadcast_file: rank " + std::to_string(root) +
                  " cannot read '" + path + "'");
  if (g_state.size == 1) return bytes;
  bytes.resize(static_cast<std::size_t>(n));
  bcast_bytes(bytes.data(), n, root, "a broadcast of " + path);
  return bytes;
}

std::unique_ptr<optimizers::Optimizer> distributed_optimizer(
    std::unique_ptr<optimizers::Optimizer> opt, const DistributedOptions& options) {
  if (!opt) throw ValueError("ktape::distributed::distributed_optimizer: the optimizer is null");
  distributed_optimizer(*opt, options);
  return opt;
}

optimizers::Optimizer& distributed_optimizer(optimizers::Optimizer& opt,
                                             const DistributedOptions& options) {
  if (options.bucket_bytes <= 0)
    throw ValueError(
        "ktape::distributed::distributed_optimizer: bucket_bytes must be positive, "
        "got " +
        std::to_string(options.bucket_bytes));
  opt.set_gradient_transform([options](std::vector<Tensor> grads, const std::vector<Tensor>&) {
    return ktape::allreduce(grads, communicator(), options.op, options.bucket_bytes);
  });
  return opt;
}

void shard_batches(const std::vector<std::int64_t>& order, std::int64_t batch,
                   std::vector<std::int64_t>& shard, std::vector<std::int64_t>& batches,
                   std::vector<double>* weights) {
  if (batch <= 0)
    throw ValueError("ktape::distributed::shard_batches: batch must be positive, got " +
                     std::to_string(batch));
  shard.clear();
  batches.clear();
  if (weights) weights->clear();
  const auto n = static_cast<std::int64_t>(order.size());
  const std::int64_t ranks = g_state.size, r = g_state.rank, global = ranks * batch;
  for (std::int64_t start = 0; start < n; start += global) {
    const std::int64_t len = std::min(global, n - start);
    if (len < ranks) break;
    // Slice r of [start, start + len): sizes len / ranks, the first len % ranks one larger.
    const std::int64_t base = len / ranks, extra = len % ranks;
    const std::int64_t from = start + r * base + std::min(r, extra);
    const std::int64_t count = base + (r < extra ? 1 : 0);
    shard.insert(shard.end(), order.begin() + from, order.begin() + from + count);
    batches.push_back(count);
    if (weights) weights->push_back(static_cast<double>(count * ranks) / static_cast<double>(len));
  }
}

}  // namespace ktape::distributed
