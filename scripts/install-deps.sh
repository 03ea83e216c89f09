#!/usr/bin/env bash
# Installs every system package Cohort needs to build, test, benchmark and run its default job.
# Idempotent: packages already present are skipped; apt-get runs only when something is missing.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config git clang-format clang-tidy ccache
  # core libraries
  libssl-dev zlib1g-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libyaml-cpp-dev libsqlite3-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  # training: libtorch with a fast BLAS, and the reference data set
  libtorch-dev libopenblas0-pthread dataset-fashion-mnist
  # gradient compression: PowerSGD's matrix products (cblas)
  libopenblas-dev
  # peers measured against in BENCHMARKS.md
  libgloo-dev libopenmpi-dev openmpi-bin python3-torch
  # network namespaces and traffic control for the emulated-cluster tests
  iproute2 procps
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
