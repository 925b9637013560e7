#!/usr/bin/env bash
# Builds the library and the concurrency test with ThreadSanitizer (build-tsan/) and runs it:
# one Function called from several threads must show no data race. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS="-fsanitize=thread -DKTAPE_TSAN" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
  -DKTAPE_BUILD_TESTS=ON -DKTAPE_BUILD_EXAMPLES=OFF -DKTAPE_BUILD_BENCH=OFF >/dev/null
cmake --build build-tsan --target test_concurrency
# halt_on_error: the first race fails the run; second_deadlock_stack: both stacks of a deadlock.
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
  KERAS_HOME="$PWD/build-tsan/tests/keras_home" ./build-tsan/tests/test_concurrency
