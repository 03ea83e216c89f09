#!/usr/bin/env bash
# An unchanged torchrun-style DDP script (examples/python/train_ddp.py) started three ways:
# `cohort run --workers 2 SCRIPT` (run directory, logs, events, summary), Debian's torchrun
# (env:// rendezvous through torchrun's own agent store), and `cohort run` with a worker that
# fails (the job fails, naming the rank, and stops the others).
#   run_test.sh COHORT_BINARY PYTHONPATH
set -euo pipefail
COHORT=$1
export PYTHONPATH=$2 OMP_NUM_THREADS=1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SCRIPT=$ROOT/examples/python/train_ddp.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "run_test: $*" >&2; exit 1; }

"$COHORT" run --workers 2 --run-dir "$tmp/run" "$SCRIPT" --backend cohort --max-steps 30 \
  >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "cohort run failed"; }
grep -q '"status": "completed"' "$tmp/run/summary.json" || fail "summary: $(cat "$tmp/run/summary.json")"
grep -q "done: 30 steps on 2 workers with cohort" "$tmp/run/logs/rank-0.log" ||
  fail "rank 0's log: $(cat "$tmp/run/logs/rank-0.log")"
[[ $(grep -c '"event":"worker_started"' "$tmp/run/events.jsonl") == 2 ]] ||
  fail "events: $(cat "$tmp/run/events.jsonl")"
echo "run_test: cohort run: $(grep done: "$tmp/run/logs/rank-0.log")"

# torchrun's own rendezvous on a free loopback port (--standalone would use localhost:29400, a
# fixed port). Its agent also looks up "localhost" whatever the endpoint, so on a machine that does
# not resolve that name (a bare debootstrap root has no /etc/hosts) torchrun cannot run at all.
if ! getent hosts localhost >/dev/null; then
  echo "run_test: torchrun: skipped: this machine does not resolve localhost, which torchrun's agent needs"
elif ! getent hosts "$(hostname)" >/dev/null; then
  # torchrun's agent gives its workers this machine's name as the master address.
  echo "run_test: torchrun: skipped: this machine does not resolve its own name, $(hostname)"
else
  port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  /usr/bin/python3 -m torch.distributed.run --nnodes 1 --rdzv_backend c10d \
    --rdzv_endpoint "127.0.0.1:$port" --nproc_per_node 2 --redirects 1 --tee 1 \
    --log_dir "$tmp/torchrun" "$SCRIPT" --backend cohort --max-steps 30 >"$tmp/torchrun.out" 2>&1 ||
    { cat "$tmp/torchrun.out"; fail "torchrun failed"; }
  grep -q "done: 30 steps on 2 workers with cohort" "$tmp/torchrun.out" || fail "torchrun output"
  echo "run_test: torchrun: ok"
fi

# A worker that fails while the other waits for a signal: the launcher must stop that one.
cat >"$tmp/fails.py" <<'PY'
import signal, sys
import torch.distributed as dist
import cohort
dist.init_process_group("cohort")
dist.barrier()
if dist.get_rank() == 1:
    sys.exit(3)
signal.pause()  # until the launcher stops this rank
PY
if "$COHORT" run --workers 2 --run-dir "$tmp/fails" "$tmp/fails.py" >"$tmp/fails.out" 2>&1; then
  fail "a failing worker did not fail the job"
fi
grep -q "lost rank 1 (host .*): exited with code 3" "$tmp/fails.out" || { cat "$tmp/fails.out"; fail "no rank named"; }
grep -q '"status": "failed"' "$tmp/fails/summary.json" || fail "summary of the failed job"
grep -q '"0": "killed by signal 15' "$tmp/fails/summary.json" ||
  fail "rank 0 was not stopped: $(cat "$tmp/fails/summary.json")"
echo "run_test: a failed worker ends the job, named"
