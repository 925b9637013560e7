// The one grain policy of ktape's parallel work (kernels and fused passes alike): how to split
// n items of a given cost into oneTBB tasks. Work below ~2 tasks' worth runs serially; above,
// it splits into even chunks of about kTaskWork cost each. Chunk boundaries depend only on n,
// the cost and the alignment — never on the thread count or on timing — so every result is
// the same at any thread count. Internal.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/dtype.hpp"
#include "engine/op_list.hpp"

namespace ktape {

namespace detail {

// A non-owning reference to a callable: parallel_for and parallel_slots hand their bodies to
// one out-of-line oneTBB loop each (engine/parallel.cpp) through it, so oneTBB's templates are
// instantiated once and not once per kernel lambda (which cost most of the kernels' compile
// time).
template <class... Args>
struct FnRef {
  void* obj;
  void (*call)(void*, Args...);

  template <class F>
  static FnRef of(F& f) {
    return {const_cast<void*>(static_cast<const void*>(&f)),
            [](void* o, Args... a) { (*static_cast<F*>(o))(a...); }};
  }
};

// Runs f(ch * grain, min(n, (ch + 1) * grain)) for ch in [0, chunks), each chunk a task.
void run_chunks(std::int64_t n, std::int64_t grain, std::int64_t chunks,
                FnRef<std::int64_t, std::int64_t> f);
// Runs f(s) for s in [0, slots), each a task.
void run_slots(std::int64_t slots, FnRef<std::int64_t> f);

}  // namespace detail

// Serial cost of one task, in units of `cost_per_item`: an add of two floats costs 1 an
// element (about 0.06 ns in cache on the development machine's core, so a task is a few
// microseconds of work).
inline constexpr double kTaskWork = 40000.0;

// The serial cost of one element of an elementwise op's cpu kernel, in those units: what
// BM_ElementCost measures on floats, rounded, against an add (cos is taken as sin's; clip and
// relu with options as 1, plain relu's 0.7 rounded: not measured apart; SigmoidGrad and
// TanhGrad measure as an add). The kernels split their loops by it, and a fused pass costs the
// sum of its members' (a transcendental is several adds' worth, a libm call dozens).
constexpr double elem_cost(Op op) {
  switch (op) {
    case Op::Exp:
    case Op::Tanh:
    case Op::Sqrt:
      return 2.0;
    case Op::Sigmoid:
      return 2.5;
    case Op::Log:
      return 7.0;
    case Op::Sin:
    case Op::Cos:
      return 25.0;
    case Op::Softplus:
      return 55.0;
    case Op::Pow:
      return 130.0;
    default:
      return 1.0;
  }
}

// The cost of a cast's element, in those units: 0.6-1.4 between native types on the reference's
// kernel (uint8 to float32 0.68, float32 to int32 1.21, to float64 1.44), taken as 1; to or from
// float16 85 (converted in software).
constexpr double cast_cost(DType from, DType to) {
  return from == DType::float16 || to == DType::float16 ? 85.0 : 1.0;
}

// The cost of one element of a whole-matrix transpose (parallel_transpose), in those units:
// 2.35 against an add in cache on one core of a Xeon (BM_Transpose/256/128/1 against
// BM_ElementCost/0), 3.2 for 1600 rows; taken as 2.5.
inline constexpr double kTransposeCost = 2.5;

// Runs f(begin, end) over [0, n) in chunks whose size is a multiple of `align` (kernels use 64:
// vectorized loops then see the same packet boundaries as a serial run).
template <class F>
void parallel_for(std::int64_t n, double cost_per_item, F&& f, std::int64_t align = 64) {
  const double total = static_cast<double>(n) * cost_per_item;
  if (n <= 1 || total < 2 * kTaskWork) {
    if (n > 0) f(std::int64_t{0}, n);
    return;
  }
  std::int64_t grain = std::max<std::int64_t>(
      1, static_cast<std::int64_t>(kTaskWork / std::max(cost_per_item, 1e-9)));
  grain = (grain + align - 1) / align * align;
  // Even chunks: as many as that grain gives, but of equal size (9, 9, 9, 5 would leave one of
  // two threads idle for a quarter of the time; 8, 8, 8, 8 does not).
  std::int64_t chunks = (n + grain - 1) / grain;
  grain = ((n + chunks - 1) / chunks + align - 1) / align * align;
  chunks = (n + grain - 1) / grain;
  if (chunks < 2) {
    f(std::int64_t{0}, n);
    return;
  }
  detail::run_chunks(n, grain, chunks, detail::FnRef<std::int64_t, std::int64_t>::of(f));
}

// Kernels that need per-task scratch (conv workspaces, partial sums) split their work into a
// fixed number of slots: as many as `total_cost` feeds at kTaskWork each, at most `max_slots`
// and `items`. The count depends only on the work, never on the thread count.
inline std::int64_t slot_count(double total_cost, std::int64_t items, std::int64_t max_slots) {
  const auto by_work = static_cast<std::int64_t>(total_cost / (2 * kTaskWork));
  return std::max<std::int64_t>(1, std::min({by_work, items, max_slots}));
}

// Runs f(slot) for every slot in [0, slots), each as a task of its own.
template <class F>
void parallel_slots(std::int64_t slots, F&& f) {
  if (slots <= 1) {
    if (slots == 1) f(std::int64_t{0});
    return;
  }
  detail::run_slots(slots, detail::FnRef<std::int64_t>::of(f));
}

}  // namespace ktape
