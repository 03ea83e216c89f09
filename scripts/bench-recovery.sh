#!/usr/bin/env bash
# Recovery from a lost worker: Cohort against TorchElastic (torchrun from Debian's python3-torch) on
# the same job (the MLP of examples/fashion-mlp.yaml, Fashion-MNIST, 2 workers, one thread each, 1
# epoch), with the same kill (rank 1 SIGKILLed from outside after step BENCH_KILL_STEP) and the
# same interval between saved states (TorchElastic's checkpoints, Cohort's snapshots), measured for
# both from the outside the same way: to the next completed step, back to full size, steps lost
# (scripts/lib/recovery_bench.py). BENCH_ROUNDS runs of each, interleaved. Writes the recovery
# section of BENCHMARKS.md (between its markers). Not part of `make test`.
#
#   scripts/bench-recovery.sh          # or: make bench-recovery
#
# Environment: BENCH_ROUNDS (3), BENCH_KILL_STEP (175), BENCH_INTERVAL (20), BENCH_BUILD_DIR
# (build/release), BENCH_OUTPUT (BENCHMARKS.md), BENCH_SKIP_BUILD=1 (use the binary already in
# BENCH_BUILD_DIR). Each run first waits for a quiet machine (scripts/lib/quiet.sh:
# BENCH_QUIET_LOAD, BENCH_QUIET_WAIT_S); a round that could not get one is marked busy and the
# ratios are not used for the targets.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BENCH_BUILD_DIR:-$ROOT/build/release}
OUTPUT=${BENCH_OUTPUT:-$ROOT/BENCHMARKS.md}
OUT=$BUILD/bench-recovery
rm -rf "$OUT"
mkdir -p "$OUT"
export QUIET_LOG=$OUT/load.tsv
: >"$QUIET_LOG"

if [[ ${BENCH_SKIP_BUILD:-0} != 1 ]]; then cmake --build "$BUILD" --target cohort >/dev/null; fi

PYTHONPATH=$ROOT/scripts/lib exec /usr/bin/python3 "$ROOT/scripts/lib/recovery_bench.py" "$ROOT" \
  "$BUILD/cohort" "$OUT" "$OUTPUT"
