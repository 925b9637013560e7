/// \file
/// The kernel ABI: what a backend kernel sees. Raw pointers, dims and attributes only; no graph,
/// no Tensor handles, no allocation. Kernels must not allocate on the heap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/dtype.hpp"

namespace ktape {

/// Op attributes. Each op documents what its ints/floats/str mean.
struct Attrs {
  std::vector<std::int64_t> ints;
  std::vector<double> floats;
  std::string str;
  bool operator==(const Attrs& o) const {
    return ints == o.ints && floats == o.floats && str == o.str;
  }
};

struct ArrayRef {
  void* data = nullptr;
  const std::int64_t* dims = nullptr;
  int ndim = 0;
  std::int64_t size = 0;
  DType dtype = DType::float32;
};

struct KernelCall {
  const ArrayRef* in = nullptr;
  int n_in = 0;
  ArrayRef out;
  const Attrs* attrs = nullptr;
  /// Random ops: a per-node seed and a counter that advances on every call, so every call
  /// draws fresh numbers and a fixed seed gives the same sequence run after run.
  std::uint64_t seed = 0;
  std::uint64_t counter = 0;
  /// The context the op's compile hook prepared (OpDef::prepare), or a fused group's program.
  const void* ctx = nullptr;
  /// Arena bytes the compile hook asked for, private to this step while it runs.
  void* scratch = nullptr;
};

using KernelFn = void (*)(const KernelCall&);

}  // namespace ktape
