"""The two-ranks-over-TCP section of BENCHMARKS.md, from scripts/bench-tcp.sh's results (one JSON
per line, each tagged with its part, configuration and round)."""
import json
import statistics
import sys

from quiet_report import busy_labels, load_note
from report_text import human, write_section

results, output, machine, command, date, quiet_log, rate = sys.argv[1:8]
BEGIN, END = "<!-- tcp:begin -->", "<!-- tcp:end -->"
LOOPBACK_TARGET, BUFFER_TARGET = 0.80, 0.95
TARGET_MIN_BYTES = 16 << 20  # the loopback target is set at 16 and 64 MiB

rows = [json.loads(line) for line in open(results) if line.strip()]
busy = busy_labels(quiet_log)


def label(r):
    """The label wait_quiet logged before the run that gave r."""
    if r["part"] == "loopback":
        if r["config"] == "cohort":
            return f"cohort loopback r{r['round']}"
        if r["config"].startswith("cohort "):  # "cohort 256K": same-host buffers pinned
            return f"cohort loopback {r['config'][len('cohort '):]} r{r['round']}"
        return f"{r['config']} r{r['round']}"
    if r["config"] == "iperf3":
        return f"iperf3 {rate} r{r['round']}"
    return f"cohort {rate} {r['config']} r{r['round']}"


def per_direction_gbps(r):
    """iperf3 --bidir: the mean of what each side received, GB/s (1e9 bytes per second)."""
    end = r.get("end", {})
    a = end.get("sum_received", {}).get("bits_per_second")
    b = end.get("sum_received_bidir_reverse", {}).get("bits_per_second")
    if a is None or b is None:
        return None
    return (a + b) / 2 / 8 / 1e9


cohort = {}  # (part, config, bytes) -> [(busbw, round, busy)]
iperf = {}  # (part, config) -> [(GB/s per direction, round, busy)]
for r in rows:
    is_busy = label(r) in busy
    if r.get("library") == "iperf3":
        g = per_direction_gbps(r)
        if g is not None:
            iperf.setdefault((r["part"], r["config"]), []).append((g, r["round"], is_busy))
    elif r.get("library") == "cohort":
        cohort.setdefault((r["part"], r["config"], r["bytes"]), []).append(
            (r["busbw_gbps"], r["round"], is_busy))


def best(runs):
    """The best quiet run's figure, or None when every run was busy (or there was none)."""
    quiet = [v for v, _, b in runs or [] if not b]
    return max(quiet) if quiet else None


def figure(runs, digits):
    """best(runs) as a table cell: '–' when nothing ran, '– (busy)' when every run was busy."""
    v = best(runs)
    if v is not None:
        return f"{v:.{digits}f}"
    return "– (busy)" if runs else "–"


def buffer_bytes(config):
    """'default' first, then pinned sizes in increasing order ('64K' < '256K' < '1M' < '4M')."""
    if config == "default":
        return -1
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(config[:-1]) * units[config[-1]] if config[-1] in units else int(config)


def rounds(runs):
    return ", ".join(f"{v:.3f}" + (" (busy)" if b else "") for v, _, b in sorted(
        runs or [], key=lambda x: x[1]))


sizes = sorted({k[2] for k in cohort})


def same_host_buffers():
    """The loopback allreduce with Cohort's default same-host socket buffers against each pinned
    alternative (BENCH_LOCAL_BUFFERS): the median and the best of the quiet rounds."""
    alts = sorted({k[1][len("cohort "):] for k in cohort
                   if k[0] == "loopback" and k[1].startswith("cohort ")},
                  key=lambda c: (1 << 62) if c == "0" else buffer_bytes(c))
    if not alts:
        return []
    names = ["default"] + [("autotuning (0)" if a == "0" else f"{a} pinned") for a in alts]
    configs = ["cohort"] + [f"cohort {a}" for a in alts]
    lines = ["### Loopback: Cohort's same-host socket buffers", "",
             "The same 2-rank allreduce with Cohort's default SO_SNDBUF/SO_RCVBUF for ranks of one "
             "host (`CommConfig::socket_buffer_bytes`) and with each alternative "
             "(`--socket-buffer`; 0 leaves the kernel's autotuning on), interleaved in every "
             "round. Busbw GB/s, median / best of the quiet rounds; the last column is the default's "
             "median over the best alternative's median.", "",
             "| size | " + " | ".join(names) + " | default / best alternative |",
             "|---:|" + "---:|" * len(names) + "---:|"]
    for b in sizes:
        cells, medians = [], {}
        for c in configs:
            quiet = [v for v, _, busy_run in cohort.get(("loopback", c, b), []) if not busy_run]
            if quiet:
                medians[c] = statistics.median(quiet)
                cells.append(f"{medians[c]:.2f} / {max(quiet):.2f}")
            else:
                cells.append("–")
        alt = [m for c, m in medians.items() if c != "cohort"]
        ratio = f"{medians['cohort'] / max(alt):.2f}" if "cohort" in medians and alt else "–"
        lines.append(f"| {human(b)} | " + " | ".join(cells) + f" | {ratio} |")
    lines += ["", "Each round, busbw GB/s:", ""]
    for c, name in zip(configs, names):
        for b in sizes:
            lines.append(f"- {name}, {human(b)}: {rounds(cohort.get(('loopback', c, b))) or '–'}")
    return lines + [""]


out = [BEGIN, "", "## Two ranks over TCP: against what loopback and the link carry", "",
       f"- Command: `{command}` (`make bench-tcp`)",
       f"- Machine: {machine}.",
       f"- Date: {date}. {load_note(quiet_log)}",
       "- Cohort: `cohort bench allreduce --ranks 2 --transport tcp`, float32 sum, busbw (= algbw "
       "at 2 ranks: each rank sends the whole buffer's size in all, half each way per phase) from "
       "the median of the slowest rank's time. A configuration's figure is its best quiet round; "
       "every round is listed.",
       "- Reference: iperf3 `--bidir` between two processes, one stream each way at once, for 5 s "
       "after 1 s left out; the figure is the mean of the two directions' received rates.", ""]

loop_ref = {c: best(v) for (p, c), v in iperf.items() if p == "loopback"}
if any(k[0] == "loopback" for k in cohort):
    ref_config = max((c for c in loop_ref if loop_ref[c] is not None), key=loop_ref.get,
                     default=None)
    ref = loop_ref.get(ref_config) if ref_config else None
    out += ["### Loopback: Cohort's 2-rank allreduce against two TCP streams, one each way", "",
            "| iperf3 configuration | GB/s per direction, each round |", "|---|---|"]
    for (p, c), v in sorted(iperf.items()):
        if p == "loopback":
            out.append(f"| {c} | {rounds(v)} |")
    out += ["", f"Target: Cohort's busbw at least {LOOPBACK_TARGET:.0%} of iperf3's best "
            f"({ref_config or 'none'}: {ref:.3f} GB/s per direction)." if ref else
            "Target: not judged (no quiet iperf3 run).", "",
            "| size | Cohort busbw GB/s, each round | Cohort best | iperf3 best | Cohort / iperf3 | "
            "target |", "|---:|---|---:|---:|---:|---|"]
    for b in sizes:
        runs = cohort.get(("loopback", "cohort", b))
        if not runs:
            continue
        c = best(runs)
        if c is None or ref is None:
            out.append(f"| {human(b)} | {rounds(runs)} | – | – | – | not judged (busy) |")
            continue
        if b < TARGET_MIN_BYTES:
            ok = "not a target size"
        else:
            ok = "met" if c / ref >= LOOPBACK_TARGET else "**missed**"
        out.append(f"| {human(b)} | {rounds(runs)} | {c:.3f} | {ref:.3f} | {c / ref:.2f} | {ok} |")
    out.append("")
    out += same_host_buffers()

configs = sorted({k[1] for k in cohort if k[0] == "cluster"}, key=buffer_bytes)
if configs:
    link = best(iperf.get(("cluster", "iperf3")))
    out += [f"### Emulated cluster, 2 hosts of one rank, links at {rate}: Cohort's defaults "
            "against pinned socket buffers", "",
            "Cohort leaves the kernel's buffer autotuning on for a connection between hosts; "
            "`--remote-socket-buffer` pins SO_SNDBUF/SO_RCVBUF instead. iperf3 `--bidir` across "
            "the same link: " + (f"{link * 8:.3f} Gbit/s per direction "
                                 f"({rounds(iperf.get(('cluster', 'iperf3')))} GB/s)."
                                 if link else "no quiet run.")
            + f" Target: the defaults within {1 - BUFFER_TARGET:.0%} of the best setting.", "",
            "| size | " + " | ".join("default (autotuning)" if c == "default" else f"{c} pinned"
                                     for c in configs)
            + " | best | default / best | default / iperf3 | target |",
            "|---:|" + "---:|" * len(configs) + "---|---:|---:|---|"]
    for b in sizes:
        figures = {c: best(cohort.get(("cluster", c, b))) for c in configs}
        cells = [figure(cohort.get(("cluster", c, b)), 4) for c in configs]
        known = {c: v for c, v in figures.items() if v is not None}
        d = figures.get("default")
        if not known or d is None:
            out.append(f"| {human(b)} | " + " | ".join(cells) + " | – | – | – | not judged |")
            continue
        top = max(known, key=known.get)
        ok = "met" if d / known[top] >= BUFFER_TARGET else "**missed**"
        vs_link = f"{d / link:.2f}" if link else "–"
        out.append(f"| {human(b)} | " + " | ".join(cells) +
                   f" | {top} | {d / known[top]:.3f} | {vs_link} | {ok} |")
    out += ["", "Each round, busbw GB/s:", ""]
    for c in configs:
        for b in sizes:
            out.append(f"- {c}, {human(b)}: {rounds(cohort.get(('cluster', c, b))) or '–'}")
    out.append("")

out.append(END)
print(write_section(output, BEGIN, END, out))
