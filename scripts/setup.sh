#!/usr/bin/env bash
# Installs the Debian packages gradeq needs (only those missing), then
# configures and builds it in ./build. Safe to run again: it does nothing
# that is already done. CUDA is used when /usr/local/cuda/bin/nvcc (or nvcc
# on PATH) exists; otherwise only the host backend is built. The build is for
# this machine (GRADEQ_ARCH=native): the scripts run where they build.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake make pkg-config libeigen3-dev librapidcheck-dev libgtest-dev libgmock-dev
          libbenchmark-dev nlohmann-json3-dev libcli11-dev libfmt-dev libtomlplusplus-dev python3 python3-yaml
          gnuplot-nox python3-jsonschema libopenmpi-dev openmpi-bin)
# GRADEQ_EXTRA_PACKAGES: more Debian packages for optional tests (CI sets
# python3-numpy python3-torch for the torch label).
# shellcheck disable=SC2206
packages+=(${GRADEQ_EXTRA_PACKAGES:-})
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "gradeq setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGRADEQ_ARCH=native >build.configure.log 2>&1 || { cat build.configure.log; exit 1; }
grep -E "gradeq:|CUDA compiler identification" build.configure.log || true
cmake --build build -j "$jobs"
