// BM_FmaPeak/<threads>: the cores' FP32 FMA peak, so that the other FLOPS counters can be read as
// a fraction of it. Each thread runs 12 independent chains of fused multiply-adds on the widest
// vectors this build targets (AVX-512, AVX2+FMA; a scalar loop otherwise, which is no peak).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <tbb/info.h>
#include <tbb/parallel_for.h>

#include "bench/bench_util.hpp"

namespace {

constexpr int kChains = 12;
constexpr std::int64_t kIters = 1 << 20;

#if defined(__AVX512F__)
constexpr int kLanes = 16;
float fma_loop() {
  __m512 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  const __m512 b = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-4f);
  for (std::int64_t it = 0; it < kIters; ++it)
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  float s = 0;
  for (int i = 0; i < kChains; ++i) s += _mm512_reduce_add_ps(a[i]);
  return s;
}
#elif defined(__FMA__) && defined(__AVX2__)
constexpr int kLanes = 8;
float fma_loop() {
  __m256 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  const __m256 b = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-4f);
  for (std::int64_t it = 0; it < kIters; ++it)
    for (int i = 0; i < kChains; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  alignas(32) float t[8];
  float s = 0;
  for (int i = 0; i < kChains; ++i) {
    _mm256_store_ps(t, a[i]);
    s += t[0];
  }
  return s;
}
#else
constexpr int kLanes = 1;
float fma_loop() {
  float a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = 1.0f + 1e-3f * static_cast<float>(i);
  for (std::int64_t it = 0; it < kIters; ++it)
    for (int i = 0; i < kChains; ++i) a[i] = a[i] * 0.9999f + 1e-4f;
  float s = 0;
  for (float v : a) s += v;
  return s;
}
#endif

void BM_FmaPeak(benchmark::State& state) {
  const auto threads = state.range(0);
  const auto limit = ktape::bench::limit_threads(threads);
  const int tasks = static_cast<int>(threads > 0 ? threads : tbb::info::default_concurrency());
  for (auto _ : state)
    tbb::parallel_for(0, tasks, [](int) { benchmark::DoNotOptimize(fma_loop()); });
  ktape::bench::set_flops(state, 2.0 * kLanes * kChains * static_cast<double>(kIters) * tasks);
  state.SetLabel(ktape::bench::threads_label(threads));
}
BENCHMARK(BM_FmaPeak)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->Apply(ktape::bench::real_time_min);

}  // namespace
