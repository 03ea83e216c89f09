#!/usr/bin/env bash
# An emulated cluster on one machine: every node in its own network namespace, joined through a
# Linux bridge by veth pairs, with a bandwidth limit on every link (tc tbf, both directions).
#
#   netcluster.sh run N [--rate RATE] -- CMD [ARG]...   bring a cluster up, run CMD, tear it down
#   netcluster.sh up N [--rate RATE] [--owner PID]      bring one up for PID (default: the caller)
#   netcluster.sh down ID                               tear cluster ID down
#   netcluster.sh exec ID NODE CMD [ARG]...             run CMD on NODE (c or a worker number)
#   netcluster.sh addr NODE                             NODE's address (the same in every cluster)
#   netcluster.sh bytes ID NODE                         "TX RX": bytes NODE's link sent/received
#   netcluster.sh list | clean                          clusters present | remove orphaned ones
#
# Layout of cluster ID with N workers:
#   namespace cnc-ID-hub   the bridge br0 and the switch side of every link (ports c, w0, w1, ...)
#   namespace cnc-ID-c     the coordinator/launcher node, eth0 = 10.213.0.1/24
#   namespace cnc-ID-wR    worker R, eth0 = 10.213.0.(10+R)/24, R = 0..N-1
# Nothing is created in the caller's namespace: the addresses exist only inside the cluster, and
# traffic cannot leave it. RATE is a tc rate (100mbit, 1gbit, ...); the limit is a tbf qdisc on
# both ends of every link (egress of eth0 and of its switch port), so each node can send and
# receive at RATE at the same time, like a full-duplex NIC on a switch.
#
# Cleanup: a cluster belongs to an owner process; its ID is "PID-STARTTIME" of the owner (start
# time from /proc/PID/stat, so a reused pid is not mistaken for the owner). `run` owns its
# cluster and tears it down on exit, INT and TERM, killing whatever still runs inside it. Every
# cluster also gets a reaper (a detached process) that tears it down within a second of its owner
# dying in any way, SIGKILL included. `up`, `run` and `clean` also remove clusters whose owner is
# gone, left behind if even the reaper was killed.
#
# Needs root, iproute2 (ip, tc) and the veth, bridge and sch_tbf kernel modules.
set -euo pipefail

readonly PREFIX=cnc
readonly SUBNET=10.213.0
SELF=$(readlink -f "$0")
readonly SELF

die() {
  echo "netcluster: $*" >&2
  exit 2
}

usage() {
  sed -n '2,11p' "$SELF" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

starttime() {  # PID -> its start time (clock ticks since boot), empty if no such live process
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }  # the fields after the command name, which may contain spaces
  # shellcheck disable=SC2086
  set -- $stat
  [[ $1 == [ZX] ]] || echo "${20}"  # a zombie is gone; field 22 of the whole line
}

owner_alive() {  # ID -> true if the process that owns cluster ID still runs
  local pid=${1%%-*} start=${1#*-}
  [[ -n $pid && $(starttime "$pid") == "$start" ]]
}

namespaces() {  # every namespace of this tool, one per line
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PREFIX-[0-9]+-[0-9]+-" || true
}

clusters() {  # IDs of the clusters present
  namespaces | sed -E "s/^$PREFIX-([0-9]+-[0-9]+)-.*/\1/" | sort -u
}

node_ns() {  # ID NODE
  case $2 in
    c) echo "$PREFIX-$1-c" ;;
    hub) echo "$PREFIX-$1-hub" ;;
    *[!0-9]* | '') die "no node '$2' (c or a worker number)" ;;
    *) echo "$PREFIX-$1-w$2" ;;
  esac
}

node_addr() {
  case $1 in
    c) echo "$SUBNET.1" ;;
    *[!0-9]* | '') die "no node '$1' (c or a worker number)" ;;
    *) echo "$SUBNET.$((10 + $1))" ;;
  esac
}

teardown() {  # ID: kill what runs in the cluster, then remove its namespaces (and so its links)
  local id=$1 ns pids
  for ns in $(namespaces | grep -E "^$PREFIX-$id-"); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    # shellcheck disable=SC2086
    [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
  done
  for ns in $(namespaces | grep -E "^$PREFIX-$id-" | sort -r); do  # workers, c, then hub
    ip netns del "$ns" 2>/dev/null || true
  done
}

clean() {
  local id
  for id in $(clusters); do
    if ! owner_alive "$id"; then
      echo "netcluster: removing cluster $id (its owner is gone)" >&2
      teardown "$id"
    fi
  done
}

burst_for() {  # RATE -> a tbf burst in bytes: 10 ms at RATE, at least 64 KiB (one GSO packet)
  local rate=$1 num unit bits
  [[ $rate =~ ^([0-9]+)([a-zA-Z]*)$ ]] || die "rate '$rate': expected a number and a tc unit (100mbit, 1gbit)"
  num=${BASH_REMATCH[1]}
  unit=${BASH_REMATCH[2],,}
  case $unit in
    bit | '') bits=$num ;;
    kbit) bits=$((num * 1000)) ;;
    mbit) bits=$((num * 1000000)) ;;
    gbit) bits=$((num * 1000000000)) ;;
    *) die "rate '$rate': use bit, kbit, mbit or gbit" ;;
  esac
  ((bits > 0)) || die "rate '$rate' must be positive"
  local burst=$((bits / 8 / 100))
  echo $((burst > 65536 ? burst : 65536))
}

limit() {  # NS DEV RATE BURST
  ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst "$4" latency 25ms
}

link_node() {  # ID NODE RATE
  local id=$1 node=$2 rate=$3 hub ns port
  hub=$(node_ns "$id" hub)
  ns=$(node_ns "$id" "$node")
  port=$([[ $node == c ]] && echo c || echo "w$node")
  ip netns add "$ns"
  ip -n "$hub" link add "$port" type veth peer name eth0 netns "$ns"
  ip -n "$hub" link set "$port" master br0
  ip -n "$hub" link set "$port" up
  ip -n "$ns" addr add "$(node_addr "$node")/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  if [[ -n $rate ]]; then
    local burst
    burst=$(burst_for "$rate")
    limit "$ns" eth0 "$rate" "$burst"
    limit "$hub" "$port" "$rate" "$burst"
  fi
}

bring_up() {  # ID N RATE
  local id=$1 n=$2 rate=$3 hub r
  hub=$(node_ns "$id" hub)
  ip netns add "$hub"
  ip -n "$hub" link add br0 type bridge
  ip -n "$hub" link set br0 up
  link_node "$id" c "$rate"
  for ((r = 0; r < n; r++)); do link_node "$id" "$r" "$rate"; done
}

start_reaper() {  # ID [PGID]: a detached process that tears the cluster down (and kills process
  # group PGID) once the owner is gone
  setsid "$SELF" reap "$@" </dev/null >/dev/null 2>&1 &
}

check_env() {
  ((EUID == 0)) || die "needs root (network namespaces)"
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then die "needs iproute2 (ip and tc)"; fi
}

parse_up() {  # N [--rate R] [--owner PID] [--]; sets n, rate, owner, rest
  if ! [[ ${1:-} =~ ^[0-9]+$ ]] || (($1 < 1 || $1 > 200)); then die "N: a number of workers, 1 to 200"; fi
  n=$1
  shift
  rate=
  owner=
  while (($#)); do
    case $1 in
      --rate) rate=${2:?--rate needs a value}; shift 2 ;;
      --rate=*) rate=${1#--rate=}; shift ;;
      --owner) owner=${2:?--owner needs a pid}; shift 2 ;;
      --) shift; break ;;
      *) break ;;
    esac
  done
  [[ -z $rate ]] || burst_for "$rate" >/dev/null
  rest=("$@")
}

print_env() {  # ID N RATE
  echo "NETCLUSTER_ID=$1"
  echo "NETCLUSTER_WORKERS=$2"
  echo "NETCLUSTER_RATE=${3:-unlimited}"
  echo "NETCLUSTER_COORDINATOR=$(node_addr c)"
}

cmd=${1:-}
[[ -n $cmd ]] || usage
shift
case $cmd in
  run)
    check_env
    parse_up "$@"
    ((${#rest[@]})) || die "run: no command (netcluster.sh run N [--rate R] -- CMD...)"
    clean
    id="$$-$(starttime $$)"
    child=
    on_exit() {
      trap - EXIT INT TERM
      [[ -z $child ]] || kill -TERM -- "-$child" 2>/dev/null || true
      teardown "$id"
    }
    trap on_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    bring_up "$id" "$n" "$rate"
    while IFS= read -r kv; do export "${kv?}"; done < <(print_env "$id" "$n" "$rate")
    # The command runs in a process group of its own, which goes with the cluster.
    setsid "${rest[@]}" &
    child=$!
    start_reaper "$id" "$child"
    set +e
    wait "$child"
    rc=$?
    child=
    exit $rc
    ;;
  up)
    check_env
    parse_up "$@"
    ((${#rest[@]} == 0)) || die "up: unexpected arguments: ${rest[*]}"
    owner=${owner:-$PPID}
    start=$(starttime "$owner")
    [[ -n $start ]] || die "owner $owner: no such process"
    clean
    id="$owner-$start"
    [[ -z $(namespaces | grep -E "^$PREFIX-$id-") ]] || die "cluster $id exists already"
    trap 'teardown "$id"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    start_reaper "$id"
    bring_up "$id" "$n" "$rate"
    trap - EXIT
    print_env "$id" "$n" "$rate"
    ;;
  down)
    check_env
    [[ -n ${1:-} ]] || die "down: which cluster (an ID from list)"
    teardown "$1"
    ;;
  exec)
    (($# >= 3)) || die "exec: netcluster.sh exec ID NODE CMD..."
    ns=$(node_ns "$1" "$2")
    shift 2
    exec ip netns exec "$ns" "$@"
    ;;
  addr)
    node_addr "${1:?addr: which node}"
    ;;
  bytes)
    (($# == 2)) || die "bytes: netcluster.sh bytes ID NODE"
    ns=$(node_ns "$1" "$2")
    echo "$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/tx_bytes)" \
      "$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/rx_bytes)"
    ;;
  list)
    for id in $(clusters); do
      echo "$id $(owner_alive "$id" && echo owner-alive || echo orphaned)" \
        "$(namespaces | grep -cE "^$PREFIX-$id-w") workers"
    done
    ;;
  clean)
    check_env
    clean
    ;;
  reap)  # internal: the reaper of start_reaper
    # Also ends when the cluster is gone (torn down by its owner), once it has existed.
    seen=
    while owner_alive "$1"; do
      if [[ -n $(namespaces | grep -E "^$PREFIX-$1-") ]]; then seen=1; elif [[ -n $seen ]]; then exit 0; fi
      sleep 0.5
    done
    [[ -z ${2:-} ]] || kill -KILL -- "-$2" 2>/dev/null || true
    teardown "$1"
    ;;
  -h | --help | help) usage ;;
  *) die "unknown command '$cmd' (run, up, down, exec, addr, bytes, list, clean)" ;;
esac
