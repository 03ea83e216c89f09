#!/usr/bin/env bash
# Scaling benchmarks, written into BENCHMARKS.md between their markers (a re-run replaces them).
#
#   scripts/bench-scale.sh            # or: make bench-scale (needs root: network namespaces)
#
# Scale on this host: 8 to 512 ranks as processes (oversubscribed, as every peer is), 4 KiB and
# 1 MiB: communicator setup time (the slowest rank's, from its start to a communicator that can
# run collectives: Cohort's store connection and create(), Gloo's FileStore and connectFullMesh,
# Open MPI's MPI_Init) and allreduce time, for Cohort (auto: shared memory), Gloo (ring and
# halving-doubling) and Open MPI (tcp and vader), each run bounded by BENCH_SCALE_TIMEOUT_S.
#
# Hierarchical against flat: on the emulated cluster (scripts/netcluster.sh, links limited with
# tc tbf), H hosts x L ranks per host (the ranks of a host share its namespace, so they talk over
# shared memory; hosts talk over their links), Cohort's hierarchical allreduce against its flat
# ring over the same ranks, placed host by host, so that the ring crosses each host link twice.
# Each host link then carries 2(n-1)/n of the buffer each way under the ring, 2(H-1)/H under the
# hierarchical allreduce (n = H x L ranks): the cost model predicts the ratio of their times.
#
# Environment: BENCH_SCALE_RANKS ("8 32 128 512"), BENCH_SCALE_TIMEOUT_S (120), BENCH_SCALE_ITERS
# (10), BENCH_SCALE_ROUNDS (3, interleaved: every library at every size, then again; each cell
# keeps its best median, as the hierarchical part does), BENCH_PARTS ("scale hierarchical"), BENCH_LAYOUTS ("2x2 2x4", HOSTSxRANKS), BENCH_RATE (1gbit), BENCH_SIZES
# (1M,4M,16M,64M), BENCH_ROUNDS (2, interleaved; each configuration keeps its best median),
# BENCH_BUILD_DIR (build/bench-compare), BENCH_OUTPUT (BENCHMARKS.md), BENCH_REPORT_ONLY=1.
# Every configuration first waits for a quiet machine (scripts/lib/quiet.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BENCH_BUILD_DIR:-$ROOT/build/bench-compare}
LAYOUTS=${BENCH_LAYOUTS:-2x2 2x4}
RATE=${BENCH_RATE:-1gbit}
SIZES=${BENCH_SIZES:-1M,4M,16M,64M}
ROUNDS=${BENCH_ROUNDS:-2}
OUTPUT=${BENCH_OUTPUT:-$ROOT/BENCHMARKS.md}
RESULTS=$BUILD/hierarchical-results.jsonl
SCALE_RESULTS=$BUILD/scale-results.jsonl
SCALE_RANKS=${BENCH_SCALE_RANKS:-8 32 128 512}
SCALE_TIMEOUT=${BENCH_SCALE_TIMEOUT_S:-120}
SCALE_ITERS=${BENCH_SCALE_ITERS:-10}
SCALE_ROUNDS=${BENCH_SCALE_ROUNDS:-3}
PARTS=${BENCH_PARTS:-scale hierarchical}
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca pml ob1)
NC=$ROOT/scripts/netcluster.sh
export QUIET_LOG=$BUILD/hierarchical-load.tsv
# shellcheck source=lib/quiet.sh
source "$ROOT/scripts/lib/quiet.sh"

build() {
  echo "bench-scale: building in $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOHORT_WITH_TORCH=OFF \
    -DCOHORT_BUILD_TESTS=OFF -DCOHORT_BUILD_BENCH=ON >/dev/null
  cmake --build "$BUILD" -j "$(nproc)" --target cohort gloo_allreduce mpi_allreduce
}

# One run of a library at one size of world; a run that fails or outlasts the bound leaves a
# {"library":..., "failed":"why"} line instead.
scale_run() {  # LIBRARY TRANSPORT RANKS CMD...
  local lib=$1 transport=$2 n=$3 out rc
  shift 3
  wait_quiet "$lib $transport $n"
  echo "bench-scale: $lib $transport, $n ranks"
  rc=0
  out=$(timeout -s KILL "$SCALE_TIMEOUT" "$@" 2>"$BUILD/scale-$lib-$transport-$n.err") || rc=$?
  grep '^{' <<<"$out" >>"$SCALE_RESULTS" || true
  if ((rc != 0)); then
    local why="exit status $rc"
    ((rc == 137)) && why="did not finish within ${SCALE_TIMEOUT} s"
    printf '{"library":"%s","transport":"%s","ranks":%d,"failed":"%s"}\n' "$lib" "$transport" \
      "$n" "$why" >>"$SCALE_RESULTS"
  fi
}

measure_scale() {
  local n round common=(--sizes 4K,1M --iters "$SCALE_ITERS" --warmup 2)
  local QUIET_LOG=$BUILD/scale-load.tsv  # wait_quiet's log for this part
  : >"$SCALE_RESULTS"
  : >"$QUIET_LOG"
  for ((round = 1; round <= SCALE_ROUNDS; round++)); do
    echo "bench-scale: round $round/$SCALE_ROUNDS"
    for n in $SCALE_RANKS; do
      scale_run cohort shm "$n" "$BUILD/cohort" bench allreduce --ranks "$n" "${common[@]}" \
        --timeout $((SCALE_TIMEOUT * 1000)) --json
      scale_run gloo tcp "$n" "$BUILD/bench/gloo_allreduce" --ranks "$n" "${common[@]}" \
        --algo ring,halving_doubling
      scale_run openmpi tcp "$n" "${MPIRUN[@]}" -np "$n" --mca btl tcp,self \
        --mca btl_tcp_if_include lo "$BUILD/bench/mpi_allreduce" "${common[@]}" --transport tcp
      scale_run openmpi vader "$n" "${MPIRUN[@]}" -np "$n" --mca btl vader,self \
        "$BUILD/bench/mpi_allreduce" "${common[@]}" --transport vader
    done
  done
  date -u '+%Y-%m-%d %H:%M UTC' >"$BUILD/scale-date"
}

# Inside a cluster of the largest host count: every layout uses its first H worker nodes.
measure_in_cluster() {
  local round layout hosts per list h algo
  for ((round = 1; round <= ROUNDS; round++)); do
    for layout in $LAYOUTS; do
      hosts=${layout%x*} per=${layout#*x}
      list=""
      for ((h = 0; h < hosts; h++)); do
        list+="${list:+,}cnc-$NETCLUSTER_ID-w$h@$("$NC" addr "$h")"
      done
      for algo in ring hierarchical; do
        echo "bench-scale: round $round/$ROUNDS, $layout, $algo"
        wait_quiet "$algo $layout r$round"
        "$NC" exec "$NETCLUSTER_ID" c "$BUILD/cohort" bench allreduce --ranks $((hosts * per)) \
          --hosts "$list" --bind "$("$NC" addr c)" --algo "$algo" --sizes "$SIZES" --json |
          sed "s/^{/{\"layout\":\"$layout\",\"rate\":\"$RATE\",/" >>"$RESULTS"
      done
    done
  done
}

measure() {
  local started most=1 layout
  for layout in $LAYOUTS; do ((${layout%x*} > most)) && most=${layout%x*}; done
  started=$(date +%s)
  : >"$RESULTS"
  : >"$QUIET_LOG"
  export -f measure_in_cluster wait_quiet
  export BUILD LAYOUTS RATE SIZES ROUNDS RESULTS NC
  "$NC" run "$most" --rate "$RATE" -- bash -c measure_in_cluster
  echo $(($(date +%s) - started)) >"$BUILD/hierarchical-elapsed"
  date -u '+%Y-%m-%d %H:%M UTC' >"$BUILD/hierarchical-date"
}

if [[ ${BENCH_REPORT_ONLY:-0} != 1 ]]; then
  build
  if [[ " $PARTS " == *" scale "* ]]; then
    measure_scale
  fi
  if [[ " $PARTS " == *" hierarchical "* ]]; then
    [[ $(id -u) == 0 ]] || { echo "bench-scale: needs root (network namespaces)" >&2; exit 2; }
    measure
  fi
fi
if [[ -s $SCALE_RESULTS ]]; then
  PYTHONPATH=$ROOT/scripts/lib python3 "$ROOT/scripts/lib/scale_report.py" "$SCALE_RESULTS" \
    "$OUTPUT" "$(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1))" \
    "scripts/bench-scale.sh (BENCH_SCALE_RANKS=\"$SCALE_RANKS\" BENCH_SCALE_ITERS=$SCALE_ITERS \
BENCH_SCALE_ROUNDS=$SCALE_ROUNDS BENCH_SCALE_TIMEOUT_S=$SCALE_TIMEOUT)" "$(cat "$BUILD/scale-date")" "$BUILD/scale-load.tsv"
fi
[[ -s $RESULTS ]] || exit 0

MACHINE="$(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), Linux $(uname -r)"
COMMAND="scripts/bench-scale.sh (BENCH_LAYOUTS=\"$LAYOUTS\" BENCH_RATE=$RATE BENCH_SIZES=$SIZES \
BENCH_ROUNDS=$ROUNDS)"

PYTHONPATH=$ROOT/scripts/lib python3 - "$RESULTS" "$OUTPUT" "$MACHINE" "$COMMAND" \
  "$(cat "$BUILD/hierarchical-elapsed")" "$(cat "$BUILD/hierarchical-date")" "$QUIET_LOG" <<'EOF'
import json, re, sys
from quiet_report import busy_labels, load_note
from report_text import human, write_section

results, output, machine, command, elapsed, date, quiet_log = sys.argv[1:8]
BEGIN, END = "<!-- hierarchical:begin -->", "<!-- hierarchical:end -->"

best = {}
for line in open(results):
    r = json.loads(line)
    key = (r["layout"], r["algorithm"], r["bytes"])
    if key not in best or r["time_us"] < best[key]["time_us"]:
        best[key] = r
busy = {re.sub(r" r\d+$", "", label) for label in busy_labels(quiet_log)}
layouts = sorted({k[0] for k in best}, key=lambda l: [int(x) for x in l.split("x")])
sizes = sorted({k[2] for k in best})
rate = next(iter(best.values()))["rate"] if best else "?"

TARGET = {"2x2": 1.3, "2x4": 1.5}
out = [BEGIN, "", "## Hierarchical allreduce against the flat ring (emulated cluster)", "",
       f"- Command: `{command}` (`make bench-scale`)",
       f"- Machine: {machine}; every host a network namespace of `scripts/netcluster.sh`, "
       f"links at {rate} each way (tc tbf on both ends); the ranks of a host share its namespace "
       "and talk over shared memory.",
       f"- Date: {date}; measurements took {elapsed} s. {load_note(quiet_log)}",
       "- `cohort bench allreduce --hosts ... --algo ring|hierarchical`, float32 sum, ranks placed "
       "host by host (the ring crosses each host link twice); each cell the best over rounds of "
       "the median time of the slowest rank.",
       "- Model: per direction, each host link carries 2(n-1)/n·S under the ring and "
       "2(H-1)/H·S under the hierarchical allreduce, so on a link-bound run the time ratio "
       "ring / hierarchical should be (n-1)/n · H/(H-1): 1.5 for 2 × 2, 1.75 for 2 × 4.",
       "- Targets: hierarchical ≥ 1.3× the ring at 16 MiB and above with 2 × 2, ≥ 1.5× with "
       "2 × 4, and within 15% of the model.", "",
       "| hosts × ranks | size | ring ms | hierarchical ms | ring busbw | hierarchical busbw "
       "| speed-up | model | measured / model | target |",
       "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
for layout in layouts:
    H, L = (int(x) for x in layout.split("x"))
    n = H * L
    model = (n - 1) / n * H / (H - 1)
    for b in sizes:
        ring, hier = best.get((layout, "ring", b)), best.get((layout, "hierarchical", b))
        if not (ring and hier):
            continue
        speed = ring["time_us"] / hier["time_us"]
        noisy = any(f"{a} {layout}" in busy for a in ("ring", "hierarchical"))
        verdict = "–"
        if b >= 16 << 20 and layout in TARGET:
            ok = speed >= TARGET[layout] and abs(speed / model - 1) <= 0.15
            verdict = ("met" if ok else "MISSED") + (" (busy)" if noisy else "")
        out.append(f"| {H} × {L} | {human(b)} | {ring['time_us'] / 1e3:.1f} "
                   f"| {hier['time_us'] / 1e3:.1f} | {ring['busbw_gbps']:.3f} "
                   f"| {hier['busbw_gbps']:.3f} | {speed:.2f} | {model:.2f} "
                   f"| {speed / model:.2f} | {verdict} |")
out += ["", END]
print(write_section(output, BEGIN, END, out))
EOF
