# Sourced by the benchmark scripts: wait for a quiet machine before each configuration.
#
#   wait_quiet LABEL
#
# Waits until the 1-minute load average is below BENCH_QUIET_LOAD (1.0), polling every 5 s for
# at most BENCH_QUIET_WAIT_S (600) s, then appends "LABEL<TAB>LOAD<TAB>WAITED_S<TAB>quiet|busy" to
# $QUIET_LOG (when set). A configuration that started busy is marked so in the report
# (scripts/lib/quiet_report.py) and is not used for a target. BENCH_QUIET_LOAD=inf turns the wait
# off (the load is still recorded).
wait_quiet() {
  local label=$1 limit=${BENCH_QUIET_LOAD:-1.0} max_wait=${BENCH_QUIET_WAIT_S:-600}
  local started=$SECONDS load state
  while :; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    if awk -v l="$load" -v m="$limit" 'BEGIN { exit !(m == "inf" || l + 0 < m + 0) }'; then
      state=quiet
      break
    fi
    if ((SECONDS - started >= max_wait)); then
      state=busy
      echo "wait_quiet: $label: load average $load still >= $limit after ${max_wait}s; marked busy" >&2
      break
    fi
    sleep 5
  done
  if [[ -n ${QUIET_LOG:-} ]]; then
    printf '%s\t%s\t%s\t%s\n' "$label" "$load" "$((SECONDS - started))" "$state" >>"$QUIET_LOG"
  fi
}
