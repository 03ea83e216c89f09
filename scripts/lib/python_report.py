"""The Python section of BENCHMARKS.md from scripts/bench-python.sh's results."""
import json
import os
import statistics
import subprocess
import sys
import time

from quiet_report import busy_labels, load_note
from report_text import human, write_section

results, output, elapsed, quiet_log, workers = sys.argv[1:6]
BEGIN, END = "<!-- python:begin -->", "<!-- python:end -->"
runs = [json.loads(line) for line in open(results) if line.strip()]
busy = busy_labels(quiet_log)


def is_busy(label):
    return any(b.startswith(label + " r") for b in busy)


def median_of(rows, key):
    return statistics.median(r[key] for r in rows) if rows else float("nan")


cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True,
                     text=True).stdout.strip()
rounds = max((r["round"] for r in runs), default=0)
lines = [BEGIN, "## PyTorch: torch.distributed with backend \"cohort\" against \"gloo\"", "",
         "Command: `scripts/bench-python.sh` (`make bench-python`). Machine: %d CPUs (%s), Linux %s. "
         "Run %s, %s s, %s rounds interleaved (medians; range in brackets)." % (
             os.cpu_count(), cpu, os.uname().release,
             time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), elapsed, rounds), "",
         "The same script for both, started by Debian's torchrun (`--standalone --nproc_per_node "
         "%s`, env:// rendezvous), one thread per worker, the backend named on its command line "
         "(`import cohort` registers it). DDP: `bench/pytorch_ddp.py`, Fashion-MNIST, batch 64 "
         "per worker, SGD lr 0.05 momentum 0.9, 1 epoch, 25 MB buckets (DDP's default); the cnn "
         "channels-last (PyTorch's faster layout). samples/s = samples trained by all workers / "
         "training wall time from the first step. all_reduce: `bench/torch_allreduce.py`, "
         "float32, each call timed on every rank, the slowest rank's time per call, median over "
         "the loop (mean beside it, as nccl-tests reports); busbw = 2(n-1)/n x bytes / time." %
         workers, "", load_note(quiet_log), ""]

BINDS = (("none", "unbound"), ("auto", "bound"))
lines += ["Each backend's DDP runs twice: its workers unbound, as torchrun leaves them, and each "
          "bound to its own share of the CPUs (`--bind-to auto` of `bench/pytorch_ddp.py`: every "
          "thread of the worker, by LOCAL_RANK, as mpirun binds its ranks and `cohort run` its "
          "workers). The target is judged on each backend's better binding (**bold**).", "",
          "| model | gloo unbound | gloo bound | cohort unbound | cohort bound | "
          "cohort / gloo, same binding (unbound / bound) | cohort best / gloo best | target |",
          "| --- | --- | --- | --- | --- | --- | --- | --- |"]
targets = {"mlp": 1.5, "cnn": 1.05}


def ddp_rows(model, backend, bind):
    return [r for r in runs if r["kind"] == "ddp" and r["model"] == model and
            r["backend"] == backend and r.get("bind_to", "none") == bind]


for model in ["mlp", "cnn"]:
    rows = {(b, w): ddp_rows(model, b, w) for b in ("gloo", "cohort") for w, _ in BINDS}
    medians = {k: median_of(v, "samples_per_sec") for k, v in rows.items() if v}
    best = {}  # backend -> its better binding
    for (backend, bind), m in medians.items():
        if backend not in best or m > medians[backend, best[backend]]:
            best[backend] = bind
    if len(best) < 2:
        continue
    cells = []
    for key in rows:
        if key not in medians:
            cells.append("–")
            continue
        samples = [r["samples_per_sec"] for r in rows[key]]
        text = "%.0f [%.0f–%.0f]" % (medians[key], min(samples), max(samples))
        cells.append("**%s**" % text if best[key[0]] == key[1] else text)
    same = " / ".join("%.2f×" % (medians["cohort", w] / medians["gloo", w])
                      if ("cohort", w) in medians and ("gloo", w) in medians else "–"
                      for w, _ in BINDS)
    marked = any(is_busy("ddp %s %s bind-%s" % (model, b, w)) for b, w in best.items())
    ratio = medians["cohort", best["cohort"]] / medians["gloo", best["gloo"]]
    verdict = "busy" if marked else ("met" if ratio >= targets[model] else "**missed**")
    lines.append("| %s | %s | %s | %.2f× | ≥ %.2f× (%s) |" % (
        model, " | ".join(cells), same, ratio, targets[model], verdict))

inter = [r for r in runs if r["kind"] == "interleaved"]
if inter:
    lines += ["", "The same DDP training with both backends in the same processes "
              "(`bench/ddp_interleaved.py`): each worker trains three copies of the model (the "
              "same initial weights, the same batches in the same order) in turn, a block of "
              "steps each, the order rotating every round: DDP over backend \"cohort\", DDP "
              "over a `new_group(backend=\"gloo\")` of the same ranks, and the model stepped "
              "without any exchange (*none*: the bound no backend can pass on this machine). A "
              "block's time is the slowest rank's; ratios are per round (blocks seconds apart), "
              "median [quartiles] over the rounds.", "",
              "| model | workers | rounds × steps | gloo samples/s | cohort samples/s | "
              "none samples/s | "
              "cohort / gloo | none / gloo | groups' threads, CPU ms per step (gloo / cohort / "
              "none) | idle groups' CPU | target |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for r in inter:
    i = r["interleaved"]
    sps, med, q = i["samples_per_sec"], i["ratio_median"], i["ratio_quartiles"]
    bind = i.get("bind_to", "none")
    marked = is_busy("interleaved %s bind-%s" % (i["model"], bind))
    need = targets.get(i["model"])
    verdict = "busy" if marked else ("met" if med["cohort/gloo"] >= need else "**missed**")
    cpu = i.get("group_threads_cpu_ms_per_step")
    cpu_text = " / ".join("%.1f" % cpu[a] for a in ("gloo", "cohort", "none")) if cpu else "–"
    lines.append("| %s | %s | %d × %d | %.0f | %.0f | %.0f | %.2f× [%.2f–%.2f] | "
                 "%.2f× [%.2f–%.2f] | %s | %.1f%% | ≥ %.2f× (%s) |" % (
                     i["model"], dict(BINDS)[bind], i["rounds"], i["steps_per_block"],
                     sps["gloo"], sps["cohort"], sps["none"], med["cohort/gloo"], *q["cohort/gloo"],
                     med["none/gloo"],
                     *q["none/gloo"], cpu_text, 100 * i["idle_groups_cpu_seconds_per_second"],
                     need, verdict))

lines += ["", "| size | gloo median µs (mean) | cohort median µs (mean) | gloo busbw GB/s | "
          "cohort busbw GB/s | cohort speed-up | target |", "| --- | --- | --- | --- | --- | --- | --- |"]
sizes = sorted({r["bytes"] for r in runs if r["kind"] == "allreduce"})
marked = is_busy("allreduce gloo") or is_busy("allreduce cohort")
for b in sizes:
    g = [r for r in runs if r["kind"] == "allreduce" and r["bytes"] == b and r["backend"] == "gloo"]
    c = [r for r in runs if r["kind"] == "allreduce" and r["bytes"] == b and r["backend"] == "cohort"]
    if not g or not c:
        continue
    gt, ct = median_of(g, "median_us"), median_of(c, "median_us")
    speedup = gt / ct
    if b == 4096:
        target, need = "latency ≤ gloo / 2", 2.0
    elif b >= 16 << 20:
        target, need = "busbw ≥ 1.5× gloo", 1.5
    else:
        target, need = "", None
    verdict = "" if need is None else (" (busy)" if marked else (
        " (met)" if speedup >= need else " (**missed**)"))
    lines.append("| %s | %.1f (%.1f) | %.1f (%.1f) | %.2f | %.2f | %.2f× | %s%s |" % (
        human(b), gt, median_of(g, "mean_us"), ct, median_of(c, "mean_us"),
        median_of(g, "busbw_gbs"), median_of(c, "busbw_gbs"), speedup, target, verdict))
lines.append(END)
print(write_section(output, BEGIN, END, lines))
