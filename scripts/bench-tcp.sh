#!/usr/bin/env bash
# Two ranks over TCP, written into BENCHMARKS.md between its markers (a re-run replaces them).
#
#   scripts/bench-tcp.sh            # or: make bench-tcp (needs root: network namespaces)
#
# Loopback: Cohort's 2-rank allreduce over TCP (--transport tcp), BENCH_SIZES, against what
# loopback TCP carries between two processes that send to each other at once: iperf3 --bidir,
# one stream each way, with its default write size and with 1 MiB writes, each bound one process
# per CPU (as the ranks are) and unbound; the reference is the best of the four. A 2-rank
# allreduce of S bytes sends S each way (half in its reduce-scatter, half in its allgather) on
# the same two CPUs that reduce, so its busbw (= algbw at 2 ranks) is a rate per direction to set
# beside iperf3's. The same allreduce also runs with the same-host socket buffers pinned to each of
# BENCH_LOCAL_BUFFERS instead of Cohort's default (--socket-buffer; 0: the kernel's autotuning).
#
# Emulated cluster (scripts/netcluster.sh, 2 hosts of one rank, links limited with tc tbf to
# BENCH_RATE): the same allreduce with Cohort's defaults (a connection between hosts leaves the
# kernel's buffer autotuning on) and with SO_SNDBUF/SO_RCVBUF pinned to each of BENCH_BUFFERS
# (--remote-socket-buffer), and iperf3 --bidir across the same link.
#
# Environment: BENCH_SIZES (1M,4M,16M,64M; the targets are at 16M and 64M), BENCH_ROUNDS (3,
# interleaved; each configuration keeps its best round), BENCH_RATE (1gbit), BENCH_BUFFERS ("64K
# 256K 1M 4M"), BENCH_LOCAL_BUFFERS ("256K 4M 0"), BENCH_PARTS ("loopback cluster"), BENCH_OUTPUT
# (BENCHMARKS.md), BENCH_REPORT_ONLY=1. Every configuration first waits for a quiet machine
# (scripts/lib/quiet.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build/bench-tcp
COHORT=${COHORT_BINARY:-$ROOT/build/release/cohort}
SIZES=${BENCH_SIZES:-1M,4M,16M,64M}
ROUNDS=${BENCH_ROUNDS:-3}
RATE=${BENCH_RATE:-1gbit}
BUFFERS=${BENCH_BUFFERS:-64K 256K 1M 4M}
LOCAL_BUFFERS=${BENCH_LOCAL_BUFFERS:-256K 4M 0}
PARTS=${BENCH_PARTS:-loopback cluster}
OUTPUT=${BENCH_OUTPUT:-$ROOT/BENCHMARKS.md}
RESULTS=$BUILD/results.jsonl
NC=$ROOT/scripts/netcluster.sh
export QUIET_LOG=$BUILD/load.tsv
# shellcheck source=lib/quiet.sh
source "$ROOT/scripts/lib/quiet.sh"
mkdir -p "$BUILD"

command -v iperf3 >/dev/null || {
  echo "bench-tcp: iperf3 is missing (scripts/install-deps.sh installs it)" >&2
  exit 2
}

# Tags every JSON line of stdin with the configuration: {"part":..., "config":..., "round":...}.
tag() {  # PART CONFIG ROUND
  grep '^{' | sed "s/^{/{\"part\":\"$1\",\"config\":\"$2\",\"round\":$3,/" >>"$RESULTS" || true
}

# Waits (up to 10 s) for a listening TCP port in the namespace this runs in.
wait_listening() {  # PORT
  local i
  for ((i = 0; i < 200; i++)); do
    ss -Hltn "sport = :$1" | grep -q . && return 0
    sleep 0.05
  done
  echo "bench-tcp: nothing listens on port $1 after 10 s" >&2
  return 1
}

# iperf3 --bidir from CLIENT to SERVER_ADDR, the server run by SERVER (a command prefix, empty
# for this namespace), the client by CLIENT. Prints iperf3's JSON on one line, marked as iperf3's.
iperf_bidir() {  # SERVER_PREFIX CLIENT_PREFIX SERVER_ADDR PORT ARGS...
  local server=$1 client=$2 addr=$3 port=$4 pid
  shift 4
  $server iperf3 -s -1 -B "$addr" -p "$port" >/dev/null 2>&1 &
  pid=$!
  $server bash -c "$(declare -f wait_listening); wait_listening $port"
  $client iperf3 -c "$addr" -p "$port" --bidir -t 5 -O 1 -J "$@" | tr -d '\n' |
    sed 's/^{/{"library":"iperf3",/'
  echo
  wait "$pid" || true
}

measure_loopback() {
  local round length bind args buf
  for ((round = 1; round <= ROUNDS; round++)); do
    echo "bench-tcp: loopback, round $round/$ROUNDS"
    wait_quiet "cohort loopback r$round"
    "$COHORT" bench allreduce --ranks 2 --transport tcp --sizes "$SIZES" --json |
      tag loopback cohort "$round"
    for buf in $LOCAL_BUFFERS; do
      wait_quiet "cohort loopback $buf r$round"
      "$COHORT" bench allreduce --ranks 2 --transport tcp --sizes "$SIZES" --json \
        --socket-buffer "$buf" | tag loopback "cohort $buf" "$round"
    done
    for length in default 1M; do
      for bind in bound unbound; do
        args=()
        [[ $length != default ]] && args+=(-l "$length")
        [[ $bind == bound ]] && args+=(-A "1,0")
        wait_quiet "iperf3 $length $bind r$round"
        iperf_bidir "" "" 127.0.0.1 5201 "${args[@]}" | tag loopback "iperf3 $length $bind" "$round"
      done
    done
  done
}

# Inside a cluster of 2 workers: worker 0 and worker 1 are the two hosts.
measure_in_cluster() {
  local round buf hosts addr1
  hosts="cnc-$NETCLUSTER_ID-w0@$("$NC" addr 0),cnc-$NETCLUSTER_ID-w1@$("$NC" addr 1)"
  addr1=$("$NC" addr 1)
  for ((round = 1; round <= ROUNDS; round++)); do
    for buf in default $BUFFERS; do
      echo "bench-tcp: cluster at $RATE, round $round/$ROUNDS, socket buffers $buf"
      wait_quiet "cohort $RATE $buf r$round"
      local extra=()
      [[ $buf != default ]] && extra=(--remote-socket-buffer "$buf")
      "$NC" exec "$NETCLUSTER_ID" c "$COHORT" bench allreduce --ranks 2 --hosts "$hosts" \
        --bind "$("$NC" addr c)" --transport tcp --sizes "$SIZES" --json "${extra[@]}" |
        tag cluster "$buf" "$round"
    done
    wait_quiet "iperf3 $RATE r$round"
    iperf_bidir "$NC exec $NETCLUSTER_ID 1" "$NC exec $NETCLUSTER_ID 0" "$addr1" 5201 |
      tag cluster iperf3 "$round"
  done
}

if [[ ${BENCH_REPORT_ONLY:-0} != 1 ]]; then
  : >"$RESULTS"
  : >"$QUIET_LOG"
  if [[ " $PARTS " == *" loopback "* ]]; then
    measure_loopback
  fi
  if [[ " $PARTS " == *" cluster "* ]]; then
    [[ $(id -u) == 0 ]] || { echo "bench-tcp: needs root (network namespaces)" >&2; exit 2; }
    export -f measure_in_cluster wait_quiet iperf_bidir wait_listening tag
    export COHORT SIZES ROUNDS RATE BUFFERS RESULTS NC QUIET_LOG
    "$NC" run 2 --rate "$RATE" -- bash -c measure_in_cluster
  fi
  date -u '+%Y-%m-%d %H:%M UTC' >"$BUILD/date"
fi

PYTHONPATH=$ROOT/scripts/lib python3 "$ROOT/scripts/lib/tcp_report.py" "$RESULTS" "$OUTPUT" \
  "$(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), Linux $(uname -r)" \
  "scripts/bench-tcp.sh (BENCH_SIZES=$SIZES BENCH_ROUNDS=$ROUNDS BENCH_RATE=$RATE \
BENCH_BUFFERS=\"$BUFFERS\" BENCH_LOCAL_BUFFERS=\"$LOCAL_BUFFERS\" BENCH_PARTS=\"$PARTS\")" \
  "$(cat "$BUILD/date")" "$QUIET_LOG" "$RATE"
