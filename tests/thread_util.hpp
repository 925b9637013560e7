// Helpers of the thread tests (test_threads.cpp, test_kernel_threads.cpp): deterministic inputs,
// runs in a oneTBB arena of n threads (so 16 threads really run on a machine with fewer cores),
// and the check that the cpu backend gives the reference backend's bits at each thread count.
#pragma once

#include <gtest/gtest.h>

#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "ktape/ktape.hpp"

namespace ktape::thread_util {

namespace K = ktape::backend;

// Deterministic inputs: a fixed, irregular pattern.
inline ktape::NDArray pattern(const ktape::Shape& s, double scale = 1.0) {
  ktape::NDArray a(s, ktape::DType::float32);
  for (std::int64_t i = 0; i < a.size(); ++i)
    a.set_item(i, scale * std::sin(0.7 * static_cast<double>(i) + 0.3));
  return a;
}

// What `build()` returns, run from a cleared session in an arena of `threads` threads.
template <class Build>
std::vector<ktape::NDArray> in_arena(int threads, Build&& build) {
  std::vector<ktape::NDArray> out;
  tbb::task_arena arena(threads);
  arena.execute([&] {
    K::clear_session();
    out = build();
  });
  return out;
}

// Expects the outputs of `run("cpu", t)` at each of `threads` to have the bits of `base`.
template <class Run>
void expect_cpu_bits(const std::vector<ktape::NDArray>& base, Run&& run,
                     std::initializer_list<int> threads, const std::string& what) {
  for (int t : threads) {
    const std::vector<ktape::NDArray> cpu = run("cpu", t);
    EXPECT_EQ(cpu.size(), base.size()) << what;
    for (std::size_t k = 0; k < std::min(cpu.size(), base.size()); ++k)
      EXPECT_EQ(0, std::memcmp(cpu[k].raw_data(), base[k].raw_data(), base[k].nbytes()))
          << what << " output " << k << " at " << t << " threads";
  }
}

// The outputs of `run(backend, threads)` on the cpu backend at each of `threads` have the
// reference backend's bits; returns the reference's.
template <class Run>
std::vector<ktape::NDArray> expect_reference_bits(Run&& run, std::initializer_list<int> threads,
                                                  const std::string& what = "") {
  std::vector<ktape::NDArray> ref = run("reference", 1);
  expect_cpu_bits(ref, run, threads, what);
  return ref;
}

// The outputs of `run("cpu", threads)` have the same bits at each of `threads` as at one
// thread; returns the one-thread outputs.
template <class Run>
std::vector<ktape::NDArray> expect_same_bits(Run&& run, std::initializer_list<int> threads,
                                             const std::string& what = "") {
  std::vector<ktape::NDArray> one = run("cpu", 1);
  expect_cpu_bits(one, run, threads, what);
  return one;
}

}  // namespace ktape::thread_util
