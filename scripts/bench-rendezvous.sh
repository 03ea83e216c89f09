#!/usr/bin/env bash
# Rendezvous of 128 workers (processes on this machine, a tiny job): Cohort through its embedded
# store and through etcd, against torchrun with its c10d and etcd-v2 rendezvous (one agent per 8
# workers), measured the same way (scripts/lib/rendezvous_bench.py says how). Writes the rendezvous
# section of BENCHMARKS.md (between its markers). Not part of `make test`; needs ~12 GiB of memory.
#
#   scripts/bench-rendezvous.sh          # or: make bench-rendezvous
#
# Environment: BENCH_WORKERS (128), BENCH_PER_AGENT (8), BENCH_ROUNDS (2), BENCH_LIMIT_S (600, per
# run), BENCH_BUILD_DIR (build/release), BENCH_OUTPUT (BENCHMARKS.md), BENCH_SKIP_BUILD=1 (use the
# binary already in BENCH_BUILD_DIR). Each run first waits for a quiet machine
# (scripts/lib/quiet.sh); a run that could not get one is marked busy and not used for the targets.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BENCH_BUILD_DIR:-$ROOT/build/release}
OUTPUT=${BENCH_OUTPUT:-$ROOT/BENCHMARKS.md}
OUT=$BUILD/bench-rendezvous
rm -rf "$OUT"
mkdir -p "$OUT"
export QUIET_LOG=$OUT/load.tsv
: >"$QUIET_LOG"

if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then cmake --build "$BUILD" --target cohort >/dev/null; fi

PYTHONPATH=$ROOT/scripts/lib exec /usr/bin/python3 "$ROOT/scripts/lib/rendezvous_bench.py" \
  "$ROOT" "$BUILD/cohort" "$OUT" "$OUTPUT"
