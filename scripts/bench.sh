#!/usr/bin/env bash
# Builds in Release and runs the benchmarks, with LibTorch side by side: installs libtorch-dev
# and an optimized BLAS for it (libopenblas0-pthread; without it Debian's LibTorch uses the
# reference BLAS and is several times slower). Arguments go to the benchmark binary, e.g.
#   bash scripts/bench.sh --benchmark_filter='MlpStep|Lstm'
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
missing=()
for p in libtorch-dev libopenblas0-pthread; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build --target bench_ktape
./build/bench/bench_ktape "$@"
