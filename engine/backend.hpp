/// \file
/// Backends: a table from (op, dtype) to kernel. `reference` is complete, serial and naive (the
/// oracle); `cpu` (Eigen + oneTBB) overrides the hot kernels and falls back to reference for the
/// rest. Selection follows Keras: non-empty KERAS_BACKEND, else keras.json "backend", else cpu.
/// A path to a shared library loads an external backend (see plugin ABI below).
#pragma once

#include <string>
#include <vector>

#include "engine/dtype.hpp"
#include "engine/kernel_abi.hpp"
#include "engine/op_list.hpp"

namespace ktape {

struct Backend {
  std::string name;
  /// Function fuses elementwise chains into one chunked pass (engine/fusion.hpp) and writes
  /// updates into their variables in place; the backend's elementwise kernels must be safe on
  /// chunks and in place (OpDef::elementwise). The reference backend stays one kernel per node,
  /// so it remains the plain oracle.
  bool fuse_elementwise = false;
  /// The backend's MatMul kernel that also runs a fused pass over its product (band by band as
  /// the product finishes, or after it) (KernelCall::ctx: a MatMulEpilogue, engine/fusion.hpp), for
  /// a dtype; null: none.
  KernelFn (*matmul_epilogue)(DType) = nullptr;
  KernelFn kernels[kNumOps][kNumDTypes] = {};
  void set(Op op, DType dt, KernelFn fn) {
    kernels[static_cast<int>(op)][static_cast<int>(dt)] = fn;
  }
  KernelFn get(Op op, DType dt) const {
    return kernels[static_cast<int>(op)][static_cast<int>(dt)];
  }
};

const Backend& reference_backend();
const Backend& cpu_backend();
/// The backend chosen by configuration; logs "Using ktape backend (<name>)." once.
const Backend& active_backend();
/// Resolves a name ("cpu", "reference", "tensorflow"/"theano"/"cntk" -> cpu, or a .so path).
const Backend& backend_by_name(const std::string& name);
/// The kernel for (op, dtype) in `b`, falling back to reference; nullptr if none exists.
KernelFn find_kernel(const Backend& b, Op op, DType dt);
/// The ops a plugin must provide (float32), i.e. every float32 kernel the reference backend has.
std::vector<std::string> required_plugin_kernels();
/// Forgets the chosen backend so the next use selects again (tests, clear of config).
void reset_backend_selection();

/// Plugin ABI: a shared library exports
///   extern "C" void ktape_backend_register(ktape::PluginRegistrar* r);
/// and calls r->add("MatMul", "float32", fn) for each kernel it provides. Loading fails with a
/// ValueError listing every missing required kernel.
/// A plugin may hand back the host's reference kernel for any entry it does not optimise
/// (r->add(op, dt, r->reference(op, dt))), an explicit choice the validation accepts.
struct PluginRegistrar {
  virtual ~PluginRegistrar() = default;
  virtual void add(const char* op, const char* dtype, KernelFn fn) = 0;
  virtual KernelFn reference(const char* op, const char* dtype) const = 0;
};

/// Called by the kernel libraries (one call per family) to fill the two built-in tables.
void register_reference_kernels(Backend& b);
void register_cpu_kernels(Backend& b);

}  // namespace ktape
