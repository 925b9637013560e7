// Reference kernels for softmax, the fused softmax cross-entropy, one_hot and random ops.
// Softmax/LogSoftmax attrs: ints = {axis}. SparseSoftmaxCE(labels, logits): class axis last.
// OneHot attrs: ints = {depth}. Random ops attrs: floats = {a, b} (low/high or mean/stddev).
// DropoutMask attrs: floats = {level}; the mask holds 0 or 1/(1-level).
#include <cmath>
#include <limits>
#include <string>

#include "engine/backend.hpp"
#include "engine/errors.hpp"
#include "engine/random.hpp"
#include "engine/saturate.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/functors.hpp"
#include "ops/kernels/reference/reference.hpp"
#include "ops/kernels/softmax.hpp"

namespace ktape::kernels {

std::int64_t read_index(const ArrayRef& a, std::int64_t i) {
  return visit_dtype(a.dtype, [&](auto t) -> std::int64_t {
    using T = decltype(t);
    // Float indices saturate and NaN reads as -1 (outside every range): never UB.
    const auto v = static_cast<Compute<T>>(ptr<T>(a)[i]);
    if constexpr (std::is_floating_point_v<decltype(v)>)
      if (std::isnan(v)) return std::int64_t{-1};  // out of every range: an error or a zero row
    return saturate_cast<std::int64_t>(v);
  });
}

std::int64_t gather_row(const ArrayRef& indices, std::int64_t i, std::int64_t rows) {
  const std::int64_t r = read_index(indices, i);
  if (r < 0 || r >= rows)
    throw ValueError("K::gather: index " + std::to_string(r) + " at position " + std::to_string(i) +
                     " is out of range [0, " + std::to_string(rows) + ")");
  return r;
}

std::int64_t sparse_ce_label(const ArrayRef& labels, std::int64_t r, std::int64_t n_cls) {
  const std::int64_t t = read_index(labels, r);
  if (t < 0 || t >= n_cls)
    throw ValueError("sparse_categorical_crossentropy: target " + std::to_string(t) + " at row " +
                     std::to_string(r) + " is out of range [0, " + std::to_string(n_cls) + ")");
  return t;
}

namespace {

template <class T, bool Log>
void softmax_kernel(const KernelCall& c) {
  const ArrayRef& in = c.in[0];
  std::int64_t outer, n, inner;
  split_axis(in.dims, in.ndim, attrs::Axis::of(*c.attrs).axis, outer, n, inner);
  const T* x = ptr<T>(in);
  T* y = ptr<T>(c.out);
  if (inner == 1) return softmax_rows<T, Log>(x, y, outer, n);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t k = 0; k < inner; ++k) {
      const std::int64_t base = o * n * inner + k;
      softmax_row<T, Log>(x + base, y + base, n, inner);
    }
}

// loss[i] = logsumexp(logits[i, :]) - logits[i, label[i]]
template <class T>
void sparse_softmax_ce_kernel(const KernelCall& c) {
  const ArrayRef& logits = c.in[1];
  const std::int64_t n_cls = logits.dims[logits.ndim - 1];
  const T* z = ptr<T>(logits);
  T* y = ptr<T>(c.out);
  sparse_softmax_ce_rows(z, y, c.out.size, n_cls,
                         [&](std::int64_t r) { return sparse_ce_label(c.in[0], r, n_cls); });
}

template <class T>
void one_hot_kernel(const KernelCall& c) {
  const std::int64_t depth = attrs::OneHot::of(*c.attrs).depth;
  T* y = ptr<T>(c.out);
  for (std::int64_t i = 0; i < c.out.size; ++i) y[i] = static_cast<T>(Compute<T>(0));
  for (std::int64_t r = 0; r < c.in[0].size; ++r) {
    const std::int64_t t = read_index(c.in[0], r);
    if (t >= 0 && t < depth) y[r * depth + t] = static_cast<T>(Compute<T>(1));
  }
}

template <class T, int Kind>  // 0 uniform, 1 normal, 2 truncated normal, 3 binomial (a = p)
void random_kernel(const KernelCall& c) {
  const auto random_attrs = attrs::Random::of(*c.attrs);
  const auto a = random_attrs.a;
  const auto b = random_attrs.b;
  T* y = ptr<T>(c.out);
  for (std::int64_t i = 0; i < c.out.size; ++i) {
    const double v = rng::draw<Kind>(c.seed, c.counter, static_cast<std::uint64_t>(i), a, b);
    y[i] = static_cast<T>(static_cast<Compute<T>>(v));
  }
}

template <class T>
void dropout_mask_kernel(const KernelCall& c) {
  const double level = attrs::Dropout::of(*c.attrs).level;
  const double keep = 1.0 - level;
  const auto scale = static_cast<Compute<T>>(1.0 / keep);
  T* y = ptr<T>(c.out);
  const std::uint64_t key = rng::stream_key(c.seed, c.counter);
  for (std::int64_t i = 0; i < c.out.size; ++i)
    y[i] = static_cast<T>(
        rng::uniform_at(key, static_cast<std::uint64_t>(i)) < keep ? scale : Compute<T>(0));
}

template <class... Ts>
struct TypeList {};

template <class... Ts>
void reg(Backend& b, TypeList<Ts...>) {
  (b.set(Op::Softmax, dtype_of<Ts>, &softmax_kernel<Ts, false>), ...);
  (b.set(Op::LogSoftmax, dtype_of<Ts>, &softmax_kernel<Ts, true>), ...);
  (b.set(Op::SparseSoftmaxCE, dtype_of<Ts>, &sparse_softmax_ce_kernel<Ts>), ...);
  (b.set(Op::OneHot, dtype_of<Ts>, &one_hot_kernel<Ts>), ...);
  (b.set(Op::RandomUniform, dtype_of<Ts>, &random_kernel<Ts, 0>), ...);
  (b.set(Op::RandomNormal, dtype_of<Ts>, &random_kernel<Ts, 1>), ...);
  (b.set(Op::TruncatedNormal, dtype_of<Ts>, &random_kernel<Ts, 2>), ...);
  (b.set(Op::RandomBinomial, dtype_of<Ts>, &random_kernel<Ts, 3>), ...);
  (b.set(Op::DropoutMask, dtype_of<Ts>, &dropout_mask_kernel<Ts>), ...);
}

}  // namespace

void register_reference_nn(Backend& b) { reg(b, TypeList<Half, float, double>{}); }

}  // namespace ktape::kernels
