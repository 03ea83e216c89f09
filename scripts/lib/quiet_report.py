"""The load each benchmark configuration started at (scripts/lib/quiet.sh's log), for a report.

    from quiet_report import load_note, busy_labels
"""
import os


def read(log):
    rows = []
    if log and os.path.exists(log):
        for line in open(log):
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 4:
                rows.append({"label": parts[0], "load": float(parts[1]), "waited": int(parts[2]),
                             "busy": parts[3] == "busy"})
    return rows


def busy_labels(log):
    return {r["label"] for r in read(log) if r["busy"]}


def load_note(log, limit=None):
    """One sentence: the load before each configuration, and which ones were busy."""
    rows = read(log)
    if not rows:
        return "Load before each configuration: not recorded."
    limit = limit or os.environ.get("BENCH_QUIET_LOAD", "1.0")
    busy = [r["label"] for r in rows if r["busy"]]
    text = ("Each configuration waited (up to %s s) for a 1-minute load average below %s: "
            "it started at %.2f–%.2f after waiting %d–%d s." % (
                os.environ.get("BENCH_QUIET_WAIT_S", "600"), limit,
                min(r["load"] for r in rows), max(r["load"] for r in rows),
                min(r["waited"] for r in rows), max(r["waited"] for r in rows)))
    if busy:
        text += (" **Busy (load still above it; not used for a target): %s.**" %
                 ", ".join(busy))
    else:
        text += " None ran busy."
    return text
