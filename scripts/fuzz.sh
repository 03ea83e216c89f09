#!/usr/bin/env bash
# Runs every libFuzzer target (fuzz/, built in the ASan + UBSan tree build/asan: one build of the
# libraries serves the tests and the fuzzers; fuzz/coverage-ignorelist.txt says which code carries
# libFuzzer's coverage instrumentation) for FUZZ_SECONDS each (60), after
# replaying each input in fuzz/regressions/<name>/ (inputs that once made it fail; each must now
# pass). The seed corpus fuzz/corpus/<name>/ is copied to build/asan/fuzz/corpus/<name>/, where what
# the fuzzer finds accumulates across runs; the repository's seeds stay as they are. A crash, a
# leak, a sanitizer report or a hang (-timeout, 10 s an input) fails the run and leaves the input in
# build/asan/fuzz/findings/; copy it to fuzz/regressions/<name>/
# with the fix, as a regression test. FUZZ_JOBS targets (one per CPU) run side by side, each on a
# CPU of its own for its whole FUZZ_SECONDS.
#
#   scripts/fuzz.sh [NAME...]        # or: make fuzz (FUZZ_SECONDS=600 make fuzz for a longer run)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TREE=$ROOT/build/asan
BUILD=$TREE/fuzz
SECONDS_EACH=${FUZZ_SECONDS:-60}
cd "$ROOT"
# A tree configured before the asan preset built the fuzz targets is configured again.
grep -qs '^COHORT_FUZZ:BOOL=ON$' "$TREE/CMakeCache.txt" || cmake --preset asan >/dev/null
cmake --build "$TREE" --target fuzzers -j "$(nproc)"

names=("$@")
if ((${#names[@]} == 0)); then
  for f in "$BUILD"/*_fuzzer; do names+=("$(basename "${f%_fuzzer}")"); done
fi
# The largest input each target reads (a job file, an HTTP request, a checkpoint of a tiny model).
declare -A max_len=([checkpoint]=320000 [job_config]=16384 [console_http]=16384)
# Seconds an input may take: the HTTP target waits up to 10 s for an answer, then tries again.
declare -A timeout=([console_http]=30)
mkdir -p "$BUILD/findings"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target: its regressions replayed, then fuzzed; prints what it found and returns non-zero on
# a finding. Runs in the background beside the others, so its output goes to its own log first.
fuzz_one() {
  local name=$1 bin=$BUILD/${1}_fuzzer corpus=$BUILD/corpus/$1
  if compgen -G "fuzz/regressions/$name/*" >/dev/null; then
    if ! "$bin" -runs=0 fuzz/regressions/"$name"/* >"$BUILD/$name-regressions.log" 2>&1; then
      tail -40 "$BUILD/$name-regressions.log"
      echo "fuzz: $name: a regression input fails (fuzz/regressions/$name)"
      return 1
    fi
  fi
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  if "$bin" -max_total_time="$SECONDS_EACH" -timeout="${timeout[$name]:-10}" -rss_limit_mb=2048 \
      -max_len="${max_len[$name]:-4096}" -seed="${FUZZ_SEED:-1}" -print_final_stats=1 \
      -artifact_prefix="$BUILD/findings/$name-" "$corpus" >"$BUILD/$name.log" 2>&1; then
    { grep -aE '^stat::number_of_executed_units|^stat::new_units_added' "$BUILD/$name.log" ||
      true; } | tr '\n' ' ' | sed "s/^/fuzz: $name: /"
    echo
  else
    tail -60 "$BUILD/$name.log"
    return 1
  fi
}

for name in "${names[@]}"; do
  [[ -x $BUILD/${name}_fuzzer ]] || { echo "fuzz: no target $name" >&2; exit 2; }
done
jobs_max=${FUZZ_JOBS:-$(nproc)}
declare -A pid_of=()  # running target -> its pid
failed=()
# Waits for one running target to end, prints its output and records a finding.
reap_one() {
  local name
  wait -n || true
  for name in "${!pid_of[@]}"; do
    kill -0 "${pid_of[$name]}" 2>/dev/null && continue
    wait "${pid_of[$name]}" || failed+=("$name")
    cat "$BUILD/$name.out"
    unset "pid_of[$name]"
  done
}
for name in "${names[@]}"; do
  while ((${#pid_of[@]} >= jobs_max)); do reap_one; done
  echo "fuzz: $name for ${SECONDS_EACH}s"
  fuzz_one "$name" >"$BUILD/$name.out" 2>&1 &
  pid_of[$name]=$!
done
while ((${#pid_of[@]})); do reap_one; done
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $BUILD/findings/)" >&2
  exit 1
fi
echo "fuzz: ${#names[@]} targets, no finding"
