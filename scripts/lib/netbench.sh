# Sourced by the benchmark scripts that run on the emulated cluster (scripts/netcluster.sh).
# Needs NC (the netcluster script) and CLUSTER (the cluster's id) set.
#
#   tx_bytes N    the tx byte counters of the links of workers 0..N-1, space-separated
tx_bytes() {
  local r out=()
  for ((r = 0; r < $1; r++)); do out+=("$("$NC" bytes "$CLUSTER" "$r" | cut -d' ' -f1)"); done
  echo "${out[*]}"
}
