// Collective rows (ops/collective.hpp) on the group of this process alone (local_communicator:
// rank 0 of 1), where an allreduce, summed or averaged, is the identity: values by hand, the
// gradient rule (the same reduction of the incoming gradient), cpu/reference parity, and the
// bucketed form. Two processes under mpirun are tested in tests/test_distributed.cpp.
#include "op_rows/op_row.hpp"
#include "ops/collective.hpp"

namespace ktape::op_rows {

std::vector<OpRow> collective_rows() {
  Rows t("collective");
  Gen g(20261125);
  const auto local = ktape::local_communicator();

  t.op("allreduce_average_one_process",
       [local](const V& x) { return ktape::allreduce(x[0], local) * x[0]; }, {g.normal({3, 4})})
      .formula([](const In& in) { return naive::sq(in[0]); });
  t.values("allreduce_sum_by_hand",
           [local](const V& v) { return ktape::allreduce(v[0], local, ReduceOp::sum); },
           {f64({1.5, -2, 0, 4}, {2, 2})})
      .expect({1.5, -2, 0, 4}, {2, 2})
      .exact()
      .error("int_dtype", Err::Type, "distributed::allreduce: x must be float32 or float64",
             [local] { (void)ktape::allreduce(cst({1}, {1}, "int32"), local); })
      .error("null_communicator", Err::Value, "distributed::allreduce: the communicator is null",
             [] { (void)ktape::allreduce(cst({1}, {1}), nullptr); });
  // Buckets of 16 bytes hold two float64 values: (2, 2) alone, then the scalar and (1,) together.
  t.values("allreduce_buckets_by_hand",
           [local](const V& v) {
             const auto r = ktape::allreduce(
                 std::vector<Tensor>{v[0], K::sum(v[0]), K::slice(K::reshape(v[0], {4}), {0}, {1})},
                 local, ReduceOp::average, 16);
             return K::concatenate(
                 {K::reshape(r[0], {4}), K::reshape(r[1], {1}), K::reshape(r[2], {1})}, 0);
           },
           {f64({1, 2, 3, 4}, {2, 2})})
      .expect({1, 2, 3, 4, 10, 1}, {6})
      .gradcheck()
      .parity()
      .error("bucket_bytes", Err::Value, "distributed::allreduce: bucket_bytes must be positive",
             [local] {
               (void)ktape::allreduce(std::vector<Tensor>{cst({1}, {1})}, local, ReduceOp::sum, 0);
             });
  return t.take();
}

}  // namespace ktape::op_rows
