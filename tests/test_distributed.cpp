// ktape/distributed (distributed/distributed.hpp). ctest runs this file twice: as one process
// (rank 0 of 1, every reduction the identity) and under `mpirun -np 2` (target
// Distributed.TwoProcesses), where every rank runs every test and any rank's failure fails the
// run. Expected values are formulas of the rank and the size written out below (sums of
// rank-dependent contributions), and, for training, the same model trained by one process on
// the global batch in the same program (a plain optimizer, no collective).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <vector>

#include "distributed/distributed.hpp"
#include "ktape/ktape.hpp"
#include "test_util.hpp"

namespace {

namespace K = ktape::backend;
namespace D = ktape::distributed;
namespace O = ktape::optimizers;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;
using ktape::Tensor;

// Every test sees MPI started (when launched by mpirun) and the expected group size.
class DistributedEnv : public ::testing::Environment {
 public:
  void SetUp() override { D::init(); }
  void TearDown() override { D::finalize(); }
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new DistributedEnv);

int expected_size() {
  const char* v = std::getenv("OMPI_COMM_WORLD_SIZE");
  return (v && D::built_with_mpi()) ? std::atoi(v) : 1;
}

TEST(Distributed, RankAndSize) {
  EXPECT_EQ(D::size(), expected_size());
  EXPECT_GE(D::rank(), 0);
  EXPECT_LT(D::rank(), D::size());
  EXPECT_GE(D::local_rank(), 0);
  EXPECT_LT(D::local_rank(), D::local_size());
  EXPECT_LE(D::local_size(), D::size());
  EXPECT_EQ(D::communicator()->size(), D::size());
  EXPECT_EQ(D::communicator()->rank(), D::rank());
}

TEST(Distributed, AllreduceOfArrays) {
  // Rank r contributes (r + 1) * [1, -2, 0.5]: the sum is N(N+1)/2 times that vector.
  const double r = D::rank(), n = D::size(), tri = n * (n + 1) / 2;
  for (DType dt : {DType::float32, DType::float64}) {
    const NDArray x = NDArray::from_values({r + 1, -2 * (r + 1), 0.5 * (r + 1)}, Shape{3}, dt);
    const NDArray s = D::allreduce(x, D::ReduceOp::sum);
    const NDArray a = D::allreduce(x, D::ReduceOp::average);
    const std::vector<double> want{1, -2, 0.5};
    for (int i = 0; i < 3; ++i) {
      EXPECT_DOUBLE_EQ(s.item(i), tri * want[static_cast<std::size_t>(i)]);
      EXPECT_NEAR(a.item(i), tri / n * want[static_cast<std::size_t>(i)], 1e-6);
    }
  }
  const auto sums = D::allreduce(std::vector<double>{r, 1});
  EXPECT_DOUBLE_EQ(sums[0], n * (n - 1) / 2);
  EXPECT_DOUBLE_EQ(sums[1], n);
  EXPECT_THROW((void)D::allreduce(NDArray::full(Shape{2}, 1, DType::int32)), ktape::TypeError);
}

TEST(Distributed, BroadcastVariablesGivesRootsValues) {
  const double r = D::rank();
  auto a =
      K::variable(NDArray::from_values({10 + r, 20 + r}, Shape{2}, DType::float64), {.name = "a"});
  auto b = K::variable(NDArray::full(Shape{2, 3}, 5 * r, DType::float64), {.name = "b"});
  const int root = D::size() - 1;
  D::broadcast_variables(std::vector<Tensor>{a, b}, root);
  EXPECT_DOUBLE_EQ(K::get_value(a).item(0), 10 + root);
  EXPECT_DOUBLE_EQ(K::get_value(a).item(1), 20 + root);
  for (int i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(K::get_value(b).item(i), 5.0 * root);
  EXPECT_THROW(D::broadcast_variables(std::vector<Tensor>{a}, D::size()), ktape::ValueError);
  EXPECT_THROW(D::broadcast_variables(std::vector<Tensor>{K::constant(1.0)}), ktape::ValueError);
  const NDArray got = D::broadcast(NDArray::full(Shape{4}, r), 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.item(i), 0.0);
}

TEST(Distributed, AllreduceInsideAFunctionAndItsGradient) {
  // y = sum(allreduce_avg(x) * c) with c = r + 1 fed per rank: y's value is the same on every
  // rank, sum over i of mean_r(x_r)_i * c; its gradient for x on each rank is mean_r(c_r) =
  // (N + 1) / 2 (the gradient rule averages the incoming gradients).
  const double r = D::rank(), n = D::size();
  auto x = K::placeholder(Shape{3}, {.dtype = "float64"});
  auto c = K::placeholder(Shape{}, {.dtype = "float64"});
  auto y = K::sum(D::allreduce(x) * c);
  auto g = K::gradients(y, {x})[0];
  auto f = K::function(std::vector<Tensor>{x, c}, std::vector<Tensor>{y, g});
  // x_r = (r, 2r, 3r): its mean over ranks is (N - 1) / 2 * (1, 2, 3).
  const auto out = f({NDArray::from_values({r, 2 * r, 3 * r}, Shape{3}, DType::float64),
                      NDArray::scalar(r + 1, DType::float64)});
  EXPECT_NEAR(out[0].item(), (n - 1) / 2 * 6 * (r + 1), 1e-5);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(out[1].item(i), (n + 1) / 2, 1e-6);
  // Several tensors in buckets of 12 bytes: three buckets, the (2,) alone in the middle.
  auto p = K::placeholder(Shape{1}, {.dtype = "float64"});
  auto q = K::placeholder(Shape{2}, {.dtype = "float64"});
  auto s = K::placeholder(Shape{}, {.dtype = "float64"});
  const auto red = D::allreduce({p, q, s}, D::ReduceOp::sum, 12);
  auto h = K::function(std::vector<Tensor>{p, q, s}, red);
  const auto o = h({NDArray::from_values({r}, Shape{1}, DType::float64),
                    NDArray::from_values({1, r * r}, Shape{2}, DType::float64),
                    NDArray::scalar(2, DType::float64)});
  double squares = 0;
  for (int k = 0; k < D::size(); ++k) squares += k * k;
  EXPECT_DOUBLE_EQ(o[0].item(0), n * (n - 1) / 2);
  EXPECT_DOUBLE_EQ(o[1].item(0), n);
  EXPECT_DOUBLE_EQ(o[1].item(1), squares);
  EXPECT_DOUBLE_EQ(o[2].item(), 2 * n);
}

TEST(Distributed, RanksReducingDifferentSizesAllGetAValueError) {
  // Rank r feeds 3 + r values: with 2 ranks the counts differ, and every rank must throw (none
  // sums unrelated data or waits forever); the group works normally afterwards.
  auto x = K::placeholder(Shape{K::None}, {.dtype = "float64"});
  auto f =
      K::function(std::vector<Tensor>{x}, std::vector<Tensor>{D::allreduce(x, D::ReduceOp::sum)});
  const std::vector<NDArray> in{NDArray::full(Shape{3 + D::rank()}, 1, DType::float64)};
  if (D::size() == 1) {
    EXPECT_EQ(f(in)[0].item(2), 1.0);
  } else {
    try {
      (void)f(in);
      ADD_FAILURE() << "no error on rank " << D::rank();
    } catch (const ktape::ValueError& e) {
      EXPECT_TRUE(
          ktape::testing_util::contains(e.what(), "every rank must reduce tensors of one shape"))
          << e.what();
    }
  }
  EXPECT_EQ(D::allreduce(std::vector<double>{1})[0], D::size());
}

// A 6-4-3 softmax classifier on a fixed data set of 8 * N samples: N ranks with batch b = 2 and
// the distributed optimizer against one process with batch 2N (the plain optimizer), after 5
// steps. Float64 throughout, so only the summation order differs.
struct Net {
  Tensor x, t, loss;
  std::vector<Tensor> params;
};
Net make_net(const std::string& tag) {
  Net m;
  m.x = K::placeholder({K::None, 6}, {.dtype = "float64"});
  m.t = K::placeholder({K::None}, {.dtype = "int32"});
  auto w1 = K::random_uniform_variable({6, 4}, -0.5, 0.5,
                                       {.dtype = "float64", .seed = 3, .name = tag + "w1"});
  auto b1 = K::zeros({4}, {.dtype = "float64", .name = tag + "b1"});
  auto w2 = K::random_uniform_variable({4, 3}, -0.5, 0.5,
                                       {.dtype = "float64", .seed = 4, .name = tag + "w2"});
  auto h = K::tanh(K::bias_add(K::dot(m.x, w1), b1));
  auto probs = K::softmax(K::dot(h, w2));
  m.loss = K::mean(K::sparse_categorical_crossentropy(m.t, probs));
  m.params = {w1, b1, w2};
  return m;
}

void expect_distributed_matches_global_batch(std::unique_ptr<O::Optimizer> dist,
                                             std::unique_ptr<O::Optimizer> single) {
  // 5 full global batches of 2N samples, then N + 1 samples: with 2 ranks the last one splits
  // 2 + 1, and the loss weights (4/3 and 2/3) must make it the mean over the 3 samples.
  const int n = D::size(), r = D::rank(), b = 2, steps = 5;
  const std::int64_t samples = static_cast<std::int64_t>(steps) * b * n + n + 1;
  NDArray xs(Shape{samples, 6}, DType::float64);
  NDArray ts(Shape{samples}, DType::int32);
  for (std::int64_t i = 0; i < samples; ++i) {
    for (int j = 0; j < 6; ++j) xs.data<double>()[i * 6 + j] = std::sin(0.37 * i + 1.3 * j);
    ts.data<std::int32_t>()[i] = static_cast<std::int32_t>((i * 7) % 3);
  }
  Net md = make_net("dist_"), ms = make_net("single_");
  D::distributed_optimizer(*dist);
  auto w = K::placeholder(Shape{}, {.dtype = "float64"});
  auto fd = K::function(std::vector<Tensor>{md.x, md.t, w}, std::vector<Tensor>{md.loss},
                        dist->get_updates(md.loss * w, md.params));
  auto fs = K::function(std::vector<Tensor>{ms.x, ms.t}, std::vector<Tensor>{ms.loss},
                        single->get_updates(ms.loss, ms.params));
  D::broadcast_variables(md.params);
  auto rows = [&](const std::int64_t* which, std::int64_t count) {
    NDArray x(Shape{count, 6}, DType::float64);
    NDArray t(Shape{count}, DType::int32);
    for (std::int64_t i = 0; i < count; ++i) {
      std::copy_n(xs.data<double>() + which[i] * 6, 6, x.data<double>() + i * 6);
      t.data<std::int32_t>()[i] = ts.data<std::int32_t>()[which[i]];
    }
    return std::vector<NDArray>{x, t};
  };
  std::vector<std::int64_t> order(static_cast<std::size_t>(samples)), shard, batches;
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> weights;
  D::shard_batches(order, b, shard, batches, &weights);
  ASSERT_EQ(batches.size(), static_cast<std::size_t>(steps + 1));
  std::int64_t at = 0;
  for (std::size_t s = 0; s < batches.size(); ++s) {
    auto in = rows(shard.data() + at, batches[s]);
    in.push_back(NDArray::scalar(weights[s], DType::float64));
    (void)fd(in);
    at += batches[s];
    const std::int64_t start = static_cast<std::int64_t>(s) * b * n;
    (void)fs(rows(order.data() + start, std::min<std::int64_t>(b * n, samples - start)));
  }
  for (std::size_t i = 0; i < md.params.size(); ++i) {
    const NDArray got = K::get_value(md.params[i]), want = K::get_value(ms.params[i]);
    for (std::int64_t k = 0; k < got.size(); ++k)
      EXPECT_NEAR(got.item(k), want.item(k), 1e-12 + 1e-9 * std::fabs(want.item(k)))
          << md.params[i].name() << "[" << k << "] on rank " << r << " of " << n;
  }
  // The weights moved (the comparison is not of untouched initial values).
  EXPECT_NE(K::get_value(md.params[1]).item(0), 0.0);
}

// Optimizer variables are floatx: float64 for these tests, restored after.
struct Float64 {
  std::string saved = K::floatx();
  Float64() { K::set_floatx("float64"); }
  ~Float64() { K::set_floatx(saved); }
};

TEST(Distributed, OptimizerOnNRanksEqualsOneProcessWithNTimesTheBatch) {
  const Float64 f64;
  expect_distributed_matches_global_batch(std::make_unique<O::SGD>(O::SGDOptions{.lr = 0.5}),
                                          std::make_unique<O::SGD>(O::SGDOptions{.lr = 0.5}));
  expect_distributed_matches_global_batch(std::make_unique<O::Adam>(O::AdamOptions{.lr = 0.05}),
                                          std::make_unique<O::Adam>(O::AdamOptions{.lr = 0.05}));
  expect_distributed_matches_global_batch(
      std::make_unique<O::SGD>(O::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true}),
      std::make_unique<O::SGD>(O::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true}));
}

TEST(Distributed, ShardsAreSlicesOfEachGlobalBatch) {
  const int n = D::size(), r = D::rank();
  std::vector<std::int64_t> order(11);
  std::iota(order.begin(), order.end(), 100);
  std::vector<std::int64_t> shard, batches;
  D::shard_batches(order, 2, shard, batches);
  // Written out for 1 and 2 ranks: global batches of 2N samples, rank r takes slice r.
  if (n == 1) {
    EXPECT_EQ(batches, (std::vector<std::int64_t>{2, 2, 2, 2, 2, 1}));
    EXPECT_EQ(shard, order);
  } else if (n == 2) {
    // [100..104) [104..108) [108..111): the last 3 split 2 + 1.
    EXPECT_EQ(batches,
              (r == 0 ? std::vector<std::int64_t>{2, 2, 2} : std::vector<std::int64_t>{2, 2, 1}));
    EXPECT_EQ(shard, (r == 0 ? std::vector<std::int64_t>{100, 101, 104, 105, 108, 109}
                             : std::vector<std::int64_t>{102, 103, 106, 107, 110}));
  }
  // Loss weights count * N / L: 1 for full batches; 2 * 2 / 3 and 1 * 2 / 3 for the last split.
  std::vector<double> weights;
  D::shard_batches(order, 2, shard, batches, &weights);
  ASSERT_EQ(weights.size(), batches.size());
  for (std::size_t i = 0; i + 1 < weights.size(); ++i) EXPECT_EQ(weights[i], 1.0);
  EXPECT_DOUBLE_EQ(weights.back(), n == 1 ? 1.0 : (r == 0 ? 4.0 / 3 : 2.0 / 3));
  // 2N + N - 1 samples: one global batch, then N - 1 samples, fewer than the ranks, dropped
  // everywhere (with one rank there is nothing left over).
  D::shard_batches(std::vector<std::int64_t>(static_cast<std::size_t>(2 * n + n - 1), 0), 2, shard,
                   batches);
  EXPECT_EQ(batches, (std::vector<std::int64_t>{2}));
  EXPECT_THROW(D::shard_batches(order, 0, shard, batches), ktape::ValueError);
}

TEST(Distributed, BroadcastFileSendsRootsBytes) {
  // Named by size and rank: the one-process run and the 2-rank run may run at once.
  auto name = [](int rank) {
    return "/tmp/ktape_test_distributed_" + std::to_string(D::size()) + "_" + std::to_string(rank) +
           ".bin";
  };
  const std::string path = name(D::rank());
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string content = "rank " + std::to_string(D::rank());
    std::fwrite(content.data(), 1, content.size(), f);
    std::fclose(f);
  }
  // Every rank names its own file; root 0's content arrives everywhere.
  EXPECT_EQ(D::broadcast_file(name(0)), "rank 0");
  EXPECT_THROW((void)D::broadcast_file("/nonexistent/ktape/file"), ktape::IOError);
  D::barrier();
  std::remove(path.c_str());
}

TEST(Distributed, Errors) {
  EXPECT_THROW((void)D::distributed_optimizer(std::unique_ptr<O::Optimizer>()), ktape::ValueError);
  O::SGD sgd;
  EXPECT_THROW((void)D::distributed_optimizer(sgd, {.bucket_bytes = 0}), ktape::ValueError);
  const auto outside = ktape::testing_util::get_env("KTAPE_DISTRIBUTED_TIMEOUT");
  ::setenv("KTAPE_DISTRIBUTED_TIMEOUT", "soon", 1);
  EXPECT_THROW((void)D::timeout_seconds(), ktape::ValueError);
  ::setenv("KTAPE_DISTRIBUTED_TIMEOUT", "2.5", 1);
  EXPECT_DOUBLE_EQ(D::timeout_seconds(), 2.5);
  ::unsetenv("KTAPE_DISTRIBUTED_TIMEOUT");
  EXPECT_DOUBLE_EQ(D::timeout_seconds(), 300);
  ktape::testing_util::restore_env("KTAPE_DISTRIBUTED_TIMEOUT", outside);
}

}  // namespace
