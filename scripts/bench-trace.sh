#!/usr/bin/env bash
# Overhead of the timeline (trace: {enabled: true}) on training step time.
#
# Runs the same job with tracing off and on, alternating (off, on, off, on, ...) so that both
# see the same machine load, PAIRS times each, and prints the median time per step of each and
# their ratio. The step time is train_seconds / steps from summary.json (rank 0's loop, data
# loading to optimizer step, without start-up and evaluation).
#
#   scripts/bench-trace.sh                 # defaults below
#   PAIRS=5 STEPS=500 JOB=examples/fashion-cnn.yaml scripts/bench-trace.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/release/cohort}
JOB=${JOB:-examples/fashion-mlp.yaml}
PAIRS=${PAIRS:-3}
STEPS=${STEPS:-400}
WORKERS=${WORKERS:-2}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

step_ms() {  # run dir -> milliseconds per step
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1]+"/summary.json")); print(1000*s["train_seconds"]/s["steps"])' "$1"
}

off=() on=()
for i in $(seq 1 "$PAIRS"); do
  for t in false true; do
    dir="$out/$t-$i"
    "$BIN" run "$JOB" --run-dir "$dir" --set workers="$WORKERS" --set train.max_steps="$STEPS" \
      --set checkpoint.every_steps=0 --set trace.enabled="$t" >/dev/null
    ms=$(step_ms "$dir")
    if [ "$t" = true ]; then on+=("$ms"); else off+=("$ms"); fi
    echo "run $i trace=$t: $ms ms/step" >&2
  done
done
python3 - "${off[*]}" "${on[*]}" <<'PY'
import statistics, sys
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
mo, mn = statistics.median(off), statistics.median(on)
print(f"trace off: median {mo:.3f} ms/step  (runs: {', '.join(f'{x:.3f}' for x in off)})")
print(f"trace on:  median {mn:.3f} ms/step  (runs: {', '.join(f'{x:.3f}' for x in on)})")
print(f"overhead:  {100 * (mn / mo - 1):+.1f}%  (spread of the off runs: {100 * (max(off) - min(off)) / mo:.1f}%)")
PY
