"""Shared by the benchmarks that start jobs and break them (recovery, coordinator loss,
rendezvous): a quiet machine before each run, a kill at a given step, a run's end, an etcd started
for a run and stopped after it, and how a spread of runs reads.

    from bench_procs import wait_quiet, kill_at_step, finish, spread, Etcd
"""
import os
import shutil
import signal
import socket
import statistics
import subprocess
import time
import urllib.request


class BenchError(SystemExit):
    """A run that could not be measured: the benchmark stops and says why."""


def wait_quiet(root, label):
    """scripts/lib/quiet.sh's wait for a quiet machine; logs LABEL to $QUIET_LOG."""
    subprocess.run(["bash", "-c", 'source "$1" && wait_quiet "$2"', "wait_quiet",
                    os.path.join(root, "scripts", "lib", "quiet.sh"), label], check=True)


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill_at_step(name, proc, completed_step, step, kill, limit_s=300):
    """Polls every 2 ms; once completed_step() >= step, calls kill(), which returns the time of
    the kill, or None when its victim is not known yet. The process group of `proc` is killed if
    anything goes wrong."""
    deadline = time.time() + limit_s
    try:
        while time.time() < deadline:
            if proc.poll() is not None:
                raise BenchError("%s: the job ended before step %d" % (name, step))
            if completed_step() >= step:
                t = kill()
                if t is not None:
                    return t
            time.sleep(0.002)
        raise BenchError("%s: step %d not reached in %d s" % (name, step, limit_s))
    except BaseException:
        kill_group(proc)
        raise


def finish(name, proc, out, limit_s=600):
    try:
        rc = proc.wait(limit_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise BenchError("%s did not finish in %d s; see %s" % (name, limit_s, out))
    if rc != 0:
        raise BenchError("%s failed (exit %d); see %s" % (name, rc, out))


def spread(values, fmt="%.2f"):
    """'median (min–max)'."""
    return (fmt + " (" + fmt + "–" + fmt + ")") % (statistics.median(values), min(values),
                                                   max(values))


def cpu_model():
    """The CPU's model name as lscpu gives it, for a report's machine line."""
    return subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True,
                          capture_output=True, text=True).stdout.strip()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    """One etcd member (Debian's etcd-server) on loopback, its data in DIR, with the v2 API on as
    well (TorchElastic's etcd-v2 rendezvous needs it; Cohort uses v3). Stopped and its data removed
    on exit."""

    def __init__(self, data_dir):
        self.dir = data_dir
        self.client, peer = free_port(), free_port()
        shutil.rmtree(data_dir, ignore_errors=True)
        os.makedirs(data_dir)
        url = "http://127.0.0.1:%d" % self.client
        purl = "http://127.0.0.1:%d" % peer
        self.log = open(data_dir + ".log", "w")
        self.proc = subprocess.Popen(
            ["etcd", "--name", "bench", "--data-dir", data_dir, "--listen-client-urls", url,
             "--advertise-client-urls", url, "--listen-peer-urls", purl,
             "--initial-advertise-peer-urls", purl, "--initial-cluster", "bench=" + purl,
             "--enable-v2=true", "--log-level", "warn"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if b'"true"' in r.read():
                        return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.close()
        raise BenchError("etcd did not become healthy; see %s.log" % data_dir)

    def endpoint(self):
        return "127.0.0.1:%d" % self.client

    def close(self):
        kill_group(self.proc)
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
