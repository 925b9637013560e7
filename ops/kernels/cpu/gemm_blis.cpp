// BLIS inside the cpu GEMM (see gemm_blis.hpp).
#include "ops/kernels/cpu/gemm_blis.hpp"

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/parallel.hpp"
#include "ops/kernels/cpu/gemm_pack.hpp"
#include "ops/kernels/cpu/gemm_tasks.hpp"

#include <blis.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace ktape::kernels::blis {

namespace {

using detail::Cells;
using detail::CellSpan;
using detail::Grid;
using detail::kMaxCells;
using detail::kUnitsPerCell;
using detail::pack_panel;
using detail::task_grid;
using detail::tile_into;

// BLIS 0.9 picks its kernels by CPU model (AMD's by family) and falls back to its portable
// reference kernels, "generic", on a CPU it does not know: AMD Zen 5 (family 0x1A) ran the MLP's
// 128x784x256 product at 41 GFLOP/s there, 15 % of the core's FMA peak, where BLIS's own skx
// kernels run it at 210 (78 %). So when BLIS says "generic", the context is chosen here by the
// instruction sets its kernels need: skx with AVX-512 F/DQ/BW/VL/CD, haswell with AVX2 and FMA.
// A CPU with neither keeps "generic", and the default library is then Eigen's (vectorized for
// the build machine by -march=native).
// On an Intel CPU with AVX-512, BLIS takes skx only when the brand string names a part with two
// FMA units from its 2019 table (Platinum, some Gold and W numbers); any other name, such as a
// cloud VM's "Intel(R) Xeon(R) Processor" or a newer Xeon's "Gold 6430", gets haswell (AVX2),
// half the vector width: on a Xeon (Emerald Rapids) VM BLIS's haswell kernels ran 128x784x256 at
// 48 GFLOP/s and its skx ones at 129, in BLIS's own product. ktape then takes skx too, unless
// the name is one of a one-unit Xeon's (one_fma_unit), where AVX-512 brings no more FMAs. (A
// client Core with AVX-512 and one unit, such as Ice Lake's, BLIS itself sends to skx.)
struct Kernels {
  cntx_t* cntx = nullptr;  // passed to every call
  arch_t arch = BLIS_ARCH_GENERIC;
  bool chosen_here = false;  // BLIS said "generic", or haswell where skx runs
};

cntx_t* registered(arch_t id) {
  return bli_gks_lookup_id(id) != nullptr ? bli_gks_lookup_nat_cntx(id) : nullptr;
}

#if defined(__x86_64__)
std::string cpu_brand() {
  unsigned regs[12] = {};
  for (unsigned leaf = 0; leaf < 3; ++leaf)
    if (!__get_cpuid(0x80000002u + leaf, &regs[4 * leaf], &regs[4 * leaf + 1], &regs[4 * leaf + 2],
                     &regs[4 * leaf + 3]))
      return {};
  char text[sizeof regs + 1] = {};
  std::memcpy(text, regs, sizeof regs);
  return text;
}
#endif

const Kernels& kernels() {
  static const Kernels k = [] {
    bli_init();
    Kernels r;
    r.arch = bli_arch_query_id();
    r.cntx = registered(r.arch);
    if (r.arch != BLIS_ARCH_GENERIC && r.arch != BLIS_ARCH_HASWELL) return r;
#if defined(__x86_64__)
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                        __builtin_cpu_supports("avx512cd");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (r.arch == BLIS_ARCH_HASWELL) {
      if (avx512 && __builtin_cpu_is("intel") && !one_fma_unit(cpu_brand()))
        if (cntx_t* c = registered(BLIS_ARCH_SKX)) return Kernels{c, BLIS_ARCH_SKX, true};
      return r;
    }
    for (const arch_t id : {BLIS_ARCH_SKX, BLIS_ARCH_HASWELL}) {
      if (id == BLIS_ARCH_SKX ? !avx512 : !avx2) continue;
      if (cntx_t* c = registered(id)) return Kernels{c, id, true};
    }
#endif
    return r;
  }();
  return k;
}

// ---- BLIS's serial product ----------------------------------------------------------------

// BLIS 0.9 runs small shapes on its "sup" kernels, which by default read B in place: a
// column-stored B (a transposed weight) then goes to the dot-product kernel, and every 6-row
// micro-panel re-reads B from wherever it lies. Packing B once per call pays from 64 rows on
// (BM_LstmStep 128/loop, 1 thread: 40.2 -> 36.1 ms; B is reused by >= 11 micro-panels);
// packing A as well, or B below 64 rows, measured slower.
// BLIS's pack buffers come from pools that grow by one block when more GEMMs run at once than
// ever before; a step that happened to run more tiles at once than its warm-up did would then
// allocate. So a block of each kind is reserved per slot of the calling arena, once (under the
// lock, while no other reservation runs; BLIS's pools lock themselves).
void reserve_pack_buffers() {
  static std::atomic<int> reserved{0};
  static std::mutex mu;
  const int want = tbb::this_task_arena::max_concurrency();
  if (want <= reserved.load(std::memory_order_acquire)) return;
  const std::lock_guard lock(mu);
  if (want <= reserved.load(std::memory_order_relaxed)) return;
  cntx_t* const cntx = kernels().cntx;  // initializes BLIS
  rntm_t r = BLIS_RNTM_INITIALIZER;
  bli_pba_rntm_set_pba(&r);
  // The pools were sized for BLIS's own context; a context chosen here may want larger blocks,
  // and a pool grows its blocks at the first request that needs them.
  siz_t want_a = 0, want_b = 0, want_c = 0;
  bli_pba_compute_pool_block_sizes(&want_a, &want_b, &want_c, cntx);
  for (const packbuf_t type : {BLIS_BUFFER_FOR_A_BLOCK, BLIS_BUFFER_FOR_B_PANEL}) {
    pool_t* pool = bli_pba_pool(static_cast<dim_t>(bli_packbuf_index(type)), bli_pba_query());
    const siz_t size =
        std::max(bli_pool_block_size(pool), type == BLIS_BUFFER_FOR_A_BLOCK ? want_a : want_b);
    std::vector<mem_t> mems(static_cast<std::size_t>(want));
    for (mem_t& m : mems) {
      bli_mem_clear(&m);
      bli_pba_acquire_m(&r, size, type, &m);
    }
    for (mem_t& m : mems) bli_pba_release(&r, &m);
  }
  // Each sup call also checks out an array of small-block pools (its control structures), and
  // that pool of arrays grows the same way: check out one per slot, with a few blocks each.
  std::vector<array_t*> arrays;
  for (int i = 0; i < want; ++i) {
    array_t* a = bli_sba_checkout_array(1);
    rntm_t ra = BLIS_RNTM_INITIALIZER;
    bli_sba_rntm_set_pool(0, a, &ra);
    void* blocks[8];
    for (void*& b : blocks) b = bli_sba_acquire(&ra, 64);
    for (void* b : blocks) bli_sba_release(&ra, b);
    arrays.push_back(a);
  }
  for (array_t* a : arrays) bli_sba_checkin_array(a);
  reserved.store(want, std::memory_order_release);
}

rntm_t runtime(std::int64_t m) {
  reserve_pack_buffers();
  rntm_t r = BLIS_RNTM_INITIALIZER;
  if (m >= 64) bli_rntm_set_pack_b(true, &r);
  return r;
}

template <class T>
void serial_product(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a,
                    MatRef<const T> b, MatRef<T> c, bool acc) {
  T one = 1, beta = acc ? 1 : 0;
  rntm_t r = runtime(m);
  auto* ap = const_cast<T*>(a.p);
  auto* bp = const_cast<T*>(b.p);
  if constexpr (sizeof(T) == sizeof(float))
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, ap, a.rs, a.cs, bp, b.rs,
                 b.cs, &beta, c.p, c.rs, c.cs, kernels().cntx, &r);
  else
    bli_dgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, ap, a.rs, a.cs, bp, b.rs,
                 b.cs, &beta, c.p, c.rs, c.cs, kernels().cntx, &r);
}

// ---- The blocked product ------------------------------------------------------------------
//
// BLIS's loops around its micro-kernel, written for oneTBB: for each depth block (KC deep, the
// blocks equal and fixed by k), pack A into MR-row micro-panels and B into NR-column micro-panels
// (all threads, each panel once), then run the micro-kernel over the output's MR x NR micro-tiles
// split into a 2-D grid of tasks. A task walks its rows in blocks of at most MC (its A block
// stays in L2), its columns one NR panel at a time (the B micro-panel stays in L1) and, inside,
// the MR panels of the row block.

// The largest temporary tile (MR x NR) the blocked product writes through: skx's 32 x 12 for
// float, 16 x 14 for double, haswell's 6 x 16 / 6 x 8. A kernel set with larger tiles runs
// BLIS's own product instead (blocked_available).
constexpr std::int64_t kMaxTile = 512;
// Bytes after packed panels that a micro-kernel's read-ahead may touch (skx: 128 past the last
// A panel; haswell: 64 past the last B panel), with room to spare.
constexpr std::size_t kTail = 256;

template <class T>
using Ukr = void (*)(dim_t, dim_t, dim_t, T*, T*, T*, T*, T*, inc_t, inc_t, auxinfo_t*, cntx_t*);

template <class T>
struct Micro {
  Ukr<T> ukr;
  std::int64_t mr, nr, packmr, packnr, kc, mc;
  bool prefers_rows;
};

template <class T>
constexpr num_t dt() {
  return sizeof(T) == 4 ? BLIS_FLOAT : BLIS_DOUBLE;
}

template <class T>
const Micro<T>& micro() {
  static const Micro<T> u = [] {
    cntx_t* c = kernels().cntx;
    constexpr num_t d = dt<T>();
    return Micro<T>{reinterpret_cast<Ukr<T>>(bli_cntx_get_l3_nat_ukr_dt(d, BLIS_GEMM_UKR, c)),
                    bli_cntx_get_blksz_def_dt(d, BLIS_MR, c),
                    bli_cntx_get_blksz_def_dt(d, BLIS_NR, c),
                    bli_cntx_get_blksz_max_dt(d, BLIS_MR, c),
                    bli_cntx_get_blksz_max_dt(d, BLIS_NR, c),
                    bli_cntx_get_blksz_def_dt(d, BLIS_KC, c),
                    bli_cntx_get_blksz_def_dt(d, BLIS_MC, c),
                    bli_cntx_l3_nat_ukr_prefers_rows_dt(d, BLIS_GEMM_UKR, c)};
  }();
  return u;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Panels start on 64-byte lines.
template <class T>
std::int64_t panel_stride(std::int64_t pack, std::int64_t kc) {
  constexpr std::int64_t line = 64 / sizeof(T);
  return ceil_div(pack * kc, line) * line;
}

// The depth blocks: as few as KC allows, of equal depth.
struct DepthBlocks {
  std::int64_t count, depth;
};
DepthBlocks depth_blocks(std::int64_t k, std::int64_t kc) {
  const std::int64_t count = ceil_div(k, kc);
  return {count, ceil_div(k, count)};
}

// The product as the micro-kernel sees it: C's unit stride along its preferred direction. Its
// rows (axis 0) or its columns (axis 1) are cut into parts, each with its own rows of A (or
// columns of B) and its own C, the other operand shared by all (GemmPart: weight gradients that
// share one stacked gradient). A plain product is one part. The micro-panels run on across the
// parts as if they were one matrix: a panel may take its rows from two parts.
template <class T>
struct Problem {
  std::int64_t m, n, k;    // m, n: totals over the parts
  MatRef<const T> shared;  // B (axis 0) or A (axis 1)
  int axis = 0, count = 1;
  std::int64_t len[kMaxGemmParts] = {};    // each part's rows (axis 0) or columns (axis 1)
  MatRef<const T> op[kMaxGemmParts] = {};  // each part's A (axis 0) or B (axis 1)
  MatRef<T> c[kMaxGemmParts] = {};
  // Each part's first row (axis 0) or column (axis 1); off[count] = m (axis 0) or n.
  std::int64_t off[kMaxGemmParts + 1] = {};
};

template <class T>
Problem<T> single(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a,
                  MatRef<const T> b, MatRef<T> c) {
  Problem<T> p{m, n, k, b};
  p.len[0] = m;
  p.op[0] = a;
  p.c[0] = c;
  return p;
}

// Whether the kernel writes C in place: C's unit stride along its preferred direction. Otherwise,
// and for edge tiles, it fills a temporary tile that is then added into C (tile_into).
template <class T>
bool writes_in_place(const Micro<T>& u, std::int64_t rs, std::int64_t cs) {
  return u.prefers_rows ? cs == 1 : rs == 1;
}

// The micro-kernel's work for an m x n x k product, in multiply-adds: every micro-tile's full
// area (an edge tile costs a whole one) times the depth, and for each tile that goes through a
// temporary, its copy, counted as 16 steps of depth (measured: at a depth of 128, a 32x12 tile
// written through BLIS's own temporary cost as much as its arithmetic).
template <class T>
double ukr_work(const Micro<T>& u, std::int64_t m, std::int64_t n, std::int64_t k, bool in_place) {
  const double tiles = double(ceil_div(m, u.mr) * ceil_div(n, u.nr));
  const double copied = in_place ? tiles - double((m / u.mr) * (n / u.nr)) : tiles;
  return double(u.mr * u.nr) * (tiles * double(k) + copied * 16.0);
}

// C as it is, or C^T = B^T A^T: whichever costs the kernel less. A row-major C is turned for a
// kernel that writes columns, unless the turn wastes tiles: a thin output (128 x 10) keeps its
// long side along MR (32 rows for skx), where turned its 10 rows would fill a third of each
// tile. The choice depends on the shape and the strides alone (of the first part's C).
template <class T>
bool turns(const Micro<T>& u, std::int64_t m, std::int64_t n, std::int64_t k, MatRef<T> c) {
  return ukr_work(u, n, m, k, writes_in_place(u, c.cs, c.rs)) <
         ukr_work(u, m, n, k, writes_in_place(u, c.rs, c.cs));
}

// The problem turned when that costs less, with its parts placed along their axis.
template <class T>
Problem<T> oriented(const Micro<T>& u, Problem<T> p) {
  if (turns(u, p.m, p.n, p.k, p.c[0])) {
    std::swap(p.m, p.n);
    p.axis = 1 - p.axis;
    p.shared = p.shared.t();
    for (int s = 0; s < p.count; ++s) {
      p.op[s] = p.op[s].t();
      p.c[s] = p.c[s].t();
    }
  }
  p.off[0] = 0;
  for (int s = 0; s < p.count; ++s) p.off[s + 1] = p.off[s] + p.len[s];
  return p;
}

// Calls f(part, first, count, at) for each part that elements [g0, g1) along the parts' axis
// reach into: `count` of them from the part's element `first` on, `at` into the range.
template <class T, class F>
void for_parts(const Problem<T>& p, std::int64_t g0, std::int64_t g1, F&& f) {
  int s = 0;
  while (g0 >= p.off[s + 1]) ++s;
  for (std::int64_t g = g0; g < g1; ++s) {
    const std::int64_t e = std::min(g1, p.off[s + 1]);
    if (e > g) f(s, g - p.off[s], e - g, g - g0);
    g = e;
  }
}

// Threads the calling arena may use now.
std::int64_t usable_threads() {
  const auto limit =
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  return std::max<std::int64_t>(1, std::min<std::int64_t>(tbb::this_task_arena::max_concurrency(),
                                                          static_cast<std::int64_t>(limit)));
}

// Below this a task costs more to start than it saves (about 5 us of one core's work).
constexpr double kMinTaskFlops = 1 << 20;
// The packs of several depth blocks are kept at once, up to this size (about an L2), so that one
// parallel region runs them all: a region per block would join the threads after each, which
// costs most where a block is little work (128x784x256: 3 blocks of 17 MFLOP, 1 MFLOP a thread
// on 16 cores). A product whose blocks are bigger has work enough to amortize its joins.
std::atomic<std::int64_t> g_pack_bytes{2 << 20};

// Where the packs of a product go: `group` depth blocks at a time, each block's A panels then
// its B panels, then a state byte per panel (0 free, 1 being packed, 2 packed).
template <class T>
struct Layout {
  std::int64_t mp, np;  // micro-panels of A and of B
  DepthBlocks blocks;
  std::int64_t ps_a, ps_b, per_block, group;  // elements
  std::size_t bytes() const {
    return static_cast<std::size_t>(group * per_block) * sizeof(T) +
           static_cast<std::size_t>(group * (mp + np));
  }
};

template <class T>
Layout<T> layout(const Micro<T>& u, std::int64_t mp, std::int64_t np, std::int64_t k) {
  Layout<T> l;
  l.mp = mp;
  l.np = np;
  l.blocks = depth_blocks(k, u.kc);
  l.ps_a = panel_stride<T>(u.packmr, l.blocks.depth);
  l.ps_b = panel_stride<T>(u.packnr, l.blocks.depth);
  l.per_block = l.mp * l.ps_a + l.np * l.ps_b;
  l.group =
      std::clamp<std::int64_t>(g_pack_bytes.load(std::memory_order_relaxed) /
                                   std::max<std::int64_t>(1, l.per_block * std::int64_t(sizeof(T))),
                               1, l.blocks.count);
  return l;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Packs a panel unless it is packed: the first task to claim it packs it, a task that finds it
// being packed waits (its packer is running: it claimed the panel and packs it at once, so the
// wait is short and never on a task that has not started).
template <class F>
void ensure_packed(std::uint8_t& state_byte, F&& pack) {
  std::atomic_ref<std::uint8_t> state(state_byte);
  std::uint8_t v = state.load(std::memory_order_acquire);
  if (v == 2) return;
  if (v == 0 && state.compare_exchange_strong(v, 1, std::memory_order_acq_rel)) {
    pack();
    state.store(2, std::memory_order_release);
    return;
  }
  for (int spins = 0; state.load(std::memory_order_acquire) != 2; ++spins) {
    if (spins < 256)
      cpu_relax();
    else
      std::this_thread::yield();
  }
}

// Packs of A or B kept across calls (GemmPackCache): every depth block's panels, block blk's
// at data + blk * (its panel count) * (its panel stride); ready: packed for this operand.
template <class T>
struct Kept {
  T* data = nullptr;
  bool ready = false;
};

std::atomic<std::uint64_t> g_units_taken{0};  // units_taken()

template <class T>
void run_blocked(const Micro<T>& u, const Problem<T>& p, bool acc, std::byte* scratch, Kept<T> ka,
                 Kept<T> kb, bool one_task) {
  const Layout<T> l = layout(u, ceil_div(p.m, u.mr), ceil_div(p.n, u.nr), p.k);
  const std::int64_t mp = l.mp, np = l.np, depth = l.blocks.depth;
  T* const packs = reinterpret_cast<T*>(scratch);
  std::uint8_t* const states = reinterpret_cast<std::uint8_t*>(packs + l.group * l.per_block);
  const double block_flops = 2.0 * double(p.m) * double(p.n) * double(depth);
  const std::int64_t tasks = std::clamp<std::int64_t>(
      static_cast<std::int64_t>(block_flops * double(l.group) / kMinTaskFlops), 1,
      one_task ? 1 : std::min(usable_threads(), mp * np));
  // Tasks steal where every region is of one depth block (below); the grid may then favour
  // private transposes.
  const bool one_block = l.group == 1;
  const MatRef<const T> oa = p.axis == 0 ? p.op[0] : p.shared,
                        ob = p.axis == 0 ? p.shared : p.op[0];
  const Grid grid =
      one_block ? task_grid(mp, np, tasks, u.mr, u.nr, true, oa.rs != 1 ? 2 : 1, ob.cs != 1 ? 2 : 1)
                : task_grid(mp, np, tasks, u.mr, u.nr);
  const std::int64_t rows_per = ceil_div(mp, grid.gm), cols_per = ceil_div(np, grid.gn);
  const std::int64_t mc_panels = std::max<std::int64_t>(1, u.mc / u.mr);
  cntx_t* const cntx = kernels().cntx;
  T one(1), zero(0);
  bool in_place[kMaxGemmParts];
  for (int s = 0; s < p.count; ++s) in_place[s] = writes_in_place(u, p.c[s].rs, p.c[s].cs);
  // Packs micro-panel i of the oriented A (side 0) or B (side 1) for depths [k0, k0 + kc): from
  // the shared operand, or a part at a time along the parts' axis.
  auto pack = [&](int side, std::int64_t i, std::int64_t k0, std::int64_t kc, T* dst) {
    const std::int64_t width = side == 0 ? u.mr : u.nr, packw = side == 0 ? u.packmr : u.packnr;
    const std::int64_t g0 = i * width, g1 = std::min(g0 + width, side == 0 ? p.m : p.n);
    auto from = [&](MatRef<const T> o, std::int64_t first, std::int64_t count, std::int64_t at) {
      const std::int64_t along = side == 0 ? o.rs : o.cs, deep = side == 0 ? o.cs : o.rs;
      const std::int64_t fill = at + count == g1 - g0 ? packw - at : count;
      pack_panel(o.p + first * along + k0 * deep, along, deep, count, kc, packw, fill, dst + at);
    };
    if (side != p.axis) return from(p.shared, g0, g1 - g0, 0);
    for_parts(p, g0, g1, [&](int s, std::int64_t first, std::int64_t count, std::int64_t at) {
      from(p.op[s], first, count, at);
    });
  };
  // The temporary tile, laid out as the kernel prefers.
  const std::int64_t tile_rs = u.prefers_rows ? u.nr : 1, tile_cs = u.prefers_rows ? 1 : u.mr;

  // A task's cell of the grid is walked in units: a row block (at most MC rows of its micro-panels)
  // against one column micro-panel of B. In a region of one depth block a task that has run out
  // of units takes the last ones of another cell (Cells): a worker that starts late, or a cell
  // with more columns, no longer holds up the join. (With several blocks a tile's blocks must
  // run in order, on one task.) Every unit computes its tiles alike whoever runs it.
  const std::int64_t cells = grid.gm * grid.gn;
  const bool stealing = one_block && cells > 1 && cells <= kMaxCells;
  Cells cell_units;
  auto cell_of = [&](std::int64_t t) {
    CellSpan s;
    const std::int64_t ti = t / grid.gn, tj = t % grid.gn;
    s.ip0 = ti * rows_per;
    s.ip1 = std::min(mp, s.ip0 + rows_per);
    s.jp0 = tj * cols_per;
    s.jp1 = std::min(np, s.jp0 + cols_per);
    if (s.ip0 >= s.ip1 || s.jp0 >= s.jp1) return CellSpan{};
    s.cols = s.jp1 - s.jp0;
    // Row blocks of MC rows; where tasks steal, units small enough that a cell has about
    // kUnitsPerCell (so that the last ones even out the tasks): as few row blocks as that
    // allows, of equal size.
    const std::int64_t rows = s.ip1 - s.ip0;
    const std::int64_t blocks =
        stealing ? std::clamp(ceil_div(kUnitsPerCell, s.cols), ceil_div(rows, mc_panels), rows)
                 : ceil_div(rows, mc_panels);
    s.unit_rows = stealing ? ceil_div(rows, blocks) : mc_panels;
    s.blocks = ceil_div(rows, s.unit_rows);
    s.units = s.blocks * s.cols;
    // Tasks that share panels start on different ones: a task's place in the other direction of
    // the grid turns its walk over its columns and over its row blocks.
    s.turn_b = ti * s.cols / grid.gm;
    s.turn_rb = stealing ? tj * s.blocks / grid.gn : 0;
    s.tj = tj;
    return s;
  };

  for (std::int64_t g0 = 0; g0 < l.blocks.count; g0 += l.group) {
    const std::int64_t g1 = std::min(l.blocks.count, g0 + l.group);
    std::fill(states, states + (g1 - g0) * (mp + np), std::uint8_t{0});
    if (stealing)
      for (std::int64_t t = 0; t < cells; ++t) cell_units.reset(t, cell_of(t).units);
    auto task = [&](std::int64_t t) {
      alignas(64) T tile[kMaxTile];
      auxinfo_t aux{};
      bli_auxinfo_set_schema_a(BLIS_PACKED_ROW_PANELS, &aux);
      bli_auxinfo_set_schema_b(BLIS_PACKED_COL_PANELS, &aux);
      bli_auxinfo_set_is_a(1, &aux);
      bli_auxinfo_set_is_b(1, &aux);
      bli_auxinfo_set_ps_a(l.ps_a, &aux);
      bli_auxinfo_set_ps_b(l.ps_b, &aux);
      bli_auxinfo_set_ukr(reinterpret_cast<void_fp>(u.ukr), &aux);
      // The A panels [ready_i0, ready_i1) of depth block ready_blk are known to be packed.
      std::int64_t ready_i0 = 0, ready_i1 = 0, ready_blk = -1;
      // Unit `unit` of cell `s` for depth block blk: its row block's A panels, its B panel, and
      // the micro-kernel over its tiles.
      auto run_unit = [&](std::int64_t blk, const CellSpan& s, std::int64_t block, std::int64_t jj)
          __attribute__((always_inline)) {
        const std::int64_t k0 = blk * depth, kc = std::min(depth, p.k - k0);
        T* const own = packs + (blk - g0) * l.per_block;
        T* const pa = ka.data ? ka.data + blk * mp * l.ps_a : own;
        T* const pb = kb.data ? kb.data + blk * np * l.ps_b : own + mp * l.ps_a;
        std::uint8_t* const sa = states + (blk - g0) * (mp + np);
        std::uint8_t* const sb = sa + mp;
        T beta(acc || blk > 0 ? 1 : 0);
        const std::int64_t rb =
            block + s.turn_rb < s.blocks ? block + s.turn_rb : block + s.turn_rb - s.blocks;
        const std::int64_t ib0 = s.ip0 + rb * s.unit_rows;
        const std::int64_t ib1 = std::min(s.ip1, ib0 + s.unit_rows), rows = ib1 - ib0;
        const std::int64_t j =
            s.jp0 + (jj + s.turn_b < s.cols ? jj + s.turn_b : jj + s.turn_b - s.cols);
        if (!ka.ready && (blk != ready_blk || ib0 < ready_i0 || ib1 > ready_i1)) {
          ready_i0 = ib0;  // once per row block (a stolen unit's may be cut otherwise)
          ready_i1 = ib1;
          ready_blk = blk;
          const std::int64_t turn_a = s.tj * rows / grid.gn;
          for (std::int64_t ii = 0; ii < rows; ++ii) {
            const std::int64_t i = ib0 + (ii + turn_a) % rows;
            ensure_packed(sa[i], [&] { pack(0, i, k0, kc, pa + i * l.ps_a); });
          }
        }
        if (!kb.ready) ensure_packed(sb[j], [&] { pack(1, j, k0, kc, pb + j * l.ps_b); });
        const std::int64_t c0 = j * u.nr, nc = std::min(u.nr, p.n - c0);
        T* const b_panel = pb + j * l.ps_b;
        for (std::int64_t i = ib0; i < ib1; ++i) {
          const std::int64_t r0 = i * u.mr, mrr = std::min(u.mr, p.m - r0);
          bli_auxinfo_set_next_a(pa + (i + 1 < ib1 ? i + 1 : ib0) * l.ps_a, &aux);
          bli_auxinfo_set_next_b(b_panel, &aux);
          // The tile's C: one part's, or (a tile across parts) each part's share of it.
          const std::int64_t e0 = p.axis == 0 ? r0 : c0, e1 = e0 + (p.axis == 0 ? mrr : nc);
          int q = 0;
          while (e0 >= p.off[q + 1]) ++q;
          const MatRef<T>& c = p.c[q];
          if (in_place[q] && mrr == u.mr && nc == u.nr && e1 <= p.off[q + 1]) {
            const std::int64_t lr = p.axis == 0 ? r0 - p.off[q] : r0,
                               lc = p.axis == 0 ? c0 : c0 - p.off[q];
            u.ukr(mrr, nc, kc, &one, pa + i * l.ps_a, b_panel, &beta, c.p + lr * c.rs + lc * c.cs,
                  c.rs, c.cs, &aux, cntx);
            continue;
          }
          u.ukr(u.mr, u.nr, kc, &one, pa + i * l.ps_a, b_panel, &zero, tile, tile_rs, tile_cs, &aux,
                cntx);
          for_parts(p, e0, e1, [&](int w, std::int64_t first, std::int64_t count, std::int64_t at) {
            const MatRef<T>& cw = p.c[w];
            if (p.axis == 0)
              tile_into(tile + at * tile_rs, tile_rs, tile_cs, count, nc, beta != T(0),
                        cw.p + first * cw.rs + c0 * cw.cs, cw.rs, cw.cs);
            else
              tile_into(tile + at * tile_cs, tile_rs, tile_cs, mrr, count, beta != T(0),
                        cw.p + r0 * cw.rs + first * cw.cs, cw.rs, cw.cs);
          });
        }
      };
      const CellSpan mine = cell_of(t);
      if (!stealing) {
        for (std::int64_t blk = g0; blk < g1; ++blk)
          for (std::int64_t block = 0; block < mine.blocks; ++block)
            for (std::int64_t jj = 0; jj < mine.cols; ++jj) run_unit(blk, mine, block, jj);
        return;
      }
      // Unit u is row block u / cols, column u % cols. Only this task takes from the front of
      // its cell, so its units come in order.
      std::int64_t block = 0, jj = 0;
      while (cell_units.take_front(t) >= 0) {
        run_unit(g0, mine, block, jj);
        if (++jj == mine.cols) {
          jj = 0;
          ++block;
        }
      }
      std::uint64_t taken = 0;
      for (std::int64_t d = 1; d < cells; ++d) {
        const std::int64_t v = (t + d) % cells;
        const CellSpan theirs = cell_of(v);
        for (std::int64_t unit; (unit = cell_units.take_back(v)) >= 0; ++taken)
          run_unit(g0, theirs, unit / theirs.cols, unit % theirs.cols);
      }
      if (taken > 0) g_units_taken.fetch_add(taken, std::memory_order_relaxed);
    };
    parallel_slots(cells, task);
  }
}

}  // namespace

bool has_kernels() { return kernels().arch != BLIS_ARCH_GENERIC; }

bool one_fma_unit(const std::string& brand) {
  if (brand.find("Xeon") == std::string::npos) return false;
  for (const char* part : {"Silver", "Bronze", " D-", " E-23", "W-2102", "W-2104"})
    if (brand.find(part) != std::string::npos) return true;
  const std::size_t gold = brand.find("Gold ");  // Skylake and Cascade Lake Gold 51xx, 52xx
  if (gold == std::string::npos) return false;
  const int sku = std::atoi(brand.c_str() + gold + 5);
  return sku >= 5100 && sku < 5300 && sku != 5122 && sku != 5222;
}

template <class T>
bool blocked_available() {
  if (!has_kernels()) return false;  // the scratch sizes assume it (gemm.cpp)
  const Micro<T>& u = micro<T>();
  return u.ukr != nullptr && u.mr * u.nr <= kMaxTile && u.mr > 0 && u.nr > 0;
}

std::uint64_t units_taken() { return g_units_taken.load(std::memory_order_relaxed); }

void set_pack_bytes(std::int64_t bytes) {
  g_pack_bytes.store(std::max<std::int64_t>(bytes, 1), std::memory_order_relaxed);
}

std::string kernel_name() {
  const Kernels& k = kernels();
  return std::string(bli_arch_string(k.arch)) + (k.chosen_here ? " (by ktape)" : "");
}

template <class T>
void serial(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a, MatRef<const T> b,
            MatRef<T> c, bool accumulate) {
  serial_product<T>(m, n, k, a, b, c, accumulate);
}

template <class T>
std::int64_t micro_tiles(std::int64_t m, std::int64_t n) {
  const Micro<T>& u = micro<T>();
  const Problem<T> p = oriented(u, single<T>(m, n, 1, {nullptr, 1, 1}, {nullptr, 1, 1},
                                             {nullptr, std::max<std::int64_t>(n, 2), 1}));
  return ceil_div(p.m, u.mr) * ceil_div(p.n, u.nr);
}

namespace {

// Scratch for a problem with parts of these lengths along its rows (panels run on across parts),
// in either orientation (C's strides decide it), and a tail the micro-kernels may read into (they
// load the next step's A or B before testing the loop's end: up to MR or NR values past the last
// panel).
template <class T>
std::size_t parts_scratch(const std::int64_t* ms, int count, std::int64_t n, std::int64_t k) {
  const Micro<T>& u = micro<T>();
  std::int64_t m = 0;
  for (int s = 0; s < count; ++s) m += std::max<std::int64_t>(ms[s], 0);
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  return std::max(layout(u, ceil_div(m, u.mr), ceil_div(n, u.nr), k).bytes(),
                  layout(u, ceil_div(n, u.mr), ceil_div(m, u.nr), k).bytes()) +
         kTail;
}

// Scratch of `bytes` (or null: allocated here into `own`), 64-byte aligned.
std::byte* scratch_or_own(void* scratch, std::size_t bytes, std::unique_ptr<std::byte[]>& own) {
  if (scratch != nullptr) return static_cast<std::byte*>(scratch);
  std::size_t space = bytes + 64;
  own.reset(new std::byte[space]);
  void* p = own.get();
  return static_cast<std::byte*>(std::align(64, bytes, p, space));
}

}  // namespace

template <class T>
std::size_t blocked_scratch(std::int64_t m, std::int64_t n, std::int64_t k) {
  return parts_scratch<T>(&m, 1, n, k);
}

template <class T>
void blocked(std::int64_t m, std::int64_t n, std::int64_t k, MatRef<const T> a, MatRef<const T> b,
             MatRef<T> c, bool accumulate, void* scratch, const GemmKeep* keep, bool one_task) {
  const Micro<T>& u = micro<T>();
  const Problem<T> p = oriented(u, single(m, n, k, a, b, c));
  const bool turned = p.axis == 1;
  std::unique_ptr<std::byte[]> own;
  std::byte* const work = scratch_or_own(scratch, blocked_scratch<T>(m, n, k), own);
  // Kept packs of the oriented A and B: usable when big enough; ready when packed from the same
  // operand in the same run.
  const Layout<T> l = layout(u, ceil_div(p.m, u.mr), ceil_div(p.n, u.nr), p.k);
  auto kept = [&](GemmPackCache* cache, const T* source, std::int64_t elems) {
    Kept<T> r;
    if (!keep || !cache || !cache->data ||
        cache->bytes < static_cast<std::size_t>(elems) * sizeof(T))
      return r;
    r.data = static_cast<T*>(cache->data);
    r.ready = cache->source == source && cache->run == keep->run && cache->format == 0;
    return r;
  };
  GemmPackCache* const cache_a = keep ? (turned ? keep->b : keep->a) : nullptr;
  GemmPackCache* const cache_b = keep ? (turned ? keep->a : keep->b) : nullptr;
  const T* const oriented_a = turned ? p.shared.p : p.op[0].p;
  const T* const oriented_b = turned ? p.op[0].p : p.shared.p;
  const Kept<T> ka = kept(cache_a, oriented_a, l.blocks.count * l.mp * l.ps_a);
  const Kept<T> kb = kept(cache_b, oriented_b, l.blocks.count * l.np * l.ps_b);
  run_blocked(u, p, accumulate, work, ka, kb, one_task);
  if (ka.data) {
    cache_a->source = oriented_a;
    cache_a->run = keep->run;
    cache_a->format = 0;
  }
  if (kb.data) {
    cache_b->source = oriented_b;
    cache_b->run = keep->run;
    cache_b->format = 0;
  }
}

template <class T>
std::size_t blocked_parts_scratch(const std::int64_t* ms, int count, std::int64_t n,
                                  std::int64_t k) {
  return parts_scratch<T>(ms, count, n, k);
}

template <class T>
void blocked_parts(const GemmPart<T>* parts, int count, std::int64_t n, std::int64_t k,
                   MatRef<const T> b, void* scratch) {
  const Micro<T>& u = micro<T>();
  Problem<T> q{0, n, k, b};
  q.count = 0;
  std::int64_t ms[kMaxGemmParts];
  for (int s = 0; s < count; ++s) {
    ms[s] = parts[s].m;
    if (parts[s].m <= 0) continue;
    q.m += parts[s].m;
    q.len[q.count] = parts[s].m;
    q.op[q.count] = parts[s].a;
    q.c[q.count] = parts[s].c;
    ++q.count;
  }
  if (q.count == 0 || n <= 0) return;
  const Problem<T> p = oriented(u, q);
  std::unique_ptr<std::byte[]> own;
  run_blocked(u, p, false, scratch_or_own(scratch, parts_scratch<T>(ms, count, n, k), own), {}, {},
              false);
}

template <class T>
std::size_t kept_bytes(std::int64_t m, std::int64_t n, std::int64_t k, int which) {
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  const Micro<T>& u = micro<T>();
  const Problem<T> p = oriented(u, single<T>(m, n, k, {nullptr, 1, 1}, {nullptr, 1, 1},
                                             {nullptr, std::max<std::int64_t>(n, 2), 1}));
  const bool turned = p.axis == 1;
  const Layout<T> l = layout(u, ceil_div(p.m, u.mr), ceil_div(p.n, u.nr), k);
  const bool as_a = (which == 0) != turned;  // the operand is the oriented A
  return static_cast<std::size_t>(l.blocks.count * (as_a ? l.mp * l.ps_a : l.np * l.ps_b)) *
             sizeof(T) +
         kTail;
}

#define KTAPE_INSTANTIATE(T)                                                                \
  template void serial<T>(std::int64_t, std::int64_t, std::int64_t, MatRef<const T>,        \
                          MatRef<const T>, MatRef<T>, bool);                                \
  template std::int64_t micro_tiles<T>(std::int64_t, std::int64_t);                         \
  template std::size_t blocked_scratch<T>(std::int64_t, std::int64_t, std::int64_t);        \
  template void blocked<T>(std::int64_t, std::int64_t, std::int64_t, MatRef<const T>,       \
                           MatRef<const T>, MatRef<T>, bool, void*, const GemmKeep*, bool); \
  template std::size_t kept_bytes<T>(std::int64_t, std::int64_t, std::int64_t, int);        \
  template bool blocked_available<T>();                                                     \
  template std::size_t blocked_parts_scratch<T>(const std::int64_t*, int, std::int64_t,     \
                                                std::int64_t);                              \
  template void blocked_parts<T>(const GemmPart<T>*, int, std::int64_t, std::int64_t,       \
                                 MatRef<const T>, void*);
KTAPE_INSTANTIATE(float)
KTAPE_INSTANTIATE(double)
#undef KTAPE_INSTANTIATE

}  // namespace ktape::kernels::blis
