// Scalar definitions of the elementwise ops, shared by the reference and cpu kernels so both
// backends compute the same formula. Half computes in float.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "engine/dtype.hpp"

namespace ktape::kernels {

template <class T>
using Compute = std::conditional_t<std::is_same_v<T, Half>, float, T>;

// Integer arithmetic wraps around (two's complement), as TF's integer kernels do: it is computed
// in an unsigned type at least as wide as int, where overflow is defined, and converted back
// (modular since C++20). Floating-point types compute as usual.
template <class C>
inline constexpr bool kWraps = std::is_integral_v<C> && !std::is_same_v<C, bool>;
template <class C>
using WrapType =
    std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;
template <class C>
C wrap_add(C a, C b) {
  if constexpr (kWraps<C>)
    return static_cast<C>(static_cast<WrapType<C>>(a) + static_cast<WrapType<C>>(b));
  else
    return static_cast<C>(a + b);
}
template <class C>
C wrap_sub(C a, C b) {
  if constexpr (kWraps<C>)
    return static_cast<C>(static_cast<WrapType<C>>(a) - static_cast<WrapType<C>>(b));
  else
    return static_cast<C>(a - b);
}
template <class C>
C wrap_mul(C a, C b) {
  if constexpr (kWraps<C>)
    return static_cast<C>(static_cast<WrapType<C>>(a) * static_cast<WrapType<C>>(b));
  else
    return static_cast<C>(a * b);
}

struct NegF {  // -INT_MIN is INT_MIN
  template <class C>
  C operator()(C x) const {
    if constexpr (kWraps<C>)
      return wrap_sub(C(0), x);
    else
      return static_cast<C>(-x);
  }
};
struct SquareF {
  template <class C>
  C operator()(C x) const {
    return wrap_mul(x, x);
  }
};
struct SqrtF {
  template <class C>
  C operator()(C x) const {
    return std::sqrt(x);
  }
};
struct ExpF {
  template <class C>
  C operator()(C x) const {
    return std::exp(x);
  }
};
struct LogF {
  template <class C>
  C operator()(C x) const {
    return std::log(x);
  }
};
struct AbsF {  // |INT_MIN| is INT_MIN, as tf.abs
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>)
      return x;
    else
      return x < 0 ? NegF{}(x) : x;
  }
};
struct SignF {
  template <class C>
  C operator()(C x) const {
    return static_cast<C>((x > C(0)) - (x < C(0)));
  }
};
struct RoundF {  // half to even, like np.round and tf.round
  template <class C>
  C operator()(C x) const {
    return std::nearbyint(x);
  }
};
struct SigmoidF {
  template <class C>
  C operator()(C x) const {
    if (x >= 0) return C(1) / (C(1) + std::exp(-x));
    const C e = std::exp(x);
    return e / (C(1) + e);
  }
};
struct SinF {
  template <class C>
  C operator()(C x) const {
    return std::sin(x);
  }
};
struct CosF {
  template <class C>
  C operator()(C x) const {
    return std::cos(x);
  }
};
// TF's softplus: x above -log(eps) - 2, exp(x) below log(eps) + 2 (where log(1 + exp(x)) rounds
// to exp(x)), log(exp(x) + 1) between.
struct SoftplusF {
  template <class C>
  C operator()(C x) const {
    const C threshold = std::log(std::numeric_limits<C>::epsilon()) + C(2);
    if (x > -threshold) return x;
    const C e = std::exp(x);
    return x < threshold ? e : std::log(e + C(1));
  }
};
struct TanhF {
  template <class C>
  C operator()(C x) const {
    return std::tanh(x);
  }
};

// clip to [lo, hi] for lo <= hi (K::clip orders them); NaN stays NaN. The same values as
// "v < lo ? lo : (v > hi ? hi : v)", written as a max then a min that compile to vmaxps and
// vminps (each returns its second operand when one is NaN), so the loop vectorizes.
template <class C>
struct ClipF {
  C lo, hi;
  C operator()(C v) const {
    const C t = lo > v ? lo : v;
    return hi < t ? hi : t;
  }
};

// relu(x, alpha, max_value, threshold) as Keras 2.2.4 on TF: for x > threshold, x (clipped to
// [0, max_value] when max_value is set, i.e. finite); for x < threshold, alpha * (x - threshold);
// 0 at x == threshold. NaN stays NaN (every TF path propagates it), and with alpha 0 everything
// at or below the threshold is +0 (tf.nn.relu: relu(-inf) = 0, relu(-3) = +0).
struct ReluF {
  double alpha, max_value, threshold;
  template <class C>
  C operator()(C x) const {
    const double v = static_cast<double>(x);
    if (v != v) return x;
    if (v > threshold) {
      if (std::isfinite(max_value))
        return static_cast<C>(v < 0 ? 0.0 : (v > max_value ? max_value : v));
      return x;
    }
    if (v < threshold && alpha != 0) return static_cast<C>(alpha * (v - threshold));
    return C(0);
  }
};
// Whether relu's options are its defaults (alpha 0, no max_value, threshold 0), for which the
// Plain functors below give the same values as ReluF and ReluGradF, vectorized.
inline bool is_plain_relu(double alpha, double max_value, double threshold) {
  return alpha == 0 && threshold == 0 && !std::isfinite(max_value);
}
// The same for relu's default options (alpha 0, no max_value, threshold 0), in a form that
// vectorizes: !(x <= 0) keeps NaN and positives, and maps -inf, -0 and negatives to +0.
struct ReluPlainF {
  template <class C>
  C operator()(C x) const {
    return x <= C(0) ? C(0) : x;
  }
};
// ReluGradF for relu's default options, as TF's ReluGrad: g * (x > 0), so a NaN or infinite
// gradient reaching a unit at or below 0 gives NaN there, as it does in TF.
struct ReluGradPlainF {
  template <class C>
  C operator()(C x, C g) const {
    return g * C(x > C(0));
  }
};

// d relu / dx times g (one-sided choices at kinks follow TF: 0 at x == threshold and at the clip
// bounds' outer side).
struct ReluGradF {
  double alpha, max_value, threshold;
  template <class C>
  C operator()(C x, C g) const {
    if (is_plain_relu(alpha, max_value, threshold)) return ReluGradPlainF{}(x, g);
    const double v = static_cast<double>(x);
    if (v > threshold) {
      if (std::isfinite(max_value) && (v < 0 || v >= max_value)) return C(0);
      return g;
    }
    if (v < threshold) return static_cast<C>(alpha * static_cast<double>(g));
    return C(0);
  }
};

// TF's SigmoidGrad(y, g): g * (y * (1 - y)), and TanhGrad(y, g): g * (1 - y * y), in that order
// (the order of TF's vectorized path, which computes all but a tail of a float array). T is the
// stored type: in half (computed in float) every step is rounded to half, as TF's half packets
// round each.
template <class T>
struct SigmoidGradF {
  template <class C>
  C operator()(C y, C g) const {
    const C one_minus = static_cast<C>(static_cast<T>(C(1) - y));
    return static_cast<C>(static_cast<T>(g * static_cast<C>(static_cast<T>(y * one_minus))));
  }
};
template <class T>
struct TanhGradF {
  template <class C>
  C operator()(C y, C g) const {
    const C one_minus =
        static_cast<C>(static_cast<T>(C(1) - static_cast<C>(static_cast<T>(y * y))));
    return static_cast<C>(static_cast<T>(g * one_minus));
  }
};

struct AddF {
  template <class C>
  C operator()(C a, C b) const {
    return wrap_add(a, b);
  }
};
struct SubF {
  template <class C>
  C operator()(C a, C b) const {
    return wrap_sub(a, b);
  }
};
struct MulF {
  template <class C>
  C operator()(C a, C b) const {
    return wrap_mul(a, b);
  }
};
struct DivF {
  template <class C>
  C operator()(C a, C b) const {
    return static_cast<C>(a / b);
  }
};
struct MaxF {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
    }
    return a >= b ? a : b;
  }
};
struct MinF {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
    }
    return a <= b ? a : b;
  }
};
struct EqF {
  template <class C>
  bool operator()(C a, C b) const {
    return a == b;
  }
};
struct NeF {
  template <class C>
  bool operator()(C a, C b) const {
    return a != b;
  }
};
struct GtF {
  template <class C>
  bool operator()(C a, C b) const {
    return a > b;
  }
};
struct GeF {
  template <class C>
  bool operator()(C a, C b) const {
    return a >= b;
  }
};
struct LtF {
  template <class C>
  bool operator()(C a, C b) const {
    return a < b;
  }
};
struct LeF {
  template <class C>
  bool operator()(C a, C b) const {
    return a <= b;
  }
};

}  // namespace ktape::kernels
