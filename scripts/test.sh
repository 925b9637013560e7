#!/usr/bin/env bash
# Installs missing packages, then runs every test: the suite built in Release, the same suite
# under ASan + UBSan and a short run of every fuzz target (scripts/sanitize.sh), and the
# concurrency test under TSan (scripts/tsan.sh). `--quick` runs only the Release suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKTAPE_BUILD_TESTS=ON
cmake --build build
(cd build && ctest --output-on-failure --no-tests=error -j2)
if [ "${1:-}" = "--quick" ]; then exit 0; fi
bash scripts/sanitize.sh "${FUZZ_SECONDS:-30}"
bash scripts/tsan.sh
