#!/usr/bin/env bash
# The Python examples as shipped: examples/python/train_ddp.py for a few steps with --backend gloo
# and with --backend cohort (under `cohort run`; at 2 workers DDP on either backend gives the same
# model bit for bit, so the same test accuracy), and `cohort run examples/python/elastic.yaml` as
# it is (3 workers, rank 1 killed at step 60: the survivors go on, a replacement joins them, and the
# job completes at 3 workers).
#   examples_test.sh COHORT_BINARY PYTHONPATH
set -euo pipefail
COHORT=$1
export PYTHONPATH=$2 OMP_NUM_THREADS=1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "examples_test: $*" >&2; exit 1; }

for backend in gloo cohort; do
  "$COHORT" run --workers 2 --run-dir "$tmp/$backend" "$ROOT/examples/python/train_ddp.py" \
    --backend "$backend" --max-steps 5 >"$tmp/$backend.out" 2>&1 ||
    { cat "$tmp/$backend.out" "$tmp/$backend"/logs/rank-*.log; fail "train_ddp.py --backend $backend failed"; }
  grep -q '"status": "completed"' "$tmp/$backend/summary.json" ||
    fail "$backend: summary: $(cat "$tmp/$backend/summary.json")"
  grep -o "done: 5 steps on 2 workers with $backend, test accuracy [0-9.]*" \
    "$tmp/$backend/logs/rank-0.log" >"$tmp/$backend.done" ||
    fail "$backend: rank 0's log: $(cat "$tmp/$backend/logs/rank-0.log")"
  echo "examples_test: train_ddp.py: $(cat "$tmp/$backend.done")"
done
gloo_acc=$(sed 's/.*test accuracy //' "$tmp/gloo.done")
cohort_acc=$(sed 's/.*test accuracy //' "$tmp/cohort.done")
[[ $gloo_acc == "$cohort_acc" ]] ||
  fail "train_ddp.py: test accuracy $gloo_acc with gloo but $cohort_acc with cohort"

# The job file's paths are relative to the launcher's directory: the repository root.
(cd "$ROOT" && "$COHORT" run examples/python/elastic.yaml --run-dir "$tmp/elastic") \
  >"$tmp/elastic.out" 2>&1 || { cat "$tmp/elastic.out"; fail "elastic.yaml failed"; }
summary=$tmp/elastic/summary.json
/usr/bin/python3 - "$summary" <<'PY' || fail "elastic.yaml: summary: $(cat "$summary")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["status"] == "completed", s["status"]
assert s["workers_lost"] == 1 and "SIGKILL" in s["exits"]["1"], s["exits"]
assert s["recoveries"] >= 1 and s["final_world_size"] == 3, s
PY
grep -q "injecting fault: kill after 60 steps" "$tmp/elastic/logs/rank-1.log" ||
  fail "elastic.yaml: rank 1's log does not say the fault fired"
grep -q "done: [0-9]* steps on 3 workers" "$tmp/elastic/logs/rank-0.log" ||
  fail "elastic.yaml: rank 0's log: $(tail -5 "$tmp/elastic/logs/rank-0.log")"
echo "examples_test: elastic.yaml: $(grep -o 'done: .*' "$tmp/elastic/logs/rank-0.log")," \
  "$(grep -o '"recoveries": [0-9]*' "$summary")"
