#!/usr/bin/env bash
# Installs every system package Cohort needs to build, test, benchmark and run its default job.
# Idempotent: packages already present are skipped; apt-get runs only when something is missing.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config git clang-format clang-tidy ccache
  # core libraries
  libssl-dev zlib1g-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libyaml-cpp-dev libsqlite3-dev
  # the web console: HTTP server; node and npm install its assets (web/), chromium runs its test
  libcpp-httplib-dev nodejs chromium
  # tests and benchmarks; clang with its libFuzzer runtime for make fuzz, llvm-symbolizer for the
  # sanitizers' reports (and their suppressions by function name)
  libgtest-dev libgmock-dev googletest libbenchmark-dev clang libclang-rt-14-dev llvm
  # training: libtorch with a fast BLAS, and the reference data set
  libtorch-dev libopenblas0-pthread dataset-fashion-mnist
  # the Python package (torch.distributed backend "cohort"): pybind11 and the interpreter's headers
  pybind11-dev python3-dev
  # gradient compression: PowerSGD's matrix products (cblas)
  libopenblas-dev
  # peers measured against in BENCHMARKS.md
  libgloo-dev libopenmpi-dev openmpi-bin python3-torch
  # what TCP carries between two processes, the reference of the TCP benchmark
  iperf3
  # TorchElastic's etcd-v2 rendezvous, for the coordinator-loss and rendezvous benchmarks
  python3-etcd
  # network namespaces and traffic control for the emulated-cluster tests
  iproute2 procps
  # cluster launchers the tests run for real: Slurm's daemons and tools, and munge
  slurmctld slurmd slurm-client munge
  # the job store kept in etcd (coordinator.store): etcd's server, started by the tests
  etcd-server
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Debian's nodejs comes without npm (a separate package); a nodejs that bundles npm needs nothing.
if ! command -v npm >/dev/null 2>&1; then
  echo "install-deps: installing npm"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm
fi

# The npm packages, exactly as each package-lock.json pins them: the web console's (uPlot, served
# by the binary; playwright-core for the browser test) and the Kubernetes manifest check's
# (kubernetes-models, the API's schemas compiled for ajv; tests/k8s). Skipped when already
# installed from the same lock.
root="$(cd "$(dirname "$0")/.." && pwd)"
for dir in "$root/web" "$root/tests/k8s"; do
  if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.package-lock.json.installed" 2>/dev/null; then
    echo "install-deps: npm ci in ${dir#"$root"/}/"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$dir/package-lock.json" "$dir/node_modules/.package-lock.json.installed"
  fi
done
