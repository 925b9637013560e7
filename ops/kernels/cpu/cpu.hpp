// Registration entry points of the cpu kernel families (Eigen + oneTBB).
#pragma once

namespace ktape {
struct Backend;
}

namespace ktape::kernels {
void register_cpu_matmul(Backend& b);
void register_cpu_elementwise(Backend& b);
void register_cpu_reduce(Backend& b);
void register_cpu_layout(Backend& b);
void register_cpu_conv(Backend& b);
void register_cpu_pool(Backend& b);
void register_cpu_nn(Backend& b);
void register_cpu_ctc(Backend& b);  // ops/kernels/ctc.cpp
}  // namespace ktape::kernels
