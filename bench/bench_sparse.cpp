// Sparse benchmarks (the cpu kernels of ops/kernels/cpu/sparse.cpp against the reference's):
//   BM_Sparse/<0 to_dense, entries in row-major order, 1 the same entries shuffled, 2 the
//   gradient of ctc_label_dense_to_sparse's values>/<0 cpu, 1 reference>/<threads>:
//   0, 1: to_dense of a (2000, 1000) sparse tensor with 200,000 entries (one in five repeated;
//   indices a constant, values fed);
//   2: the labels' gradient of sum(to_dense(ctc_label_dense_to_sparse(labels (4000, 64),
//   lengths)) * w), mostly the int64 index arithmetic of ctc_label_dense_to_sparse
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "engine/graph.hpp"
#include "ktape/ktape.hpp"
#include "ops/op_util.hpp"

namespace K = ktape::backend;
using ktape::DType;
using ktape::NDArray;
using ktape::Shape;

namespace {

void BM_Sparse(benchmark::State& state) {
  const int pass = static_cast<int>(state.range(0));
  const char* be = state.range(1) == 1 ? "reference" : "cpu";
  const auto limit = ktape::bench::limit_threads(state.range(2));
  ktape::Function f;
  std::vector<ktape::Feed> ins;
  if (pass < 2) {
    const std::int64_t rows = 2000, cols = 1000, nnz = 200000;
    std::vector<std::int64_t> idx;
    std::vector<double> val;
    for (std::int64_t e = 0, p = 0; e < nnz; ++e) {
      const std::int64_t at = pass == 0 ? p : (p * 7919) % (rows * cols);
      idx.insert(idx.end(), {at / cols, at % cols});
      val.push_back(std::sin(0.37 * static_cast<double>(e)));
      p += e % 5 == 0 ? 0 : 12;
    }
    // Indices as a constant (a fed sparse value would add its check and copy to every call).
    auto v = K::placeholder({nnz});
    auto x = ktape::ops::sparse_from_parts(
        K::constant(NDArray::from_vector<std::int64_t>(idx, {nnz, 2}), {.dtype = "int64"}), v,
        ktape::make_node(ktape::Op::ShapeCarrier, {K::constant(0.0, {.shape = Shape{rows, cols}})},
                         {}, DType::float32));
    f = K::function({v}, {K::to_dense(x)}, {}, {.backend = be});
    ins.push_back(NDArray::from_values(val, {nnz}, DType::float32));
  } else {
    auto lab = K::placeholder({4000, 64});
    auto len = K::placeholder({4000}, {.dtype = "int32"});
    auto w = K::placeholder({4000, 64});
    auto d = K::to_dense(K::ctc_label_dense_to_sparse(lab, len));
    f = K::function({lab, len, w}, {K::gradients(K::sum(d * w), {lab})[0]}, {}, {.backend = be});
    NDArray lengths(Shape{4000}, DType::int32);
    for (std::int64_t i = 0; i < 4000; ++i) lengths.set_item(i, static_cast<double>(i % 65));
    ins = {NDArray::full(Shape{4000, 64}, 0.5), lengths, NDArray::full(Shape{4000, 64}, 0.25)};
  }
  std::vector<NDArray> outs;
  f.run(ins, outs);
  for (auto _ : state) f.run(ins, outs);
  static const char* what[] = {"to_dense, ordered", "to_dense, shuffled", "values' gradient"};
  state.SetLabel(std::string(what[pass]) + ", " + be + ", " +
                 ktape::bench::threads_label(state.range(2)));
}
BENCHMARK(BM_Sparse)
    ->ArgsProduct({{0, 1, 2}, {0}, {1, 2}})
    ->ArgsProduct({{0, 1, 2}, {1}, {1}})
    ->Unit(benchmark::kMicrosecond)
    ->Apply(ktape::bench::real_time_min);

}  // namespace
