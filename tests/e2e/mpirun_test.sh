#!/usr/bin/env bash
# Cohort's workers started by Open MPI's mpirun, for real:
#
#   mpirun_test.sh COHORT
#
#   1. `cohort run JOB --launcher mpirun`: one mpirun starts the 3 workers (ranks from
#      OMPI_COMM_WORLD_RANK); the job completes.
#   2. The same with one rank SIGKILLed mid-training: mpirun keeps the other ranks running
#      (orte_abort_on_non_zero_status 0), the survivors go on without it, and the job completes.
#   3. `mpirun -np 2 cohort worker --join ...` against `cohort run --external-workers`, as a user
#      would type it (docs/clusters.md).
#
# Exit 77 (ctest: skipped) without Open MPI's mpirun.
set -uo pipefail
COHORT=${1:?usage: mpirun_test.sh COHORT}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
DEADLINE=$((SECONDS + 400))
command -v mpirun >/dev/null || {
  echo "SKIP: needs Open MPI's mpirun (Debian package openmpi-bin)"
  exit 77
}
D=$(mktemp -d /tmp/cohort-mpirun-test-XXXXXX)
cleanup() {
  pkill -9 -f "$D" 2>/dev/null
  rm -rf "$D"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$D"/*/logs/*.log "$D"/*.out; do [[ -f $f ]] && { echo "--- $f"; tail -20 "$f"; }; done
  exit 1
}
JOB=$ROOT/examples/fashion-mlp.yaml

# --- 1. three workers under one mpirun --------------------------------------------------------
RUN=$D/plain
timeout 300 "$COHORT" run "$JOB" --launcher mpirun --run-dir "$RUN" --set workers=3 \
  --set train.max_steps=60 --launcher-arg --oversubscribe >"$D/plain.out" 2>&1 ||
  fail "cohort run --launcher mpirun: $(tail -5 "$D/plain.out")"
[[ $(summary "$RUN" status) == completed ]] || fail "job 1: $(cat "$RUN/summary.json")"
[[ $(summary "$RUN" world_size) == 3 ]] || fail "job 1 did not run 3 workers"
grep -q '"launcher":"mpirun"' "$RUN/events.jsonl" || fail "no mpirun in job 1's events"
echo "PASS: 3 workers under mpirun completed the job"

# --- 2. a rank killed under mpirun ------------------------------------------------------------
RUN=$D/killed
"$COHORT" run "$JOB" --launcher mpirun --run-dir "$RUN" --set workers=3 --set train.epochs=1 \
  --set elastic.min_workers=2 --set elastic.heartbeat_s=0.3 --set elastic.failure_timeout_s=2 \
  --set elastic.snapshot_every_steps=10 \
  --set "faults=[{kind: slow, rank: 0, at_step: 0, seconds: 0.02}]" \
  --launcher-arg --oversubscribe >"$D/killed.out" 2>&1 &
LAUNCHER=$!
until (($(last_step "$RUN") >= 30)); do
  ((SECONDS < DEADLINE)) || fail "job 2 never reached step 30"
  kill -0 $LAUNCHER 2>/dev/null || fail "job 2's launcher ended early: $(tail -5 "$D/killed.out")"
  sleep 0.2
done
# Rank 1 is the worker whose OMPI_COMM_WORLD_RANK is 1.
VICTIM=$(pgrep -f "worker --join" | while read -r p; do
  grep -qz '^OMPI_COMM_WORLD_RANK=1$' "/proc/$p/environ" 2>/dev/null && echo "$p"
done | head -1)
[[ -n $VICTIM ]] || fail "no process for rank 1"
kill -9 "$VICTIM"
wait $LAUNCHER || fail "job 2 failed: $(tail -5 "$D/killed.out")"
[[ $(summary "$RUN" status) == completed ]] || fail "job 2: $(cat "$RUN/summary.json")"
[[ $(summary "$RUN" final_world_size) == 2 ]] || fail "job 2 did not end with the 2 survivors"
(($(summary "$RUN" recoveries) >= 1)) || fail "job 2 recorded no recovery"
echo "PASS: a rank killed under mpirun; the survivors completed the job"

# --- 3. mpirun typed by hand ---------------------------------------------------------------------
RUN=$D/by-hand
PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$COHORT" run "$JOB" --external-workers --port "$PORT" --token-file "$D/token" --run-dir "$RUN" \
  --set workers=2 --set train.max_steps=40 >"$D/by-hand.out" 2>&1 &
LAUNCHER=$!
until [[ -s $D/token ]]; do
  ((SECONDS < DEADLINE)) || fail "job 3 never wrote its token"
  kill -0 $LAUNCHER 2>/dev/null || fail "job 3's launcher ended early: $(tail -5 "$D/by-hand.out")"
  sleep 0.1
done
ROOT_OK=()
((EUID == 0)) && ROOT_OK=(--allow-run-as-root)
COHORT_TOKEN=$(cat "$D/token") timeout 300 mpirun "${ROOT_OK[@]}" --oversubscribe -np 2 \
  --mca orte_abort_on_non_zero_status 0 -x COHORT_TOKEN \
  "$COHORT" worker --join "127.0.0.1:$PORT" >"$D/mpirun.out" 2>&1 || fail "mpirun: $(tail -5 "$D/mpirun.out")"
wait $LAUNCHER || fail "job 3 failed"
[[ $(summary "$RUN" status) == completed ]] || fail "job 3: $(cat "$RUN/summary.json")"
echo "PASS: mpirun -np 2 cohort worker --join ran the job"
