// Eigen GEMMs cut into panels so that Eigen's packing buffers (a panel x kc block of each
// operand, kc <= ~320) stay below EIGEN_STACK_ALLOCATION_LIMIT: on the stack, never a heap
// allocation per call, whatever the layer's width. Each output element is still one sum over the
// whole depth. For the cpu kernel files (they include Eigen). Not a public header.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace ktape::kernels {

// Rows and columns of the output per GEMM call for a product of depth k: a panel x min(k, 320)
// block of T is at most 256 KiB (a multiple of 8, at least 8).
template <class T>
inline std::int64_t gemm_panel(std::int64_t depth) {
  const std::int64_t kc = std::clamp<std::int64_t>(depth, 1, 320);
  const auto p = static_cast<std::int64_t>(256 * 1024 / sizeof(T)) / kc;
  return std::max<std::int64_t>(8, p / 8 * 8);
}

// dst = a * b, or dst += a * b, panel by panel. dst, a and b are Eigen matrix expressions
// (maps, blocks, transposes).
template <class Dst, class A, class B>
void gemm_panels(Dst&& dst, const A& a, const B& b, bool accumulate) {
  using T = typename std::decay_t<Dst>::Scalar;
  const std::int64_t m = dst.rows(), n = dst.cols(), p = gemm_panel<T>(a.cols());
  for (std::int64_t i0 = 0; i0 < m; i0 += p)
    for (std::int64_t j0 = 0; j0 < n; j0 += p) {
      const std::int64_t mi = std::min(p, m - i0), nj = std::min(p, n - j0);
      auto d = dst.block(i0, j0, mi, nj);
      if (accumulate)
        d.noalias() += a.middleRows(i0, mi) * b.middleCols(j0, nj);
      else
        d.noalias() = a.middleRows(i0, mi) * b.middleCols(j0, nj);
    }
}

}  // namespace ktape::kernels
