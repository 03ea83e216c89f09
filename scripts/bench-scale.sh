#!/usr/bin/env bash
# Scaling benchmarks, written into BENCHMARKS.md between their markers (a re-run replaces them).
#
#   scripts/bench-scale.sh            # or: make bench-scale (needs root: network namespaces)
#
# Hierarchical against flat: on the emulated cluster (scripts/netcluster.sh, links limited with
# tc tbf), H hosts x L ranks per host (the ranks of a host share its namespace, so they talk over
# shared memory; hosts talk over their links), Cohort's hierarchical allreduce against its flat
# ring over the same ranks, placed host by host, so that the ring crosses each host link twice.
# Each host link then carries 2(n-1)/n of the buffer each way under the ring, 2(H-1)/H under the
# hierarchical allreduce (n = H x L ranks): the cost model predicts the ratio of their times.
#
# Environment: BENCH_LAYOUTS ("2x2 2x4", HOSTSxRANKS), BENCH_RATE (1gbit), BENCH_SIZES
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
NC=$ROOT/scripts/netcluster.sh
export QUIET_LOG=$BUILD/hierarchical-load.tsv
# shellcheck source=lib/quiet.sh
source "$ROOT/scripts/lib/quiet.sh"

build() {
  echo "bench-scale: building in $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOHORT_WITH_TORCH=OFF \
    -DCOHORT_BUILD_TESTS=OFF -DCOHORT_BUILD_BENCH=ON >/dev/null
  cmake --build "$BUILD" -j "$(nproc)" --target cohort
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
  [[ $(id -u) == 0 ]] || { echo "bench-scale: needs root (network namespaces)" >&2; exit 2; }
  build
  measure
fi

MACHINE="$(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), Linux $(uname -r)"
COMMAND="scripts/bench-scale.sh (BENCH_LAYOUTS=\"$LAYOUTS\" BENCH_RATE=$RATE BENCH_SIZES=$SIZES \
BENCH_ROUNDS=$ROUNDS)"

PYTHONPATH=$ROOT/scripts/lib python3 - "$RESULTS" "$OUTPUT" "$MACHINE" "$COMMAND" \
  "$(cat "$BUILD/hierarchical-elapsed")" "$(cat "$BUILD/hierarchical-date")" "$QUIET_LOG" <<'EOF'
import json, os, re, sys
from quiet_report import busy_labels, load_note

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

def human(b):
    for unit in ["B", "KiB", "MiB", "GiB"]:
        if b < 1024 or b % 1024:
            return f"{b} {unit}"
        b //= 1024
    return f"{b} TiB"

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

text = open(output).read() if os.path.exists(output) else ""
block = "\n".join(out)
if BEGIN in text and END in text:
    text = text[:text.index(BEGIN)] + block + text[text.index(END) + len(END):]
else:
    text = text.rstrip("\n") + "\n\n" + block + "\n"
open(output, "w").write(text)
print(block)
EOF
