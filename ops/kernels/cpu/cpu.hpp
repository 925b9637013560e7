// Registration entry points of the cpu kernel families (Eigen + oneTBB).
#pragma once

#include <cstddef>

#include "engine/backend.hpp"
#include "engine/dtype.hpp"

namespace ktape::kernels {
void register_cpu_matmul(Backend& b);
void register_cpu_elementwise(Backend& b);
void register_cpu_reduce(Backend& b);
void register_cpu_layout(Backend& b);
void register_cpu_conv(Backend& b);
void register_cpu_pool(Backend& b);
void register_cpu_nn(Backend& b);
void register_cpu_ctc(Backend& b);  // ops/kernels/ctc.cpp

// Sets op's kernel to Kernel<element size>::run for every dtype the backend already has one
// for (kernels that only move bytes).
template <template <std::size_t> class Kernel>
void set_by_size(Backend& b, Op op) {
  for (int d = 0; d < kNumDTypes; ++d) {
    const auto dt = static_cast<DType>(d);
    if (!b.get(op, dt)) continue;
    switch (dtype_size(dt)) {
      case 1:
        b.set(op, dt, &Kernel<1>::run);
        break;
      case 2:
        b.set(op, dt, &Kernel<2>::run);
        break;
      case 4:
        b.set(op, dt, &Kernel<4>::run);
        break;
      case 8:
        b.set(op, dt, &Kernel<8>::run);
        break;
      default:
        break;
    }
  }
}

}  // namespace ktape::kernels
