#!/usr/bin/env bash
# Installs every Debian 12 package choir needs to build, test and benchmark.
# Idempotent: packages already present are skipped, so a second run is quick.
# Usage: scripts/install-deps.sh            (as root, or with sudo available)
set -euo pipefail

packages=(
  # build
  cmake ninja-build g++ pkg-config git
  # libraries choir links against
  libhwloc-dev nlohmann-json3-dev libcli11-dev libfmt-dev libssl-dev libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev
  # PyTorch backend (Debian's torch 1.13 for /usr/bin/python3)
  python3 python3-torch libtorch-dev pybind11-dev python3-pybind11 python3-pytest python3-numpy
  # peers for benchmarks/compare
  libopenmpi-dev openmpi-bin libmpich-dev mpich
  # multi-host test bed and operations tooling
  iproute2 nftables iperf3 iputils-ping hwloc prometheus curl procps python3-yaml
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
