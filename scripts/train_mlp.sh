#!/usr/bin/env bash
# Installs missing packages, builds ktape in Release and trains the Dense (MLP) example on
# Fashion-MNIST. Extra arguments go to the example (e.g. --epochs 3).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKTAPE_BUILD_TESTS=OFF -DKTAPE_BUILD_BENCH=OFF
cmake --build build --target fashion_mlp
./build/examples/fashion_mlp "$@"
