#!/usr/bin/env bash
# Installs missing packages, builds ktape and its tests in Release and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKTAPE_BUILD_TESTS=ON
cmake --build build
cd build && ctest --output-on-failure -j2
