#!/usr/bin/env bash
# Cohort's allreduce against Gloo and Open MPI on this machine, in one run, with one measurement
# method (src/cohort/cli/bench_method.h), and writes the allreduce section of BENCHMARKS.md
# (between its markers, so a re-run replaces it).
#
#   scripts/bench-compare.sh            # or: make bench-compare
#
# Environment: BENCH_SIZES (4K,64K,1M,16M,64M), BENCH_RANKS ("2 4"), BENCH_ROUNDS (2: every
# configuration runs this many times, interleaved, and each keeps its best median; the same for
# every library), BENCH_BUILD_DIR (build/bench-compare), BENCH_OUTPUT (BENCHMARKS.md),
# BENCH_GLOO_API_LIMIT_S (240: the bound on each run of Gloo's current API),
# BENCH_REPORT_ONLY=1 (rewrite the section from the last run's results without measuring).
# Each configuration (library, algorithm or transport, ranks; every round) first waits for a quiet
# machine (scripts/lib/quiet.sh: BENCH_QUIET_LOAD, BENCH_QUIET_WAIT_S); one that could not get one
# is marked busy, and its cells are not used for a target.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BENCH_BUILD_DIR:-$ROOT/build/bench-compare}
SIZES=${BENCH_SIZES:-4K,64K,1M,16M,64M}
RANKS=${BENCH_RANKS:-2 4}
ROUNDS=${BENCH_ROUNDS:-2}
GLOO_API_LIMIT_S=${BENCH_GLOO_API_LIMIT_S:-240}
OUTPUT=${BENCH_OUTPUT:-$ROOT/BENCHMARKS.md}
RESULTS=$BUILD/allreduce-results.jsonl
export QUIET_LOG=$BUILD/allreduce-load.tsv
# shellcheck source=lib/quiet.sh
source "$ROOT/scripts/lib/quiet.sh"

# Open MPI: ob1 is forced so that --mca btl really selects the byte transport (the ucx PML would
# bypass it). Its default runs keep everything else as it comes, algorithm selection included; its
# tuned runs are below (mpi_runs).
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca pml ob1)

load_average() { uptime | sed 's/.*load average: //'; }
FAILURES=$BUILD/allreduce-failures.txt
# A peer's run that fails (Debian's Gloo once closed a connection mid-run) is noted and the
# comparison goes on: its cells keep the rounds that ran, and the report lists the failure.
peer_run() {  # LABEL COMMAND...: appends the command's output to the results
  local label=$1 err rc=0
  shift
  err=$(mktemp)
  "$@" >>"$RESULTS" 2>"$err" || rc=$?
  cat "$err" >&2
  if ((rc == 124)); then  # a run bounded by timeout(1) that reached its bound
    echo "$label: stopped by its time limit" >>"$FAILURES"
    echo "bench-compare: $label stopped by its time limit; going on" >&2
  elif ((rc != 0)); then
    echo "$label: exit status $rc ($(grep -v '^$' "$err" | tail -1))" >>"$FAILURES"
    echo "bench-compare: $label failed (exit status $rc); going on" >&2
  fi
  rm -f "$err"
}

build() {
  echo "bench-compare: building in $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOHORT_WITH_TORCH=OFF \
    -DCOHORT_BUILD_TESTS=OFF -DCOHORT_BUILD_BENCH=ON >/dev/null
  cmake --build "$BUILD" -j "$(nproc)" --target cohort gloo_allreduce mpi_allreduce memcpy_bandwidth
}

# Open MPI tuned as its users tune it: socket buffers raised on TCP, and each allreduce algorithm
# of its `tuned` component forced in turn (1 basic linear, 2 nonoverlapping, 3 recursive
# doubling, 4 ring, 5 segmented ring, 6 Rabenseifner); the report keeps the best per size.
MPI_TCP_BUFFERS=(--mca btl_tcp_sndbuf 4194304 --mca btl_tcp_rcvbuf 4194304)
MPI_ALGORITHMS=(1 2 3 4 5 6)

mpi_runs() {  # N ROUND: Open MPI over TCP and vader, defaults then tuned
  local n=$1 round=$2 k
  wait_quiet "mpi tcp $n r$round"
  peer_run "Open MPI tcp, $n ranks, round $round" "${MPIRUN[@]}" -np "$n" --mca btl tcp,self \
    --mca btl_tcp_if_include lo "$BUILD/bench/mpi_allreduce" --sizes "$SIZES" --transport tcp
  wait_quiet "mpi vader $n r$round"
  peer_run "Open MPI vader, $n ranks, round $round" "${MPIRUN[@]}" -np "$n" --mca btl vader,self \
    "$BUILD/bench/mpi_allreduce" --sizes "$SIZES" --transport vader
  for k in "${MPI_ALGORITHMS[@]}"; do
    wait_quiet "mpi tcp tuned $n r$round"
    peer_run "Open MPI tcp tuned-$k, $n ranks, round $round" "${MPIRUN[@]}" -np "$n" \
      --mca btl tcp,self --mca btl_tcp_if_include lo "${MPI_TCP_BUFFERS[@]}" \
      --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm "$k" \
      "$BUILD/bench/mpi_allreduce" --sizes "$SIZES" --transport tcp --algorithm "tuned-$k"
    wait_quiet "mpi vader tuned $n r$round"
    peer_run "Open MPI vader tuned-$k, $n ranks, round $round" "${MPIRUN[@]}" -np "$n" \
      --mca btl vader,self \
      --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm "$k" \
      "$BUILD/bench/mpi_allreduce" --sizes "$SIZES" --transport vader --algorithm "tuned-$k"
  done
}

# Rounds are interleaved across libraries so that background load hits every library alike.
measure() {
  local started round n algo integrity
  started=$(date +%s)
  load_average >"$BUILD/allreduce-load-before"
  : >"$RESULTS"
  : >"$QUIET_LOG"
  : >"$FAILURES"
  wait_quiet "memcpy"
  "$BUILD/bench/memcpy_bandwidth" --sizes "$SIZES" >"$BUILD/memcpy-results.jsonl"
  for ((round = 1; round <= ROUNDS; round++)); do
    for n in $RANKS; do
      echo "bench-compare: round $round/$ROUNDS, $n ranks"
      for algo in ring halving_doubling auto; do
        wait_quiet "cohort tcp $algo $n r$round"
        "$BUILD/cohort" bench allreduce --ranks "$n" --sizes "$SIZES" --algo "$algo" \
          --transport tcp --json >>"$RESULTS"
      done
      wait_quiet "cohort shm auto $n r$round"
      "$BUILD/cohort" bench allreduce --ranks "$n" --sizes "$SIZES" --algo auto \
        --transport shm --json >>"$RESULTS"
      for transport in tcp shm; do
        for integrity in hmac gmac; do
          wait_quiet "cohort $transport auto $integrity $n r$round"
          "$BUILD/cohort" bench allreduce --ranks "$n" --sizes "$SIZES" --algo auto \
            --transport "$transport" --integrity "$integrity" --json >>"$RESULTS"
        done
      done
      wait_quiet "gloo $n r$round"
      peer_run "Gloo legacy classes, $n ranks, round $round" "$BUILD/bench/gloo_allreduce" \
        --ranks "$n" --sizes "$SIZES" --algo ring,ring_chunked,halving_doubling
      # Gloo's current API stalls for tens of milliseconds at a time in Debian's build (see the
      # report): bounded, so that a size it cannot finish in time is reported as not finished.
      wait_quiet "gloo $n r$round"
      peer_run "Gloo current API, $n ranks, round $round (limit ${GLOO_API_LIMIT_S} s)" \
        timeout "$GLOO_API_LIMIT_S" "$BUILD/bench/gloo_allreduce" --ranks "$n" --sizes "$SIZES" \
        --algo current_ring,current_bcube
      mpi_runs "$n" "$round"
    done
  done
  load_average >"$BUILD/allreduce-load-after"
  echo $(($(date +%s) - started)) >"$BUILD/allreduce-elapsed"
  date -u '+%Y-%m-%d %H:%M UTC' >"$BUILD/allreduce-date"
}

if [[ ${BENCH_REPORT_ONLY:-0} != 1 ]]; then
  build
  measure
fi

MACHINE="$(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), Linux $(uname -r), \
$(free -g | awk '/^Mem:/ {print $2}') GiB RAM"
COMMAND="scripts/bench-compare.sh (BENCH_SIZES=$SIZES BENCH_RANKS=\"$RANKS\" BENCH_ROUNDS=$ROUNDS)"

python3 "$ROOT/scripts/lib/compare_report.py" "$RESULTS" "$OUTPUT" "$MACHINE" "$COMMAND" \
  "$(cat "$BUILD/allreduce-elapsed")" "$(cat "$BUILD/allreduce-date")" \
  "$(cat "$BUILD/allreduce-load-before")" "$(cat "$BUILD/allreduce-load-after")" "$QUIET_LOG" \
  "$BUILD/memcpy-results.jsonl" "$FAILURES"
