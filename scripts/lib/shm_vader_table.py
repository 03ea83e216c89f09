"""The table of scripts/bench-shm.sh: Cohort's shared memory against Open MPI's vader at its best.

Reads the JSON lines of `cohort bench allreduce --json` and bench/mpi_allreduce; each side's best
over rounds (and, for vader, over its default and tuned algorithms) under each timing: the median
over iterations of the slowest rank's time, and nccl-tests' mean over the timed loop.
"""
import collections
import json
import sys

METHODS = (("median", "time_us"), ("mean", "mean_us"))


def main(path):
    best = collections.defaultdict(dict)
    for line in open(path):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        lib = "cohort" if r["library"] == "cohort" else "vader"
        key = (lib, r["ranks"], r["bytes"])
        for method, field in METHODS:
            if method not in best[key] or r[field] < best[key][method][0]:
                best[key][method] = (r[field], r["algorithm"])

    def busbw(n, b, t):
        return b / (t * 1e-6) / 1e9 * 2 * (n - 1) / n

    print("| ranks | size | Cohort shm busbw | vader best busbw (algorithm) "
          "| × vader (median / mean) | Cohort µs | vader µs |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for (lib, n, b) in sorted(k for k in best if k[0] == "cohort"):
        c, v = best[(lib, n, b)], best.get(("vader", n, b))
        if not v:
            continue
        size = f"{b >> 10} KiB" if b < (1 << 20) else f"{b >> 20} MiB"
        ratio = [v[m][0] / c[m][0] for m, _ in METHODS]
        print(f"| {n} | {size} | {busbw(n, b, c['median'][0]):.3f} "
              f"| {busbw(n, b, v['median'][0]):.3f} ({v['median'][1]}) "
              f"| {ratio[0]:.2f} / {ratio[1]:.2f} | {c['median'][0]:.2f} | {v['median'][0]:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
