/// \file
/// The op kinds of the graph, in one X-macro list so that names, tables and plugins agree.
/// The attribute layout of each op is documented next to the K:: function that builds it.
#pragma once

// clang-format off
#define KTAPE_OP_LIST(X)                                                                      \
  /* sources */                                                                             \
  X(Placeholder) X(Variable) X(Constant) X(RandomUniform) X(RandomNormal) X(TruncatedNormal) \
  X(RandomBinomial) X(DropoutMask)                                                         \
  /* elementwise unary */                                                                   \
  X(Identity) X(StopGradient) X(PrintTensor) X(Neg) X(Square) X(Sqrt) X(Exp) X(Log) X(Abs)    \
  X(Sign) X(Round) X(Sigmoid) X(Tanh) X(Relu) X(ReluGrad) X(Clip) X(ClipGrad) X(Pow) X(Cast)  \
  X(Sin) X(Cos) X(Softplus) X(SigmoidGrad) X(TanhGrad)                                      \
  /* elementwise binary (numpy broadcasting) and select */                                  \
  X(Add) X(Sub) X(Mul) X(Div) X(Maximum) X(Minimum) X(Equal) X(NotEqual) X(Greater)          \
  X(GreaterEqual) X(Less) X(LessEqual) X(Select) X(AddN)                                    \
  /* broadcasting helpers used by gradients */                                              \
  X(SumToLike) X(BroadcastToLike) X(SizeRatio) X(FillLike) X(ShapeOf)                       \
  /* reductions */                                                                          \
  X(Sum) X(Mean) X(Max) X(Min) X(Prod) X(ArgMax) X(ArgMin) X(Cumsum) X(Cumprod)            \
  /* nn */                                                                                  \
  X(Softmax) X(LogSoftmax) X(SparseSoftmaxCE) X(OneHot) X(CtcLoss) X(CtcLossGrad) X(CtcDecode)\
  /* linear algebra and layout */                                                           \
  X(MatMul) X(Transpose) X(Reshape) X(ReshapeLike) X(ExpandAxes) X(SqueezeAxes) X(Concat)   \
  X(ConcatPart) X(Slice) X(SlicePad) X(Gather) X(GatherGrad) X(Reverse)                     \
  /* sparse tensors (ops/sparse.hpp) */                                                     \
  X(SparseTensor) X(SparseToDense) X(SparseDenseMatMul) X(SparseConcatIndices)              \
  X(DenseIndices) X(ShapeCarrier) X(SparseGather)                                           \
  /* sliding windows (ops/conv, ops/pool) and padding (ops/image) */                       \
  X(Conv) X(ConvBackpropInput) X(ConvBackpropFilter) X(Pool) X(MaxPoolGrad)                 \
  X(MaxPoolGradGrad) X(MaxPoolReluGrad) X(AvgPoolGrad) X(Pad)                              \
  /* state */                                                                               \
  X(Assign) X(Group)                                                                        \
  /* collectives over processes (ops/collective.hpp) */                                     \
  X(Allreduce)                                                                              \
  /* symbolic loops (ops/loops/scan.hpp) */                                                  \
  X(Scan) X(ScanPart) X(ScanEmbed)
// clang-format on

namespace ktape {

enum class Op : unsigned short {
#define KTAPE_OP_ENUM(name) name,
  KTAPE_OP_LIST(KTAPE_OP_ENUM)
#undef KTAPE_OP_ENUM
      kCount
};
inline constexpr int kNumOps = static_cast<int>(Op::kCount);

const char* op_name(Op op);

}  // namespace ktape
