// The attribute layout of every op kind: one view per family, the only code that knows where a
// value sits in Attrs. Builders pack with make(...); shape rules, gradient rules and kernels read
// with of(attrs). Views do not allocate (kernels use them on every call). Not a public header.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/kernel_abi.hpp"

namespace ktape::attrs {

using Ints = std::span<const std::int64_t>;

// Sum, Mean, Max, Min: keepdims, then the reduced axes (normalised, ascending).
struct Reduce {
  bool keepdims;
  Ints axes;
  static Reduce of(const Attrs& a) { return {a.ints[0] != 0, Ints(a.ints).subspan(1)}; }
  static Attrs make(bool keepdims, const std::vector<int>& axes) {
    Attrs a;
    a.ints.push_back(keepdims ? 1 : 0);
    a.ints.insert(a.ints.end(), axes.begin(), axes.end());
    return a;
  }
};

// Cumsum, Cumprod: the (normalised) axis, and whether the scan runs from the end.
struct Cumulative {
  int axis;
  bool reverse;
  static Cumulative of(const Attrs& a) { return {static_cast<int>(a.ints[0]), a.ints[1] != 0}; }
  static Attrs make(std::int64_t axis, bool reverse) {
    Attrs a;
    a.ints = {axis, reverse ? 1 : 0};
    return a;
  }
};

// ArgMax, ArgMin, Softmax, LogSoftmax, Concat: one (normalised) axis.
struct Axis {
  int axis;
  static Axis of(const Attrs& a) { return {static_cast<int>(a.ints[0])}; }
  static Attrs make(std::int64_t axis) {
    Attrs a;
    a.ints = {axis};
    return a;
  }
};

// ConcatPart(g, x0..xn-1): the slice of g along `axis` that concatenation took from input k.
struct ConcatPart {
  int axis;
  std::size_t k;
  static ConcatPart of(const Attrs& a) {
    return {static_cast<int>(a.ints[0]), static_cast<std::size_t>(a.ints[1])};
  }
  static Attrs make(std::int64_t axis, std::size_t k) {
    Attrs a;
    a.ints = {axis, static_cast<std::int64_t>(k)};
    return a;
  }
};

// OneHot: the depth (number of classes).
struct OneHot {
  std::int64_t depth;
  static OneHot of(const Attrs& a) { return {a.ints[0]}; }
  static Attrs make(std::int64_t depth) {
    Attrs a;
    a.ints = {depth};
    return a;
  }
};

// RandomUniform (a, b = low, high), RandomNormal and TruncatedNormal (a, b = mean, stddev):
// the output shape and the two parameters.
struct Random {
  Ints shape;
  double a, b;
  static Random of(const Attrs& at) { return {Ints(at.ints), at.floats[0], at.floats[1]}; }
  static Attrs make(const std::vector<std::int64_t>& shape, double a, double b) {
    Attrs at;
    at.ints = shape;
    at.floats = {a, b};
    return at;
  }
};

// DropoutMask: the drop rate and, when given, the noise shape (a mask broadcast over x). The
// mask holds 0 or 1 / (1 - level).
struct Dropout {
  double level;
  bool has_noise_shape;
  Ints noise_shape;
  static Dropout of(const Attrs& a) {
    return {a.floats[0], a.ints[0] != 0, Ints(a.ints).subspan(1)};
  }
  static Attrs make(double level, const std::vector<std::int64_t>* noise_shape) {
    Attrs a;
    a.floats = {level};
    a.ints.push_back(noise_shape ? 1 : 0);
    if (noise_shape) a.ints.insert(a.ints.end(), noise_shape->begin(), noise_shape->end());
    return a;
  }
};

// Relu, ReluGrad: alpha, max_value (+inf: none) and threshold.
struct Relu {
  double alpha, max_value, threshold;
  static Relu of(const Attrs& a) { return {a.floats[0], a.floats[1], a.floats[2]}; }
  static Attrs make(double alpha, double max_value, double threshold) {
    Attrs a;
    a.floats = {alpha, max_value, threshold};
    return a;
  }
};

// Clip, ClipGrad: the bounds.
struct Clip {
  double lo, hi;
  static Clip of(const Attrs& a) { return {a.floats[0], a.floats[1]}; }
  static Attrs make(double lo, double hi) {
    Attrs a;
    a.floats = {lo, hi};
    return a;
  }
};

// Pow: the exponent. FillLike: the value.
struct Scalar {
  double value;
  static Scalar of(const Attrs& a) { return {a.floats[0]}; }
  static Attrs make(double v) {
    Attrs a;
    a.floats = {v};
    return a;
  }
};

// MatMul: whether each operand is transposed.
struct MatMul {
  bool ta, tb;
  static MatMul of(const Attrs& a) { return {a.ints[0] != 0, a.ints[1] != 0}; }
  static Attrs make(bool ta, bool tb) {
    Attrs a;
    a.ints = {ta ? 1 : 0, tb ? 1 : 0};
    return a;
  }
};

// Transpose: the permutation (output axis d is input axis perm[d]). ExpandAxes, SqueezeAxes:
// the axes inserted / removed. Reshape: the target dims (-1: inferred; kCopyDim0: x's dim 0).
struct IntList {
  Ints values;
  static IntList of(const Attrs& a) { return {Ints(a.ints)}; }
  static Attrs make(std::vector<std::int64_t> values) {
    Attrs a;
    a.ints = std::move(values);
    return a;
  }
};
inline constexpr std::int64_t kCopyDim0 = -2;  // Reshape: this dim is x's dim 0

// Slice, SlicePad: the start and the size on every axis (size -1: to the end).
struct Slice {
  Ints start, size;
  static Slice of(const Attrs& a) {
    const Ints all(a.ints);
    const std::size_t r = all.size() / 2;
    return {all.first(r), all.subspan(r)};
  }
  static Attrs make(const std::vector<std::int64_t>& start, const std::vector<std::int64_t>& size) {
    Attrs a;
    a.ints = start;
    a.ints.insert(a.ints.end(), size.begin(), size.end());
    return a;
  }
};

// ScanPart, ScanEmbed: the part of a Scan's flat buffer (outputs, stored carries, final carries).
struct ScanPart {
  int part;
  static ScanPart of(const Attrs& a) { return {static_cast<int>(a.ints[0])}; }
  static Attrs make(int part) {
    Attrs a;
    a.ints = {part};
    return a;
  }
};

// The sliding-window ops (Conv, ConvBackpropInput, ConvBackpropFilter, Pool, MaxPoolGrad,
// MaxPoolReluGrad, MaxPoolGradGrad, AvgPoolGrad): `rank` spatial dims (1 to 3) laid out (N, S...,
// C), or (N, C, S...) when channels_first. Conv: input channels split in `groups` (a depthwise conv
// has one input channel per group), kernel (window..., in / groups, out). Padding kValid, kSame (TF
// SAME: out = ceil(in / stride), the odd cell at the end) or kExplicit (pad_before/pad_after:
// causal conv1d). Pool: mode kMax / kAvg (avg counts only cells inside the input).
// out_spatial: the spatial dims of a ConvBackpropInput that has no shape donor (transposed conv),
// else empty. str: the K:: function, for messages.
struct Window {
  static constexpr int kValid = 0, kSame = 1, kExplicit = 2;
  static constexpr int kConv = 0, kMax = 1, kAvg = 2;
  int rank;
  bool channels_first;
  std::int64_t groups;
  int padding, mode;
  Ints strides, dilation, window, pad_before, pad_after, out_spatial;
  const std::string& fn;
  static Window of(const Attrs& a) {
    const Ints all(a.ints);
    const auto r = static_cast<std::size_t>(a.ints[0]);
    const bool has_out = a.ints.size() > 5 + 5 * r;
    return {static_cast<int>(r),
            a.ints[1] != 0,
            a.ints[2],
            static_cast<int>(a.ints[3]),
            static_cast<int>(a.ints[4]),
            all.subspan(5, r),
            all.subspan(5 + r, r),
            all.subspan(5 + 2 * r, r),
            all.subspan(5 + 3 * r, r),
            all.subspan(5 + 4 * r, r),
            has_out ? all.subspan(5 + 5 * r, r) : Ints(),
            a.str};
  }
  struct Spec {
    int rank = 2;
    bool channels_first = false;
    std::int64_t groups = 1;
    int padding = kValid, mode = kConv;
    std::vector<std::int64_t> strides, dilation, window, pad_before, pad_after, out_spatial;
  };
  static Attrs make(const Spec& s, std::string fn) {
    Attrs a;
    a.ints = {s.rank, s.channels_first ? 1 : 0, s.groups, s.padding, s.mode};
    auto put = [&](const std::vector<std::int64_t>& v, std::int64_t fill) {
      for (int i = 0; i < s.rank; ++i)
        a.ints.push_back(static_cast<std::size_t>(i) < v.size() ? v[static_cast<std::size_t>(i)]
                                                                : fill);
    };
    put(s.strides, 1);
    put(s.dilation, 1);
    put(s.window, 1);
    put(s.pad_before, 0);
    put(s.pad_after, 0);
    if (!s.out_spatial.empty()) put(s.out_spatial, -1);
    a.str = std::move(fn);
    return a;
  }
  Spec spec() const {
    auto v = [](Ints x) { return std::vector<std::int64_t>(x.begin(), x.end()); };
    return {rank,        channels_first, groups,        padding,      mode,          v(strides),
            v(dilation), v(window),      v(pad_before), v(pad_after), v(out_spatial)};
  }
};

// Pad: zeros added before and after each axis (a negative amount crops).
struct Pad {
  Ints before, after;
  static Pad of(const Attrs& a) {
    const Ints all(a.ints);
    const std::size_t r = all.size() / 2;
    return {all.first(r), all.subspan(r)};
  }
  static Attrs make(const std::vector<std::int64_t>& before,
                    const std::vector<std::int64_t>& after) {
    Attrs a;
    a.ints = before;
    a.ints.insert(a.ints.end(), after.begin(), after.end());
    return a;
  }
};

// Assign: the K:: function that built it (for messages).
struct Assign {
  const std::string& fn;
  static Assign of(const Attrs& a) { return {a.str}; }
  static Attrs make(std::string fn) {
    Attrs a;
    a.str = std::move(fn);
    return a;
  }
};

}  // namespace ktape::attrs
