#!/usr/bin/env bash
# The same PyTorch scripts with backend "gloo" and backend "cohort" (the one word a user changes),
# 2 workers started by torchrun, one thread each: DDP samples/s on the mlp and the cnn
# (bench/pytorch_ddp.py; the cnn channels-last, PyTorch's faster layout), and
# torch.distributed.all_reduce latency and bus bandwidth from 4 KiB to 64 MiB
# (bench/torch_allreduce.py). Writes the Python section of BENCHMARKS.md (between its markers).
#
#   scripts/bench-python.sh          # or: make bench-python
#
# DDP runs twice for each backend: its workers unbound, as torchrun leaves them, and each bound to
# its own share of the CPUs (--bind-to auto, as mpirun binds its ranks and `cohort run` its
# workers); each backend is judged by its better one. Then the DDP comparison again with both
# backends in the same processes, alternating every few steps, beside a third arm without any
# exchange (bench/ddp_interleaved.py), unbound and bound.
#
# Environment: BENCH_ROUNDS (3: every configuration this many times, interleaved; medians),
# BENCH_INTERLEAVED_ROUNDS (16: rounds of blocks of the in-process comparison),
# BENCH_WORKERS (2), BENCH_MODELS ("mlp cnn"), BENCH_SIZES (4K,64K,1M,16M,64M),
# BENCH_BUILD_DIR (build/release), BENCH_OUTPUT (BENCHMARKS.md), BENCH_REPORT_ONLY=1 (rewrite the
# section from the last run's results). Each configuration first waits for a quiet machine
# (scripts/lib/quiet.sh); one that could not get one is marked busy and not used for a target.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BENCH_BUILD_DIR:-$ROOT/build/release}
ROUNDS=${BENCH_ROUNDS:-3}
INTERLEAVED_ROUNDS=${BENCH_INTERLEAVED_ROUNDS:-16}
WORKERS=${BENCH_WORKERS:-2}
MODELS=${BENCH_MODELS:-mlp cnn}
SIZES=${BENCH_SIZES:-4K,64K,1M,16M,64M}
OUTPUT=${BENCH_OUTPUT:-$ROOT/BENCHMARKS.md}
OUT=$BUILD/bench-python
RESULTS=$OUT/results.jsonl
export QUIET_LOG=$OUT/load.tsv
mkdir -p "$OUT"
if [[ ${BENCH_REPORT_ONLY:-0} != 1 ]]; then
  : >"$RESULTS"
  : >"$QUIET_LOG"
else
  ROUNDS=0
fi
# shellcheck source=lib/quiet.sh
source "$ROOT/scripts/lib/quiet.sh"
if [[ ! -f $BUILD/python/cohort/__init__.py ]]; then
  echo "bench-python: no Python package in $BUILD/python (make build first)" >&2
  exit 1
fi
export PYTHONPATH=$BUILD/python OMP_NUM_THREADS=1
started=$(date +%s)

# torchrun's own rendezvous (env://), as a user runs it; rank 0's JSON lines are the results.
torchrun() {
  /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node "$WORKERS" \
    --redirects 1 --tee 1 "$@" 2>/dev/null | sed -n 's/^\[default0\]://p' | grep '^{'
}

for ((round = 1; round <= ROUNDS; round++)); do
  for backend in gloo cohort; do
    label="allreduce $backend r$round"
    echo "bench-python: round $round/$ROUNDS, $label"
    wait_quiet "$label"
    torchrun "$ROOT/bench/torch_allreduce.py" --backend "$backend" --sizes "$SIZES" |
      sed "s/^{/{\"kind\": \"allreduce\", \"round\": $round, /" >>"$RESULTS"
    for model in $MODELS; do
      layout=contiguous
      [[ $model == mlp ]] || layout=channels_last
      for bind in none auto; do
        label="ddp $model $backend bind-$bind r$round"
        echo "bench-python: round $round/$ROUNDS, $label"
        wait_quiet "$label"
        torchrun "$ROOT/bench/pytorch_ddp.py" --backend "$backend" --model "$model" --epochs 1 \
          --batch-size 64 --lr 0.05 --momentum 0.9 --seed 0 --threads 1 \
          --memory-format "$layout" --bind-to "$bind" |
          grep '"library"' | sed "s/^{/{\"kind\": \"ddp\", \"round\": $round, /" >>"$RESULTS"
      done
    done
  done
done

# The same DDP training with both backends inside the same processes, arms (cohort, gloo, and no
# exchange at all) alternating every few steps: a comparison that this machine's speed spells,
# which move whole runs, tilt far less (bench/ddp_interleaved.py).
if ((ROUNDS > 0)); then
  for model in $MODELS; do
    layout=contiguous
    [[ $model == mlp ]] || layout=channels_last
    steps=20
    [[ $model == mlp ]] && steps=200
    for bind in none auto; do
      label="interleaved $model bind-$bind r1"
      echo "bench-python: $label"
      wait_quiet "$label"
      torchrun "$ROOT/bench/ddp_interleaved.py" --model "$model" --memory-format "$layout" \
        --batch-size 64 --lr 0.05 --momentum 0.9 --seed 0 --threads 1 --bind-to "$bind" \
        --rounds "$INTERLEAVED_ROUNDS" --steps-per-block "$steps" |
        grep '"interleaved"' | sed 's/^{/{"kind": "interleaved", "round": 1, /' >>"$RESULTS"
    done
  done
fi

PYTHONPATH=$ROOT/scripts/lib /usr/bin/python3 "$ROOT/scripts/lib/python_report.py" "$RESULTS" \
  "$OUTPUT" "$(($(date +%s) - started))" "$QUIET_LOG" "$WORKERS"
