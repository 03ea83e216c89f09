#!/usr/bin/env bash
# Losing the coordinator: Cohort with its store in etcd and a standby coordinator, against
# TorchElastic with its etcd-v2 rendezvous (Debian's torchrun and python3-etcd), on the same job,
# measured the same way (scripts/lib/coordinator_loss_bench.py says how). BENCH_ROUNDS runs of
# each, interleaved, a fresh etcd for each. Writes the coordinator-loss section of BENCHMARKS.md
# (between its markers). Not part of `make test`.
#
#   scripts/bench-coordinator-loss.sh          # or: make bench-coordinator-loss
#
# Environment: BENCH_ROUNDS (3), BENCH_KILL_STEP (175), BENCH_INTERVAL (TorchElastic's checkpoint
# interval, 20), BENCH_LAST_CALL_S (TorchElastic's last_call_timeout, 1), BENCH_FAILURE_TIMEOUT_S
# (Cohort's elastic.failure_timeout_s, 2), BENCH_BUILD_DIR (build/release), BENCH_OUTPUT
# (BENCHMARKS.md), BENCH_SKIP_BUILD=1 (use the binary already in BENCH_BUILD_DIR). Each run first
# waits for a quiet machine (scripts/lib/quiet.sh); a run that could not get one is marked busy and
# not used for the targets.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BENCH_BUILD_DIR:-$ROOT/build/release}
OUTPUT=${BENCH_OUTPUT:-$ROOT/BENCHMARKS.md}
OUT=$BUILD/bench-coordinator-loss
rm -rf "$OUT"
mkdir -p "$OUT"
export QUIET_LOG=$OUT/load.tsv
: >"$QUIET_LOG"

if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then cmake --build "$BUILD" --target cohort >/dev/null; fi

PYTHONPATH=$ROOT/scripts/lib exec /usr/bin/python3 "$ROOT/scripts/lib/coordinator_loss_bench.py" \
  "$ROOT" "$BUILD/cohort" "$OUT" "$OUTPUT"
