#!/usr/bin/env python3
"""What bounded staleness can gain over allreduce under `faults: [{kind: stragglers, ...}]`, at
best: every worker on a core of its own, no communication, a step of a worker not slowed taking 1
and of the straggler `factor`. Allreduce then steps at the straggler's pace (one worker is always
slowed); ssp with staleness s lets a worker start step c once it finished step c - 1 and every
worker finished step c - s - 1 (docs/job-config.md). The straggler of each window of `every`
steps is the one Cohort's fault injector picks (src/cohort/train/faults.cc: SplitMix64 of the
job's seed and the window), so the figure is for the benchmark's own sequence.

  /usr/bin/python3 bench/ssp_bound.py --workers 4 --staleness 3 --every 10 --factor 3 --steps 240
"""
import argparse

MASK = (1 << 64) - 1


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def straggler(window, seed, workers):
    return mix(mix(seed) ^ window) % workers


def ssp_time(steps, workers, staleness, every, factor, seed):
    """When the last worker finishes `steps` steps under ssp (event by event)."""
    done = [0] * workers
    free_at = [0.0] * workers
    finished = [[0.0] * (steps + 1) for _ in range(workers)]
    while min(done) < steps:
        best = None
        for w in range(workers):
            c = done[w]
            if c >= steps:
                continue
            need = c - staleness  # every worker must have finished this many steps
            if need > 0 and min(done) < need:
                continue
            gate = max(finished[o][need] for o in range(workers)) if need > 0 else 0.0
            start = max(free_at[w], gate)
            length = factor if straggler(c // every, seed, workers) == w else 1.0
            if best is None or start + length < best[0]:
                best = (start + length, w)
        end, w = best
        done[w] += 1
        free_at[w] = end
        finished[w][done[w]] = end
    return max(free_at)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--staleness", type=int, nargs="+", default=[3])
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--factor", type=float, default=3.0)
    p.add_argument("--steps", type=int, nargs="+", default=[240])
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    for s in a.staleness:
        for n in a.steps:
            t = ssp_time(n, a.workers, s, a.every, a.factor, a.seed)
            print(f"staleness {s}, {n} steps: allreduce {a.factor * n:.0f}, ssp {t:.0f}, "
                  f"at most {a.factor * n / t:.3f}x faster")


if __name__ == "__main__":
    main()
