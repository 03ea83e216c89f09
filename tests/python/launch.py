"""Runs a test script as N ranks of one torch.distributed job, each its own process.

    /usr/bin/python3 launch.py N script.py [args...]

The launcher serves the job's TCPStore (a free port) and starts the ranks with RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, as torchrun does; a rank joins with
ranks.init(backend) (ranks.py). Every rank's output is prefixed with its rank. Exits 0 only if
every rank did; a rank that fails makes the launcher stop the others at once, and the whole job
has LAUNCH_TIMEOUT_S (default 240) seconds.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist


def main():
    world = int(sys.argv[1])
    script = sys.argv[2]
    store = dist.TCPStore("127.0.0.1", 0, world, True, timedelta(seconds=60),
                          wait_for_workers=False)
    env = dict(os.environ)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), WORLD_SIZE=str(world),
               LOCAL_WORLD_SIZE=str(world), PYTHONUNBUFFERED="1")
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    procs = []
    for r in range(world):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen([sys.executable, script] + sys.argv[3:], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))

    def relay(r, p):
        for line in p.stdout:
            sys.stdout.write(f"[rank {r}] {line.decode(errors='replace')}")
            sys.stdout.flush()

    relays = [threading.Thread(target=relay, args=(r, p)) for r, p in enumerate(procs)]
    for t in relays:
        t.start()
    deadline = time.monotonic() + float(os.environ.get("LAUNCH_TIMEOUT_S", "240"))
    failed = None
    while failed is None and any(p.poll() is None for p in procs):
        for r, p in enumerate(procs):
            if p.poll() not in (None, 0):
                failed = f"rank {r} exited with {p.returncode}"
        if time.monotonic() > deadline:
            failed = "the job did not finish in time"
        time.sleep(0.05)
    if failed is None:
        failed = next((f"rank {r} exited with {p.returncode}" for r, p in enumerate(procs)
                       if p.returncode != 0), None)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
    for p in procs:
        p.wait()
    for t in relays:
        t.join()
    if failed:
        print(f"launch: {failed}", flush=True)
        sys.exit(1)
    print(f"launch: all {world} ranks passed", flush=True)


if __name__ == "__main__":
    main()
