// Shared pieces of the ktape benchmarks: a thread limit for one benchmark, and FLOP/s counters.
#pragma once

#include <benchmark/benchmark.h>

#include <tbb/global_control.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/arena.hpp"
#include "ops/kernels/cpu/gemm.hpp"

namespace ktape::bench {

// Limits oneTBB (so ktape's kernels) to `threads` while the result lives; 0 leaves every core.
inline std::unique_ptr<tbb::global_control> limit_threads(std::int64_t threads) {
  if (threads <= 0) return nullptr;
  return std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                               static_cast<std::size_t>(threads));
}

// The "min" and "max" statistics of --benchmark_repetitions (every benchmark registers them): on
// a shared, noisy machine the fastest repetition is the steadiest figure, and old/new binaries
// are best compared by it. A statistic applies to times and counters alike, so the fastest
// repetition's time is the `_min` row's and its FLOPS rate the `_max` row's.
inline double min_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}
inline double max_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

// Every benchmark's timing policy: wall-clock time (kernels run on oneTBB's threads) and the min
// and max statistics. Registered with ->Apply(ktape::bench::real_time_min).
inline void real_time_min(benchmark::internal::Benchmark* b) {
  b->UseRealTime()->ComputeStatistics("min", min_of)->ComputeStatistics("max", max_of);
}

inline std::string threads_label(std::int64_t threads) {
  return threads > 0 ? std::to_string(threads) + (threads == 1 ? " thread" : " threads")
                     : "every core";
}

// Sets the cpu GEMM's schedule (kernels::set_gemm_schedule) while the result lives, then
// restores the default.
class GemmSchedule {
 public:
  GemmSchedule(bool by_columns, bool whole_rows, bool parts_together = true) {
    kernels::set_gemm_schedule(by_columns, whole_rows, parts_together);
  }
  ~GemmSchedule() { kernels::set_gemm_schedule(true, true, true); }
  GemmSchedule(const GemmSchedule&) = delete;
  GemmSchedule& operator=(const GemmSchedule&) = delete;
};

// Maps large buffers on 4 KB pages (ktape::set_huge_pages(false)) while the result lives, then
// restores the default; buffers allocated meanwhile keep their pages.
class SmallPages {
 public:
  explicit SmallPages(bool on) : on_(on) {
    if (on_) set_huge_pages(false);
  }
  ~SmallPages() {
    if (on_) set_huge_pages(true);
  }
  SmallPages(const SmallPages&) = delete;
  SmallPages& operator=(const SmallPages&) = delete;

 private:
  bool on_;
};

// Selects the cpu GEMM's serial kernels while the result lives: 0 the default (LIBXSMM's and
// BLIS's when built with them and they have kernels for this CPU), 1 Eigen's, 2 BLIS's alone.
// Labels the benchmark with it ("xsmm cpx, blis skx").
class GemmChoice {
 public:
  explicit GemmChoice(std::int64_t choice) : saved_(kernels::gemm_library()) {
    if (choice == 1) kernels::set_gemm_library(kernels::GemmLibrary::eigen);
    if (choice == 2) kernels::set_gemm_library(kernels::GemmLibrary::blis);
    name_ = kernels::gemm_kernel_name(kernels::gemm_library());
  }
  ~GemmChoice() { kernels::set_gemm_library(saved_); }
  GemmChoice(const GemmChoice&) = delete;
  GemmChoice& operator=(const GemmChoice&) = delete;
  const std::string& name() const { return name_; }

 private:
  kernels::GemmLibrary saved_;
  std::string name_;
};

// The counter "FLOPS": `flops_per_iteration` x iterations / time (model FLOPs, not executed).
inline void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOPS"] = benchmark::Counter(
      flops_per_iteration * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

}  // namespace ktape::bench
