#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, checks that only public headers are installed,
# then builds and runs a consumer with find_package(ktape) and with pkg-config.
#   check.sh <build dir> <source dir of this test> <scratch dir>
set -euo pipefail
build="$1" here="$2" scratch="$3"
rm -rf "$scratch" && mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
inc="$scratch/prefix/include/ktape"
for private in engine/graph.hpp engine/plan.hpp engine/fusion.hpp ops/op_util.hpp \
               ops/kernels/attrs.hpp ops/loops/scan.hpp; do
  if [ -e "$inc/$private" ]; then echo "private header installed: $private"; exit 1; fi
done
cmake -S "$here" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$scratch/consumer" >/dev/null
"$scratch/consumer/consumer"
export PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig:$scratch/prefix/lib64/pkgconfig"
# shellcheck disable=SC2046
c++ "$here/consumer.cpp" -o "$scratch/consumer_pc" $(pkg-config --cflags ktape) \
  $(pkg-config --libs --static ktape)
"$scratch/consumer_pc"
