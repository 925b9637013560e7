#include "engine/parallel.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

namespace ktape::detail {

void run_chunks(std::int64_t n, std::int64_t grain, std::int64_t chunks,
                FnRef<std::int64_t, std::int64_t> f) {
  tbb::parallel_for(
      tbb::blocked_range<std::int64_t>(0, chunks, 1),
      [&](const tbb::blocked_range<std::int64_t>& r) {
        for (std::int64_t ch = r.begin(); ch != r.end(); ++ch)
          f.call(f.obj, ch * grain, std::min(n, (ch + 1) * grain));
      },
      tbb::simple_partitioner());
}

void run_slots(std::int64_t slots, FnRef<std::int64_t> f) {
  tbb::parallel_for(
      tbb::blocked_range<std::int64_t>(0, slots, 1),
      [&](const tbb::blocked_range<std::int64_t>& r) {
        for (std::int64_t s = r.begin(); s != r.end(); ++s) f.call(f.obj, s);
      },
      tbb::simple_partitioner());
}

}  // namespace ktape::detail
