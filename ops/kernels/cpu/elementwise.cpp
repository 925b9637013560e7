// cpu elementwise kernels: flat parallel loops for same-shape, scalar, trailing-broadcast (bias),
// column and outer ((rows, 1) against (w)) operands, and for selects of such operands; Eigen's
// vectorised exp/log/tanh; the generic strided loop otherwise.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/backend.hpp"
#include "engine/random.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/broadcast.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/cpu/cpu.hpp"
#include "ops/kernels/functors.hpp"

namespace ktape::kernels {

namespace {

template <class T>
using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;

// b's dims equal the trailing dims of out (a bias-like operand); returns its length.
bool is_suffix(const ArrayRef& b, const ArrayRef& out) {
  if (b.ndim > out.ndim) return false;
  for (int i = 0; i < b.ndim; ++i)
    if (b.dims[i] != out.dims[out.ndim - b.ndim + i]) return false;
  return true;
}

// b is (rows, 1) against out (rows, w): a column, one value per row (fused passes present a
// channels_first bias this way).
bool is_column(const ArrayRef& b, const ArrayRef& out) {
  return b.ndim == 2 && out.ndim == 2 && b.dims[1] == 1 && b.dims[0] == out.dims[0] &&
         out.dims[1] > 1;
}

template <class T, class F>
void binary_fast(const KernelCall& c, F f) {
  const ArrayRef& a = c.in[0];
  const ArrayRef& b = c.in[1];
  const std::int64_t n = c.out.size;
  const T* pa = ptr<T>(a);
  const T* pb = ptr<T>(b);
  using TO = std::conditional_t<std::is_same_v<decltype(f(T{}, T{})), bool>, bool, T>;
  TO* y = ptr<TO>(c.out);
  if (a.size == n && b.size == n) {
    parallel_for(n, 1.0, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) y[i] = f(pa[i], pb[i]);
    });
  } else if (a.size == n && b.size == 1) {
    const T s = pb[0];
    parallel_for(n, 1.0, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) y[i] = f(pa[i], s);
    });
  } else if (b.size == n && a.size == 1) {
    const T s = pa[0];
    parallel_for(n, 1.0, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) y[i] = f(s, pb[i]);
    });
  } else if (a.size == n && b.size > 0 && is_suffix(b, c.out)) {
    const std::int64_t w = b.size, rows = n / w;
    parallel_for(rows, static_cast<double>(w), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t j = 0; j < w; ++j) y[r * w + j] = f(pa[r * w + j], pb[j]);
    });
  } else if (b.size == n && a.size > 0 && is_suffix(a, c.out)) {
    const std::int64_t w = a.size, rows = n / w;
    parallel_for(rows, static_cast<double>(w), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t j = 0; j < w; ++j) y[r * w + j] = f(pa[j], pb[r * w + j]);
    });
  } else if (a.size == n && is_column(b, c.out)) {
    const std::int64_t w = c.out.dims[1], rows = c.out.dims[0];
    parallel_for(rows, static_cast<double>(w), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t j = 0; j < w; ++j) y[r * w + j] = f(pa[r * w + j], pb[r]);
    });
  } else if (b.size == n && is_column(a, c.out)) {
    const std::int64_t w = c.out.dims[1], rows = c.out.dims[0];
    parallel_for(rows, static_cast<double>(w), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t j = 0; j < w; ++j) y[r * w + j] = f(pa[r], pb[r * w + j]);
    });
  } else if (is_column(a, c.out) && b.size == c.out.dims[1] &&
             is_suffix(b, c.out)) {  // (rows, 1) against (w): an outer broadcast
    const std::int64_t w = c.out.dims[1], rows = c.out.dims[0];
    parallel_for(rows, static_cast<double>(w), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t j = 0; j < w; ++j) y[r * w + j] = f(pa[r], pb[j]);
    });
  } else if (is_column(b, c.out) && a.size == c.out.dims[1] && is_suffix(a, c.out)) {
    const std::int64_t w = c.out.dims[1], rows = c.out.dims[0];
    parallel_for(rows, static_cast<double>(w), [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t j = 0; j < w; ++j) y[r * w + j] = f(pa[j], pb[r]);
    });
  } else {
    binary<T, T, TO>(c, f);
  }
}

template <class T, class F>
void binary_kernel(const KernelCall& c) {
  binary_fast<T>(c, F{});
}

template <class T, class F>
void unary_loop(const KernelCall& c, F f, double cost) {
  const T* x = ptr<T>(c.in[0]);
  T* y = ptr<T>(c.out);
  parallel_for(c.out.size, cost, [&](std::int64_t i0, std::int64_t i1) {
    const F g = f;  // a local copy: its members stay in registers, and the loop vectorizes
    for (std::int64_t i = i0; i < i1; ++i) y[i] = g(x[i]);
  });
}

template <class T, int Fn>  // 0 exp, 1 log, 2 tanh, 3 sqrt
void eigen_unary(const KernelCall& c) {
  constexpr Op op = Fn == 0 ? Op::Exp : Fn == 1 ? Op::Log : Fn == 2 ? Op::Tanh : Op::Sqrt;
  const T* x = ptr<T>(c.in[0]);
  T* y = ptr<T>(c.out);
  parallel_for(c.out.size, elem_cost(op), [&](std::int64_t i0, std::int64_t i1) {
    Eigen::Map<const Arr<T>> X(x + i0, i1 - i0);
    Eigen::Map<Arr<T>> Y(y + i0, i1 - i0);
    if constexpr (Fn == 0)
      Y = X.exp();
    else if constexpr (Fn == 1)
      Y = X.log();
    else if constexpr (Fn == 2)
      Y = X.tanh();
    else if constexpr (Fn == 3)
      Y = X.sqrt();
    else
      Y = X.logistic();
  });
}

// Eigen's float logistic() loses relative accuracy for small outputs (x < -3); use the
// reference formula, which keeps 1-ulp-level relative error in the tail.
// Vectorized through Eigen's exp on -|x|, then 1/(1+e) or e/(1+e): both keep full relative
// accuracy, including the tail x << 0.
template <class T>
void sigmoid_kernel(const KernelCall& c) {
  const T* x = ptr<T>(c.in[0]);
  T* y = ptr<T>(c.out);
  parallel_for(c.out.size, elem_cost(Op::Sigmoid), [&](std::int64_t i0, std::int64_t i1) {
    alignas(64) T buf[256];  // no heap: the exp of one block at a time
    for (std::int64_t b0 = i0; b0 < i1; b0 += 256) {
      const std::int64_t n = std::min<std::int64_t>(256, i1 - b0);
      Eigen::Map<const Arr<T>> X(x + b0, n);
      Eigen::Map<Arr<T>> E(buf, n);
      Eigen::Map<Arr<T>> Y(y + b0, n);
      E = (-X.abs()).exp();
      // x >= 0: 1 / (1 + e^-x); x < 0: e^x / (1 + e^x). A plain loop, so that the compiler
      // vectorizes the choice as a blend (Eigen 3.4's select runs one element at a time).
      const T* xb = x + b0;
      T* yb = y + b0;
      for (std::int64_t i = 0; i < n; ++i) {
        const T num = xb[i] >= T(0) ? T(1) : buf[i];
        yb[i] = num / (T(1) + buf[i]);
      }
    }
  });
}
template <class T>
void relu_kernel(const KernelCall& c) {
  const auto f = attrs::Relu::of(*c.attrs);
  if (is_plain_relu(f.alpha, f.max_value, f.threshold))
    unary_loop<T>(c, ReluPlainF{}, elem_cost(Op::Relu));
  else
    unary_loop<T>(c, ReluF{f.alpha, f.max_value, f.threshold}, elem_cost(Op::Relu));
}
template <class T>
void relu_grad_kernel(const KernelCall& c) {
  const auto f = attrs::Relu::of(*c.attrs);
  if (is_plain_relu(f.alpha, f.max_value, f.threshold))
    binary_fast<T>(c, ReluGradPlainF{});
  else
    binary_fast<T>(c, ReluGradF{f.alpha, f.max_value, f.threshold});
}
// ClipGrad(x, g): g where lo <= x <= hi, else 0, compared in double as the reference does.
template <class T>
void clip_grad_kernel(const KernelCall& c) {
  const auto clip = attrs::Clip::of(*c.attrs);
  const double lo = clip.lo, hi = clip.hi;
  binary_fast<T>(c, [lo, hi](T x, T g) {
    const double v = static_cast<double>(x);
    return v >= lo && v <= hi ? g : T(0);
  });
}
// Select(cond, a, b): flat parallel loops when every operand has the output's size or is one
// value (the learning phase choosing between two activations: K::in_train_phase), the strided
// loop otherwise. Each element is read before it is written (safe in place).
template <class T>
void select_kernel(const KernelCall& c) {
  const ArrayRef &cond = c.in[0], &a = c.in[1], &b = c.in[2];
  const std::int64_t n = c.out.size;
  auto flat = [n](const ArrayRef& x) { return x.size == n || x.size == 1; };
  if (!flat(cond) || !flat(a) || !flat(b)) return select_strided<T>(c);
  const bool* pc = ptr<bool>(cond);
  const T* pa = ptr<T>(a);
  const T* pb = ptr<T>(b);
  T* y = ptr<T>(c.out);
  if (cond.size == 1 && n > 1) {  // a copy of one operand (or of its one value)
    const ArrayRef& pick = pc[0] ? a : b;
    const T* src = ptr<T>(pick);
    const bool whole = pick.size == n;
    if (whole && src == y) return;
    parallel_for(n, 0.25, [&](std::int64_t i0, std::int64_t i1) {
      if (whole)
        std::memmove(y + i0, src + i0, static_cast<std::size_t>(i1 - i0) * sizeof(T));
      else
        std::fill(y + i0, y + i1, src[0]);
    });
    return;
  }
  const std::int64_t sa = a.size == n, sb = b.size == n;  // strides 1, or 0 for one value
  parallel_for(n, 1.0, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) y[i] = pc[i] ? pa[i * sa] : pb[i * sb];
  });
}
template <class T>
void clip_kernel(const KernelCall& c) {
  const auto clip = attrs::Clip::of(*c.attrs);
  unary_loop<T>(c, ClipF<T>{static_cast<T>(clip.lo), static_cast<T>(clip.hi)}, elem_cost(Op::Clip));
}
template <class T>
void neg_kernel(const KernelCall& c) {
  unary_loop<T>(
      c, [](T v) { return -v; }, 1.0);
}
// Correctly rounded (vsqrtps/pd): Eigen's fast-math packet sqrt is an rsqrt approximation.
template <class T>
void sqrt_kernel(const KernelCall& c) {
  unary_loop<T>(
      c, [](T v) { return std::sqrt(v); }, elem_cost(Op::Sqrt));
}
// x^a for a constant a, in double (as the reference).
template <class T>
void pow_kernel(const KernelCall& c) {
  const double a = attrs::Scalar::of(*c.attrs).value;
  unary_loop<T>(
      c, [a](T v) { return static_cast<T>(std::pow(static_cast<double>(v), a)); },
      elem_cost(Op::Pow));
}
template <class T>
void square_kernel(const KernelCall& c) {
  unary_loop<T>(
      c, [](T v) { return v * v; }, 1.0);
}

template <class T>
void add_n_kernel(const KernelCall& c) {
  T* y = ptr<T>(c.out);
  // Sums a block in a local buffer before writing it: every input element is read before the
  // output element is written, so the output may be one of the inputs (an in-place update).
  parallel_for(c.out.size, static_cast<double>(c.n_in), [&](std::int64_t i0, std::int64_t i1) {
    alignas(64) T acc[256];
    for (std::int64_t b0 = i0; b0 < i1; b0 += 256) {
      const std::int64_t n = std::min<std::int64_t>(256, i1 - b0);
      const T* p0 = ptr<T>(c.in[0]) + b0;
      for (std::int64_t i = 0; i < n; ++i) acc[i] = p0[i];
      for (int k = 1; k < c.n_in; ++k) {
        const T* pk = ptr<T>(c.in[k]) + b0;
        for (std::int64_t i = 0; i < n; ++i) acc[i] += pk[i];
      }
      for (std::int64_t i = 0; i < n; ++i) y[b0 + i] = acc[i];
    }
  });
}

template <class T>
void dropout_mask_kernel(const KernelCall& c) {
  const double keep = 1.0 - attrs::Dropout::of(*c.attrs).level;
  const T scale = static_cast<T>(1.0 / keep);
  const std::uint64_t key = rng::stream_key(c.seed, c.counter);
  T* y = ptr<T>(c.out);
  parallel_for(c.out.size, 3.0, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i)
      y[i] = rng::uniform_at(key, static_cast<std::uint64_t>(i)) < keep ? scale : T(0);
  });
}

// A unary functor of functors.hpp over a flat parallel loop, at `op`'s cost per element.
template <class T, class F, Op op>
void functor_kernel(const KernelCall& c) {
  unary_loop<T>(c, F{}, elem_cost(op));
}

template <class T>
void register_float(Backend& b) {
  constexpr DType dt = dtype_of<T>;
  b.set(Op::Add, dt, &binary_kernel<T, AddF>);
  b.set(Op::Sub, dt, &binary_kernel<T, SubF>);
  b.set(Op::Mul, dt, &binary_kernel<T, MulF>);
  b.set(Op::Div, dt, &binary_kernel<T, DivF>);
  b.set(Op::Maximum, dt, &binary_kernel<T, MaxF>);
  b.set(Op::Minimum, dt, &binary_kernel<T, MinF>);
  b.set(Op::Greater, dt, &binary_kernel<T, GtF>);
  b.set(Op::GreaterEqual, dt, &binary_kernel<T, GeF>);
  b.set(Op::Less, dt, &binary_kernel<T, LtF>);
  b.set(Op::LessEqual, dt, &binary_kernel<T, LeF>);
  b.set(Op::Equal, dt, &binary_kernel<T, EqF>);
  b.set(Op::NotEqual, dt, &binary_kernel<T, NeF>);
  b.set(Op::Exp, dt, &eigen_unary<T, 0>);
  b.set(Op::Log, dt, &eigen_unary<T, 1>);
  b.set(Op::Tanh, dt, &eigen_unary<T, 2>);
  b.set(Op::Sqrt, dt, &sqrt_kernel<T>);
  b.set(Op::Sigmoid, dt, &sigmoid_kernel<T>);
  b.set(Op::Sin, dt, &functor_kernel<T, SinF, Op::Sin>);
  b.set(Op::Cos, dt, &functor_kernel<T, CosF, Op::Cos>);
  b.set(Op::Softplus, dt, &functor_kernel<T, SoftplusF, Op::Softplus>);
  b.set(Op::Relu, dt, &relu_kernel<T>);
  b.set(Op::ReluGrad, dt, &relu_grad_kernel<T>);
  b.set(Op::SigmoidGrad, dt, &binary_kernel<T, SigmoidGradF<T>>);
  b.set(Op::TanhGrad, dt, &binary_kernel<T, TanhGradF<T>>);
  b.set(Op::Clip, dt, &clip_kernel<T>);
  b.set(Op::ClipGrad, dt, &clip_grad_kernel<T>);
  b.set(Op::Select, dt, &select_kernel<T>);
  b.set(Op::Neg, dt, &neg_kernel<T>);
  b.set(Op::Abs, dt, &functor_kernel<T, AbsF, Op::Abs>);
  b.set(Op::Sign, dt, &functor_kernel<T, SignF, Op::Sign>);
  b.set(Op::Round, dt, &functor_kernel<T, RoundF, Op::Round>);
  b.set(Op::Pow, dt, &pow_kernel<T>);
  b.set(Op::Square, dt, &square_kernel<T>);
  b.set(Op::AddN, dt, &add_n_kernel<T>);
  b.set(Op::DropoutMask, dt, &dropout_mask_kernel<T>);
}

// FillLike for every dtype: the reference's kernel converts the value into the first element
// (whatever the dtype's rules), and its bytes fill the rest, split over threads.
template <std::size_t ES>
void fill_like_kernel(const KernelCall& c) {
  using Word = std::conditional_t<
      ES == 1, std::uint8_t,
      std::conditional_t<ES == 2, std::uint16_t,
                         std::conditional_t<ES == 4, std::uint32_t, std::uint64_t>>>;
  if (c.out.size <= 0) return;
  KernelCall first = c;
  first.out.size = 1;
  reference_backend().get(Op::FillLike, c.out.dtype)(first);
  auto* y = static_cast<Word*>(c.out.data);
  Word v;
  std::memcpy(&v, y, sizeof v);
  parallel_for(c.out.size, 0.25, [&](std::int64_t i0, std::int64_t i1) {
    std::fill(y + std::max<std::int64_t>(i0, 1), y + i1, v);
  });
}

// Cast for every pair of dtypes: the reference's kernel (its conversions: saturating, NaN to 0
// for integers, nonzero to true) on ranges of elements, each range a call of its own, split by
// the grain policy, at cast_cost per element.
void cast_kernel(const KernelCall& c) {
  const KernelFn reference = reference_backend().get(Op::Cast, c.in[0].dtype);
  parallel_for(c.out.size, cast_cost(c.in[0].dtype, c.out.dtype),
               [&](std::int64_t i0, std::int64_t i1) {
                 const std::int64_t dims[1] = {i1 - i0};
                 run_part(reference, c, i0, dims, 1, i0, dims, 1);
               });
}

}  // namespace

void register_cpu_elementwise(Backend& b) {
  register_float<float>(b);
  register_float<double>(b);
  set_by_size(b, Op::FillLike, [](auto es) { return &fill_like_kernel<es.value>; });
  for (int d = 0; d < kNumDTypes; ++d)  // cast_kernel calls the reference's
    if (reference_backend().get(Op::Cast, static_cast<DType>(d)))
      b.set(Op::Cast, static_cast<DType>(d), &cast_kernel);
}

}  // namespace ktape::kernels
