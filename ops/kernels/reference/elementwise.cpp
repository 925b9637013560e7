// Reference (serial, naive) kernels for the elementwise ops: the oracle the cpu backend is
// checked against.
#include <cmath>

#include "engine/backend.hpp"
#include "engine/saturate.hpp"
#include "ops/kernels/attrs.hpp"
#include "ops/kernels/broadcast.hpp"
#include "ops/kernels/common.hpp"
#include "ops/kernels/functors.hpp"
#include "ops/kernels/reference/reference.hpp"

namespace ktape::kernels {

namespace {

template <class T, class F>
void unary(const KernelCall& c, F f) {
  const T* x = ptr<T>(c.in[0]);
  T* y = ptr<T>(c.out);
  for (std::int64_t i = 0; i < c.out.size; ++i)
    y[i] = static_cast<T>(f(static_cast<Compute<T>>(x[i])));
}

template <class T, class F>
void unary_kernel(const KernelCall& c) {
  unary<T>(c, F{});
}

template <class T, class F>
void arith_kernel(const KernelCall& c) {
  binary<T, T, T>(c, F{});
}
template <class T, class F>
void compare_kernel(const KernelCall& c) {
  binary<T, T, bool>(c, F{});
}

template <class T>
void relu_kernel(const KernelCall& c) {
  const auto r = attrs::Relu::of(*c.attrs);
  unary<T>(c, ReluF{r.alpha, r.max_value, r.threshold});
}
template <class T>
void relu_grad_kernel(const KernelCall& c) {
  const auto r = attrs::Relu::of(*c.attrs);
  binary<T, T, T>(c, ReluGradF{r.alpha, r.max_value, r.threshold});
}
template <class T>
void clip_kernel(const KernelCall& c) {
  const auto clip_attrs = attrs::Clip::of(*c.attrs);
  const auto lo = clip_attrs.lo;
  const auto hi = clip_attrs.hi;
  unary<T>(c, [lo, hi](auto x) {
    using C = decltype(x);
    const double v = static_cast<double>(x);
    return saturate_cast<C>(v < lo ? lo : (v > hi ? hi : v));
  });
}
template <class T>
void clip_grad_kernel(const KernelCall& c) {
  const auto clip_attrs = attrs::Clip::of(*c.attrs);
  const auto lo = clip_attrs.lo;
  const auto hi = clip_attrs.hi;
  binary<T, T, T>(c, [lo, hi](auto x, auto g) {
    using C = decltype(x);
    const double v = static_cast<double>(x);
    return (v >= lo && v <= hi) ? g : C(0);
  });
}
template <class T>
void pow_kernel(const KernelCall& c) {
  const double a = attrs::Scalar::of(*c.attrs).value;
  unary<T>(c, [a](auto x) {
    using C = decltype(x);
    return static_cast<C>(std::pow(static_cast<double>(x), a));
  });
}

template <class T>
void select_kernel(const KernelCall& c) {
  select_strided<T>(c);
}

template <class T>
void add_n_kernel(const KernelCall& c) {
  T* out = ptr<T>(c.out);
  for (std::int64_t i = 0; i < c.out.size; ++i) {
    Compute<T> s = static_cast<Compute<T>>(ptr<T>(c.in[0])[i]);
    for (int k = 1; k < c.n_in; ++k) s = wrap_add(s, static_cast<Compute<T>>(ptr<T>(c.in[k])[i]));
    out[i] = static_cast<T>(s);
  }
}

template <class TI>
void cast_kernel(const KernelCall& c) {
  const TI* x = ptr<TI>(c.in[0]);
  visit_dtype(c.out.dtype, [&](auto o) {
    using TO = decltype(o);
    TO* y = ptr<TO>(c.out);
    for (std::int64_t i = 0; i < c.out.size; ++i) {
      if constexpr (std::is_same_v<TO, bool>)
        y[i] = static_cast<Compute<TI>>(x[i]) != Compute<TI>(0);
      else if constexpr (std::is_same_v<TO, Half>)
        y[i] = Half(saturate_cast<float>(static_cast<Compute<TI>>(x[i])));
      else
        y[i] = saturate_cast<TO>(static_cast<Compute<TI>>(x[i]));
    }
  });
}

template <class T>
void fill_like_kernel(const KernelCall& c) {
  const T v = static_cast<T>(saturate_cast<Compute<T>>(attrs::Scalar::of(*c.attrs).value));
  T* y = ptr<T>(c.out);
  for (std::int64_t i = 0; i < c.out.size; ++i) y[i] = v;
}

void shape_of_kernel(const KernelCall& c) {
  auto* y = ptr<std::int32_t>(c.out);
  for (int d = 0; d < c.in[0].ndim; ++d) y[d] = static_cast<std::int32_t>(c.in[0].dims[d]);
}

template <class T>
void size_ratio_kernel(const KernelCall& c) {
  const double r = c.in[1].size == 0
                       ? 0.0
                       : static_cast<double>(c.in[0].size) / static_cast<double>(c.in[1].size);
  ptr<T>(c.out)[0] = static_cast<T>(static_cast<Compute<T>>(r));
}

template <class... Ts>
struct TypeList {};
using Floats = TypeList<Half, float, double>;
using Numeric = TypeList<Half, float, double, std::int8_t, std::int16_t, std::int32_t, std::int64_t,
                         std::uint8_t>;
using All = TypeList<Half, float, double, std::int8_t, std::int16_t, std::int32_t, std::int64_t,
                     std::uint8_t, bool>;

template <template <class> class K, class... Ts>
void reg(Backend& b, Op op, TypeList<Ts...>) {
  (b.set(op, dtype_of<Ts>, &K<Ts>::run), ...);
}

#define KTAPE_WRAP(name, expr)                     \
  template <class T>                               \
  struct name {                                    \
    static void run(const KernelCall& c) { expr; } \
  };

KTAPE_WRAP(KNeg, (unary_kernel<T, NegF>(c)))
KTAPE_WRAP(KSquare, (unary_kernel<T, SquareF>(c)))
KTAPE_WRAP(KSqrt, (unary_kernel<T, SqrtF>(c)))
KTAPE_WRAP(KExp, (unary_kernel<T, ExpF>(c)))
KTAPE_WRAP(KLog, (unary_kernel<T, LogF>(c)))
KTAPE_WRAP(KAbs, (unary_kernel<T, AbsF>(c)))
KTAPE_WRAP(KSign, (unary_kernel<T, SignF>(c)))
KTAPE_WRAP(KRound, (unary_kernel<T, RoundF>(c)))
KTAPE_WRAP(KSigmoid, (unary_kernel<T, SigmoidF>(c)))
KTAPE_WRAP(KTanh, (unary_kernel<T, TanhF>(c)))
KTAPE_WRAP(KSin, (unary_kernel<T, SinF>(c)))
KTAPE_WRAP(KCos, (unary_kernel<T, CosF>(c)))
KTAPE_WRAP(KSoftplus, (unary_kernel<T, SoftplusF>(c)))
KTAPE_WRAP(KRelu, (relu_kernel<T>(c)))
KTAPE_WRAP(KReluGrad, (relu_grad_kernel<T>(c)))
KTAPE_WRAP(KSigmoidGrad, (arith_kernel<T, SigmoidGradF<T>>(c)))
KTAPE_WRAP(KTanhGrad, (arith_kernel<T, TanhGradF<T>>(c)))
KTAPE_WRAP(KClip, (clip_kernel<T>(c)))
KTAPE_WRAP(KClipGrad, (clip_grad_kernel<T>(c)))
KTAPE_WRAP(KPow, (pow_kernel<T>(c)))
KTAPE_WRAP(KAdd, (arith_kernel<T, AddF>(c)))
KTAPE_WRAP(KSub, (arith_kernel<T, SubF>(c)))
KTAPE_WRAP(KMul, (arith_kernel<T, MulF>(c)))
KTAPE_WRAP(KDiv, (arith_kernel<T, DivF>(c)))
KTAPE_WRAP(KMax, (arith_kernel<T, MaxF>(c)))
KTAPE_WRAP(KMin, (arith_kernel<T, MinF>(c)))
KTAPE_WRAP(KEq, (compare_kernel<T, EqF>(c)))
KTAPE_WRAP(KNe, (compare_kernel<T, NeF>(c)))
KTAPE_WRAP(KGt, (compare_kernel<T, GtF>(c)))
KTAPE_WRAP(KGe, (compare_kernel<T, GeF>(c)))
KTAPE_WRAP(KLt, (compare_kernel<T, LtF>(c)))
KTAPE_WRAP(KLe, (compare_kernel<T, LeF>(c)))
KTAPE_WRAP(KSelect, (select_kernel<T>(c)))
KTAPE_WRAP(KAddN, (add_n_kernel<T>(c)))
KTAPE_WRAP(KCast, (cast_kernel<T>(c)))
KTAPE_WRAP(KFill, (fill_like_kernel<T>(c)))
KTAPE_WRAP(KSizeRatio, (size_ratio_kernel<T>(c)))
#undef KTAPE_WRAP

}  // namespace

void register_reference_elementwise(Backend& b) {
  reg<KNeg>(b, Op::Neg, Numeric{});
  reg<KSquare>(b, Op::Square, Numeric{});
  reg<KAbs>(b, Op::Abs, Numeric{});
  reg<KSign>(b, Op::Sign, Numeric{});
  reg<KSqrt>(b, Op::Sqrt, Floats{});
  reg<KExp>(b, Op::Exp, Floats{});
  reg<KLog>(b, Op::Log, Floats{});
  reg<KRound>(b, Op::Round, Floats{});
  reg<KSigmoid>(b, Op::Sigmoid, Floats{});
  reg<KTanh>(b, Op::Tanh, Floats{});
  reg<KSin>(b, Op::Sin, Floats{});
  reg<KCos>(b, Op::Cos, Floats{});
  reg<KSoftplus>(b, Op::Softplus, Floats{});
  reg<KRelu>(b, Op::Relu, Floats{});
  reg<KReluGrad>(b, Op::ReluGrad, Floats{});
  reg<KSigmoidGrad>(b, Op::SigmoidGrad, Floats{});
  reg<KTanhGrad>(b, Op::TanhGrad, Floats{});
  reg<KClip>(b, Op::Clip, Numeric{});
  reg<KClipGrad>(b, Op::ClipGrad, Floats{});
  reg<KPow>(b, Op::Pow, Floats{});
  reg<KAdd>(b, Op::Add, Numeric{});
  reg<KSub>(b, Op::Sub, Numeric{});
  reg<KMul>(b, Op::Mul, Numeric{});
  reg<KDiv>(b, Op::Div, Floats{});
  reg<KMax>(b, Op::Maximum, Numeric{});
  reg<KMin>(b, Op::Minimum, Numeric{});
  reg<KEq>(b, Op::Equal, All{});
  reg<KNe>(b, Op::NotEqual, All{});
  reg<KGt>(b, Op::Greater, Numeric{});
  reg<KGe>(b, Op::GreaterEqual, Numeric{});
  reg<KLt>(b, Op::Less, Numeric{});
  reg<KLe>(b, Op::LessEqual, Numeric{});
  reg<KSelect>(b, Op::Select, All{});
  reg<KAddN>(b, Op::AddN, Numeric{});
  reg<KCast>(b, Op::Cast, All{});
  reg<KFill>(b, Op::FillLike, All{});
  reg<KSizeRatio>(b, Op::SizeRatio, Floats{});
  b.set(Op::ShapeOf, DType::int32, &shape_of_kernel);
}

}  // namespace ktape::kernels
