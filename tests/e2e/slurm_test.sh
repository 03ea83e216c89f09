#!/usr/bin/env bash
# Cohort through a real Slurm: slurmctld, slurmd and munged from Debian's packages, as a cluster of
# this one node configured by this script in a temporary directory (its own munge key and socket,
# its own ports) and torn down afterwards, whatever happens.
#
#   slurm_test.sh COHORT
#
#   1. `cohort run JOB --launcher slurm` outside an allocation submits the job with sbatch; its 4
#      workers, a job step each, train it to completion.
#   2. One worker's step killed with `scancel --signal=KILL JOB.STEP`: the launcher starts a new
#      step, which joins as a replacement; the job completes at full size with every sample of the
#      epoch trained on once.
#   3. `scancel JOB` ends a running job: the launcher records it as cancelled and no process of it
#      is left, also when the workers' steps die before the launcher's own SIGTERM arrives (held
#      back with gdb, where gdb is installed).
#
# Exit 77 (ctest: skipped) without root, without Slurm's and munge's programs, or without the cgroup
# file system (slurmd 22.05 will not start without it: a chroot that does not mount it).
set -uo pipefail
COHORT=${1:?usage: slurm_test.sh COHORT}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
DEADLINE=$((SECONDS + 540))  # below the ctest TIMEOUT: whatever hangs fails here first

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*"
  for f in "$D"/log/*.log "$D"/runs/*/slurm-*.out; do
    [[ -f $f ]] && echo "--- $f" && tail -20 "$f"
  done
  exit 1
}
((EUID == 0)) || skip "needs root to run Slurm's daemons"
for p in slurmctld slurmd munged mungekey sbatch srun scontrol squeue scancel sinfo; do
  command -v "$p" >/dev/null || skip "needs $p (Debian packages slurmctld, slurmd, slurm-client, munge)"
done

mountpoint -q /sys/fs/cgroup || skip "slurmd needs the cgroup file system at /sys/fs/cgroup"

D=$(mktemp -d /tmp/cohort-slurm-test-XXXXXX)
export SLURM_CONF=$D/slurm.conf
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) && [[ ${s#Z} == "$s" ]]; }
stop_slurm() {
  # Jobs first: `scontrol shutdown` leaves running steps behind.
  scancel --full --signal=KILL --user=root 2>/dev/null
  scancel --user=root 2>/dev/null
  for _ in $(seq 100); do
    [[ -z $(squeue -h 2>/dev/null) ]] && ! ls "$D"/spool/"$(hostname -s)"_* >/dev/null 2>&1 && break
    sleep 0.1
  done
  local pids
  pids=$(cat "$D/slurmctld.pid" "$D/slurmd.pid" 2>/dev/null)
  scontrol shutdown 2>/dev/null
  for _ in $(seq 100); do
    local up=
    for p in $pids; do alive "$p" && up=1; done
    [[ -z $up ]] && break
    sleep 0.1
  done
  for p in $pids; do alive "$p" && kill -9 "$p"; done
  local m
  m=$(cat "$D/munge/munged.pid" 2>/dev/null) && kill "$m" 2>/dev/null
  pkill -9 -f "$D" 2>/dev/null
  rm -rf "$D"
}
trap stop_slurm EXIT

# --- a cluster of this node -----------------------------------------------------------------
H=$(hostname -s)
mkdir -p "$D"/{munge,state,spool,log,runs}
chmod 755 "$D" "$D/munge"  # munged: the socket's directory must be searchable, not writable
mungekey -c -k "$D/munge/munge.key" -b 1024 || fail "mungekey"
munged --key-file="$D/munge/munge.key" --socket="$D/munge/munge.sock" \
  --pid-file="$D/munge/munged.pid" --log-file="$D/log/munged.log" \
  --seed-file="$D/munge/munged.seed" || fail "munged did not start"
read -r P1 P2 < <(/usr/bin/python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
NODE=$(slurmd -C | head -1 | sed "s/^NodeName=[^ ]*/NodeName=$H NodeAddr=127.0.0.1/")
cat >"$SLURM_CONF" <<CONF
ClusterName=cohort-test
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.sock
SlurmctldPort=$P1
SlurmdPort=$P2
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MailProg=/bin/true
KillWait=5
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
$NODE State=UNKNOWN
PartitionName=test Nodes=$H Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
slurmctld || fail "slurmctld did not start"
slurmd || fail "slurmd did not start"
for _ in $(seq 300); do
  [[ $(sinfo -h -o %T 2>/dev/null) == idle ]] && break
  sleep 0.1
done
[[ $(sinfo -h -o %T) == idle ]] || fail "the node never became idle: $(sinfo -N -l)"

# --- helpers ----------------------------------------------------------------------------------
JOB=$ROOT/examples/fashion-mlp.yaml
# Submits `cohort run JOB ... --launcher slurm` (4 tasks on this 2-CPU node: --overcommit) and
# prints the Slurm job id.
submit() {
  local run=$1
  shift
  local out
  out=$("$COHORT" run "$JOB" --launcher slurm --run-dir "$run" --set workers=4 \
    --launcher-arg --overcommit "$@") || fail "submit: $out"
  echo "$out" | sed -n 's/^cohort: submitted Slurm job \([0-9]*\).*/\1/p'
}
wait_gone() {  # JOB: until Slurm no longer lists it
  while [[ -n $(squeue -h -j "$1" 2>/dev/null) ]]; do
    ((SECONDS < DEADLINE)) || fail "job $1 still in the queue: $(squeue -j "$1")"
    sleep 0.2
  done
}

# --- 1. a job of 4 workers, submitted -----------------------------------------------------------
RUN1=$D/runs/complete
J=$(submit "$RUN1" --set train.max_steps=60)
[[ -n $J ]] || fail "no job id from the submission"
wait_gone "$J"
[[ -f $RUN1/summary.json ]] || fail "no summary; $(cat "$RUN1"/slurm-*.out)"
[[ $(summary "$RUN1" status) == completed ]] || fail "job 1: $(cat "$RUN1/summary.json")"
[[ $(summary "$RUN1" world_size) == 4 ]] || fail "job 1 did not run 4 workers"
[[ $(summary "$RUN1" steps) == 60 ]] || fail "job 1 did not train 60 steps"
echo "PASS: a job of 4 workers through Slurm completed"

# --- 2. a step killed by Slurm is replaced ----------------------------------------------------
RUN2=$D/runs/replaced
J=$(submit "$RUN2" --set train.epochs=1 --set elastic.min_workers=2 \
  --set elastic.max_restarts=2 --set elastic.heartbeat_s=0.3 --set elastic.failure_timeout_s=2 \
  --set elastic.snapshot_every_steps=10 \
  --set "faults=[{kind: slow, rank: 0, at_step: 0, seconds: 0.03}]")
until (($(last_step "$RUN2") >= 40)); do
  ((SECONDS < DEADLINE)) || fail "job 2 never reached step 40"
  sleep 0.2
done
STEP=$(squeue -h -s -j "$J" -o "%i %j" | awk '$2 == "cohort-rank-1" {print $1}')
[[ -n $STEP ]] || fail "no step for rank 1: $(squeue -s -j "$J")"
scancel --signal=KILL "$STEP" || fail "scancel --signal=KILL $STEP"
wait_gone "$J"
[[ $(summary "$RUN2" status) == completed ]] || fail "job 2: $(cat "$RUN2/summary.json")"
[[ $(summary "$RUN2" final_world_size) == 4 ]] || fail "job 2 did not end at full size"
(($(summary "$RUN2" restarts) >= 1)) || fail "job 2 started no replacement"
/usr/bin/python3 - "$RUN2/summary.json" <<'PY' || fail "job 2 lost or repeated samples"
import json, sys
s = json.load(open(sys.argv[1]))
n = 60000
want = [n, n * (n - 1) / 2, (n - 1) * n * (2 * n - 1) / 6]
got = [[e["samples"], e["id_sum"], e["id_sq_sum"]] for e in s["epoch_samples"]]
sys.exit(0 if got == [want] else 1)
PY
grep -q '"replaces"' "$RUN2/events.jsonl" || fail "no replacement in job 2's events"
echo "PASS: a worker's step killed by Slurm was replaced; every sample once"

# --- 3. scancel ends the job and leaves nothing -------------------------------------------------
RUN3=$D/runs/cancelled
J=$(submit "$RUN3" --set train.epochs=50)
until (($(last_step "$RUN3") >= 20)); do
  ((SECONDS < DEADLINE)) || fail "job 3 never reached step 20"
  sleep 0.2
done
# The launcher's command line names the run directory, the workers' the coordinator's port.
PORT=$(/usr/bin/python3 -c 'import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e.get("event") == "job_started": print(e["coordinator"].rsplit(":", 1)[1])' \
  "$RUN3/events.jsonl")
[[ -n $PORT ]] || fail "no coordinator in job 3's events"
[[ -n $(pgrep -f "worker --join [^ ]*:$PORT") ]] || fail "job 3's workers are not where expected"
# Slurm signals the workers' steps and the launcher at once. With gdb here, the launcher's own
# SIGTERM is held back (discarded by the debugger it runs under) so that the workers' deaths come
# first: the launcher must still see a cancelled job, not a failed one, from Slurm's job state.
LAUNCHER=$(pgrep -f "run-dir $RUN3" | head -1)
HELD=
if command -v gdb >/dev/null && [[ -n $LAUNCHER ]]; then
  timeout 60 gdb -q -p "$LAUNCHER" -batch -ex "handle all nostop noprint pass" \
    -ex "handle SIGTERM nostop noprint nopass" \
    -ex "shell scancel $J" -ex continue >"$D/log/gdb.log" 2>&1
  # Held only if gdb ran the launcher to its end (where ptrace is not allowed it held nothing
  # back: the plain case then).
  grep -q "^\[Inferior 1 (process $LAUNCHER) exited" "$D/log/gdb.log" && HELD=1
fi
scancel "$J" 2>/dev/null  # (again, or for the first time without gdb)
wait_gone "$J"
left() { pgrep -af "$RUN3|worker --join [^ ]*:$PORT "; }
for _ in $(seq 50); do
  [[ -z $(left) ]] && break
  sleep 0.2
done
[[ -z $(left) ]] || fail "left behind: $(left)"
[[ $(summary "$RUN3" status) == cancelled ]] || fail "job 3: $(cat "$RUN3/summary.json" 2>&1)"
if [[ -n $HELD ]]; then
  summary "$RUN3" error | grep -q "Slurm is ending job $J" ||
    fail "job 3 (its launcher's SIGTERM held back): $(cat "$RUN3/summary.json" 2>&1)"
fi
echo "PASS: scancel ended the job and left no process"
