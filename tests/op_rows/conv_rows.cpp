// conv rows: the convolutions of the sliding-window family (ops/conv.hpp; its pooling,
// normalization, padding and resizing rows are in pool_rows.cpp). Provenance of expected
// values: "NumPy" = tests/data/conv_reference.py (direct loops over explicitly padded inputs,
// NumPy 1.24, run once, values pasted below) on the ramp inputs it documents; "by hand" =
// written out next to the values; "formula" = the naive float64 reference of
// op_rows/naive_conv.hpp applied to the row's (random) inputs. The transposes as adjoints, the cpu
// tiling at large sizes, thread-count independence and zero sizes are ordinary tests in
// tests/test_conv.cpp.
#include <cmath>
#include <string>
#include <vector>

#include "op_rows/naive_conv.hpp"
#include "op_rows/op_row.hpp"

namespace ktape::op_rows {

namespace {

// conv2d valid stride 1: shape (2, 3, 3, 4)
const std::vector<double> kConv2dValid = {
    0.125, 5.375, -6.25, 4.625,  0.25,   0.125, -3.75, 8.625, 8.625, -3.75, 0.125, 0.25,
    0.75,  -5.75, 9.0,   -5.625, -1.875, -2.75, 3.25,  -5.75, -4.5,  3.0,   3.0,   -4.5,
    -2.75, 3.75,  -6.0,  6.125,  0.125,  5.375, -6.25, 4.625, 0.25,  0.125, -3.75, 8.625,
    4.625, -6.25, 5.375, 0.125,  6.125,  -6.0,  3.75,  -2.75, 0.75,  -5.75, 9.0,   -5.625,
    -5.75, 3.25,  -2.75, -1.875, -5.625, 9.0,   -5.75, 0.75,  -2.75, 3.75,  -6.0,  6.125,
    8.625, -3.75, 0.125, 0.25,   4.625,  -6.25, 5.375, 0.125, 6.125, -6.0,  3.75,  -2.75};
// conv2d same stride 2: shape (2, 3, 3, 4)
const std::vector<double> kConv2dSameStride2 = {
    3.25,   -3.875, 4.0,   -0.625, -2.25,  -1.25,  5.375, -3.625, -2.75, 6.5,   -3.625, 0.625,
    6.5,    -5.75,  3.875, -0.875, -1.875, -2.75,  3.25,  -5.75,  -2.25, 1.375, -2.5,   0.5,
    3.625,  -3.625, 3.5,   -1.875, -1.375, -3.125, 7.0,   -4.75,  -2.5,  4.5,   -2.25,  -0.875,
    -3.625, 0.625,  -0.75, -2.75,  -3.25,  4.25,   -3.25, 1.125,  -0.75, 0.625, -3.625, 6.5,
    -2.5,   0.5,    2.875, -2.25,  -5.625, 9.0,    -5.75, 0.75,   1.875, 2.375, -4.625, 4.0,
    -2.25,  -0.875, 1.125, -2.5,   -3.375, 4.125,  -4.0,  0.375,  1.0,   1.0,   -4.0,   6.0};
// conv2d even kernel same stride 1: shape (2, 5, 5, 2)
const std::vector<double> kConv2dEvenSame = {
    0.125,  -4.125, -4.625, -0.75,  -2.5,   -2.875, 7.875, 0.5,    -0.75,  5.625,  5.25,  4.5,
    0.5,    7.875,  -2.875, -2.5,   -0.75,  -4.625, 1.125, -1.75,  -3.375, -3.375, 0.125, -4.125,
    -4.625, -0.75,  -2.5,   -2.875, 3.0,    0.5,    4.5,   5.25,   5.25,   4.5,    0.5,   7.875,
    -2.875, -2.5,   0.75,   -1.375, -0.125, -3.25,  0.25,  -3.625, 3.375,  -4.0,   -1.75, -0.25,
    -0.5,   -0.5,   7.875,  0.5,    4.5,    5.25,   5.25,  4.5,    0.5,    7.875,  -1.0,  0.375,
    -0.75,  -4.625, -4.125, 0.125,  -3.375, -3.375, 0.125, -4.125, -3.25,  -1.5,   -2.5,  -2.875,
    7.875,  0.5,    4.5,    5.25,   5.25,   4.5,    0.0,   4.875,  -2.875, -2.5,   -0.75, -4.625,
    -4.125, 0.125,  -3.375, -3.375, 1.875,  -5.25,  -1.75, -0.25,  -1.375, -0.625, 3.125, 0.375,
    -0.625, 5.5,    -2.375, 2.75};
// conv2d dilation 2 same: shape (2, 5, 5, 4)
const std::vector<double> kConv2dDilatedSame = {
    -1.125, 1.625,  2.5,    -2.25,  -2.5,   3.125,  0.0,    -2.5,   -4.0,   2.375,  -2.5,   0.125,
    -2.5,   1.875,  -2.5,   3.125,  0.0,    3.125,  -2.5,   1.875,  1.625,  0.875,  -1.75,  0.625,
    3.0,    -1.75,  -1.5,   3.125,  0.75,   -3.125, 2.375,  1.625,  3.125,  -2.875, 3.0,    -1.75,
    1.5,    -1.625, 0.25,   -1.625, -2.375, -0.625, 1.75,   0.375,  0.125,  1.0,    1.875,  -1.0,
    1.375,  1.125,  0.25,   -2.5,   -1.0,   -2.0,   0.125,  1.0,    -3.75,  0.625,  1.25,   1.25,
    -1.375, 1.625,  0.875,  -1.75,  -2.875, 3.0,    -1.75,  -1.5,   -1.625, 0.75,   -3.125, 2.375,
    -1.5,   3.125,  -2.875, 3.0,    1.5,    1.5,    -1.625, 0.25,   2.125,  -1.125, -1.25,  3.625,
    -0.75,  -1.125, 1.625,  2.5,    2.375,  -4.125, 3.75,   0.375,  2.5,    -2.25,  -0.75,  -1.125,
    0.0,    -2.5,   1.875,  -2.5,   -1.125, -0.75,  -2.25,  2.5,    -1.125, 2.125,  -3.375, 3.625,
    3.25,   2.375,  -2.875, -0.625, 3.625,  -1.25,  -1.125, 2.125,  0.625,  -1.375, 1.625,  0.875,
    3.0,    -2.875, 3.125,  -1.5,   1.625,  -1.375, 0.625,  -1.75,  -3.0,   -3.125, 6.125,  -4.625,
    -1.75,  0.875,  1.625,  -1.375, -3.375, 2.125,  -1.125, -1.25,  1.0,    0.125,  -2.0,   -1.0,
    -0.625, -2.375, 0.875,  0.375,  0.375,  1.875,  0.875,  -0.125, 0.375,  1.75,   -0.625, -2.375,
    1.75,   -1.125, -0.875, 0.625,  -1.75,  3.0,    -2.875, 3.125,  0.875,  1.625,  -1.375, 0.625,
    4.625,  -3.0,   -3.125, 6.125,  0.625,  -1.75,  0.875,  1.625,  3.625,  -3.375, 2.125,  -1.125,
    3.125,  -2.5,   1.875,  -2.5,   1.625,  -1.125, -0.75,  -2.25,  -2.375, 0.375,  3.75,   -4.125,
    -2.25,  2.5,    1.625,  -1.125, -3.375, 3.625,  -1.25,  -1.125};
// conv2d channels_first same stride 2: shape (2, 4, 3, 3)
const std::vector<double> kConv2dChannelsFirst = {
    -0.125, 0.125,  -2.625, 2.375,  2.0,    2.75,   -0.125, 2.625,  -2.875, 0.875,  -2.875, -1.0,
    -2.5,   -3.875, 2.875,  1.25,   0.75,   -1.125, 2.5,    1.0,    1.25,   -4.25,  2.125,  -2.0,
    0.125,  2.625,  2.5,    0.375,  1.75,   1.0,    2.75,   -1.875, -5.0,   -0.375, -2.375, -0.125,
    1.25,   0.5,    -0.625, -2.5,   2.375,  0.0,    0.875,  0.625,  3.375,  -0.125, 1.25,   0.0,
    2.375,  -1.75,  -4.375, -0.125, -1.625, 0.875,  -0.875, 2.0,    1.25,   1.625,  -2.75,  0.0,
    -3.625, -0.125, 2.125,  -0.375, -0.375, 0.0,    2.75,   1.875,  1.25,   0.375,  1.375,  -2.875};
// conv1d causal dilation 2: shape (2, 7, 3)
const std::vector<double> kConv1dCausalDilated = {
    -1.75,  0.625,  -0.125, -1.75,  0.25,  1.0,    1.25,   -1.875, 0.0,    1.625,  -2.25,
    0.75,   -1.125, 1.75,   -1.625, 0.875, 1.75,   -3.625, 1.5,    -2.375, 1.25,   1.0,
    -0.625, 0.875,  -1.75,  0.375,  0.625, 1.125,  1.0,    -1.625, 1.5,    -2.125, 0.5,
    -3.625, 1.75,   0.875,  -1.625, 1.75,  -1.125, 1.75,   -2.375, 1.0};
// conv1d same stride 3: shape (2, 3, 3)
const std::vector<double> kConv1dSameStride3 = {-1.5,   -1.5,  1.625, -1.625, 1.125, 0.75,
                                                0.625,  0.375, 0.75,  -1.625, 1.375, 0.0,
                                                -1.375, 1.125, 0.5,   -0.5,   1.625, -1.875};
// conv3d same stride (2, 1, 2): shape (1, 2, 3, 2, 2)
const std::vector<double> kConv3dSame = {2.75, 0.5,    1.5,   0.375,  1.5,    -2.375, 1.5, -4.875,
                                         0.5,  -1.625, -3.25, 3.375,  2.125,  -0.25,  1.5, -3.625,
                                         2.25, -5.875, 1.5,   -3.375, -4.375, 3.75,   1.5, -2.125};
// depthwise_conv2d same stride 2: shape (2, 3, 3, 6)
const std::vector<double> kDepthwiseSame = {
    -1.625, 1.125,  0.875,  1.125,  0.625,  1.125,  -0.875, -0.5,   -1.875, 0.875,  -1.375, 1.5,
    -0.875, -0.25,  0.125,  -0.875, -2.125, 1.25,   1.125,  1.125,  0.875,  1.625,  -0.125, 1.875,
    -0.125, -1.75,  0.875,  -0.5,   -1.25,  0.875,  -0.125, -1.0,   2.0,    -2.25,  -0.75,  -0.125,
    0.875,  1.125,  0.625,  1.125,  -1.375, 1.25,   -1.875, 0.875,  -1.375, 1.5,    -0.625, 0.125,
    0.125,  -0.875, -2.125, 1.25,   -0.25,  -0.625, -0.25,  -0.875, -0.875, -1.25,  1.25,   -1.625,
    -0.5,   -0.875, -1.125, -0.5,   0.625,  -0.875, 1.125,  -1.625, 0.875,  -1.25,  1.0,    -0.875,
    -1.0,   -1.25,  -2.25,  1.0,    -0.125, 1.125,  -1.125, -1.125, -0.5,   -1.125, -1.625, -0.125,
    -0.125, 1.0,    1.0,    -1.25,  1.375,  -0.125, -0.875, -1.25,  1.25,   -1.625, -0.625, 0.875,
    -1.125, -0.5,   0.625,  -0.875, 0.375,  -1.875, 0.875,  -1.25,  1.0,    -0.875, 1.125,  0.125};
// conv2d_transpose (2, 6, 6, 2) same stride 2: shape (2, 6, 6, 2)
const std::vector<double> kTransposeSame = {
    0.125,  0.125,  1.375,  -3.0,   2.125,  1.0,    -1.5,   1.125, 0.125,  -1.75,  1.125,  -0.25,
    0.125,  1.375,  -3.0,   1.375,  1.0,    -1.375, 1.125,  -1.25, -1.75,  2.0,    -0.25,  0.25,
    2.0,    -2.0,   -0.375, 1.25,   -1.125, 0.75,   -0.375, 0.5,   0.25,   0.625,  1.0,    1.125,
    1.0,    -1.75,  1.125,  -1.0,   -1.75,  1.875,  -0.25,  0.5,   2.375,  -1.625, -0.25,  0.625,
    -0.625, -1.125, -0.375, 0.375,  0.25,   0.375,  1.0,    1.0,   0.25,   -1.125, -0.375, -1.125,
    -2.25,  0.625,  -0.25,  0.75,   2.375,  -1.75,  -0.25,  0.875, -1.75,  0.25,   1.125,  -1.75,
    -2.5,   1.375,  0.25,   -0.25,  2.0,    -1.75,  -1.25,  1.125, -1.375, 1.0,    1.375,  -3.0,
    1.375,  0.25,   -0.25,  1.125,  -1.75,  0.125,  1.125,  -1.5,  1.0,    2.125,  -3.0,   1.375,
    1.0,    0.625,  -0.375, -1.375, 0.25,   -0.375, -0.375, 0.625, 3.0,    -1.875, -0.375, 1.25,
    0.875,  -1.5,   1.125,  -1.25,  -1.75,  2.0,    -0.25,  0.25,  2.375,  -4.25,  1.125,  -1.0,
    -0.25,  -1.25,  -0.375, 0.5,    0.25,   0.625,  1.0,    1.125, -2.5,   -2.25,  -0.375, 0.375,
    -2.375, 0.875,  -0.25,  0.5,    2.375,  -1.625, -0.25,  0.625, -4.5,   1.75,   -0.25,  0.75};
// conv2d_transpose (2, 7, 7, 2) valid stride 2: shape (2, 7, 7, 2)
const std::vector<double> kTransposeValid = {
    0.125,  0.125, 1.375, -3.0,   2.125,  1.0,    -1.5,   1.125,  0.125,  -1.75,  1.125,  -0.25,
    0.25,   1.375, 0.125, 1.375,  -3.0,   1.375,  1.0,    -1.375, 1.125,  -1.25,  -1.75,  2.0,
    -0.25,  0.25,  1.375, -2.5,   2.0,    -2.0,   -0.375, 1.25,   -1.125, 0.75,   -0.375, 0.5,
    0.25,   0.625, 1.0,   1.125,  -1.875, -1.125, 1.0,    -1.75,  1.125,  -1.0,   -1.75,  1.875,
    -0.25,  0.5,   2.375, -1.625, -0.25,  0.625,  -2.25,  1.125,  -0.625, -1.125, -0.375, 0.375,
    0.25,   0.375, 1.0,   1.0,    0.25,   -1.125, -0.375, -1.125, -0.625, 1.75,   -2.25,  0.625,
    -0.25,  0.75,  2.375, -1.75,  -0.25,  0.875,  -1.75,  0.25,   1.125,  -1.75,  1.0,    0.625,
    0.625,  -0.25, 0.75,  1.125,  -1.75,  0.375,  0.875,  -2.375, 0.25,   1.625,  -1.75,  1.0,
    0.625,  -1.0,  -2.5,  1.375,  0.25,   -0.25,  2.0,    -1.75,  -1.25,  1.125,  -1.375, 1.0,
    1.375,  -3.0,  1.375, 0.125,  1.375,  0.25,   -0.25,  1.125,  -1.75,  0.125,  1.125,  -1.5,
    1.0,    2.125, -3.0,  1.375,  0.125,  0.125,  1.0,    0.625,  -0.375, -1.375, 0.25,   -0.375,
    -0.375, 0.625, 3.0,   -1.875, -0.375, 1.25,   -0.875, 2.0,    0.875,  -1.5,   1.125,  -1.25,
    -1.75,  2.0,   -0.25, 0.25,   2.375,  -4.25,  1.125,  -1.0,   0.625,  1.0,    -0.25,  -1.25,
    -0.375, 0.5,   0.25,  0.625,  1.0,    1.125,  -2.5,   -2.25,  -0.375, 0.375,  1.75,   -0.625,
    -2.375, 0.875, -0.25, 0.5,    2.375,  -1.625, -0.25,  0.625,  -4.5,   1.75,   -0.25,  0.75,
    1.125,  -2.25, 0.875, -0.25,  0.5,    1.25,   -1.625, 0.625,  0.625,  -2.25,  1.75,   0.5,
    0.75,   1.125, -2.25, 0.625};
}  // namespace

std::vector<OpRow> conv_rows() {
  Rows t("conv");
  Gen g(20241124);
  const K::ConvOptions same2{.strides = {2, 2}, .padding = "same"};
  const K::ConvOptions cf{.strides = {2, 1}, .padding = "same", .data_format = "channels_first"};

  // ---- convolutions: NumPy values on ramp inputs, then random inputs for the gradients ---------
  t.values("conv2d_valid", [](const V& x) { return K::conv2d(x[0], x[1]); },
           {ramp({2, 5, 5, 3}), ramp({3, 3, 3, 4}, 5, 0.5)})
      .expect(kConv2dValid, {2, 3, 3, 4})  // NumPy
      .error("data_format", Err::Value, "K::conv2d: The `data_format` argument must be one of",
             [] {
               (void)K::conv2d(ph({2, 5, 5, 3}), ph({3, 3, 3, 4}), {.data_format = "NHWC"});
             })
      .error("padding", Err::Value,
             "K::conv2d: Invalid padding: \"full\" (expected \"valid\" or \"same\")",
             [] {
               (void)K::conv2d(ph({2, 5, 5, 3}), ph({3, 3, 3, 4}), {.padding = "full"});
             })
      .error("causal_only_1d", Err::Value, "Invalid padding: \"causal\"",
             [] {
               (void)K::conv2d(ph({2, 5, 5, 3}), ph({3, 3, 3, 4}), {.padding = "causal"});
             })
      .error("channels", Err::Value,
             "K::conv2d: input of shape (2, 5, 5, 3) has 3 channels but the kernel of shape (3, 3, "
             "2, 4) expects 2",
             [] {
               (void)K::conv2d(ph({2, 5, 5, 3}), ph({3, 3, 2, 4}));
             })
      .error("kernel_rank", Err::Value, "K::conv2d: kernel of shape (3, 3, 3) must have rank 4",
             [] {
               (void)K::conv2d(ph({2, 5, 5, 3}), ph({3, 3, 3}));
             })
      .error("x_rank", Err::Value, "K::conv2d: x of shape (5, 5, 3) must have rank 4",
             [] {
               (void)K::conv2d(ph({5, 5, 3}), ph({3, 3, 3, 4}));
             })
      .error("unknown_kernel", Err::Value,
             "K::conv2d: the kernel's shape (3, None, 3, 4) must be fully known",
             [] {
               (void)K::conv2d(ph({2, 5, 5, 3}), ph({3, K::None, 3, 4}));
             })
      .error("strides_length", Err::Value, "K::conv2d: `strides` (1, 2, 3) must have 2 entries",
             [] {
               (void)K::conv2d(ph({2, 5, 5, 3}), ph({3, 3, 3, 4}), {.strides = {1, 2, 3}});
             })
      .error("strides_huge", Err::Value, "`strides` (4294967296, 1) must hold values from 1 to",
             [] {
               (void)K::conv2d(ph({2, 5, 5, 3}), ph({3, 3, 3, 4}),
                               {.strides = {std::int64_t{1} << 32, 1}, .padding = "same"});
             })
      .error("strides_positive", Err::Value, "`strides` (0, 1) must hold values from 1 to 16777216",
             [] {
               (void)K::conv2d(ph({2, 5, 5, 3}), ph({3, 3, 3, 4}), {.strides = {0, 1}});
             })
      .error("too_small", Err::Value,
             "K::conv2d: input of shape (2, 2, 5, 3) is smaller than the window",
             [] {
               (void)K::conv2d(ph({2, 2, 5, 3}), ph({3, 3, 3, 4}));
             })
      .error("int_dtype", Err::Type, "K::conv2d: `x` must be a float tensor",
             [] {
               (void)K::conv2d(ph({2, 5, 5, 3}, "int32"), ph({3, 3, 3, 4}, "int32"));
             })
      .error("mixed_dtypes", Err::Type, "K::conv2d: operands have different dtypes", [] {
        (void)K::conv2d(ph({2, 5, 5, 3}), ph({3, 3, 3, 4}, "float64"));
      });
  t.values("conv2d_same_stride2", [same2](const V& x) { return K::conv2d(x[0], x[1], same2); },
           {ramp({2, 5, 5, 3}), ramp({3, 3, 3, 4}, 5, 0.5)})
      .expect(kConv2dSameStride2, {2, 3, 3, 4});  // NumPy
  t.values("conv2d_even_kernel_same",
           [](const V& x) { return K::conv2d(x[0], x[1], {.padding = "same"}); },
           {ramp({2, 5, 5, 3}), ramp({2, 2, 3, 2}, 9, 0.5)})
      .expect(kConv2dEvenSame, {2, 5, 5, 2});  // NumPy
  t.values("conv2d_dilated_same",
           [](const V& x) {
             return K::conv2d(x[0], x[1], {.padding = "same", .dilation_rate = {2, 2}});
           },
           {ramp({2, 5, 5, 3}), ramp({3, 3, 3, 4}, 5, 0.5)})
      .expect(kConv2dDilatedSame, {2, 5, 5, 4})  // NumPy
      .error("dilation_positive", Err::Value,
             "K::conv2d: `dilation_rate` (-1,) must hold values from 1 to", [] {
               (void)K::conv2d(ph({2, 5, 5, 3}), ph({3, 3, 3, 4}), {.dilation_rate = {-1}});
             });
  t.values("conv2d_channels_first",
           [](const V& x) {
             return K::conv2d(
                 x[0], x[1],
                 {.strides = {2, 2}, .padding = "same", .data_format = "channels_first"});
           },
           {ramp({2, 3, 5, 5}), ramp({3, 3, 3, 4}, 5, 0.5)})
      .expect(kConv2dChannelsFirst, {2, 4, 3, 3});  // NumPy
  t.values("conv1d_causal_dilated",
           [](const V& x) {
             return K::conv1d(x[0], x[1], {.padding = "causal", .dilation_rate = {2}});
           },
           {ramp({2, 7, 2}), ramp({3, 2, 3}, 5, 0.5)})
      .expect(kConv1dCausalDilated, {2, 7, 3})  // NumPy
      .error("causal_channels_first", Err::Value,
             "K::conv1d: When using causal padding in `conv1d`, `data_format` must be "
             "\"channels_last\"",
             [] {
               (void)K::conv1d(ph({2, 5, 3}), ph({3, 3, 4}),
                               {.padding = "causal", .data_format = "channels_first"});
             });
  t.values("conv1d_same_stride3",
           [](const V& x) { return K::conv1d(x[0], x[1], {.strides = {3}, .padding = "same"}); },
           {ramp({2, 7, 2}), ramp({3, 2, 3}, 5, 0.5)})
      .expect(kConv1dSameStride3, {2, 3, 3});  // NumPy
  t.values("conv3d_same",
           [](const V& x) {
             return K::conv3d(x[0], x[1], {.strides = {2, 1, 2}, .padding = "same"});
           },
           {ramp({1, 4, 3, 4, 2}), ramp({2, 2, 3, 2, 2}, 5, 0.5)})
      .expect(kConv3dSame, {1, 2, 3, 2, 2})  // NumPy
      .error("rank", Err::Value, "K::conv3d: x of shape (2, 5, 5, 3) must have rank 5", [] {
        (void)K::conv3d(ph({2, 5, 5, 3}), ph({3, 3, 3, 3, 4}));
      });
  t.values("depthwise_conv2d_same",
           [same2](const V& x) { return K::depthwise_conv2d(x[0], x[1], same2); },
           {ramp({2, 5, 5, 3}), ramp({3, 3, 3, 2}, 5, 0.5)})
      .expect(kDepthwiseSame, {2, 3, 3, 6})  // NumPy (a grouped conv, one group per channel)
      .error("no_channels", Err::Value,
             "K::depthwise_conv2d: the depthwise kernel of shape (3, 3, 0, 2) needs at least one "
             "input channel",
             [] {
               (void)K::depthwise_conv2d(ph({1, 5, 5, 0}), ph({3, 3, 0, 2}));
             })
      .error("channels", Err::Value,
             "K::depthwise_conv2d: x of shape (2, 5, 5, 3) has 3 channels but the depthwise kernel "
             "of shape (3, 3, 2, 2) expects 2",
             [] {
               (void)K::depthwise_conv2d(ph({2, 5, 5, 3}), ph({3, 3, 2, 2}));
             });
  // By hand: one pixel with channels (2, 3); the 1x1 depthwise kernel (1, 2) gives (2, 6); the
  // pointwise kernel (10, 100) sums them to 2*10 + 6*100.
  t.values("separable_conv2d_by_hand",
           [](const V& x) { return K::separable_conv2d(x[0], x[1], x[2]); },
           {f64({2, 3}, {1, 1, 1, 2}), f64({1, 2}, {1, 1, 2, 1}), f64({10, 100}, {1, 1, 2, 1})})
      .expect({620}, {1, 1, 1, 1})
      .error(
          "pointwise_channels", Err::Value,
          "K::separable_conv2d: pointwise_kernel of shape (1, 1, 5, 4) must be (1, ..., 1, 6, out)",
          [] {
            (void)K::separable_conv2d(ph({2, 5, 5, 3}), ph({3, 3, 3, 2}), ph({1, 1, 5, 4}));
          })
      .error("pointwise_window", Err::Value, "pointwise_kernel of shape (2, 1, 6, 4)", [] {
        (void)K::separable_conv2d(ph({2, 5, 5, 3}), ph({3, 3, 3, 2}), ph({2, 1, 6, 4}));
      });
  t.values("conv2d_transpose_same",
           [same2](const V& x) {
             return K::conv2d_transpose(x[0], x[1], {2, 6, 6, 2}, same2);
           },
           {ramp({2, 3, 3, 4}), ramp({3, 3, 2, 4}, 5, 0.5)})
      .expect(kTransposeSame, {2, 6, 6, 2})  // NumPy (a scatter through the kernel)
      .error("inconsistent", Err::Value,
             "K::conv2d_transpose: output_shape (2, 8, 8, 2) is inconsistent with x of shape (2, "
             "3, 3, 4)",
             [same2] {
               (void)K::conv2d_transpose(ph({2, 3, 3, 4}), ph({3, 3, 2, 4}), {2, 8, 8, 2}, same2);
             })
      .error("out_channels", Err::Value,
             "K::conv2d_transpose: output_shape (2, 6, 6, 3) has 3 channels but the kernel of "
             "shape (3, 3, 2, 4) makes 2",
             [same2] {
               (void)K::conv2d_transpose(ph({2, 3, 3, 4}), ph({3, 3, 2, 4}), {2, 6, 6, 3}, same2);
             })
      .error("in_channels", Err::Value, "has 4 channels but the kernel of shape (3, 3, 2, 5) has 5",
             [same2] {
               (void)K::conv2d_transpose(ph({2, 3, 3, 4}), ph({3, 3, 2, 5}), {2, 6, 6, 2}, same2);
             })
      .error("output_rank", Err::Value, "output_shape (6, 6, 2) must have 4 entries",
             [same2] {
               (void)K::conv2d_transpose(ph({2, 3, 3, 4}), ph({3, 3, 2, 4}), {6, 6, 2}, same2);
             })
      .error("batch", Err::Value,
             "output_shape (3, 6, 6, 2) has batch 3 but x of shape (2, 3, 3, 4) has 2",
             [same2] {
               (void)K::conv2d_transpose(ph({2, 3, 3, 4}), ph({3, 3, 2, 4}), {3, 6, 6, 2}, same2);
             })
      .error("dilation_strides", Err::Value, "needs strides of 1",
             [] {
               (void)K::conv2d_transpose(ph({2, 3, 3, 4}), ph({3, 3, 2, 4}), {2, 6, 6, 2},
                                         {.strides = {2, 2}, .dilation_rate = {2, 2}});
             })
      .error("dilation_equal", Err::Value, "must be equal on every spatial dim",
             [] {
               (void)K::conv2d_transpose(ph({2, 3, 3, 4}), ph({3, 3, 2, 4}), {2, 6, 6, 2},
                                         {.dilation_rate = {2, 1}});
             })
      .error("unknown_spatial", Err::Value, "must be known",
             [same2] {
               (void)K::conv2d_transpose(ph({2, 3, 3, 4}), ph({3, 3, 2, 4}), {2, K::None, 6, 2},
                                         same2);
             })
      .error("3d_dilation", Err::Value, "K::conv3d_transpose: dilation_rate is not supported", [] {
        (void)K::conv3d_transpose(ph({1, 2, 2, 2, 4}), ph({2, 2, 2, 2, 4}), {1, 3, 3, 3, 2},
                                  {.dilation_rate = {2}});
      });
  t.values("conv2d_transpose_valid",
           [](const V& x) {
             return K::conv2d_transpose(x[0], x[1], {K::None, 7, 7, 2}, {.strides = {2, 2}});
           },
           {ramp({2, 3, 3, 4}), ramp({3, 3, 2, 4}, 5, 0.5)})
      .expect(kTransposeValid, {2, 7, 7, 2});  // NumPy
  // By hand: local_conv1d on (1, 2, 3), kernel_size 2, stride 1: step 0 reads (1, 2) with its
  // kernel (1, 10) -> 21; step 1 reads (2, 3) with (100, 1000) -> 3200.
  t.values("local_conv1d_by_hand", [](const V& x) { return K::local_conv1d(x[0], x[1], 2, 1); },
           {f64({1, 2, 3}, {1, 3, 1}), f64({1, 10, 100, 1000}, {2, 2, 1})})
      .expect({21, 3200}, {1, 2, 1})
      .error("kernel_shape", Err::Value, "K::local_conv1d: kernel of shape (3, 5, 3)",
             [] {
               (void)K::local_conv1d(ph({2, 6, 2}), ph({3, 5, 3}), 2, 2);
             })
      .error("too_many_steps", Err::Value,
             "output steps, more than inputs of shape (2, 6, 2) allow", [] {
               (void)K::local_conv1d(ph({2, 6, 2}), ph({4, 4, 3}), 2, 2);
             });
  // By hand: 1x1 windows with a weight per position.
  t.values("local_conv2d_by_hand",
           [](const V& x) {
             return K::local_conv2d(x[0], x[1], {1, 1}, {1, 1}, {2, 2});
           },
           {f64({1, 2, 3, 4}, {1, 2, 2, 1}), f64({1, 10, 100, 1000}, {4, 1, 1})})
      .expect({1, 20, 300, 4000}, {1, 2, 2, 1})
      .error("kernel_shape", Err::Value,
             "K::local_conv2d: kernel of shape (4, 8, 2) must be (6, 8, filters)", [] {
               (void)K::local_conv2d(ph({1, 4, 4, 2}), ph({4, 8, 2}), {2, 2}, {2, 2}, {3, 2});
             });

  // Gradients (float64, every float input) and cpu-vs-reference parity on random inputs.
  t.op("conv1d_valid_grad", [](const V& x) { return K::conv1d(x[0], x[1]); },
       {g.normal({2, 6, 3}), g.normal({3, 3, 2})})
      .no_unknown_dims()
      .formula([](const In& in) { return naive::conv(in[0], in[1], {}); });
  t.op("conv1d_causal_grad",
       [](const V& x) {
         return K::conv1d(x[0], x[1], {.padding = "causal", .dilation_rate = {2}});
       },
       {g.normal({2, 6, 2}), g.normal({2, 2, 3})})
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::conv(in[0], in[1], {.dilation = {2}, .padding = "causal"});
      });
  t.op("conv1d_same_stride2_grad",
       [](const V& x) { return K::conv1d(x[0], x[1], {.strides = {2}, .padding = "same"}); },
       {g.normal({1, 7, 2}), g.normal({3, 2, 2})})
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::conv(in[0], in[1], {.strides = {2}, .padding = "same"});
      });
  t.op("conv2d_valid_grad", [](const V& x) { return K::conv2d(x[0], x[1]); },
       {g.normal({2, 5, 4, 3}), g.normal({3, 2, 3, 2})})
      .second_order()
      .no_unknown_dims()
      .formula([](const In& in) { return naive::conv(in[0], in[1], {}); });
  // A first layer's shape (one input channel: 9 columns, the forward's direct loop instead of a
  // GEMM) with 35 filters: one 32-wide register block and a remainder.
  t.op("conv2d_thin_first_layer_grad",
       [](const V& x) { return K::conv2d(x[0], x[1], {.padding = "same"}); },
       {g.normal({2, 6, 5, 1}), g.normal({3, 3, 1, 35})})
      .no_unknown_dims()
      .formula([](const In& in) { return naive::conv(in[0], in[1], {.padding = "same"}); });
  t.op("conv2d_same_stride2_grad", [same2](const V& x) { return K::conv2d(x[0], x[1], same2); },
       {g.normal({2, 5, 6, 2}), g.normal({3, 3, 2, 3})})
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::conv(in[0], in[1], {.strides = {2, 2}, .padding = "same"});
      });
  t.op("conv2d_even_same_grad",
       [](const V& x) { return K::conv2d(x[0], x[1], {.padding = "same"}); },
       {g.normal({1, 4, 5, 2}), g.normal({2, 2, 2, 2})})
      .no_unknown_dims()
      .formula([](const In& in) { return naive::conv(in[0], in[1], {.padding = "same"}); });
  t.op("conv2d_dilated_grad",
       [](const V& x) {
         return K::conv2d(x[0], x[1], {.padding = "same", .dilation_rate = {2, 1}});
       },
       {g.normal({1, 5, 4, 2}), g.normal({3, 2, 2, 2})})
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::conv(in[0], in[1], {.dilation = {2, 1}, .padding = "same"});
      });
  t.op("conv2d_channels_first_grad", [cf](const V& x) { return K::conv2d(x[0], x[1], cf); },
       {g.normal({2, 3, 5, 4}), g.normal({3, 3, 3, 2})})
      .second_order()
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::conv(in[0], in[1],
                           {.strides = {2, 1}, .padding = "same", .channels_first = true});
      });
  t.op("conv3d_grad",
       [](const V& x) {
         return K::conv3d(x[0], x[1], {.strides = {2, 1, 2}, .padding = "same"});
       },
       {g.normal({1, 4, 3, 4, 2}), g.normal({2, 2, 2, 2, 2})})
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::conv(in[0], in[1], {.strides = {2, 1, 2}, .padding = "same"});
      });
  t.op("conv2d_transpose_grad",
       [same2](const V& x) {
         return K::conv2d_transpose(x[0], x[1], {2, 6, 5, 2}, same2);
       },
       {g.normal({2, 3, 3, 3}), g.normal({3, 3, 2, 3})})
      .second_order()
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::conv_transpose(in[0], in[1], {2, 6, 5, 2},
                                     {.strides = {2, 2}, .padding = "same"});
      });
  t.op("conv2d_transpose_cf_grad",
       [](const V& x) {
         return K::conv2d_transpose(x[0], x[1], {1, 2, 7, 6},
                                    {.strides = {2, 2}, .data_format = "channels_first"});
       },
       {g.normal({1, 3, 3, 2}), g.normal({3, 3, 2, 3})})
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::conv_transpose(in[0], in[1], {1, 2, 7, 6},
                                     {.strides = {2, 2}, .channels_first = true});
      });
  t.op("conv2d_transpose_dilated_grad",
       [](const V& x) {
         return K::conv2d_transpose(x[0], x[1], {1, 6, 6, 2},
                                    {.padding = "same", .dilation_rate = {2, 2}});
       },
       {g.normal({1, 6, 6, 2}), g.normal({2, 2, 2, 2})})
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::conv_transpose(in[0], in[1], {1, 6, 6, 2},
                                     {.dilation = {2, 2}, .padding = "same"});
      });
  t.op("conv3d_transpose_grad",
       [](const V& x) {
         return K::conv3d_transpose(x[0], x[1], {1, 4, 3, 4, 2},
                                    {.strides = {2, 1, 2}, .padding = "same"});
       },
       {g.normal({1, 2, 3, 2, 2}), g.normal({2, 2, 2, 2, 2})})
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::conv_transpose(in[0], in[1], {1, 4, 3, 4, 2},
                                     {.strides = {2, 1, 2}, .padding = "same"});
      });
  t.op("depthwise_conv2d_grad",
       [same2](const V& x) { return K::depthwise_conv2d(x[0], x[1], same2); },
       {g.normal({2, 5, 4, 3}), g.normal({3, 3, 3, 2})})
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::depthwise(in[0], in[1], {.strides = {2, 2}, .padding = "same"});
      });
  t.op("depthwise_conv2d_cf_grad", [cf](const V& x) { return K::depthwise_conv2d(x[0], x[1], cf); },
       {g.normal({1, 2, 4, 4}), g.normal({2, 2, 2, 3})})
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::depthwise(in[0], in[1],
                                {.strides = {2, 1}, .padding = "same", .channels_first = true});
      });
  t.op("separable_conv2d_grad",
       [](const V& x) { return K::separable_conv2d(x[0], x[1], x[2], {.padding = "same"}); },
       {g.normal({1, 4, 4, 2}), g.normal({3, 3, 2, 2}), g.normal({1, 1, 4, 3})})
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::conv(naive::depthwise(in[0], in[1], {.padding = "same"}), in[2], {});
      });
  t.op("separable_conv1d_grad",
       [](const V& x) { return K::separable_conv1d(x[0], x[1], x[2], {.strides = {2}}); },
       {g.normal({2, 7, 2}), g.normal({3, 2, 2}), g.normal({1, 4, 3})})
      .no_unknown_dims()
      .formula([](const In& in) {
        return naive::conv(naive::depthwise(in[0], in[1], {.strides = {2}}), in[2], {});
      });
  t.op("local_conv1d_grad", [](const V& x) { return K::local_conv1d(x[0], x[1], 2, 2); },
       {g.normal({2, 6, 2}), g.normal({3, 4, 3})})
      .no_unknown_dims();
  t.op("local_conv2d_cf_grad",
       [](const V& x) {
         return K::local_conv2d(x[0], x[1], {2, 2}, {1, 2}, {2, 2}, "channels_first");
       },
       {g.normal({2, 2, 3, 4}), g.normal({4, 8, 2})})
      .no_unknown_dims();
  return t.take();
}

}  // namespace ktape::op_rows
