#!/usr/bin/env bash
# Cohort against PyTorch DDP (Gloo backend, Debian's python3-torch) on the same training job: the
# same model, data, hyperparameters, per-worker batch size and one thread per worker, at 1 and 2
# workers, in one run. Writes the training section of BENCHMARKS.md (between its markers).
#
#   scripts/bench-training.sh          # or: make bench-training
#
# Environment: BENCH_MODELS ("mlp cnn"), BENCH_WORKERS ("1 2"), BENCH_EPOCHS (1), BENCH_ROUNDS (3:
# every configuration runs this many times, interleaved; the table shows each one's median and
# the spread of its rounds),
# BENCH_BUILD_DIR (build/release), BENCH_OUTPUT (BENCHMARKS.md), BENCH_SKIP_BUILD=1 (use the
# binary already in BENCH_BUILD_DIR), BENCH_REPORT_ONLY=1 (rewrite the section from the last
# run's results without measuring).
# samples/s is every sample trained on by all workers divided by the training loop's wall time
# (from the first step; evaluation excluded), for both. Scaling efficiency = samples/s at N
# workers / (N x samples/s at 1 worker). The cnn runs PyTorch in both of its layouts (NCHW, its
# default, and channels-last, one line for its users); Cohort is compared with the faster one.
# Each configuration first waits for a quiet machine (scripts/lib/quiet.sh: BENCH_QUIET_LOAD,
# BENCH_QUIET_WAIT_S); one that could not get one is marked busy and not used for a target.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BENCH_BUILD_DIR:-$ROOT/build/release}
MODELS=${BENCH_MODELS:-mlp cnn}
WORKERS=${BENCH_WORKERS:-1 2}
EPOCHS=${BENCH_EPOCHS:-1}
ROUNDS=${BENCH_ROUNDS:-3}
OUTPUT=${BENCH_OUTPUT:-$ROOT/BENCHMARKS.md}
OUT=$BUILD/bench-training
RESULTS=$OUT/results.jsonl
export QUIET_LOG=$OUT/load.tsv
mkdir -p "$OUT"
REPORT_ONLY=${BENCH_REPORT_ONLY:-0}
if [[ $REPORT_ONLY != 1 ]]; then
  : >"$RESULTS"
  : >"$QUIET_LOG"
fi
# shellcheck source=lib/quiet.sh
source "$ROOT/scripts/lib/quiet.sh"

if [[ ${BENCH_SKIP_BUILD:-0} != 1 && $REPORT_ONLY != 1 ]]; then
  cmake --build "$BUILD" --target cohort >/dev/null
fi
load_before=$(uptime | sed 's/.*load average: //')
started=$(date +%s)
if [[ $REPORT_ONLY == 1 ]]; then ROUNDS=0; fi

# Rounds are interleaved (every configuration once, then again), so that a slow spell of the
# machine hits every configuration alike; each configuration's median is its result.
for ((round = 1; round <= ROUNDS; round++)); do
  for model in $MODELS; do
    layouts=contiguous
    if [[ $model != mlp ]]; then layouts="contiguous channels_last"; fi
    for n in $WORKERS; do
      # PyTorch as torchrun runs it (unbound) and, on more than one worker, with each worker
      # bound to its own CPUs as Cohort binds its workers by default: its best counts.
      binds=none
      if ((n > 1)); then binds="none auto"; fi
      for layout in $layouts; do
        for bind in $binds; do
          variant=$layout
          if [[ $bind == auto ]]; then variant=$layout-bound; fi
          echo "bench-training: round $round/$ROUNDS, $model, $n worker(s): PyTorch DDP ($variant)"
          wait_quiet "pytorch-ddp $model $variant $n r$round"
          OMP_NUM_THREADS=1 /usr/bin/python3 -m torch.distributed.run --standalone \
            --nproc_per_node "$n" --redirects 1 --tee 1 "$ROOT/bench/pytorch_ddp.py" \
            --model "$model" --epochs "$EPOCHS" --batch-size 64 --lr 0.05 --momentum 0.9 \
            --seed 0 --threads 1 --memory-format "$layout" --bind-to "$bind" 2>/dev/null |
            sed -n 's/^\[default0\]://p' | grep '^{"library"' |
            sed "s/^{/{\"round\": $round, /" >>"$RESULTS"
        done
      done
      echo "bench-training: round $round/$ROUNDS, $model, $n worker(s): Cohort"
      wait_quiet "cohort $model $n r$round"
      run_dir=$OUT/cohort-$model-$n
      rm -rf "$run_dir"
      "$BUILD/cohort" run "$ROOT/examples/fashion-$model.yaml" --run-dir "$run_dir" \
        --set workers="$n" --set threads_per_worker=1 --set train.epochs="$EPOCHS" \
        --set train.batch_size=64 --set train.seed=0 --set checkpoint.every_steps=0 >/dev/null
      /usr/bin/python3 - "$run_dir/summary.json" "$model" "$round" >>"$RESULTS" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(json.dumps({"round": int(sys.argv[3]), "library": "cohort", "model": sys.argv[2],
                  "workers": s["world_size"], "samples": s["samples"],
                  "train_seconds": s["train_seconds"], "samples_per_sec": s["samples_per_sec"],
                  "test_accuracy": s["test_accuracy"], "comm_seconds": s["comm_seconds"]}))
PY
    done
  done
done
elapsed=$(($(date +%s) - started))
load_after=$(uptime | sed 's/.*load average: //')

PYTHONPATH=$ROOT/scripts/lib /usr/bin/python3 - "$RESULTS" "$OUTPUT" "$elapsed" "$load_before" \
  "$load_after" "$QUIET_LOG" <<'PY'
import json, os, subprocess, sys, time
from quiet_report import busy_labels, load_note
results, output, elapsed, load_before, load_after, quiet_log = sys.argv[1:7]
BEGIN, END = "<!-- training:begin -->", "<!-- training:end -->"
runs = [r for r in (json.loads(l) for l in open(results) if l.strip()) if "library" in r]
busy = busy_labels(quiet_log)
for r in runs:
    if r.get("memory_format") and r.get("bind_to") == "auto":
        r["memory_format"] += "-bound"
    layout = r.get("memory_format")
    r["busy"] = (" ".join([r["library"], r["model"]] + ([layout] if layout else []) +
                          [str(r["workers"]), "r%d" % r.get("round", 1)]) in busy)
# One row per configuration: the median round (by samples/s), with the spread of all its rounds.
# A configuration any of whose rounds ran busy is busy.
groups = {}
for r in runs:
    groups.setdefault((r["library"], r["model"], r["workers"], r.get("memory_format")), []).append(r)
rows = []
for key, rs in groups.items():
    rs.sort(key=lambda r: r["samples_per_sec"])
    row = dict(rs[(len(rs) - 1) // 2])
    row["spread"] = (rs[0]["samples_per_sec"], rs[-1]["samples_per_sec"], len(rs))
    row["busy"] = any(r["busy"] for r in rs)
    rows.append(row)
# PyTorch's best layout per model and world size is its row; both layouts are shown.
by, layouts = {}, {}
for r in rows:
    key = (r["library"], r["model"], r["workers"])
    if r["library"] == "pytorch-ddp":
        layouts.setdefault((r["model"], r["workers"]), {})[r.get("memory_format", "contiguous")] = r
    if key not in by or r["samples_per_sec"] > by[key]["samples_per_sec"]:
        by[key] = r
models = sorted({r["model"] for r in rows}, key=lambda m: ["mlp", "cnn", "resnet"].index(m))
workers = sorted({r["workers"] for r in rows})
cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True,
                     text=True).stdout.strip()
lines = [BEGIN, "## Training: Cohort vs PyTorch DDP", "",
         "Command: `scripts/bench-training.sh` (`make bench-training`). Machine: %d CPUs (%s), "
         "Linux %s. Run %s, %s s, load average before %s, after %s." % (
             os.cpu_count(), cpu, os.uname().release, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             elapsed, load_before, load_after), "",
         "Same model, Fashion-MNIST, SGD lr 0.05 momentum 0.9, batch 64 per worker, one thread per "
         "worker, 1 epoch. PyTorch DDP: torch.distributed with Gloo (Debian's python3-torch 1.13), "
         "`bench/pytorch_ddp.py`; for the cnn in both of its layouts, NCHW (its default) and "
         "channels-last (`--memory-format channels_last`: the model and each batch "
         "`.to(memory_format=torch.channels_last)`), and Cohort is compared with the faster of the "
         "two (Cohort runs convolutions channels-last by default). samples/s = samples trained by "
         "all workers / training wall time from the first step, for both.", "",
         load_note(quiet_log), "",
         "Each configuration ran %d times, interleaved with the others; the table gives the median "
         "round's samples/s and, in brackets, the lowest and highest of its rounds (the median "
         "round's accuracy too). Ratios and scaling efficiencies are of medians." % max(
             (r["spread"][2] for r in rows), default=0), "",
         "At 2 workers PyTorch also ran with each worker bound to its own CPU (`--bind-to auto` "
         "of `bench/pytorch_ddp.py`: every thread of the process onto its share of the CPUs, by "
         "LOCAL_RANK), as `cohort run` binds its local workers by default and mpirun its ranks; "
         "torchrun binds nothing. PyTorch's best of its layouts and bindings is what Cohort is "
         "compared with.", "",
         "| model | workers | PyTorch DDP samples/s (its layouts and bindings) | Cohort samples/s | "
         "Cohort / PyTorch's best | PyTorch scaling eff. | Cohort scaling eff. | "
         "PyTorch test acc. | Cohort test acc. |",
         "|---|---|---|---|---|---|---|---|---|"]
for m in models:
    for n in workers:
        p, c = by.get(("pytorch-ddp", m, n)), by.get(("cohort", m, n))
        p1, c1 = by.get(("pytorch-ddp", m, 1)), by.get(("cohort", m, 1))
        def eff(r, r1):
            return "%.2f" % (r["samples_per_sec"] / (n * r1["samples_per_sec"])) if r and r1 else "-"
        def f(r, k, fmt):
            return fmt % r[k] if r else "-"
        def sps(r):
            if not r:
                return "-"
            lo, hi, k = r["spread"]
            return "%.0f" % r["samples_per_sec"] + (" (%.0f–%.0f)" % (lo, hi) if k > 1 else "")
        ratio = "**%.2f×**" % (c["samples_per_sec"] / p["samples_per_sec"]) if p and c else "-"
        if p and c and (p["busy"] or c["busy"]):
            ratio = "%.2f× (busy)" % (c["samples_per_sec"] / p["samples_per_sec"])
        both = layouts.get((m, n), {})
        labels = {"contiguous": "NCHW", "channels_last": "channels-last",
                  "contiguous-bound": "NCHW bound", "channels_last-bound": "channels-last bound"}
        def layout_cell(name):
            r = both.get(name)
            if not r:
                return "-"
            cell = sps(r)
            if len(both) > 1:
                cell = labels[name] + " " + cell
            return "**%s**" % cell if len(both) > 1 and r is p else cell
        pytorch = " / ".join(layout_cell(k) for k in ("contiguous", "channels_last",
                                                     "contiguous-bound", "channels_last-bound")
                             if k in both)
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            m, n, pytorch or "-", sps(c), ratio,
            eff(p, p1), eff(c, c1), f(p, "test_accuracy", "%.4f"), f(c, "test_accuracy", "%.4f")))
lines += ["", "Targets: at 2 workers Cohort ≥ 1.3× PyTorch DDP's samples/s on the mlp and ≥ 1.15× "
          "PyTorch's best layout on the cnn; cnn scaling efficiency ≥ 0.9; accuracy within 0.5 "
          "points of PyTorch's.", END]
text = open(output).read() if os.path.exists(output) else "# Benchmarks\n"
section = "\n".join(lines)
if BEGIN in text and END in text:
    text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
else:
    text = text.rstrip() + "\n\n" + section + "\n"
open(output, "w").write(text)
print(section)
PY
