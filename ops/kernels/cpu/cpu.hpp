// Registration entry points of the cpu kernel families (Eigen + oneTBB).
#pragma once

#include <cstddef>
#include <type_traits>

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
void register_cpu_sparse(Backend& b);

// Sets op's kernel, for every dtype the backend already has one for, to pick(es): the kernel
// for elements of es bytes (std::integral_constant<std::size_t, 1, 2, 4 or 8>), for kernels that
// only move bytes: set_by_size(b, op, [](auto es) { return &kernel<es.value>; }).
template <class Pick>
void set_by_size(Backend& b, Op op, Pick pick) {
  for (int d = 0; d < kNumDTypes; ++d) {
    const auto dt = static_cast<DType>(d);
    if (!b.get(op, dt)) continue;
    const std::size_t es = dtype_size(dt);
    if (es == 1) b.set(op, dt, pick(std::integral_constant<std::size_t, 1>{}));
    if (es == 2) b.set(op, dt, pick(std::integral_constant<std::size_t, 2>{}));
    if (es == 4) b.set(op, dt, pick(std::integral_constant<std::size_t, 4>{}));
    if (es == 8) b.set(op, dt, pick(std::integral_constant<std::size_t, 8>{}));
  }
}

}  // namespace ktape::kernels
