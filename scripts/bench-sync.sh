#!/usr/bin/env bash
# Synchronization modes on the emulated cluster: Cohort's allreduce, local SGD, ssp and async
# (parameter servers) against PyTorch DDP (Gloo) and PyTorch's post-local SGD, time to accuracy
# and accuracy after the epochs.
# Writes the sync section of BENCHMARKS.md (between its markers).
#
#   scripts/bench-sync.sh        # or: make bench-sync (needs root)
#
# Every arm trains the CNN on Fashion-MNIST (examples/fashion-cnn.yaml; bench/pytorch_ddp.py has
# the same model), with the same seed, per-worker batch, learning rate (SGD, momentum 0.9) and
# period, one thread per worker, every worker in its own network namespace with its link limited
# to BENCH_RATE both ways (scripts/netcluster.sh). Each evaluates on the whole test set every
# BENCH_EVAL_EVERY steps (a multiple of the period, so that Cohort's evaluations fall on its
# averages and add none) and trains BENCH_EPOCHS epochs, or until BENCH_CAP_S of wall time.
# Time to accuracy = training time up to the first evaluation with test accuracy >= BENCH_TARGET,
# evaluations excluded (Cohort: that metrics.jsonl record's train_seconds; PyTorch: the same,
# measured by the script). Link bytes per step are counted from outside the same way for every
# arm: the tx counter of each worker's interface over the run / steps trained, mean over workers.
# Cohort's share of time waiting is summary.json comm_seconds / train_seconds (mean over ranks).
#
# Parameter servers (cohort:ssp, cohort:async) run BENCH_SERVERS of them, each in a namespace of its
# own with a link at the workers' rate (nodes BENCH_WORKERS .. BENCH_WORKERS + BENCH_SERVERS - 1).
#
# Environment: BENCH_ARMS ("cohort:allreduce cohort:local_sgd pytorch:ddp
# pytorch:post_local_sgd"; a Cohort arm may end in +balance for sync.balance: auto, an async or
# ssp arm in +inverse (sync.lr_scale: inverse_staleness) or +dc (sync.delay_compensation:
# BENCH_DC, 0.04)) or +nofresh (sync.fresh_wait: 0: only the staleness bound waits) and/or +nomw
# (sync.read_my_writes: false), e.g. cohort:ssp+nofresh+nomw, BENCH_SERVERS (4), BENCH_STALENESS (3), BENCH_RATE (100mbit), BENCH_WORKERS (4), BENCH_BATCH (16), BENCH_LR
# (0.025), BENCH_PERIOD (8), BENCH_WARMUP (local SGD's synchronous steps, 0), BENCH_TARGET
# (0.85), BENCH_EVAL_EVERY (48), BENCH_EPOCHS (2), BENCH_CAP_S (900), BENCH_BUILD_DIR
# (build/release), BENCH_OUTPUT (BENCHMARKS.md), BENCH_SKIP_BUILD=1, BENCH_KEEP=1 (keep earlier
# results and the load log; an arm run again in the same regime replaces its result), BENCH_REPORT_ONLY=1,
# BENCH_OUT_DIR (where runs and results go, build/release/bench-sync), BENCH_MARKER (the section of
# BENCHMARKS.md written: between <!-- MARKER:begin --> and <!-- MARKER:end -->, sync),
# BENCH_FAULTS (a straggler scenario for Cohort's arms: a YAML list for `faults:`, e.g.
# "[{kind: slow, rank: 3, factor: 2.5}]"; it is part of the regime; PyTorch's script has no
# fault injection, so its arms run only without one).
# Each arm first waits for a quiet machine (scripts/lib/quiet.sh); one that could not get one is
# marked busy and not used for a target. The default regime (bandwidth-bound: 100 Mbit/s, batch
# 16, 4 workers) takes about 25 minutes on 2 idle CPUs.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BENCH_BUILD_DIR:-$ROOT/build/release}
ARMS=${BENCH_ARMS:-cohort:allreduce cohort:local_sgd pytorch:ddp pytorch:post_local_sgd}
RATE=${BENCH_RATE:-100mbit}
N=${BENCH_WORKERS:-4}
BATCH=${BENCH_BATCH:-16}
LR=${BENCH_LR:-0.025}
PERIOD=${BENCH_PERIOD:-8}
WARMUP=${BENCH_WARMUP:-0}
TARGET=${BENCH_TARGET:-0.85}
EVAL_EVERY=${BENCH_EVAL_EVERY:-48}
EPOCHS=${BENCH_EPOCHS:-2}
CAP_S=${BENCH_CAP_S:-900}
OUTPUT=${BENCH_OUTPUT:-$ROOT/BENCHMARKS.md}
NC=$ROOT/scripts/netcluster.sh
PY=/usr/bin/python3
OUT=${BENCH_OUT_DIR:-$BUILD/bench-sync}
MARKER=${BENCH_MARKER:-sync}
RESULTS=$OUT/results.jsonl
FAULTS=${BENCH_FAULTS:-}
SERVERS=${BENCH_SERVERS:-4}
STALENESS=${BENCH_STALENESS:-3}
DC=${BENCH_DC:-0.04}
REGIME="$RATE $N $BATCH $LR $PERIOD $WARMUP ${FAULTS:-none}"
# The cluster's nodes: the workers, then the parameter servers when an arm has them.
NODES=$N
[[ ! $ARMS =~ cohort:(ssp|async) ]] || NODES=$((N + SERVERS))
export QUIET_LOG=$OUT/load.tsv
# shellcheck source=lib/quiet.sh
source "$ROOT/scripts/lib/quiet.sh"
# shellcheck source=lib/netbench.sh
source "$ROOT/scripts/lib/netbench.sh"

((EUID == 0)) || { echo "bench-sync: needs root (network namespaces)" >&2; exit 2; }
mkdir -p "$OUT"
if [[ ${BENCH_REPORT_ONLY:-0} == 1 ]]; then
  :
elif [[ ${BENCH_KEEP:-0} == 1 && -f $RESULTS ]]; then
  "$PY" - "$RESULTS" "$REGIME" "$ARMS" <<'PY'
import json, sys
path, regime, arms = sys.argv[1], sys.argv[2], sys.argv[3].split()
rows = [json.loads(l) for l in open(path) if l.strip()]
keep = [r for r in rows if not (r["regime"] == regime and r["arm"] in arms)]
open(path, "w").write("".join(json.dumps(r) + "\n" for r in keep))
PY
else
  : >"$RESULTS"
fi
[[ ${BENCH_REPORT_ONLY:-0} == 1 || ${BENCH_KEEP:-0} == 1 ]] || : >"$QUIET_LOG"
if [[ ${BENCH_SKIP_BUILD:-0} != 1 && ${BENCH_REPORT_ONLY:-0} != 1 ]]; then
  cmake --build "$BUILD" --target cohort >/dev/null
fi
COHORT=$BUILD/cohort
TOKEN=$OUT/token
(umask 077 && echo "bench-sync-token-$$-0123456789abcdef" >"$TOKEN")

CLUSTER=
trap '[[ -z $CLUSTER ]] || "$NC" down "$CLUSTER"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
started=$(date +%s)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
port=29700

# ARM DIR BEFORE AFTER LOAD QUIET: one result line from the arm's output in DIR.
record() {
  "$PY" - "$@" "$REGIME" "$TARGET" "$N" <<'PY' >>"$RESULTS"
import json, os, sys, time
arm, d, before, after, load, quiet, regime, target, n = sys.argv[1:10]
target, n = float(target), int(n)
tx = [int(b) - int(a) for a, b in zip(before.split(), after.split())]
evals, steps, final, wait, stale = [], 0, None, None, None
if arm.startswith("cohort:"):
    if os.path.exists(d + "/run/metrics.jsonl"):
        for line in open(d + "/run/metrics.jsonl"):
            m = json.loads(line)
            steps = max(steps, m.get("step", 0))
            if "test_accuracy" in m:
                evals.append(m)
    if os.path.exists(d + "/run/summary.json"):
        s = json.load(open(d + "/run/summary.json"))
        ranks = s.get("per_rank", [])
        if ranks:
            steps = max(r["steps"] for r in ranks)
            final = s["test_accuracy"]
            wait = sum(r["comm_seconds"] / r["train_seconds"] for r in ranks) / len(ranks)
            if all("staleness" in r for r in ranks):
                stale = {"mean": sum(r["staleness"]["mean"] for r in ranks) / len(ranks),
                         "max": max(r["staleness"]["max"] for r in ranks)}
    if wait is None and os.path.isdir(d + "/run/steps"):
        # Stopped at the cap, no summary: the same figures from the per-rank step logs.
        shares, means, worst = [], [], 0
        for f in sorted(os.listdir(d + "/run/steps")):
            rows = [r for r in map(json.loads, open(d + "/run/steps/" + f)) if r["type"] == "step"]
            busy = sum(r["data_s"] + r["compute_s"] + r["sync_s"] for r in rows)
            if rows and busy > 0:
                shares.append(sum(r["sync_s"] for r in rows) / busy)
                lags = [r.get("staleness", -1) for r in rows]
                if min(lags) >= 0:
                    means.append(sum(lags) / len(lags))
                    worst = max(worst, max(lags))
        if shares:
            wait = sum(shares) / len(shares)
        if means and len(means) == len(shares):
            stale = {"mean": sum(means) / len(means), "max": worst}
else:
    for line in open(d + "/rank-0.txt"):
        if not line.startswith("{"):
            continue
        m = json.loads(line)
        steps = max(steps, m.get("step", 0), m.get("steps", 0))
        if m.get("event") == "eval":
            evals.append(m)
        if "samples_per_sec" in m:
            final = m["test_accuracy"]
hit = next((m for m in evals if m["test_accuracy"] >= target), None)
print(json.dumps({
    "arm": arm, "regime": regime, "reached": hit is not None,
    "seconds": hit["train_seconds"] if hit else None, "step": hit["step"] if hit else None,
    "final_accuracy": final, "best_accuracy": max([m["test_accuracy"] for m in evals], default=None),
    "steps": steps, "link_bytes_per_step": sum(tx) / n / max(steps, 1), "wait_share": wait,
    "staleness": stale,
    "load": float(load), "busy": quiet == "busy",
    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    "status": "completed" if final is not None else "stopped at the cap"}))
PY
}

run_cohort() {  # MODE[+balance|+inverse|+dc|+nofresh|+nomw...]
  local arm=$1 mode=${1%%+*} dir=$OUT/cohort-$1 coord r pids=() before load quiet sets=()
  local servers=0
  rm -rf "$dir" && mkdir -p "$dir"
  coord=$("$NC" addr c)
  port=$((port + 1))
  case $mode in
    local_sgd)
      sets=(--set sync.mode=local_sgd --set sync.period="$PERIOD" --set sync.warmup_steps="$WARMUP") ;;
    ssp) sets=(--set sync.mode=ssp --set sync.staleness="$STALENESS") servers=$SERVERS ;;
    async) sets=(--set sync.mode=async) servers=$SERVERS ;;
  esac
  ((servers == 0)) || sets+=(--set parameter_servers="$servers")
  [[ $arm != *+balance ]] || sets+=(--set sync.balance=auto)
  [[ $arm != *+inverse ]] || sets+=(--set sync.lr_scale=inverse_staleness)
  [[ $arm != *+dc ]] || sets+=(--set sync.delay_compensation="$DC")
  [[ $arm != *+nofresh* ]] || sets+=(--set sync.fresh_wait=0)
  [[ $arm != *+nomw* ]] || sets+=(--set sync.read_my_writes=false)
  [[ -z $FAULTS ]] || sets+=(--set "faults=$FAULTS")
  wait_quiet "cohort $arm"
  IFS=$'\t' read -r _ load _ quiet < <(tail -n 1 "$QUIET_LOG")
  before=$(tx_bytes "$N")
  "$NC" exec "$CLUSTER" c timeout -s KILL "$CAP_S" "$COHORT" run "$ROOT/examples/fashion-cnn.yaml" \
    --external-workers --bind "$coord" --port "$port" --token-file "$TOKEN" --run-dir "$dir/run" \
    --set workers="$N" --set threads_per_worker=1 --set train.epochs="$EPOCHS" \
    --set train.eval_every_steps="$EVAL_EVERY" --set checkpoint.every_steps=0 \
    --set train.batch_size="$BATCH" --set train.optimizer.lr="$LR" --set train.seed=0 \
    --set debug.bandwidth_probe_mb=0 "${sets[@]}" >"$dir/launcher.txt" 2>&1 &
  pids+=($!)
  for ((r = 0; r < servers; r++)); do
    "$NC" exec "$CLUSTER" "$((N + r))" timeout -s KILL "$CAP_S" "$COHORT" ps-server \
      --join "$coord:$port" --index "$r" --bind "$("$NC" addr "$((N + r))")" \
      --token-file "$TOKEN" >"$dir/server-$r.txt" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < N; r++)); do
    "$NC" exec "$CLUSTER" "$r" timeout -s KILL "$CAP_S" "$COHORT" worker --join "$coord:$port" \
      --rank "$r" --bind "$("$NC" addr "$r")" --token-file "$TOKEN" >"$dir/worker-$r.txt" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  record "cohort:$arm" "$dir" "$before" "$(tx_bytes "$N")" "$load" "$quiet"
}

run_torch() {  # ARM (ddp | post_local_sgd)
  if [[ -n $FAULTS ]]; then
    echo "bench-sync: pytorch:$1 skipped: its script cannot slow a worker (BENCH_FAULTS)" >&2
    return
  fi
  local arm=$1 dir=$OUT/pytorch-$1 r pids=() master before load quiet extra=()
  rm -rf "$dir" && mkdir -p "$dir"
  master=$("$NC" addr 0)
  port=$((port + 1))
  [[ $arm != post_local_sgd ]] || extra=(--post-local-sgd "$PERIOD" --local-sgd-warmup "$WARMUP")
  wait_quiet "pytorch $arm"
  IFS=$'\t' read -r _ load _ quiet < <(tail -n 1 "$QUIET_LOG")
  before=$(tx_bytes "$N")
  for ((r = 0; r < N; r++)); do
    "$NC" exec "$CLUSTER" "$r" env RANK="$r" WORLD_SIZE="$N" MASTER_ADDR="$master" \
      MASTER_PORT="$port" GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
      timeout -s KILL "$CAP_S" "$PY" "$ROOT/bench/pytorch_ddp.py" --model cnn --epochs "$EPOCHS" \
      --batch-size "$BATCH" --lr "$LR" --momentum 0.9 --seed 0 --threads 1 \
      --eval-every-steps "$EVAL_EVERY" --memory-format channels_last "${extra[@]}" \
      >"$dir/rank-$r.txt" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  record "pytorch:$arm" "$dir" "$before" "$(tx_bytes "$N")" "$load" "$quiet"
}

report() {
  BENCH_MARKER=$MARKER PYTHONPATH=$ROOT/scripts/lib "$PY" - "$RESULTS" "$OUTPUT" "$(($(date +%s) - started))" \
    "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" "$QUIET_LOG" "$TARGET" "$EVAL_EVERY" \
    "$EPOCHS" "$CAP_S" <<'PY'
import json, os, subprocess, sys, time
from quiet_report import load_note
from report_text import write_section
results, output, elapsed, load_before, load_after, quiet_log, target, every, epochs, cap = sys.argv[1:11]
marker = os.environ.get("BENCH_MARKER", "sync")
BEGIN, END = "<!-- %s:begin -->" % marker, "<!-- %s:end -->" % marker
rows = [json.loads(l) for l in open(results) if l.strip()]
cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True,
                     text=True).stdout.strip()
env = " ".join("%s=%s" % (k, os.environ[k]) for k in sorted(os.environ) if k.startswith("BENCH_"))
names = {"cohort:allreduce": "Cohort allreduce", "cohort:allreduce+balance":
         "Cohort allreduce, balance: auto", "cohort:local_sgd": "Cohort local_sgd",
         "cohort:local_sgd+balance": "Cohort local_sgd, balance: auto",
         "cohort:ssp": "Cohort ssp", "cohort:ssp+inverse": "Cohort ssp, inverse_staleness",
         "cohort:ssp+nofresh": "Cohort ssp, fresh_wait 0",
         "cohort:ssp+nomw": "Cohort ssp, read_my_writes false",
         "cohort:ssp+nofresh+nomw": "Cohort ssp, fresh_wait 0, read_my_writes false",
         "cohort:ssp+dc": "Cohort ssp, delay compensation", "cohort:async": "Cohort async",
         "cohort:async+inverse": "Cohort async, inverse_staleness",
         "cohort:async+dc": "Cohort async, delay compensation",
         "pytorch:ddp": "PyTorch DDP (Gloo)", "pytorch:post_local_sgd": "PyTorch post-local SGD"}
title = ("## Synchronization modes: allreduce, local SGD and parameter servers, Cohort vs PyTorch"
         if marker == "sync" else
         "## Synchronization modes: parameter servers (ssp, async) against allreduce")
lines = [BEGIN, title, "",
         "Command: `scripts/bench-sync.sh` (`make bench-sync`), each regime's settings in its "
         "section. Machine: %d CPUs (%s), Linux %s. "
         "Written %s; each arm's load average at its start is in its row." % (
             os.cpu_count(), cpu, os.uname().release,
             time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())),
         "",
         "Each worker in its own network namespace (`scripts/netcluster.sh`), its link limited to "
         "the regime's rate both ways with tc tbf. The CNN on Fashion-MNIST, SGD momentum 0.9, the "
         "same seed, per-worker batch, learning rate and period for every arm, one thread per "
         "worker; PyTorch is Debian's python3-torch 1.13 over Gloo (`bench/pytorch_ddp.py`, "
         "channels-last, its faster layout for the CNN on this CPU), its "
         "post-local SGD is `post_localSGD_hook` without gradient allreduce after the warm-up and "
         "`PostLocalSGDOptimizer` with `PeriodicModelAverager`. Every arm evaluates on the whole "
         "test set every %s steps and trains %s epochs (or %s s of wall time). *time to %s* = "
         "training time until the first evaluation at or above it, evaluations excluded; *final "
         "accuracy* = after the last step. Both local SGDs average after steps H, 2H, ... "
         "(PyTorch's averager with warmup_steps = H - 1, as its counter starts at its first call), "
         "so every evaluation sees an averaged model in both. *link bytes/step* = bytes each "
         "worker's interface sent over the run / steps, mean "
         "over workers. *waiting* = Cohort's comm_seconds / train_seconds, mean over ranks. "
         "ssp and async: %s parameter servers, each in a namespace of its own with a link at the "
         "workers' rate, staleness bound %s for ssp (a push's answer also waits up to 0.5 of the "
         "worker's step for that step to be complete, `sync.fresh_wait`, unless the arm says "
         "fresh_wait 0, and a worker adds to what it pulls its own steps the servers have not "
         "applied yet, `sync.read_my_writes`, unless the arm says read_my_writes false); their "
         "rank 0 evaluates while the others "
         "wait (that wait is not training time); *staleness* = how many steps the parameters of "
         "a step lagged it (its step minus the slowest worker's), mean over steps and ranks / "
         "max." % (every, epochs, cap, target, os.environ.get("BENCH_SERVERS", "4"),
                   os.environ.get("BENCH_STALENESS", "3")), "", load_note(quiet_log), ""]
# The settings besides the regime's that were not the defaults, for the command that reproduces it.
settings = "".join('%s="%s" ' % (k, os.environ[k]) for k in (
    "BENCH_ARMS", "BENCH_EVAL_EVERY", "BENCH_EPOCHS", "BENCH_CAP_S", "BENCH_TARGET",
    "BENCH_SERVERS", "BENCH_STALENESS", "BENCH_DC", "BENCH_MARKER") if k in os.environ)
for regime in sorted({r["regime"] for r in rows}):
    rate, n, batch, lr, period, warmup, faults = regime.split(" ", 6)
    sel = [r for r in rows if r["regime"] == regime]
    sel.sort(key=lambda r: list(names).index(r["arm"]) if r["arm"] in names else 99)
    base = next((r for r in sel if r["arm"] == "cohort:allreduce"), None)
    dates = sorted(r["date"] for r in sel)
    lines += ["### %s per link, %s workers, batch %s per worker, lr %s, period %s, warm-up %s%s"
              % (rate, n, batch, lr, period, warmup,
                 "" if faults == "none" else ", faults: `%s`" % faults), "",
              "Measured %s. Command: `%sBENCH_RATE=%s BENCH_WORKERS=%s BENCH_BATCH=%s BENCH_LR=%s "
              "BENCH_PERIOD=%s BENCH_WARMUP=%s%s make bench-sync`." % (
                  dates[0] if dates[0] == dates[-1] else "%s to %s" % (dates[0], dates[-1]),
                  settings, rate, n, batch, lr, period, warmup,
                  "" if faults == "none" else " BENCH_FAULTS='%s'" % faults), "",
              "| arm | time to %s (s) | at step | s/step | final accuracy | steps | "
              "link bytes/step | waiting | staleness | load | allreduce's time / this |" % target,
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sel:
        t = "%.1f" % r["seconds"] if r["reached"] else "not reached"
        ratio = ""
        if base and r is not base and r["reached"] and base["reached"]:
            ratio = "%.2f×" % (base["seconds"] / r["seconds"])
            if r["busy"] or base["busy"]:
                ratio += " (busy)"
        st = r.get("staleness")
        lines.append("| %s | %s | %s | %s | %s | %d | %s | %s | %s | %s | %s |" % (
            names.get(r["arm"], r["arm"]), t, r["step"] or "-",
            "%.3f" % (r["seconds"] / r["step"]) if r["reached"] else "-",
            "%.4f" % r["final_accuracy"] if r["final_accuracy"] is not None else "-", r["steps"],
            "{:,.0f}".format(r["link_bytes_per_step"]),
            "%.0f%%" % (100 * r["wait_share"]) if r["wait_share"] is not None else "",
            "%.2f / %d" % (st["mean"], st["max"]) if st else "",
            "%.1f (busy)" % r["load"] if r["busy"] else "%.1f" % r["load"], ratio))
    by = {r["arm"]: r for r in sel}
    local, plsgd = by.get("cohort:local_sgd"), by.get("pytorch:post_local_sgd")
    modes = [r for r in sel if r["arm"].startswith("cohort:") and r is not base and r["reached"]]
    if base and base["reached"] and modes:
        best = min(modes, key=lambda r: r["seconds"])
        ratio = base["seconds"] / best["seconds"]
        gap = None
        if base["final_accuracy"] is not None and best["final_accuracy"] is not None:
            gap = 100 * (base["final_accuracy"] - best["final_accuracy"])
        busy = base["busy"] or best["busy"]
        acc = ("?" if gap is None else "%.2f points below" % gap if gap >= 0
               else "%.2f points above" % -gap)
        best_text = "%s, %.2f× sooner, final accuracy %s allreduce's" % (
            names.get(best["arm"], best["arm"]), ratio, acc)
        ssps = [r for r in modes if r["arm"].startswith("cohort:ssp")]
        ssp = min(ssps, key=lambda r: r["seconds"]) if ssps else None
        def ssp_text(r):
            gap = (None if r["final_accuracy"] is None or base["final_accuracy"] is None
                   else 100 * (base["final_accuracy"] - r["final_accuracy"]))
            return "%s, %.2f× allreduce's time to %s, final accuracy %s" % (
                names.get(r["arm"], r["arm"]), base["seconds"] / r["seconds"], target,
                "?" if gap is None else "%.2f points %s allreduce's" % (
                    abs(gap), "below" if gap >= 0 else "above")), gap
        if "stragglers" in faults:
            if ssp:
                text, g = ssp_text(ssp)
                ok = base["seconds"] / ssp["seconds"] >= 1.3 and g is not None and g <= 0.5
                lines += ["", "Target (transient stragglers: ssp ≥ 1.3× sooner than allreduce, "
                          "final accuracy within 0.5 points): %s (%s). The best mode: %s." % (
                              text, "busy" if base["busy"] or ssp["busy"] else
                              "met" if ok else "not met", best_text)]
            else:
                lines += ["", "Target (transient stragglers: ssp ≥ 1.3× sooner): not judged, no "
                          "ssp arm reached %s; the best mode measured: %s." % (target, best_text)]
        elif faults == "none" and not rate.startswith("100mbit"):
            if ssp:
                text, g = ssp_text(ssp)
                ok = ssp["seconds"] <= 1.1 * base["seconds"]
                lines += ["", "Target (no straggler: ssp within 10%% of allreduce's time to %s): "
                          "%s (%s)." % (target, text, "busy" if base["busy"] or ssp["busy"] else
                                        "met" if ok else "not met")]
            else:
                lines += ["", "Target (no straggler: ssp within 10%% of allreduce's time): not "
                          "judged, no ssp arm reached %s; the best mode measured: %s." % (
                              target, best_text)]
        else:
            met = ratio >= 2 and gap is not None and gap <= 0.5
            lines += ["", "Target (%s: the best mode reaches %s ≥ 2× sooner than allreduce, final "
                      "accuracy within 0.5 points): %s (%s)." % (
                          "bandwidth-bound" if faults == "none" else "persistent straggler",
                          target, best_text, "busy" if busy else "met" if met else "not met")]
    if local and plsgd and local["reached"] and plsgd["reached"]:
        ratio = plsgd["seconds"] / local["seconds"]
        lines += ["", "Target (Cohort's local_sgd sooner than PyTorch's post-local SGD at the same "
                  "period): %.2f× (%s)." % (ratio, "busy" if local["busy"] or plsgd["busy"]
                                           else "met" if ratio > 1 else "not met")]
    lines.append("")
lines.append(END)
print(write_section(output, BEGIN, END, lines))
PY
}

if [[ ${BENCH_REPORT_ONLY:-0} == 1 ]]; then report; exit 0; fi

env=$("$NC" up "$NODES" --rate "$RATE" --owner $$)
CLUSTER=$(sed -n 's/^NETCLUSTER_ID=//p' <<<"$env")
for arm in $ARMS; do
  echo "bench-sync: $RATE, $N workers, batch $BATCH, faults ${FAULTS:-none}: $arm"
  case $arm in
    cohort:*) run_cohort "${arm#cohort:}" ;;
    pytorch:*) run_torch "${arm#pytorch:}" ;;
    *) echo "bench-sync: unknown arm $arm" >&2; exit 2 ;;
  esac
  tail -1 "$RESULTS"
  report >/dev/null
done
"$NC" down "$CLUSTER"
CLUSTER=
report
