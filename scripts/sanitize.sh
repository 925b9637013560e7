#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (with float -> int
# cast checks), then every libFuzzer target for FUZZ_SECONDS each (default 60) on a copy of its
# seed corpus, all targets at once. One clang build tree, build-asan/, serves both. Called by
# scripts/test.sh; `bash scripts/sanitize.sh 600` fuzzes longer. The suite runs on Eigen's GEMM
# (KTAPE_GEMM=eigen): Eigen is header code, so every GEMM's extents and strides are checked by
# the instrumentation end to end (test_gemm's tests run every library in that run); then the
# tests of the products, the loops and the models at several thread counts run again on BLIS's
# kernels inside ktape's blocked product (its packing is instrumented; BLIS's own code is not),
# with the conv tests whose tiles run it serially, and once more on LIBXSMM's (the default:
# ktape's tiles around its generated code). Line
# tables only (stack traces keep file:line); the test code itself is built unoptimized, but for
# test_gemm's oracle (tests/CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS="${1:-60}"
bash scripts/deps.sh --sanitizers
# Without MPI: LeakSanitizer reports Open MPI's own allocations at exit. The MPI paths of
# ktape/distributed (mpirun -np 2) are tested by the Release suite.
CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DKTAPE_SANITIZE=address,undefined -DKTAPE_FUZZ=ON -DKTAPE_BUILD_TESTS=ON -DKTAPE_BUILD_BENCH=OFF -DKTAPE_WITH_MPI=OFF >/dev/null
cmake --build build-asan
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:strict_string_checks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
# The four longest training runs (a CNN epoch in both data formats, the CNN resume, the MLP to
# 80 %) run in the Release suite only: under ASan they take 40 % of the sanitizer test time, and
# what they execute (conv, pooling, optimizers, checkpoints) runs here in the shorter tests.
(cd build-asan && KTAPE_GEMM=eigen ctest --output-on-failure --no-tests=error -j2 \
  -E 'CnnEndToEnd\.LossFallsInOneEpochOn2000Samples|CnnEndToEnd\.CheckpointResumesExactly|EndToEnd\.(Adam|Sgd)LearnsFashionMnist')
# The op rows are one ctest test per family and check: Layout's and Indexing's hold the dot,
# matmul and batch_dot rows, Nn's dense layers, Conv's the convolutions' tiled products.
# (--no-tests=error: a pattern that no longer matches any test fails, where ctest passes.)
products='^(Function\.(WeightGradientsSharing|AProductThatReads)|Models/SameBits\.|Rnn[A-Za-z]*\.|Cells|Loops/|Layout/|Indexing/|Nn/|Conv/|Conv(Tiling|Forward|Grad)\.)'
(cd build-asan && KTAPE_GEMM=blis ctest --output-on-failure --no-tests=error -j2 -R "$products")
if grep -qw avx2 /proc/cpuinfo; then  # LIBXSMM's kernels need AVX2 (else the default is BLIS)
  (cd build-asan && KTAPE_GEMM=xsmm ctest --output-on-failure --no-tests=error -j2 -R "$products")
fi

fuzz() {  # target: runs it on a scratch copy of its corpus; libFuzzer exits non-zero on a crash
  local t="$1" work="build-asan/fuzz-work/$1"
  rm -rf "$work" && mkdir -p "$work/corpus" && cp tests/fuzz/corpus/"$t"/* "$work/corpus/"
  (cd "$work" && TMPDIR="$PWD" "../../tests/fuzz/$t" corpus -max_total_time="$FUZZ_SECONDS" \
     -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 >log 2>&1) ||
    { echo "fuzz target $t FAILED:"; tail -n 60 "$work/log"; return 1; }
  echo "fuzz target $t: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" |
    grep -o '[0-9]*$') runs in ${FUZZ_SECONDS}s, no crash"
}
targets=(fuzz_api fuzz_npz fuzz_idx fuzz_config fuzz_optimizer_config)
status=0
pids=()
for t in "${targets[@]}"; do  # all at once: a minute of wall time whatever the core count
  fuzz "$t" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
