#!/usr/bin/env bash
# Installs, with apt-get, whatever ktape needs that this Debian 12 machine lacks.
#   bash scripts/deps.sh               build, examples and the Release tests
#   bash scripts/deps.sh --sanitizers  also clang and its runtimes (ASan/UBSan/libFuzzer builds)
set -euo pipefail
pkgs=(cmake ninja-build g++ libeigen3-dev libtbb-dev nlohmann-json3-dev libspdlog-dev libgtest-dev
      libbenchmark-dev zlib1g-dev libcli11-dev libblis-serial-dev libxsmm-dev doxygen dataset-fashion-mnist
      libopenmpi-dev openmpi-bin lld)
if [ "${1:-}" = "--sanitizers" ]; then
  pkgs+=(clang libclang-rt-14-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "Installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
