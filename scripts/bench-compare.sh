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
OUTPUT=${BENCH_OUTPUT:-$ROOT/BENCHMARKS.md}
RESULTS=$BUILD/allreduce-results.jsonl
export QUIET_LOG=$BUILD/allreduce-load.tsv
# shellcheck source=lib/quiet.sh
source "$ROOT/scripts/lib/quiet.sh"

# Open MPI: ob1 is forced so that --mca btl really selects the byte transport (the ucx PML would
# bypass it). Everything else is Open MPI's default tuning, including its algorithm selection.
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca pml ob1)

load_average() { uptime | sed 's/.*load average: //'; }

build() {
  echo "bench-compare: building in $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOHORT_WITH_TORCH=OFF \
    -DCOHORT_BUILD_TESTS=OFF -DCOHORT_BUILD_BENCH=ON >/dev/null
  cmake --build "$BUILD" -j "$(nproc)" --target cohort gloo_allreduce mpi_allreduce memcpy_bandwidth
}

# Rounds are interleaved across libraries so that background load hits every library alike.
measure() {
  local started round n algo
  started=$(date +%s)
  load_average >"$BUILD/allreduce-load-before"
  : >"$RESULTS"
  : >"$QUIET_LOG"
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
      wait_quiet "gloo $n r$round"
      "$BUILD/bench/gloo_allreduce" --ranks "$n" --sizes "$SIZES" \
        --algo ring,ring_chunked,halving_doubling >>"$RESULTS"
      wait_quiet "mpi tcp $n r$round"
      "${MPIRUN[@]}" -np "$n" --mca btl tcp,self --mca btl_tcp_if_include lo \
        "$BUILD/bench/mpi_allreduce" --sizes "$SIZES" --transport tcp >>"$RESULTS"
      wait_quiet "mpi vader $n r$round"
      "${MPIRUN[@]}" -np "$n" --mca btl vader,self \
        "$BUILD/bench/mpi_allreduce" --sizes "$SIZES" --transport vader >>"$RESULTS"
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

PYTHONPATH=$ROOT/scripts/lib python3 - "$RESULTS" "$OUTPUT" "$MACHINE" "$COMMAND" \
  "$(cat "$BUILD/allreduce-elapsed")" "$(cat "$BUILD/allreduce-date")" \
  "$(cat "$BUILD/allreduce-load-before")" "$(cat "$BUILD/allreduce-load-after")" "$QUIET_LOG" \
  "$BUILD/memcpy-results.jsonl" <<'EOF'
import json, re, sys, os
from quiet_report import busy_labels, load_note
from report_text import human

results, output, machine, command, elapsed, date, load_before, load_after, quiet_log = sys.argv[1:10]
memcpy = {r["bytes"]: r["copy_gbps"] for r in map(json.loads, open(sys.argv[10]))}
BEGIN, END = "<!-- allreduce:begin -->", "<!-- allreduce:end -->"

# Best (lowest) median time per configuration across rounds.
best = {}
for line in open(results):
    r = json.loads(line)
    key = (r["library"], r["transport"], r["algorithm"], r["ranks"], r["bytes"])
    if key not in best or r["time_us"] < best[key]["time_us"]:
        best[key] = r

COLUMNS = [  # (label, library, transport, algorithm)
    ("Cohort ring", "cohort", "tcp", "ring"),
    ("Cohort HD", "cohort", "tcp", "halving_doubling"),
    ("Cohort auto", "cohort", "tcp", "auto"),
    ("Cohort shm (auto)", "cohort", "shm", "auto"),
    ("Gloo ring", "gloo", "tcp", "ring"),
    ("Gloo ring_chunked", "gloo", "tcp", "ring_chunked"),
    ("Gloo HD", "gloo", "tcp", "halving_doubling"),
    ("Open MPI TCP", "openmpi", "tcp", "default"),
    ("Open MPI vader (shm)", "openmpi", "vader", "default"),
]
ranks = sorted({k[3] for k in best})
sizes = sorted({k[4] for k in best})

def get(col, n, b):
    return best.get((col[1], col[2], col[3], n, b))

# A configuration is busy if any of its rounds started busy (its best may come from any round).
busy = {re.sub(r" r\d+$", "", label) for label in busy_labels(quiet_log)}

def is_busy(*rs):
    def label(r):
        if r["library"] == "cohort":
            return f"cohort {r['transport']} {r['algorithm']} {r['ranks']}"
        if r["library"] == "gloo":
            return f"gloo {r['ranks']}"
        return f"mpi {r['transport']} {r['ranks']}"
    return any(r and label(r) in busy for r in rs)

def best_of(library, transport, n, b):
    rs = [r for k, r in best.items() if k[0] == library and k[1] == transport and k[3] == n
          and k[4] == b]
    return max(rs, key=lambda r: r["busbw_gbps"]) if rs else None

out = [BEGIN, "", "## Allreduce: Cohort vs Gloo vs Open MPI", "",
       f"- Command: `{command}`",
       f"- Machine: {machine}",
       f"- Date: {date}; measurements took {elapsed} s; load average (1, 5, 15 min) before: "
       f"{load_before}, after: {load_after} (a load above the CPU count means other work shared "
       "the CPUs and the numbers are noisy)",
       f"- {load_note(quiet_log)} A configuration is busy if any of its rounds started busy; "
       "its ratios are marked (busy).",
       "- float32 sum, in place, all ranks on this machine, TCP over loopback unless marked; "
       "Cohort's TCP columns are `--transport tcp`, its shm column `--transport shm` (what "
       "`auto` picks for ranks of one host).",
       "- Each cell: the best over rounds of the median time across iterations of the slowest "
       "rank (see Method).", ""]

for n in ranks:
    out += [f"### {n} ranks: bus bandwidth (GB/s, higher is better)", "",
            "| size | " + " | ".join(c[0] for c in COLUMNS) + " |",
            "|---:|" + "---:|" * len(COLUMNS)]
    for b in sizes:
        cells = []
        for c in COLUMNS:
            r = get(c, n, b)
            cells.append(f"{r['busbw_gbps']:.3f}" if r else "–")
        out.append(f"| {human(b)} | " + " | ".join(cells) + " |")
    out += ["", f"### {n} ranks: time per allreduce (µs, lower is better)", "",
            "| size | " + " | ".join(c[0] for c in COLUMNS) + " |",
            "|---:|" + "---:|" * len(COLUMNS)]
    for b in sizes:
        cells = []
        for c in COLUMNS:
            r = get(c, n, b)
            cells.append(f"{r['time_us']:.1f}" if r else "–")
        out.append(f"| {human(b)} | " + " | ".join(cells) + " |")
    out.append("")

out += ["### Cohort's best against the best of each peer", "",
        "Ratio = Cohort's best busbw (any algorithm) / the peer's best busbw (any algorithm) at "
        "the same size and rank count; above 1 means Cohort is faster.", "",
        "| ranks | size | Cohort best | Gloo best | × Gloo | Open MPI TCP | × Open MPI TCP "
        "| Open MPI vader | × vader |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for n in ranks:
    for b in sizes:
        c = best_of("cohort", "tcp", n, b)
        g = best_of("gloo", "tcp", n, b)
        m = best_of("openmpi", "tcp", n, b)
        v = best_of("openmpi", "vader", n, b)
        def cell(r):
            return f"{r['busbw_gbps']:.3f} ({r['algorithm']})" if r else "–"
        def ratio(r):
            if not (c and r and r["busbw_gbps"]):
                return "–"
            return f"{c['busbw_gbps'] / r['busbw_gbps']:.2f}" + (" (busy)" if is_busy(c, r) else "")
        out.append(f"| {n} | {human(b)} | {cell(c)} | {cell(g)} | {ratio(g)} | {cell(m)} "
                   f"| {ratio(m)} | {cell(v)} | {ratio(v)} |")
out.append("")

out += ["### Shared memory: Cohort against Open MPI's vader", "",
        "Both copy every byte into shared memory and out again; memcpy is this machine's "
        "single-thread copy bandwidth at that size, measured in the same run "
        "(bench/memcpy_bandwidth.cc), and each busbw is also given as a fraction of it.", "",
        "| ranks | size | Cohort shm busbw | of memcpy | vader busbw | of memcpy | × vader "
        "| Cohort shm µs | vader µs |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for n in ranks:
    for b in sizes:
        c = best_of("cohort", "shm", n, b)
        v = best_of("openmpi", "vader", n, b)
        if not c or not v:
            continue
        mc = memcpy.get(b)
        frac = lambda r: f"{r['busbw_gbps'] / mc:.0%}" if mc else "–"
        x = f"{c['busbw_gbps'] / v['busbw_gbps']:.2f}" + (" (busy)" if is_busy(c, v) else "")
        out.append(f"| {n} | {human(b)} | {c['busbw_gbps']:.3f} | {frac(c)} | "
                   f"{v['busbw_gbps']:.3f} | {frac(v)} | {x} | {c['time_us']:.2f} "
                   f"| {v['time_us']:.2f} |")
out.append("")

# Targets: >= 1.3x the busbw of the best of Gloo and of Open MPI TCP at 16 MiB and 64 MiB, and at
# 4 KiB a latency no worse than Open MPI TCP.
out += ["### Targets", "",
        "| target | ranks | Cohort | reference | ratio | met |", "|---|---:|---:|---:|---:|:-:|"]
missed = busy_targets = 0
def verdict(ok, *rs):
    global missed, busy_targets
    if is_busy(*rs):
        busy_targets += 1
        return "(busy)"
    missed += not ok
    return "yes" if ok else "**no**"
for n in ranks:
    for b in [16 << 20, 64 << 20]:
        c = best_of("cohort", "tcp", n, b)
        for lib, label in [("gloo", "Gloo"), ("openmpi", "Open MPI TCP")]:
            r = best_of(lib, "tcp", n, b)
            if not c or not r:
                continue
            x = c["busbw_gbps"] / r["busbw_gbps"]
            out.append(f"| busbw ≥ 1.3× {label} at {human(b)} | {n} | {c['busbw_gbps']:.3f} GB/s "
                       f"| {r['busbw_gbps']:.3f} GB/s | {x:.2f}× | {verdict(x >= 1.3, c, r)} |")
    c = best_of("cohort", "tcp", n, 4096)
    m = best_of("openmpi", "tcp", n, 4096)
    if c and m:
        cr = min((r for k, r in best.items()
                  if k[0] == "cohort" and k[1] == "tcp" and k[3] == n and k[4] == 4096),
                 key=lambda r: r["time_us"])
        ct, mt = cr["time_us"], m["time_us"]
        out.append(f"| 4 KiB latency ≤ Open MPI TCP | {n} | {ct:.1f} µs | {mt:.1f} µs "
                   f"| {mt / ct:.2f}× | {verdict(ct <= mt, cr, m)} |")
    # Shared memory: 4 KiB no slower than vader, busbw >= 1.3x vader's at 1 MiB and above.
    c, v = best_of("cohort", "shm", n, 4096), best_of("openmpi", "vader", n, 4096)
    if c and v:
        out.append(f"| shm 4 KiB latency ≤ vader | {n} | {c['time_us']:.2f} µs "
                   f"| {v['time_us']:.2f} µs | {v['time_us'] / c['time_us']:.2f}× "
                   f"| {verdict(c['time_us'] <= v['time_us'], c, v)} |")
    for b in sizes:
        if b < (1 << 20):
            continue
        c, v = best_of("cohort", "shm", n, b), best_of("openmpi", "vader", n, b)
        if c and v:
            x = c["busbw_gbps"] / v["busbw_gbps"]
            out.append(f"| shm busbw ≥ 1.3× vader at {human(b)} | {n} | "
                       f"{c['busbw_gbps']:.3f} GB/s | {v['busbw_gbps']:.3f} GB/s | {x:.2f}× "
                       f"| {verdict(x >= 1.3, c, v)} |")
if busy_targets:
    summary = f"Targets missed: {missed}; not judged (busy): {busy_targets}."
else:
    summary = f"Targets missed: {missed}." if missed else "All targets met."
out += ["", summary, "", END]
section = "\n".join(out) + "\n"

text = open(output).read() if os.path.exists(output) else "# Benchmarks\n\n"
if BEGIN in text and END in text:
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1].lstrip("\n")
    text = head + section + ("\n" + tail if tail else "")
else:
    text = text.rstrip("\n") + "\n\n" + section
open(output, "w").write(text)
print(f"bench-compare: wrote {output} ({elapsed} s of measurements, {missed} targets missed, "
      f"{busy_targets} busy)")
EOF
