// cpu kernels of the sparse ops (what each computes: ops/kernels/reference/sparse.cpp), split
// over threads by the grain policy, with the reference's bits at any thread count:
// - SparseTensor, SparseToDense: zeros written in ranges; the entries checked, and the order of
//   their positions, in slots of entries; then, when the positions never go down (row-major
//   order: fed values sorted, ctc_label_dense_to_sparse's, a concatenation of such along the first
//   axis), each slot adds its own entries. A run of entries at one position belongs to the slot it
//   starts in, so every element sums its entries in entry order, as the reference does. Entries in
//   any other order add serially.
// - SparseGather: slots of entries. SparseConcatIndices, DenseIndices: ranges of elements.
// An index out of range raises the reference's ValueError, for the first such entry.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "engine/backend.hpp"
#include "engine/parallel.hpp"
#include "ops/kernels/cpu/cpu.hpp"
#include "ops/kernels/sparse.hpp"

namespace ktape::kernels {

namespace {

constexpr std::int64_t kMaxSlots = 256;

// Entries [first, end) of slot s of `slots` over nnz entries.
std::pair<std::int64_t, std::int64_t> slot_range(std::int64_t nnz, std::int64_t s,
                                                 std::int64_t slots) {
  return {nnz * s / slots, nnz * (s + 1) / slots};
}

// Slots for nnz entries of `rank` indices. An entry's pass (its indices checked, its position
// found, an element read or added) is taken as 8 adds' worth per index and 16 more: to_dense's
// checking pass took 2.2-2.6 ns an entry at rank 2 on one core of a Xeon (perf, in
// BM_Sparse/0/0/1), 37-43 adds.
std::int64_t entry_slots(std::int64_t nnz, int rank) {
  return slot_count(static_cast<double>(nnz) * (8.0 * rank + 16.0), nnz, kMaxSlots);
}

bool in_range(const std::int64_t* idx, std::int64_t k, int rank, const std::int64_t* dims) {
  for (int d = 0; d < rank; ++d) {
    const std::int64_t v = idx[k * rank + d];
    if (v < 0 || v >= dims[d]) return false;
  }
  return true;
}

// Row-major position of entry k, its indices in range.
std::int64_t position(const std::int64_t* idx, std::int64_t k, int rank, const std::int64_t* dims) {
  std::int64_t off = 0;
  for (int d = 0; d < rank; ++d) off = off * dims[d] + idx[k * rank + d];
  return off;
}

// The reference's ValueError for entry k, one of whose indices is out of range.
[[noreturn]] void throw_out_of_range(const char* fn, const std::int64_t* idx, std::int64_t k,
                                     int rank, const std::int64_t* dims) {
  for (int d = 0; d < rank; ++d) (void)sparse_index(fn, idx, k, rank, d, dims[d]);
  throw Error(std::string(fn) + ": entry " + std::to_string(k) + " has no index out of range");
}

// What a slot of entries found: its first entry out of range, the positions of its first and
// last entries that are not padding (-1: none), and whether its positions never go down.
struct SlotScan {
  std::int64_t bad = -1, first = -1, last = -1;
  bool sorted = true;
};

// Entries of rank R (R = 0: any rank, read at run time; 1 and 2 unrolled).
template <class T, int R>
void densify(const KernelCall& c) {
  using C = Compute<T>;
  const auto* idx = ptr<const std::int64_t>(c.in[0]);
  const T* val = ptr<const T>(c.in[1]);
  const std::int64_t nnz = c.in[1].size;
  const int rank = R > 0 ? R : c.out.ndim;
  const std::int64_t* dims = c.out.dims;
  T* out = ptr<T>(c.out);
  const std::int64_t slots = entry_slots(nnz, rank);
  SlotScan scan[kMaxSlots];
  parallel_slots(slots, [&](std::int64_t s) {
    const auto [k0, k1] = slot_range(nnz, s, slots);
    SlotScan r;  // in registers while the loop runs: scan[] could alias idx for all we know
    for (std::int64_t k = k0; k < k1; ++k) {
      if (is_padding(idx, k, rank)) continue;
      if (!in_range(idx, k, rank, dims)) {
        r.bad = k;
        break;
      }
      const std::int64_t off = position(idx, k, rank, dims);
      if (r.first < 0) r.first = off;
      r.sorted = r.sorted && off >= r.last;
      r.last = off;
    }
    scan[s] = r;
  });
  // Each slot's entries at the last position of the slots before it, which a run that started
  // there adds.
  std::int64_t before[kMaxSlots];
  bool sorted = true;
  for (std::int64_t s = 0, last = -1; s < slots; ++s) {
    if (scan[s].bad >= 0) throw_out_of_range("K::to_dense", idx, scan[s].bad, rank, dims);
    sorted = sorted && scan[s].sorted && (scan[s].first < 0 || scan[s].first >= last);
    before[s] = last;
    if (scan[s].last >= 0) last = scan[s].last;
  }
  parallel_for(c.out.size, 0.25,
               [&](std::int64_t i0, std::int64_t i1) { std::fill(out + i0, out + i1, T(0)); });
  auto add = [&](std::int64_t k, std::int64_t off) {
    if constexpr (std::is_same_v<T, bool>)
      out[off] = out[off] || val[k];
    else
      out[off] = static_cast<T>(wrap_add(static_cast<C>(out[off]), static_cast<C>(val[k])));
  };
  if (!sorted) {
    for (std::int64_t k = 0; k < nnz; ++k)
      if (!is_padding(idx, k, rank)) add(k, position(idx, k, rank, dims));
    return;
  }
  parallel_slots(slots, [&](std::int64_t s) {
    const auto [k0, k1] = slot_range(nnz, s, slots);
    bool leading = true;  // still in a run an earlier slot started (and adds)
    for (std::int64_t k = k0; k < k1; ++k) {
      if (is_padding(idx, k, rank)) continue;
      const std::int64_t off = position(idx, k, rank, dims);
      if (leading && off == before[s]) continue;
      leading = false;
      add(k, off);
    }
    if (leading) return;  // the slot's last run is an earlier slot's
    // The slot's last run, on into the slots after it (over those of padding alone at once).
    const std::int64_t last = scan[s].last;
    for (std::int64_t t = s + 1; t < slots; ++t) {
      if (scan[t].first < 0) continue;
      if (scan[t].first != last) return;
      const auto [t0, t1] = slot_range(nnz, t, slots);
      for (std::int64_t k = t0; k < t1; ++k) {
        if (is_padding(idx, k, rank)) continue;
        const std::int64_t off = position(idx, k, rank, dims);
        if (off != last) return;
        add(k, off);
      }
    }
  });
}

// Ranks 1 and 2 unrolled for float and double only (the rest are rarer: one instantiation each
// keeps the file's compile time down).
template <class T>
void densify_kernel(const KernelCall& c) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (c.out.ndim == 2) return densify<T, 2>(c);
    if (c.out.ndim == 1) return densify<T, 1>(c);
  }
  densify<T, 0>(c);
}

// SparseGather(indices, x): elements of ES bytes, padding entries zero.
template <std::size_t ES>
void sparse_gather_kernel(const KernelCall& c) {
  const auto* idx = ptr<const std::int64_t>(c.in[0]);
  const ArrayRef& x = c.in[1];
  const char* px = static_cast<const char*>(x.data);
  char* out = static_cast<char*>(c.out.data);
  const std::int64_t nnz = c.out.size;
  const std::int64_t slots = entry_slots(nnz, x.ndim);
  std::int64_t bad[kMaxSlots];
  parallel_slots(slots, [&](std::int64_t s) {
    bad[s] = -1;
    const auto [k0, k1] = slot_range(nnz, s, slots);
    for (std::int64_t k = k0; k < k1; ++k) {
      char* o = out + static_cast<std::size_t>(k) * ES;
      if (is_padding(idx, k, x.ndim)) {
        std::memset(o, 0, ES);
        continue;
      }
      if (!in_range(idx, k, x.ndim, x.dims)) {
        bad[s] = k;
        return;
      }
      std::memcpy(o, px + static_cast<std::size_t>(position(idx, k, x.ndim, x.dims)) * ES, ES);
    }
  });
  for (std::int64_t s = 0; s < slots; ++s)
    if (bad[s] >= 0) throw_out_of_range("K::gradients (sparse)", idx, bad[s], x.ndim, x.dims);
}

void concat_indices_kernel(const KernelCall& c) {
  const int axis = static_cast<int>(c.attrs->ints[0]);
  const int parts = c.n_in / 2;
  const std::int64_t rank = c.out.dims[1];
  auto* out = ptr<std::int64_t>(c.out);
  std::int64_t shift = 0;
  for (int p = 0; p < parts; ++p) {
    const auto* in = ptr<const std::int64_t>(c.in[p]);
    parallel_for(c.in[p].size, 0.5, [&](std::int64_t e0, std::int64_t e1) {
      for (std::int64_t e = e0; e < e1; ++e)
        out[e] = in[e] + (e % rank == axis && in[e - e % rank] != kPadding ? shift : 0);
    });
    out += c.in[p].size;
    shift += c.in[parts + p].dims[axis];
  }
}

void dense_indices_kernel(const KernelCall& c) {
  const ArrayRef& x = c.in[0];
  const int rank = x.ndim;
  auto* out = ptr<std::int64_t>(c.out);
  parallel_for(
      x.size, 0.5 * (rank + 1),
      [&](std::int64_t k0, std::int64_t k1) {
        std::int64_t pos[kMaxRank] = {};
        for (std::int64_t d = rank - 1, rest = k0; d >= 0; --d) {
          pos[d] = rest % x.dims[d];
          rest /= x.dims[d];
        }
        for (std::int64_t k = k0; k < k1; ++k) {
          for (int d = 0; d < rank; ++d) out[k * rank + d] = pos[d];
          for (int d = rank - 1; d >= 0 && ++pos[d] == x.dims[d]; --d) pos[d] = 0;
        }
      },
      1);
}

template <class... Ts>
struct TypeList {};

template <class... Ts>
void reg_densify(Backend& b, TypeList<Ts...>) {
  (b.set(Op::SparseTensor, dtype_of<Ts>, &densify_kernel<Ts>), ...);
  (b.set(Op::SparseToDense, dtype_of<Ts>, &densify_kernel<Ts>), ...);
}

}  // namespace

void register_cpu_sparse(Backend& b) {
  reg_densify(b, TypeList<Half, float, double, std::int8_t, std::int16_t, std::int32_t,
                          std::int64_t, std::uint8_t, bool>{});
  set_by_size(b, Op::SparseGather, [](auto es) { return &sparse_gather_kernel<es.value>; });
  b.set(Op::SparseConcatIndices, DType::int64, &concat_indices_kernel);
  b.set(Op::DenseIndices, DType::int64, &dense_indices_kernel);
}

}  // namespace ktape::kernels
