#!/usr/bin/env bash
# Runs every libFuzzer target (fuzz/, built by the fuzz preset: clang, ASan + UBSan) for
# FUZZ_SECONDS each (60), after replaying each input in fuzz/regressions/<name>/ (inputs that once
# made it fail; each must now pass). The seed corpus fuzz/corpus/<name>/ is copied to
# build/fuzz/corpus/<name>/, where what the fuzzer finds accumulates across runs; the repository's
# seeds stay as they are. A crash, a leak, a sanitizer report or a hang (-timeout, 10 s an input)
# fails the run and leaves the input in build/fuzz/findings/; copy it to fuzz/regressions/<name>/
# with the fix, as a regression test.
#
#   scripts/fuzz.sh [NAME...]        # or: make fuzz (FUZZ_SECONDS=600 make fuzz for a longer run)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build/fuzz
SECONDS_EACH=${FUZZ_SECONDS:-60}
cd "$ROOT"
test -f "$BUILD/build.ninja" || cmake --preset fuzz >/dev/null
cmake --build "$BUILD" --target fuzzers -j "$(nproc)"

names=("$@")
if ((${#names[@]} == 0)); then
  for f in "$BUILD"/fuzz/*_fuzzer; do names+=("$(basename "${f%_fuzzer}")"); done
fi
# The largest input each target reads (a job file, an HTTP request, a checkpoint of a tiny model).
declare -A max_len=([checkpoint]=320000 [job_config]=16384 [console_http]=16384)
# Seconds an input may take: the HTTP target waits up to 10 s for an answer, then tries again.
declare -A timeout=([console_http]=30)
mkdir -p "$BUILD/findings"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for name in "${names[@]}"; do
  bin=$BUILD/fuzz/${name}_fuzzer
  [[ -x $bin ]] || { echo "fuzz: no target $name" >&2; exit 2; }
  if compgen -G "fuzz/regressions/$name/*" >/dev/null; then
    echo "fuzz: $name: replaying fuzz/regressions/$name"
    if ! "$bin" -runs=0 fuzz/regressions/"$name"/* >"$BUILD/$name-regressions.log" 2>&1; then
      tail -40 "$BUILD/$name-regressions.log"
      failed+=("$name (regression)")
      continue
    fi
  fi
  corpus=$BUILD/corpus/$name
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  echo "fuzz: $name for ${SECONDS_EACH}s"
  if "$bin" -max_total_time="$SECONDS_EACH" -timeout="${timeout[$name]:-10}" -rss_limit_mb=2048 \
      -max_len="${max_len[$name]:-4096}" -seed="${FUZZ_SEED:-1}" -print_final_stats=1 \
      -artifact_prefix="$BUILD/findings/$name-" "$corpus" >"$BUILD/$name.log" 2>&1; then
    { grep -aE '^stat::number_of_executed_units|^stat::new_units_added' "$BUILD/$name.log" ||
      true; } | tr '\n' ' ' | sed "s/^/fuzz: $name: /"
    echo
  else
    tail -60 "$BUILD/$name.log"
    failed+=("$name")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $BUILD/findings/)" >&2
  exit 1
fi
echo "fuzz: ${#names[@]} targets, no finding"
