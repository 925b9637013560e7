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
// too (a row-major C needs a row-major B; a weight's transpose there goes to BLIS).
template <class T>
bool takes(MatRef<const T> a, MatRef<const T> b, MatRef<T> c);

// C (m x n) = A B, or C += A B, as one kernel call on the calling thread: false (C untouched)
// when LIBXSMM has no kernel for it. Every element of C is the sum over the depth in order, in
// one register, so an element's bits do not depend on the extent of the product it is part of.
template <class T>
bool run(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a, MatRef<const T> b,
         MatRef<T> c, bool accumulate);

}  // namespace ktape::kernels::xsmm
