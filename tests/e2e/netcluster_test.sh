#!/usr/bin/env bash
# The emulated cluster (scripts/netcluster.sh), end to end.
#
#   netcluster_test.sh rig          the bandwidth limit holds on every link, in both directions,
#                                   and nothing is left behind: not after `down`, not after the
#                                   owner of `run` is killed with SIGKILL or SIGINT, not after the
#                                   owner and its reaper are both SIGKILLed (the next start cleans)
#   netcluster_test.sh job COHORT   a short Cohort job with external workers runs across the rig to
#                                   completion, and the bytes its links carried cover what Cohort
#                                   counted as sent
#   netcluster_test.sh hosts COHORT 2 hosts x 2 ranks (two per namespace): shared memory within a
#                                   host, TCP across; the ring and the hierarchical allreduce give
#                                   the right sums, and each host link carries what the cost model
#                                   says (1.5 and 1 buffer per allreduce)
#
# Exit 77 (ctest: skipped) without root, iproute2, python3 or network namespaces.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NC=$ROOT/scripts/netcluster.sh
RATE_MBIT=100
DEADLINE=$((SECONDS + 500))  # below the ctest TIMEOUT: whatever hangs fails here first

skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*"
  exit 1
}
((EUID == 0)) || skip "needs root to create network namespaces"
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then skip "needs iproute2 (ip, tc)"; fi
command -v python3 >/dev/null || skip "needs python3 (the transfer probe)"
probe=cnc-probe-$$
ip netns add "$probe" 2>/dev/null || skip "cannot create a network namespace"
# `ip netns exec` remounts / as a slave in a mount namespace of its own, which a chroot (whose / is
# not a mount point) refuses: namespaces exist there, but nothing can run in them.
if ! why=$(ip netns exec "$probe" true 2>&1); then
  ip netns del "$probe"
  skip "cannot run a command in a network namespace here: $why"
fi
ip netns del "$probe"

TMP=$(mktemp -d /tmp/cohort-netcluster-test-XXXXXX)
CLUSTER=
cleanup() {
  [[ -z $CLUSTER ]] || "$NC" down "$CLUSTER" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT

# A bulk TCP transfer for `seconds`, or a receiver that prints what it received in Mbit/s.
cat >"$TMP/xfer.py" <<'EOF'
import socket, sys, time
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "recv":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(4)
    open(sys.argv[5], "w").close()  # listening: the senders may connect
    s.settimeout(30)
    conns = [s.accept()[0] for _ in range(int(sys.argv[4]))]
    n, t0 = 0, time.monotonic()
    for c in conns:
        c.setblocking(False)
    open_ = list(conns)
    import selectors
    sel = selectors.DefaultSelector()
    for c in conns:
        sel.register(c, selectors.EVENT_READ)
    while open_:
        for key, _ in sel.select(timeout=30):
            b = key.fileobj.recv(1 << 20)
            if not b:
                sel.unregister(key.fileobj)
                open_.remove(key.fileobj)
            n += len(b)
    print("%.1f" % (n * 8 / (time.monotonic() - t0) / 1e6))
else:
    c = socket.create_connection((host, port), timeout=30)
    buf, end = b"x" * (1 << 16), time.monotonic() + float(sys.argv[4])
    while time.monotonic() < end:
        c.sendall(buf)
    c.close()
EOF

# Mbit/s received by node DST from the nodes SRC... sending for 3 s at once.
measure() {  # DST SRC...
  local dst=$1 port=$((5000 + RANDOM % 1000)) out until=$((SECONDS + 30))
  shift
  rm -f "$TMP/listening"
  "$NC" exec "$CLUSTER" "$dst" python3 "$TMP/xfer.py" recv "$("$NC" addr "$dst")" "$port" $# \
    "$TMP/listening" >"$TMP/rate" 2>&1 &
  while [[ ! -e $TMP/listening ]]; do
    ((SECONDS < until)) || fail "the receiver on node $dst did not listen: $(cat "$TMP/rate")"
    sleep 0.05
  done
  for src in "$@"; do
    "$NC" exec "$CLUSTER" "$src" python3 "$TMP/xfer.py" send "$("$NC" addr "$dst")" "$port" 3 &
  done
  wait
  out=$(cat "$TMP/rate")
  [[ $out =~ ^[0-9.]+$ ]] || fail "transfer to node $dst failed: $out"
  echo "$out"
}

within() {  # MEASURED LABEL: between half the rate (a loaded machine) and the rate + 10 %
  python3 -c "import sys; m = float(sys.argv[1]); sys.exit(0 if 0.5 * $RATE_MBIT <= m <= 1.1 * $RATE_MBIT else 1)" "$1" ||
    fail "$2: $1 Mbit/s, expected $RATE_MBIT Mbit/s (between $((RATE_MBIT / 2)) and $((RATE_MBIT * 11 / 10)))"
  echo "ok: $2: $1 Mbit/s (limit $RATE_MBIT Mbit/s)"
}

# Nothing of cluster ID is left: no namespace and no process of its own.
assert_gone() {  # ID WHAT [PID...]
  local id=$1 what=$2 until=$((SECONDS + 10))
  shift 2
  while ((SECONDS < until)); do
    local left
    left=$(ip netns list | awk '{print $1}' | grep -c "^cnc-$id-")
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
    if pgrep -f "netcluster.sh reap $id" >/dev/null; then alive=$((alive + 1)); fi
    ((left == 0 && alive == 0)) && {
      echo "ok: nothing left $what"
      return
    }
    sleep 0.2
  done
  fail "left $what: $(ip netns list | grep "cnc-$id-" | tr '\n' ' ') processes: $(ps -o pid=,args= -p "$*" 2>/dev/null)"
}

up() {  # N: a cluster owned by this script
  local env
  env=$("$NC" up "$1" --rate "${RATE_MBIT}mbit" --owner $$) || fail "netcluster.sh up $1 failed: $env"
  CLUSTER=$(sed -n 's/^NETCLUSTER_ID=//p' <<<"$env")
  [[ -n $CLUSTER ]] || fail "netcluster.sh up printed no NETCLUSTER_ID: $env"
}

# Runs `netcluster.sh run 2 -- CMD` in the background with the default disposition of SIGINT (a
# background job of a script would ignore it), waits until its cluster is up, prints "OWNER ID".
start_run() {  # PIDFILE
  python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
    "$NC" run 2 --rate "${RATE_MBIT}mbit" -- bash -c \
    '"$0" exec "$NETCLUSTER_ID" 0 sleep 300 & echo $! >"$1"; sleep 300 & echo $! >>"$1"; wait' \
    "$NC" "$1" >/dev/null 2>&1 &
  local owner=$! id=
  local until=$((SECONDS + 30))
  while ((SECONDS < until)); do
    id=$("$NC" list | awk -v p="$owner-" 'index($1, p) == 1 {print $1}')
    [[ -n $id && -f $1 && $(wc -l <"$1") == 2 ]] && break
    sleep 0.1
  done
  [[ -n $id ]] || fail "netcluster.sh run did not bring a cluster up within 30 s"
  echo "$owner $id"
}

rig() {
  up 2
  echo "cluster $CLUSTER up"
  # One flow, worker 0 to worker 1: limited by worker 0's egress.
  within "$(measure 1 0)" "worker 0 -> worker 1"
  # Two flows into worker 1 at once (from the coordinator node and worker 0): each sender is
  # within its own limit, so only the switch side of worker 1's link can hold the sum to the rate.
  within "$(measure 1 0 c)" "coordinator + worker 0 -> worker 1"
  # The other direction.
  within "$(measure 0 1)" "worker 1 -> worker 0"
  "$NC" down "$CLUSTER"
  local id=$CLUSTER
  CLUSTER=
  assert_gone "$id" "after down"

  for sig in KILL INT TERM; do
    read -r owner id < <(start_run "$TMP/pids.$sig")
    mapfile -t pids <"$TMP/pids.$sig"
    kill -"$sig" "$owner"
    assert_gone "$id" "after SIG$sig to the owner of run" "${pids[@]}"
  done

  # Owner and reaper both SIGKILLed: the cluster stays until the next start removes it.
  read -r owner id < <(start_run "$TMP/pids.orphan")
  # The reaper may be caught with a subshell of its own (a command substitution), which has the
  # same command line: kill every match.
  local reapers
  mapfile -t reapers < <(pgrep -f "netcluster.sh reap $id")
  kill -KILL "${reapers[@]}" "$owner"
  # Once they are gone nothing of theirs can remove the cluster any more.
  local until=$((SECONDS + 10)) p alive=1
  while ((alive)); do
    alive=0
    for p in "${reapers[@]}" "$owner"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive == 0 || SECONDS < until)) || fail "owner or reaper of $id outlived SIGKILL"
    ((alive == 0)) || sleep 0.05
  done
  ip netns list | grep -q "^cnc-$id-" || fail "the orphaned cluster vanished by itself (the test is wrong)"
  "$NC" clean
  assert_gone "$id" "after clean removed an orphaned cluster"
}

job() {
  local cohort=${1:?job needs the cohort binary}
  up 2
  echo "cluster $CLUSTER up"
  local run_dir=$TMP/run token=$TMP/token coord
  coord=$("$NC" addr c)
  (umask 077 && echo "netcluster-test-token-0123456789" >"$token")
  # The coordinator node runs the launcher; the workers retry until the coordinator listens.
  "$NC" exec "$CLUSTER" c timeout -s KILL 300 "$cohort" run "$ROOT/examples/fashion-mlp.yaml" \
    --external-workers --bind "$coord" --port 29500 --token-file "$token" --run-dir "$run_dir" \
    --set workers=2 --set train.max_steps=40 --set train.eval_every_steps=20 \
    --set checkpoint.every_steps=0 >"$TMP/launcher.txt" 2>&1 &
  local launcher=$!
  local r workers=()
  for r in 0 1; do
    "$NC" exec "$CLUSTER" "$r" timeout -s KILL 300 "$cohort" worker --join "$coord:29500" \
      --rank "$r" --bind "$("$NC" addr "$r")" --token-file "$token" >"$TMP/worker-$r.txt" 2>&1 &
    workers+=($!)
  done
  wait "$launcher" || fail "the launcher failed: $(tail -20 "$TMP/launcher.txt")"
  for r in 0 1; do
    wait "${workers[$r]}" || fail "worker $r failed: $(tail -20 "$TMP/worker-$r.txt")"
  done
  local tx0 tx1
  read -r tx0 _ < <("$NC" bytes "$CLUSTER" 0)
  read -r tx1 _ < <("$NC" bytes "$CLUSTER" 1)
  python3 - "$run_dir" "$tx0" "$tx1" <<'EOF' || fail "the job's results do not hold"
import json, sys
run_dir, tx = sys.argv[1], [int(sys.argv[2]), int(sys.argv[3])]
s = json.load(open(run_dir + "/summary.json"))
assert s["status"] == "completed", s
per_rank = {r["rank"]: r for r in s["per_rank"]}
assert sorted(per_rank) == [0, 1], s["per_rank"]
for r in (0, 1):
    p = per_rank[r]
    assert p["steps"] == 40, p
    # The link carries Cohort's bytes plus TCP/IP headers and the store's traffic.
    assert p["comm_bytes"] > 0 and tx[r] >= p["comm_bytes"], (r, tx[r], p["comm_bytes"])
    print("ok: rank %d: link sent %d bytes, Cohort counted %d" % (r, tx[r], p["comm_bytes"]))
evals = [m for m in map(json.loads, open(run_dir + "/metrics.jsonl")) if "test_accuracy" in m]
assert [m["step"] for m in evals] == [20, 40], evals
assert all(0 < m["test_accuracy"] <= 1 and m["train_seconds"] > 0 for m in evals), evals
print("ok: job completed across the rig; evaluated at steps 20 and 40")
EOF
  "$NC" down "$CLUSTER"
  local id=$CLUSTER
  CLUSTER=
  assert_gone "$id" "after the job"
}

# Bytes node NODE's link has sent so far.
sent() {  # NODE
  local tx
  read -r tx _ < <("$NC" bytes "$CLUSTER" "$1")
  echo "$tx"
}

hosts() {
  local cohort=${1:?hosts needs the cohort binary}
  up 2
  echo "cluster $CLUSTER up"
  local list out algo before0 before1 size=$((4 << 20))
  list="cnc-$CLUSTER-w0@$("$NC" addr 0),cnc-$CLUSTER-w1@$("$NC" addr 1)"
  for algo in ring hierarchical; do
    before0=$(sent 0) before1=$(sent 1)
    out=$("$NC" exec "$CLUSTER" c timeout -s KILL 120 "$cohort" bench allreduce --ranks 4 \
      --hosts "$list" --bind "$("$NC" addr c)" --algo "$algo" --sizes "$size" --iters 10 \
      --warmup 0 --json 2>"$TMP/bench-$algo.txt") ||
      fail "bench --algo $algo across 2 hosts failed: $(tail -20 "$TMP/bench-$algo.txt")"
    echo "$algo: $out"
    grep -q '"transport":"shm+tcp"' <<<"$out" ||
      fail "$algo: rank 0 did not use shared memory on its host and TCP across: $out"
    echo "$algo $(($(sent 0) - before0)) $(($(sent 1) - before1))" >>"$TMP/link-bytes"
  done
  python3 - "$TMP/link-bytes" "$size" <<'EOF' || fail "the links did not carry what the model says"
import sys
rows = {a: (int(x), int(y)) for a, x, y in (l.split() for l in open(sys.argv[1]))}
S, calls = int(sys.argv[2]), 11  # 10 timed allreduces and the one that checks the sum
for node in (0, 1):
    ring, hier = rows["ring"][node], rows["hierarchical"][node]
    # Per allreduce, a host link sends 2(n-1)/n S = 1.5 S under the ring (placed host by host)
    # and 2(H-1)/H S = S under the hierarchical allreduce, plus headers and the store's traffic.
    assert 1.5 * S * calls <= ring <= 1.5 * S * calls * 1.1, ("ring", node, ring)
    assert S * calls <= hier <= S * calls * 1.1, ("hierarchical", node, hier)
    print("ok: node %d's link sent %.2f S per allreduce under the ring, %.2f S hierarchical"
          % (node, ring / S / calls, hier / S / calls))
EOF
  "$NC" down "$CLUSTER"
  local id=$CLUSTER
  CLUSTER=
  assert_gone "$id" "after the benchmark"
}

case ${1:-} in
  rig) rig ;;
  job) job "${2:-}" ;;
  hosts) hosts "${2:-}" ;;
  *) fail "usage: netcluster_test.sh rig | job COHORT | hosts COHORT" ;;
esac
((SECONDS < DEADLINE)) || fail "took longer than the test's own deadline"
echo "PASS"
