#!/usr/bin/env bash
# Installs, with apt-get, whatever ktape needs that this Debian 12 machine lacks.
set -euo pipefail
pkgs=(cmake ninja-build g++ libeigen3-dev libtbb-dev nlohmann-json3-dev libspdlog-dev libgtest-dev
      libbenchmark-dev zlib1g-dev libcli11-dev dataset-fashion-mnist)
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
