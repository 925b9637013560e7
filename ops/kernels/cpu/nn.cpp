// cpu softmax, log-softmax and sparse softmax cross-entropy: the reference's row arithmetic
// (ops/kernels/softmax.hpp, so the same bits), rows split over threads by the grain policy; and
// the random ops, whose element i is a pure function of (seed, call, i) (engine/random.hpp), split
// the same way; one_hot by rows.
#include "engine/backend.hpp"
#include "engine/parallel.hpp"
#include "engine/random.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/cpu/cpu.hpp"
#include "ops/kernels/reference/reference.hpp"
#include "ops/kernels/softmax.hpp"

namespace ktape::kernels {

namespace {

// Cost of one value of a row in element operations (a max, an exp, a sum, a divide).
constexpr double kSoftmaxCost = 24.0;

template <class T, bool Log>
void softmax_kernel(const KernelCall& c) {
  const ArrayRef& in = c.in[0];
  std::int64_t outer, n, inner;
  split_axis(in.dims, in.ndim, attrs::Axis::of(*c.attrs).axis, outer, n, inner);
  const T* x = ptr<T>(in);
  T* y = ptr<T>(c.out);
  parallel_for(
      outer * inner, static_cast<double>(n) * kSoftmaxCost,
      [&](std::int64_t r0, std::int64_t r1) {
        if (inner == 1) return softmax_rows<T, Log>(x + r0 * n, y + r0 * n, r1 - r0, n);
        for (std::int64_t r = r0; r < r1; ++r) {
          const std::int64_t base = (r / inner) * n * inner + r % inner;
          softmax_row<T, Log>(x + base, y + base, n, inner);
        }
      },
      /*align=*/1);
}

template <class T>
void sparse_softmax_ce_kernel(const KernelCall& c) {
  const ArrayRef& logits = c.in[1];
  const std::int64_t n_cls = logits.dims[logits.ndim - 1];
  const T* z = ptr<T>(logits);
  T* y = ptr<T>(c.out);
  // Labels are checked first, in order, so a bad one is reported as the serial kernel would.
  for (std::int64_t r = 0; r < c.out.size; ++r) sparse_ce_label(c.in[0], r, n_cls);
  parallel_for(
      c.out.size, static_cast<double>(n_cls) * kSoftmaxCost,
      [&](std::int64_t r0, std::int64_t r1) {
        sparse_softmax_ce_rows(z + r0 * n_cls, y + r0, r1 - r0, n_cls,
                               [&](std::int64_t r) { return read_index(c.in[0], r0 + r); });
      },
      /*align=*/1);
}

// RandomUniform (0), RandomNormal (1), TruncatedNormal (2), RandomBinomial (3): the reference's
// draws (rng::draw), elements split over threads. Costs against an add, from BM_Random: 4 for a
// uniform or a Bernoulli draw (64-bit mixes, vectorized), 300 for a normal (two uniforms, a log,
// a sqrt and a cos in double, scalar), 400 for a truncated one (which redraws 5 % of the time
// and checks every draw).
template <class T, int Kind>
void random_kernel(const KernelCall& c) {
  const auto r = attrs::Random::of(*c.attrs);
  const double a = r.a, b = r.b;
  T* y = ptr<T>(c.out);
  constexpr double kCost = Kind == 1 ? 300.0 : Kind == 2 ? 400.0 : 4.0;
  parallel_for(c.out.size, kCost, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i)
      y[i] =
          static_cast<T>(rng::draw<Kind>(c.seed, c.counter, static_cast<std::uint64_t>(i), a, b));
  });
}

// OneHot: the reference's kernel on ranges of the indices (a row of `depth` outputs each), each
// range a call of its own, split by the grain policy (a row's zeros and its one: 0.5 an output
// on the reference's kernel, 1,024 rows of 1,000).
void one_hot_kernel(const KernelCall& c) {
  const std::int64_t depth = attrs::OneHot::of(*c.attrs).depth;
  const KernelFn reference = reference_backend().get(Op::OneHot, c.out.dtype);
  parallel_for(
      c.in[0].size, 0.5 * static_cast<double>(depth) + 4.0,
      [&](std::int64_t r0, std::int64_t r1) {
        const std::int64_t dims[1] = {r1 - r0}, out_dims[2] = {r1 - r0, depth};
        run_part(reference, c, r0, dims, 1, r0 * depth, out_dims, 2);
      },
      1);
}

}  // namespace

void register_cpu_nn(Backend& b) {
  for (int d = 0; d < kNumDTypes; ++d)  // one_hot_kernel calls the reference's
    if (reference_backend().get(Op::OneHot, static_cast<DType>(d)))
      b.set(Op::OneHot, static_cast<DType>(d), &one_hot_kernel);
  b.set(Op::Softmax, DType::float32, &softmax_kernel<float, false>);
  b.set(Op::Softmax, DType::float64, &softmax_kernel<double, false>);
  b.set(Op::LogSoftmax, DType::float32, &softmax_kernel<float, true>);
  b.set(Op::LogSoftmax, DType::float64, &softmax_kernel<double, true>);
  b.set(Op::SparseSoftmaxCE, DType::float32, &sparse_softmax_ce_kernel<float>);
  b.set(Op::SparseSoftmaxCE, DType::float64, &sparse_softmax_ce_kernel<double>);
  b.set(Op::RandomUniform, DType::float32, &random_kernel<float, 0>);
  b.set(Op::RandomUniform, DType::float64, &random_kernel<double, 0>);
  b.set(Op::RandomNormal, DType::float32, &random_kernel<float, 1>);
  b.set(Op::RandomNormal, DType::float64, &random_kernel<double, 1>);
  b.set(Op::TruncatedNormal, DType::float32, &random_kernel<float, 2>);
  b.set(Op::TruncatedNormal, DType::float64, &random_kernel<double, 2>);
  b.set(Op::RandomBinomial, DType::float32, &random_kernel<float, 3>);
  b.set(Op::RandomBinomial, DType::float64, &random_kernel<double, 3>);
}

}  // namespace ktape::kernels
