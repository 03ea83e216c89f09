#!/usr/bin/env bash
# An unchanged torchrun-style DDP script (examples/python/train_ddp.py) started three ways:
# `cohort run --workers 2 SCRIPT` (run directory, logs, events, summary), Debian's torchrun
# (env:// rendezvous through torchrun's own agent store), and `cohort run` with a worker that
# fails (the job fails, naming the rank, and stops the others). Then `cohort run --python PATH`
# (the workers run under that interpreter, with torchrun's variables), and a job file with
# `debug: {check_collectives: true}` whose ranks disagree on an all_reduce's shape (the job fails
# with Cohort's mismatch error naming both ranks and both shapes).
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

# --python PATH: a wrapper that records each process it starts (exec keeps the pid), so a worker
# whose pid is not in the record did not run under it. The workers check torchrun's variables.
cat >"$tmp/python-wrapper" <<SH
#!/bin/sh
echo "\$\$" >>"$tmp/wrapper-pids"
exec /usr/bin/python3 "\$@"
SH
chmod +x "$tmp/python-wrapper"
cat >"$tmp/env.py" <<'PY'
import os, socket, sys
import torch
import torch.distributed as dist
import cohort
env = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                      "MASTER_ADDR", "MASTER_PORT")}
print(f"pid {os.getpid()} args {sys.argv[1:]} env {env}", flush=True)
print(f"cpus {sorted(os.sched_getaffinity(0))} host_cpus {os.environ.get('COHORT_HOST_CPUS')}",
      flush=True)
assert None not in env.values(), env
assert env["WORLD_SIZE"] == "2" and env["LOCAL_WORLD_SIZE"] == "2", env
assert env["RANK"] in ("0", "1") and env["LOCAL_RANK"] == env["RANK"], env  # one host
assert 0 < int(env["MASTER_PORT"]) < 65536 and socket.getaddrinfo(env["MASTER_ADDR"], None), env
dist.init_process_group("cohort")  # env://, from those variables
assert (dist.get_rank(), dist.get_world_size()) == (int(env["RANK"]), 2)
ranks = [torch.zeros(1, dtype=torch.int64) for _ in range(2)]
dist.all_gather(ranks, torch.tensor([int(env["LOCAL_RANK"])]))
assert [int(r) for r in ranks] == [0, 1], ranks  # each local rank once
dist.destroy_process_group()
print("env ok", flush=True)
PY
"$COHORT" run --workers 2 --python "$tmp/python-wrapper" --run-dir "$tmp/env" "$tmp/env.py" x y \
  >"$tmp/env.out" 2>&1 || { cat "$tmp/env.out" "$tmp"/env/logs/rank-*.log; fail "--python: the job failed"; }
[[ -s "$tmp/wrapper-pids" ]] || fail "--python: the interpreter given was not used"
for r in 0 1; do
  log=$tmp/env/logs/rank-$r.log
  grep -q "env ok" "$log" || fail "--python: rank $r's log: $(cat "$log")"
  grep -q "args \['x', 'y'\] env {'RANK': '$r', 'WORLD_SIZE': '2', 'LOCAL_RANK': '$r', 'LOCAL_WORLD_SIZE': '2'" "$log" ||
    fail "--python: rank $r's variables: $(cat "$log")"
  pid=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' "$log")
  grep -qx "$pid" "$tmp/wrapper-pids" ||
    fail "--python: rank $r (pid $pid) did not run under the wrapper (it started: $(cat "$tmp/wrapper-pids"))"
done
echo "run_test: --python: both workers ran under the interpreter given, with torchrun's variables"

# Each worker of a Python program is bound to its own share of the CPUs, as every local worker of
# `cohort run` is (base/cpu_binding.h: a contiguous block each), and told the host's CPU count;
# with --bind-to none it keeps every CPU this shell may use.
check_cpus() {  # check_cpus RUN_DIR auto|none
  /usr/bin/python3 - "$1" "$2" <<'PY'
import os, re, sys
run, bind = sys.argv[1:]
cpus = sorted(os.sched_getaffinity(0))
each, extra = divmod(len(cpus), 2)
for r in (0, 1):
    log = open(f"{run}/logs/rank-{r}.log").read()
    m = re.search(r"^cpus \[([0-9, ]*)\] host_cpus (\S+)$", log, re.M)
    assert m, f"rank {r}'s log has no cpus line: {log}"
    got, host = [int(c) for c in m.group(1).split(",")], m.group(2)
    if bind == "auto" and len(cpus) >= 2:
        begin = r * each + min(r, extra)
        want = cpus[begin:begin + each + (1 if r < extra else 0)]
        assert (got, host) == (want, str(len(cpus))), f"rank {r}: cpus {got} host {host}, want {want}"
    else:
        assert (got, host) == (cpus, "None"), f"rank {r} ({bind}): cpus {got} host {host}"
PY
}
check_cpus "$tmp/env" auto || fail "--bind-to auto (the default): a Python worker was not bound to its share"
"$COHORT" run --workers 2 --bind-to none --run-dir "$tmp/unbound" "$tmp/env.py" \
  >"$tmp/unbound.out" 2>&1 || { cat "$tmp/unbound.out"; fail "--bind-to none: the job failed"; }
check_cpus "$tmp/unbound" none || fail "--bind-to none: a Python worker was bound"
echo "run_test: each Python worker runs on its own share of the CPUs; --bind-to none leaves them all"

# debug.check_collectives from a job file: ranks that disagree on a shape fail the job with
# Cohort's mismatch error (unchecked, the same job fails with a different error: a byte count).
cat >"$tmp/mismatch.py" <<'PY'
import torch
import torch.distributed as dist
import cohort
dist.init_process_group("cohort")
t = torch.ones(3)
dist.all_reduce(t)  # allreduce #1: the same on both ranks
assert t.tolist() == [2.0] * 3, t
dist.all_reduce(torch.zeros(4 + dist.get_rank()))  # allreduce #2: 4 elements on rank 0, 5 on 1
print("the mismatched all_reduce returned", flush=True)
PY
printf 'name: mismatch\nworkers: 2\nprogram: {python: %s}\ndebug: {check_collectives: true}\ncomm: {timeout_s: 20}\n' \
  "$tmp/mismatch.py" >"$tmp/mismatch.yaml"
if "$COHORT" run "$tmp/mismatch.yaml" --run-dir "$tmp/mismatch" >"$tmp/mismatch.out" 2>&1; then
  cat "$tmp/mismatch.out"; fail "check_collectives: ranks that disagree on a shape did not fail the job"
fi
for want in "job failed: rank [01]: ProtocolError: collective mismatch at sequence number 2" \
            "rank 0 called allreduce #2 of 4 f32" "rank 1 called allreduce #2 of 5 f32"; do
  grep -q "$want" "$tmp/mismatch.out" || { cat "$tmp/mismatch.out"; fail "check_collectives: no '$want'"; }
done
grep -q '"status": "failed"' "$tmp/mismatch/summary.json" &&
  grep -q '"error": ".*collective mismatch' "$tmp/mismatch/summary.json" ||
  fail "check_collectives: summary: $(cat "$tmp/mismatch/summary.json")"
! grep -q "mismatched all_reduce returned" "$tmp"/mismatch/logs/rank-*.log ||
  fail "check_collectives: a rank went past the mismatched all_reduce"
echo "run_test: check_collectives from the job file names the mismatch: $(grep -o 'rank 0 called allreduce #2 of [^,]*' "$tmp/mismatch.out" | head -1)"
