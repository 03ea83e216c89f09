#!/usr/bin/env bash
# Overhead of the timeline (trace: {enabled: true}) on training step time.
#
# Runs the same job with tracing off and on, alternating (off, on, off, on, ...) so that both
# see the same machine load, PAIRS times each, and prints the median time per step of each and
# their ratio. The step time is train_seconds / steps from summary.json (rank 0's loop, data
# loading to optimizer step, without start-up and evaluation).
# Each run first waits for a quiet machine (scripts/lib/quiet.sh: BENCH_QUIET_LOAD,
# BENCH_QUIET_WAIT_S); one that could not get one is marked busy, and so is the overhead then.
#
#   scripts/bench-trace.sh                 # defaults below
#   PAIRS=5 STEPS=500 JOB=examples/fashion-cnn.yaml scripts/bench-trace.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${BIN:-build/release/cohort}
JOB=${JOB:-examples/fashion-mlp.yaml}
PAIRS=${PAIRS:-3}
STEPS=${STEPS:-400}
WORKERS=${WORKERS:-2}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export QUIET_LOG=$out/load.tsv
: >"$QUIET_LOG"
# shellcheck source=lib/quiet.sh
source "$ROOT/scripts/lib/quiet.sh"

step_ms() {  # run dir -> milliseconds per step
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1]+"/summary.json")); print(1000*s["train_seconds"]/s["steps"])' "$1"
}

off=() on=()
for i in $(seq 1 "$PAIRS"); do
  for t in false true; do
    dir="$out/$t-$i"
    wait_quiet "trace $([ "$t" = true ] && echo on || echo off) $i"
    "$BIN" run "$JOB" --run-dir "$dir" --set workers="$WORKERS" --set train.max_steps="$STEPS" \
      --set checkpoint.every_steps=0 --set trace.enabled="$t" >/dev/null
    ms=$(step_ms "$dir")
    if [ "$t" = true ]; then on+=("$ms"); else off+=("$ms"); fi
    echo "run $i trace=$t: $ms ms/step" >&2
  done
done
PYTHONPATH=$ROOT/scripts/lib python3 - "${off[*]}" "${on[*]}" "$QUIET_LOG" <<'PY'
import statistics, sys
from quiet_report import busy_labels, load_note
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
busy = busy_labels(sys.argv[3])
def runs(xs, t):
    return ', '.join(f'{x:.3f}' + (' (busy)' if f'trace {t} {i}' in busy else '')
                     for i, x in enumerate(xs, 1))
mo, mn = statistics.median(off), statistics.median(on)
print(f"trace off: median {mo:.3f} ms/step  (runs: {runs(off, 'off')})")
print(f"trace on:  median {mn:.3f} ms/step  (runs: {runs(on, 'on')})")
print(f"overhead:  {100 * (mn / mo - 1):+.1f}%{' (busy)' if busy else ''}  (spread of the off runs: {100 * (max(off) - min(off)) / mo:.1f}%)")
print(load_note(sys.argv[3]))
PY
