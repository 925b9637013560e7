// BLIS inside the cpu GEMM, in builds with KTAPE_BLIS: the kernel set chosen for this CPU, BLIS's
// own serial product, and ktape's blocked product around BLIS's micro-kernel. Internal to
// gemm.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ops/kernels/cpu/gemm.hpp"

namespace ktape::kernels::blis {

// Whether BLIS has kernels for this CPU (not its reference "generic" set), and their name
// ("skx", "skx (by ktape)").
bool has_kernels();
std::string kernel_name();
// Whether an Intel brand string names a Xeon with AVX-512 but one FMA unit (Bronze, Silver, D,
// E-2300, W-2102 and W-2104, Skylake / Cascade Lake Gold 51xx and 52xx but the 5122 and 5222),
// where BLIS's haswell kernels are kept. Other names, including any not listed, get skx.
bool one_fma_unit(const std::string& brand);

// BLIS's serial product, on the calling thread (conv tiles).
template <class T>
void serial(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a, MatRef<const T> b,
            MatRef<T> c, bool accumulate);

// C = A B (or C += A B) with ktape's loops around BLIS's micro-kernel. For each block of the
// depth both operands are packed once, by all threads, into `scratch`; the output's micro-tiles
// are then split into as many tasks as the work and the thread count give, each task reading the
// shared packs (in a product of one depth block, a task that is done takes the last units of
// the others). Every micro-tile is computed alike whichever task runs it (the same packed
// panels, the same depth blocks, fixed by the shape), so the bits do not depend on the split or
// the thread count. `scratch` holds blocked_scratch(m, n, k) bytes, 64-byte aligned, or is null
// and the call allocates it.
template <class T>
std::size_t blocked_scratch(std::int64_t m, std::int64_t n, std::int64_t k);
template <class T>
void blocked(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a, MatRef<const T> b,
             MatRef<T> c, bool accumulate, void* scratch, const GemmKeep* keep = nullptr,
             bool one_task = false);
// C_i = A_i B for products sharing B (GemmPart), as one blocked product: each depth block's
// panels of B are packed once for all of them. Micro-panels run on across the parts (one may
// take rows from two).
template <class T>
std::size_t blocked_parts_scratch(const std::int64_t* ms, int count, std::int64_t n,
                                  std::int64_t k);
template <class T>
void blocked_parts(const GemmPart<T>* parts, int count, std::int64_t n, std::int64_t k,
                   MatRef<const T> b, void* scratch);
// The bytes of every depth block's packs of operand `which` (0: a, 1: b), for a row-major C
// (gemm_pack_cache_bytes).
template <class T>
std::size_t kept_bytes(std::int64_t m, std::int64_t n, std::int64_t k, int which);

// The most bytes of packs the blocked product keeps at once (default 2 MiB; see
// set_gemm_pack_budget).
void set_pack_bytes(std::int64_t bytes);

// Units of the blocked product that a task took from another task's cell, since the start (for
// tests: gemm_units_taken()).
std::uint64_t units_taken();

// Whether the blocked product serves this type (BLIS's micro-tile fits its temporary tile).
template <class T>
bool blocked_available();

// Micro-tiles of a row-major m x n output.
template <class T>
std::int64_t micro_tiles(std::int64_t m, std::int64_t n);

}  // namespace ktape::kernels::blis
