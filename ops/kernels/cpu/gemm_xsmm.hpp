// LIBXSMM inside the cpu GEMM, in builds with KTAPE_XSMM (Debian's libxsmm-dev): kernels that
// LIBXSMM generates at run time for one product shape and its strides, which read A and B where
// they lie (nothing is packed) and keep a block of C in registers across the whole depth.
// Internal to gemm.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "ops/kernels/cpu/gemm.hpp"

namespace ktape::kernels::xsmm {

// Whether LIBXSMM generates vector code for this CPU (AVX2 or AVX-512), and its name for the
// instruction set ("cpx", "hsw", ...).
bool available();
std::string kernel_name();

// Whether run() takes operands of these strides: LIBXSMM's kernels read A and B transposed or
// not, except the one that runs along C's unit stride, which must have a unit stride that way
// too (a row-major C needs a row-major B; gemm.cpp copies a transposed one first where it fits).
template <class T>
bool takes(MatRef<const T> a, MatRef<const T> b, MatRef<T> c);

// C (m x n) = A B, or C += A B, as one kernel call on the calling thread: false (C untouched)
// when LIBXSMM has no kernel for it, or an extent or stride exceeds its 32-bit integers. The
// bits depend on the kernel's shape (m, n, k): LIBXSMM's AVX-512 kernels do not always sum the
// depth in order, so callers fix the shapes they call it with by the product's shape alone.
template <class T>
bool run(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a, MatRef<const T> b,
         MatRef<T> c, bool accumulate);

}  // namespace ktape::kernels::xsmm
