#!/bin/bash
# Cohort's shared memory (`--transport shm`, what `auto` picks on one host) against Open MPI's vader
# in its default and tuned (coll_tuned_allreduce_algorithm 1-6) configurations, the same sizes and
# rank counts, interleaved, BENCH_ROUNDS rounds, each configuration after the machine is quiet
# (scripts/lib/quiet.sh). Prints the table of BENCHMARKS.md's shared-memory section; the full
# comparison with Gloo and Open MPI over TCP is scripts/bench-compare.sh.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build/bench-shm
SIZES=${BENCH_SIZES:-4K,64K,1M,16M,64M}
RANKS=${BENCH_RANKS:-2 4}
ROUNDS=${BENCH_ROUNDS:-2}
COHORT=${COHORT_BINARY:-$ROOT/build/release/cohort}
mkdir -p "$BUILD"
RESULTS=$BUILD/results.jsonl
export QUIET_LOG=$BUILD/load.tsv
source "$ROOT/scripts/lib/quiet.sh"
: >"$RESULTS"
: >"$QUIET_LOG"

mpicxx -O3 -DNDEBUG -std=c++20 -I"$ROOT/src" "$ROOT/bench/mpi_allreduce.cc" -o "$BUILD/mpi_allreduce"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl vader,self)

for ((round = 1; round <= ROUNDS; round++)); do
  for n in $RANKS; do
    wait_quiet "cohort shm $n r$round"
    "$COHORT" bench allreduce --ranks "$n" --sizes "$SIZES" --algo auto --transport shm --json \
      >>"$RESULTS"
    wait_quiet "vader $n r$round"
    "${MPIRUN[@]}" -np "$n" "$BUILD/mpi_allreduce" --sizes "$SIZES" --transport vader >>"$RESULTS"
    for k in 1 2 3 4 5 6; do
      wait_quiet "vader tuned-$k $n r$round"
      "${MPIRUN[@]}" -np "$n" --mca coll_tuned_use_dynamic_rules 1 \
        --mca coll_tuned_allreduce_algorithm "$k" "$BUILD/mpi_allreduce" --sizes "$SIZES" \
        --transport vader --algorithm "tuned-$k" >>"$RESULTS"
    done
  done
done
echo "Machine: $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), Linux $(uname -r)"
echo "Load average at each configuration's start (label, load, seconds waited, state):"
cat "$QUIET_LOG"
python3 "$ROOT/scripts/lib/shm_vader_table.py" "$RESULTS"
