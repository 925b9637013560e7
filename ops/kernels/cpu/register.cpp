// The cpu backend: reference kernels first (so the table is complete), then the cpu overrides.
#include "engine/backend.hpp"
#include "ops/kernels/cpu/cpu.hpp"
#include "ops/kernels/cpu/gemm.hpp"
#include "ops/kernels/reference/reference.hpp"

namespace ktape {

void register_cpu_kernels(Backend& b) {
  kernels::apply_gemm_environment();  // KTAPE_GEMM, before any kernel runs
  kernels::register_reference_all(b);
  b.fuse_elementwise = true;
  b.matmul_epilogue = &kernels::matmul_epilogue_kernel;
  kernels::register_cpu_matmul(b);
  kernels::register_cpu_elementwise(b);
  kernels::register_cpu_reduce(b);
  kernels::register_cpu_layout(b);
  kernels::register_cpu_conv(b);
  kernels::register_cpu_pool(b);
  kernels::register_cpu_nn(b);
  kernels::register_cpu_ctc(b);
  kernels::register_cpu_sparse(b);
}

}  // namespace ktape
