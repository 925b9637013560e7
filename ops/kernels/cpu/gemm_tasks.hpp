// The blocked product's tasks (gemm_blis.cpp): the 2-D grid of micro-tiles they split, and the
// units of a grid cell, which the cell's own task takes from the front and a task whose cell is
// empty takes from the back. Internal to gemm_blis.cpp.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace ktape::kernels::blis::detail {

inline std::int64_t grid_ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The 2-D task grid over mp x np micro-tiles for `tasks` tasks: the fewest micro-tiles in the
// largest task, then the least data read (a task reads its rows of A and its columns of B).
// With `stealing` (a product of one depth block, whose tasks take each other's last units), the
// largest task may have up to a quarter more micro-tiles if that saves reads, and a panel that
// is packed by transposing (`a_costs`, `b_costs`: 2, else 1) weighs twice: such panels cost
// the most to pack and to share between cores. 128x256x128 on 2 threads then splits the
// columns, so that each task transposes and reads its own panels of A^T; it split the rows of
// B^T, and both tasks read every transposed panel (packing took 27k cycles in all, against 13k
// on one thread).
struct Grid {
  std::int64_t gm, gn;
};
inline Grid task_grid(std::int64_t mp, std::int64_t np, std::int64_t tasks, std::int64_t mr,
                      std::int64_t nr, bool stealing = false, std::int64_t a_costs = 1,
                      std::int64_t b_costs = 1) {
  // Stealing moves units between cells only: a grid with fewer cells than another leaves
  // threads idle, so only grids of the most cells compete.
  std::int64_t min_span = mp * np, most_cells = 1;
  for (std::int64_t gm = 1; gm <= std::min(mp, tasks); ++gm) {
    const std::int64_t gn = std::min(np, tasks / gm);
    min_span = std::min(min_span, grid_ceil_div(mp, gm) * grid_ceil_div(np, gn));
    most_cells = std::max(most_cells, gm * gn);
  }
  const std::int64_t span_limit = stealing ? min_span + min_span / 4 : min_span;
  Grid best{1, 1};
  std::int64_t best_span = mp * np, best_reads = -1;
  for (std::int64_t gm = 1; gm <= std::min(mp, tasks); ++gm) {
    const std::int64_t gn = std::min(np, tasks / gm);
    const std::int64_t span = grid_ceil_div(mp, gm) * grid_ceil_div(np, gn);
    if (span > span_limit || (stealing && gm * gn < most_cells)) continue;
    const std::int64_t reads = gn * mp * mr * a_costs + gm * np * nr * b_costs;
    const bool better =
        stealing ? best_reads < 0 || reads < best_reads || (reads == best_reads && span < best_span)
                 : span < best_span || (span == best_span && reads < best_reads);
    if (better) {
      best = {gm, gn};
      best_span = span;
      best_reads = reads;
    }
  }
  return best;
}

// A cell of the task grid: its micro-panel rows [ip0, ip1) and columns [jp0, jp1), walked in
// `units` (row block, column) pairs.
struct CellSpan {
  std::int64_t ip0 = 0, ip1 = 0, jp0 = 0, jp1 = 0, cols = 1, units = 0, turn_b = 0, tj = 0;
  std::int64_t unit_rows = 1;            // micro-panels of A per unit (at most MC rows)
  std::int64_t blocks = 0, turn_rb = 0;  // row blocks, and the first one the cell's task runs
};

// The units left in each cell, [front, back) in one word: the cell's own task takes them from
// the front, in its order; a task whose cell is empty takes them from the back.
constexpr std::int64_t kMaxCells = 128;
constexpr std::int64_t kUnitsPerCell = 8;
class Cells {  // trivially built: a call initializes only the cells it uses (reset)
 public:
  void reset(std::int64_t cell, std::int64_t units) {
    word(cell).store(static_cast<std::uint64_t>(units) << 32, std::memory_order_relaxed);
  }
  std::int64_t take_front(std::int64_t cell) {
    auto a = word(cell);
    std::uint64_t v = a.load(std::memory_order_relaxed);
    while ((v & 0xffffffffu) < (v >> 32))
      if (a.compare_exchange_weak(v, v + 1, std::memory_order_relaxed))
        return static_cast<std::int64_t>(v & 0xffffffffu);
    return -1;
  }
  std::int64_t take_back(std::int64_t cell) {
    auto a = word(cell);
    std::uint64_t v = a.load(std::memory_order_relaxed);
    while ((v & 0xffffffffu) < (v >> 32))
      if (a.compare_exchange_weak(v, v - (std::uint64_t{1} << 32), std::memory_order_relaxed))
        return static_cast<std::int64_t>(v >> 32) - 1;
    return -1;
  }

 private:
  std::atomic_ref<std::uint64_t> word(std::int64_t cell) {
    return std::atomic_ref<std::uint64_t>(span_[cell].v);
  }
  struct alignas(64) Span {
    std::uint64_t v;
  };
  Span span_[kMaxCells];
};

}  // namespace ktape::kernels::blis::detail
