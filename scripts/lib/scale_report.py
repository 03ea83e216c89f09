"""The scale section of BENCHMARKS.md, from scripts/bench-scale.sh's results (one JSON per line)."""
import json
import sys

from quiet_report import busy_labels, load_note
from report_text import write_section

results, output, machine, command, date, quiet_log = sys.argv[1:7]
BEGIN, END = "<!-- scale:begin -->", "<!-- scale:end -->"

rows = [json.loads(line) for line in open(results) if line.strip()]
failed = {(r["library"], r["transport"], r["ranks"]): r["failed"] for r in rows if "failed" in r}
best = {}  # (library, transport, ranks, bytes) -> fastest row over algorithms and rounds
setup_ms = {}  # (library, transport, ranks) -> fastest setup over rounds
for r in rows:
    if "failed" in r:
        continue
    key = (r["library"], r["transport"], r["ranks"], r["bytes"])
    if key not in best or r["time_us"] < best[key]["time_us"]:
        best[key] = r
    if "setup_ms" in r:
        run = key[:3]
        setup_ms[run] = min(setup_ms.get(run, r["setup_ms"]), r["setup_ms"])
busy = {label for label in busy_labels(quiet_log)}
PEERS = [("gloo", "tcp", "Gloo"), ("openmpi", "tcp", "Open MPI tcp"),
         ("openmpi", "vader", "Open MPI vader")]
LIBS = [("cohort", "shm", "Cohort")] + PEERS
ranks = sorted({r["ranks"] for r in rows})


def cell(lib, transport, n, b, field):
    r = best.get((lib, transport, n, b))
    why = failed.get((lib, transport, n))
    if r:
        return f"{r[field] / 1e3:.2f}" + (f" (another round: {why})" if why else "")
    return f"– ({why})" if why else "–"


out = [BEGIN, "", "## Scale on one host: 8 to 512 ranks as processes", "",
       f"- Command: `{command}` (`make bench-scale`)",
       f"- Machine: {machine}, every rank a process of this host (oversubscribed alike for every "
       "library); Cohort's pairs over shared memory (`auto`), in worlds above 64 ranks connected "
       "on first use.",
       f"- Date: {date}. {load_note(quiet_log)}",
       "- Setup: the slowest rank's time from its start to a communicator that can run a "
       "collective (Cohort: store connection and `Communicator::create`; Gloo: FileStore and "
       "`connectFullMesh`; Open MPI: `MPI_Init`). Allreduce: float32 sum, the median over the "
       "timed iterations of the slowest rank's time; Gloo's best of ring and halving-doubling. "
       "The libraries take turns, round after round (BENCH_SCALE_ROUNDS), and every cell, of "
       "every library alike, is its best round.",
       "- Targets: Cohort forms and runs at every size; its 4 KiB and 1 MiB allreduce no slower "
       "than the fastest peer's wherever a peer runs; setup per rank at 512 ranks at most 1.5× "
       "that at 32.", "",
       "| ranks | " + " | ".join(f"{l[2]} setup s" for l in LIBS) + " | "
       + " | ".join(f"{l[2]} 4 KiB ms" for l in LIBS) + " | "
       + " | ".join(f"{l[2]} 1 MiB ms" for l in LIBS) + " |",
       "|---:|" + "---:|" * (3 * len(LIBS))]
for n in ranks:
    setup = []
    for l in LIBS:
        s = setup_ms.get((l[0], l[1], n))
        why = failed.get((l[0], l[1], n))
        setup.append(f"{s / 1e3:.2f}" if s is not None else (f"– ({why})" if why else "–"))
    t4 = [cell(l[0], l[1], n, 4096, "time_us") for l in LIBS]
    t1 = [cell(l[0], l[1], n, 1 << 20, "time_us") for l in LIBS]
    out.append(f"| {n} | " + " | ".join(setup + t4 + t1) + " |")

out += ["", "| ranks | size | Cohort ms | fastest peer | peer ms | Cohort / peer time | target |",
        "|---:|---:|---:|---|---:|---:|---|"]
for n in ranks:
    for b in (4096, 1 << 20):
        c = best.get(("cohort", "shm", n, b))
        peers = [(best[(p[0], p[1], n, b)], p[2]) for p in PEERS if (p[0], p[1], n, b) in best]
        size = "4 KiB" if b == 4096 else "1 MiB"
        if not c:
            out.append(f"| {n} | {size} | – (Cohort did not run) | | | | MISSED |")
            continue
        if not peers:
            out.append(f"| {n} | {size} | {c['time_us'] / 1e3:.2f} | no peer ran | – "
                       "| – | ran (no peer to compare) |")
            continue
        p, name = min(peers, key=lambda x: x[0]["time_us"])
        ratio = c["time_us"] / p["time_us"]
        noisy = any(lbl.endswith(f" {n}") for lbl in busy)
        verdict = ("met" if ratio <= 1.0 else "MISSED") + (" (busy)" if noisy else "")
        out.append(f"| {n} | {size} | {c['time_us'] / 1e3:.2f} | {name} "
                   f"| {p['time_us'] / 1e3:.2f} | {ratio:.2f} | {verdict} |")


def setup_per_rank(n):
    s = setup_ms.get(("cohort", "shm", n))
    return s / n if s is not None else None


lo, hi = setup_per_rank(32), setup_per_rank(512)
if lo and hi:
    out += ["", f"Cohort's setup per rank: {lo:.2f} ms at 32 ranks, {hi:.2f} ms at 512: "
            f"{hi / lo:.2f}× (target ≤ 1.5×: {'met' if hi / lo <= 1.5 else 'MISSED'})."]
out += ["", END]
print(write_section(output, BEGIN, END, out))
