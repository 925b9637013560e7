#include "ops/collective.hpp"

#include <cstring>
#include <string>

#include "engine/errors.hpp"
#include "engine/graph.hpp"
#include "engine/kernel_abi.hpp"
#include "ops/layout.hpp"
#include "ops/op_util.hpp"

namespace ktape {

namespace {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(void*, std::int64_t, DType) const override {}
};

// Allreduce(x) attrs {}: x reduced, same shape. Allreduce(x0, x1, ...): the inputs flattened and
// packed one after another (a bucket), reduced: 1-D. The node's extra holds the communicator and
// the reduction.
struct AllreduceSpec : NodeExtra {
  std::shared_ptr<const Communicator> comm;
  ReduceOp op = ReduceOp::average;
};

template <class T>
void scale(T* p, std::int64_t n, T f) {
  for (std::int64_t i = 0; i < n; ++i) p[i] *= f;
}

void allreduce_kernel(const KernelCall& c) {
  const auto& spec = static_cast<const AllreduceSpec&>(*static_cast<const NodeExtra*>(c.ctx));
  const std::int64_t n = c.out.size;
  const std::size_t elem = dtype_size(c.out.dtype);
  std::size_t at = 0;
  for (int i = 0; i < c.n_in; ++i) {
    const ArrayRef& in = c.in[i];
    const std::size_t bytes = static_cast<std::size_t>(in.size) * elem;
    if (static_cast<char*>(c.out.data) + at != in.data)
      std::memcpy(static_cast<char*>(c.out.data) + at, in.data, bytes);
    at += bytes;
  }
  spec.comm->allreduce_sum(c.out.data, n, c.out.dtype);
  const int size = spec.comm->size();
  if (spec.op != ReduceOp::average || size == 1) return;
  if (c.out.dtype == DType::float32)
    scale(static_cast<float*>(c.out.data), n, 1.0f / static_cast<float>(size));
  else
    scale(static_cast<double*>(c.out.data), n, 1.0 / static_cast<double>(size));
}

Shape allreduce_rule(const Node&, const std::vector<Shape>& in) {
  if (in.size() == 1) return in[0];
  std::int64_t total = 0;
  for (const Shape& s : in) {
    if (!s.is_fully_defined()) return Shape{None};
    total += s.num_elements();
  }
  return Shape{total};
}

Prepared prepare_allreduce(const PrepareArgs& a) {
  Prepared p;
  p.shape = allreduce_rule(a.node, a.in_shapes);
  p.ctx = std::const_pointer_cast<NodeExtra>(a.node.extra);
  p.kernel = &allreduce_kernel;
  return p;
}

Tensor make_allreduce(std::vector<Tensor> xs, std::shared_ptr<const Communicator> comm,
                      ReduceOp op) {
  auto spec = std::make_shared<AllreduceSpec>();
  spec->comm = std::move(comm);
  spec->op = op;
  const DType dt = xs[0].dtype();
  return make_node_with_extra(Op::Allreduce, std::move(xs), {}, dt, "", std::move(spec),
                              /*eager=*/true);
}

// The pieces of a packed bucket r, in the shapes of xs.
std::vector<Tensor> unpack(const Tensor& r, const std::vector<Tensor>& xs) {
  namespace K = ktape::backend;
  std::vector<Tensor> out;
  std::int64_t offset = 0;
  for (const Tensor& x : xs) {
    const Shape& s = x.shape();
    const std::int64_t count = s.num_elements();
    out.push_back(K::reshape(K::slice(r, {offset}, {count}), s.dims()));
    offset += count;
  }
  return out;
}

std::vector<Tensor> allreduce_grad(const Node& n, const Tensor&, const Tensor& g) {
  const auto& spec = static_cast<const AllreduceSpec&>(*n.extra);
  const Tensor r = make_allreduce({g}, spec.comm, spec.op);
  if (n.inputs.size() == 1) return {r};
  return unpack(r, n.inputs);
}

}  // namespace

std::shared_ptr<const Communicator> local_communicator() {
  static const auto local = std::make_shared<const LocalCommunicator>();
  return local;
}

namespace {
void check_dtype(const Tensor& x) {
  const DType dt = x.dtype();  // a null x throws here, naming the problem
  if (dt != DType::float32 && dt != DType::float64)
    throw TypeError("distributed::allreduce: x must be float32 or float64, got " +
                    std::string(dtype_name(dt)));
}
}  // namespace

Tensor allreduce(const Tensor& x, std::shared_ptr<const Communicator> comm, ReduceOp op) {
  check_dtype(x);
  if (!comm) throw ValueError("distributed::allreduce: the communicator is null");
  return make_allreduce({x}, std::move(comm), op);
}

std::vector<Tensor> allreduce(const std::vector<Tensor>& xs,
                              std::shared_ptr<const Communicator> comm, ReduceOp op,
                              std::int64_t bucket_bytes) {
  namespace K = ktape::backend;
  if (!comm) throw ValueError("distributed::allreduce: the communicator is null");
  if (bucket_bytes <= 0)
    throw ValueError("distributed::allreduce: bucket_bytes must be positive, got " +
                     std::to_string(bucket_bytes));
  std::vector<Tensor> out(xs.size());
  // Buckets of tensors with a static shape and one dtype, in order; others go alone.
  std::vector<std::size_t> bucket;
  std::int64_t bytes = 0;
  auto flush = [&] {
    if (bucket.empty()) return;
    if (bucket.size() == 1) {
      out[bucket[0]] = allreduce(xs[bucket[0]], comm, op);
    } else {
      // One node packs the bucket (one copy in), reduces it; the pieces are views of it.
      std::vector<Tensor> in;
      for (std::size_t i : bucket) in.push_back(xs[i]);
      const std::vector<Tensor> parts = unpack(make_allreduce(in, comm, op), in);
      for (std::size_t k = 0; k < bucket.size(); ++k) out[bucket[k]] = parts[k];
    }
    bucket.clear();
    bytes = 0;
  };
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].defined()) continue;
    check_dtype(xs[i]);
    const Shape& s = xs[i].shape();
    if (!s.is_fully_defined()) {
      out[i] = allreduce(xs[i], comm, op);
      continue;
    }
    const std::int64_t b = s.num_elements() * static_cast<std::int64_t>(dtype_size(xs[i].dtype()));
    if (!bucket.empty() && (bytes + b > bucket_bytes || xs[bucket[0]].dtype() != xs[i].dtype()))
      flush();
    bucket.push_back(i);
    bytes += b;
  }
  flush();
  return out;
}

}  // namespace ktape

namespace ktape::ops {

void register_collective_ops() {
  define_op(Op::Allreduce, {.shape = &allreduce_rule,
                            .grad = &allreduce_grad,
                            .pure = false,
                            .may_throw = true,
                            .prepare = &prepare_allreduce});
}

}  // namespace ktape::ops
